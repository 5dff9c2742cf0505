"""Memory (the ``memory`` context layer, docs/memory.md): which lines hold each device's peak
(activations saved for backward, gradients, optimizer state, other tensors), what the caching
allocator did at a line (repeated cudaMalloc/cudaFree, retries that free the cache, OOMs), and
lines whose allocations are never freed (a list or cache that grows).

Memory findings save bytes, not time: their estimated gain is 0 s, and the bytes are in the
evidence and the gain's method."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator

from ...tree.metrics import format_value
from ..context import AnalysisContext
from ..finding import Finding
from ..rule import Rule, Threshold
from ._common import percent, seconds

_DEVICE_PEAK = re.compile(r"^mem\.([A-Za-z0-9_]+)\.peak\.bytes$")
_OPTIMIZER_FILES = ("/torch/optim/", "/torch/distributed/optim/")


def peak_devices(ctx: AnalysisContext) -> list[str]:
    """Devices with a peak in this profile (``cpu``, ``cuda0``...), from the metric names."""
    names = (_DEVICE_PEAK.match(m) for m in ctx.tree.metric_names())
    return sorted(m.group(1) for m in names if m)


def _bytes(value: float) -> str:
    return format_value(value, "bytes")


def _share_severity(rule: Rule, share: float) -> str | None:
    if share < rule.t("note_share"):
        return None
    if share >= rule.t("error_share"):
        return "error"
    return "warning" if share >= rule.t("warning_share") else "note"


class PeakHolderRule(Rule):
    id = "memory-peak"
    category = "memory"
    description = ("The lines whose tensors are live at a device's memory peak: activations "
                   "saved for backward, gradients, optimizer state or other tensors.")
    thresholds = {
        "note_share": Threshold(0.10, "a line holding a tenth of the peak is worth knowing"),
        "warning_share": Threshold(0.25, "a quarter of the peak: shrinking it moves the OOM "
                                         "limit or the batch size noticeably"),
        "error_share": Threshold(0.50, "half the peak at one line: the first thing to change"),
        "max_findings": Threshold(5, "the few largest holders per device; the rest is in "
                                     "`deepcontext report --metric mem.peak.bytes`"),
    }

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        for device in peak_devices(ctx):
            metric = f"mem.{device}.peak.bytes"
            peak = ctx.tree.total(metric)
            if peak <= 0:
                continue
            held: dict[tuple[int, str], float] = defaultdict(float)
            first: dict[tuple[int, str], int] = {}
            for node in ctx.tree.nodes[1:]:
                value = node.metrics.get(metric, 0.0)
                owner = ctx.owner[node.id]
                if value <= 0 or owner <= 0:
                    continue
                key = (owner, self._kind(ctx, node.id, owner))
                held[key] += value
                first.setdefault(key, node.id)
            ranked = sorted(held.items(), key=lambda kv: (-kv[1], kv[0]))
            for (owner, kind), value in ranked[:int(self.t("max_findings"))]:
                severity = _share_severity(self, value / peak)
                if severity is not None:
                    yield self._finding(ctx, first[(owner, kind)], owner, kind, device, value,
                                        peak, severity)

    @staticmethod
    def _kind(ctx: AnalysisContext, node: int, owner: int) -> str:
        if any(f.kind == "python" and any(d in f.file for d in _OPTIMIZER_FILES)
               for f in ctx.tree.path(node)):
            return "optimizer state"
        if ctx.in_backward[node]:
            return "gradients"
        if any(s.backward for s in ctx.sites_by_owner.get(owner, ())):
            return "activations"
        return "tensors"

    def _finding(self, ctx: AnalysisContext, node: int, owner: int, kind: str, device: str,
                 value: float, peak: float, severity: str) -> Finding:
        where, share = ctx.where(owner), value / peak
        what = {
            "activations": (f"tensors {where} allocates in forward are live at the peak: "
                            f"activations autograd saves for backward (and the outputs)",
                            "recompute them in backward instead of keeping them: wrap the block "
                            "in torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False); "
                            "run forward under torch.autocast (half-size activations), or use a "
                            "smaller batch"),
            "gradients": (f"gradients computed in the backward of {where} are live at the peak",
                          "free gradients before the next forward: optimizer.zero_grad("
                          "set_to_none=True); with gradient accumulation, fewer micro-steps "
                          "between optimizer steps hold less"),
            "optimizer state": (f"optimizer state created under {where} is live at the peak "
                                f"(Adam keeps two moments per parameter)",
                                "shard the state across ranks (FSDP, ZeroRedundancyOptimizer), "
                                "use a lighter optimizer (SGD with momentum keeps one buffer, "
                                "Adafactor factored moments), or 8-bit optimizer states"),
            "tensors": (f"tensors allocated at {where} are live at the peak",
                        "free them before the peak (del, or let them go out of scope), "
                        + ("" if device == "cpu" else "move long-lived ones to the CPU, ")
                        + "or allocate them smaller (a narrower dtype, fewer at once)"),
        }[kind]
        return ctx.finding(
            self, node, severity=severity,
            title=f"{kind} from {where} hold {_bytes(value)} of the {device} peak "
                  f"({percent(share)} of {_bytes(peak)})",
            message=f"{what[0]}: {_bytes(value)}, {percent(share)} of the {device} peak of "
                    f"{_bytes(peak)}.",
            evidence={"device": device, "kind": kind, "peak_bytes": int(value),
                      "device_peak_bytes": int(peak), "share": round(share, 6)},
            suggestion=what[1],
            gain_seconds=0.0,
            method=f"memory, not time: up to {_bytes(value)} off the {device} peak")


class AllocatorChurnRule(Rule):
    id = "allocator-churn"
    category = "memory"
    description = ("A line that makes the CUDA caching allocator call cudaMalloc/cudaFree "
                   "again and again, retry after freeing its cache, or run out of memory.")
    thresholds = {
        "min_segment_calls": Threshold(50, "a warm cache reserves its segments once; 50 "
                                           "cudaMalloc+cudaFree calls at one line is a loop"),
        "min_frees": Threshold(10, "without cudaFree the cache is only growing (warm-up)"),
    }

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        per_owner: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        first: dict[int, int] = {}
        for node in ctx.tree.nodes[1:]:
            owner = ctx.owner[node.id]
            for m in ("mem.segment.alloc.count", "mem.segment.free.count",
                      "mem.segment.alloc.bytes", "mem.segment.free.bytes", "mem.alloc.retries",
                      "mem.oom.count", "mem.cudamalloc.time", "mem.cudafree.time"):
                if (v := node.metrics.get(m, 0.0)) and owner > 0:
                    per_owner[owner][m] += v
                    first.setdefault(owner, node.id)
        for owner, m in sorted(per_owner.items()):
            allocs, frees = m["mem.segment.alloc.count"], m["mem.segment.free.count"]
            retries, ooms = m["mem.alloc.retries"], m["mem.oom.count"]
            evidence = {"segment_allocs": int(allocs), "segment_frees": int(frees),
                        "segment_alloc_bytes": int(m["mem.segment.alloc.bytes"]),
                        "segment_free_bytes": int(m["mem.segment.free.bytes"]),
                        "retries": int(retries), "ooms": int(ooms),
                        "cudamalloc_time_s": m["mem.cudamalloc.time"],
                        "cudafree_time_s": m["mem.cudafree.time"]}
            # With the gpu layer the driver calls are timed: a warm cache would make none.
            driver = m["mem.cudamalloc.time"] + m["mem.cudafree.time"]
            timed = f", {seconds(driver)} in cudaMalloc/cudaFree" if driver > 0 else ""
            where = ctx.where(owner)
            oom = ", ran out of memory" if ooms > 0 else ""
            if ooms > 0 or retries > 0:
                yield ctx.finding(
                    self, first[owner], severity="error" if ooms > 0 else "warning",
                    title=(f"out of memory at {where}" if ooms > 0 else
                           f"{retries:.0f} allocation retries at {where}"),
                    message=(f"allocations at {where} found no room in the cache{oom} and "
                             f"retried {retries:.0f} time(s): each retry synchronizes the "
                             f"device and cudaFrees every unused cached segment "
                             f"({frees:.0f} segments, {_bytes(m['mem.segment.free.bytes'])} here), "
                             f"which the next allocations cudaMalloc again{timed}."),
                    evidence=evidence,
                    suggestion=("lower the peak (see the memory-peak findings), set "
                                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against "
                                "fragmentation, and keep tensor shapes stable across steps"),
                    gain_seconds=driver,
                    method="the time in cudaMalloc/cudaFree at this line (each retry also "
                           "synchronizes the device)")
            elif allocs + frees >= self.t("min_segment_calls") and frees >= self.t("min_frees"):
                yield ctx.finding(
                    self, first[owner], severity="warning",
                    title=f"{allocs:.0f} cudaMalloc and {frees:.0f} cudaFree calls at {where}",
                    message=(f"the caching allocator reserved {allocs:.0f} segments "
                             f"({_bytes(m['mem.segment.alloc.bytes'])}) and released {frees:.0f} "
                             f"at {where}{timed}: the cache is emptied and refilled instead of "
                             f"reused; cudaFree synchronizes the device."),
                    evidence=evidence,
                    suggestion=("don't call torch.cuda.empty_cache() inside the loop; keep "
                                "shapes stable (pad variable-length batches to a few sizes); "
                                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
                    gain_seconds=driver,
                    method="the time in cudaMalloc/cudaFree at this line: a warm cache makes "
                           "none")


class MemoryLeakRule(Rule):
    id = "memory-leak"
    category = "memory"
    description = ("A line, run many times, whose allocations are still live at the end: "
                   "a list, cache or history that grows every step.")
    thresholds = {
        "min_live": Threshold(10, "a few live tensors per line are model state"),
        "kept_fraction": Threshold(0.9, "nearly every allocation kept: nothing ever frees them"),
        "min_live_unstepped": Threshold(100, "without step marks (deepcontext.step()) only a "
                                             "line keeping 100+ tensors is called growing"),
    }

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        steps = int(ctx.metadata.get("steps") or 0)
        live_count, live_bytes, allocs = (defaultdict(float) for _ in range(3))
        first: dict[int, int] = {}
        for node in ctx.tree.nodes[1:]:
            owner = ctx.owner[node.id]
            if owner <= 0:
                continue
            for acc, m in ((live_count, "mem.live.count"), (live_bytes, "mem.live.bytes"),
                           (allocs, "mem.alloc.count")):
                acc[owner] += node.metrics.get(m, 0.0)
            if node.metrics.get("mem.live.count"):
                first.setdefault(owner, node.id)
        for owner in sorted(first):
            live, made = live_count[owner], allocs[owner]
            if live < self.t("min_live") or live < self.t("kept_fraction") * made:
                continue
            if steps >= 2 and live < steps:
                continue
            if steps < 2 and live < self.t("min_live_unstepped"):
                continue
            where = ctx.where(owner)
            per_step = (f", {_bytes(live_bytes[owner] / steps)} per step over {steps} steps"
                        if steps >= 2 else "")
            yield ctx.finding(
                self, first[owner], severity="warning",
                title=f"{live:.0f} tensors allocated at {where} are never freed "
                      f"({_bytes(live_bytes[owner])})",
                message=(f"{where} allocated {made:.0f} tensors and {live:.0f} of them "
                         f"({_bytes(live_bytes[owner])}{per_step}) were still live when the "
                         f"profile ended: something keeps every one, so memory grows with the "
                         f"run until it runs out."),
                evidence={"live_count": int(live), "live_bytes": int(live_bytes[owner]),
                          "allocations": int(made), "steps": steps},
                suggestion=("find what holds them: a list appended every step (keep "
                            "loss.item() or tensor.detach() instead of the tensor, which keeps "
                            "its autograd graph), a cache without eviction, or a history of "
                            "outputs; bound it or clear it"),
                gain_seconds=0.0,
                method=f"memory, not time: {_bytes(live_bytes[owner])} that grows with the run")


RULES = [PeakHolderRule, AllocatorChurnRule, MemoryLeakRule]
