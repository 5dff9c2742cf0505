"""Host-device synchronization in hot code: ``.item()``, ``.cpu()``, ``print(tensor)`` or
data-dependent shapes make the host wait for the GPU to drain, so the GPU then idles."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from ...tree.frame import OP, PYTHON, SYNC
from ...tree.usercode import is_user_file
from ..context import AnalysisContext
from ..finding import Finding, Location
from ..ops import HOST_SYNC, base_name
from ..rule import Rule, Threshold
from ._common import (inside_torch_optim, is_hf_trainer_file, is_torch_frame, percent,
                      seconds, short_file)

_ADVICE = {
    "item": ("keep the value on the device: accumulate with `total += loss.detach()` and call "
             ".item() once after the loop (or every N steps); for control flow use torch.where "
             "or torch.cond instead of a Python `if` on a tensor"),
    "_to_copy": ("copy to the host less often: keep results on the GPU and transfer once, or use "
                 "`.to('cpu', non_blocking=True)` into pinned memory and synchronize later"),
    "nonzero": ("avoid data-dependent shapes in the hot loop: use masks (torch.where, "
                "masked_fill) instead of boolean indexing / nonzero, or pass `size=` where the "
                "API allows it"),
}


def _library_call(ctx: AnalysisContext, node: int) -> tuple[Location | None, str]:
    """The library function that called the syncing operator (None where the caller is the
    user's code), and the operator it called (``is_nonzero`` for a Python ``if`` on a tensor,
    where the sync itself is the ``_local_scalar_dense`` inside)."""
    called = ""
    for a in reversed(ctx.ancestors(node)):
        f = ctx.tree.nodes[a].frame
        if f.kind == OP:
            called = f.name
        elif f.kind == PYTHON and not is_torch_frame(f):  # (print(t) runs torch's _tensor_str)
            return (None if is_user_file(f.file) else Location(f.file, f.line, f.name)), called
    return None, called


def _library_lever(op: str, origin: Location | None) -> str:
    """What turns a library's own per-step sync off, where the library has a switch for it."""
    if origin is None:
        return ""
    if (base_name(op) == "is_nonzero" and origin.function.startswith("Trainer.")
            and is_hf_trainer_file(origin.file)):
        # `if torch.isnan(loss) or torch.isinf(loss)` after every training step (on by default)
        return ("the sync is the Hugging Face Trainer's NaN/inf filter of the logged loss, a "
                "Python `if` on a tensor every step: TrainingArguments(..., "
                "logging_nan_inf_filter=False) removes it")
    return (f"the sync is in the library code {short_file(origin.file)}:{origin.line} "
            f"({origin.function}), called from your line: look for the library's option that "
            f"skips it, or call that code less often. Where the code is yours: ")


def _advice(op: str) -> str:
    name = base_name(op)
    if name in ("item", "_local_scalar_dense", "is_nonzero", "equal"):
        return _ADVICE["item"]
    if name in ("_to_copy", "to", "copy_"):
        return _ADVICE["_to_copy"]
    if name in ("nonzero", "masked_select", "unique", "_unique2", "repeat_interleave"):
        return _ADVICE["nonzero"]
    return ("remove the synchronize from the hot path (torch.cuda.synchronize, event.synchronize); "
            "time with CUDA events instead")


