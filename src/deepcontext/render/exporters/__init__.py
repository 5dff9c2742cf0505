"""Open formats: one small exporter per format behind one protocol and a registry.

Each exporter turns a :class:`CallingContextTree` into the bytes of one file that an existing
tool opens (speedscope, pprof, hatchet, flamegraph.pl/inferno, Perfetto). The registry maps a
format name and the output file's extension to the exporter, so ``deepcontext export`` can guess
the format from ``-o``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ...errors import DeepContextError
from ...tree.cct import CallingContextTree

__all__ = ["EXPORTERS", "ExportOptions", "Exporter", "get", "guess_format", "register"]


@dataclass
class ExportOptions:
    """What the user asked for; ``metric`` None means "every metric the format can hold"."""

    metric: str | None = None
    #: called with a number of nodes just processed (drives the CLI's progress bar)
    advance: Callable[[int], None] | None = None


class Exporter(Protocol):
    """One output format."""

    name: str
    #: file name endings, most specific first (".speedscope.json" before ".json")
    extensions: tuple[str, ...]
    description: str

    def render(self, tree: CallingContextTree, options: ExportOptions) -> bytes:
        """The whole output file."""
        ...


EXPORTERS: dict[str, Exporter] = {}


def register(exporter: Exporter) -> Exporter:
    """Add an exporter to the registry (by its name)."""
    EXPORTERS[exporter.name] = exporter
    return exporter


def get(name: str) -> Exporter:
    """The exporter called ``name``; an unknown name is a one-line user error."""
    try:
        return EXPORTERS[name]
    except KeyError:
        raise DeepContextError(
            f"unknown export format {name!r} (known: {', '.join(sorted(EXPORTERS))})") from None


def guess_format(path: str) -> str:
    """The format whose extension ends ``path`` (longest match wins)."""
    lower = path.lower()
    best: tuple[int, str] | None = None
    for exporter in EXPORTERS.values():
        for ext in exporter.extensions:
            if lower.endswith(ext) and (best is None or len(ext) > best[0]):
                best = (len(ext), exporter.name)
    if best is None:
        known = ", ".join(e for x in EXPORTERS.values() for e in x.extensions)
        raise DeepContextError(
            f"cannot tell the format from {path!r}; pass --format or use one of: {known}")
    return best[1]


def _register_builtin() -> None:
    from . import chrome_trace, folded, hatchet, pprof, speedscope

    for module in (speedscope, pprof, hatchet, folded, chrome_trace):
        register(module.EXPORTER)


_register_builtin()
