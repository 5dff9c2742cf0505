"""Every way a profiled program can end: its exit status stays its own, and the profile is
complete where the process could flush, else the last periodic flush marked incomplete."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from reliability_harness import (
    CLI,
    frame_names,
    profile_meta,
    record,
    report_json,
    run_child,
    signal_when_ready,
)
from reliability_programs import program


def _recorded(tmp_path: Path, body: str, **kw):
    ready = tmp_path / "ready"
    r = record(tmp_path, program(body), program_args=[str(ready)], **kw)
    return r, tmp_path / "prof.dcprof"


def _assert_profile(tmp_path: Path, prof: Path, r, *, complete: bool, has: str = "work") -> dict:
    meta = profile_meta(prof, r)
    assert meta["complete"] is complete, meta
    doc = report_json(tmp_path, prof)  # the real reader accepts it
    assert has in frame_names(doc), sorted(frame_names(doc))
    return meta


@pytest.mark.parametrize("ending, status", [
    ("pass", 0),
    ("sys.exit(3)", 3),
    ("raise ValueError('boom')", 1),
])
def test_python_level_exit_keeps_status_and_completes(tmp_path, ending, status):
    r, prof = _recorded(tmp_path, f"work()\n{ending}")
    assert r.rc == status, r.describe()
    _assert_profile(tmp_path, prof, r, complete=True)
    if status == 1:
        assert "ValueError: boom" in r.err  # the program's own traceback is untouched


def test_sigint_gives_keyboardinterrupt_status_and_complete_profile(tmp_path):
    r, prof = _recorded(tmp_path, "work()\nready()\ntime.sleep(30)",
                        during=signal_when_ready(tmp_path / "ready", signal.SIGINT))
    assert r.rc == -signal.SIGINT, r.describe()
    assert "KeyboardInterrupt" in r.err
    _assert_profile(tmp_path, prof, r, complete=True)


def test_sigterm_default_dies_by_sigterm_with_complete_profile(tmp_path):
    struck = {}

    def during(proc):
        signal_when_ready(tmp_path / "ready", signal.SIGTERM)(proc)
        struck["at"] = time.monotonic()
        proc.wait(20)
        struck["gone"] = time.monotonic()

    r, prof = _recorded(tmp_path, "work()\nready()\ntime.sleep(30)", during=during)
    assert r.rc == -signal.SIGTERM, r.describe()
    assert struck["gone"] - struck["at"] < 1.5, r.describe()  # one write, no waiting around
    _assert_profile(tmp_path, prof, r, complete=True)


def test_sigterm_during_long_c_call_that_releases_the_gil_is_prompt(tmp_path):
    # pbkdf2 with 60M rounds is ~15 s of C with the GIL released; a Python-level handler
    # alone would run only when it returns. The flusher wakes on the signal instead.
    body = """
work()
ready()
import hashlib
hashlib.pbkdf2_hmac("sha256", b"pw", b"salt", 60_000_000)
print("C call returned")
"""
    struck = {}

    def during(proc):
        signal_when_ready(tmp_path / "ready", signal.SIGTERM, delay=0.3)(proc)
        struck["at"] = time.monotonic()
        proc.wait(10)
        struck["gone"] = time.monotonic()

    r, prof = _recorded(tmp_path, body, during=during, timeout=40)
    assert r.rc == -signal.SIGTERM, r.describe()
    assert "C call returned" not in r.out
    assert struck["gone"] - struck["at"] < 3.0, r.describe()
    meta = _assert_profile(tmp_path, prof, r, complete=True)
    assert meta.get("ended_by") == "SIGTERM"


def test_sigterm_then_sigkill_while_c_call_holds_the_gil_keeps_last_flush(tmp_path):
    # Nothing written in Python can run while C holds the GIL: the torchrun-style SIGKILL that
    # follows leaves the last periodic flush, marked incomplete, and still readable.
    body = """
work()
wait_for_flush()
ready()
sum(range(10**10))
"""
    r, prof = _recorded(tmp_path, body, timeout=40,
                        during=signal_when_ready(tmp_path / "ready", signal.SIGTERM, delay=0.2,
                                                 then_kill_after=1.0))
    assert r.rc == -signal.SIGKILL, r.describe()
    _assert_profile(tmp_path, prof, r, complete=False)


def test_torchrun_grace_period_sigterm_then_sigkill_in_released_c_call(tmp_path):
    body = """
