"""What every rule needs to know about a profile, computed once: the user's line of each node,
inclusive metrics, the operators each line issues, the profiled time and finding construction."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..tree.cct import CallingContextTree
from ..tree.frame import MARKER, OP, PYTHON
from .finding import EstimatedGain, Finding, Location
from ..tree.usercode import is_user_frame

_IMPORT_FILES = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")


@dataclass(frozen=True, slots=True)
class OpSite:
    """One operator node the user's code called directly (not an op nested in another op)."""

    node: int
    name: str
    owner: int  # the deepest user Python frame above it, -1 if none
    backward: bool  # reached through the ``backward`` marker (autograd ran it for this line)


class AnalysisContext:
    """A read-only, precomputed view of one tree for the rules."""

    def __init__(self, tree: CallingContextTree) -> None:
        self.tree = tree
        self.metadata: dict[str, Any] = tree.metadata
        n = len(tree.nodes)
        self.owner = [-1] * n
        self.in_backward = [False] * n
        self.in_import = [False] * n
        self.in_compile = [False] * n
        for node in tree.nodes[1:]:  # parents come before children in the arena
            p, f = node.parent, node.frame
            self.owner[node.id] = self.owner[p]
            self.in_backward[node.id] = self.in_backward[p] or (f.kind == MARKER
                                                                 and f.name == "backward")
            self.in_import[node.id] = self.in_import[p] or f.file in _IMPORT_FILES
            self.in_compile[node.id] = self.in_compile[p] or (f.kind == MARKER
                                                               and f.name == "compile")
            if f.kind == PYTHON and is_user_frame(f):  # generated code is no one's line (issue 15)
                self.owner[node.id] = node.id

    # -- metrics ---------------------------------------------------------------------------
    def inc(self, metric: str) -> list[float]:
        """Inclusive values of ``metric`` per node."""
        return self.tree.inclusive_all(metric)

    def host_time(self, node: int) -> float:
        """Host seconds spent in a context: sampled CPU time or measured operator wall time,
        whichever is larger (sampling misses short contexts; op time misses Python time), less
        the one-time CUDA set-up (context creation, module loading) that ran inside it."""
        # torch.compile (issue 15): compilation's sampled CPU time is compile.host, its wall
        # time (inside an operator when the backward compiles lazily) compile.time
        return max(0.0, max(self.inc("cpu.time")[node] - self.inc("compile.host")[node],
                            self.inc("op.time")[node] - self.inc("compile.time")[node])
                   - self.inc("gpu.init")[node])

    @cached_property
    def has_gpu(self) -> bool:
        return self.tree.total("gpu.time") > 0 or self.tree.total("gpu.launches") > 0

    @cached_property
    def profiled_time(self) -> float:
        """The time findings are a fraction of: host time outside interpreter start-up and
        imports (sampled CPU time or operator wall time, whichever is larger), or the GPU time
        when that is larger. Imports are excluded so a short profile reads like a long one."""
        tree = self.tree
        host = 0.0
        for metric in ("cpu.time", "op.time"):
            outside = sum(n.metrics.get(metric, 0.0) for n in tree.nodes if not self.in_import[n.id])
            host = max(host, outside)
        return max(host, tree.total("gpu.time"), tree.total("sync.wait"))

    @cached_property
    def wall_time(self) -> float:
        """The run's wall time from the metadata (0 when unknown)."""
        start, end = self.metadata.get("start_time"), self.metadata.get("end_time")
        if isinstance(start, (int, float)) and isinstance(end, (int, float)) and end > start:
            return float(end - start)
        return 0.0

    def fraction(self, seconds: float) -> float:
        """``seconds`` as a fraction of the profiled time, clamped to [0, 1]."""
        if not 0 < self.profiled_time < math.inf:
            return 0.0
        return max(0.0, min(1.0, seconds / self.profiled_time))

    # -- structure -------------------------------------------------------------------------
    @cached_property
    def op_sites(self) -> list[OpSite]:
        """Every operator node whose parent is not an operator, i.e. what a line dispatched."""
        sites = []
        nodes = self.tree.nodes
        for node in nodes[1:]:
            if node.frame.kind == OP and nodes[node.parent].frame.kind != OP and (
                    not self.in_compile[node.id]):  # tracing ops of torch.compile (issue 15)
                sites.append(OpSite(node.id, node.frame.name, self.owner[node.id],
                                    self.in_backward[node.id]))
        return sites

    @cached_property
    def sites_by_owner(self) -> dict[int, list[OpSite]]:
        by: dict[int, list[OpSite]] = defaultdict(list)
        for site in self.op_sites:
            by[site.owner].append(site)
        return dict(by)

    def forward_sites(self, owner: int) -> list[OpSite]:
        return [s for s in self.sites_by_owner.get(owner, ()) if not s.backward]

    def count(self, node: int) -> float:
        """Calls of the op at ``node`` (exclusive op.count: the node's own calls)."""
        return self.tree.exclusive(node, "op.count")

    def user_nodes(self) -> list[int]:
        """Nodes that are the deepest user frame of something (the user's lines)."""
        return sorted({o for o in self.owner if o > 0})

    def descendants(self, node: int) -> list[int]:
        return [n.id for n in self.tree.walk(node)]

    def ancestors(self, node: int) -> list[int]:
        return self.tree.path_ids(node)

    # -- findings --------------------------------------------------------------------------
    def location(self, node: int) -> Location | None:
        """The deepest user frame at or above ``node``."""
        owner = self.owner[node] if node >= 0 else -1
        if owner <= 0:
            return None
        f = self.tree.nodes[owner].frame
        return Location(f.file, f.line, f.name)

    def path_labels(self, node: int) -> list[str]:
        return [f.label() for f in self.tree.path(node)]

    def severity(self, fraction: float, warning: float, error: float) -> str:
        """note below ``warning``, warning below ``error``, else error (fractions of run time)."""
        if fraction >= error:
            return "error"
        return "warning" if fraction >= warning else "note"

    def finding(self, rule: Any, node: int, *, severity: str, title: str, message: str,
                evidence: dict[str, float | int | str], suggestion: str, gain_seconds: float,
                method: str) -> Finding:
        """Build a finding for ``rule`` about ``node`` with location, path and gain filled in."""
        gain_seconds = _finite(gain_seconds)
        gain = EstimatedGain(round(gain_seconds, 9), round(self.fraction(gain_seconds), 6), method)
        # a damaged profile (inf/NaN metrics) must still give valid JSON
        evidence = {k: _finite(v) if isinstance(v, float) else v for k, v in evidence.items()}
        return Finding(rule=rule.id, category=rule.category, severity=severity, title=title,
                       message=message, node=node, location=self.location(node),
                       path=self.path_labels(node), evidence=evidence, suggestion=suggestion,
                       estimated_gain=gain)

    def where(self, node: int) -> str:
        """``file.py:12`` of the user's line, for messages."""
        loc = self.location(node)
        if loc is None:
            return self.tree.nodes[node].frame.label()
        return f"{loc.file.rsplit('/', 1)[-1]}:{loc.line}"


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0
