"""host-sync on literal trees: measured waits on GPU profiles, .item() counts on CPU ones."""

from deepcontext.analysis import analyze
from deepcontext.analysis.rules.sync import SyncRule
from deepcontext.analysis.testing import build, lib, op, sync, user

REST = ([user(30), op("aten::addmm")], {"op.time": 0.95, "op.count": 100})


def run(tree):
    return analyze(tree, rules=[SyncRule()])


def gpu_tree(wait):
    frames = [user(12), op("aten::item"), op("aten::_local_scalar_dense"), sync()]
    return build([REST, (frames, {"sync.wait": wait, "sync.count": 100}),
                  ([user(30), op("aten::addmm"), op("k")], {"gpu.time": 0.5, "gpu.launches": 10})])


def test_measured_wait_fires_at_the_blocking_line_and_names_the_op():
    (f,) = run(gpu_tree(0.05))
    assert f.location.line == 12 and f.severity == "warning"
    assert f.evidence == {"sync_wait_s": 0.05, "sync_count": 100,
                          "cause": "aten::_local_scalar_dense"}
    assert ".item() once" in f.suggestion
    assert f.estimated_gain.seconds == 0.05


def test_measured_wait_below_the_note_floor_is_quiet():
    assert run(gpu_tree(0.001)) == []


def test_cpu_only_item_in_a_loop_is_a_note():
    tree = build([REST, ([user(14), op("aten::item")], {"op.count": 100, "op.time": 1e-4})])
    (f,) = run(tree)
    assert f.severity == "note" and f.location.line == 14 and f.evidence["calls"] == 100


def test_cpu_only_quiet_just_below_min_calls():
    tree = build([REST, ([user(14), op("aten::item")], {"op.count": 99, "op.time": 1e-4})])
    assert run(tree) == []


def test_cpu_only_optimizer_step_counters_are_not_syncs():
    # single-tensor Adam reads each parameter's step counter with .item(): a CPU tensor (not
    # capturable), so no sync on a GPU either
    from deepcontext.analysis.testing import TORCH_DIR

    step = [user(11), lib("_single_tensor_adam", f"{TORCH_DIR}/optim/adam.py", 546)]
    tree = build([REST, (step + [op("aten::item")], {"op.count": 840, "op.time": 5e-4})])
    assert run(tree) == []


def test_library_call_points_at_the_users_line():
    tree = build([REST, ([user(7), lib("log_metrics", "/x/site-packages/lightning/log.py"),
                          op("aten::item")], {"op.count": 500, "op.time": 1e-3})])
    (f,) = run(tree)
    assert f.location.line == 7


def test_wait_on_a_busy_gpu_gains_nothing():
    # the function's kernels keep the GPU busy 2 s while its host time (ops + waits) is 1 s:
    # the waits are the GPU being the bottleneck, not the host starving it
    frames = [user(12), op("aten::item"), op("aten::_local_scalar_dense"), sync()]
    tree = build([REST, (frames, {"sync.wait": 0.05, "sync.count": 100}),
                  ([user(30), op("aten::addmm"), op("k")], {"gpu.time": 2.0, "gpu.launches": 10})])
    assert run(tree) == []


def test_host_bound_loop_gains_the_whole_wait():
    # 0.95 s of ops launch 0.8 s of GPU work: the GPU idles through every wait
    frames = [user(12), op("aten::item"), op("aten::_local_scalar_dense"), sync()]
    tree = build([REST, (frames, {"sync.wait": 0.3, "sync.count": 100}),
                  ([user(30), op("aten::addmm"), op("k")], {"gpu.time": 0.8, "gpu.launches": 10})])
    (f,) = run(tree)
    assert abs(f.estimated_gain.seconds - 0.3) < 1e-9
    assert f.evidence["sync_wait_s"] == 0.3


