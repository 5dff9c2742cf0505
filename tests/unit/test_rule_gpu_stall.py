"""gpu-stall on literal trees with instruction frames (PC sampling)."""

from deepcontext.analysis import analyze
from deepcontext.analysis.rules.gpu_stall import GpuStallRule
from deepcontext.analysis.testing import build, instruction, kernel, op, user

K = [user(15, "attention"), op("aten::bmm"), kernel("my_attention_kernel", grid="(128,1,1)",
                                                      block="(256,1,1)", registers=64)]
REST = ([user(30), op("aten::relu"), kernel("elementwise")], {"gpu.time": 0.5})


def stall_tree(long_sb, other, total_samples=None):
    hot, cold = K + [instruction("0x1a0", source="attn.cu:42")], K + [instruction("0x2b0")]
    return build([REST, (K, {"gpu.time": 0.5, "gpu.launches": 10}),
                  (hot, {"pc.samples": total_samples or long_sb, "stall.long_scoreboard": long_sb}),
                  (cold, {"pc.samples": other, "stall.wait": other})])


def run(tree):
    return analyze(tree, rules=[GpuStallRule()])


def test_dominant_stall_reason_points_at_the_hot_instruction():
    (f,) = run(stall_tree(600, 400))
    assert f.evidence["reason"] == "long_scoreboard" and f.evidence["reason_share"] == 0.6
    assert "attn.cu:42" in f.message and f.path[-1] == "0x1a0"
    assert f.location.line == 15 and "coalesce" in f.suggestion
    assert abs(f.estimated_gain.seconds - 0.3) < 1e-9


def test_quiet_when_no_reason_passes_thirty_percent():
    tree = build([REST, (K, {"gpu.time": 0.5}),
                  (K + [instruction("0x1")], {"pc.samples": 1000, "stall.long_scoreboard": 290,
                                              "stall.wait": 280, "stall.barrier": 280})])
    assert run(tree) == []


def test_quiet_with_too_few_samples_or_no_instruction_frames():
    assert run(stall_tree(60, 39)) == []
    assert run(build([REST, (K, {"gpu.time": 0.5})])) == []


def test_pc_sampling_metric_names_are_read_too():
    # the PC sampling source's names: pc.samples.<reason>, here kept on the kernel node
    from deepcontext.analysis.rules.gpu_stall import GpuStallRule
    tree = build([([user(5), op("aten::mm"), kernel("gemm")],
                   {"gpu.time": 0.5, "gpu.launches": 10, "pc.samples": 1000,
                    "pc.samples.long_scoreboard": 600, "pc.samples.wait": 100})])
    (f,) = analyze(tree, rules=[GpuStallRule()])
    assert f.evidence["reason"] == "long_scoreboard" and f.evidence["reason_share"] == 0.6
    assert f.location.line == 5 and "coalesce" in f.suggestion
