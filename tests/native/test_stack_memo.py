"""Remembered native stacks (csrc/cct/stack_paths.h): an operator whose stack was unwound before
takes the remembered frames only where its stack holds them, return address for return address.
Two call sites of one C frame, at the same depth, must stay apart."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from build_ext import call_lines

# (the frame walker's runs on other CPythons have the core only: no torch, no deepcontext package)
pytest.importorskip("torch")
load = pytest.importorskip("deepcontext.tree").load
pytestmark = [pytest.mark.torch]

PROGRAM = Path(__file__).parent / "_twin_sites.py"
CONTIGUOUS = Path(__file__).parent / "_contiguous_loop.py"
CALLS = 12


def run(tmp_path: Path, chain_ext, mode: str):
    out = tmp_path / f"twin-{mode or 'default'}.dcprof"
    proc = subprocess.run([sys.executable, str(PROGRAM), str(Path(chain_ext.__file__).parent), str(out),
                           str(CALLS)], capture_output=True, text=True, timeout=240, cwd=tmp_path,
                          env={**os.environ, "DEEPCONTEXT_UNWIND_INSIDE": mode})
    assert proc.returncode == 0, proc.stderr[-3000:]
    tree = load(out)
    tree.self_check()
    return tree, tree.metadata["native"]


def adds_by_site(tree) -> dict[int, int]:
    """aten::add's count under each source line of dcn_twin its path passes through."""
    counts: dict[int, int] = {}
    for n in tree.nodes:
        if n.frame.kind != "op" or n.frame.name != "aten::add":
            continue
        twin = [tree.nodes[i].frame for i in tree.path_ids(n.id)
                if tree.nodes[i].frame.kind == "native" and tree.nodes[i].frame.name == "dcn_twin"]
        assert len(twin) == 1, [tree.nodes[i].frame for i in tree.path_ids(n.id)]
        line = int(twin[0].get("source").rsplit(":", 1)[1])
        counts[line] = counts.get(line, 0) + int(tree.inclusive(n.id, "op.count"))
    return counts


def test_two_call_sites_of_one_frame_keep_their_own_stacks(tmp_path, core, chain_ext):
    if not core.native_info()["line_reader"]:
        pytest.skip("no DWARF line reader (libdw): the two call sites would share a line")
    lines = call_lines()
    want = {lines["twin0"]: CALLS // 2, lines["twin1"]: CALLS // 2}
    tree, native = run(tmp_path, chain_ext, "")
    assert adds_by_site(tree) == want
    # Each site's stack is learned at its first call and recalled at every later one.
    assert native["stacks_learned"] == 2
    assert native["stacks_recalled"] == CALLS - 2
    # Unwinding every stack whole (the reference) gives the same counts and remembers nothing.
    tree, native = run(tmp_path, chain_ext, "full")
    assert adds_by_site(tree) == want
    assert (native["stacks_learned"], native["stacks_recalled"]) == (0, 0)


def profile_contiguous(tmp_path: Path, calls: int):
    out = tmp_path / f"contiguous-{calls}.dcprof"
    proc = subprocess.run([sys.executable, str(CONTIGUOUS), str(out), str(calls)],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    tree = load(out)
    tree.self_check()
    ops = sum(int(tree.exclusive(n.id, "op.count")) for n in tree.nodes if n.frame.kind == "op")
    return ops, tree.metadata["native"]


def test_operators_nested_in_one_whose_call_frame_moves_unwind_once_per_stack(tmp_path):
    # aten::clone's ::call runs RecordFunction itself and calls its kernel from another line, so
    # its call frame's return address differs between its own entry and the events inside it.
    # The frames outside it do not: every event inside finds them, every stack is unwound once,
    # and a run twice as long unwinds nothing more.
    ops, short = profile_contiguous(tmp_path, 20)
    ops2, long = profile_contiguous(tmp_path, 40)
    assert ops2 == 2 * ops and ops % 20 == 0 and ops // 20 >= 3, (ops, ops2)
    assert (long["stacks_unwound"], long["stacks_learned"]) == (short["stacks_unwound"], short["stacks_learned"])
    assert long["stacks_recalled"] - short["stacks_recalled"] == ops