def test_gpu_bound_loop_loses_one_launch_per_sync():
    # GPU busy 1.1 s >= host 0.95 s: the launches overlap the GPU; each of the 1000 syncs idles
    # it for one launch: 0.95 s / 100,000 launches = 9.5 us each
    frames = [user(12), op("aten::item"), op("aten::_local_scalar_dense"), sync()]
    tree = build([([user(30), op("aten::addmm")], {"op.time": 0.95, "op.count": 1e5}),
                  (frames, {"sync.wait": 0.3, "sync.count": 1000}),
                  ([user(30), op("aten::addmm"), op("k")], {"gpu.time": 1.1, "gpu.launches": 1e5})])
    (f,) = run(tree)
    assert abs(f.estimated_gain.seconds - 1000 * 9.5e-6) < 1e-9


def test_gpu_bound_launch_latency_is_capped():
    # the same with 1000 launches: 0.95 ms of host time per launch is not launch latency (it
    # overlaps the GPU's work); each sync idles the GPU at most 50 us
    frames = [user(12), op("aten::item"), op("aten::_local_scalar_dense"), sync()]
    tree = build([([user(30), op("aten::addmm")], {"op.time": 0.95, "op.count": 1000}),
                  (frames, {"sync.wait": 0.3, "sync.count": 1000}),
                  ([user(30), op("aten::addmm"), op("k")], {"gpu.time": 1.1, "gpu.launches": 1000})])
    (f,) = run(tree)
    assert abs(f.estimated_gain.seconds - 1000 * 50e-6) < 1e-9


def test_a_sync_run_a_few_times_is_not_hot():
    frames = [user(12), op("aten::item"), op("aten::_local_scalar_dense"), sync()]
    tree = build([REST, (frames, {"sync.wait": 0.05, "sync.count": 9}),
                  ([user(30), op("aten::addmm"), op("k")], {"gpu.time": 0.5, "gpu.launches": 10})])
    assert run(tree) == []


def test_setup_lines_run_less_often_than_the_sync_stay_outside_its_loop():
    # line 5 (warm-up, 3 calls with a 0.9 s first-call cost) is not in the loop of the 20 syncs
    # at line 12: counted, it would make the loop look host-bound and the 0.25 s wait a warning;
    # the loop itself (line 10: 80 launches, GPU-bound) idles the GPU 20 x 50 us: nothing
    frames = [user(12), sync("cudaDeviceSynchronize")]
    tree = build([([user(5), op("aten::mm")], {"op.time": 0.9, "op.count": 3}),
                  ([user(5), op("aten::mm"), op("k")], {"gpu.time": 0.03, "gpu.launches": 3}),
                  ([user(10), op("aten::mm")], {"op.time": 0.01, "op.count": 80}),
                  ([user(10), op("aten::mm"), op("k")], {"gpu.time": 0.25, "gpu.launches": 80}),
                  (frames, {"sync.wait": 0.25, "sync.count": 20})])
    assert run(tree) == []


def test_a_warm_up_issuing_more_operators_than_the_loop_syncs_stays_outside():
    # benchmarks/fixes/fusion.py "after" on an H100: the warm-up line (3 steps of 9 operators,
    # 27 operator calls, their first calls 0.17 s of cuBLAS and module loading) ran 3 times, not
    # once per sync, though its operator count passes the 20 syncs; the loop is GPU-bound
    mms = [([user(5), op(f"aten::op{i}")], {"op.time": 0.02, "op.first_time": 0.019,
                                            "op.count": 3}) for i in range(9)]
    frames = [user(12), sync("cudaDeviceSynchronize")]
    tree = build([*mms,
                  ([user(10), op("aten::mm")], {"op.time": 0.002, "op.count": 180}),
                  ([user(10), op("aten::mm"), op("k")], {"gpu.time": 0.0101, "gpu.launches": 80}),
                  (frames, {"sync.wait": 0.0107, "sync.count": 20})])
    (f,) = run(tree)  # counted, the warm-up made the loop host-bound and the whole wait a warning
    assert f.severity == "note" and abs(f.estimated_gain.seconds - 20 * 0.002 / 80) < 1e-12


def test_first_calls_inside_the_loop_are_not_its_host_time():
    # the loop's own first iteration loads the kernels (0.5 s); steady, its 0.01 s of operators
    # keep the GPU busy 0.25 s: GPU-bound, each sync idles it one launch, under the note floor
    frames = [user(12), sync("cudaDeviceSynchronize")]
    tree = build([([user(10), op("aten::mm")], {"op.time": 0.51, "op.first_time": 0.5,
                                                 "op.count": 80}),
                  ([user(10), op("aten::mm"), op("k")], {"gpu.time": 0.25, "gpu.launches": 80}),
                  (frames, {"sync.wait": 0.25, "sync.count": 20})])
    assert run(tree) == []


