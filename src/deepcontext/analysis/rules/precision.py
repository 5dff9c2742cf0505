"""Precision: fp32 matmuls and convolutions running on plain FP32 units where TF32 or bf16
tensor cores would do the same work several times faster."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator

from ...tree.frame import KERNEL, OP
from ..context import AnalysisContext
from ..finding import Finding
from ..ops import MATMUL_CONV, base_name
from ..rule import Rule, Threshold
from ._common import percent, seconds

# cuBLAS/cuDNN/CUTLASS kernel names of fp32 math without tensor cores...
_FP32 = re.compile(r"sgemm|scudnn|f32f32_f32f32|_simt_|fp32_simt|gemm_fp32", re.IGNORECASE)
# ...and the markers of tensor-core or reduced-precision variants.
_TENSOR_CORE = re.compile(r"tf32|bf16|f16|fp16|h884|h1688|h16816|s1688|s16816|hmma|i8|e4m3|e5m2|"
                          r"tensorop|wgmma|gmma", re.IGNORECASE)


class PrecisionRule(Rule):
    id = "fp32-matmul"
    category = "precision"
    description = ("Matmul/convolution kernels run in full fp32 without tensor cores. On CPU "
                   "profiles the rule stays silent unless operator frames carry a dtype, because "
                   "operator names alone do not say the precision.")
    thresholds = {
        "tensor_core_saving": Threshold(0.5, "TF32 tensor cores peak at 8x fp32 FMA on A100 "
                                             "(156 vs 19.5 TFLOPS); half is conservative"),
    }

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        spent: dict[int, float] = defaultdict(float)
        kernels: dict[int, set[str]] = defaultdict(set)
        for node in ctx.tree.nodes[1:]:
            f = node.frame
            owner = ctx.owner[node.id]
            if owner <= 0:
                continue
            if f.kind == KERNEL and _FP32.search(f.name) and not _TENSOR_CORE.search(f.name):
                spent[owner] += node.metrics.get("gpu.time", 0.0)
                kernels[owner].add(f.name)
            elif (f.kind == OP and f.get("dtype") in ("float32", "torch.float32")
                  and base_name(f.name) in MATMUL_CONV and not ctx.has_gpu):
                spent[owner] += node.metrics.get("op.time", 0.0)
                kernels[owner].add(f.name)
        for owner, t in spent.items():
            gain = t * self.t("tensor_core_saving")
            severity = self.severity_for(ctx, gain)
            if severity is None:
                continue
            names = sorted(kernels[owner])
            on_gpu = ctx.has_gpu
            yield ctx.finding(
                self, owner, severity=severity,
                title=f"fp32 matmul/conv without tensor cores at {ctx.where(owner)} "
                      f"({seconds(t)})",
                message=(f"{ctx.where(owner)} runs {len(names)} fp32 matmul/convolution "
                         f"{'kernel' if on_gpu else 'operator'}(s) (e.g. {names[0][:80]}) for "
                         f"{seconds(t)} ({percent(ctx.fraction(t))} of the run) on plain fp32 "
                         f"units."),
                evidence={"time_s": t, "kernels": len(names), "example": names[0][:200]},
                suggestion=("allow TF32 tensor cores: torch.set_float32_matmul_precision('high') "
                            "(and torch.backends.cudnn.allow_tf32 = True for convolutions), or "
                            "run the step under torch.autocast('cuda', dtype=torch.bfloat16)"
                            if on_gpu else
                            "on CPUs with AMX/AVX512-BF16 run the step under "
                            "torch.autocast('cpu', dtype=torch.bfloat16)"),
                gain_seconds=gain,
                method=f"tensor cores: conservatively {self.t('tensor_core_saving'):.0%} of the "
                       f"fp32 kernel time")


RULES = [PrecisionRule]
