"""Child-side driver for the reader cases: runs the real CLI entry point on many damaged files in
one process (fast), and reports every outcome that is neither a correct result nor a one-line
``deepcontext: error:``. Run as ``python reader_check.py MODE ...``; prints a JSON summary.

Modes: ``files PATH...`` | ``truncations PROFILE`` | ``fuzz PROFILE SECONDS`` (damaged
bytes) | ``cells PROFILE SECONDS`` (valid SQLite, hostile values in the profile's cells).
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib
import io
import json
import os
import resource
import sys
import tempfile
import traceback
from pathlib import Path

from deepcontext.cli.main import main

ERROR_PREFIX = "deepcontext: error:"
MEMORY_LIMIT = 2 * 2**30  # a reader that needs more than this on tiny files is unbounded


def _available(command: str) -> bool:
    try:
        importlib.import_module(f"deepcontext.cli.{command}")
        return True
    except ImportError:
        return False


def reader_commands(path: str, outdir: Path, thorough: bool = True) -> list[list[str]]:
    """Every read-only command, in the forms that exercise different code paths (``thorough``
    False keeps one form per command, for the high-volume modes)."""
    cmds = [["report", path], ["report", path, "--format", "json"]]
    if thorough:
        cmds += [["report", path, "--inverted", "--format", "json"], ["report", path, "--flat"]]
    if _available("analyze"):
        cmds.append(["analyze", path, "--format", "sarif"])
        if thorough:
            cmds.append(["analyze", path])
    if _available("export"):
        formats = ["folded", "hatchet", "pprof", "speedscope", "trace"] if thorough else ["trace"]
        cmds += [["export", path, "--format", f, "-o", str(outdir / f"out.{f}"), "-f"]
                 for f in formats]
    if _available("view"):
        cmds.append(["view", path, "-o", str(outdir / "out.html"), "-f", "--no-browser"])
    if _available("diff"):
        cmds.append(["diff", path, path, "--format", "json"])
    if _available("merge"):
        cmds.append(["merge", path, path, "-o", str(outdir / "merged.dcprof"), "-f"])
    return cmds


def run_one(argv: list[str]) -> str | None:
    """None if the outcome is acceptable, else a description of the problem."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
    except BaseException:  # noqa: BLE001 - this is exactly what we hunt for
        return f"{argv}: escaped exception\n{traceback.format_exc(limit=8)}"
    errtext = err.getvalue()
    if rc == 0:
        if "--format" in argv and ("json" in argv or "sarif" in argv):
            try:
                json.loads(out.getvalue())
            except ValueError as e:
                return f"{argv}: exit 0 but invalid JSON ({e})"
        return None
    lines = errtext.strip("\n").splitlines()
    if len(lines) != 1 or not lines[0].startswith(ERROR_PREFIX):
        return f"{argv}: exit {rc} with stderr {errtext[:500]!r}"
    return None


