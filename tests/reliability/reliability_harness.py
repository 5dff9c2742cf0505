"""Run the real CLI or API in a child process under a hard timeout, with faulthandler on.

Every reliability case goes through ``run_child``: a hung child gets SIGABRT first (so
faulthandler prints every thread's stack into the failure message), then SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PY = sys.executable
CLI = [PY, "-m", "deepcontext"]
ERROR_PREFIX = "deepcontext: error:"


@dataclass
class Result:
    rc: int
    out: str
    err: str
    seconds: float

    def describe(self) -> str:
        return f"rc={self.rc} after {self.seconds:.1f}s\n--- stdout\n{self.out[-3000:]}\n--- stderr\n{self.err[-6000:]}"


class ChildHung(AssertionError):
    pass


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A clean environment: no profiler or rank variables from outside, faulthandler on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEEPCONTEXT_")}
    env.pop("PYTHONPATH", None)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(k, None)
    env.update(PYTHONFAULTHANDLER="1", PYTHONUNBUFFERED="1", COLUMNS="200")
    if extra:
        env.update(extra)
    return env


def run_child(argv: Sequence[str], *, cwd: Path, timeout: float = 60, env: dict[str, str] | None = None,
              preexec_fn: Callable[[], None] | None = None,
              during: Callable[[subprocess.Popen], None] | None = None) -> Result:
    """Run ``argv``; ``during(proc)`` may signal it while it runs. Fails loudly on a hang."""
    start = time.monotonic()
    proc = subprocess.Popen(list(argv), cwd=cwd, env=env or child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            errors="backslashreplace", preexec_fn=preexec_fn)  # noqa: PLW1509 - rlimits
    try:
        if during is not None:
            try:
                during(proc)
            except AssertionError as e:  # e.g. the child died before it was ready: say why
                proc.kill()
                _, err = proc.communicate()
                raise AssertionError(f"{e}\n--- child stderr\n{err[-6000:]}") from None
        out, err = proc.communicate(timeout=max(1.0, timeout - (time.monotonic() - start)))
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # faulthandler dumps all threads
        try:
            out, err = proc.communicate(timeout=3)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        raise ChildHung(f"child hung for {timeout}s: {list(argv)}\n--- stderr\n{err[-8000:]}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return Result(proc.returncode, out, err, time.monotonic() - start)


def write_program(tmp: Path, source: str, name: str = "prog.py") -> Path:
    path = tmp / name
    path.write_text(textwrap.dedent(source))
    return path


def record(tmp: Path, source: str, *, output: str | None = "prof.dcprof", flush: float = 0.1,
           sample: float = 0.002, extra_args: Sequence[str] = (), timeout: float = 60,
           env: dict[str, str] | None = None, preexec_fn: Callable[[], None] | None = None,
           during: Callable[[subprocess.Popen], None] | None = None, name: str = "prog.py",
           program_args: Sequence[str] = ()) -> Result:
    """``deepcontext record`` a program given as source text, in ``tmp``."""
    prog = write_program(tmp, source, name)
    argv = [*CLI, "record", "--flush-interval", str(flush), "--sample-interval", str(sample)]
    if output is not None:
        argv += ["-o", output]
    argv += [*extra_args, "--", PY, str(prog), *program_args]
    return run_child(argv, cwd=tmp, timeout=timeout, env=env, preexec_fn=preexec_fn, during=during)


def run_python(tmp: Path, source: str, *, timeout: float = 60, name: str = "api_prog.py",
               env: dict[str, str] | None = None, args: Sequence[str] = ()) -> Result:
    """Run a program that uses the Python API directly (no record)."""
    prog = write_program(tmp, source, name)
    return run_child([PY, str(prog), *args], cwd=tmp, timeout=timeout, env=env)


def wait_for_file(path: Path, proc: subprocess.Popen, timeout: float = 30) -> None:
    """Block until the child creates ``path`` (its way of saying "ready")."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"child exited with {proc.returncode} before creating {path.name}")
        if time.monotonic() > deadline:
            raise AssertionError(f"child never created {path.name}")
        time.sleep(0.01)


def signal_when_ready(ready: Path, sig: int, *, delay: float = 0.0,
                      then_kill_after: float | None = None) -> Callable[[subprocess.Popen], None]:
    def during(proc: subprocess.Popen) -> None:
        wait_for_file(ready, proc)
        time.sleep(delay)
        proc.send_signal(sig)
        if then_kill_after is not None:
            try:
                proc.wait(then_kill_after)
            except subprocess.TimeoutExpired:
                proc.kill()
    return during


def profile_meta(path: Path, result: Result | None = None) -> dict[str, Any]:
    """The profile's metadata, read with plain sqlite (independent of the package's reader)."""
    context = result.describe() if result is not None else ""
    assert path.is_file(), f"no profile at {path}\n{context}"
    # Read-write: after a kill mid-flush SQLite rolls the hot journal back on first read.
    db = sqlite3.connect(str(path))
    try:
        meta = {k: json.loads(v) for k, v in db.execute("SELECT key, value FROM meta")}
    finally:
        db.close()
    assert "complete" in meta, f"profile {path.name} has no metadata: {meta}\n{context}"
    return meta


def report_json(tmp: Path, path: Path, *extra: str) -> dict[str, Any]:
    """``deepcontext report --format json`` in a child; asserts success."""
    r = run_child([*CLI, "report", str(path), "--format", "json", *extra], cwd=tmp, timeout=60)
    assert r.rc == 0, r.describe()
    return json.loads(r.out)


def frame_names(doc: dict[str, Any]) -> set[str]:
    names, stack = set(), [doc["tree"]]
    while stack:
        node = stack.pop()
        names.add(node["frame"]["name"])
        stack.extend(node["children"])
    return names


def assert_one_line_error(r: Result) -> None:
    """A clean refusal: non-zero exit, stderr is exactly one 'deepcontext: error:' line."""
    assert r.rc != 0, r.describe()
    assert "Traceback" not in r.err, r.describe()
    lines = r.err.strip("\n").splitlines()
    assert len(lines) == 1 and lines[0].startswith(ERROR_PREFIX), r.describe()