work()
ready()
import hashlib
hashlib.pbkdf2_hmac("sha256", b"pw", b"salt", 60_000_000)
"""
    r, prof = _recorded(tmp_path, body, timeout=40,
                        during=signal_when_ready(tmp_path / "ready", signal.SIGTERM, delay=0.2,
                                                 then_kill_after=2.0))
    assert r.rc == -signal.SIGTERM, r.describe()  # gone inside the grace period, by SIGTERM
    _assert_profile(tmp_path, prof, r, complete=True)


def test_os_exit_keeps_status_and_last_periodic_flush(tmp_path):
    r, prof = _recorded(tmp_path, "work()\nwait_for_flush()\nos._exit(4)")
    assert r.rc == 4, r.describe()
    _assert_profile(tmp_path, prof, r, complete=False)


def test_sigkill_keeps_last_periodic_flush(tmp_path):
    r, prof = _recorded(tmp_path, "work()\nwait_for_flush()\nready()\ntime.sleep(30)",
                        during=signal_when_ready(tmp_path / "ready", signal.SIGKILL))
    assert r.rc == -signal.SIGKILL, r.describe()
    _assert_profile(tmp_path, prof, r, complete=False)
    text = run_child([*CLI, "report", str(prof)], cwd=tmp_path)
    assert text.rc == 0 and "incomplete" in text.out, text.describe()  # said, not hidden


def test_sigkill_in_the_middle_of_flushes_never_leaves_an_unreadable_file(tmp_path):
    # Many distinct contexts make each flush a real transaction; kill at varied moments.
    body = """
for i in range(250):
    exec(f"def fn_{i}():\\n    return work(0.002)\\nfn_{i}()")
ready()
while True:
    work(0.01)
"""
    for delay in (0.0, 0.029, 0.071):
        case = tmp_path / f"kill{delay}"
        case.mkdir()
        r = record(case, program(body), flush=0.02, program_args=[str(case / "ready")],
                   during=signal_when_ready(case / "ready", signal.SIGKILL, delay=delay))
        assert r.rc == -signal.SIGKILL, r.describe()
        report_json(case, case / "prof.dcprof")  # first: the reader itself meets any hot journal
        meta = profile_meta(case / "prof.dcprof", r)
        assert meta["complete"] is False


@pytest.mark.parametrize("crash, sig", [
    ("import ctypes\nctypes.string_at(0)", signal.SIGSEGV),
    ("os.abort()", signal.SIGABRT),
])
def test_native_crash_keeps_status_faulthandler_and_last_flush(tmp_path, crash, sig):
    r, prof = _recorded(tmp_path, f"work()\nwait_for_flush()\n{crash}")
    assert r.rc == -sig, r.describe()
    assert "Fatal Python error" in r.err  # the program's faulthandler still reports
    _assert_profile(tmp_path, prof, r, complete=False)


def test_ctrl_c_twice_ends_without_hang_and_leaves_a_readable_profile(tmp_path):
    def during(proc):
        signal_when_ready(tmp_path / "ready", signal.SIGINT)(proc)
        time.sleep(0.05)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)

    r, prof = _recorded(tmp_path, "work()\nwait_for_flush()\nready()\ntime.sleep(30)",
                        during=during)
    assert r.rc in (-signal.SIGINT, 1), r.describe()
    assert r.seconds < 20
    meta = profile_meta(prof, r)  # complete if the second Ctrl-C came after the final write
    report_json(tmp_path, prof)
    assert isinstance(meta["complete"], bool)


def test_program_that_execs_itself_keeps_last_flush_and_new_image_is_not_profiled(tmp_path):
    body = """
if sys.argv[1] != "again":
    work()
    wait_for_flush()
    os.execv(sys.executable, [sys.executable, __file__, "again"])
print("new image profiled:", "DEEPCONTEXT_RECORD" in os.environ, flush=True)
sys.exit(6)
"""
    r, prof = _recorded(tmp_path, body)
    assert r.rc == 6 and "new image profiled: False" in r.out, r.describe()
    _assert_profile(tmp_path, prof, r, complete=False)
