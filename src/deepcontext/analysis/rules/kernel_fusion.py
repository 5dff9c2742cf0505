"""Kernel fusion: one call of a function issuing several small elementwise operators (each a
separate kernel on the GPU, a separate pass over memory on the CPU) that could be one.

A chain is consecutive work inside one call of one function: the user's own, or a library's
(GPT-2's ``gelu_new`` in transformers) found at its library line and reported at the user's
line that calls it, with the lever the user has there (a config field, a module swap)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from ...tree.frame import MODULE, PYTHON
from ...tree.usercode import is_user_file
from ..context import AnalysisContext, OpSite
from ..finding import Finding, Location
from ..ops import CHAIN_BREAKERS, backward_of, base_name, is_pointwise
from ..rule import Rule, Threshold
from ._common import (callable_name, calls_per_invocation, compile_advice, function_regions,
                      inside_torch_optim, line_executions, module_path, module_pattern, percent,
                      row_loops, seconds, short_file, sites_by_code_line, split_by_executions)

# Hand-written compositions and the fused API that replaces them: (ops all present, ops none
# present, API). First match wins; reductions (sum, mean) tell a softmax or a norm apart.
_KNOWN = (
    ({"tanh", "mul", "add"}, set(), "torch.nn.functional.gelu(x, approximate='tanh')",
     "torch.nn.GELU(approximate='tanh')"),
    ({"erf", "mul", "add"}, set(), "torch.nn.functional.gelu(x)", "torch.nn.GELU()"),
    ({"sigmoid", "mul"}, set(), "torch.nn.functional.silu(x)", "torch.nn.SiLU()"),
    ({"exp", "div", "sum"}, set(), "torch.softmax(x, dim)", "torch.nn.Softmax(dim)"),
    ({"exp", "div"}, {"sum"}, "torch.nn.functional.silu(x) for x / (1 + exp(-x)), "
                              "torch.sigmoid(x) for 1 / (1 + exp(-x))", "torch.nn.SiLU()"),
    ({"rsqrt", "mul", "mean"}, set(), "torch.nn.functional.rms_norm(x, shape, weight)",
     "torch.nn.RMSNorm(shape)"),
    ({"sqrt", "sub", "div", "mean"}, set(), "torch.nn.functional.layer_norm(x, shape, weight, "
                                            "bias)", "torch.nn.LayerNorm(shape)"),
)

# Fused APIs whose CPU backward is still the decomposed chain (torch 2.13: rms_norm's forward is
# _fused_rms_norm, its backward PowBackward/MeanBackward/RsqrtBackward...).
_COMPOSITE_CPU_BACKWARD = frozenset({"torch.nn.functional.rms_norm(x, shape, weight)"})

# transformers' activation classes written as Python math, and the config value that selects
# the same function as one fused operator.
_HF_ACTIVATIONS = {"NewGELUActivation": "gelu_pytorch_tanh", "FastGELUActivation":
                   "gelu_pytorch_tanh", "GELUTanh": "gelu_pytorch_tanh",
                   "GELUActivation": "gelu", "SiLUActivation": "silu"}


class KernelFusionRule(Rule):
    id = "kernel-fusion"
    category = "kernel_fusion"
    description = ("One call of a function (yours or a library's) issues several elementwise "
                   "operators; each reads and writes all of memory (and on a GPU is its own "
                   "kernel launch). A fused API, torch.compile or a Triton kernel does it in "
                   "one pass.")
    thresholds = {
        "min_ops_per_call": Threshold(4, "2-3 elementwise ops per statement (a*b+c) are normal; "
                                         "4+ per call is a hand-written activation/normalization"),
        "min_distinct_ops": Threshold(2, "one op repeated is a loop, not a fusion candidate"),
        "min_compile_op_s": Threshold(20e-6, "on the CPU, a chain without a fused API whose "
                                             "operators average under 20 us is dispatch-bound: "
                                             "torch.compile's own per-call overhead (tens of "
                                             "us) eats the saving, so it stays a note"),
        "max_execution_ratio": Threshold(2, "lines of one chain run equally often; a line run "
                                            "many times per call is a loop over other tensors "
                                            "(an optimizer update), not a link of the chain"),
    }

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        # (an optimizer's per-parameter update runs below the line that calls step(): the
        # optimizer rule's, fixed by fused=True or foreach, not by compiling that line)
        by_line = {line: kept for line, sites in sites_by_code_line(ctx).items()
                   if (kept := [s for s in sites if not inside_torch_optim(ctx, s.node)])}
        # a per-row loop is cpu-latency's: vectorizing it removes the chain's repetitions
        looped = {line for loop in row_loops(ctx, min_iterations=8, max_ops_per_iteration=64,
                                              max_mean_op_s=50e-6) for line in loop.lines}
        chains: dict[tuple, list[dict]] = defaultdict(list)
        for region in function_regions(ctx, list(by_line)):
            runs = {line: line_executions(ctx, by_line[line]) for line in region}
            for group in split_by_executions(runs, self.t("max_execution_ratio")):
                if looped.intersection(group):
                    continue
                chain = self._chain(ctx, group, by_line)
                if chain is not None:
                    chains[(ctx.owner[group[0]], chain["origin"])].append(chain)
        for parts in chains.values():
            yield from self._finding(ctx, parts)

    def _chain(self, ctx: AnalysisContext, group: list[int],
               by_line: dict[int, list[OpSite]]) -> dict | None:
        """The longest run of elementwise work in one call: the group's lines in source order,
        a line that issues a matmul, convolution or norm starting a new segment (its own
        elementwise ops run after it: ``relu(bn(conv(x)))``)."""
        segments: list[list[int]] = []
        for line in sorted(group, key=lambda n: ctx.tree.nodes[n].frame.line):
            breaks = any(base_name(s.name) in CHAIN_BREAKERS for s in by_line[line]
                         if not s.backward)
            if breaks or not segments:
                segments.append([])
            segments[-1].append(line)
        chains = [c for c in (self._segment(ctx, seg, by_line) for seg in segments) if c]
        return max(chains, key=lambda c: c["per_call"]) if chains else None

    def _segment(self, ctx: AnalysisContext, lines: list[int],
                 by_line: dict[int, list[OpSite]]) -> dict | None:
        per_call, names, fwd, bwd, best, best_calls = 0.0, set(), [], [], -1, -1.0
        others: set[str] = set()
        for line in lines:
            sites = [s for s in by_line[line] if not s.backward]
            pointwise = [s for s in sites if is_pointwise(s.name)]
            others.update(base_name(s.name) for s in sites)
            if not pointwise:
                continue
            per_call += calls_per_invocation(ctx, sites, pointwise)
            names.update(base_name(s.name).rstrip("_") for s in pointwise)
            fwd += [s.node for s in pointwise]
            calls = sum(ctx.count(s.node) for s in pointwise)
            if calls > best_calls:
                best, best_calls = line, calls
        if (best < 0 or per_call < self.t("min_ops_per_call")
                or len(names) < self.t("min_distinct_ops")):
            return None
        # the chain's own backward (MulBackward0...), not the line's matmuls' and convs'
        bwd = [s.node for line in lines for s in by_line[line]
               if s.backward and (backward_of(s.name) in names
                                  or backward_of(s.name).split("_")[0] in names)]
        f = ctx.tree.nodes[best].frame
        origin = None if is_user_file(f.file) else Location(f.file, f.line, f.name)
        runs = line_executions(ctx, [s for s in by_line[best] if not s.backward])
        return {"node": best, "lines": sorted(ctx.tree.nodes[n].frame.line for n in lines),
                "runs": runs, "per_call": per_call, "names": names, "all": names | others,
                "fwd": fwd, "bwd": bwd, "origin": origin, "module": module_path(ctx, best)}

    def _finding(self, ctx: AnalysisContext, parts: list[dict]) -> Iterator[Finding]:
        head = max(parts, key=lambda p: sum(ctx.count(n) for n in p["fwd"]))
        fwd = [n for p in parts for n in p["fwd"]]
        bwd = [n for p in parts for n in p["bwd"]]
        per_call, names, origin = head["per_call"], head["names"], head["origin"]
        host = sum(ctx.host_time(n) for n in fwd + bwd)
        gpu = sum(ctx.inc("gpu.time")[n] for n in fwd + bwd)
        launches = sum(ctx.inc("gpu.launches")[n] for n in fwd + bwd)
        fused = next(((api, mod) for need, never, api, mod in _KNOWN
                      if need <= head["all"] and not never & head["all"]), None)
        if gpu <= 0 and fused and fused[0] in _COMPOSITE_CPU_BACKWARD:
            # its CPU backward is the same chain of operators: only the forward gets faster
            host = sum(ctx.host_time(n) for n in fwd)
            bwd = []
        spent, where = (gpu, "GPU") if gpu > 0 else (host, "host")
        # A fused kernel makes one pass where the chain made ``per_call``: keep 1/per_call.
        gain = spent * (1 - 1 / per_call)
        severity = self.severity_for(ctx, gain)
        if severity is None:
            return
        mean_op = host / max(1.0, sum(ctx.count(n) for n in fwd + bwd))
        if gpu <= 0 and fused is None and mean_op < self.t("min_compile_op_s"):
            # dispatch-bound operators on tiny tensors: the only lever, torch.compile, pays a
            # per-call overhead of its own about as large as what fusing would save
            severity = "note"
        in_forward = origin is None or _inside_module_call(ctx, head["node"])
        if not in_forward and severity == "note" and _hf_activation(origin) is None:
            return  # a library's own bookkeeping (generate's beam search): no lever of yours
        lines = head["lines"]
        span = f"lines {lines[0]}-{lines[-1]}" if len(lines) > 1 else f"line {lines[0]}"
        node = head["node"]
        frame = ctx.tree.nodes[node].frame
        fn = frame.name
        calls = sum(ctx.count(n) for n in fwd)
        modules = module_pattern([p["module"] for p in parts])
        evidence = {"ops_per_call": round(per_call, 2), "distinct_ops": len(names),
                    "op_calls": int(calls), "time_s": spent, "backward_time_s": sum(
                        ctx.inc("gpu.time" if gpu > 0 else "op.time")[n] for n in bwd)}
        if origin is not None:
            evidence["library_function"] = f"{short_file(origin.file)}:{origin.line} {fn}"
        if modules:
            evidence["module"] = modules
        if gpu > 0:
            evidence["gpu_launches"] = int(launches)
            evidence["mean_kernel_s"] = gpu / launches if launches else 0.0
        what = callable_name(fn)
        if origin is not None:
            span = (f"{short_file(origin.file)}:{origin.line}"
                    + (f", module {modules}" if modules else "")
                    + f", called from {ctx.where(node)}")
        ops = ", ".join(sorted(names))
        yield ctx.finding(
            self, node, severity=severity,
            title=(f"{per_call:.0f} elementwise ops per call of {what} could be one fused "
                   f"kernel"),
            message=(f"{what} ({span}) issues "
                     f"{per_call:.1f} elementwise operators per call ({ops}; {calls:.0f} calls; "
                     + ("with their backward " if bwd else "forward ") + f"they took "
                     f"{seconds(spent)} of {where} time, "
                     f"{percent(ctx.fraction(spent))} of the run). Each is a separate pass over "
                     f"memory" + (" and a separate kernel launch." if gpu > 0 else ".")),
            evidence=evidence,
            suggestion=self._fix(ctx, node, origin, fused, modules, in_forward),
            gain_seconds=gain,
            method=(f"a fused kernel makes one pass instead of {per_call:.1f}: saves "
                    f"(1 - 1/{per_call:.1f}) of the chain's {where} time, forward"
                    + (" and backward" if bwd else "")),
            origin=origin)

    @staticmethod
    def _fix(ctx: AnalysisContext, node: int, origin: Location | None,
             fused: tuple[str, str] | None, modules: str, in_forward: bool) -> str:
        frame = ctx.tree.nodes[node].frame
        if origin is None:
            if fused:
                return (f"replace the hand-written math with {fused[0]} (one kernel, forward and "
                        f"backward); or {compile_advice(frame)}")
            return (f"fuse the chain: {compile_advice(frame)} (Inductor emits one kernel for "
                    f"the chain), or write one Triton/C++ kernel")
        cls = origin.function.rsplit(".", 1)[0] if "." in origin.function else ""
        at = f"the library code {short_file(origin.file)}:{origin.line} ({origin.function})"
        user = ctx.where(node)
        if not in_forward:
            return (f"the chain is {at}, outside any nn.Module's forward, so compiling the "
                    f"model does not reach it and no argument at {user} removes it: it is the "
                    f"library's to fuse (report it upstream with this finding's evidence)")
        lever = ""
        if (value := _hf_activation(origin)) is not None:
            lever = (f"select the fused activation in the model's config: "
                     f"activation_function='{value}' (GPT-2 style configs) or "
                     f"hidden_act='{value}' (BERT/Llama style), the same "
                     f"function as one operator; or ")
        elif fused and cls:
            target = f"the {cls} modules" + (f" ({modules})" if modules else "")
            lever = (f"swap {target} for {fused[1]} (e.g. set the attribute on their parent "
                     f"module after building the model); or ")
        return (f"{lever}compile the model that {user} calls: `compiled = torch.compile("
                f"model)` and call `compiled(...)` there, which fuses the chain in {at}")


def _hf_activation(origin: Location | None) -> str | None:
    """The config value that selects a Hugging Face activation's fused form, for a chain in it."""
    if origin is None or "transformers/" not in origin.file.replace("\\", "/"):
        return None
    return _HF_ACTIVATIONS.get(origin.function.rsplit(".", 1)[0])


def _inside_module_call(ctx: AnalysisContext, node: int) -> bool:
    """Whether the chain runs inside an nn.Module's call (what compiling the model covers)."""
    for a in ctx.ancestors(node):
        f = ctx.tree.nodes[a].frame
        if f.kind == MODULE or (f.kind == PYTHON and f.name in _MODULE_CALL and f.file.replace(
                "\\", "/").endswith("torch/nn/modules/module.py")):
            return True
    return False


_MODULE_CALL = frozenset({"Module._call_impl", "Module._wrapped_call_impl"})

RULES = [KernelFusionRule]
