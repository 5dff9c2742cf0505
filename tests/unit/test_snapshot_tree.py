"""The native tree rebuilt as a profile (capture/snapshot.py): launcher and profiler frames fold
into their callers, and time that folds all the way to the root is kept under a marker."""

import runpy
import sys

from deepcontext.capture.snapshot import NO_FRAME, build_tree
from deepcontext.render.exporters._common import walk_paths

RUNPY = runpy.__file__
USER = "/home/u/train.py"


def raw(metrics):
    # the core's snapshot: nodes (parent, frame id), frames, metric names, (node, metric, value)
    nodes = [(0, 0), (0, 1), (1, 2)]
    frames = [("root", "<root>", "", 0, ""), ("python", "_run_code", RUNPY, 88, ""),
              ("python", "main", USER, 12, "")]
    return nodes, frames, ["cpu.time"], metrics


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
