"""From XLA's provenance to tree frames: a JAX operator's name stack split into the jitted
function, the transformations and the user's scopes, and the frames one executed thunk or kernel
is charged through.

A name stack reads ``jit(step)/transpose(jvp(attn))/dot_general``: components at the top level
are separated by ``/``; ``T(inner)`` is a transformation (``transpose`` marks the backward pass);
bare names (``jax.named_scope``, ``jax.named_call``) are scopes.
"""

from __future__ import annotations

import re

from ...tree.frame import Frame
from .hlo import JaxOp, SourceFrame

_WRAPPED = re.compile(r"^([A-Za-z_][\w.]*)\((.*)\)$", re.S)
_JIT = ("jit", "pjit")


def split_top(name: str) -> list[str]:
    """``a(b/c)/d`` -> ``["a(b/c)", "d"]``: split at ``/`` outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(name):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif ch == "/" and depth == 0:
            parts.append(name[start:i])
            start = i + 1
    parts.append(name[start:])
    return parts


def parse_op_name(op_name: str) -> tuple[str, bool, list[str], str]:
    """``(jitted function, in backward, scopes outermost first, primitive)``."""
    comps = split_top(op_name)
    jit_name, backward, scopes = "", False, []

    def walk(comp: str) -> None:
        nonlocal backward
        m = _WRAPPED.match(comp)
        if m is None:
            if comp:
                scopes.append(comp)
            return
        kind, inner = m.groups()
        if kind == "transpose":
            backward = True
        if kind in _JIT:
            scopes.append(comp)  # a nested jitted function, inlined into this one
            return
        for part in split_top(inner):
            walk(part)

    for i, comp in enumerate(comps[:-1]):
        m = _WRAPPED.match(comp)
        if i == 0 and m is not None and m.group(1) in _JIT:
            jit_name = m.group(2)
            continue
        walk(comp)
    return jit_name, backward, scopes, comps[-1]


def jit_label(module_name: str, op_name: str = "") -> str:
    """The executable's operator frame name, ``jit(step)``."""
    if op_name:
        first = split_top(op_name)[0]
        m = _WRAPPED.match(first)
        if m is not None and m.group(1) in _JIT:
            return f"jit({m.group(2)})"
    name = module_name.removeprefix("jit_") if module_name.startswith("jit_") else module_name
    return f"jit({name})"


def body_start(stack: tuple[SourceFrame, ...], function: str) -> int:
    """Index of the jitted function's own frame in a traced stack (frames before it are where
    it was traced from); -1 when it is not there (jax's own jitted functions, such as the
    ``jit(multiply)`` an eager ``x * 2`` runs, have no frame of their own)."""
    if function:
        for i, (_, _, func) in enumerate(stack):
            if func == function or func.endswith("." + function):
                return i
    return -1


def python_frames(stack: tuple[SourceFrame, ...]) -> list[Frame]:
    return [Frame.make("python", func or "<unknown>", file, line) for file, line, func in stack]


def op_frames(op: JaxOp, linked: bool, eager: bool = False) -> tuple[list[Frame], list[Frame]]:
    """``(frames above the executable frame, frames below it down to the operator)`` for one
    operator. A linked run (its Python call site was seen) keeps only the frames inside the
    jitted function; an unlinked one is placed at the stack it was traced from. An eager
    primitive's stack is all caller: it has no body of its own."""
    jit_name, backward, scopes, primitive = parse_op_name(op.op_name)
    start = len(op.stack) if eager else body_start(op.stack, jit_name)
    if start < 0:  # no body frame: the stack is all caller (unlinked) or all body (linked)
        start = len(op.stack) if not linked else 0
    outer = [] if linked else python_frames(op.stack[:start])
    below = python_frames(op.stack[start:])
    if backward:
        below.append(Frame.make("marker", "backward"))
    below.extend(Frame.make("marker", s) for s in scopes)
    below.append(Frame.make("op", op.op_name, primitive=primitive))
    return outer, below
