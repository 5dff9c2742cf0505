"""Children and threads: forked, spawned and pooled children never write into the parent's
file; threads started before and after profiling are attributed; ranks get their own files."""

from __future__ import annotations

import subprocess

import pytest
from reliability_harness import (
    CLI,
    PY,
    child_env,
    frame_names,
    profile_meta,
    record,
    report_json,
    run_child,
    write_program,
)
from reliability_programs import program


def _profiles(tmp_path):
    return sorted(p.name for p in tmp_path.glob("*.dcprof*"))


def test_many_forks_while_flushing_leave_parent_profile_intact(tmp_path):
    # Forks race the flusher (every 20 ms); children do work the parent never did.
    body = """
def child_only_work():
    return work(0.02)
for i in range(30):
    work(0.005)
    pid = os.fork()
    if pid == 0:
        child_only_work()
        if i % 2:
            os._exit(0)
        sys.exit(0)  # runs atexit in the child: must not write either
    os.waitpid(pid, 0)
work()
"""
    r = record(tmp_path, program(body), flush=0.02, program_args=["unused"], timeout=90)
    assert r.rc == 0, r.describe()
    assert _profiles(tmp_path) == ["prof.dcprof"]
    assert r.err.count("profile written to") == 1, r.describe()
    meta = profile_meta(tmp_path / "prof.dcprof", r)
    assert meta["complete"] is True
    names = frame_names(report_json(tmp_path, tmp_path / "prof.dcprof"))
    assert "work" in names and "child_only_work" not in names


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_multiprocessing_pool_children_are_left_alone(tmp_path, method):
    body = f"""
import multiprocessing as mp
def square(x):
    work(0.01)
    return x * x
if __name__ == "__main__":
    work()
    with mp.get_context("{method}").Pool(2) as pool:
        print("sum", sum(pool.map(square, range(20))), flush=True)
"""
    r = record(tmp_path, program(body), program_args=["unused"], timeout=90)
    assert r.rc == 0 and "sum 2470" in r.out, r.describe()
    assert _profiles(tmp_path) == ["prof.dcprof"]
    assert r.err.count("profile written to") == 1, r.describe()
    assert profile_meta(tmp_path / "prof.dcprof", r)["complete"] is True


def test_subprocess_python_child_is_not_profiled(tmp_path):
    body = """
import subprocess, json
code = "import os, sys, json; print(json.dumps([os.environ.get('DEEPCONTEXT_RECORD'), os.environ.get('PYTHONPATH'), 'deepcontext.capture.session' in sys.modules]))"
out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
print("child saw", out.strip(), flush=True)
"""
    r = record(tmp_path, program(body), program_args=["unused"])
    assert r.rc == 0, r.describe()
    assert "child saw [null, null, false]" in r.out, r.describe()
    assert _profiles(tmp_path) == ["prof.dcprof"]


@pytest.mark.torch
def test_dataloader_fork_workers_do_not_write_and_main_profile_is_complete(tmp_path):
    pytest.importorskip("torch")
    body = """
import torch
from torch.utils.data import DataLoader, Dataset
class Squares(Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        return torch.full((8,), float(i)) ** 2
if __name__ == "__main__":
    loader = DataLoader(Squares(), batch_size=8, num_workers=2, multiprocessing_context="fork")
    total = 0.0
    for batch in loader:
        total += float(torch.mm(batch, batch.t()).sum())
    print("total", int(total), flush=True)
"""
    r = record(tmp_path, program(body), program_args=["unused"], timeout=240)
    assert r.rc == 0, r.describe()
    assert "total" in r.out
    assert _profiles(tmp_path) == ["prof.dcprof"]
    assert r.err.count("profile written to") == 1, r.describe()
    meta = profile_meta(tmp_path / "prof.dcprof", r)
    assert meta["complete"] is True
    names = frame_names(report_json(tmp_path, tmp_path / "prof.dcprof"))
    assert "aten::mm" in names, sorted(names)


