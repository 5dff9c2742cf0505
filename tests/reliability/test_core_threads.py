"""Threads come and go under the native core's thread registry: an exiting thread's state is
only marked in its exit hook and reaped later (docs/design.md, "Threads")."""

from __future__ import annotations

from reliability_harness import profile_meta, record, run_python

SHORT_LIVED_OPS = '''
import threading, time
import torch
x = torch.ones(64, 64)
def short():
    torch.mm(x, x)
    end = time.thread_time() + 0.005  # Python time after the op: samples with native frames
    while time.thread_time() < end:   # are still in the ring when the thread exits
        pass
for wave in range(20):
    ts = [threading.Thread(target=short) for _ in range(10)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
print("finished")
'''


def test_short_lived_threads_running_ops_with_native_frames_exit_cleanly(tmp_path):
    # On the old core each exit folded the thread's samples from its TLS destructor, splicing
    # with an already destroyed thread_local scratch: 3 of 3 runs segfaulted.
    r = record(tmp_path, SHORT_LIVED_OPS, extra_args=["--context", "python,op,native"],
               sample=0.0005, timeout=180)
    assert r.rc == 0, r.describe()
    assert r.out.strip() == "finished", r.describe()
    assert profile_meta(tmp_path / "prof.dcprof", r)["complete"] is True


SEVERAL_SESSIONS = '''
import threading
import torch
import deepcontext
x = torch.ones(64, 64)
def work():
    for _ in range(20):
        torch.mm(x, x)
for i in range(6):
    context = "python,op,native" if i % 2 else "python,op"
    with deepcontext.profile(f"s{i}.dcprof", context=context, sample_interval=0.001,
                             flush_interval=0.05, force=True):
        ts = [threading.Thread(target=work) for _ in range(8)]
        for t in ts:
            t.start()
        work()
        for t in ts:
            t.join()
print("finished")
'''


def test_several_sessions_in_one_process_exit_cleanly(tmp_path):
    r = run_python(tmp_path, SEVERAL_SESSIONS, timeout=180)
    assert r.rc == 0, r.describe()
    assert r.out.strip() == "finished", r.describe()
    assert "corruption" not in r.err and "free" not in r.err, r.describe()
    for i in range(6):
        assert profile_meta(tmp_path / f"s{i}.dcprof")["complete"] is True


REAPED = '''
import os, threading, time
import torch
import deepcontext
from deepcontext import _core
x = torch.ones(8, 8)
def short():
    torch.add(x, x)
with deepcontext.profile("r.dcprof", sample_interval=0.001, force=True):
    for wave in range(30):
        ts = [threading.Thread(target=short) for _ in range(10)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    time.sleep(0.5)  # a few reaper passes (every 0.1 s)
    live = _core.testing.live_thread_states()
    tids = len(os.listdir("/proc/self/task"))
    print(live, tids)
'''


def test_states_of_exited_threads_are_reaped(tmp_path):
    # 300 threads ran operators and exited: the registry holds one state per thread alive now
    # (every thread id under /proc/self/task, the profiler's own included), not one per thread
    # ever seen.
    r = run_python(tmp_path, REAPED, timeout=180)
    assert r.rc == 0, r.describe()
    live, tids = map(int, r.out.split())
    assert live == tids, r.describe()
