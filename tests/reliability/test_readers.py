"""Readers on bad input: a correct result or one 'deepcontext: error:' line, never a traceback,
a hang or unbounded memory. Damaged files come from a real recorded profile."""

from __future__ import annotations

import json
import random
import re
import sqlite3
from pathlib import Path

import pytest
from reliability_harness import CLI, PY, assert_one_line_error, record, run_child
from reliability_programs import program

CHECKER = Path(__file__).with_name("reader_check.py")

REAL_PROGRAM = """
def leaf_a():
    return work(0.05)
def leaf_b():
    return work(0.05)
def middle():
    leaf_a()
    leaf_b()
for _ in range(2):
    middle()
"""


@pytest.fixture(scope="module")
def real_profile(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("real")
    r = record(tmp, program(REAL_PROGRAM), program_args=["unused"])
    assert r.rc == 0, r.describe()
    return tmp / "prof.dcprof"


def run_checker(tmp: Path, *args: str, timeout: float = 240) -> dict:
    r = run_child([PY, str(CHECKER), *args], cwd=tmp, timeout=timeout)
    assert r.rc == 0, r.describe()
    line = next(x for x in r.out.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def _copy(src: Path, dst: Path) -> Path:
    dst.write_bytes(src.read_bytes())
    return dst


# -- files that are not profiles --------------------------------------------------------------
def _not_profiles(tmp: Path) -> dict[str, Path]:
    rng = random.Random(7)
    files = {
        "empty": b"",
        "text": b"hello, this is not a profile\n" * 20,
        "random": bytes(rng.getrandbits(8) for _ in range(8192)),
        "zeros": b"\0" * 8192,
        "sqlite_header_only": b"SQLite format 3\x00" + b"\0" * 84,
        "sqlite_header_random_tail": b"SQLite format 3\x00" + bytes(rng.getrandbits(8) for _ in range(4000)),
    }
    out = {}
    for name, data in files.items():
        out[name] = tmp / f"{name}.dcprof"
        out[name].write_bytes(data)
    foreign = tmp / "foreign.dcprof"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE users(id INTEGER, name TEXT)")
    db.execute("INSERT INTO users VALUES (1, 'x')")
    db.commit()
    db.close()
    out["foreign_sqlite"] = foreign
    meta_foreign = tmp / "meta_foreign.dcprof"
    db = sqlite3.connect(meta_foreign)
    db.execute("CREATE TABLE meta(key TEXT, value TEXT)")
    db.execute("INSERT INTO meta VALUES ('format', '\"something-else\"')")
    db.commit()
    db.close()
    out["foreign_with_meta"] = meta_foreign
    out["directory"] = tmp / "a_dir.dcprof"
    out["directory"].mkdir()
    out["missing"] = tmp / "missing.dcprof"
    return out


@pytest.mark.parametrize("kind", ["empty", "text", "random", "zeros", "sqlite_header_only",
                                  "sqlite_header_random_tail", "foreign_sqlite",
                                  "foreign_with_meta", "directory", "missing"])
def test_report_refuses_non_profiles_in_one_line(tmp_path, kind):
    path = _not_profiles(tmp_path)[kind]
    r = run_child([*CLI, "report", str(path)], cwd=tmp_path)
    assert_one_line_error(r)


def test_newer_schema_version_is_refused_with_upgrade_hint(tmp_path, real_profile):
    path = _copy(real_profile, tmp_path / "newer.dcprof")
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    r = run_child([*CLI, "report", str(path)], cwd=tmp_path)
    assert_one_line_error(r)
    assert "newer" in r.err and "999" in r.err


# -- damaged real profiles --------------------------------------------------------------------
def _sql_damage(path: Path, statements: list[str]) -> Path:
    db = sqlite3.connect(path)
    for sql in statements:
        db.execute(sql)
    db.commit()
    db.close()
    return path


CORRUPTIONS = {
    "frames_wrong_columns": ["DROP TABLE frames", "CREATE TABLE frames(id INTEGER, kind TEXT)",
                             "INSERT INTO frames VALUES (0, 'python')"],
    "nodes_wrong_columns": ["DROP TABLE nodes", "CREATE TABLE nodes(id INTEGER)",
                            "INSERT INTO nodes VALUES (1)"],
    "metrics_wrong_columns": ["DROP TABLE metrics", "CREATE TABLE metrics(a, b, c, d, e)",
                              "INSERT INTO metrics VALUES (1, 2, 3, 4, 5)"],
    "frames_is_a_view": ["DROP TABLE frames",
                         ("CREATE VIEW frames AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL "
                          "SELECT x + 1 FROM c) SELECT x, 'python', 'n', 'f', 1, '{}' FROM c")],
    "node_cycle": ["UPDATE nodes SET parent = id + 1 WHERE id = 1"],
    "node_self_parent": ["UPDATE nodes SET parent = id WHERE id = 2"],
    "orphan_node": ["UPDATE nodes SET parent = 99999 WHERE id = 2"],
    "missing_frame": ["UPDATE nodes SET frame = 99999 WHERE id = 1"],
    "text_parent": ["UPDATE nodes SET parent = 'x' || parent WHERE id = 3"],
    "negative_ids": ["UPDATE nodes SET id = -id WHERE id > 2"],
    "infinite_metric": ["UPDATE metrics SET value = 1e999"],
    "mixed_infinities": ["UPDATE metrics SET value = 1e999 WHERE rowid % 2 = 0",
                         "UPDATE metrics SET value = -1e999 WHERE rowid % 2 = 1"],
    "text_metric": ["UPDATE metrics SET value = 'abc'"],
    "blob_metric": ["UPDATE metrics SET value = x'00ff'"],
    "metric_unknown_node": ["UPDATE metrics SET node = 123456"],
    "unknown_frame_kind": ["UPDATE frames SET kind = 'spaceship'"],
    "extra_not_json": ["UPDATE frames SET extra = '{not json'"],
    "extra_is_list": ["UPDATE frames SET extra = '[1, 2]'"],
    "extra_shadows_field": ["UPDATE frames SET extra = '{\"name\": \"x\", \"kind\": \"y\"}'"],
    "line_is_text": ["UPDATE frames SET line = 'abc'"],
    "name_is_blob": ["UPDATE frames SET name = x'ff00fe'"],
    "notes_not_a_list": ["UPDATE meta SET value = '12' WHERE key = 'notes'"],
    "notes_is_dict": ["UPDATE meta SET value = '{\"a\": 1}' WHERE key = 'notes'"],
    "command_is_dict": ["UPDATE meta SET value = '{\"a\": 1}' WHERE key = 'command'"],
    "meta_nan": ["UPDATE meta SET value = 'NaN' WHERE key = 'start_time'"],
    "complete_is_text": ["UPDATE meta SET value = '\"yes\"' WHERE key = 'complete'"],
    "schema_version_text": ["UPDATE meta SET value = '\"1\"' WHERE key = 'schema_version'"],
    "schema_version_float": ["UPDATE meta SET value = '1.5' WHERE key = 'schema_version'"],
    "schema_version_huge": [("UPDATE meta SET value = '1' || replace(hex(zeroblob(400)), '00', "
                             "'9') WHERE key = 'schema_version'")],
    "schema_version_bool": ["UPDATE meta SET value = 'true' WHERE key = 'schema_version'"],
    "meta_value_blob": ["UPDATE meta SET value = x'80ff' WHERE key = 'host'"],
    "deep_json_meta": ["UPDATE meta SET value = '" + "[" * 100000 + "' WHERE key = 'notes'"],
    "huge_generated_column": ["DROP TABLE frames",
                              ("CREATE TABLE frames(id INTEGER PRIMARY KEY, kind, name, file, "
                               "line, extra AS (hex(zeroblob(40000000))))"),  # 80 MB per read
                              ("INSERT INTO frames(id, kind, name, file, line) "
                               "VALUES (1, 'python', 'f', 'f.py', 1)")],
    "metric_defs_missing": ["DROP TABLE metric_defs"],
    "frames_empty": ["DELETE FROM frames"],
    "nodes_empty": ["DELETE FROM nodes"],
    "deep_chain_20000": [
        "DELETE FROM metrics", "DELETE FROM nodes WHERE id > 0",
        "INSERT INTO frames VALUES (99999, 'python', 'deep', '/work/deep.py', 1, '{}')",
        ("INSERT INTO nodes WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
         "WHERE x < 20000) SELECT x, x - 1, 99999 FROM c"),
        "INSERT INTO metrics VALUES (20000, 'cpu.time', 1.0)",
    ],
    "wide_20000_children": [
        "DELETE FROM metrics", "DELETE FROM nodes WHERE id > 0",
        ("INSERT INTO frames SELECT 100000 + x, 'python', 'f' || x, '/work/w.py', x, '{}' FROM "
         "(WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000) "
         "SELECT x FROM c)"),
        "INSERT INTO nodes SELECT id - 100000, 0, id FROM frames WHERE id > 100000",
        "INSERT INTO metrics SELECT id, 'cpu.time', 0.001 FROM nodes WHERE id > 0",
    ],
}


def test_structural_corruptions_give_a_result_or_one_line(tmp_path, real_profile):
    paths = []
    for name, statements in CORRUPTIONS.items():
        paths.append(str(_sql_damage(_copy(real_profile, tmp_path / f"{name}.dcprof"), statements)))
    result = run_checker(tmp_path, "files", *paths)
    assert result["problems"] == [], "\n\n".join(result["problems"])


def test_every_truncation_of_a_real_profile(tmp_path, real_profile):
    result = run_checker(tmp_path, "truncations", str(real_profile))
    assert result["cases"] > 300
    assert result["problems"] == [], "\n\n".join(result["problems"])


def test_truncated_profile_is_reported_as_truncated(tmp_path, real_profile):
    data = real_profile.read_bytes()
    path = tmp_path / "cut.dcprof"
    path.write_bytes(data[: len(data) - 4096])
    r = run_child([*CLI, "report", str(path)], cwd=tmp_path)
    assert_one_line_error(r)
    assert "truncated" in r.err


def test_fuzz_reader_with_hypothesis(tmp_path, real_profile):
    result = run_checker(tmp_path, "fuzz", str(real_profile), "240", timeout=200)
    assert result["problems"] == [], "\n\n".join(result["problems"])
    assert result["cases"] == 240


def test_fuzz_profile_cells_with_hypothesis(tmp_path, real_profile):
    # Valid SQLite, hostile values (types, sizes, JSON, unicode) in the profile's own cells.
    result = run_checker(tmp_path, "cells", str(real_profile), "220", timeout=200)
    assert result["problems"] == [], "\n\n".join(result["problems"])
    assert result["cases"] == 220


def test_no_pickle_or_marshal_in_the_package():
    deserializers = re.compile(
        r"\b(?:import\s+(?:pickle|cPickle|marshal|shelve|dill|cloudpickle)\b"
        r"|from\s+(?:pickle|marshal|shelve|dill|cloudpickle)\s+import"
        r"|(?:pickle|marshal|dill)\.loads?\(|allow_pickle\s*=\s*True|torch\.load\()")
    src = Path(__file__).resolve().parents[2] / "src" / "deepcontext"
    offenders = []
    for path in src.rglob("*.py"):
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if deserializers.search(line.split("#", 1)[0]):
                offenders.append(f"{path.relative_to(src)}:{n}: {line.strip()}")
    assert offenders == []


def test_deep_crafted_tree_through_the_real_cli_is_folded_not_fatal(tmp_path, real_profile):
    path = _sql_damage(_copy(real_profile, tmp_path / "deep.dcprof"), CORRUPTIONS["deep_chain_20000"])
    for args in ([], ["--format", "json"], ["--inverted"], ["--flat", "--format", "json"]):
        r = run_child([*CLI, "report", str(path), *args], cwd=tmp_path, timeout=60)
        assert r.rc == 0 and "Traceback" not in r.err, r.describe()
    r = run_child([*CLI, "report", str(path)], cwd=tmp_path)
    assert "folded" in r.out


def test_reading_a_profile_while_the_program_writes_it(tmp_path):
    # Users run `report` on a live job: each read is the last complete write or one line.
    import json as _json
    import subprocess
    import time

    from reliability_harness import child_env

    body = """
import itertools
ready()
for i in itertools.count():
    exec(f"def fn_{i % 300}():\\n    return work(0.002)\\nfn_{i % 300}()")
"""
    prog = tmp_path / "live.py"
    prog.write_text(program(body))
    proc = subprocess.Popen([*CLI, "record", "--flush-interval", "0.03", "--sample-interval",
                             "0.002", "-o", "live.dcprof", "--", PY, str(prog),
                             str(tmp_path / "ready")], cwd=tmp_path, env=child_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        outcomes = []
        for _ in range(8):
            r = run_child([*CLI, "report", "live.dcprof", "--format", "json"], cwd=tmp_path,
                          timeout=30)
            if r.rc == 0:
                _json.loads(r.out)
                outcomes.append("ok")
            else:
                assert_one_line_error(r)
                outcomes.append(r.err.strip())
        assert outcomes.count("ok") >= 4, outcomes
    finally:
        proc.terminate()
        proc.wait(30)
    assert proc.returncode == -15, proc.stderr.read()


def test_read_only_profile_killed_mid_write_is_still_readable(tmp_path, real_profile):
    # Only a writer can roll back a hot journal; a reader without write access reads a copy.
    import shutil
    import subprocess

    if shutil.which("chattr") is None:
        pytest.skip("needs chattr to make a file read-only for root too")
    prof = _copy(real_profile, tmp_path / "torn.dcprof")
    torn_write = (  # a writer that dies mid-transaction, after SQLite spilled pages to the file
        "import os, sqlite3, sys\n"
        "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "db.execute('PRAGMA cache_size=1')\n"
        "db.execute('BEGIN IMMEDIATE')\n"
        "db.execute('DELETE FROM nodes')\n"
        "db.executemany(\"INSERT INTO frames VALUES (?, 'python', ?, 'x.py', 1, '{}')\", "
        "[(10000 + i, 'n' * 500) for i in range(2000)])\n"
        "os._exit(0)\n")
    r = run_child([PY, "-c", torn_write, str(prof)], cwd=tmp_path)
    assert r.rc == 0 and Path(f"{prof}-journal").exists(), r.describe()
    if subprocess.run(["chattr", "+i", str(prof)], check=False, capture_output=True).returncode:
        pytest.skip("this filesystem does not support chattr +i")
    try:
        r = run_child([*CLI, "report", str(prof), "--format", "json"], cwd=tmp_path)
        assert r.rc == 0, r.describe()
        original = run_child([*CLI, "report", str(real_profile), "--format", "json"], cwd=tmp_path)
        assert json.loads(r.out)["tree"] == json.loads(original.out)["tree"]  # the last commit
        assert Path(f"{prof}-journal").exists()  # the user's files are left as they were
    finally:
        subprocess.run(["chattr", "-i", str(prof)], check=False)
