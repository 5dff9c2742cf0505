"""The calling context tree on literal data: aggregation, inclusive/exclusive, merge, file."""

import sqlite3

import pytest

from deepcontext.errors import ProfileFormatError
from deepcontext.tree import CallingContextTree, Frame, load, save
from deepcontext.tree.profile_file import SCHEMA_VERSION

MAIN = Frame.make("python", "main", "/app/train.py", 10)
STEP = Frame.make("python", "step", "/app/train.py", 4)
ADDMM = Frame.make("op", "aten::addmm")
RELU = Frame.make("op", "aten::relu")


def literal_tree() -> CallingContextTree:
    t = CallingContextTree({"command": ["python", "train.py"]})
    a = t.add_path([MAIN, STEP, ADDMM])
    b = t.add_path([MAIN, STEP, RELU])
    c = t.add_path([MAIN, STEP])
    t.add_metric(a, "op.time", 3.0)
    t.add_metric(a, "op.count", 2)
    t.add_metric(b, "op.time", 1.0)
    t.add_metric(c, "cpu.time", 0.5)
    t.add_metric(a, "op.time", 1.0)  # aggregation: same context, same node
    return t


def test_same_path_aggregates_into_one_node():
    t = literal_tree()
    assert len(t) == 5  # root, main, step, addmm, relu
    leaf = t.add_path([MAIN, STEP, ADDMM])
    assert t.exclusive(leaf, "op.time") == 4.0
    t.self_check()


def test_inclusive_is_subtree_sum():
    t = literal_tree()
    step = t.add_path([MAIN, STEP])
    assert t.inclusive(step, "op.time") == 5.0
    assert t.inclusive(0, "cpu.time") == 0.5
    assert t.exclusive(step, "op.time") == 0.0
    assert t.total("op.time") == 5.0


def test_same_function_from_two_callers_gives_two_nodes():
    t = CallingContextTree()
    other = Frame.make("python", "eval", "/app/train.py", 20)
    x = t.add_path([MAIN, STEP])
    y = t.add_path([other, STEP])
    assert x != y


def test_merge_adds_matching_contexts():
    t = literal_tree()
    t.merge(literal_tree())
    leaf = t.add_path([MAIN, STEP, ADDMM])
    assert t.exclusive(leaf, "op.time") == 8.0
    assert len(t) == 5
    t.self_check()


def test_file_round_trip(tmp_path):
    path = tmp_path / "p.dcprof"
    save(literal_tree(), path)
    back = load(path)
    back.self_check()
    assert back.metadata["command"] == ["python", "train.py"]
    assert back.metadata["schema_version"] == SCHEMA_VERSION
    leaf = back.add_path([MAIN, STEP, ADDMM])
    assert back.exclusive(leaf, "op.time") == 4.0
    assert back.exclusive(leaf, "op.count") == 2
    assert [n.frame for n in back.nodes] == [n.frame for n in literal_tree().nodes]


def wide_tree(n: int) -> CallingContextTree:
    t = CallingContextTree()
    for i in range(n):
        leaf = t.add_path([MAIN, Frame.make("python", f"f{i}", "/app/m.py", i + 1)])
        t.add_metric(leaf, "op.time", float(i))
        t.add_metric(leaf, "op.count", i + 1)
    return t


@pytest.mark.parametrize("limit", [None, 7])
def test_rows_past_one_statement_round_trip(tmp_path, limit):
    """A flush inserts many rows a statement (profile_file._insert): 9,000 leaves' frames,
    nodes and 18,000 metric rows span several statements; under SQLite's own limit of 7 bound
    values a statement (set on the writer's database) it is one row a statement."""
    from deepcontext.tree.profile_file import ProfileWriter

    n = 9000 if limit is None else 300
    path = tmp_path / "wide.dcprof"
    w = ProfileWriter(path)
    if limit is not None:
        if not hasattr(w._db, "setlimit"):
            pytest.skip("Connection.setlimit is Python 3.11+")
        w._db.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, limit)
    w.write(wide_tree(n))
    w.close()
    back = load(path)
    back.self_check()
    assert len(back) == n + 2
    assert back.total("op.count") == n * (n + 1) // 2
    assert back.total("op.time") == sum(range(n))
    i = n - 1
    leaf = back.add_path([MAIN, Frame.make("python", f"f{i}", "/app/m.py", i + 1)])
    assert (back.exclusive(leaf, "op.time"), back.exclusive(leaf, "op.count")) == (i, n)


