"""fp32-matmul on literal trees: fp32 SIMT GEMM kernels fire, tensor-core kernels do not."""

from deepcontext.analysis import analyze
from deepcontext.analysis.rules.precision import PrecisionRule
from deepcontext.analysis.testing import build, kernel, op, user

REST = ([user(30), op("aten::relu"), kernel("elementwise")], {"gpu.time": 0.8, "gpu.launches": 1})


def run(*paths):
    return analyze(build([REST, *paths]), rules=[PrecisionRule()])


def test_fp32_sgemm_fires_with_tf32_advice():
    (f,) = run(([user(7), op("aten::mm"), kernel("ampere_sgemm_128x64_nn")],
                {"gpu.time": 0.2, "gpu.launches": 100}))
    assert f.location.line == 7 and f.estimated_gain.seconds == 0.1
    assert "set_float32_matmul_precision('high')" in f.suggestion


def test_tensor_core_kernels_are_quiet():
    assert run(([user(7), op("aten::mm"), kernel("sm80_xmma_gemm_tf32f32_tf32f32_f32_nn")],
                {"gpu.time": 0.2}),
               ([user(8), op("aten::mm"), kernel("ampere_bf16_s16816gemm_bf16_128x64")],
                {"gpu.time": 0.2})) == []


def test_cpu_ops_without_dtype_say_nothing():
    tree = build([([user(7), op("aten::mm")], {"op.time": 1.0, "op.count": 10})])
    assert analyze(tree, rules=[PrecisionRule()]) == []


def test_cpu_ops_with_fp32_dtype_get_an_autocast_hint():
    tree = build([([user(7), op("aten::mm", dtype="float32")], {"op.time": 1.0, "op.count": 10})])
    (f,) = analyze(tree, rules=[PrecisionRule()])
    assert "autocast('cpu'" in f.suggestion
