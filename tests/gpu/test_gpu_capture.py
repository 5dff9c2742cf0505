"""GPU layer on a real GPU: exact kernel / copy / sync counts on the lines that caused them,
CUDA graph replays under their capture context, backward kernels under the forward line, and
the accounting (tree total == CUPTI's kernel time; >= 99% under a Python frame).

Run on a GPU machine: python3 -m pytest -q -m gpu tests/gpu
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from deepcontext.tree import CallingContextTree, Frame, load

pytestmark = pytest.mark.gpu

PROGRAMS = Path(__file__).parent / "programs"
PROGRAM = "known_launches.py"


def _constants(program: str) -> SimpleNamespace:
    """The program's UPPER_CASE constants, read without importing it (it needs CUDA torch)."""
    tree = ast.parse((PROGRAMS / program).read_text())
    return SimpleNamespace(**{t.id: ast.literal_eval(node.value) for node in tree.body
                              if isinstance(node, ast.Assign) for t in node.targets
                              if isinstance(t, ast.Name) and t.id.isupper()})


K = _constants(PROGRAM)


def _run(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def line_of(program: str, marker: str) -> int:
    for i, text in enumerate((PROGRAMS / program).read_text().splitlines(), 1):
        if text.rstrip().endswith(f"# {marker}"):
            return i
    raise AssertionError(f"no marker {marker} in {program}")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("gpu")
    out = tmp / "known.dcprof"
    proc = _run(["-m", "deepcontext", "record", "-o", str(out), "--",
                 sys.executable, str(PROGRAMS / PROGRAM)], tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def profiled(recorded: Path) -> CallingContextTree:
    tree = load(recorded)
    tree.self_check()
    return tree


@pytest.fixture(scope="module")
def torch_counts(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("gpu_torch")
    out = tmp / "torch.json"
    proc = _run([str(PROGRAMS / PROGRAM), "--torch-profiler", str(out)], tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


# -- tree helpers --------------------------------------------------------------------------

def in_graph(tree: CallingContextTree, nid: int) -> bool:
    return any(f.kind == "marker" and f.name == "cuda graph" for f in tree.path(nid))


def line_node(tree: CallingContextTree, marker: str, *, graph: bool = False) -> int:
    """The one node of our program's line ``marker`` (inside a graph replay or not)."""
    line = line_of(PROGRAM, marker)
    found = [n.id for n in tree.nodes if n.frame.kind == "python" and n.frame.line == line
             and n.frame.file.endswith(PROGRAM) and in_graph(tree, n.id) == graph]
    assert len(found) == 1, (marker, found)
    return found[0]


def nodes_of(tree: CallingContextTree, nid: int, kind: str, *, skip_backward: bool = True) -> list:
    out = []
    stack = [nid]
    while stack:
        n = tree.nodes[stack.pop()]
        if skip_backward and n.id != nid and n.frame.kind == "marker" and n.frame.name == "backward":
            continue
        if n.frame.kind == kind:
            out.append(n)
        stack.extend(n.children)
    return out


def launches(nodes: list) -> int:
    return int(sum(n.metrics.get("gpu.launches", 0) for n in nodes))


# -- attribution ---------------------------------------------------------------------------

def test_matmuls_on_their_line(profiled: CallingContextTree) -> None:
    kernels = nodes_of(profiled, line_node(profiled, "MATMUL"), "kernel")
    assert kernels, "no kernel under the matmul line"
    for k in kernels:  # every kernel a matmul launches, launched once per matmul
        assert k.metrics["gpu.launches"] == K.N_MATMUL, (k.frame.name, k.metrics)
        assert k.metrics["gpu.time"] > 0
        assert profiled.nodes[k.parent].frame.kind == "op"
        assert k.frame.get("grid") and k.frame.get("block") and k.frame.get("regs")


def test_elementwise_on_their_line(profiled: CallingContextTree) -> None:
    kernels = nodes_of(profiled, line_node(profiled, "ELEMENTWISE"), "kernel")
    assert len(kernels) == 1 and launches(kernels) == K.M_ELEMENTWISE
    assert profiled.nodes[kernels[0].parent].frame.name == "aten::mul"
    assert "elementwise" in kernels[0].frame.name  # demangled: at::native::...elementwise_kernel<...>


def test_side_stream_kernel(profiled: CallingContextTree) -> None:
    assert launches(nodes_of(profiled, line_node(profiled, "SIDE_STREAM"), "kernel")) == 1


def test_device_sync_charged_to_its_line(profiled: CallingContextTree) -> None:
    syncs = nodes_of(profiled, line_node(profiled, "DEVICE_SYNC"), "sync")
    assert [s.frame.name for s in syncs] == ["cudaDeviceSynchronize"]
    assert syncs[0].metrics["sync.count"] == 1 and syncs[0].metrics["sync.wait"] > 0
    assert launches(nodes_of(profiled, line_node(profiled, "DEVICE_SYNC"), "kernel")) == 0


def test_stream_sync_charged_to_its_line(profiled: CallingContextTree) -> None:
    syncs = nodes_of(profiled, line_node(profiled, "STREAM_SYNC"), "sync")
    assert sum(s.metrics["sync.count"] for s in syncs) == 1


def test_d2h_copy_bytes_direction_and_implicit_sync(profiled: CallingContextTree) -> None:
    nid = line_node(profiled, "D2H")
    copies = nodes_of(profiled, nid, "memcpy")
    assert len(copies) == 1, [c.frame for c in copies]
    assert copies[0].frame.name.startswith("DtoH")
    assert copies[0].metrics["memcpy.bytes"] == K.ROWS * K.ROWS * 4
    assert copies[0].metrics["memcpy.count"] == 1 and copies[0].metrics["memcpy.time"] > 0
    assert sum(s.metrics.get("sync.count", 0) for s in nodes_of(profiled, nid, "sync")) >= 1


def test_item_is_an_implicit_sync(profiled: CallingContextTree) -> None:
    nid = line_node(profiled, "ITEM")
    assert sum(s.metrics.get("sync.count", 0) for s in nodes_of(profiled, nid, "sync")) >= 1
    copies = nodes_of(profiled, nid, "memcpy")
    assert sum(c.metrics["memcpy.bytes"] for c in copies) == 4  # one float32 scalar
    assert launches(nodes_of(profiled, nid, "kernel")) >= 1  # the sum


def test_pinned_h2d_copy(profiled: CallingContextTree) -> None:
    copies = nodes_of(profiled, line_node(profiled, "H2D_PINNED"), "memcpy")
    assert [c.frame.name for c in copies] == ["HtoD pinned"]
    assert copies[0].metrics["memcpy.bytes"] == K.PINNED_FLOATS * 4
    assert copies[0].frame.get("src") == "pinned" and copies[0].frame.get("dst") == "device"


def test_memset_on_its_line(profiled: CallingContextTree) -> None:
    sets = nodes_of(profiled, line_node(profiled, "MEMSET"), "memset")
    assert len(sets) == 1 and sets[0].frame.name == "memset device"
    assert sets[0].metrics["memset.bytes"] == K.MEMSET_BYTES
    assert sets[0].metrics["memset.count"] == 1 and sets[0].metrics["memset.time"] > 0


def test_graph_replays_under_capture_context(profiled: CallingContextTree) -> None:
    replay = line_node(profiled, "REPLAY")
    captured = line_node(profiled, "CAPTURE", graph=True)
    assert replay in profiled.path_ids(captured), "capture line not below the replay line"
    kernels = nodes_of(profiled, captured, "kernel")
    assert len(kernels) == 2, [k.frame.name for k in kernels]  # mul, add
    assert all(k.metrics["gpu.launches"] == K.K_REPLAY for k in kernels)
    assert {profiled.nodes[k.parent].frame.name for k in kernels} == {"aten::mul", "aten::add"}
    assert launches(nodes_of(profiled, replay, "kernel")) == 2 * K.K_REPLAY
    # Captured launches run nothing at capture time.
    assert launches(nodes_of(profiled, line_node(profiled, "CAPTURE"), "kernel")) == 0


def test_backward_kernels_under_forward_line(profiled: CallingContextTree) -> None:
    fwd = line_node(profiled, "FORWARD")
    backward = [c for c in profiled.nodes[fwd].children
                if profiled.nodes[c].frame.kind == "marker" and profiled.nodes[c].frame.name == "backward"]
    assert len(backward) == 1
    bwd_kernels = nodes_of(profiled, backward[0], "kernel")
    assert launches(bwd_kernels) >= 2
    ops = {n.frame.name for n in nodes_of(profiled, backward[0], "op")}
    assert "aten::mm" in ops, ops
    assert launches(nodes_of(profiled, fwd, "kernel")) >= 2  # forward mm, relu, sum


# -- accounting ----------------------------------------------------------------------------

def test_total_equals_cupti_kernel_time(profiled: CallingContextTree) -> None:
    gpu = profiled.metadata["gpu"]
    total = profiled.total("gpu.time")
    assert gpu["kernel_time"] > 0
    assert abs(total - gpu["kernel_time"]) <= 0.01 * gpu["kernel_time"]
    assert profiled.total("gpu.launches") == gpu["kernels"]
    assert gpu["unattributed"] == 0 and gpu["incomplete"] == 0 and gpu["dropped"] == 0
    assert gpu["pending"] == 0


def test_kernel_time_under_python_frames(profiled: CallingContextTree) -> None:
    under = 0.0
    for n in profiled.nodes:
        t = n.metrics.get("gpu.time", 0.0)
        if t and any(f.kind == "python" for f in profiled.path(n.id)):
            under += t
    assert under >= 0.99 * profiled.total("gpu.time")


def test_same_kernels_as_torch_profiler(profiled: CallingContextTree, torch_counts: dict) -> None:
    ours = int(profiled.total("gpu.launches"))
    theirs = sum(torch_counts["kernels"].values())
    assert ours == theirs, (ours, theirs)


def test_device_metadata(profiled: CallingContextTree) -> None:
    devices = profiled.metadata["devices"]
    assert len(devices) >= 1
    d = devices[0]
    assert d["name"] and d["sms"] > 0 and d["memory"] > 0
    assert sum(x["kernels"] for x in devices) == profiled.metadata["gpu"]["kernels"]
    assert d["memcpy_bytes"] >= K.ROWS * K.ROWS * 4


def test_report_defaults_to_gpu_time_and_marks_kinds(recorded: Path, tmp_path: Path) -> None:
    def report(*extra: str) -> str:
        proc = _run(["-m", "deepcontext", "report", str(recorded), "--threshold", "0", *extra],
                    tmp_path)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout
    assert "total gpu.time" in report() and "[kernel]" in report()
    assert "[memcpy]" in report("--metric", "memcpy.bytes")
    assert "[sync]" in report("--metric", "sync.wait")


# -- other CUPTI clients -------------------------------------------------------------------

def test_torch_profiler_first_gives_note_not_crash(tmp_path: Path) -> None:
    inside, after = tmp_path / "inside.dcprof", tmp_path / "after.dcprof"
    proc = _run([str(PROGRAMS / "cupti_conflict.py"), str(inside), str(after)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "done" in proc.stdout
    t = load(inside)
    notes = " ".join(t.metadata.get("notes", []))
    if "another CUPTI client" in notes:
        assert t.total("gpu.time") == 0
        assert t.total("op.count") > 0  # CPU-side profiling went on
    else:  # CUPTI let both subscribe: then kernels must be attributed
        assert t.total("gpu.launches") >= 3
    print("inside:", notes or "gpu on", "| after:", load(after).metadata.get("notes"))


def test_torch_profiler_inside_deepcontext_no_crash(tmp_path: Path) -> None:
    out = tmp_path / "dc.dcprof"
    proc = _run([str(PROGRAMS / "dc_then_torch.py"), str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    t = load(out)
    def kernels_at(marker: str) -> list:
        found = [n.id for n in t.nodes if n.frame.kind == "python" and n.frame.file.endswith(
            "dc_then_torch.py") and n.frame.line == line_of("dc_then_torch.py", marker)]
        return nodes_of(t, found[0], "kernel") if found else []
    print("with torch:", launches(kernels_at("WITH_TORCH")), "after torch:",
          launches(kernels_at("AFTER_TORCH")), "notes:", t.metadata.get("notes"),
          "gpu:", t.metadata.get("gpu"))
    print(proc.stdout, proc.stderr[-2000:])
    # torch.profiler cannot subscribe while deepcontext holds CUPTI: every line stays captured
    for marker in ("BEFORE_TORCH", "WITH_TORCH", "AFTER_TORCH"):
        kernels = kernels_at(marker)
        assert kernels and all(k.metrics["gpu.launches"] == 3 for k in kernels), marker


def test_sessions_in_one_process_exit_cleanly(tmp_path: Path) -> None:
    proc = _run([str(PROGRAMS / "sessions.py"), str(tmp_path / "s")], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "done" in proc.stdout and "corrupt" not in proc.stderr and "double free" not in proc.stderr
    line = line_of("sessions.py", "SESSION_LINE")
    for i in range(3):  # each session counts only its own launches
        t = load(tmp_path / f"s{i}.dcprof")
        nodes = [n.id for n in t.nodes if n.frame.kind == "python" and n.frame.line == line
                 and n.frame.file.endswith("sessions.py")]
        assert len(nodes) == 1
        assert launches(nodes_of(t, nodes[0], "kernel")) == i + 2
        assert t.metadata["gpu"]["kernels"] == t.total("gpu.launches") == i + 2


def test_torch_profiler_beside_a_session_sees_the_backward_on_the_device_thread(tmp_path: Path) -> None:
    # The engine's device thread takes the caller's RecordFunction state (torch.profiler's
    # callbacks) for each node; the session's state setter skips only a state already there.
    program = Path(__file__).parents[1] / "integration" / "programs" / "beside_torch_profiler.py"
    proc = _run([str(program), str(tmp_path / "beside.dcprof"), "cuda"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        "session: query rebound True, state setter rebound True, wrapper query rebound True",
        "torch.profiler saw: MmBackward0 aten::linear aten::matmul aten::mm aten::t "
        "autograd::engine::evaluate_function: MmBackward0",
        "after the session: (0, 0, 0)",
    ]


def test_record_function_block_kernels_at_the_block_lines(tmp_path: Path) -> None:
    """Kernels launched inside a record_function block (whose scope opened in __enter__, a frame
    that has returned) go below the scope at the body's lines, their backward kernels with them;
    the optimizer's multi-tensor kernels below torch.optim's lines inside its step scope."""
    program = "scoped_train.py"
    k = _constants(program)
    out = tmp_path / "scoped.dcprof"
    proc = _run(["-m", "deepcontext", "record", "-o", str(out), "--",
                 sys.executable, str(PROGRAMS / program)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    tree = load(out)

    def line(marker: str) -> int:
        (nid,) = [n.id for n in tree.nodes if n.frame.kind == "python"
                  and n.frame.file.endswith(program) and n.frame.line == line_of(program, marker)]
        return nid

    (scope,) = [n.id for n in tree.nodes if n.frame.kind == "op" and n.frame.name == "forward_block"]
    assert tree.nodes[line("BODY")].parent == scope and tree.nodes[line("LOSS")].parent == scope
    linears = [n for n in tree.walk(line("BODY")) if n.frame == Frame("op", "aten::linear")]
    assert sum(n.metrics["op.count"] for n in linears) == k.STEPS * k.LINEARS
    fwd = nodes_of(tree, line("BODY"), "kernel")
    assert fwd and all(n.metrics["gpu.launches"] % k.STEPS == 0 for n in fwd)
    fwd_ids = {n.id for n in fwd}
    bwd = [n for n in nodes_of(tree, line("BODY"), "kernel", skip_backward=False) if n.id not in fwd_ids]
    assert bwd and all(any(f.kind == "marker" and f.name == "backward" for f in tree.path(n.id))
                       for n in bwd)
    assert nodes_of(tree, line("LOSS"), "kernel")
    # no kernel hangs on the scope itself: every one is below a line of the block
    assert not [c for c in tree.nodes[scope].children if tree.nodes[c].frame.kind == "kernel"]
    step = next(n for n in tree.walk(line("STEP")) if n.frame.kind == "op"
                and n.frame.name.startswith("Optimizer.step#"))
    multi = [n for n in tree.walk(step.id) if n.frame.kind == "python"
             and n.frame.name in ("_multi_tensor_adam", "_multi_tensor_adamw")]
    assert multi
    optim_kernels = [n for m in multi for n in nodes_of(tree, m.id, "kernel")]
    assert optim_kernels and all("multi_tensor_apply" in n.frame.name for n in optim_kernels)
    assert all(n.metrics["gpu.launches"] % k.STEPS == 0 for n in optim_kernels)
    # every kernel of the step is below one of torch.optim's lines inside the scope
    for n in nodes_of(tree, step.id, "kernel"):
        below = tree.path(n.id)[len(tree.path(step.id)):]
        assert any(f.kind == "python" and "/torch/optim/" in f.file for f in below), n.frame.name


def test_schedule_detaches_cupti_once_done(tmp_path: Path) -> None:
    """Kernels of the active steps only, exactly; CUPTI attached once, through the wait steps
    (their kernels' records come and are ignored, each one), and detached when the schedule is
    done: none of the last steps' launches reaches it."""
    program = "scheduled_launches.py"
    k = _constants(program)
    out = tmp_path / "scheduled.dcprof"
    proc = _run([str(PROGRAMS / program), str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == "done\n"
    tree = load(out)
    (step,) = [n.id for n in tree.nodes if n.frame.kind == "python" and n.frame.file.endswith(program)
               and n.frame.line == line_of(program, "STEP")]
    assert launches(nodes_of(tree, step, "kernel")) == 3 * k.ACTIVE * k.REPEAT
    assert tree.total("gpu.launches") == 3 * k.ACTIVE * k.REPEAT
    gpu = tree.metadata["gpu"]
    assert (gpu["attaches"], gpu["detaches"]) == (1, 1)
    assert gpu["ignored"] == 3 * k.WAIT * k.REPEAT  # the steps after the schedule: none
    assert gpu["pending"] == 0
    assert gpu["kernels"] == 3 * (k.WARMUP + k.ACTIVE) * k.REPEAT  # warm-ups' folded, then dropped
