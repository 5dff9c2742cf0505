"""Output problems are refused before the program runs; a full disk mid-run costs the profile,
never the program."""

from __future__ import annotations

import os
import resource
import signal
from pathlib import Path

import pytest
from reliability_harness import (
    CLI,
    PY,
    assert_one_line_error,
    profile_meta,
    record,
    run_child,
    write_program,
)
from reliability_programs import program

MARKER_PROGRAM = program("open(sys.argv[1], 'w').write('ran')\nwork(0.05)")


def _record_marker(tmp_path: Path, output: str, *extra: str, preexec_fn=None, cwd: Path | None = None):
    prog = write_program(tmp_path, MARKER_PROGRAM)
    marker = tmp_path / "marker"
    argv = [*CLI, "record", "-o", output, *extra, "--", PY, str(prog), str(marker)]
    return run_child(argv, cwd=cwd or tmp_path, preexec_fn=preexec_fn), marker


def test_existing_output_is_refused_before_the_program_runs(tmp_path):
    (tmp_path / "prof.dcprof").write_bytes(b"precious")
    r, marker = _record_marker(tmp_path, "prof.dcprof")
    assert_one_line_error(r)
    assert "already exists" in r.err and "--force" in r.err
    assert not marker.exists()
    assert (tmp_path / "prof.dcprof").read_bytes() == b"precious"


def test_force_overwrites_an_existing_output(tmp_path):
    (tmp_path / "prof.dcprof").write_bytes(b"old")
    r, marker = _record_marker(tmp_path, "prof.dcprof", "--force")
    assert r.rc == 0, r.describe()
    assert marker.exists()
    assert profile_meta(tmp_path / "prof.dcprof", r)["complete"] is True


@pytest.mark.parametrize("output, words", [
    ("missing_dir/prof.dcprof", "does not exist"),
    ("a_file/prof.dcprof", "does not exist"),
    (".", "is a directory"),
])
def test_bad_output_path_is_refused_before_the_program_runs(tmp_path, output, words):
    (tmp_path / "a_file").write_text("x")
    r, marker = _record_marker(tmp_path, output)
    assert_one_line_error(r)
    assert words in r.err
    assert not marker.exists()


def test_unwritable_directory_is_refused_before_the_program_runs(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    if os.access(locked, os.W_OK):  # root ignores permission bits; /proc/sys refuses even root
        locked = Path("/proc/sys")
        if os.access(locked, os.W_OK):
            pytest.skip("no unwritable directory available to this user")
    try:
        r, marker = _record_marker(tmp_path, str(locked / "prof.dcprof"))
        assert_one_line_error(r)
        assert "permission denied" in r.err
        assert not marker.exists()
    finally:
        (tmp_path / "locked").chmod(0o755)


def test_disk_full_mid_run_warns_once_and_the_program_runs_on(tmp_path):
    # RLIMIT_FSIZE stands in for a full disk: the first flushes fit, later ones (a growing
    # tree) do not. The write fails with EFBIG; SIGXFSZ must not kill the program.
    body = """
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # as a program may; our writes must not die of it
work(0.05)
for i in range(800):
    exec(f"def grow_{i}():\\n    return work(0.004)\\ngrow_{i}()")
    if i % 100 == 0:
        time.sleep(0.06)
with open(sys.argv[1], "w") as f:
    f.write("finished")
sys.exit(5)
"""
    limit = 64 * 1024

    def limit_file_size():  # runs in the child before exec; inherited by the program
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    r = record(tmp_path, program(body), flush=0.05, program_args=[str(tmp_path / "marker")],
               preexec_fn=limit_file_size, timeout=120)
    assert r.rc == 5, r.describe()
    assert (tmp_path / "marker").read_text() == "finished"
    warnings = [line for line in r.err.splitlines() if line.startswith("deepcontext:")]
    assert len(warnings) == 1 and "cannot write" in warnings[0], r.describe()
    assert "profile written" not in r.err
    meta = profile_meta(tmp_path / "prof.dcprof", r)  # the last good flush is still there
    assert meta["complete"] is False


def test_program_that_exceeds_its_own_file_size_limit_still_gets_sigxfsz(tmp_path):
    # Deferring SIGXFSZ around our own writes must not change the program's semantics.
    body = """
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
work(0.05)
with open("big.bin", "wb") as f:
    f.write(b"x" * 400_000)
print("not reached", flush=True)
"""

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))

    r = record(tmp_path, program(body), flush=0.05, program_args=["unused"],
               preexec_fn=limit_file_size)
    assert r.rc == -signal.SIGXFSZ, r.describe()
    assert "not reached" not in r.out


