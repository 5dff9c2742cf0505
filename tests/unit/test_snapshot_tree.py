"""The native tree rebuilt as a profile (capture/snapshot.py): launcher and profiler frames fold
into their callers, and time that folds all the way to the root is kept under a marker."""

import runpy
import sys

import pytest

from deepcontext.capture import inductor
from deepcontext.capture.snapshot import NO_FRAME, TreeBuilder, build_tree
from deepcontext.render.exporters._common import walk_paths

RUNPY = runpy.__file__
USER = "/home/u/train.py"


def raw(metrics):
    # the core's snapshot: nodes (parent, frame), frames, metric names, (node, metric, value),
    # each node's id in the core; nodes and frames numbered densely (the session's part only)
    nodes = [(0, 0), (0, 1), (1, 2)]
    frames = [("root", "<root>", "", 0, ""), ("python", "_run_code", RUNPY, 88, ""),
              ("python", "main", USER, 12, "")]
    return nodes, frames, ["cpu.time"], metrics, [0, 1, 2]


def test_time_in_the_launcher_alone_goes_under_a_marker_not_the_root():
    # a sample taken while only runpy's frames were on the stack (before the program's first
    # line, or after it returned): runpy folds at the root
    tree = build_tree(raw([(1, 0, 0.01), (2, 0, 0.5)]), {"command": [sys.executable]})
    assert tree.nodes[0].metrics == {}
    (marker,) = [n for n in tree.nodes if n.frame == NO_FRAME]
    assert marker.parent == 0 and marker.metrics == {"cpu.time": 0.01}
    (main,) = [n for n in tree.nodes if n.frame.name == "main"]
    assert main.parent == 0 and main.metrics == {"cpu.time": 0.5}
    # every exporter's stacks start below the root: all of the time is on one of them
    assert sum(n.metrics.get("cpu.time", 0.0) for n, _ in walk_paths(tree)) == 0.51


def test_no_marker_when_nothing_folds_to_the_root():
    tree = build_tree(raw([(2, 0, 0.5)]), {})
    assert not [n for n in tree.nodes if n.frame == NO_FRAME]


# -- a session's periodic flushes: the last tree extended (TreeBuilder) -------------------------
def grown(metrics):
    # raw() after the program reached a second function under main (node 3, frame 3)
    nodes, frames, names, _, ids = raw([])
    return (nodes + [(2, 3)], frames + [("python", "helper", USER, 20, "")],
            names + ["op.count"], metrics, ids + [3])


def paths(tree):
    """Each context's path from the root (Frames), with its metrics."""
    return {tuple(tree.path(n.id)): dict(n.metrics) for n in tree.nodes}


def test_a_flush_extends_the_last_tree_to_what_a_whole_build_gives():
    b = TreeBuilder()
    first = b.build(raw([(2, 0, 0.5)]), {"flush": 1}, fresh=False)
    (main,) = [n.id for n in first.nodes if n.frame.name == "main"]
    assert first.total("cpu.time") == 0.5  # (cached: the next build must not leave it)
    second = b.build(grown([(2, 0, 0.75), (3, 1, 4.0)]), {"flush": 2}, fresh=False)
    assert second is first  # the same tree, its nodes kept
    assert [n.frame.name for n in second.nodes if n.frame.name == "main"] == ["main"]
    assert second.nodes[main].metrics == {"cpu.time": 0.75}  # set anew, not added
    (helper,) = [n for n in second.nodes if n.frame.name == "helper"]
    assert helper.parent == main and helper.metrics == {"op.count": 4.0}
    assert second.metadata == {"flush": 2}
    assert second.total("cpu.time") == 0.75
    whole = build_tree(grown([(2, 0, 0.75), (3, 1, 4.0)]), {})
    assert paths(second) == paths(whole)


def test_a_context_that_lost_its_metrics_is_built_whole_again():
    # a schedule's warm-up rolled back: helper, seen only then, has no metric any more
    b = TreeBuilder()
    first = b.build(grown([(2, 0, 0.5), (3, 1, 4.0)]), {}, fresh=False)
    nodes, frames, names, _, ids = raw([])  # (the core leaves helper's node out)
    second = b.build((nodes, frames, names + ["op.count"], [(2, 0, 0.5)], ids), {}, fresh=False)
    assert second is not first
    assert [n.frame.name for n in second.nodes] == ["<root>", "main"]
    assert paths(second) == paths(build_tree(raw([(2, 0, 0.5)]), {}))


def test_contexts_are_known_by_their_ids_in_the_core_not_their_place_in_a_snapshot():
    # helper is the core's node 5; node 4 (other) was another session's until this one reached
    # it, and then helper's place in the snapshot moves from 3 to 4
    b = TreeBuilder()
    nodes, frames, names, _, ids = grown([])
    first = b.build((nodes, frames, names, [(2, 0, 0.5), (3, 1, 4.0)], [0, 1, 2, 5]), {},
                    fresh=False)
    (helper,) = [n.id for n in first.nodes if n.frame.name == "helper"]
    other = ("python", "other", USER, 30, "")
    nodes = [(0, 0), (0, 1), (1, 2), (2, 3), (2, 4)]  # (frames: the new one before helper's)
    second = b.build((nodes, frames[:3] + [other, frames[3]], names,
                      [(2, 0, 0.5), (3, 1, 1.0), (4, 1, 4.5)], [0, 1, 2, 4, 5]), {}, fresh=False)
    assert second is first and second.nodes[helper].frame.name == "helper"
    assert {n.frame.name: n.metrics for n in second.nodes[1:]} == {  # (runpy folds)
        "main": {"cpu.time": 0.5}, "helper": {"op.count": 4.5}, "other": {"op.count": 1.0}}


