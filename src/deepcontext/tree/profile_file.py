"""The profile file: one SQLite database, written whole in one transaction per flush.

Schema (version 1, documented in docs/file-format.md):
  meta(key TEXT PRIMARY KEY, value TEXT)               -- JSON values; schema_version, command...
  frames(id INTEGER PRIMARY KEY, kind, name, file, line, extra TEXT)  -- extra: JSON object
  nodes(id INTEGER PRIMARY KEY, parent INTEGER, frame INTEGER)        -- parent < id; root is 0
  metric_defs(name TEXT PRIMARY KEY, unit TEXT, description TEXT)
  metrics(node INTEGER, metric TEXT, value REAL)        -- exclusive values
A killed program leaves the last committed flush: SQLite's rollback journal undoes a torn one.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from ..errors import DeepContextError, ProfileFormatError
from .cct import CallingContextTree
from .frame import KINDS, Frame
from .metrics import KNOWN_METRICS, unit_of

SCHEMA_VERSION = 1
MAGIC = "deepcontext-profile"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS frames(id INTEGER PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL,
                                  file TEXT NOT NULL, line INTEGER NOT NULL, extra TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS nodes(id INTEGER PRIMARY KEY, parent INTEGER NOT NULL,
                                 frame INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS metric_defs(name TEXT PRIMARY KEY, unit TEXT, description TEXT);
CREATE TABLE IF NOT EXISTS metrics(node INTEGER NOT NULL, metric TEXT NOT NULL, value REAL NOT NULL);
"""


def check_writable(path: str | os.PathLike[str], force: bool = False) -> Path:
    """Refuse an output path before anything runs: existing file without force, unwritable dir."""
    p = Path(path)
    if p.is_dir():
        raise DeepContextError(f"output path {p} is a directory")
    if p.exists() and not force:
        raise DeepContextError(f"{p} already exists; pass --force to overwrite it or -o to pick another name")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise DeepContextError(f"cannot write {p}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise DeepContextError(f"cannot write {p}: permission denied")
    return p


class ProfileWriter:
    """Owns one output file; each ``write`` replaces its content in a single transaction."""

    def __init__(self, path: str | os.PathLike[str], force: bool = False) -> None:
        self.path = check_writable(path, force)
        if self.path.exists():
            self.path.unlink()
        for suffix in ("-journal", "-wal", "-shm"):
            Path(str(self.path) + suffix).unlink(missing_ok=True)
        try:
            self._db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=DELETE")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as e:
            raise DeepContextError(f"cannot write {self.path}: {e}") from None

    def write(self, tree: CallingContextTree) -> None:
        frame_ids: dict[Frame, int] = {}
        frames, nodes, metrics = [], [], []
        for n in tree.nodes:
            fid = frame_ids.get(n.frame)
            if fid is None:
                fid = frame_ids[n.frame] = len(frame_ids)
                f = n.frame
                frames.append((fid, f.kind, f.name, f.file, f.line, json.dumps(dict(f.extra))))
            nodes.append((n.id, n.parent, fid))
            metrics.extend((n.id, k, v) for k, v in n.metrics.items() if v)
        defs = []
        for name in tree.metric_names():
            info = KNOWN_METRICS.get(name)
            defs.append((name, unit_of(name), info.description if info else ""))
        meta = dict(tree.metadata)
        meta["format"] = MAGIC
        meta["schema_version"] = SCHEMA_VERSION
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            for table in ("meta", "frames", "nodes", "metric_defs", "metrics"):
                db.execute(f"DELETE FROM {table}")
            db.executemany("INSERT INTO meta VALUES (?, ?)",
                           [(k, json.dumps(v, default=str)) for k, v in meta.items()])
            db.executemany("INSERT INTO frames VALUES (?, ?, ?, ?, ?, ?)", frames)
            db.executemany("INSERT INTO nodes VALUES (?, ?, ?)", nodes)
            db.executemany("INSERT INTO metric_defs VALUES (?, ?, ?)", defs)
            db.executemany("INSERT INTO metrics VALUES (?, ?, ?)", metrics)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self._db.close()


def save(tree: CallingContextTree, path: str | os.PathLike[str], force: bool = False) -> None:
    w = ProfileWriter(path, force=force)
    try:
        w.write(tree)
    finally:
        w.close()


def load(path: str | os.PathLike[str]) -> CallingContextTree:
    """Read a profile; any failure becomes a one-line ``ProfileFormatError``."""
    p = Path(path)
    if not p.exists():
        raise ProfileFormatError(f"{p}: no such file")
    if not p.is_file():
        raise ProfileFormatError(f"{p}: not a file")
    with open(p, "rb") as fh:
        if fh.read(16) != b"SQLite format 3\x00":
            raise ProfileFormatError(f"{p} is not a DeepContext profile (not an SQLite file)")
    mode = "rw" if os.access(p, os.W_OK) else "ro"
    try:
        db = sqlite3.connect(f"{p.absolute().as_uri()}?mode={mode}", uri=True)
    except sqlite3.Error as e:
        raise ProfileFormatError(f"{p}: cannot open: {e}") from None
    try:
        return _read(db, p)
    except sqlite3.Error as e:
        raise ProfileFormatError(f"{p} is not a readable DeepContext profile ({e})") from None
    finally:
        db.close()


def _read(db: sqlite3.Connection, p: Path) -> CallingContextTree:
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "meta" not in tables:
        raise ProfileFormatError(f"{p} is not a DeepContext profile (an SQLite file of another kind)")
    meta: dict[str, Any] = {}
    for key, value in db.execute("SELECT key, value FROM meta"):
        try:
            meta[str(key)] = json.loads(value)
        except (TypeError, ValueError):
            meta[str(key)] = value
    if meta.get("format") != MAGIC:
        raise ProfileFormatError(f"{p} is not a DeepContext profile (an SQLite file of another kind)")
    version = meta.get("schema_version")
    if not isinstance(version, int):
        raise ProfileFormatError(f"{p}: profile has no valid schema version")
    if version > SCHEMA_VERSION:
        raise ProfileFormatError(
            f"{p} was written by a newer DeepContext (schema {version}, this one reads up to "
            f"{SCHEMA_VERSION}); upgrade with: pip install -U deepcontext")
    missing = {"frames", "nodes", "metrics"} - tables
    if missing:
        raise ProfileFormatError(f"{p}: profile is missing tables {sorted(missing)}")
    frames: dict[int, Frame] = {}
    for fid, kind, name, file, line, extra in db.execute("SELECT * FROM frames"):
        try:
            ex = json.loads(extra) if extra else {}
            if not isinstance(ex, dict) or kind not in KINDS:
                raise ValueError
            frames[int(fid)] = Frame.make(str(kind), str(name), str(file), int(line),
                                          **{str(k): v for k, v in ex.items()})
        except (TypeError, ValueError):
            raise ProfileFormatError(f"{p}: corrupt frame record {fid}") from None
    tree = CallingContextTree(meta)
    remap = {0: 0}
    for nid, parent, fid in db.execute("SELECT id, parent, frame FROM nodes ORDER BY id"):
        if nid == 0:
            continue
        if parent not in remap or fid not in frames:
            raise ProfileFormatError(f"{p}: corrupt node record {nid}")
        remap[nid] = tree.child(remap[parent], frames[fid])
    for nid, metric, value in db.execute("SELECT node, metric, value FROM metrics"):
        if nid not in remap or not isinstance(value, (int, float)):
            raise ProfileFormatError(f"{p}: corrupt metric record for node {nid}")
        tree.add_metric(remap[nid], str(metric), float(value))
    return tree
