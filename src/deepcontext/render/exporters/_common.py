"""Helpers every exporter shares: a depth-first walk that keeps the current path, metric
selection, unit scaling and progress reporting."""

from __future__ import annotations

import math
from collections.abc import Iterator

from ...errors import DeepContextError
from ...tree.cct import CallingContextTree, Node
from ...tree.frame import Frame
from ...tree.metrics import unit_of
from . import ExportOptions

#: how many nodes between two progress callbacks
PROGRESS_STEP = 2048


def walk_paths(tree: CallingContextTree, options: ExportOptions | None = None
               ) -> Iterator[tuple[Node, list[int]]]:
    """Yield ``(node, path)`` depth-first, parents before children, for every node but the root.

    ``path`` holds the node ids from the root's child down to ``node``; it is one list reused
    for every step (copy it to keep it). Iterative, so deep recursion in the profiled program
    cannot overflow Python's stack here.
    """
    nodes = tree.nodes
    path: list[int] = []
    stack = [(c, 0) for c in reversed(nodes[0].children)]
    done = 0
    advance = options.advance if options else None
    while stack:
        nid, depth = stack.pop()
        del path[depth:]
        path.append(nid)
        node = nodes[nid]
        yield node, path
        stack.extend((c, depth + 1) for c in reversed(node.children))
        done += 1
        if advance is not None and done % PROGRESS_STEP == 0:
            advance(PROGRESS_STEP)
    if advance is not None and done % PROGRESS_STEP:
        advance(done % PROGRESS_STEP)


def chosen_metrics(tree: CallingContextTree, options: ExportOptions) -> list[str]:
    """The metrics to write: the one asked for, else every metric with a non-zero total
    (the default metric first, so single-view tools open on it)."""
    names = tree.metric_names()
    if options.metric is not None:
        if options.metric not in names:
            have = ", ".join(clean_name(n) for n in names) or "none"  # names from the file
            raise DeepContextError(
                f"metric {options.metric!r} is not in this profile (it has: {have})")
        return [options.metric]
    present = [m for m in names if tree.total(m) != 0]
    default = tree.default_metric()
    if default in present:
        present.remove(default)
        present.insert(0, default)
    return present


def single_metric(tree: CallingContextTree, options: ExportOptions) -> str:
    """The one metric for formats that hold a single value per stack."""
    if options.metric is not None:
        return chosen_metrics(tree, options)[0]
    return tree.default_metric()


#: integer scale per unit for formats that need integer values (pprof, folded stacks)
INTEGER_UNITS = {"s": ("nanoseconds", 1e9), "bytes": ("bytes", 1.0), "count": ("count", 1.0)}


INT64_MAX = 2**63 - 1


def scaled_int(value: float, scale: float) -> int:
    """``value * scale`` rounded to an integer within int64 (huge values saturate)."""
    scaled = value * scale
    if not math.isfinite(scaled):
        return INT64_MAX if scaled > 0 else (-INT64_MAX - 1 if scaled < 0 else 0)
    return max(-INT64_MAX - 1, min(INT64_MAX, round(scaled)))


def integer_unit(metric: str) -> tuple[str, float]:
    """``(unit name, scale)`` that turns a metric's stored value into an integer."""
    return INTEGER_UNITS.get(unit_of(metric), ("count", 1.0))


def clean_name(text: str, forbidden: str = "") -> str:
    """A name with control characters and ``forbidden`` characters made visible, so one frame
    stays one token in line-based formats."""
    out = []
    for ch in text:
        code = ord(ch)
        # U+2028/2029 too: line-based readers (Python's splitlines among them) break lines there
        if (code < 0x20 or 0x7F <= code < 0xA0 or 0xD800 <= code < 0xE000 or code in (0x2028, 0x2029)
                or ch in forbidden):
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


#: kinds whose names already say what they are; others get a ``[kind]`` prefix
_SELF_EXPLAINING = frozenset({"root", "python", "op", "native", "kernel"})


def display_name(frame: Frame) -> str:
    """The name a foreign tool shows for a frame (file and line travel separately)."""
    if frame.kind == "module":  # the class says it is a module: transformer.h.0.mlp (GPT2MLP)
        return inert_text(frame.label())
    if frame.kind in _SELF_EXPLAINING:
        return inert_text(frame.name)
    return inert_text(f"[{frame.kind}] {frame.name}")


def inert_text(text: str) -> str:
    """Control characters (ANSI escapes) and lone surrogates written as visible ``\\xNN`` /
    ``\\udXXX`` text: consumers print names to terminals, and strict JSON and protobuf
    readers reject lone surrogates."""
    return clean_name(text)


def finite_tree(tree: CallingContextTree) -> CallingContextTree:
    """``tree`` itself, or a copy with NaN, infinite or absurd (>1e300) values (a damaged file)
    set to zero: no output format can carry them."""
    if all(_plausible(v) for n in tree.nodes for v in n.metrics.values()):
        return tree
    out = CallingContextTree(tree.metadata)
    for node in tree.nodes:
        nid = node.id if node.id == 0 else out.child(node.parent, node.frame)
        for metric, value in node.metrics.items():
            out.add_metric(nid, metric, value if _plausible(value) else 0.0)
    return out


def _plausible(value: float) -> bool:
    # beyond 1e300 sums of a few million values could overflow to infinity
    return math.isfinite(value) and abs(value) <= 1e300


def profile_title(tree: CallingContextTree) -> str:
    """A one-line title: the profiled command, else "deepcontext"."""
    cmd = tree.metadata.get("command")
    if isinstance(cmd, list) and cmd:
        return clean_name(" ".join(map(str, cmd)))[:200]
    if isinstance(cmd, str) and cmd:
        return clean_name(cmd)[:200]
    return "deepcontext"
