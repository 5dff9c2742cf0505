"""pprof export: decoded by the official protobuf runtime against profile.proto's schema."""

from __future__ import annotations

import gzip

import pytest
from _export_trees import HOSTILE, deep_tree, hostile_tree, training_tree

from deepcontext.render.exporters import ExportOptions, get
from deepcontext.render.exporters._common import inert_text
from deepcontext.render.exporters._protowire import varint

pytest.importorskip("google.protobuf")
from _pprof_schema import profile_class

Profile = profile_class()


def decode(tree, **kw):
    data = get("pprof").render(tree, ExportOptions(**kw))
    assert data[:2] == b"\x1f\x8b"  # gzipped, as pprof requires on disk
    prof = Profile()
    prof.ParseFromString(gzip.decompress(data))
    return prof


def stacks(prof) -> dict[tuple[str, ...], list[int]]:
    """Root-first function names of every sample -> its values."""
    s = prof.string_table
    funcs = {f.id: s[f.name] for f in prof.function}
    locs = {loc.id: funcs[loc.line[0].function_id] for loc in prof.location}
    return {tuple(locs[i] for i in reversed(sample.location_id)): list(sample.value)
            for sample in prof.sample}


def test_sample_types_and_totals_match_the_profile():
    tree = training_tree()
    prof = decode(tree)
    s = prof.string_table
    assert s[0] == ""
    types = [(s[t.type], s[t.unit]) for t in prof.sample_type]
    assert types == [("gpu.time", "nanoseconds"), ("cpu.time", "nanoseconds"),
                     ("gpu.launches", "count"), ("memcpy.bytes", "bytes")]
    assert s[prof.default_sample_type] == "gpu.time"
    scale = {"nanoseconds": 1e9, "count": 1, "bytes": 1}
    for i, (metric, unit) in enumerate(types):
        assert sum(sample.value[i] for sample in prof.sample) == round(tree.total(metric) * scale[unit])
    assert prof.time_nanos == 100 * 10**9 and prof.duration_nanos == 12.5 * 10**9


def test_locations_carry_the_call_path_leaf_first():
    prof = decode(training_tree(), metric="gpu.launches")
    assert stacks(prof) == {("[thread] MainThread", "<module>", "train_step", "aten::mm",
                             "ampere_sgemm_128x64<float>"): [3]}
    lines = {prof.string_table[f.name]: [] for f in prof.function}
    for loc in prof.location:
        for line in loc.line:
            name = prof.string_table[next(f.name for f in prof.function if f.id == line.function_id)]
            lines[name].append(line.line)
    assert lines["train_step"] == [12] and lines["<module>"] == [30]
    files = {prof.string_table[f.name]: prof.string_table[f.filename] for f in prof.function}
    assert files["train_step"] == "/w/train.py"


def test_ids_are_unique_and_referenced():
    prof = decode(training_tree())
    loc_ids = [loc.id for loc in prof.location]
    assert len(set(loc_ids)) == len(loc_ids) and 0 not in loc_ids
    assert {i for sample in prof.sample for i in sample.location_id} <= set(loc_ids)
    assert all(len(sample.value) == len(prof.sample_type) for sample in prof.sample)


def test_hostile_and_deep_trees():
    prof = decode(hostile_tree())
    assert inert_text(HOSTILE) in set(prof.string_table)
    assert not any("\x1b" in s for s in prof.string_table)  # no live ANSI escapes
    prof = decode(deep_tree())
    assert len(prof.sample) == 1 and len(prof.sample[0].location_id) == 3000


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**63 - 1, -1])
def test_varint_matches_protobuf(value):
    from google.protobuf.internal import encoder

    out = []
    encoder._VarintEncoder()(out.append, value & (2**64 - 1), True)
    assert varint(value) == b"".join(out)
