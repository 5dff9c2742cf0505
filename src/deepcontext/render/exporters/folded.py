"""Folded stacks (flamegraph.pl, inferno, speedscope): ``frame;frame;frame value`` per line, one
line per context with a non-zero exclusive value of one metric.

Values must be integers for these tools, so seconds are written as nanoseconds. ``;`` and
control characters inside names are escaped (``\\x3b``) so that one frame stays one token.
"""

from __future__ import annotations

from ...tree.cct import CallingContextTree
from ...tree.frame import PYTHON, Frame
from . import ExportOptions
from ._common import (
    clean_name,
    display_name,
    finite_tree,
    integer_unit,
    scaled_int,
    single_metric,
    walk_paths,
)


def folded_name(frame: Frame) -> str:
    """One frame as a folded-stack token."""
    name = display_name(frame)
    if frame.kind == PYTHON and frame.file:
        name = f"{name} ({frame.file}:{frame.line})"
    return clean_name(name, forbidden=";")


class FoldedExporter:
    name = "folded"
    extensions = (".folded", ".collapsed", ".txt")
    description = "folded stacks for flamegraph.pl / inferno (one metric; seconds as ns)"

    def render(self, tree: CallingContextTree, options: ExportOptions) -> bytes:
        """The folded lines, one metric (the asked one or the profile's default)."""
        tree = finite_tree(tree)
        metric = single_metric(tree, options)
        _, scale = integer_unit(metric)
        names: dict[int, str] = {}
        lines: list[str] = []
        for node, path in walk_paths(tree, options):
            names[node.id] = folded_name(node.frame)
            value = scaled_int(node.metrics.get(metric, 0.0), scale)
            if value:
                lines.append(";".join(names[i] for i in path) + f" {value}\n")
        return "".join(lines).encode("utf-8")


EXPORTER = FoldedExporter()
