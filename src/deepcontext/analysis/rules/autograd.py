"""Inference that builds autograd graphs it never uses: forward operators recorded autograd
nodes (the capture counts them as ``autograd.nodes``: operators that took an autograd sequence
number) but no backward pass ran anywhere in the profile. The graph's bookkeeping and the
activations it keeps alive are pure cost; ``torch.inference_mode()`` skips both."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from ...tree.frame import MARKER, OP
from ..context import ACCUMULATE_GRAD, AnalysisContext
from ..finding import Finding
from ..rule import Rule, Threshold
from ._common import percent, seconds

_BACKWARD_OPS = ("autograd::engine::evaluate_function", ACCUMULATE_GRAD)


class UnusedAutogradRule(Rule):
    id = "autograd-unused"
    category = "cpu_latency"
    description = ("Forward passes record autograd graphs (no torch.no_grad/inference_mode) in "
                   "a program that never runs backward.")
    thresholds = {
        "min_nodes": Threshold(100, "a few graph nodes (a one-off check) cost nothing; 100+ "
                                    "are a forward pass run in grad mode"),
        "min_runs": Threshold(10, "set-up lines (building the model) are not the inference loop"),
        "node_cost_s": Threshold(2e-6, "recording one autograd node costs ~2 us of host time "
                                       "(measured here: torch.mul on 16 floats, 5.3 us in grad "
                                       "mode, 3.2 us under inference_mode)"),
    }

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        if ctx.tree.total("autograd.nodes") <= 0 or self._ran_backward(ctx):
            return
        nodes: dict[int, float] = defaultdict(float)
        spent: dict[int, float] = defaultdict(float)
        for site in ctx.op_sites:
            if site.owner <= 0 or site.backward or ctx.in_setup[site.node]:
                continue
            nodes[site.owner] += ctx.inc("autograd.nodes")[site.node]
            spent[site.owner] += ctx.host_time(site.node)
        for owner, made in nodes.items():
            if made < self.t("min_nodes") or not ctx.repeated(owner, self.t("min_runs")):
                continue
            gain = min(spent[owner], made * self.t("node_cost_s"))
            severity = self.severity_for(ctx, gain)
            if severity is None:
                continue
            yield ctx.finding(
                self, owner, severity=severity,
                title=f"inference at {ctx.where(owner)} builds {made:.0f} autograd nodes that "
                      f"no backward uses",
                message=(f"{ctx.where(owner)} ran {ctx.runs(owner):.0f} times in grad mode: its "
                         f"operators recorded {made:.0f} autograd graph nodes, and no backward "
                         f"pass ran in the whole profile. Its forward took "
                         f"{seconds(spent[owner])} ({percent(ctx.fraction(spent[owner]))} of "
                         f"the run), paying for graph bookkeeping and keeping activations "
                         f"alive for a backward that never comes."),
                evidence={"autograd_nodes": int(made), "runs": int(ctx.runs(owner)),
                          "forward_time_s": spent[owner]},
                suggestion=("run inference without autograd: wrap the loop in `with "
                            "torch.inference_mode():` (or decorate the function with "
                            "@torch.inference_mode(); torch.no_grad() where the outputs must "
                            "later enter autograd), and call model.eval() for dropout and "
                            "batch norm"),
                gain_seconds=gain,
                method=(f"{self.t('node_cost_s') * 1e6:.0f} us of host time per autograd node "
                        f"recorded (the memory of the saved activations comes on top)"))

    @staticmethod
    def _ran_backward(ctx: AnalysisContext) -> bool:
        return any((n.frame.kind == MARKER and n.frame.name == "backward")
                   or (n.frame.kind == OP and n.frame.name.startswith(_BACKWARD_OPS))
                   for n in ctx.tree.nodes)


RULES = [UnusedAutogradRule]
