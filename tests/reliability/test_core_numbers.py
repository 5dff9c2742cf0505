"""The native core never charges time silently to the wrong place: sessions, schedules, scopes
closed out of order, long C calls, long paths (docs/design.md, "The core's lifecycles")."""

from __future__ import annotations

import json

from reliability_harness import child_env, profile_meta, record, report_json, run_python


def _nodes(doc):
    """(path of frame names from the root, node) for every node of a report's JSON tree."""
    out, stack = [], [((), doc["tree"])]
    while stack:
        path, node = stack.pop()
        here = (*path, node["frame"]["name"])
        out.append((here, node))
        stack.extend((here, c) for c in node["children"])
    return out


def _inclusive(doc, name, metric="cpu.time"):
    return sum(n["inclusive"].get(metric, 0.0) for p, n in _nodes(doc) if p[-1] == name)


SPIN = '''
import time
def spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
'''


def test_op_opened_in_one_session_and_closed_in_the_next_is_not_charged_the_gap(tmp_path):
    r = run_python(tmp_path, '''
import time
import torch
import deepcontext
x = torch.ones(4)
first = deepcontext.profile("a.dcprof", force=True).start()
scope = torch.profiler.record_function("straddle")
scope.__enter__()
first.stop()
time.sleep(0.5)
second = deepcontext.profile("b.dcprof", force=True).start()
scope.__exit__(None, None, None)
for _ in range(10):
    torch.add(x, x)
second.stop()
''', timeout=120)
    assert r.rc == 0, r.describe()
    doc = report_json(tmp_path, tmp_path / "b.dcprof", "--metric", "op.time")
    names = {p[-1] for p, _ in _nodes(doc)}
    assert "straddle" not in names
    assert "aten::add" in names


def test_scope_closed_out_of_order_leaves_the_operator_stack(tmp_path):
    r = record(tmp_path, '''
import torch
x = torch.ones(8, 8)
def gen():
    with torch.profiler.record_function("in_generator"):
        yield
g = gen()
next(g)
with torch.profiler.record_function("outer"):
    next(g, None)  # the generator's scope closes while "outer", opened after it, is open
for _ in range(50):
    torch.mm(x, x)
''', timeout=120)
    assert r.rc == 0, r.describe()
    doc = report_json(tmp_path, tmp_path / "prof.dcprof", "--metric", "op.count")
    mm = [(p, n) for p, n in _nodes(doc) if p[-1] == "aten::mm"]
    assert mm and all("in_generator" not in p and "outer" not in p for p, _ in mm), mm
    assert sum(n["metrics"]["op.count"] for _, n in mm) == 50
    outer = [n for p, n in _nodes(doc) if p[-1] == "outer"]
    assert [n["metrics"]["op.count"] for n in outer] == [1.0]
    assert outer[0]["metrics"]["op.time"] > 0


def test_thread_first_seen_during_a_wait_step_is_sampled_later(tmp_path):
    r = run_python(tmp_path, SPIN + '''
import threading, time
import deepcontext
go = threading.Event()
def late_thread():
    go.wait()
    spin(0.4)
with deepcontext.profile("w.dcprof", schedule=deepcontext.schedule(wait=1, active=1, repeat=1),
                         sample_interval=0.002, force=True) as prof:
    t = threading.Thread(target=late_thread)
    t.start()  # step 0 is a wait step: capture is paused
    time.sleep(0.1)
    prof.step()  # step 1: active
    go.set()
    t.join()
    prof.step()
''', timeout=120)
    assert r.rc == 0, r.describe()
    doc = report_json(tmp_path, tmp_path / "w.dcprof")
    assert _inclusive(doc, "late_thread") >= 0.2, json.dumps(doc["totals"])


def test_schedule_repeat_keeps_every_active_cycle(tmp_path):
    r = run_python(tmp_path, SPIN + '''
import deepcontext
def warm():
    spin(0.1)
def first_cycle():
    spin(0.2)
def second_cycle():
    spin(0.2)
with deepcontext.profile("c.dcprof", schedule=deepcontext.schedule(warmup=1, active=1, repeat=2),
                         sample_interval=0.002, force=True) as prof:
    for work in (warm, first_cycle, warm, second_cycle):
        work()
        prof.step()
''', timeout=120)
    assert r.rc == 0, r.describe()
    doc = report_json(tmp_path, tmp_path / "c.dcprof")
    assert _inclusive(doc, "first_cycle") >= 0.1
    assert _inclusive(doc, "second_cycle") >= 0.1
    assert _inclusive(doc, "warm") == 0.0


