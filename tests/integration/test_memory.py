"""The memory layer on real PyTorch through the real CLI: a program with known allocations at
known lines gives exact bytes, counts, peaks and live bytes per line (docs/memory.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from helpers import children_named, line_of, loaded, python_nodes, record, subtree_ids  # noqa: E402

PROGRAM = "memory_known.py"
CONTEXT = ("--context", "python,op,memory")


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("memory")
    proc, out = record(tmp, PROGRAM, options=CONTEXT)
    return proc, out, loaded(out)


def _line(tree, marker, function=None):
    nodes = [n for n in python_nodes(tree, PROGRAM, line_of(PROGRAM, marker))
             if function is None or tree.nodes[n].frame.name == function]
    assert len(nodes) == 1, (marker, nodes)
    return nodes[0]


def _inclusive(tree, nid, metric):
    return sum(tree.nodes[n].metrics.get(metric, 0.0) for n in subtree_ids(tree, nid))


def test_the_program_runs_untouched(profile):
    proc, _, _ = profile
    assert proc.returncode == 3
    assert proc.stdout == "memory program done 2048\n"
    assert "Traceback" not in proc.stderr and "Memory block" not in proc.stderr


def test_exact_bytes_and_counts_per_line(profile):
    _, _, tree = profile
    expect = {  # marker: (allocations, bytes)
        "TEMP": (5, 5 * 4000),
        "LEAK": (5, 5 * 2000),
        "PEAK": (1, 1 << 20),
        "THREAD": (1, 4096),
    }
    for marker, (count, nbytes) in expect.items():
        nid = _line(tree, marker)
        assert _inclusive(tree, nid, "mem.alloc.count") == count, marker
        assert _inclusive(tree, nid, "mem.alloc.bytes") == nbytes, marker
        # Exclusive at the operator that allocated, not at the line.
        (empty,) = children_named(tree, nid, "op", "aten::empty")
        assert tree.nodes[empty].metrics["mem.alloc.bytes"] == nbytes


def test_backward_allocations_land_under_the_forward_line(profile):
    _, _, tree = profile
    mul = _line(tree, "MUL")
    (forward,) = children_named(tree, mul, "op", "aten::mul")
    assert _inclusive(tree, forward, "mem.alloc.bytes") == 8192
    (backward,) = children_named(tree, mul, "marker", "backward")
    assert _inclusive(tree, backward, "mem.alloc.count") == 2
    assert _inclusive(tree, backward, "mem.alloc.bytes") == 2 * 8192


def test_peak_holders_are_the_allocations_live_at_the_peak(profile):
    _, _, tree = profile
    # At the 1 MiB tensor's moment the five LEAK tensors are live too; TEMP tensors are not.
    assert _inclusive(tree, _line(tree, "PEAK"), "mem.peak.bytes") == 1 << 20
    assert _inclusive(tree, _line(tree, "LEAK"), "mem.peak.bytes") == 10000
    assert _inclusive(tree, _line(tree, "TEMP"), "mem.peak.bytes") == 0
    assert tree.total("mem.cpu.peak.bytes") == (1 << 20) + 10000
    assert tree.total("mem.peak.bytes") == tree.total("mem.cpu.peak.bytes")


def test_live_bytes_at_exit_are_what_was_never_freed(profile):
    _, _, tree = profile
    leak = _line(tree, "LEAK")
    assert _inclusive(tree, leak, "mem.live.bytes") == 10000
    assert _inclusive(tree, leak, "mem.live.count") == 5
    assert tree.total("mem.live.bytes") == 10000


def test_metadata_reports_the_layers_own_memory(profile):
    _, _, tree = profile
    mem = tree.metadata["memory"]
    assert mem["devices"] == ["cpu"]
    assert mem["live_allocations"] == 5  # the LEAK tensors
    assert mem["table_bytes"] == 4096 * 24  # the initial table: no growth for this program
    assert mem["unmatched_frees"] == 0


def test_report_and_exports_carry_the_memory_metrics(profile, tmp_path):
    _, out, _ = profile
    run = [sys.executable, "-m", "deepcontext"]
    text = subprocess.run([*run, "report", str(out), "--metric", "mem.peak.bytes"],
                          capture_output=True, text=True)
    assert text.returncode == 0, text.stderr
    assert "total mem.peak.bytes = 1.01MiB" in text.stdout
    doc = json.loads(subprocess.run([*run, "report", str(out), "--metric", "mem.peak.bytes",
                                     "--format", "json"], capture_output=True, text=True).stdout)
    assert doc["units"]["mem.peak.bytes"] == "bytes"
    assert doc["units"]["mem.cpu.peak.bytes"] == "bytes"
    speedscope = tmp_path / "m.speedscope.json"
    done = subprocess.run([*run, "export", str(out), "--metric", "mem.peak.bytes", "-o",
                           str(speedscope)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    profiles = json.loads(speedscope.read_text())["profiles"]
    assert [p["unit"] for p in profiles if p["name"].startswith("mem.peak.bytes")] == ["bytes"]
    page = tmp_path / "m.html"
    done = subprocess.run([*run, "view", str(out), "-o", str(page), "--no-browser"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    html = page.read_text()
    assert ('{"name":"mem.cpu.peak.bytes","unit":"bytes","description":"bytes allocated here '
            'and live at the cpu peak"}') in html


def test_off_by_default(tmp_path):
    proc, out = record(tmp_path, PROGRAM)
    assert proc.returncode == 3
    assert not any(m.startswith("mem.") for m in loaded(out).metric_names())


def test_table_memory_is_flat_in_run_length_and_bounded_per_live_allocation(tmp_path):
    # 2,000 steps allocate and free 10,000 tensors yet keep only the LEAK ones; then 20,000
    # tensors are live at once: the table grows to hold them at <= 64 bytes each.
    proc, out = record(tmp_path, PROGRAM, "2000", "20000", options=CONTEXT)
    assert proc.returncode == 3, proc.stderr
    tree = loaded(out)
    mem = tree.metadata["memory"]
    assert mem["high_water"] == 2000 + 20000  # LEAK and MANY live at once
    assert mem["table_bytes"] <= 64 * mem["high_water"]
    assert _inclusive(tree, _line(tree, "TEMP"), "mem.alloc.count") == 2000
    assert _inclusive(tree, _line(tree, "MANY", "many"), "mem.peak.bytes") == 20000 * 64
    # Every free found its entry through the growths and backward-shift deletions.
    assert mem["live_allocations"] == 2000 and mem["unmatched_frees"] == 0
    assert tree.total("mem.live.bytes") == 2000 * 2000
    # The analyzer on the same real profile: the LEAK line grows and holds most of the peak.
    doc = json.loads(subprocess.run([sys.executable, "-m", "deepcontext", "analyze", str(out),
                                     "--format", "json"], capture_output=True, text=True).stdout)
    mine = {(f["rule"], f["location"]["line"]) for f in doc["findings"]
            if f["category"] == "memory"}
    leak, many = line_of(PROGRAM, "LEAK"), line_of(PROGRAM, "MANY")
    assert mine == {("memory-leak", leak), ("memory-peak", leak), ("memory-peak", many)}


def test_a_program_using_torch_profiler_runs_unchanged(tmp_path):
    # torch.profiler needs the thread's reporting slot: the layer steps aside while it runs.
    program = "memory_with_torch_profiler.py"
    proc, out = record(tmp_path, program, options=CONTEXT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "torch.profiler saw aten::empty: True\n"
    tree = loaded(out)
    got = {}
    for marker in ("BEFORE", "INSIDE", "AFTER"):
        nodes = python_nodes(tree, program, line_of(program, marker))
        got[marker] = sum(_inclusive(tree, n, "mem.alloc.bytes") for n in nodes)
    assert got == {"BEFORE": 4000, "INSIDE": 0, "AFTER": 12000}
    assert any("torch.profiler ran" in n for n in tree.metadata["notes"])


def test_schedule_wait_records_nothing_and_warmup_is_discarded(tmp_path):
    program = "memory_schedule.py"
    out = tmp_path / "s.dcprof"
    from helpers import PROGRAMS

    proc = subprocess.run([sys.executable, str(PROGRAMS / program), str(out)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    tree = loaded(out)

    def at(marker, metric):
        nodes = python_nodes(tree, program, line_of(program, marker))
        return sum(_inclusive(tree, n, metric) for n in nodes)

    assert [at(m, "mem.alloc.count") for m in ("WAIT", "WARMUP", "HELD", "ACTIVE")] == [0, 0, 0, 1]
    # The active phase's peak starts from what was live when it began (HELD's 1,000 bytes).
    assert at("HELD", "mem.peak.bytes") == 1000
    assert at("ACTIVE", "mem.peak.bytes") == 400
    assert at("WARMUP", "mem.peak.bytes") == 0
    assert tree.total("mem.cpu.peak.bytes") == 1400


def test_python_running_inside_an_operator_allocates_at_its_own_lines(tmp_path):
    # Allocations with no operator of their own (torch.UntypedStorage) while Python runs inside
    # an open operator: under that operator at the Python line (a Python kernel of a custom op;
    # the second and third calls come from the thread's memo), and in a record_function block,
    # whose scope opened in __enter__ (a frame that has returned), below the scope at the line of
    # the block that allocated.
    program = "memory_in_python_under_op.py"
    proc, out = record(tmp_path, program, options=CONTEXT)
    assert proc.returncode == 0, proc.stderr
    tree = loaded(out)
    (kernel,) = python_nodes(tree, program, line_of(program, "KERNEL"))
    assert tree.nodes[kernel].metrics["mem.alloc.bytes"] == 3 * 500
    assert tree.nodes[kernel].metrics["mem.alloc.count"] == 3
    op = tree.nodes[kernel]
    while op.frame.kind != "op":  # (through torch's custom-op frames)
        op = tree.nodes[op.parent]
    assert op.frame.name == "dc_test::python_kernel"
    (call,) = python_nodes(tree, program, line_of(program, "CALL"))
    assert kernel in subtree_ids(tree, call) and op.id in subtree_ids(tree, call)
    (scope,) = [n.id for n in tree.nodes if n.frame.kind == "op" and n.frame.name == "dc_test_scope"]
    # The with line is also a node below the scope when a CPU sample lands in
    # record_function.__exit__ before its operator closes the scope (the scope is still open
    # there); such a node hangs right below the scope, at the anchor frame's current line.
    in_scope = subtree_ids(tree, scope)
    with_nodes = python_nodes(tree, program, line_of(program, "WITH"))
    (with_line,) = [n for n in with_nodes if n not in in_scope]
    assert scope in subtree_ids(tree, with_line)
    assert all(tree.nodes[n].parent == scope for n in with_nodes if n in in_scope)
    (body,) = python_nodes(tree, program, line_of(program, "SCOPE"))
    assert tree.nodes[body].parent == scope
    assert tree.nodes[body].metrics["mem.alloc.bytes"] == 3 * 300
    assert tree.nodes[body].metrics["mem.alloc.count"] == 3
    assert _inclusive(tree, scope, "mem.alloc.bytes") == 3 * 300
