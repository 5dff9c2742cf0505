"""The program's own signal handlers keep their meaning: chained, never replaced."""

from __future__ import annotations

import signal

import pytest
from reliability_harness import (
    PY,
    child_env,
    frame_names,
    profile_meta,
    record,
    report_json,
    run_child,
    signal_when_ready,
    write_program,
)
from reliability_programs import program

API_SIGTERM_HANDLER = """
import deepcontext
calls = []
def on_term(signum, frame):
    calls.append(signum)
    print("user handler ran", flush=True)
{install}
prof = deepcontext.start("prof.dcprof", flush_interval=0.1, sample_interval=0.002)
work()
ready()
deadline = time.time() + 20
while not calls and time.time() < deadline:
    time.sleep(0.01)
work()  # a handler that only sets a flag keeps the program (and the profiling) going
print("handler calls:", len(calls), flush=True)
deepcontext.stop()
sys.exit(5)
"""


def test_user_handler_installed_before_start_is_chained_once(tmp_path):
    src = program(API_SIGTERM_HANDLER.format(install="signal.signal(signal.SIGTERM, on_term)"))
    prog = write_program(tmp_path, src)
    r = run_child([PY, str(prog), str(tmp_path / "ready")], cwd=tmp_path,
                  during=signal_when_ready(tmp_path / "ready", signal.SIGTERM))
    assert r.rc == 5, r.describe()
    assert r.out.count("user handler ran") == 1 and "handler calls: 1" in r.out, r.describe()
    meta = profile_meta(tmp_path / "prof.dcprof", r)
    assert meta["complete"] is True
    assert "work" in frame_names(report_json(tmp_path, tmp_path / "prof.dcprof"))


def test_sigterm_ignored_before_start_stays_ignored(tmp_path):
    body = """
import deepcontext
signal.signal(signal.SIGTERM, signal.SIG_IGN)
deepcontext.start("prof.dcprof", flush_interval=0.1, sample_interval=0.002)
ready()
time.sleep(0.5)
work()
deepcontext.stop()
print("survived", flush=True)
"""
    prog = write_program(tmp_path, program(body))
    r = run_child([PY, str(prog), str(tmp_path / "ready")], cwd=tmp_path,
                  during=signal_when_ready(tmp_path / "ready", signal.SIGTERM))
    assert r.rc == 0 and "survived" in r.out, r.describe()
    assert profile_meta(tmp_path / "prof.dcprof", r)["complete"] is True
    assert "work" in frame_names(report_json(tmp_path, tmp_path / "prof.dcprof"))


def test_user_handler_installed_by_program_under_record_wins(tmp_path):
    body = """
def on_term(signum, frame):
    print("user handler ran", flush=True)
    sys.exit(7)
signal.signal(signal.SIGTERM, on_term)
work()
ready()
time.sleep(30)
"""
    r = record(tmp_path, program(body), program_args=[str(tmp_path / "ready")],
               during=signal_when_ready(tmp_path / "ready", signal.SIGTERM))
    assert r.rc == 7, r.describe()
    assert r.out.count("user handler ran") == 1
    assert profile_meta(tmp_path / "prof.dcprof", r)["complete"] is True


def test_user_handler_sees_signal_even_during_long_c_call(tmp_path):
    # With a user handler the flusher only saves a snapshot; the handler runs when C returns.
    body = """
import hashlib
def on_term(signum, frame):
    print("user handler ran", flush=True)
    sys.exit(9)
signal.signal(signal.SIGTERM, on_term)
work()
ready()
hashlib.pbkdf2_hmac("sha256", b"pw", b"salt", 4_000_000)
time.sleep(30)
"""
    r = record(tmp_path, program(body), program_args=[str(tmp_path / "ready")],
               during=signal_when_ready(tmp_path / "ready", signal.SIGTERM, delay=0.2))
    assert r.rc == 9 and r.out.count("user handler ran") == 1, r.describe()
    assert profile_meta(tmp_path / "prof.dcprof", r)["complete"] is True


def test_sigint_handler_of_program_still_runs(tmp_path):
    body = """
hits = []
signal.signal(signal.SIGINT, lambda s, f: hits.append(s))
work()
ready()
while not hits:
    time.sleep(0.01)
print("caught SIGINT", flush=True)
"""
    r = record(tmp_path, program(body), program_args=[str(tmp_path / "ready")],
               during=signal_when_ready(tmp_path / "ready", signal.SIGINT))
    assert r.rc == 0 and "caught SIGINT" in r.out, r.describe()
    assert profile_meta(tmp_path / "prof.dcprof", r)["complete"] is True


