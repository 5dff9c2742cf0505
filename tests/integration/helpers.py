"""Running the real CLI and finding nodes in real profiles."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from deepcontext.tree import CallingContextTree, load

PROGRAMS = Path(__file__).parent / "programs"


def record(tmp_path: Path, program: str, *args: str, options: tuple[str, ...] = (),
           env: dict[str, str] | None = None, stdin: str | None = None,
           timeout: float = 300) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / (Path(program).stem + ".dcprof")
    cmd = [sys.executable, "-m", "deepcontext", "record", "-o", str(out), *options, "--",
           sys.executable, str(PROGRAMS / program), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=stdin,
                          cwd=tmp_path, env={**os.environ, **(env or {})})
    return proc, out


def line_of(program: str, marker: str) -> int:
    """The 1-based line of the first line in a program carrying ``# MARKER``."""
    for i, text in enumerate((PROGRAMS / program).read_text().splitlines(), 1):
        if f"# {marker}" in text:
            return i
    raise AssertionError(f"no marker {marker} in {program}")


def python_nodes(tree: CallingContextTree, program: str, line: int) -> list[int]:
    return [n.id for n in tree.nodes
            if n.frame.kind == "python" and n.frame.file.endswith(program) and n.frame.line == line]


def subtree_ids(tree: CallingContextTree, nid: int) -> set[int]:
    return {n.id for n in tree.walk(nid)}


def children_named(tree: CallingContextTree, nid: int, kind: str, name: str) -> list[int]:
    return [c for c in tree.nodes[nid].children
            if tree.nodes[c].frame.kind == kind and tree.nodes[c].frame.name == name]


def loaded(path: Path) -> CallingContextTree:
    tree = load(path)
    tree.self_check()
    return tree
