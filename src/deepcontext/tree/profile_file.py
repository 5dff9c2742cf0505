"""The profile file: one SQLite database, written whole in one transaction per flush.

Schema (version 2, documented in docs/file-format.md):
  meta(key TEXT PRIMARY KEY, value TEXT)               -- JSON values; schema_version, command...
  frames(id INTEGER PRIMARY KEY, kind, name, file, line, extra TEXT)  -- extra: JSON object
  nodes(id INTEGER PRIMARY KEY, parent INTEGER, frame INTEGER)        -- parent < id; root is 0
  metric_defs(name TEXT PRIMARY KEY, unit TEXT, description TEXT)
  metrics(node INTEGER, metric TEXT, value REAL)        -- exclusive values (sum over ranks)
  rank_metrics(node INTEGER, rank INTEGER, metric TEXT, value REAL)  -- each rank's own (v2)
Each flush replaces the file whole (a rename): a killed program leaves the last complete flush.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import math
import os
import resource
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from ..errors import DeepContextError, ProfileFormatError
from .cct import CallingContextTree
from .frame import KINDS, Frame
from .metrics import KNOWN_METRICS, unit_of

#: 2 added ``rank_metrics`` (per-rank values of a merged multi-rank job); version 1 files are
#: read as profiles without per-rank values.
SCHEMA_VERSION = 2
MAGIC = "deepcontext-profile"
#: Deeper contexts are folded on read (the capture core already stops at 256 frames).
MAX_DEPTH = 512

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS frames(id INTEGER PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL,
                                  file TEXT NOT NULL, line INTEGER NOT NULL, extra TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS nodes(id INTEGER PRIMARY KEY, parent INTEGER NOT NULL,
                                 frame INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS metric_defs(name TEXT PRIMARY KEY, unit TEXT, description TEXT);
CREATE TABLE IF NOT EXISTS metrics(node INTEGER NOT NULL, metric TEXT NOT NULL, value REAL NOT NULL);
CREATE TABLE IF NOT EXISTS rank_metrics(node INTEGER NOT NULL, rank INTEGER NOT NULL,
                                        metric TEXT NOT NULL, value REAL NOT NULL);
"""
_TABLES = ("meta", "frames", "nodes", "metric_defs", "metrics", "rank_metrics")


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
    _probe(p)
    return p


def _probe(p: Path) -> None:
    """Open the file for writing once: access() says yes for root in /proc, /sys or a
    read-only mount, where only a real open tells the truth."""
    existed = p.exists()
    try:
        fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK | (0 if existed else os.O_CREAT | os.O_EXCL),
                     0o644)
    except OSError as e:
        raise DeepContextError(f"cannot write {p}: {e.strerror or e}") from None
    os.close(fd)
    if not existed:
        p.unlink(missing_ok=True)


#: Whole writes tried when the program closes the writer's descriptor mid-write (EBADF).
_WRITE_ATTEMPTS = 3