def test_a_grown_tree_written_again_reads_as_a_whole_save(tmp_path):
    """A session's flushes write the same tree as it grows (capture/snapshot.py, TreeBuilder):
    the writer inserts only its new frames and nodes and replaces the metrics. The file then
    reads back exactly as one saved whole, at every write."""
    from deepcontext.tree.profile_file import ProfileWriter

    tree = CallingContextTree({"flush": 1})
    main = tree.add_path([MAIN])
    tree.add_metric(main, "cpu.time", 0.5)
    w = ProfileWriter(tmp_path / "grown.dcprof")
    w.write(tree)
    for k in range(3):
        tree.clear_metrics()
        tree.metadata = {"flush": k + 2}
        tree.add_metric(main, "cpu.time", 0.5 + k)
        for i in range(k + 1):  # new contexts, one with a frame new to the file
            leaf = tree.add_path([MAIN, Frame.make("python", f"f{i}", "/app/m.py", 10 + i)])
            tree.add_metric(leaf, "op.count", 2.0 * (i + 1))
        w.write(tree)
        save(tree, tmp_path / f"whole{k}.dcprof")
        back, whole = load(tmp_path / "grown.dcprof"), load(tmp_path / f"whole{k}.dcprof")
        back.self_check()
        assert [(n.parent, n.frame, n.metrics) for n in back.nodes] == \
               [(n.parent, n.frame, n.metrics) for n in whole.nodes]
        assert back.metadata["flush"] == k + 2 and back.total("op.count") == (k + 1) * (k + 2)
    other = CallingContextTree()  # another tree: written whole
    other.add_metric(other.add_path([Frame.make("python", "g", "/app/n.py", 3)]), "cpu.time", 1.0)
    w.write(other)
    w.close()
    back = load(tmp_path / "grown.dcprof")
    assert [n.frame.name for n in back.nodes] == ["<root>", "g"] and back.total("cpu.time") == 1.0


def test_a_name_at_the_255_byte_limit_round_trips(tmp_path):
    # its "-journal" and partial names would be too long to exist: neither write nor read trips
    t = CallingContextTree()
    t.add_metric(t.add_path([Frame.make("python", "f", "/x.py", 1)]), "cpu.time", 1.5)
    path = tmp_path / ("p" * (255 - len(".dcprof")) + ".dcprof")
    save(t, path)
    back = load(path)
    assert len(back) == len(t) and back.total("cpu.time") == 1.5


def test_a_descriptor_closed_under_a_write_writes_again(tmp_path, monkeypatch):
    # daemonizing code's os.closerange() can close the writer's descriptor mid-write (seen
    # under ASan, where writes are slow): the write starts again, whole, and nothing is lost
    import os

    from deepcontext.tree import profile_file

    real_write, closed = os.write, []

    def write(fd, data):
        if not closed and fd >= 512:  # the writer's (moved high), not pytest's own
            closed.append(fd)
            os.close(fd)  # what closerange(3, 4096) does to it
        return real_write(fd, data)

    monkeypatch.setattr(profile_file.os, "write", write)
    path = tmp_path / "p.dcprof"
    save(literal_tree(), path)
    assert closed and load(path).total("op.time") == 5.0
    assert not list(tmp_path.glob(".*.partial"))


def test_save_refuses_existing_file(tmp_path):
    path = tmp_path / "p.dcprof"
    save(literal_tree(), path)
    with pytest.raises(Exception, match="already exists"):
        save(literal_tree(), path)
    save(literal_tree(), path, force=True)


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "p.dcprof"
    save(literal_tree(), path)
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    db.commit()
    db.close()
    with pytest.raises(ProfileFormatError, match="newer DeepContext"):
        load(path)


@pytest.mark.parametrize("content", [b"", b"hello world", b"SQLite format 3\x00" + b"\x00" * 50])
def test_garbage_is_a_format_error(tmp_path, content):
    path = tmp_path / "bad.dcprof"
    path.write_bytes(content)
    with pytest.raises(ProfileFormatError):
        load(path)


def test_foreign_sqlite_is_a_format_error(tmp_path):
    path = tmp_path / "other.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t(x)")
    db.commit()
    db.close()
    with pytest.raises(ProfileFormatError, match="not a DeepContext profile"):
        load(path)