def test_asyncio_signal_handler_and_loop_work_under_record(tmp_path):
    body = """
import asyncio
async def main():
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    work()
    ready()
    await asyncio.wait_for(stop.wait(), 20)
    print("asyncio got SIGTERM", flush=True)
    return 3
sys.exit(asyncio.run(main()))
"""
    r = record(tmp_path, program(body), program_args=[str(tmp_path / "ready")],
               during=signal_when_ready(tmp_path / "ready", signal.SIGTERM, delay=0.1))
    assert r.rc == 3 and "asyncio got SIGTERM" in r.out, r.describe()
    assert profile_meta(tmp_path / "prof.dcprof", r)["complete"] is True


def test_sigterm_to_a_forked_child_never_reaches_the_parent(tmp_path):
    # The child inherits our handler and the wakeup pipe; its SIGTERM must end only the child.
    body = """
pid = os.fork()
if pid == 0:
    time.sleep(30)
    os._exit(0)
time.sleep(0.3)
os.kill(pid, signal.SIGTERM)
_, status = os.waitpid(pid, 0)
print("child signal", os.WTERMSIG(status) if os.WIFSIGNALED(status) else None, flush=True)
time.sleep(0.5)  # the parent's flusher has had time to (wrongly) react
work()
print("parent alive", flush=True)
"""
    r = record(tmp_path, program(body), program_args=[str(tmp_path / "ready")])
    assert r.rc == 0, r.describe()
    assert f"child signal {int(signal.SIGTERM)}" in r.out and "parent alive" in r.out
    meta = profile_meta(tmp_path / "prof.dcprof", r)
    assert meta["complete"] is True and meta["pid"] != 0 and "ended_by" not in meta


def test_signal_handling_can_be_switched_off(tmp_path):
    # DEEPCONTEXT_SIGNALS=0: no handler, no wakeup descriptor; SIGTERM acts as without us.
    body = """
print("wakeup fd", signal.set_wakeup_fd(-1), "default", signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, flush=True)
work()
wait_for_flush()
ready()
time.sleep(30)
"""
    r = record(tmp_path, program(body), program_args=[str(tmp_path / "ready")],
               env=child_env({"DEEPCONTEXT_SIGNALS": "0"}),
               during=signal_when_ready(tmp_path / "ready", signal.SIGTERM))
    assert r.rc == -signal.SIGTERM, r.describe()
    assert "wakeup fd -1 default True" in r.out, r.describe()
    assert profile_meta(tmp_path / "prof.dcprof", r)["complete"] is False


@pytest.mark.parametrize("sig, install", [
    (signal.SIGINT, ""),  # Python's own KeyboardInterrupt handler
    (signal.SIGTERM, "signal.signal(signal.SIGTERM, lambda s, f: sys.exit(3))"),
])
def test_signal_during_c_call_saves_a_snapshot_before_a_sigkill(tmp_path, sig, install):
    # No periodic flush (interval 60 s): only the snapshot taken when the signal arrives can
    # carry `work` into the file before the SIGKILL that follows.
    body = f"""
{install}
import hashlib
work()
ready()
hashlib.pbkdf2_hmac("sha256", b"pw", b"salt", 80_000_000)
"""
    r = record(tmp_path, program(body), flush=60, program_args=[str(tmp_path / "ready")],
               timeout=60, during=signal_when_ready(tmp_path / "ready", sig, delay=0.2,
                                                    then_kill_after=1.5))
    assert r.rc == -signal.SIGKILL, r.describe()
    assert profile_meta(tmp_path / "prof.dcprof", r)["complete"] is False
    assert "work" in frame_names(report_json(tmp_path, tmp_path / "prof.dcprof"))


def test_sigterm_to_a_child_forked_from_a_thread_never_reaches_the_parent(tmp_path):
    # The fork hook runs in the forking thread, which becomes the child's main thread: the
    # child's wakeup descriptor must be detached from the parent's pipe there too.
    body = """
import threading
def fork_and_terminate():
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    time.sleep(0.3)
    os.kill(pid, signal.SIGTERM)
    _, status = os.waitpid(pid, 0)
    print("child signal", os.WTERMSIG(status) if os.WIFSIGNALED(status) else None, flush=True)
t = threading.Thread(target=fork_and_terminate)
t.start()
t.join()
time.sleep(0.5)  # the parent's flusher has had time to (wrongly) react
work()
print("parent alive", flush=True)
"""
    r = record(tmp_path, program(body), program_args=["unused"])
    assert r.rc == 0, r.describe()
    assert f"child signal {int(signal.SIGTERM)}" in r.out and "parent alive" in r.out
    meta = profile_meta(tmp_path / "prof.dcprof", r)
    assert meta["complete"] is True and "ended_by" not in meta
