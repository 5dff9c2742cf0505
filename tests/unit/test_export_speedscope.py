"""speedscope export: valid against the file-format spec, totals equal the profile's."""

from __future__ import annotations

import json

import jsonschema
import pytest
from _export_trees import HOSTILE, deep_tree, hostile_tree, training_tree

from deepcontext.errors import DeepContextError
from deepcontext.render.exporters import ExportOptions, get
from deepcontext.render.exporters._common import inert_text

# JSON schema written from speedscope's published spec (src/lib/file-format-spec.ts,
# https://www.speedscope.app/file-format-schema.json): required fields and enums as declared.
SPEC = {
    "type": "object",
    "required": ["$schema", "version", "shared", "profiles"],
    "properties": {
        "$schema": {"const": "https://www.speedscope.app/file-format-schema.json"},
        "version": {"type": "string"},
        "name": {"type": "string"},
        "activeProfileIndex": {"type": "number"},
        "shared": {
            "type": "object", "required": ["frames"],
            "properties": {"frames": {"type": "array", "items": {
                "type": "object", "required": ["name"],
                "properties": {"name": {"type": "string"}, "file": {"type": "string"},
                               "line": {"type": "number"}, "col": {"type": "number"}}}}},
        },
        "profiles": {"type": "array", "items": {
            "type": "object",
            "required": ["type", "name", "unit", "startValue", "endValue", "samples", "weights"],
            "properties": {
                "type": {"const": "sampled"},
                "name": {"type": "string"},
                "unit": {"enum": ["none", "nanoseconds", "microseconds", "milliseconds",
                                  "seconds", "bytes"]},
                "startValue": {"type": "number"},
                "endValue": {"type": "number"},
                "samples": {"type": "array",
                            "items": {"type": "array", "items": {"type": "integer", "minimum": 0}}},
                "weights": {"type": "array", "items": {"type": "number"}},
            }}},
    },
}


def export(tree, **kw) -> dict:
    return json.loads(get("speedscope").render(tree, ExportOptions(**kw)))


def check(doc: dict) -> None:
    jsonschema.validate(doc, SPEC)
    n_frames = len(doc["shared"]["frames"])
    for prof in doc["profiles"]:
        assert len(prof["samples"]) == len(prof["weights"])
        assert prof["startValue"] <= prof["endValue"]
        assert all(0 <= i < n_frames for stack in prof["samples"] for i in stack)


def test_one_profile_per_metric_with_the_profiles_totals():
    tree = training_tree()
    doc = export(tree)
    check(doc)
    names = [p["name"].split(" - ")[0] for p in doc["profiles"]]
    assert names[0] == "gpu.time"  # the default metric opens first
    assert sorted(names) == sorted(tree.metric_names())
    for prof in doc["profiles"]:
        metric = prof["name"].split(" - ")[0]
        assert sum(prof["weights"]) == tree.total(metric)
        assert prof["endValue"] == tree.total(metric)
    units = {p["name"].split(" - ")[0]: p["unit"] for p in doc["profiles"]}
    assert units == {"gpu.time": "seconds", "cpu.time": "seconds", "gpu.launches": "none",
                     "memcpy.bytes": "bytes"}


def test_stacks_are_the_calling_contexts():
    doc = export(training_tree(), metric="gpu.launches")
    frames = doc["shared"]["frames"]
    (prof,) = doc["profiles"]
    assert prof["weights"] == [3]
    assert [frames[i]["name"] for i in prof["samples"][0]] == [
        "[thread] MainThread", "<module>", "train_step", "aten::mm", "ampere_sgemm_128x64<float>"]
    assert frames[prof["samples"][0][2]] == {"name": "train_step", "file": "/w/train.py", "line": 12}


def test_unknown_metric_is_a_user_error():
    with pytest.raises(DeepContextError, match="not in this profile"):
        export(training_tree(), metric="nope")


def test_hostile_names_survive_as_data():
    doc = export(hostile_tree())
    check(doc)
    names = [f["name"] for f in doc["shared"]["frames"]]
    assert names[0] == inert_text(HOSTILE)
    assert "\\ud800" in names[0]  # visible text, not a lone surrogate
    raw = get("speedscope").render(hostile_tree(), ExportOptions())
    assert raw.isascii() and b"<" in raw  # JSON escapes only what JSON must; consumers own HTML


def test_deep_tree_exports_without_recursion():
    doc = export(deep_tree())
    check(doc)
    assert len(doc["profiles"][0]["samples"][0]) == 3000
