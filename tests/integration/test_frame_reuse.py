"""Operator contexts on paths whose interpreter frames reuse addresses (the walk that checks the
last path's frames by address, python_walk.h: dc_walk_python_since): every operator's whole
Python path, with its exact count, against what the program ran."""

from collections import Counter

import pytest

pytest.importorskip("torch")

from helpers import line_of, loaded, record  # noqa: E402

PROG = "frame_reuse.py"
N = 6


def paths(tree) -> Counter:
    """(Python frames of the program and its generated code as (name, line), op) -> op.count."""
    out = Counter()
    for node in tree.nodes:
        if node.frame.kind != "op":
            continue
        count = tree.exclusive(node.id, "op.count")
        if not count:
            continue
        frames, p = [], node.parent
        while p is not None and p > 0:
            f = tree.nodes[p].frame
            if f.kind == "python" and (f.file.endswith(PROG) or f.file.startswith("<generated")):
                frames.append((f.name, f.line) if f.file.endswith(PROG) else (f.file, f.line))
            p = tree.nodes[p].parent
        out[(tuple(reversed(frames)), node.frame.name)] += int(count)
    return out


def test_every_operator_keeps_its_whole_path_when_frames_reuse_addresses(tmp_path):
    proc, out = record(tmp_path, PROG, str(N))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"ran {N}\n"
    L = lambda marker: line_of(PROG, marker)  # noqa: E731
    top = (("<module>", L("MAIN")),)
    leaf = ("leaf", L("LEAF"))

    def main(marker):
        return top + (("main", L(marker)),)

    want = Counter({((("<module>", L("ONES")),), "aten::ones"): 1})
    want[(main("CALL_G1") + (("g1", L("G1")), leaf), "aten::add")] += N
    want[(main("CALL_G2") + (("g2", L("G2")), leaf), "aten::add")] += N
    want[(main("CALL_G1_AGAIN") + (("g1", L("G1")), leaf), "aten::add")] += N
    for depth in (3, 5):
        want[(main("CALL_DEEP") + (("deep", L("DEEP")),) * (depth + 1) + (leaf,), "aten::add")] += N // 2
    want[(main("CALL_GEN") + (("gen", L("GEN")),), "aten::mul")] += 2 * N
    want[(main("NEG1"), "aten::neg")] += 2 * N
    want[(main("NEG2"), "aten::neg")] += N
    for k in range(3):
        want[(main("CALL_STEP") + ((f"<generated {k}>", 2),), "aten::sub")] += N
    assert paths(loaded(out)) == want