def check_bytes(data: bytes, workdir: Path, thorough: bool = True) -> list[str]:
    path = workdir / "case.dcprof"
    for suffix in ("", "-journal", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    path.write_bytes(data)
    problems = []
    for argv in reader_commands(str(path), workdir, thorough):
        problem = run_one(argv)
        if problem:
            problems.append(problem)
    return problems


def truncation_offsets(size: int) -> list[int]:
    offsets = set(range(min(size, 128)))  # every byte of the header
    offsets.update(range(0, size, 97))  # a stride that walks across page layouts
    for page in range(0, size + 1, 512):  # around every possible page boundary
        offsets.update(o for o in (page - 1, page, page + 1) if 0 <= o < size)
    return sorted(offsets)


def mode_truncations(profile: Path, workdir: Path) -> dict:
    data = profile.read_bytes()
    problems, offsets = [], truncation_offsets(len(data))
    ok = 0
    for n in offsets:
        found = check_bytes(data[:n], workdir, thorough=False)
        problems.extend(f"truncated at {n}: {p}" for p in found)
        ok += not found
    return {"cases": len(offsets), "ok": ok, "problems": problems[:20]}


def mode_files(paths: list[str], workdir: Path) -> dict:
    problems = []
    for p in paths:
        for argv in reader_commands(p, workdir):
            problem = run_one(argv)
            if problem:
                problems.append(problem)
    return {"cases": len(paths), "problems": problems[:40]}


def mode_fuzz(profile: Path, examples: int, workdir: Path) -> dict:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    data = profile.read_bytes()
    found: list[str] = []
    count = [0]
    edits = st.lists(st.tuples(st.integers(0, len(data) - 1), st.integers(0, 255)),
                     min_size=1, max_size=24)
    header_edits = st.lists(st.tuples(st.integers(0, 111), st.integers(0, 255)),
                            min_size=1, max_size=6)
    damaged = st.one_of(
        st.tuples(edits, st.integers(1, len(data))),
        st.tuples(header_edits, st.just(len(data))),
        st.tuples(edits, st.just(len(data))),
    )

    # Deterministic: a fixed number of examples (the caller's; a longer run passes more),
    # whatever the machine's speed; a time box made the count a slow machine's verdict (168 of
    # the 200 asserted in 12 s on a 2-core VM). No shrinking: inputs are reported raw.
    @settings(max_examples=examples, deadline=None,
              derandomize=True, database=None, phases=[Phase.explicit, Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.one_of(damaged, st.binary(max_size=4096)))
    def fuzz(case):
        if len(found) >= 10:
            return
        count[0] += 1
        if isinstance(case, bytes):
            blob = b"SQLite format 3\x00" + case if case[:1] == b"\x00" else case
        else:
            changes, cut = case
            buf = bytearray(data)
            for off, value in changes:
                buf[off] = value
            blob = bytes(buf[:cut])
        for problem in check_bytes(blob, workdir, thorough=False):
            found.append(f"{problem}\n  input: {blob[:64]!r}... ({len(blob)} bytes)")

    fuzz()
    return {"cases": count[0], "problems": found[:10]}


COLUMNS = {"meta": ["key", "value"], "frames": ["id", "kind", "name", "file", "line", "extra"],
           "nodes": ["id", "parent", "frame"], "metrics": ["node", "metric", "value"],
           "metric_defs": ["name", "unit", "description"]}


def mode_cells(profile: Path, examples: int, workdir: Path) -> dict:
    """Structure-aware fuzzing: valid SQLite, hostile values in the profile's own cells."""
    import shutil
    import sqlite3

    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    found: list[str] = []
    count = [0]
    values = st.one_of(
        st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1),
        st.floats(allow_nan=False), st.binary(max_size=64),
        st.text(st.characters(exclude_categories=["Cs"]), max_size=64),
        st.sampled_from(["", "null", "[]", "{}", "true", "1e999", '"x"', "[1, 2]", "{\"a\": []}",
                         "python", "op", "kernel", "root", "cpu.time", "-1", "0", "1"]),
    )
    edit = st.tuples(st.sampled_from(sorted(COLUMNS)), st.integers(0, 5), st.integers(0, 200),
                     values)

    @settings(max_examples=examples, deadline=None,
              derandomize=True, database=None, phases=[Phase.explicit, Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.lists(edit, min_size=1, max_size=6))
    def fuzz(edits):
        if len(found) >= 10:
            return
        count[0] += 1
        case = workdir / "cells.dcprof"
        shutil.copyfile(profile, case)
        db = sqlite3.connect(case)
        applied = []
        for table, col, row, value in edits:
            column = COLUMNS[table][col % len(COLUMNS[table])]
            try:
                db.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = (SELECT rowid FROM "
                           f"{table} LIMIT 1 OFFSET ? % MAX(1, (SELECT COUNT(*) FROM {table})))",
                           (value, row))
                applied.append((table, column, row, value))
            except sqlite3.Error:
                pass  # a constraint said no: not a case
        db.commit()
        db.close()
        for argv in reader_commands(str(case), workdir, thorough=False):
            problem = run_one(argv)
            if problem:
                found.append(f"{problem}\n  edits: {applied!r}"[:3000])

    fuzz()
    return {"cases": count[0], "problems": found[:10]}


def main_child() -> None:
    faulthandler.enable()
    faulthandler.dump_traceback_later(float(os.environ.get("DC_HANG_AFTER", "240")), exit=True)
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    sys.setrecursionlimit(10_000)  # to *parse* deep JSON output here; the CLI runs as usual
    mode, args = sys.argv[1], sys.argv[2:]
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # many small files: use RAM
    with tempfile.TemporaryDirectory(dir=shm) as tmp:
        workdir = Path(tmp)
        if mode == "files":
            result = mode_files(args, workdir)
        elif mode == "truncations":
            result = mode_truncations(Path(args[0]), workdir)
        elif mode == "cells":
            result = mode_cells(Path(args[0]), int(args[1]), workdir)
        elif mode == "fuzz":
            result = mode_fuzz(Path(args[0]), int(args[1]), workdir)
        else:
            raise SystemExit(f"unknown mode {mode}")
    sys.__stdout__.write("RESULT " + json.dumps(result) + "\n")


if __name__ == "__main__":
    main_child()
