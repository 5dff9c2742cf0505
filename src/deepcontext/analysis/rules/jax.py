"""JAX: a jitted function compiled again and again (new shapes, dtypes or static arguments
retrace and recompile it), and lines that make the host wait for the device every step
(``block_until_ready``, ``jax.device_get``, ``float(x)`` / ``x.item()`` / ``print(x)``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from ...tree.frame import MARKER, OP, SYNC
from ..context import AnalysisContext
from ..finding import Finding
from ..rule import Rule, Threshold
from ._common import percent, seconds

_ROUND_TRIP_ADVICE = {
    "jax device-to-host copy": (
        "keep values on the device inside the loop: accumulate metrics as jax arrays (or inside "
        "the jitted step) and convert with float()/jax.device_get once every N steps or at the "
        "end; print arrays only when logging"),
    "jax device_get": (
        "fetch results less often: return what you need from the jitted step and call "
        "jax.device_get on it every N steps, not every step"),
    "jax block_until_ready": (
        "let dispatch run ahead: JAX queues work asynchronously, so block only where a value "
        "is needed on the host (timing, logging every N steps), not every step"),
}


# The phases the JAX layer hangs under its `[marker] compile` (capture/jax/layer.py's
# COMPILE_PHASES and its autotuning marker). torch.compile's compile markers carry
# "compile: <phase>" markers instead (docs/torch-compile.md), or none.
JAX_COMPILE_PHASES = frozenset({"trace", "lower to StableHLO", "XLA compile",
                                "load from compilation cache", "autotuning"})


def is_jax_compile(ctx: AnalysisContext, node: int) -> bool:
    """Whether the `[marker] compile` node `node` is JAX's: under a jitted call's `[op] jit(...)`,
    or with JAX's phases below it."""
    parent = ctx.tree.nodes[ctx.tree.nodes[node].parent].frame
    if parent.kind == OP and parent.name.startswith("jit("):
        return True
    return any(ctx.tree.nodes[c].frame.kind == MARKER and
               ctx.tree.nodes[c].frame.name in JAX_COMPILE_PHASES
               for c in ctx.tree.nodes[node].children)


def _steps(ctx: AnalysisContext) -> int:
    steps = ctx.metadata.get("steps")
    return int(steps) if isinstance(steps, (int, float)) and steps > 0 else 0


class JaxRecompileRule(Rule):
    id = "jax-recompile"
    category = "compile"
    description = ("A jitted function was compiled many times: every new input shape, dtype or "
                   "static argument value traces and compiles it again, and the step waits.")
    thresholds = {
        "min_compiles": Threshold(3, "a function compiled twice at one line is normal "
                                     "(training and evaluation shapes, a last partial batch); "
                                     "three or more there is a shape or static argument that "
                                     "changes. Counted per line: a library's jitted function "
                                     "(jax.random.normal) compiles once for each shape its "
                                     "callers ask for, once each"),
    }

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        count: dict[str, float] = defaultdict(float)
        spent: dict[str, float] = defaultdict(float)
        at: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
        inc_count, inc_time = ctx.inc("compile.count"), ctx.inc("compile.time")
        for node in ctx.tree.nodes[1:]:
            f = node.frame
            if f.kind != MARKER or f.name != "compile" or not is_jax_compile(ctx, node.id):
                continue  # (torch.compile's are compile.py's)
            parent = ctx.tree.nodes[node.parent].frame
            name = parent.name if parent.kind == OP else "<jax>"
            count[name] += inc_count[node.id]
            spent[name] += inc_time[node.id]
            at[name][ctx.owner[node.id]] += inc_count[node.id]
        for name, k in sorted(count.items(), key=lambda kv: -spent[kv[0]]):
            lines = {o: c for o, c in at[name].items() if o > 0}
            if not lines or max(lines.values()) < self.t("min_compiles"):
                continue
            owner = max(lines, key=lambda o: lines[o])
            gain = spent[name] * (k - 1) / k
            severity = self.severity_for(ctx, gain) or "note"
            where = ", ".join(f"{ctx.where(o)} ({c:.0f}x)" for o, c in
                              sorted(lines.items(), key=lambda kv: -kv[1]))
            steps = _steps(ctx)
            per_step = f", {k / steps:.2g} per step" if steps else ""
            yield ctx.finding(
                self, owner, severity=severity,
                title=f"{name} compiled {k:.0f} times ({seconds(spent[name])} compiling)",
                message=(f"{name} was traced and compiled {k:.0f} times{per_step}, at {where}, "
                         f"spending {seconds(spent[name])}. JAX compiles once per distinct "
                         f"input shape, dtype, static argument value and pytree structure."),
                evidence={"compiles": int(k), "compile_time_s": spent[name], "function": name},
                suggestion=("in a loop, keep the shapes fixed (pad or bucket the last batch and "
                            "variable lengths) and pass changing Python values as arrays instead "
                            "of static_argnums; in set-up code that makes arrays of several "
                            "shapes (parameters layer by layer with jax.random), make them with "
                            "numpy (np.random.default_rng) and convert with jnp.asarray, which "
                            "compiles nothing, where JAX's own random stream is not needed; see "
                            "why each call missed the cache with "
                            "jax.config.update('jax_explain_cache_misses', True)"),
                gain_seconds=gain,
                method="compile time of every compilation but the first")


class JaxHostRoundTripRule(Rule):
    id = "jax-host-round-trip"
    category = "sync"
    description = ("A line makes the host wait for the device over and over: block_until_ready, "
                   "jax.device_get or turning an array into a Python value (float(x), x.item(), "
                   "print(x)) stops JAX's asynchronous dispatch each time.")
    thresholds = {
        "min_round_trips": Threshold(10, "a few waits (after warm-up, at the end, for a log "
                                         "line) are not in hot code; one per step is"),
    }

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        count: dict[int, float] = defaultdict(float)
        wait: dict[int, float] = defaultdict(float)
        kinds: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for node in ctx.tree.nodes[1:]:
            f = node.frame
            if f.kind != SYNC or not f.name.startswith("jax "):
                continue
            owner = ctx.owner[node.id]
            if owner <= 0:
                continue
            c = node.metrics.get("sync.count", 0.0)
            count[owner] += c
            wait[owner] += node.metrics.get("sync.wait", 0.0)
            kinds[owner][f.name] += c
        steps = _steps(ctx)
        for owner, k in count.items():
            if k < self.t("min_round_trips"):
                continue
            what = max(kinds[owner], key=lambda n: kinds[owner][n])
            w = wait[owner]
            severity = self.severity_for(ctx, w) or "note"
            per_step = f" ({k / steps:.2g} per step)" if steps else ""
            yield ctx.finding(
                self, owner, severity=severity,
                title=f"{k:.0f} host round trips at {ctx.where(owner)} ({what.removeprefix('jax ')})",
                message=(f"{ctx.where(owner)} waited for the device {k:.0f} times{per_step} "
                         f"through {what.removeprefix('jax ')}, blocking the host for "
                         f"{seconds(w)} ({percent(ctx.fraction(w))} of the run); while it "
                         f"waits no new work is dispatched, so the device idles after each."),
                evidence={"round_trips": int(k), "sync_wait_s": w, "cause": what},
                suggestion=_ROUND_TRIP_ADVICE.get(what, _ROUND_TRIP_ADVICE["jax block_until_ready"]),
                gain_seconds=w,
                method="upper bound: the time the host spent blocked at this line")


RULES = [JaxRecompileRule, JaxHostRoundTripRule]