class ProfileWriter:
    """Owns one output file; each ``write`` replaces it whole, atomically.

    The tables live in an in-memory SQLite database; a write fills them in one transaction, then
    the file is replaced by renaming a fully written temporary beside it. Readers see the previous
    flush or the new one, a program killed mid-flush leaves the previous one, and no descriptor of
    the file stays open between writes. That last part matters for a program that closes every
    descriptor it did not open and reuses the numbers (daemonizing): a descriptor SQLite kept for
    the run (the database's, a transaction's journal) then pointed at the program's own files,
    and the next flush wrote database pages into them and closed one of them under the program
    (finding A1, tests/sanitizers/KNOWN.md)."""

    def __init__(self, path: str | os.PathLike[str], force: bool = False) -> None:
        self.path = check_writable(path, force)
        if self.path.exists():
            self.path.unlink()
        for suffix in ("-journal", "-wal", "-shm"):  # left by a writer of an older version
            _remove_stale(Path(str(self.path) + suffix))
        # Hidden, beside the file (a rename stays in one file system); a killed write leaves it
        # for the next writer of this path to remove. A name near the 255-byte limit is hashed.
        name = self.path.name
        if len(name.encode(errors="surrogateescape")) > 240:
            name = hashlib.sha1(name.encode(errors="surrogateescape")).hexdigest()
        self._partial = self.path.with_name(f".{name}.partial")
        _remove_stale(self._partial)
        # What the database holds of the tree written last (write: a tree that grew since)
        self._last: CallingContextTree | None = None
        self._nodes_written = 0
        self._frame_ids: dict[Frame, int] = {}
        self._metric_texts: dict[str, str] = {}
        self._db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self._db.executescript(_SCHEMA)
        try:
            self._replace_file()  # the file exists, with its schema, from the start
        except OSError as e:
            raise DeepContextError(f"cannot write {self.path}: {e.strerror or e}") from None

    def write(self, tree: CallingContextTree) -> None:
        """The file becomes ``tree``. Written again after it grew (a session's periodic flushes:
        capture/snapshot.py, TreeBuilder), only its new frames and nodes are inserted, and the
        metrics and metadata replaced."""
        grown = tree is self._last and len(tree.nodes) >= self._nodes_written
        if not grown:
            self._frame_ids = {}
            self._nodes_written = 0
        frame_ids = self._frame_ids
        frames, nodes, metrics = [], [], []
        for n in tree.nodes[self._nodes_written:]:
            fid = frame_ids.get(n.frame)
            if fid is None:
                fid = frame_ids[n.frame] = len(frame_ids)
                f = n.frame
                frames.append((fid, _text(f.kind), _text(f.name), _text(f.file), f.line,
                               json.dumps(dict(f.extra))))
            nodes.append((n.id, n.parent, fid))
        texts = self._metric_texts
        for n in tree.nodes:
            for k, v in n.metrics.items():
                if v:
                    text = texts.get(k)
                    if text is None:
                        text = texts[k] = _text(k)
                    metrics.append((n.id, text, v))
        rank_rows = [(nid, rank, _text(k), v) for rank, table in tree.rank_metrics.items()
                     for nid, values in table.items() for k, v in values.items() if v]
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
            for table in _TABLES:
                if not grown or table not in ("frames", "nodes"):
                    db.execute(f"DELETE FROM {table}")
            _insert(db, "meta", [(k, json.dumps(v, default=str)) for k, v in meta.items()])
            _insert(db, "frames", frames)
            _insert(db, "nodes", nodes)
            _insert(db, "metric_defs", defs)
            _insert(db, "metrics", metrics)
            _insert(db, "rank_metrics", rank_rows)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            self._last = None  # (its frame ids may name rows that were rolled back)
            raise
        self._last, self._nodes_written = tree, len(tree.nodes)
        self._replace_file()

    def _replace_file(self) -> None:
        """The in-memory database becomes the file: written whole beside it, then renamed over
        it. A program that closes every descriptor while a write is under way (daemonizing
        code's closerange) closes the one being written: the write starts again, whole."""
        for attempt in range(_WRITE_ATTEMPTS):
            try:
                if hasattr(self._db, "serialize"):  # Python 3.11+
                    self._write_partial(self._db.serialize())
                else:  # 3.10: SQLite writes the copy itself, its descriptors open only meanwhile
                    copy = sqlite3.connect(str(self._partial))
                    try:
                        self._db.backup(copy)
                    finally:
                        copy.close()
                os.replace(self._partial, self.path)
                return
            except OSError as e:
                self._partial.unlink(missing_ok=True)
                if e.errno != errno.EBADF or attempt == _WRITE_ATTEMPTS - 1:
                    raise
            except BaseException:
                self._partial.unlink(missing_ok=True)
                raise

    def _write_partial(self, data: bytes) -> None:
        fd = _high_descriptor(os.open(self._partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC
                                      | os.O_CLOEXEC, 0o644))
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)  # on disk before the rename: after a machine crash the name never
            # points at data that was still only in the page cache
        finally:
            try:
                os.close(fd)
            except OSError as e:  # closed under us (see _replace_file): the write's error says it
                if e.errno != errno.EBADF:
                    raise

    def close(self) -> None:
        self._db.close()


#: Rows per INSERT statement (at most; fewer where SQLite allows fewer bound values).
_ROWS_PER_INSERT = 1024