def test_threads_started_before_and_after_start_are_attributed(tmp_path):
    body = """
import threading
import deepcontext
go = threading.Event()
def early_thread_work():
    go.wait()
    work(0.3)
def late_thread_work():
    work(0.3)
early = threading.Thread(target=early_thread_work)
early.start()
deepcontext.start("prof.dcprof", flush_interval=0.1, sample_interval=0.002)
late = threading.Thread(target=late_thread_work)
late.start()
go.set()
early.join()
late.join()
deepcontext.stop()
"""
    prog = write_program(tmp_path, program(body))
    r = run_child([PY, str(prog), "unused"], cwd=tmp_path)
    assert r.rc == 0, r.describe()
    names = frame_names(report_json(tmp_path, tmp_path / "prof.dcprof"))
    assert {"early_thread_work", "late_thread_work"} <= names, sorted(names)


def test_many_short_threads_while_flushing_every_10ms(tmp_path):
    body = """
import threading
def short_lived():
    work(0.002)
for _ in range(5):
    threads = [threading.Thread(target=short_lived) for _ in range(10)]
    for t in threads: t.start()
    for t in threads: t.join()
work()
"""
    r = record(tmp_path, program(body), flush=0.01, program_args=["unused"], timeout=90)
    assert r.rc == 0, r.describe()
    assert profile_meta(tmp_path / "prof.dcprof", r)["complete"] is True


@pytest.mark.parametrize("explicit_output", [False, True])
def test_each_rank_gets_its_own_file(tmp_path, explicit_output):
    prog = write_program(tmp_path, program("work(0.1)\nprint('rank', os.environ['RANK'])"))
    procs = []
    for rank in range(3):
        argv = [*CLI, "record", "--sample-interval", "0.002"]
        if explicit_output:
            argv += ["-o", "job.dcprof"]
        argv += ["--", PY, str(prog), "unused"]
        env = child_env({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "3"})
        procs.append(subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    stem = "job" if explicit_output else "prog"
    assert _profiles(tmp_path) == [f"{stem}.rank{r}.dcprof" for r in range(3)]
    pids = {profile_meta(tmp_path / f"{stem}.rank{r}.dcprof")["pid"] for r in range(3)}
    assert len(pids) == 3


C_THREAD = """
import ctypes
libc = ctypes.CDLL(None)
body_type = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
def c_thread_body(arg):
    work(0.4)
    return None
body = body_type(c_thread_body)
tid = ctypes.c_ulong()
assert libc.pthread_create(ctypes.byref(tid), None, body, None) == 0
libc.pthread_join(tid, None)
print("joined", flush=True)
"""


def test_thread_created_from_c_runs_unharmed(tmp_path):
    r = record(tmp_path, program(C_THREAD), program_args=["unused"])
    assert r.rc == 0 and "joined" in r.out, r.describe()
    assert profile_meta(tmp_path / "prof.dcprof", r)["complete"] is True


def test_thread_created_from_c_is_attributed(tmp_path):
    # Registered by the flusher's periodic scan of the interpreter's thread states (3.11+).
    r = record(tmp_path, program(C_THREAD), program_args=["unused"])
    assert r.rc == 0, r.describe()
    assert "c_thread_body" in frame_names(report_json(tmp_path, tmp_path / "prof.dcprof"))


def test_sigterm_to_the_whole_process_group_with_pool_workers(tmp_path):
    # torchrun stops a job with SIGTERM to its process group: workers and parent at once.
    import contextlib
    import os
    import signal

    from reliability_harness import signal_when_ready

    body = """
import multiprocessing as mp
def slow(x):
    time.sleep(30)
    return x
if __name__ == "__main__":
    work()
    pool = mp.get_context("fork").Pool(2)
    result = pool.map_async(slow, range(4))
    time.sleep(0.3)
    ready()
    result.get(60)
"""

    def group_sigterm(proc):
        signal_when_ready(tmp_path / "ready", 0)(proc)  # signal 0: just wait for ready
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
        # A worker the pool forked in the few milliseconds before our handler ran can outlive
        # the parent; the launcher's SIGKILL to the group ends it, as torchrun's would.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

    r = record(tmp_path, program(body), program_args=[str(tmp_path / "ready")],
               during=group_sigterm, timeout=60,
               preexec_fn=os.setsid)  # its own group, as torchrun starts workers
    assert r.rc == -signal.SIGTERM, r.describe()
    assert _profiles(tmp_path) == ["prof.dcprof"]
    assert profile_meta(tmp_path / "prof.dcprof", r)["complete"] is True
