"""Derived views of a tree, shared by every renderer: filtered, inverted (bottom-up), flat."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .cct import CallingContextTree
from .frame import Frame
from .usercode import is_user_frame


def inverted(tree: CallingContextTree) -> CallingContextTree:
    """Bottom-up: each hot leaf at the top with its callers beneath it. A node's inclusive value
    is the exclusive time of every context that ends with its (reversed) path."""
    inv = CallingContextTree(tree.metadata)
    for node in tree.nodes[1:]:
        if not node.metrics:
            continue
        leaf = inv.add_path(reversed(tree.path(node.id)))
        inv.add_values_of(tree, node.id, leaf)
    return inv


@dataclass
class FlatRow:
    frame: Frame
    exclusive: dict[str, float]
    inclusive: dict[str, float]


def flat(tree: CallingContextTree, metrics: list[str] | None = None) -> list[FlatRow]:
    """Totals per frame (per Python line, per operator, per kernel). Inclusive values count a
    recursive frame once per context."""
    names = metrics or tree.metric_names()
    incs = {m: tree.inclusive_all(m) for m in names}
    rows: dict[Frame, FlatRow] = {}
    for node in tree.walk():
        if node.id == 0:
            continue
        row = rows.get(node.frame)
        if row is None:
            row = rows[node.frame] = FlatRow(node.frame, {m: 0.0 for m in names},
                                             {m: 0.0 for m in names})
        for m in names:
            row.exclusive[m] += node.metrics.get(m, 0.0)
        ancestors = {tree.nodes[a].frame for a in tree.path_ids(node.parent)} if node.parent else set()
        if node.frame not in ancestors:
            for m in names:
                row.inclusive[m] += incs[m][node.id]
    return list(rows.values())


def shown_forms(frame: Frame) -> tuple[str, ...]:
    """Every way a frame is written out: its label, name and file, and the line the text report
    prints (``[thread] python``, ``[module] h.0.mlp  GPT2MLP``, ``step  train.py:12``), so a
    label that is shown is a label that filters."""
    if frame.kind == "python":
        shown = f"{frame.name}  {frame.file}:{frame.line}"
    else:
        shown = f"[{frame.kind}] {frame.name}"
        cls = frame.get("class")
        if cls and cls != frame.name:
            shown += f"  {cls}"
    return frame.label(), frame.name, frame.file, shown


def matching_nodes(tree: CallingContextTree, pattern: str) -> set[int]:
    """Ids of nodes whose frame, in any of its shown forms, matches ``pattern`` (a regular
    expression)."""
    rx = re.compile(pattern)
    return {n.id for n in tree.nodes[1:] if any(rx.search(s) for s in shown_forms(n.frame))}


def filtered(tree: CallingContextTree, include: str | None = None,
             exclude: str | None = None) -> CallingContextTree:
    """Keep only contexts through a node matching ``include``; drop subtrees at ``exclude``."""
    keep: set[int] | None = None
    if include:
        hits = matching_nodes(tree, include)
        keep = set()
        for h in hits:
            keep.update(tree.path_ids(h))
            keep.update(n.id for n in tree.walk(h))
    dropped = matching_nodes(tree, exclude) if exclude else set()
    out = CallingContextTree(tree.metadata)
    mapping = {0: 0}
    for node in tree.walk():
        if node.id == 0:
            continue
        if node.parent not in mapping or node.id in dropped or (keep is not None and node.id not in keep):
            continue
        nid = out.child(mapping[node.parent], node.frame)
        mapping[node.id] = nid
        out.add_values_of(tree, node.id, nid)
    return out


def user_frames(tree: CallingContextTree) -> CallingContextTree:
    """Library Python frames folded into their callers, so a user line sits right above the
    operators it triggers (``train.py:12 forward -> aten::linear``)."""
    out = CallingContextTree(tree.metadata)
    mapping = {0: 0}
    for node in tree.nodes[1:]:
        parent = mapping[node.parent]
        f = node.frame
        if f.kind == "python" and not is_user_frame(f):
            mapping[node.id] = parent
        else:
            mapping[node.id] = out.child(parent, f)
        out.add_values_of(tree, node.id, mapping[node.id])
    return out
