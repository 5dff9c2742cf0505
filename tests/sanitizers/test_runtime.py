"""The sanitizer runs test what they claim: every process that loads the core, including the
program under ``record`` (which execs python again), loads the instrumented build with the
sanitizer runtime, and a report fails the process. Run by tests/sanitizers/run.sh; skipped in the
ordinary suite."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

KIND = os.environ.get("DEEPCONTEXT_SANITIZER")
pytestmark = pytest.mark.skipif(not KIND, reason="only under tests/sanitizers/run.sh")
RUNTIME = {"asan": "libasan.so", "tsan": "libtsan.so"}.get(KIND or "", "")
ENTRY = {"asan": b"__asan_init", "tsan": b"__tsan_init"}.get(KIND or "", b"")

PROBE = """
import json, sys
core = sys.modules.get("deepcontext._core")
maps = open("/proc/self/maps").read()
print(json.dumps({"core": core.__file__ if core else None, "runtime": %r in maps}))
"""


def scrubbed_env() -> dict[str, str]:
    """The environment the reliability harness gives its children (no PYTHONPATH)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEEPCONTEXT_")}
    env.pop("PYTHONPATH", None)
    return env


def test_the_core_in_this_process_is_the_instrumented_build():
    from deepcontext import _core

    assert Path(_core.__file__).is_relative_to(sys.prefix), (_core.__file__, sys.prefix)
    assert ENTRY in Path(_core.__file__).read_bytes()
    assert RUNTIME in Path("/proc/self/maps").read_text()


def test_the_program_under_record_loads_the_build_with_the_runtime(tmp_path):
    prog = tmp_path / "probe.py"
    prog.write_text(PROBE % RUNTIME)
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "-o", "p.dcprof", "--",
                           sys.executable, str(prog)], cwd=tmp_path, env=scrubbed_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    from deepcontext import _core

    assert json.loads(proc.stdout) == {"core": _core.__file__, "runtime": True}


def _report_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("report*"))


def _options_with_log(tmp_path: Path, var: str) -> dict[str, str]:
    env = scrubbed_env()
    options = [o for o in env.get(var, "").split(":") if o and not o.startswith("log_path=")]
    env[var] = ":".join([*options, f"log_path={tmp_path}/report"])
    return env


@pytest.mark.skipif(KIND != "asan", reason="the AddressSanitizer run")
def test_an_address_error_aborts_the_process_and_leaves_a_report(tmp_path):
    code = ("import ctypes\n"
            "src = ctypes.create_string_buffer(4096); dst = ctypes.create_string_buffer(8192)\n"
            "ctypes.memmove(dst, src, 8192)\n"  # reads 4 KiB past src's malloc'ed block
            "print('not reached')\n")
    proc = subprocess.run([sys.executable, "-c", code], env=_options_with_log(tmp_path, "ASAN_OPTIONS"),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "not reached" not in proc.stdout
    (report,) = _report_files(tmp_path)
    assert "heap-buffer-overflow" in report.read_text()


@pytest.mark.skipif(KIND != "tsan", reason="the ThreadSanitizer run")
def test_a_thread_error_leaves_a_report_and_fails_the_exit_status(tmp_path):
    code = ("import ctypes\n"
            "libc = ctypes.CDLL(None)\n"
            "m = ctypes.create_string_buffer(64)\n"
            "libc.pthread_mutex_init(m, None)\n"
            "libc.pthread_mutex_unlock(m)\n")  # unlocking a mutex nobody holds
    proc = subprocess.run([sys.executable, "-c", code], env=_options_with_log(tmp_path, "TSAN_OPTIONS"),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    (report,) = _report_files(tmp_path)
    assert "unlock of an unlocked mutex" in report.read_text()


@pytest.mark.skipif(KIND != "tsan", reason="the ThreadSanitizer run")
def test_a_thread_that_used_libunwind_still_crashes_at_exit_under_tsan(tmp_path):
    """Why the native-sampling tests with exiting threads stay out of this run (known-tsan.txt):
    TSan kills a thread that called libunwind at its exit, with no code of ours involved
    (libunwind_thread_exit.c says how). When this fails, TSan has fixed it: put them back."""
    source = Path(__file__).with_name("libunwind_thread_exit.c")
    exe = tmp_path / "libunwind_thread_exit"
    cc = os.environ.get("CC", "gcc")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # the compiler, uninstrumented
    subprocess.run([cc, "-O1", "-o", str(exe), str(source), "-ldl", "-pthread"], env=env,
                   check=True, capture_output=True, timeout=120)
    proc = subprocess.run([str(exe)], env=_options_with_log(tmp_path, "TSAN_OPTIONS"),
                          capture_output=True, text=True, timeout=60)
    if proc.returncode == 2 and "no libunwind" in proc.stdout:
        pytest.skip("libunwind.so.8 is not installed")
    assert proc.returncode == -signal.SIGSEGV, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == ""  # died at the thread's exit, before the join returned
    assert _report_files(tmp_path) == []  # and TSan itself said nothing
    env.pop("TSAN_OPTIONS", None)
    plain = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0 and plain.stdout.startswith("thread exited"), plain


def test_the_program_under_record_gets_the_compiled_operator_hook(tmp_path):
    """The tests' torch programs run the compiled operator hook, not the fallback tier: its
    build-time ninja check must find the real binary (a shell shim on PATH crashes under a
    preloaded TSan, and every threaded torch test then ran the dispatch tier)."""
    pytest.importorskip("torch")
    prog = tmp_path / "ops.py"
    prog.write_text("import torch\nprint(int((torch.ones(3) + 1).sum()))\n")
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "-o", "p.dcprof",
                           "--context", "python,op", "--", sys.executable, str(prog)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout == "6\n", proc.stderr
    from deepcontext.tree import load

    assert load(tmp_path / "p.dcprof").metadata["op_tier"] == "record_function", proc.stderr
