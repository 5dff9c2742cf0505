"""Starting and stopping in every wrong order gives a clear DeepContextError, never a crash."""

from __future__ import annotations

import pytest
from reliability_harness import (
    PY,
    profile_meta,
    record,
    report_json,
    run_child,
    write_program,
)
from reliability_programs import program

MISUSE = {
    "start_twice": """
deepcontext.start("a.dcprof")
try:
    deepcontext.start("b.dcprof")
finally:
    deepcontext.stop()
""",
    "nested_profile": """
with deepcontext.profile("a.dcprof", flush_interval=0.1):
    with deepcontext.profile("b.dcprof"):
        pass
""",
    "stop_without_start": "deepcontext.stop()",
    "stop_twice": """
deepcontext.start("a.dcprof")
deepcontext.stop()
deepcontext.stop()
""",
    "session_restarted": """
s = deepcontext.profile("a.dcprof")
s.start(); s.stop()
s.start()
""",
    "bad_interval": "deepcontext.profile('a.dcprof', flush_interval=0)",
    "existing_output": """
open("exists.dcprof", "w").write("precious")
try:
    deepcontext.start("exists.dcprof")
finally:
    assert open("exists.dcprof").read() == "precious"
""",
    "missing_directory": "deepcontext.start('no/such/dir/a.dcprof')",
    "bad_context": "deepcontext.profile('a.dcprof', context='python,bogus')",
}


@pytest.mark.parametrize("case", sorted(MISUSE))
def test_api_misuse_is_a_clear_error(tmp_path, case):
    body = f"""
import deepcontext
try:
{_indent(MISUSE[case])}
except deepcontext.DeepContextError as e:
    print("DeepContextError:", e, flush=True)
    sys.exit(0)
print("no error", flush=True)
"""
    prog = write_program(tmp_path, program(body))
    r = run_child([PY, str(prog)], cwd=tmp_path)
    assert r.rc == 0, r.describe()
    assert "DeepContextError:" in r.out, r.describe()
    assert "Traceback" not in r.err
    line = r.out.split("DeepContextError:", 1)[1].strip()
    assert line and "\n" not in line
    if case != "session_restarted" and (tmp_path / "a.dcprof").exists():
        # the first session (if any) still wrote a complete, readable profile
        assert profile_meta(tmp_path / "a.dcprof", r)["complete"] is True


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.strip("\n").splitlines())


def test_api_start_inside_a_recorded_program_defers_to_record(tmp_path):
    # (the program's own session records nothing and says so once; the program runs on)
    body = """
import deepcontext
deepcontext.start("inner.dcprof")
work()
deepcontext.stop()
print("inner session ran", flush=True)
"""
    r = record(tmp_path, program(body), program_args=["unused"])
    assert r.rc == 0 and "inner session ran" in r.out, r.describe()
    assert r.err.count("deepcontext: the program's own session (inner.dcprof) records nothing: "
                       "`deepcontext record` profiles the whole run into prof.dcprof\n") == 1, \
        r.describe()
    assert not (tmp_path / "inner.dcprof").exists()
    assert profile_meta(tmp_path / "prof.dcprof", r)["complete"] is True


def test_many_sequential_sessions_stay_bounded(tmp_path):
    # 60 start/stop cycles: every profile valid; RSS and open file descriptors do not grow.
    body = """
import deepcontext, resource
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
def fds():
    return len(os.listdir("/proc/self/fd"))
def cycle(i):
    with deepcontext.profile(f"s{i % 3}.dcprof", force=True, flush_interval=0.05):
        work(0.001)
for i in range(10):
    cycle(i)
base_rss, base_fds = rss_mb(), fds()
for i in range(50):
    cycle(i)
print("growth", round(rss_mb() - base_rss, 1), fds() - base_fds, flush=True)
"""
    prog = write_program(tmp_path, program(body))
    r = run_child([PY, str(prog)], cwd=tmp_path, timeout=120)
    assert r.rc == 0, r.describe()
    rss_growth, fd_growth = r.out.split("growth", 1)[1].split()
    assert float(rss_growth) < 20, r.out
    assert int(fd_growth) <= 0, r.out
    for i in range(3):
        assert profile_meta(tmp_path / f"s{i}.dcprof")["complete"] is True


def test_recording_under_cprofile_and_with_a_user_profile_hook(tmp_path):
    body = """
seen = []
sys.setprofile(lambda frame, event, arg: seen.append(event) if len(seen) < 5 else None)
work()
sys.setprofile(None)
print("hook saw", len(seen), flush=True)
"""
    prog = write_program(tmp_path, program(body))
    r = run_child([PY, "-m", "deepcontext", "record", "-o", "prof.dcprof", "--sample-interval",
                   "0.002", "--", PY, "-m", "cProfile", "-o", "cprof.out", str(prog)], cwd=tmp_path)
    assert r.rc == 0, r.describe()
    assert (tmp_path / "cprof.out").stat().st_size > 0
    assert profile_meta(tmp_path / "prof.dcprof", r)["complete"] is True
    report_json(tmp_path, tmp_path / "prof.dcprof")