class SyncRule(Rule):
    id = "host-sync"
    category = "sync"
    description = ("A line of yours makes the host wait for the GPU (sync.wait), or on a "
                   "CPU-only profile calls an operator that would (e.g. .item()) many times.")
    thresholds = {
        "min_syncs": Threshold(10, "a sync run a few times (after warm-up, at the end) is not in "
                                   "hot code; a per-step sync runs once per step"),
        "launch_latency_s": Threshold(50e-6, "after a sync returns, a GPU-bound loop's GPU "
                                             "waits for the next launch: 5-20 us, 50 us with "
                                             "Python in between"),
        "min_cpu_calls": Threshold(100, "on CPU-only profiles: fewer calls are epoch-level "
                                        "logging, not a per-step sync"),
        "library_loop_calls": Threshold(3, "on CPU-only profiles: a library's sync called this "
                                           "many times per run of your line loops inside the "
                                           "library (generate's per-token stopping check); "
                                           "fewer is your loop calling it (a logger)"),
    }

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        if ctx.tree.total("sync.wait") > 0 or ctx.tree.total("sync.count") > 0:
            yield from self._measured(ctx)
        elif not ctx.has_gpu:
            yield from self._cpu_only(ctx)

    def _measured(self, ctx: AnalysisContext) -> Iterator[Finding]:
        wait: dict[int, float] = defaultdict(float)
        count: dict[int, float] = defaultdict(float)
        cause: dict[int, str] = {}
        origin: dict[int, tuple[Location | None, str]] = {}
        for node in ctx.tree.nodes[1:]:
            w, c = node.metrics.get("sync.wait", 0.0), node.metrics.get("sync.count", 0.0)
            if not (w or c) or ctx.owner[node.id] <= 0 or ctx.in_setup[node.id]:
                continue  # set-up waits (Inductor's autotuner timing kernels) are not a step's
            if node.frame.kind == SYNC and node.frame.name.startswith("jax "):
                continue  # JAX's round trips: rules/jax.py, with JAX's advice
            owner = ctx.owner[node.id]
            wait[owner] += w
            count[owner] += c
            op = next((ctx.tree.nodes[a].frame.name for a in reversed(ctx.ancestors(node.id))
                       if ctx.tree.nodes[a].frame.kind == OP), None)
            if owner not in cause or (node.frame.kind == SYNC and op):
                cause[owner] = op or node.frame.name
                origin[owner] = _library_call(ctx, node.id)
        for owner, w in wait.items():
            if count[owner] < self.t("min_syncs"):
                continue
            gain = min(w, self._gpu_idle(ctx, owner, count[owner]))
            severity = self.severity_for(ctx, gain)
            if severity is None:
                continue
            what = cause.get(owner, "a synchronize call")
            lib, called = origin.get(owner, (None, ""))
            lever = _library_lever(called, lib)
            yield ctx.finding(
                self, owner, severity=severity,
                title=f"host waits {seconds(w)} for the GPU at {ctx.where(owner)} ({what})",
                message=(f"{ctx.where(owner)} synchronized with the GPU {count[owner]:.0f} times "
                         f"through {what}, blocking the host for {seconds(w)} "
                         f"({percent(ctx.fraction(w))} of the run); meanwhile no new work was "
                         f"queued, so the GPU idles after each sync."),
                evidence={"sync_wait_s": w, "sync_count": int(count[owner]), "cause": what},
                suggestion=_join(lever, _advice(what)),
                gain_seconds=gain,
                method=("the blocked time, at most the GPU's idle time in the loop around the "
                        "sync (its lines' operator and wait time minus their GPU time; on a "
                        "GPU-bound loop one launch's latency per sync): a busy GPU gains "
                        "nothing from a host that stops waiting"),
                origin=lib)

    def _gpu_idle(self, ctx: AnalysisContext, owner: int, syncs: float) -> float:
        """GPU time idle because of the syncs at ``owner``, estimated over its loop: the lines
        of its function that ran at least once per sync (``ctx.runs``: set-up and warm-up lines
        run less often and stay out), their operators' first calls left out. Host-bound loop
        (operator time H >= GPU busy time G): the GPU idles H + waits - G. GPU-bound loop: the
        host's launches overlap the GPU's work, and the GPU only idles from each sync's return
        to its next launch: one launch's host time, at most ``launch_latency_s`` (an op's host
        time can include blocking that overlaps)."""
        node = ctx.tree.nodes[owner]
        lines = [c for c in ctx.tree.nodes[node.parent].children
                 if (ctx.tree.nodes[c].frame.file, ctx.tree.nodes[c].frame.name)
                 == (node.frame.file, node.frame.name) and (c == owner or ctx.runs(c) >= syncs)]
        # operator time less each context's first call: a warm-up's cuBLAS handles and lazy
        # module loads are not the loop's (they made a GPU-bound loop read as host-bound)
        ops, first = ctx.inc("op.time"), ctx.inc("op.first_time")
        host = sum(max(0.0, ops[n] - first[n]) for n in lines)
        waits = sum(ctx.inc("sync.wait")[n] for n in lines)
        busy = sum(ctx.inc(m)[n] for n in lines for m in ("gpu.time", "memcpy.time", "memset.time"))
        idle = max(0.0, host + waits - busy)
        launches = sum(ctx.inc("gpu.launches")[n] for n in lines)
        if busy >= host and launches > 0:
            idle = min(idle, syncs * min(host / launches, self.t("launch_latency_s")))
        return idle

    def _cpu_only(self, ctx: AnalysisContext) -> Iterator[Finding]:
        for owner, sites in ctx.sites_by_owner.items():
            # (torch.optim's .item() reads its step counters, CPU tensors unless capturable:
            # no sync on a GPU either)
            hits = [s for s in sites if not s.backward and base_name(s.name) in HOST_SYNC
                    and not inside_torch_optim(ctx, s.node)]
            calls = sum(ctx.count(s.node) for s in hits)
            if owner <= 0 or calls < self.t("min_cpu_calls"):
                continue
            top = max(hits, key=lambda s: ctx.count(s.node))
            op, (lib, called) = top.name, _library_call(ctx, top.node)
            lever = _library_lever(called, lib)
            if (lib is not None and lever.endswith(": ")
                    and calls >= self.t("library_loop_calls") * max(1.0, ctx.runs(owner))):
                continue  # a loop inside the library (generate's stopping criteria, per token)
                # with no switch of its own; on a CPU-only profile there is no wait to show
            spent = sum(ctx.host_time(s.node) for s in hits)
            yield ctx.finding(
                self, owner, severity="note",
                title=f"{op} called {calls:.0f} times at {ctx.where(owner)}: a GPU sync per call",
                message=(f"{ctx.where(owner)} calls {op} {calls:.0f} times ({seconds(spent)} on "
                         f"this CPU-only run). On a GPU each call blocks the host until all "
                         f"queued kernels finish, serializing host and device every iteration."),
                evidence={"calls": int(calls), "op": op, "time_s": spent},
                suggestion=_join(lever, _advice(op)),
                gain_seconds=spent,
                method="CPU-only profile: the calls' own time; on a GPU the gain is the sync wait",
                origin=lib)


def _join(lever: str, advice: str) -> str:
    """A library's known switch alone; a library call site without one, then the general fix."""
    if lever and not lever.endswith(": "):
        return lever
    return lever + advice
