"""A finding: one concrete, evidenced suggestion about one calling context of the profile."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Severities, least to most serious; ``--min-severity`` filters on this order.
SEVERITIES = ("note", "warning", "error")

#: Categories a rule may use (docs/analyzer.md explains each).
CATEGORIES = ("hotspot", "kernel_fusion", "gpu_stall", "cpu_latency", "sync", "memcpy", "layout",
              "serialization", "precision", "optimizer", "dataloader", "imbalance", "compile",
              "memory")


def severity_rank(severity: str) -> int:
    """0 for note, 1 for warning, 2 for error."""
    return SEVERITIES.index(severity)


@dataclass(frozen=True, slots=True)
class Location:
    """The user's own source line a finding is about."""

    file: str
    line: int
    function: str

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "function": self.function}


@dataclass(frozen=True, slots=True)
class EstimatedGain:
    """What the fix would save: seconds, that as a fraction of the profiled time, and how."""

    seconds: float
    fraction: float
    method: str

    def to_dict(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "fraction": self.fraction, "method": self.method}


@dataclass(slots=True)
class Finding:
    """One result of one rule. ``node`` is the tree node id (shared with the viewer)."""

    rule: str
    category: str
    severity: str
    title: str
    message: str
    node: int
    location: Location | None
    path: list[str]
    evidence: dict[str, float | int | str]
    suggestion: str
    estimated_gain: EstimatedGain
    #: other nodes whose findings were merged into this one (same rule, same user line)
    merged_nodes: list[int] = field(default_factory=list)
    #: where the cause lives when it is library code the user's line calls (a library function
    #: issuing a chain of operators), else None
    origin: Location | None = None

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, not {self.severity!r}")
        if "\n" in self.title:
            raise ValueError("a finding's title is one line")

    def to_dict(self) -> dict[str, Any]:
        """The documented JSON form (docs/analyzer.md, schema ``deepcontext.findings/1``)."""
        return {
            "rule": self.rule,
            "category": self.category,
            "severity": self.severity,
            "title": self.title,
            "message": self.message,
            "node": self.node,
            "location": self.location.to_dict() if self.location else None,
            "path": list(self.path),
            "evidence": dict(self.evidence),
            "suggestion": self.suggestion,
            "estimated_gain": self.estimated_gain.to_dict(),
            "origin": self.origin.to_dict() if self.origin else None,
        }
