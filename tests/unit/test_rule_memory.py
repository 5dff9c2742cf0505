"""The memory rules on literal trees: peak holders by kind, allocator churn and retries, leaks."""

from deepcontext.analysis import analyze
from deepcontext.analysis.rules.memory import (AllocatorChurnRule, MemoryLeakRule, PeakHolderRule,
                                               peak_devices)
from deepcontext.analysis.context import AnalysisContext
from deepcontext.analysis.testing import TORCH_DIR, build, lib, marker, op, user
from deepcontext.render.findings import FindingsReport, render

MiB = 1 << 20
REST = ([user(30), op("aten::addmm")], {"op.time": 0.9, "op.count": 100})


def peak(nbytes, device="cuda0"):
    return {f"mem.{device}.peak.bytes": nbytes, "mem.peak.bytes": nbytes}


def holders(*paths, **thresholds):
    return analyze(build([REST, *paths]), rules=[PeakHolderRule(**thresholds)])


def test_devices_come_from_the_metric_names():
    tree = build([([user(1), op("aten::empty")], {**peak(1, "cpu"), **peak(2, "cuda0")})])
    assert peak_devices(AnalysisContext(tree)) == ["cpu", "cuda0"]


def test_forward_tensors_of_a_line_with_backward_are_activations():
    found = holders(
        ([user(12, "forward"), op("aten::relu")], peak(60 * MiB)),
        ([user(12, "forward"), marker(), op("ReluBackward0")], {"op.count": 1}),
        ([user(40, "main"), op("aten::empty")], peak(40 * MiB)))
    act, other = found
    assert act.location.line == 12 and act.severity == "error"
    assert act.evidence["kind"] == "activations" and act.evidence["share"] == 0.6
    assert act.evidence["peak_bytes"] == 60 * MiB and act.evidence["device_peak_bytes"] == 100 * MiB
    assert "torch.utils.checkpoint" in act.suggestion
    assert act.estimated_gain.seconds == 0 and "60MiB" in act.estimated_gain.method
    assert other.location.line == 40 and other.evidence["kind"] == "tensors"
    assert other.severity == "warning"


def test_gradients_and_optimizer_state_are_told_apart():
    grads, state = holders(
        ([user(20, "main"), marker(), op("MulBackward0"), op("aten::mul")], peak(55 * MiB)),
        ([user(21, "main"), lib("step", f"{TORCH_DIR}/optim/adam.py"), op("aten::zeros_like")],
         peak(45 * MiB)))
    assert grads.evidence["kind"] == "gradients" and "zero_grad(set_to_none=True)" in grads.suggestion
    assert state.evidence["kind"] == "optimizer state" and state.location.line == 21


def test_small_holders_are_quiet_and_the_count_is_capped():
    paths = [([user(100 + i), op("aten::empty")], peak(MiB)) for i in range(9)]
    paths.append(([user(99), op("aten::empty")], peak(91 * MiB)))
    (big,) = holders(*paths)  # the 1 MiB lines hold 1% each
    assert big.location.line == 99
    paths = [([user(100 + i), op("aten::empty")], peak(MiB)) for i in range(10)]
    assert len(holders(*paths)) == 5  # each holds a tenth: the five largest are shown


def test_each_device_has_its_own_peak():
    found = holders(([user(10), op("aten::empty")], peak(8 * MiB, "cpu")),
                    ([user(11), op("aten::empty")], peak(80 * MiB, "cuda0")))
    assert sorted((f.evidence["device"], f.evidence["share"]) for f in found) == [
        ("cpu", 1.0), ("cuda0", 1.0)]


def churn(metrics):
    return analyze(build([REST, ([user(15), op("aten::empty")], metrics)]),
                   rules=[AllocatorChurnRule()])


def test_retries_and_ooms_fire():
    (f,) = churn({"mem.alloc.retries": 2, "mem.segment.free.count": 3,
                  "mem.segment.free.bytes": 60 * MiB, "mem.segment.alloc.count": 2})
    assert f.severity == "warning" and f.evidence["retries"] == 2 and f.location.line == 15
    assert "synchronizes" in f.message and "expandable_segments" in f.suggestion
    (f,) = churn({"mem.oom.count": 1, "mem.alloc.retries": 1})
    assert f.severity == "error" and f.title.startswith("out of memory")


def test_repeated_malloc_and_free_fire_and_warm_up_is_quiet():
    (f,) = churn({"mem.segment.alloc.count": 40, "mem.segment.free.count": 10})
    assert "empty_cache" in f.suggestion and f.evidence["segment_frees"] == 10
    assert f.estimated_gain.seconds == 0  # no gpu layer: the driver calls were not timed
    (f,) = churn({"mem.segment.alloc.count": 40, "mem.segment.free.count": 10,
                  "mem.cudamalloc.time": 0.02, "mem.cudafree.time": 0.03})
    assert f.estimated_gain.seconds == 0.05 and "50ms in cudaMalloc/cudaFree" in f.message
    assert churn({"mem.segment.alloc.count": 39, "mem.segment.free.count": 10}) == []
    assert churn({"mem.segment.alloc.count": 200, "mem.segment.free.count": 9}) == []


def leaks(live, allocs, steps=0):
    tree = build([REST, ([user(18), op("aten::empty")],
                         {"mem.live.count": live, "mem.live.bytes": live * 2000,
                          "mem.alloc.count": allocs})],
                 metadata={"start_time": 0.0, "end_time": 1.0, "steps": steps})
    return analyze(tree, rules=[MemoryLeakRule()])


def test_a_line_keeping_every_allocation_is_a_leak():
    (f,) = leaks(100, 100)
    assert f.location.line == 18 and f.evidence["live_bytes"] == 200000
    assert "loss.item()" in f.suggestion
    assert leaks(99, 99) == []     # without step marks, fewer than 100 are model state
    assert leaks(100, 112) == []   # most were freed: not growing


def test_with_steps_a_tensor_kept_per_step_is_a_leak():
    (f,) = leaks(10, 10, steps=10)
    assert "1.95KiB per step over 10 steps" in f.message
    assert leaks(10, 10, steps=11) == []  # fewer kept than steps ran
    assert leaks(9, 9, steps=2) == []


def test_text_renderer_shows_the_bytes_not_a_zero_time_gain():
    found = holders(([user(12), op("aten::empty")], peak(60 * MiB)))
    text = render(FindingsReport(findings=found, profile="x", rules=[PeakHolderRule()],
                                 profiled_time=1.0), "text")
    assert "gain: memory, not time: up to 60MiB off the cuda0 peak" in text
    assert "~0s" not in text


def test_tensor_advice_fits_the_device():
    cpu, gpu = holders(([user(10), op("aten::empty")], peak(8 * MiB, "cpu")),
                       ([user(11), op("aten::empty")], peak(8 * MiB, "cuda0")))
    assert "to the CPU" not in cpu.suggestion and "to the CPU" in gpu.suggestion
