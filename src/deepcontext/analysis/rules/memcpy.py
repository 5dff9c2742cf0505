"""Copies between host and GPU that cost more than they need: pageable host memory (staged and
synchronous) and many tiny copies (each paying a fixed ~10 us latency)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from ...tree.frame import MEMCPY, Frame
from ...tree.metrics import format_value
from ..context import AnalysisContext
from ..finding import Finding
from ..rule import Rule, Threshold
from ._common import percent, seconds


def copy_kind(frame: Frame) -> tuple[str, str]:
    """(direction, pinned) of a copy frame: ``HtoD``/``DtoH``/``DtoD``... and ``true``/``false``
    (``?`` when unknown). Reads ``direction``/``pinned`` extras when present, else the capture's
    own form: a name like ``HtoD pageable`` with ``src``/``dst`` memory kinds."""
    words = frame.name.split()
    direction = frame.get("direction") or (words[0] if words else "?")
    pinned = frame.get("pinned")
    if not pinned:
        host = {"HtoD": frame.get("src"), "DtoH": frame.get("dst")}.get(direction, "")
        if not host and len(words) > 1:
            host = words[1]
        pinned = {"pageable": "false", "pinned": "true"}.get(host, "?")
    return direction, pinned


class MemcpyRule(Rule):
    id = "memcpy"
    category = "memcpy"
    description = ("Host<->device copies from pageable memory, or many tiny copies, at one line.")
    thresholds = {
        "tiny_bytes": Threshold(64 * 1024, "nsys ignores H2D copies <= 64 KiB as latency-bound; "
                                           "below it a copy's cost is its fixed latency"),
        "min_tiny_count": Threshold(100, "a handful of small copies is setup; 100+ is per step"),
        "pinned_saving": Threshold(0.5, "pinned copies run at ~2x pageable bandwidth and can "
                                        "overlap compute: conservatively half the copy time"),
        "batching_saving": Threshold(0.5, "batching tiny copies removes most per-copy latency; "
                                          "conservatively half"),
        "min_runs": Threshold(10, "a copy made by a line run fewer times (model.to('cuda'), "
                                  "loading a dataset once) is set-up: pinning its source costs "
                                  "as much as the copy saves"),
    }

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        groups: dict[tuple[int, str, str], list[int]] = defaultdict(list)
        for node in ctx.tree.nodes[1:]:
            if (node.frame.kind == MEMCPY and ctx.owner[node.id] > 0
                    and not ctx.in_setup[node.id] and ctx.repeated(node.id, self.t("min_runs"))):
                key = (ctx.owner[node.id], *copy_kind(node.frame))
                groups[key].append(node.id)
        for (owner, direction, pinned), nodes in sorted(groups.items()):
            t = sum(ctx.inc("memcpy.time")[n] for n in nodes)
            size = sum(ctx.inc("memcpy.bytes")[n] for n in nodes)
            count = sum(ctx.inc("memcpy.count")[n] for n in nodes)
            if count <= 0:
                continue
            evidence = {"memcpy_time_s": t, "memcpy_bytes": int(size), "memcpy_count": int(count),
                        "mean_bytes": size / count, "direction": direction, "pinned": pinned}
            if direction in ("HtoD", "DtoH") and pinned == "false":
                yield from self._pageable(ctx, nodes[0], owner, direction, t, size, evidence)
            elif count >= self.t("min_tiny_count") and size / count < self.t("tiny_bytes"):
                yield from self._tiny(ctx, nodes[0], owner, direction, t, count, size, evidence)

    def _pageable(self, ctx: AnalysisContext, node: int, owner: int, direction: str, t: float,
                  size: float, evidence: dict) -> Iterator[Finding]:
        gain = t * self.t("pinned_saving")
        severity = self.severity_for(ctx, gain)
        if severity is None:
            return
        to_gpu = direction == "HtoD"
        yield ctx.finding(
            self, node, severity=severity,
            title=f"{direction} copies from pageable memory at {ctx.where(owner)} "
                  f"({format_value(size, 'bytes')}, {seconds(t)})",
            message=(f"{ctx.where(owner)} copies {format_value(size, 'bytes')} {direction} "
                     f"through pageable host memory in {seconds(t)} "
                     f"({percent(ctx.fraction(t))} of the run): the driver stages each copy "
                     f"through a pinned buffer and the copy cannot overlap compute."),
            evidence=evidence,
            suggestion=("pin the host memory and copy asynchronously: DataLoader(..., "
                        "pin_memory=True) and `.to('cuda', non_blocking=True)`" if to_gpu else
                        "copy into a pinned buffer: `out = torch.empty(shape, pin_memory=True); "
                        "out.copy_(gpu_tensor, non_blocking=True)` and synchronize only when "
                        "the values are read"),
            gain_seconds=gain,
            method=f"pinned copies ~2x faster and overlappable: {self.t('pinned_saving'):.0%} "
                   f"of the copy time")

    def _tiny(self, ctx: AnalysisContext, node: int, owner: int, direction: str, t: float,
              count: float, size: float, evidence: dict) -> Iterator[Finding]:
        gain = t * self.t("batching_saving")
        severity = self.severity_for(ctx, gain)
        if severity is None:
            return
        yield ctx.finding(
            self, node, severity=severity,
            title=f"{count:.0f} tiny {direction} copies at {ctx.where(owner)} "
                  f"(mean {format_value(size / count, 'bytes')})",
            message=(f"{ctx.where(owner)} makes {count:.0f} {direction} copies averaging "
                     f"{format_value(size / count, 'bytes')}, {seconds(t)} in all: each pays the "
                     f"fixed copy latency for almost no data."),
            evidence=evidence,
            suggestion=("batch the transfers: create tensors directly on the device "
                        "(torch.tensor(..., device='cuda'), torch.zeros(..., device='cuda')), "
                        "stack values into one tensor and copy once, or keep the data on the GPU"),
            gain_seconds=gain,
            method=f"batching removes most per-copy latency: {self.t('batching_saving'):.0%} "
                   f"of the copy time")


RULES = [MemcpyRule]