def test_intra_op_workers_are_measured_in_a_second_session_too(tmp_path):
    r = run_python(tmp_path, '''
import torch
import deepcontext
torch.set_num_threads(2)
a = torch.randn(400, 400)
def matmuls():
    for _ in range(60):
        a @ a
for name in ("one", "two"):
    with deepcontext.profile(f"{name}.dcprof", sample_interval=0.002, force=True):
        matmuls()
''', timeout=180)
    assert r.rc == 0, r.describe()
    for name in ("one", "two"):
        doc = report_json(tmp_path, tmp_path / f"{name}.dcprof")
        # (a @ a is aten::matmul; the aten::mm it calls is recorded with the nested layer)
        workers = [n for p, n in _nodes(doc) if p[-1] == "worker" and "aten::matmul" in p]
        assert workers, f"{name}: no worker time under aten::matmul"
        assert sum(n["inclusive"]["cpu.time"] for n in workers) > 0.02, name


def test_long_c_call_holding_the_gil_loses_no_samples(tmp_path):
    # One C call (catastrophic regex backtracking) holds the GIL for about a second: the
    # Python flusher cannot run, so the rings must be drained natively.
    r = record(tmp_path, '''
import re, time
t0 = time.thread_time()
re.match(r"(a+)+$", "a" * 24 + "b")  # at: the long call
print(time.thread_time() - t0)
''', sample=0.002, timeout=120)
    assert r.rc == 0, r.describe()
    spent = float(r.out.strip())
    doc = report_json(tmp_path, tmp_path / "prof.dcprof")
    line = [n for p, n in _nodes(doc) if n["frame"].get("line") == 4]
    assert line, doc["tree"]
    assert doc["metadata"]["dropped_samples"] == 0
    assert line[0]["inclusive"]["cpu.time"] >= 0.8 * spent, (spent, line[0]["inclusive"])


def test_long_file_paths_are_kept_whole(tmp_path):
    deep = tmp_path
    for i in range(6):
        deep = deep / (f"bazel-out-k8-opt-bin-{i}-" + "x" * 40)
    deep.mkdir(parents=True)
    (deep / "deep_module.py").write_text(SPIN + "def work():\n    spin(0.3)\n")
    r = record(tmp_path, f'''
import sys
sys.path.insert(0, {str(deep)!r})
import deep_module
deep_module.work()
''', sample=0.002, timeout=120)
    assert r.rc == 0, r.describe()
    doc = report_json(tmp_path, tmp_path / "prof.dcprof")
    files = {n["frame"].get("file") for _, n in _nodes(doc) if n["frame"]["name"] in ("work", "spin")}
    assert files == {str(deep / "deep_module.py")}, files
    assert len(str(deep / "deep_module.py")) > 300


def test_many_distinct_lines_keep_exact_counts(tmp_path):
    # More contexts than a thread's first memo tables hold (1,024 slots, doubled when half full),
    # with a new line at nearly every operator event: each line's operators keep exact counts,
    # with the operators they call (the nested layer) too.
    lines = "".join(f"    torch.add(x, {i})\n" if i % 3 else f"    F.linear(x, w)\n"
                    for i in range(900))
    r = record(tmp_path, f'''
import torch
import torch.nn.functional as F
x, w = torch.ones(2, 4), torch.ones(4, 4)
def many():
{lines}
def deep(k):
    return deep(k - 1) if k else many()
for _ in range(3):
    deep(20)
''', timeout=240, extra_args=("--context", "python,op,nested"))  # nested ops: more contexts
    assert r.rc == 0, r.describe()
    doc = report_json(tmp_path, tmp_path / "prof.dcprof", "--metric", "op.count")
    adds = [n for p, n in _nodes(doc) if p[-1] == "aten::add" and p[-2] == "many"]
    linears = [(p, n) for p, n in _nodes(doc) if p[-1] == "aten::linear" and p[-2] == "many"]
    assert len(adds) == 600 and all(n["metrics"]["op.count"] == 3 for n in adds)
    assert len(linears) == 300 and all(n["metrics"]["op.count"] == 3 for _, n in linears)
    mm = [n for p, n in _nodes(doc) if p[-1] == "aten::mm" and p[-2] == "aten::matmul"]
    assert len(mm) == 300 and all(n["metrics"]["op.count"] == 3 for n in mm), len(mm)


