"""Renderers of analyzer findings: one small class per format behind one registry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ...analysis.finding import Finding
from ...analysis.rule import Rule


@dataclass
class FindingsReport:
    """Everything a renderer may show: the findings and where they came from."""

    findings: list[Finding]
    profile: str
    rules: list[Rule]
    profiled_time: float
    wall_time: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)
    #: which metric the profiled time is, and the other candidates (reports name it)
    profiled_metric: str = ""
    profiled_times: dict[str, float] = field(default_factory=dict)


class FindingsRenderer(Protocol):
    name: str
    extension: str

    def render(self, report: FindingsReport) -> str: ...


def renderers() -> dict[str, FindingsRenderer]:
    """Format name -> renderer instance."""
    from .json_doc import JsonFindingsRenderer
    from .sarif import SarifRenderer
    from .text import TextFindingsRenderer

    return {r.name: r for r in (TextFindingsRenderer(), JsonFindingsRenderer(), SarifRenderer())}


def render(report: FindingsReport, fmt: str) -> str:
    """Render ``report`` in format ``fmt`` (text, json or sarif)."""
    return renderers()[fmt].render(report)


__all__ = ["FindingsRenderer", "FindingsReport", "render", "renderers"]
