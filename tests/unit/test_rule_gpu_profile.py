"""All built-in rules on a literal tree shaped like a real GPU profile (docs/gpu.md: kernels
under operators, `HtoD pageable` copies, `cudaStreamSynchronize` sync nodes under the operator
that blocked, a `cuda graph` marker, backward kernels under the forward line)."""

from deepcontext.analysis import analyze
from deepcontext.analysis.testing import build, kernel, marker, memcpy, op, sync, user
from deepcontext.tree.frame import Frame

FP32_GEMM = ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_"
             "aligna4_alignc4_execute_kernel__5x_cublas")
TF32_GEMM = "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16_execute_kernel__5x_cublas"
EW = "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float>>"


def gpu_profile(fp32=True, item_wait=0.2, pageable=True):
    main = user(81, "<module>")
    mm = [main, user(28, "work"), op("aten::matmul"), op("aten::mm")]
    act = [main, user(40, "act")]
    return build([
        (mm + [kernel(FP32_GEMM if fp32 else TF32_GEMM, grid="8x8x1", block="128x1x1")],
         {"gpu.time": 0.30, "gpu.launches": 600}),
        (mm, {"op.time": 0.02, "op.count": 600}),
        ([*mm[:2], marker(), op("MmBackward0"), op("aten::mm"),
          kernel(FP32_GEMM if fp32 else TF32_GEMM)], {"gpu.time": 0.3, "gpu.launches": 600}),
        # a hand-written activation: 5 elementwise ops per call, 5 short kernels
        *[([*act, op(n)], {"op.count": 1000, "op.time": 0.01}) for n in
          ("aten::mul", "aten::add", "aten::tanh", "aten::pow", "aten::mul_")],
        *[([*act, op(n), kernel(EW)], {"gpu.time": 0.004, "gpu.launches": 1000}) for n in
          ("aten::mul", "aten::add", "aten::tanh", "aten::pow", "aten::mul_")],
        ([main, user(50, "log"), op("aten::item"), op("aten::_local_scalar_dense"),
          sync("cudaStreamSynchronize")], {"sync.wait": item_wait, "sync.count": 1000}),
        ([main, user(60, "fetch"), op("aten::to")], {"op.count": 100, "op.time": 0.001}),
        ([main, user(60, "fetch"), op("aten::to"), op("aten::_to_copy"), op("aten::copy_"),
          memcpy("HtoD", pinned=not pageable)],
         {"memcpy.time": 0.1, "memcpy.bytes": 200 << 20, "memcpy.count": 100}),
        ([main, user(70, "replay"), Frame.make("marker", "cuda graph"), user(65, "capture"),
          op("aten::add"), kernel(EW)], {"gpu.time": 0.01, "gpu.launches": 400}),
        ([main, user(90, "step")], {"cpu.time": 0.2}),
    ], metadata={"start_time": 0.0, "end_time": 2.0, "complete": True})


def by_rule(findings):
    return {f.rule: f for f in findings if f.rule != "hotspot"}


def test_each_gpu_rule_fires_at_its_line():
    got = by_rule(analyze(gpu_profile()))
    assert set(got) == {"fp32-matmul", "host-sync", "memcpy", "kernel-fusion"}
    assert got["fp32-matmul"].location.line == 28
    assert got["fp32-matmul"].evidence["time_s"] == 0.6  # forward and backward GEMMs
    assert got["host-sync"].location.line == 50
    assert got["host-sync"].evidence["cause"] == "aten::_local_scalar_dense"
    assert got["memcpy"].location.line == 60 and got["memcpy"].evidence["pinned"] == "false"
    fusion = got["kernel-fusion"]
    assert fusion.location.line == 40 and fusion.evidence["gpu_launches"] == 5000
    assert abs(fusion.estimated_gain.seconds - 0.02 * 4 / 5) < 1e-9


def test_fixing_tf32_sync_and_pinning_silences_those_rules():
    fixed = gpu_profile(fp32=False, item_wait=0.001, pageable=False)
    found = analyze(fixed)
    assert "fp32-matmul" not in by_rule(found) and "memcpy" not in by_rule(found)
    assert "host-sync" not in by_rule(found)


def test_hotspot_ranks_gpu_time_and_names_the_gemm():
    spots = [f for f in analyze(gpu_profile()) if f.rule == "hotspot"]
    assert spots[0].location.line == 28 and "gpu.time" in spots[0].title
    assert FP32_GEMM in spots[0].message
