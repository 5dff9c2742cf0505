"""The README's chain on the real CLI: ``record`` says where the profile went in a command that
is safe to paste, and ``report`` with no file reads the run that just ended, on every run."""

import os
import shlex
import subprocess
import sys


def run(cwd, *argv):
    # An explicit environment, without COLUMNS and LINES: pytest imports readline at start
    # (_pytest/capture.py, _readline_workaround), whose initialisation exports COLUMNS=80 and
    # LINES=24 into the C environment only (os.environ never sees them), and a child started
    # without env= inherits that environment; `report` then wraps at 80 columns, which cuts the
    # command line whenever the interpreter's path is long (the sanitizer venvs' is).
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return subprocess.run([sys.executable, "-m", "deepcontext", *argv], capture_output=True,
                          text=True, cwd=cwd, timeout=300, env=env)


def test_record_then_report_reads_the_new_profile_on_every_run(tmp_path):
    code = "print('hello')"
    for n, name in enumerate(["python-c.dcprof", "python-c.1.dcprof"]):
        rec = run(tmp_path, "record", "--context", "python", "--", sys.executable, "-c", code)
        assert rec.returncode == 0, rec.stderr
        assert rec.stdout == "hello\n"
        assert rec.stderr.splitlines()[-1] == (
            f"deepcontext: profile written to {name}; read it with: deepcontext report {name}")
        rep = run(tmp_path, "report")
        assert rep.returncode == 0, rep.stderr
        assert rep.stderr == f"deepcontext: report {name} (the newest profile here)\n"
        assert rep.stdout.splitlines()[0] == "command: " + shlex.join([sys.executable, "-c", code])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["python-c.1.dcprof", "python-c.dcprof"]


def test_the_printed_command_is_safe_to_paste(tmp_path):
    out = tmp_path / "my run; $(touch pwned).dcprof"
    rec = run(tmp_path, "record", "-o", out.name, "--context", "python", "--", sys.executable,
              "-c", "pass")
    assert rec.returncode == 0, rec.stderr
    last = rec.stderr.splitlines()[-1]
    assert last == ("deepcontext: profile written to 'my run; $(touch pwned).dcprof'; read it "
                    "with: deepcontext report 'my run; $(touch pwned).dcprof'")
    command = last.split("read it with: ", 1)[1].replace("deepcontext", f"{sys.executable} -m deepcontext", 1)
    pasted = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=tmp_path)
    assert pasted.returncode == 0, pasted.stderr
    assert not (tmp_path / "pwned").exists()