def _insert(db: sqlite3.Connection, table: str, rows: list[tuple]) -> None:
    """Many rows per statement. Python's sqlite3 gives up the GIL for every statement it steps,
    and a periodic flush runs on the flusher thread: with one row a statement (executemany) the
    program's thread lost the GIL to it about once per row, 2,000 times a flush of GPT-2
    generate's tree, each a wake-up and a wait of the program's thread
    (cpu-2026-12-04-flush-gil.md). But not all in one: the rows of a full statement are always
    _ROWS_PER_INSERT, so its text recurs flush after flush and the sqlite3 module's cache hands
    back the prepared statement; only the last, shorter one is prepared again. One statement of
    ~2,100 metric rows, its text new at every flush, spent ~1.5 ms of a 4 ms flush preparing it
    (cpu-2026-12-06-flush-a174196.md)."""
    if not rows:
        return
    width = len(rows[0])
    cap = db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) if hasattr(db, "getlimit") else 999
    per = max(1, min(_ROWS_PER_INSERT, cap // width))
    one = "(" + ", ".join("?" * width) + ")"
    for start in range(0, len(rows), per):
        chunk = rows[start:start + per]
        values = [v for row in chunk for v in row]
        db.execute(f"INSERT INTO {table} VALUES " + ", ".join([one] * len(chunk)), values)


def _remove_stale(p: Path) -> None:
    """Removes a leftover of an earlier writer; a name too long to exist has none."""
    try:
        p.unlink(missing_ok=True)
    except OSError as e:
        if e.errno != errno.ENAMETOOLONG:
            raise


def _high_descriptor(fd: int) -> int:
    """``fd`` moved to a number at or above 900 (below the open-file limit): a program that closes
    descriptors it did not open and opens its own files gets the low numbers, never this one."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    base = 900 if soft == resource.RLIM_INFINITY else min(900, soft - 64)
    if base <= fd:
        return fd
    try:
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, base)
    except OSError:
        return fd
    os.close(fd)
    return high


def _text(value: str) -> str:
    """SQLite stores UTF-8 only: a lone surrogate (undecodable bytes in a file name, a hostile
    name) is kept as its visible escape rather than failing the whole write."""
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")


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
        header = fh.read(100)
    if header[:16] != b"SQLite format 3\x00":
        raise ProfileFormatError(f"{p} is not a DeepContext profile (not an SQLite file)")
    _check_not_truncated(p, header)
    journal = Path(f"{p}-journal")
    if not os.access(p, os.W_OK) and _exists(journal):
        # A write cut short left a journal that only a writer can roll back: read a copy.
        with tempfile.TemporaryDirectory(prefix="deepcontext-") as tmp:
            copy = Path(tmp) / p.name
            try:
                shutil.copyfile(p, copy)
                shutil.copyfile(journal, f"{copy}-journal")
            except OSError as e:
                raise ProfileFormatError(f"{p}: cannot read: {e.strerror}") from None
            return _open_and_read(copy, p, "rw")
    return _open_and_read(p, p, "rw" if os.access(p, os.W_OK) else "ro")


def _exists(path: Path) -> bool:
    """Whether ``path`` exists; False where it cannot (a name past the 255-byte limit once a
    suffix is added: the profile itself is fine)."""
    try:
        return path.exists()
    except OSError:
        return False


def _open_and_read(path: Path, p: Path, mode: str) -> CallingContextTree:
    """Open ``path`` (``p`` is the name the user gave, for messages) and read it."""
    try:
        db = sqlite3.connect(f"{path.absolute().as_uri()}?mode={mode}", uri=True)
    except sqlite3.Error as e:
        raise ProfileFormatError(f"{p}: cannot open: {e}") from None
    try:
        _harden(db)
        return _read(db, p)
    except sqlite3.Error as e:
        raise ProfileFormatError(f"{p} is not a readable DeepContext profile ({e})") from None
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError,
            MemoryError) as e:
        # Safety net: whatever slipped past the checks below is still a damaged file.
        raise ProfileFormatError(f"{p} is a damaged profile ({type(e).__name__})") from None
    finally:
        db.close()


def _check_not_truncated(p: Path, header: bytes) -> None:
    """The header records the page size and count: a shorter file lost its tail. (Skipped while
    a rollback journal exists: SQLite restores the last complete flush from it on open.)"""
    if len(header) < 100:
        raise ProfileFormatError(f"{p} is truncated ({len(header)} bytes)")
    if _exists(Path(f"{p}-journal")):
        return
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    if header[24:28] != header[92:96]:  # page count not maintained by the writer: no check
        return
    expected, actual = page_size * pages, p.stat().st_size
    if actual < expected:
        raise ProfileFormatError(f"{p} is truncated ({actual} of {expected} bytes); "
                                 "it may still be written, or was cut short")


def _harden(db: sqlite3.Connection) -> None:
    """A hostile file must not make a query expensive: no huge values, no schema functions."""
    if hasattr(db, "setlimit"):  # Python 3.11+
        db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 64 * 2**20)
    db.execute("PRAGMA trusted_schema = OFF")
    db.execute("PRAGMA query_only = ON")


def _json_value(text: Any) -> Any:
    """A metadata value: JSON where it parses (no NaN/Infinity, bounded nesting), else the text."""
    if not isinstance(text, str):
        return text if isinstance(text, (int, float)) and _finite(text) else str(text)
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return text


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


def _finite(value: float) -> bool:
    return math.isfinite(value)


def _normalize_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """Keys the tools rely on get the types they expect; anything else is kept as read."""
    for key in ("command", "notes"):
        value = meta.get(key)
        if value is not None and not (isinstance(value, list)
                                      and all(isinstance(v, str) for v in value)):
            meta[key] = [str(v) for v in value] if isinstance(value, list) else [str(value)]
    if "complete" in meta and not isinstance(meta["complete"], bool):
        meta["complete"] = False
    return meta


_RESERVED_EXTRA = {"kind", "name", "file", "line"}


def _read(db: sqlite3.Connection, p: Path) -> CallingContextTree:
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "meta" not in tables:
        raise ProfileFormatError(f"{p} is not a DeepContext profile (an SQLite file of another kind)")
    meta: dict[str, Any] = {}
    for key, value in db.execute("SELECT key, value FROM meta"):
        meta[str(key)] = _json_value(value)
    if meta.get("format") != MAGIC:
        raise ProfileFormatError(f"{p} is not a DeepContext profile (an SQLite file of another kind)")
    version = meta.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ProfileFormatError(f"{p}: profile has no valid schema version")
    if version > SCHEMA_VERSION:
        shown = version if version < 10**6 else "unknown"
        raise ProfileFormatError(
            f"{p} was written by a newer DeepContext (schema {shown}, this one reads up to "
            f"{SCHEMA_VERSION}); upgrade with: pip install -U deepcontext")
    missing = {"frames", "nodes", "metrics"} - tables
    if missing:
        raise ProfileFormatError(f"{p}: profile is missing tables {sorted(missing)}")
    frames: dict[int, Frame] = {}
    for fid, kind, name, file, line, extra in db.execute(
            "SELECT id, kind, name, file, line, extra FROM frames"):
        try:
            ex = json.loads(extra, parse_constant=_reject_constant) if extra else {}
            if not isinstance(ex, dict) or kind not in KINDS or _RESERVED_EXTRA & set(ex) \
                    or not isinstance(line, int):
                raise ValueError
            frames[int(fid)] = Frame.make(str(kind), str(name), str(file), line,
                                          **{str(k): v for k, v in ex.items()})
        except (TypeError, ValueError, RecursionError):
            raise ProfileFormatError(f"{p}: corrupt frame record {fid!r}") from None
    tree = CallingContextTree(_normalize_meta(meta))
    remap, depth, folded = {0: 0}, {0: 0}, 0
    for nid, parent, fid in db.execute("SELECT id, parent, frame FROM nodes ORDER BY id"):
        if nid == 0:
            continue
        if not isinstance(nid, int) or nid < 0 or parent not in remap or fid not in frames:
            raise ProfileFormatError(f"{p}: corrupt node record {nid!r}")
        if depth[remap[parent]] >= MAX_DEPTH:  # keeps every tool's work bounded on any file
            remap[nid] = remap[parent]
            folded += 1
            continue
        remap[nid] = tree.child(remap[parent], frames[fid])
        depth[remap[nid]] = depth[remap[parent]] + 1
    if folded:
        notes = tree.metadata.setdefault("notes", [])
        notes.append(f"{folded} contexts deeper than {MAX_DEPTH} levels are folded into their "
                     f"ancestor at depth {MAX_DEPTH}")
    for nid, metric, value in db.execute("SELECT node, metric, value FROM metrics"):
        if nid not in remap or not isinstance(value, (int, float)) or not _finite(value) \
                or not isinstance(metric, str):
            raise ProfileFormatError(f"{p}: corrupt metric record for node {nid!r}")
        tree.add_metric(remap[nid], metric, float(value))
    if "rank_metrics" in tables:  # version 2; a version 1 file has no per-rank values
        for nid, rank, metric, value in db.execute(
                "SELECT node, rank, metric, value FROM rank_metrics"):
            if nid not in remap or not isinstance(rank, int) or not 0 <= rank < 2**31 \
                    or not isinstance(metric, str) \
                    or not isinstance(value, (int, float)) or not _finite(value):
                raise ProfileFormatError(f"{p}: corrupt per-rank metric record for node {nid!r}")
            tree.add_rank_metric(rank, remap[nid], metric, float(value))
    return tree