HF = "/usr/lib/python3.11/site-packages/transformers/trainer.py"


def test_the_hf_trainers_nan_filter_gets_its_switch():
    # Trainer._run_epoch: `if ... (torch.isnan(tr_loss_step) or torch.isinf(tr_loss_step))`,
    # one is_nonzero per test per step, on the device when training on a GPU
    frames = [user(42), lib("Trainer.train", HF, 1576), lib("Trainer._run_epoch", HF, 1919),
              op("aten::is_nonzero"), op("aten::item"), op("aten::_local_scalar_dense"), sync()]
    (f,) = run(build([REST, (frames, {"sync.wait": 0.05, "sync.count": 96}),
                      ([user(30), op("aten::addmm"), op("k")],
                       {"gpu.time": 0.5, "gpu.launches": 10})]))
    assert f.location.line == 42
    assert (f.origin.file, f.origin.line, f.origin.function) == (HF, 1919, "Trainer._run_epoch")
    assert f.suggestion == ("the sync is the Hugging Face Trainer's NaN/inf filter of the logged "
                            "loss, a Python `if` on a tensor every step: TrainingArguments(..., "
                            "logging_nan_inf_filter=False) removes it")
    # the same on a CPU-only profile
    (g,) = run(build([REST, (frames[:4], {"op.count": 96 + 4, "op.time": 1e-4})]))
    assert g.origin == f.origin and g.suggestion == f.suggestion


def test_another_librarys_sync_names_its_call_site_then_the_general_fix():
    frames = [user(42), lib("Meter.update", "/usr/lib/python3.11/site-packages/meters/core.py", 77),
              op("aten::item"), op("aten::_local_scalar_dense"), sync()]
    (f,) = run(build([REST, (frames, {"sync.wait": 0.05, "sync.count": 100}),
                      ([user(30), op("aten::addmm"), op("k")],
                       {"gpu.time": 0.5, "gpu.launches": 10})]))
    assert f.origin.function == "Meter.update" and f.location.line == 42
    assert f.suggestion.startswith("the sync is in the library code meters/core.py:77 "
                                   "(Meter.update), called from your line: look for the "
                                   "library's option that skips it, or call that code less "
                                   "often. Where the code is yours: keep the value on the device")
    # on a CPU-only profile, 100 calls in 10 runs of the line (the library's own loop, no
    # switch to name, no wait to show): quiet; 100 in 100 runs is the user's loop: a note
    once = ([user(42), op("aten::zeros")], {"op.count": 10, "op.time": 1e-4})
    assert run(build([REST, once, (frames[:3], {"op.count": 100, "op.time": 1e-4})])) == []
    (g,) = run(build([REST, (frames[:3], {"op.count": 100, "op.time": 1e-4})]))
    assert g.origin.function == "Meter.update" and g.suggestion == f.suggestion


def test_a_sync_in_the_users_own_code_has_no_origin():
    (f,) = run(gpu_tree(0.05))
    assert f.origin is None and f.suggestion.startswith("keep the value on the device")


def test_torchs_own_python_between_the_line_and_the_sync_is_transparent():
    # print(loss) in the loop: Tensor.__repr__ -> _tensor_str's formatting -> .item() calls,
    # several per print; the user's print is the call site, not torch's formatter
    ts = "/usr/lib/python3.11/site-packages/torch"
    frames = [user(14), lib("Tensor.__repr__", f"{ts}/_tensor.py", 568),
              lib("_str_intern", f"{ts}/_tensor_str.py", 400), op("aten::item")]
    once = ([user(14), op("aten::sum")], {"op.count": 40, "op.time": 1e-4})
    (f,) = run(build([REST, once, (frames, {"op.count": 160, "op.time": 1e-4})]))
    assert f.origin is None and f.location.line == 14
    assert f.suggestion.startswith("keep the value on the device")
