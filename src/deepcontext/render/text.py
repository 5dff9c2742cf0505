"""Terminal report: the top-down (or inverted) tree, or flat totals, drawn with rich."""

from __future__ import annotations

import os
import shlex
import sys
from typing import IO

from rich.console import Console
from rich.table import Table
from rich.text import Text
from rich.tree import Tree as RichTree

from ..tree.cct import CallingContextTree
from ..tree.frame import KERNEL, MEMCPY, MEMSET, MODULE, NATIVE, OP, PYTHON, SYNC, Frame
from ..tree.metrics import format_value, unit_of
from ..tree.views import FlatRow
from ._names import short_symbol
from ._paths import shown_path
from ._safe import printable

KIND_STYLE = {
    PYTHON: ("", "green"),
    MODULE: ("module ", "bold blue"),
    OP: ("op ", "cyan"),
    NATIVE: ("native ", "magenta"),
    KERNEL: ("kernel ", "bold yellow"),
    MEMCPY: ("memcpy ", "bold blue"),
    MEMSET: ("memset ", "blue"),
    SYNC: ("sync ", "bold red"),
}


#: Width of text sent to a pipe or file: lines are never wrapped (grep and editors see whole
#: paths); a terminal uses its own width.
PIPE_WIDTH = 4096


def console(file: IO[str] | None = None) -> Console:
    """A console at the terminal's real width, or unwrapped when output is piped ($COLUMNS
    wins in both cases)."""
    out = file or sys.stdout
    width = None
    if not os.environ.get("COLUMNS", "").isdigit() and not (hasattr(out, "isatty") and out.isatty()):
        width = PIPE_WIDTH
    return Console(file=out, width=width, highlight=False, soft_wrap=False)


def frame_text(frame: Frame) -> Text:
    tag, style = KIND_STYLE.get(frame.kind, (f"{frame.kind} ", "dim"))
    t = Text()
    if tag:
        t.append(f"[{tag.strip()}] ", style="dim " + style)
    if frame.kind == PYTHON:
        t.append(printable(frame.name), style="bold " + style)
        t.append(f"  {printable(shown_path(frame.file))}:{frame.line}", style="dim")
    elif frame.kind == MODULE:
        t.append(printable(frame.name), style=style)
        cls = frame.get("class")
        if cls and cls != frame.name:
            t.append(f"  {printable(cls)}", style="dim")
    elif frame.kind == NATIVE:
        t.append(printable(short_symbol(frame.name)), style=style)
        if frame.file:
            t.append(f"  {printable(frame.file.rsplit('/', 1)[-1])}", style="dim")
    else:
        t.append(printable(frame.name), style=style)
    return t


def render_tree(console: Console, tree: CallingContextTree, metric: str, *, depth: int | None,
                threshold: float, title: str) -> None:
    inc = tree.inclusive_all(metric)
    total = inc[0]
    unit = unit_of(metric)
    limit = threshold * total
    # a merged job (two or more ranks): each line also shows every rank's own value
    ranks = tree.ranks() if len(tree.ranks()) > 1 else []
    by_rank = {r: tree.rank_inclusive_all(metric, r) for r in ranks}
    heading = f"{title}  total {metric} = {format_value(total, unit)}"
    if ranks:
        heading += f"  ({rank_values([(r, by_rank[r][0]) for r in ranks], unit)})"
    root = RichTree(Text(heading, style="bold"))
    shown = 0

    def label(nid: int) -> Text:
        node = tree.nodes[nid]
        share = inc[nid] / total * 100 if total else 0.0
        t = Text(f"{share:5.1f}% {format_value(inc[nid], unit):>9} ", style="bold")
        excl = node.metrics.get(metric, 0.0)
        if excl and node.children:
            t.append(f"(self {format_value(excl, unit)}) ", style="dim")
        t.append_text(frame_text(node.frame))
        if ranks:
            t.append(f"  {rank_values([(r, by_rank[r][nid]) for r in ranks], unit)}", style="dim")
        return t

    stack = [(root, nid, 1) for nid in _sorted_children(tree, 0, inc)][::-1]
    while stack:
        parent, nid, d = stack.pop()
        if inc[nid] <= limit or inc[nid] == 0:
            continue
        branch = parent.add(label(nid))
        shown += 1
        if depth is not None and d >= depth:
            continue
        stack.extend((branch, c, d + 1) for c in reversed(_sorted_children(tree, nid, inc)))
    if shown == 0:
        root.add(Text("(nothing above the threshold)", style="dim"))
    console.print(root)


#: Up to this many ranks a line lists each one's value; beyond, their spread.
MAX_LISTED_RANKS = 8


def rank_values(values: list[tuple[int, float]], unit: str) -> str:
    """``r0 1.2s | r1 2.0s``, or for many ranks ``min 1.2s (r3) · max 2.0s (r1)``."""
    if len(values) <= MAX_LISTED_RANKS:
        return " | ".join(f"r{r} {format_value(v, unit)}" for r, v in values)
    lo, hi = min(values, key=lambda rv: rv[1]), max(values, key=lambda rv: rv[1])
    return (f"{len(values)} ranks: min {format_value(lo[1], unit)} (r{lo[0]}) · "
            f"max {format_value(hi[1], unit)} (r{hi[0]})")


def _sorted_children(tree: CallingContextTree, nid: int, inc: list[float]) -> list[int]:
    return sorted(tree.nodes[nid].children, key=lambda c: -inc[c])


def render_flat(console: Console, rows: list[FlatRow], metric: str, total: float, *,
                threshold: float, limit: int = 50) -> None:
    unit = unit_of(metric)
    table = Table(title=f"flat totals by {metric}", show_lines=False)
    table.add_column("self", justify="right")
    table.add_column("self %", justify="right")
    table.add_column("total", justify="right")
    table.add_column("frame")
    rows = sorted(rows, key=lambda r: (-r.exclusive.get(metric, 0), -r.inclusive.get(metric, 0)))
    for r in rows[:limit]:
        ex, inc = r.exclusive.get(metric, 0.0), r.inclusive.get(metric, 0.0)
        if inc <= threshold * total or inc == 0:
            continue
        table.add_row(format_value(ex, unit), f"{ex / total * 100:.1f}%" if total else "-",
                      format_value(inc, unit), frame_text(r.frame))
    console.print(table)


def render_header(console: Console, tree: CallingContextTree) -> None:
    meta = tree.metadata
    cmd = meta.get("command")
    line = Text()
    if isinstance(cmd, list):
        line.append("command: ", style="dim").append(printable(shlex.join(map(str, cmd)), 2000))
    if meta.get("complete") is False:
        line.append("  (incomplete: the program ended before the final flush)", style="yellow")
    if line:
        console.print(line)
    entries = meta.get("ranks") if isinstance(meta.get("ranks"), list) else []
    ranks = [e["rank"] for e in entries if isinstance(e, dict) and type(e.get("rank")) is int]
    if isinstance(meta.get("rank"), int) and not isinstance(meta.get("rank"), bool):
        console.print(Text(f"rank: {meta['rank']}", style="dim"))
    elif ranks:  # a merged multi-rank job: say how to see one rank
        console.print(Text(f"ranks: {len(ranks)} ({', '.join(map(str, ranks))}); values are "
                           "their sum, each rank's own after the line (rN), one rank alone: "
                           "--rank N", style="dim"))
    for note in meta.get("notes") or []:
        console.print(Text(f"note: {printable(str(note))}", style="yellow"))