def test_first_call_time_is_counted_per_session_and_after_a_warmup(tmp_path):
    # op.first_time: each context's first call, again after the metrics go back (a new session,
    # a warm-up's rollback), where the operators' exits are counted by their thread's tally.
    r = run_python(tmp_path, '''
import torch
import deepcontext
x = torch.ones(64, 64)
def work():
    for _ in range(5):
        torch.mm(x, x)
for out in ("a.dcprof", "b.dcprof"):
    with deepcontext.profile(out, schedule=deepcontext.schedule(warmup=1, active=1, repeat=1),
                             force=True) as prof:
        for _ in range(2):
            work()
            prof.step()
''', timeout=120)
    assert r.rc == 0, r.describe()
    for name in ("a.dcprof", "b.dcprof"):
        doc = report_json(tmp_path, tmp_path / name, "--metric", "op.count")
        mm = [n["metrics"] for p, n in _nodes(doc) if p[-1] == "aten::mm"]
        assert [m["op.count"] for m in mm] == [5.0], mm  # the active step only
        assert 0 < mm[0]["op.first_time"] <= mm[0]["op.time"], mm


MM_TIMED = '''
import json, time
import torch
import deepcontext
torch.set_num_threads(1)
a = torch.randn(1024, 1024)
a @ a  # (its first call: allocations, the hook's first event)
# (no periodic flush: its GIL hold could delay the return from the op, outside the op's time)
with deepcontext.profile("mm.dcprof", context="python,op", sample_interval=0, flush_interval=3600,
                         force=True):
    torch.mm(a, a)  # (the session's first event: its one-time work lies outside the op's time)
    walls = []
    for _ in range(3):
        t0 = time.perf_counter_ns()
        torch.mm(a, a)
        walls.append(time.perf_counter_ns() - t0)
print(json.dumps(walls))
'''


def _clock_is_tsc():
    try:
        with open("/sys/devices/system/clocksource/clocksource0/current_clocksource") as f:
            return f.read().strip() == "tsc"
    except OSError:
        return False


def test_op_time_agrees_with_the_wall_clock_around_the_call_with_either_op_clock(tmp_path):
    """Operator times come from the TSC where the kernel keeps time with it (calibrated against
    CLOCK_MONOTONIC at the first start), else from CLOCK_MONOTONIC; either way an operator's
    time is the wall time around its call less only the dispatch around it."""
    import platform
    for env, want in ((None, "tsc" if _clock_is_tsc() and platform.machine() == "x86_64"
                       else "monotonic"), ({"DEEPCONTEXT_CLOCK": "monotonic"}, "monotonic")):
        run_dir = tmp_path / want / ("env" if env else "default")
        run_dir.mkdir(parents=True)
        r = run_python(run_dir, MM_TIMED, timeout=120, env=child_env(env))
        assert r.rc == 0, r.describe()
        walls = json.loads(r.out)
        assert profile_meta(run_dir / "mm.dcprof", r)["op_clock"] == want
        doc = report_json(run_dir, run_dir / "mm.dcprof", "--metric", "op.time")
        mm = sorted((n["metrics"]["op.count"], n["metrics"]["op.time"]) for p, n in _nodes(doc)
                    if p[-1] == "aten::mm")
        assert [count for count, _ in mm] == [1, 3]  # the first call's line, the timed line
        op_time = mm[1][1]
        wall = sum(walls) * 1e-9
        # Three 1024^3 products (~20 ms each): what lies outside the op is microseconds of
        # dispatch, and the TSC's rate is known to ~5e-5.
        assert 0.98 * wall < op_time <= 1.0001 * wall, (env, op_time, walls)