def test_the_marker_goes_with_the_time_at_the_root():
    # (runpy's node 1 folds onto the root: its time is the marker's)
    b = TreeBuilder()
    first = b.build(raw([(1, 0, 0.01), (2, 0, 0.5)]), {}, fresh=False)
    (marker,) = [n for n in first.nodes if n.frame == NO_FRAME]
    again = b.build(raw([(1, 0, 0.02), (2, 0, 0.5)]), {}, fresh=False)
    assert again is first and marker.metrics == {"cpu.time": 0.02} and not again.root.metrics
    second = b.build(raw([(2, 0, 0.5)]), {}, fresh=False)  # the root's time rolled back
    assert second is not first and not [n for n in second.nodes if n.frame == NO_FRAME]
    third = b.build(raw([(2, 0, 0.5)]), {}, fresh=False)
    assert third is second


def test_fresh_builds_a_new_tree():
    b = TreeBuilder()
    first = b.build(raw([(2, 0, 0.5)]), {}, fresh=False)
    assert b.build(raw([(2, 0, 0.5)]), {}, fresh=True) is not first


def test_the_cores_own_frameless_node_is_extended_like_any_other():
    # a thread with no Python frame: the core's node "<no Python frame>" under the root, the
    # same frame as the marker, a context of its own whether or not time folds onto the root
    nodes, frames, names, _, ids = raw([])
    frameless = (nodes + [(0, 3)], frames + [(NO_FRAME.kind, NO_FRAME.name, "", 0, "")], names)
    b = TreeBuilder()
    first = b.build((*frameless, [(3, 0, 0.25)], ids + [3]), {}, fresh=False)
    second = b.build((*frameless, [(3, 0, 0.5)], ids + [3]), {}, fresh=False)
    assert second is first
    (marker,) = [n for n in second.nodes if n.frame == NO_FRAME]
    assert marker.metrics == {"cpu.time": 0.5}


# -- after torch.compile ran in the process -----------------------------------------------------
WRAPPER = "/tmp/torchinductor_u/ab/cabcdefgh.py"  # (Inductor's path for a generated wrapper)
DYNAMO = "/site-packages/torch/_dynamo/convert_frame.py"


@pytest.fixture
def compiled_earlier(monkeypatch):
    """Inductor's state as an earlier session of the process leaves it: its wrapper was seen
    (its code may run again), and this session compiled nothing."""
    state = inductor.snapshot_state()
    monkeypatch.setattr(state, "wrappers", {WRAPPER: {}})
    monkeypatch.setattr(state, "compiles", [])
    monkeypatch.setattr(state, "open", [])
    assert inductor.active()


def with_helper_in(file, name="helper"):
    nodes, frames, names, _, ids = grown([])
    frames = frames[:3] + [("python", name, file, 20, "")]
    return nodes, frames, names, [(2, 0, 0.5), (3, 1, 4.0)], ids


def test_an_eager_session_after_a_compiled_one_extends_its_tree(compiled_earlier):
    b = TreeBuilder()
    first = b.build(raw([(2, 0, 0.5)]), {}, fresh=False)
    second = b.build(grown([(2, 0, 0.75), (3, 1, 4.0)]), {}, fresh=False)
    assert second is first and "torch_compile" not in second.metadata
    assert paths(second) == paths(build_tree(grown([(2, 0, 0.75), (3, 1, 4.0)]), {}))


@pytest.mark.parametrize("file, name", [(WRAPPER, "call"), (DYNAMO, "_compile")])
def test_a_session_that_runs_compiled_code_or_compiles_is_placed(compiled_earlier, file, name):
    # a frame of the earlier session's wrapper (its code ran again), or where Dynamo compiles
    b = TreeBuilder()
    first = b.build(with_helper_in(file, name), {}, fresh=False)
    assert first.metadata["torch_compile"]["compiles"] == []
    (node,) = [n for n in first.nodes if n.frame.file == file]
    if file == WRAPPER:
        assert node.frame.extra == (("generated", "inductor"),)
    else:  # under the compilation's markers
        assert [f.name for f in first.path(node.id)][-3:] == ["compile", "compile: dynamo", name]


def test_a_placed_tree_is_extended_to_what_a_whole_placement_gives(compiled_earlier):
    b = TreeBuilder()
    nodes, frames, names, metrics, ids = with_helper_in(WRAPPER, "call")
    first = b.build((nodes, frames, names, metrics, ids), {"flush": 1}, fresh=False)
    (call,) = [n.id for n in first.nodes if n.frame.file == WRAPPER]
    # the next flush: more time in the call, and a new context below it (an operator)
    grown = (nodes + [(3, 4)], frames + [("op", "aten::mm", "", 0, "")], names,
             [(2, 0, 0.75), (3, 1, 4.0), (4, 1, 6.0)], ids + [7])
    second = b.build(grown, {"flush": 2}, fresh=False)
    assert second is first and second.nodes[call].frame.file == WRAPPER
    assert second.metadata["flush"] == 2 and second.metadata["torch_compile"]["kernel_calls"] == 0
    assert paths(second) == paths(b.build(grown, {}, fresh=True))
    # a context placed before is gone from the snapshot (a warm-up rolled back): placed anew
    assert b.build((nodes[:3], frames[:3], names, [(2, 0, 0.5)], ids[:3]), {},
                   fresh=False) is not second


def test_a_frame_of_torch_compile_where_no_compilation_starts_needs_no_placement(compiled_earlier):
    # Dynamo's frame callback runs for every new frame under a compiled region and mostly skips
    b = TreeBuilder()
    first = b.build(with_helper_in(DYNAMO, "__call__"), {}, fresh=False)
    assert b.build(with_helper_in(DYNAMO, "__call__"), {}, fresh=False) is first
    assert "torch_compile" not in first.metadata
