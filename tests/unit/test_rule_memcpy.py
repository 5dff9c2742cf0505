"""memcpy on literal trees: pageable copies and tiny repeated copies."""

from deepcontext.analysis import analyze
from deepcontext.analysis.rules.memcpy import MemcpyRule
from deepcontext.analysis.testing import build, lib, memcpy, op, user

REST = ([user(30), op("aten::addmm")], {"op.time": 0.9, "op.count": 100})


def run(*paths):
    flat = [q for p in paths for q in (p if isinstance(p, list) else [p])]
    return analyze(build([REST, *flat]), rules=[MemcpyRule()])


def copy_path(direction, pinned, count, size, t, line=12):
    """A line run ``count`` times copying once per run (its .to() counted by the operator
    layer, the copies by the GPU capture)."""
    return [([user(line), op("aten::to")], {"op.count": count, "op.time": 1e-5 * count}),
            ([user(line), op("aten::to"), op("aten::_to_copy"), op("aten::copy_"),
              memcpy(direction, pinned)],
             {"memcpy.count": count, "memcpy.bytes": size, "memcpy.time": t})]


def test_pageable_host_to_device_copy_fires_with_pin_memory():
    (f,) = run(copy_path("HtoD", False, 10, 400 << 20, 0.1))
    assert f.location.line == 12 and f.severity == "warning"
    assert f.evidence["pinned"] == "false" and f.evidence["direction"] == "HtoD"
    assert "pin_memory=True" in f.suggestion and "non_blocking=True" in f.suggestion
    assert f.estimated_gain.seconds == 0.05


def test_pinned_large_copies_are_fine():
    assert run(copy_path("HtoD", True, 10, 400 << 20, 0.1)) == []


def test_tiny_repeated_copies_fire_and_just_below_is_quiet():
    (f,) = run(copy_path("HtoD", True, 100, 100 * 1024, 0.01))
    assert f.evidence["mean_bytes"] == 1024 and "batch" in f.suggestion
    assert run(copy_path("HtoD", True, 99, 99 * 1024, 0.01)) == []


def test_device_to_device_pageable_flag_is_ignored():
    assert run(copy_path("DtoD", False, 10, 400 << 20, 0.1)) == []


def test_direction_and_pinned_extras_are_read_too():
    from deepcontext.tree.frame import Frame
    frame = Frame.make("memcpy", "copy", direction="DtoH", pinned="false")
    (f,) = run(([user(12), op("aten::copy_")], {"op.count": 10}),
               ([user(12), op("aten::copy_"), frame],
                {"memcpy.count": 10, "memcpy.bytes": 400 << 20, "memcpy.time": 0.1}))
    assert f.evidence["direction"] == "DtoH" and "pinned buffer" in f.suggestion


def test_copy_kind_parses_the_capture_names():
    from deepcontext.analysis.rules.memcpy import copy_kind
    from deepcontext.tree.frame import Frame
    assert copy_kind(Frame.make("memcpy", "HtoD pageable", src="pageable", dst="device")) == (
        "HtoD", "false")
    assert copy_kind(Frame.make("memcpy", "DtoH pinned", src="device", dst="pinned")) == (
        "DtoH", "true")
    assert copy_kind(Frame.make("memcpy", "DtoD", src="device", dst="device")) == ("DtoD", "?")


def test_one_time_model_to_cuda_is_set_up_not_a_pinning_candidate():
    # model.to("cuda"): one run of the line, 200 parameter copies inside Module._apply
    frames = [user(12), lib("Module.to"), lib("Module._apply"), lib("Module._apply")]
    to_cuda = [(frames + [op("aten::to")], {"op.count": 200, "op.time": 0.01}),
               (frames + [op("aten::to"), op("aten::_to_copy"), op("aten::copy_"),
                          memcpy("HtoD", False)],
                {"memcpy.count": 200, "memcpy.bytes": 400 << 20, "memcpy.time": 0.1})]
    assert run(to_cuda) == []
    # the same copies from a line of the user's run 5 times (a warm-up): still set-up
    assert run(copy_path("HtoD", False, 5, 400 << 20, 0.1)) == []