@pytest.mark.parametrize("context", [None, "python,op,native"])
def test_deep_recursion_is_bounded(tmp_path, context):
    body = """
sys.setrecursionlimit(20000)
def down(n):
    return work(0.2) if n == 0 else down(n - 1)
down(5000)
"""
    extra = ["--context", context] if context else []
    r = record(tmp_path, program(body), program_args=["unused"], timeout=120, extra_args=extra)
    assert r.rc == 0, r.describe()
    assert profile_meta(tmp_path / "prof.dcprof", r)["complete"] is True
    rt = run_child([*CLI, "report", "prof.dcprof"], cwd=tmp_path)
    assert rt.rc == 0 and "down" in rt.out, rt.describe()
    rj = run_child([*CLI, "report", "prof.dcprof", "--format", "json"], cwd=tmp_path)
    assert rj.rc == 0, rj.describe()


def test_memory_stays_flat_on_a_long_repetitive_run(tmp_path):
    # 10^5 steps of the same contexts, flushing every 50 ms: the tree stops growing after the
    # first step, so must the process.
    body = """
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
def leaf(i):
    return i * 2
def step(i):
    return leaf(i) + leaf(i + 1)
for i in range(20_000):
    step(i)
time.sleep(0.2)
base = rss_mb()
for i in range(100_000):
    step(i)
work(0.3)
time.sleep(0.2)
print("growth", round(rss_mb() - base, 1), flush=True)
"""
    r = record(tmp_path, program(body), flush=0.05, program_args=["unused"], timeout=120)
    assert r.rc == 0, r.describe()
    growth = float(r.out.split("growth", 1)[1])
    assert growth < 8, r.out
    assert profile_meta(tmp_path / "prof.dcprof", r)["complete"] is True


@pytest.mark.parametrize("flag", ["-E", "-I", "-S", "-uE"])
def test_python_flags_that_would_skip_profiling_are_refused_up_front(tmp_path, flag):
    prog = write_program(tmp_path, MARKER_PROGRAM)
    marker = tmp_path / "marker"
    r = run_child([*CLI, "record", "-o", "prof.dcprof", "--", PY, flag, str(prog), str(marker)],
                  cwd=tmp_path)
    assert_one_line_error(r)
    assert "skips the bootstrap" in r.err
    assert not marker.exists() and not (tmp_path / "prof.dcprof").exists()


@pytest.mark.parametrize("ending", ["normal", "sigterm"])
def test_program_that_closes_all_descriptors_runs_on_undisturbed(tmp_path, ending):
    # Daemonizing code closes every descriptor it did not open (ours included), then opens its
    # own files on the freed numbers: no traceback, no stray byte in its files, and the profile
    # is still written to its end (the writer holds no descriptor between flushes; one it kept
    # would now be the program's, and a flush would write into it and close it: finding A1).
    body = """
work(0.1)
os.closerange(3, 4096)
files = [open(f"user{i}.txt", "w") for i in range(4)]
work(0.2)
time.sleep(0.3)  # flushes happen meanwhile
for f in files:
    f.write("user data\\n")
    f.flush()
ready()
if sys.argv[2] == "sigterm":
    time.sleep(30)
"""
    sig = signal.SIGTERM if ending == "sigterm" else None
    during = None
    if sig is not None:
        from reliability_harness import signal_when_ready
        during = signal_when_ready(tmp_path / "ready", sig, delay=0.1)
    r = record(tmp_path, program(body), flush=0.05, program_args=[str(tmp_path / "ready"), ending],
               during=during)
    assert r.rc == (-signal.SIGTERM if sig else 0), r.describe()
    assert "Traceback" not in r.err and "Exception" not in r.err, r.describe()
    assert "cannot write" not in r.err, r.describe()
    for i in range(4):
        assert (tmp_path / f"user{i}.txt").read_text() == "user data\n"
    assert profile_meta(tmp_path / "prof.dcprof", r)["complete"] is True
