"""Reading what Inductor generated: which kernel each line of a generated wrapper calls, and the
model source lines Inductor's provenance tracking says were fused into it.

Everything here runs at snapshot time, on files and strings Inductor already wrote, so the
program pays nothing per kernel call.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import lru_cache

from ...tree.frame import PYTHON, Frame

# ``# [Provenance debug handles] triton_poi_fused_add_0:3`` precedes each kernel call (torch >= 2.9
# with provenance tracking on); the handle tells two calls of one kernel apart.
_HANDLE = re.compile(r"^\s*# \[Provenance debug handles\] (\S+)")
# Kernel calls without a handle comment (provenance off when the wrapper was generated).
_CALL = re.compile(r"^\s*(?:(\w+)\.run\(|(cpp_fused_\w+)\(|(extern_kernels\.\w+)\()")
_STACK_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


@dataclass(frozen=True, slots=True)
class CallSite:
    """One kernel call in a generated wrapper."""

    kernel: str  # triton_poi_fused_add_0, cpp_fused_mul_0, extern_kernels.mm
    key: str  # ``kernel:handle`` when Inductor numbered the call, else the kernel name


@lru_cache(maxsize=256)
def call_sites(path: str) -> dict[int, CallSite]:
    """``line -> CallSite`` for every kernel call in the generated file at ``path``."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return {}
    sites: dict[int, CallSite] = {}
    handle: str | None = None
    for number, text in enumerate(lines, 1):
        stripped = text.strip()
        if stripped.startswith("#"):
            if m := _HANDLE.match(text):
                handle = m.group(1)
            continue
        if not stripped:
            continue
        kernel = handle.rsplit(":", 1)[0] if handle else ""
        if kernel and kernel in text:  # the call the handle names (a stream or buffer set-up
            sites[number] = CallSite(kernel, handle or kernel)  # line may come between)
            handle = None
        elif m := _CALL.match(text):
            name = next(g for g in m.groups() if g)
            sites[number] = CallSite(name, name)
            handle = None
    return sites


@lru_cache(maxsize=8192)
def stack_frames(stack: str) -> tuple[Frame, ...]:
    """Python frames (outermost first) of one FX node ``stack_trace`` string."""
    return tuple(Frame.make(PYTHON, qualname(file, int(line), name), file, int(line))
                 for file, line, name in _STACK_FRAME.findall(stack))


def qualname(file: str, line: int, name: str) -> str:
    """The qualified name of the function around ``file:line`` (``M.forward``), as the frame walk
    names a live frame; the bare ``name`` when the source cannot be read."""
    for start, end, qual in _functions(file):
        if start <= line <= end and qual.rsplit(".", 1)[-1] == name:
            return qual
    return name


@lru_cache(maxsize=256)
def _functions(file: str) -> tuple[tuple[int, int, str], ...]:
    """(first line, last line, qualified name) of every function in a file, innermost last."""
    try:
        with open(file, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return ()
    found: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qual = prefix + child.name
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                found.append((first, child.end_lineno or child.lineno, qual))
                visit(child, qual + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    # innermost first: a nested function's range lies inside its parent's
    return tuple(sorted(found, key=lambda f: f[1] - f[0]))
