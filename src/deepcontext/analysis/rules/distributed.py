"""Multi-rank jobs: a rank that computes longer while the others wait in the next collective,
communication that blocks instead of overlapping, and one collective per parameter.

Collectives are operators like any other: ``c10d::allreduce_`` and the rest of the
ProcessGroup dispatcher ops on the issuing thread (DDP's bucket all-reduces hang under the
``.backward()`` line's ``AccumulateGrad`` that completed the bucket), the backend's own scope
(``gloo:all_reduce``, ``nccl:all_reduce``) where the transfer and the wait for the peers run, and
on GPUs the NCCL kernels. The straggler rule needs a merged job (per-rank values, docs/multi-rank.md).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator

from ...tree.frame import KERNEL, OP
from ..context import AnalysisContext
from ..finding import Finding
from ..rule import Rule, Threshold
from ._common import percent, seconds

_COLLECTIVE_OPS = ("c10d::", "_c10d_functional::", "c10d_functional::")
_BACKEND_SCOPES = ("gloo:", "nccl:", "mpi:", "ucc:")


def is_collective(ctx: AnalysisContext, node: int) -> bool:
    f = ctx.tree.nodes[node].frame
    if f.kind == OP:
        return f.name.startswith(_COLLECTIVE_OPS) or f.name.startswith(_BACKEND_SCOPES)
    return f.kind == KERNEL and f.name.startswith("nccl")


def _outermost(ctx: AnalysisContext, pick) -> list[int]:
    """The nodes ``pick`` accepts that have no accepted node above them."""
    roots, inside = [], [False] * len(ctx.tree.nodes)
    for node in ctx.tree.nodes[1:]:
        inside[node.id] = inside[node.parent]
        if not inside[node.id] and pick(node.id):
            roots.append(node.id)
            inside[node.id] = True
    return roots


def collective_roots(ctx: AnalysisContext) -> list[int]:
    """Outermost collective nodes (a backend scope or kernel inside a c10d op counts once)."""
    return _outermost(ctx, lambda n: is_collective(ctx, n))


def _not_step_work(ctx: AnalysisContext) -> list[int]:
    """Outermost nodes whose time is not a line's own work in the steps: collectives (waiting
    for the peers), set-up and imports (once per run, and the ranks' start-up skew: a lazy
    import inside ``DistributedDataParallel(...)`` took 1.1-1.4 s on either rank of a loaded
    2-core machine, and DDP's shape check there waited 0.54 s for the later rank)."""
    return _outermost(ctx, lambda n: ctx.in_setup[n] or ctx.in_import[n] or is_collective(ctx, n))


_TIME_METRICS = ("cpu.time", "op.time", "gpu.time")


def _combined(cpu: float, op: float, gpu: float) -> float:
    """Host time (sampled CPU or operator wall time, the larger) plus GPU time, the per-rank
    form of ``ctx.host_time``."""
    return max(cpu, op) + gpu


def _rank_time(ctx: AnalysisContext, rank: int) -> list[float]:
    """Per node: its inclusive time on ``rank``."""
    cpu, op, gpu = (ctx.tree.rank_inclusive_all(m, rank) for m in _TIME_METRICS)
    return [_combined(c, o, g) for c, o, g in zip(cpu, op, gpu)]


def _rank_own_time(ctx: AnalysisContext, roots: list[int], rank: int) -> list[float]:
    """Per node: its inclusive time on ``rank`` without the subtrees at ``roots`` below it
    (collectives: waiting is not the line's own work). Each metric loses their share before the
    metrics are combined: a line's operator time is mostly the wait inside its collectives
    (gloo's worker runs them under the line), while its own work may be CPU time outside any
    operator."""
    own = [list(ctx.tree.rank_inclusive_all(m, rank)) for m in _TIME_METRICS]
    for c in roots:
        share = [values[c] for values in own]
        for a in ctx.ancestors(ctx.tree.nodes[c].parent):
            for values, v in zip(own, share):
                values[a] -= v
        for values in own:  # the collective's own subtree is all wait
            for n in (x.id for x in ctx.tree.walk(c)):
                values[n] = 0.0
    return [_combined(c, o, g) for c, o, g in zip(*own)]


class StragglerRule(Rule):
    id = "rank-straggler"
    category = "imbalance"
    description = ("One rank spends longer at a line than the others, which wait for it in the "
                   "collective that follows.")
    thresholds = {
        "min_excess_ratio": Threshold(0.25, "a line 25% slower on one rank than the others' "
                                            "median is an imbalance, not noise between ranks"),
        "min_wait_share": Threshold(0.5, "the others must wait at least half of the excess in "
                                         "collectives, else the time is not on the critical path"),
        "specific_share": Threshold(0.8, "a deeper line that holds 80% of the excess names the "
                                         "cause more precisely than its caller"),
        "max_noise_share": Threshold(0.5, "lines under min_excess_ratio are noise between ranks "
                                          "and are left out when the line is named, unless they "
                                          "hold half the excess (then the rank is slower all "
                                          "over, and the caller is named)"),
    }

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        ranks = ctx.tree.ranks()
        if len(ranks) < 2:
            return
        # the steps only, as the other rules: set-up and imports are left out of the lines'
        # time and of the waits
        not_step_work = _not_step_work(ctx)  # (the same nodes for every rank)
        own = {r: _rank_own_time(ctx, not_step_work, r) for r in ranks}
        waits = [c for c in collective_roots(ctx) if not (ctx.in_setup[c] or ctx.in_import[c])]
        comm_total = {}
        for r in ranks:
            inclusive = _rank_time(ctx, r)
            comm_total[r] = sum(inclusive[c] for c in waits)
        depth = [0] * len(ctx.tree.nodes)
        for node in ctx.tree.nodes[1:]:
            depth[node.id] = depth[node.parent] + 1
        for rank in ranks:
            others = [q for q in ranks if q != rank]
            diff: dict[int, float] = {}  # each line's time on `rank` less the others' median
            excess: dict[int, tuple[float, float]] = {}
            for line in ctx.user_nodes():
                theirs = statistics.median(own[q][line] for q in others)
                diff[line] = d = own[rank][line] - theirs
                if d > 0 and d >= self.t("min_excess_ratio") * max(theirs, 1e-9):
                    excess[line] = (d, theirs)
            if not excess:
                continue
            line = self._name_line(ctx, excess, diff, depth)
            extra, theirs = excess[line]
            waited = statistics.median(comm_total[q] for q in others) - comm_total[rank]
            if waited < self.t("min_wait_share") * extra:
                continue
            gain = min(extra, waited) * len(others)
            severity = self.severity_for(ctx, gain)
            if severity is None:
                continue
            yield ctx.finding(
                self, line, severity=severity,
                title=f"rank {rank} is a straggler at {ctx.where(line)} "
                      f"(+{seconds(extra)} while {len(others)} rank(s) wait)",
                message=(f"Rank {rank} spends {seconds(extra + theirs)} at {ctx.where(line)}, "
                         f"the other ranks {seconds(theirs)} (median); they wait "
                         f"{seconds(waited)} longer in collectives, {percent(ctx.fraction(gain))} "
                         f"of the job's time."),
                evidence={"rank": rank, "rank_time_s": extra + theirs, "others_median_s": theirs,
                          "others_extra_wait_s": waited, "ranks": len(ranks)},
                suggestion=("balance the work across ranks: give each rank an equal share "
                            "(same batch size / sequence lengths, DistributedSampler, bucketing "
                            "by length), and keep rank-specific work (logging, checkpointing, "
                            "evaluation on rank 0) out of the step or overlap it"),
                gain_seconds=gain,
                method="the others' extra wait, bounded by the straggler's excess, times the "
                       "number of waiting ranks")

    def _name_line(self, ctx: AnalysisContext, excess: dict[int, tuple[float, float]],
                   diff: dict[int, float], depth: list[int]) -> int:
        """The deepest line that holds ``specific_share`` of the excess, counted without noise.

        A caller's excess is the sum of its lines' differences, and lines that differ by less
        than ``min_excess_ratio`` are noise between ranks (a data-loading line 18% slower on one
        rank of a loaded machine); added to a caller, such noise can push the line that holds
        the real excess under ``specific_share`` of the caller's, and the caller would be named.
        The noise (either sign) is taken out of every line above it before the deepest line is
        chosen; if it was most of the excess, the rank is slower all over and the raw excess
        names the caller."""
        clean = dict(diff)  # each line's difference without its noisy lines' differences
        for u in sorted(diff, key=lambda n: -depth[n]):  # deepest first: noise moves upward
            above = ctx.owner[ctx.tree.nodes[u].parent] if ctx.tree.nodes[u].parent > 0 else -1
            if above > 0:
                clean[above] -= diff[u] if u not in excess else diff[u] - clean[u]
        top_raw = max(d for d, _ in excess.values())
        top = max(clean[n] for n in excess)
        score = clean if top >= (1 - self.t("max_noise_share")) * top_raw else diff
        top = max(score[n] for n in excess)
        return max((n for n in excess if score[n] >= self.t("specific_share") * top),
                   key=lambda n: (depth[n], score[n]))


class BlockingCollectiveRule(Rule):
    id = "comm-not-overlapped"
    category = "imbalance"
    description = ("A collective issued outside the backward pass blocks the step: nothing "
                   "computes while it runs.")
    thresholds = {}

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        spent: dict[int, tuple[float, float]] = {}
        for c in collective_roots(ctx):
            node = ctx.tree.nodes[c]
            if ctx.owner[c] <= 0 or ctx.in_backward[c] or not node.frame.name.startswith(_COLLECTIVE_OPS):
                continue
            above = [ctx.tree.nodes[a].frame.name for a in ctx.ancestors(node.parent)]
            if any(n.startswith("autograd::engine::") for n in above):
                continue  # DDP's bucket all-reduces: launched during backward, overlapped
            if any(n.endswith("__init__") for n in above):
                continue  # set-up (DDP/FSDP broadcasting the initial weights): once per run
            t = max(ctx.inc("op.time")[c], ctx.inc("gpu.time")[c])
            prev = spent.get(ctx.owner[c], (0.0, 0.0))
            spent[ctx.owner[c]] = (prev[0] + t, prev[1] + ctx.count(c))
        for owner, (t, calls) in spent.items():
            severity = self.severity_for(ctx, t)
            if severity is None:
                continue
            yield ctx.finding(
                self, owner, severity=severity,
                title=f"communication at {ctx.where(owner)} is not overlapped with compute "
                      f"({percent(ctx.fraction(t))} of the run)",
                message=(f"{ctx.where(owner)} runs {int(calls)} collective call(s) outside the "
                         f"backward pass, {seconds(t)} in all, with no computation to hide "
                         f"them behind."),
                evidence={"collective_time_s": t, "calls": int(calls)},
                suggestion=("overlap it: let DDP/FSDP reduce gradients during backward, or issue "
                            "it with async_op=True and wait() only where the result is needed"),
                gain_seconds=t,
                method="upper bound: the collective hides behind compute once overlapped")


class PerParameterCollectiveRule(Rule):
    id = "collective-per-parameter"
    category = "imbalance"
    description = "One collective per parameter instead of a few bucketed ones."
    thresholds = {
        "min_ratio": Threshold(0.5, "a line issuing at least one collective per two gradients "
                                    "reduces them one by one; DDP's 25 MiB buckets issue far fewer"),
        "min_calls": Threshold(8, "a handful of calls is a handful of tensors, not a loop over "
                                  "parameters"),
    }

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        grads = ctx.gradients
        if grads <= 0:
            return
        calls: dict[int, list[int]] = {}
        for c in collective_roots(ctx):
            if ctx.owner[c] > 0 and ctx.tree.nodes[c].frame.name.startswith(_COLLECTIVE_OPS):
                calls.setdefault(ctx.owner[c], []).append(c)
        for owner, nodes in calls.items():
            n = sum(ctx.count(c) for c in nodes)
            if n < self.t("min_calls") or n < self.t("min_ratio") * grads:
                continue
            t = sum(max(ctx.inc("op.time")[c], ctx.inc("gpu.time")[c]) for c in nodes)
            severity = self.severity_for(ctx, t) or "note"
            name = ctx.tree.nodes[nodes[0]].frame.name
            yield ctx.finding(
                self, owner, severity=severity,
                title=f"{ctx.where(owner)} issues one {name} per parameter "
                      f"({int(n)} calls for {int(grads)} gradients)",
                message=(f"{ctx.where(owner)} calls {name} {int(n)} times while autograd "
                         f"accumulated {int(grads)} gradients: a collective per tensor pays the "
                         f"launch and latency cost each time, {seconds(t)} in all."),
                evidence={"calls": int(n), "gradients": int(grads), "collective_time_s": t},
                suggestion=("bucket them: wrap the model in DistributedDataParallel (it reduces "
                            "gradients in 25 MiB buckets during backward), or flatten the "
                            "gradients into one tensor (torch._utils._flatten_dense_tensors) "
                            "and reduce that once"),
                gain_seconds=t,
                method="upper bound: the per-call cost of the calls a bucket saves")


RULES = [StragglerRule, BlockingCollectiveRule, PerParameterCollectiveRule]
