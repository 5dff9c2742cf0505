"""The pc layer on a real GPU (docs/pc-sampling.md): a CUDA kernel with a known hot loop (built
here with nvcc -lineinfo) gets its PC samples at that loop's line, in continuous and serialized
mode; serialized mode joins them to the exact launch context; a Triton kernel's samples land on
its Python source lines; the gpu-stall rule reads them; the default context has none of it; the
layer's cost (kernel time with and without sampling) is printed.

Every run prints what CUPTI answered at each step and where the samples went (shown with -rA or
-s, and appended to $OUT/pc_sampling.txt when OUT is set), so a failure says what to fix.

Run on a GPU machine: python3 -m pytest -q -m gpu tests/gpu/test_pc_sampling.py -rA
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from deepcontext.analysis import analyze
from deepcontext.analysis.rules.gpu_stall import GpuStallRule
from deepcontext.tree import CallingContextTree, load
from deepcontext.tree.frame import INSTRUCTION, KERNEL

pytestmark = pytest.mark.gpu

PROGRAMS = Path(__file__).parent / "programs"


def line_of(program: str, marker: str) -> int:
    for i, text in enumerate((PROGRAMS / program).read_text().splitlines(), 1):
        if f"// {marker}" in text or f"# {marker}" in text:
            return i
    raise AssertionError(marker)


def say(text: str) -> None:
    print(text, flush=True)
    if os.environ.get("OUT"):
        with open(Path(os.environ["OUT"]) / "pc_sampling.txt", "a") as f:
            f.write(text + "\n")


def nvcc() -> str:
    found = shutil.which("nvcc") or next(
        (str(p) for p in sorted(Path("/usr/local").glob("cuda*/bin/nvcc"), reverse=True)), None)
    if found is None:
        pytest.fail("nvcc not found (PATH, /usr/local/cuda*/bin): cannot build hot_loop.cu")
    return found


@pytest.fixture(scope="module")
def hot_lib(tmp_path_factory) -> Path:
    lib = tmp_path_factory.mktemp("pc_lib") / "libhot_loop.so"
    for arch in ("-arch=native", "-arch=sm_90"):  # native: the GPU here (H200: sm_90)
        cmd = [nvcc(), "-shared", "-Xcompiler", "-fPIC", "-lineinfo", arch, "-o", str(lib),
               str(PROGRAMS / "hot_loop.cu")]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        say(f"$ {' '.join(cmd)}\nrc={p.returncode} {p.stderr[-1000:]}")
        if p.returncode == 0:
            return lib
    pytest.fail(f"nvcc could not build hot_loop.cu: {p.stderr[-2000:]}")


def describe(label: str, tree: CallingContextTree, meta: dict, wall: float) -> None:
    """Everything needed to see what went wrong: CUPTI's answers, the join, the hot PCs."""
    say(f"\n===== {label}: {wall:.1f} s wall")
    pc = meta.get("pc")
    say("pc metadata: " + (json.dumps({k: v for k, v in pc.items() if k != "cupti"}, indent=1)
                           if pc else "<none>"))
    for line in (pc or {}).get("cupti", []):
        say(f"  cupti: {line}")
    for n in meta.get("notes", []):
        say(f"  note: {n}")
    for k in tree.nodes[1:]:
        if k.frame.kind != KERNEL:
            continue
        instrs = [c for c in tree.nodes if c.parent == k.id and c.frame.kind == INSTRUCTION]
        samples = sum(c.metrics.get("pc.samples", 0.0) for c in instrs)
        launches = k.metrics.get("gpu.launches", 0.0)
        say(f"kernel {k.frame.name[:70]} (node {k.id}, parent {tree.nodes[k.parent].frame.name[:40]}"
            f"): gpu.time {k.metrics.get('gpu.time', 0.0):.4f} s over {launches:.0f} launches, "
            f"{len(instrs)} instructions, {samples:.0f} samples")
        by_line: dict[str, float] = defaultdict(float)
        for c in instrs:
            by_line[c.frame.get("source") or "<no line>"] += c.metrics.get("pc.samples", 0.0)
        for src, n in sorted(by_line.items(), key=lambda kv: -kv[1])[:4]:
            say(f"    line {src}: {n:.0f}")
        for c in sorted(instrs, key=lambda c: -c.metrics.get("pc.samples", 0.0))[:5]:
            stalls = sorted(((m[6:], v) for m, v in c.metrics.items() if m.startswith("stall.")),
                            key=lambda kv: -kv[1])[:3]
            say(f"    {c.frame.name[:60]:60s} {c.metrics.get('pc.samples', 0.0):8.0f} "
                f"{c.frame.get('source')} {stalls}")


def record(tmp: Path, label: str, context: str, program: list[str], *opts: str,
           stdout: str) -> tuple[CallingContextTree, dict]:
    out = tmp / f"{label}.dcprof"
    cmd = [sys.executable, "-m", "deepcontext", "record", "--context", context, *opts, "-o",
           str(out), "--", sys.executable, *program]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, timeout=600,
                       env={**os.environ, "PYTHONUNBUFFERED": "1"})
    wall = time.monotonic() - t0
    say(f"\n$ {' '.join(cmd)}\nrc={p.returncode}\nstderr tail:\n{p.stderr[-1500:]}")
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout == stdout
    tree = load(out)
    tree.self_check()
    describe(label, tree, tree.metadata, wall)
    return tree, tree.metadata


CUDA_RUNS = {"default": ("python,op,gpu", ()),
             "continuous": ("python,op,gpu,pc", ()),
             "serialized": ("python,op,gpu,pc", ("--pc-mode", "serialized")),
             "filtered": ("python,op,gpu,pc", ("--pc-kernels", "^nomatch$", "--pc-period", "14"))}


class CudaRuns:
    """Each recording made once, at first use: one failing mode leaves the others' tests be."""

    def __init__(self, lib: Path, tmp: Path):
        self.lib, self.tmp, self.done = lib, tmp, {}

    def __getitem__(self, label: str) -> tuple[CallingContextTree, dict]:
        if label not in self.done:
            context, opts = CUDA_RUNS[label]
            try:
                self.done[label] = record(self.tmp, label, context,
                                          [str(PROGRAMS / "pc_hot_loop.py"), str(self.lib)],
                                          *opts, stdout="pc_hot_loop done\n")
            except BaseException as e:  # noqa: BLE001 - reported by every test that needs it
                self.done[label] = e
        got = self.done[label]
        if isinstance(got, BaseException):
            pytest.fail(f"the {label} recording failed: {got}"[:4000])
        return got


@pytest.fixture(scope="module")
def cuda_runs(hot_lib, tmp_path_factory):
    return CudaRuns(hot_lib, tmp_path_factory.mktemp("pc_cuda"))


def instructions(tree: CallingContextTree, kernel: str) -> list:
    return [n for n in tree.nodes[1:] if n.frame.kind == INSTRUCTION
            and tree.nodes[n.parent].frame.kind == KERNEL
            and tree.nodes[n.parent].frame.name.startswith(kernel)]


def samples_by_line(instrs: list) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for n in instrs:
        src = n.frame.get("source")
        key = f"{Path(src.rsplit(':', 1)[0]).name}:{src.rsplit(':', 1)[1]}" if src else "<none>"
        out[key] += n.metrics.get("pc.samples", 0.0)
    return out


@pytest.mark.parametrize("mode", ["continuous", "serialized"])
def test_cuda_hot_loop_samples_land_on_the_hot_line(cuda_runs, mode):
    tree, meta = cuda_runs[mode]
    assert meta["pc"]["mode"] == mode
    assert "not found" not in meta["pc"]["nvdisasm"], meta["pc"]["nvdisasm"]
    assert meta["pc"]["total_samples"] > 0, meta["pc"]["cupti"]
    instrs = instructions(tree, "hot_loop")
    assert instrs, "no instruction frames under hot_loop"
    assert all(n.frame.get("sass") for n in instrs)
    lines = samples_by_line(instrs)
    hot = f"hot_loop.cu:{line_of('hot_loop.cu', 'HOT')}"
    assert max(lines, key=lines.get) == hot, dict(lines)
    assert lines[hot] > 0.5 * sum(lines.values()), dict(lines)


def test_serialized_mode_joins_samples_to_the_exact_launch(cuda_runs):
    tree, meta = cuda_runs["serialized"]
    pc = meta["pc"]
    instrs = instructions(tree, "hot_loop")
    total = sum(n.metrics.get("pc.samples", 0.0) for n in instrs)
    assert pc["samples_exact"] > 0 and pc["samples_split"] == 0, pc
    assert abs(total - pc["samples_exact"]) < 1e-6 * total
    call = line_of("pc_hot_loop.py", "CALL")
    for n in instrs:
        launcher = tree.nodes[tree.nodes[n.parent].parent].frame
        assert (Path(launcher.file).name, launcher.line) == ("pc_hot_loop.py", call), launcher


def test_continuous_mode_splits_by_kernel_and_says_so(cuda_runs):
    tree, meta = cuda_runs["continuous"]
    pc = meta["pc"]
    from deepcontext.capture.pc import SPLIT_METHOD

    assert pc["split"] == SPLIT_METHOD and pc["samples_split"] > 0 and pc["samples_exact"] == 0
    total = sum(n.metrics.get("pc.samples", 0.0) for n in instructions(tree, "hot_loop"))
    assert abs(total - pc["samples_split"]) < 1e-6 * total


def test_continuous_mode_samples_only_the_active_steps(cuda_runs, hot_lib, tmp_path):
    """A schedule in continuous mode: sampling runs only in the active step (start/stop
    ranges), so the kernel's samples are one launch's, not the nine launches' of all steps."""
    out = tmp_path / "steps.dcprof"
    p = subprocess.run([sys.executable, str(PROGRAMS / "pc_steps.py"), str(hot_lib), str(out)],
                       capture_output=True, text=True, cwd=tmp_path, timeout=600,
                       env={**os.environ, "PYTHONUNBUFFERED": "1"})
    say(f"\npc_steps rc={p.returncode} {p.stderr[-1500:]}")
    assert p.returncode == 0 and p.stdout == "pc_steps done\n", p.stderr[-3000:]
    tree = load(out)
    pc = tree.metadata["pc"]
    describe("steps", tree, tree.metadata, 0.0)
    assert pc["mode"] == "continuous" and pc["ranges"] == 1, pc
    launches = sum(n.metrics.get("gpu.launches", 0.0) for n in tree.nodes[1:]
                   if n.frame.kind == KERNEL and n.frame.name == "hot_loop")
    assert launches == 1
    ranged = sum(n.metrics.get("pc.samples", 0.0) for n in instructions(tree, "hot_loop"))
    whole, _ = cuda_runs["continuous"]  # 5 launches, all sampled
    per_launch = sum(n.metrics.get("pc.samples", 0.0) for n in instructions(whole, "hot_loop")) / 5
    say(f"steps: {ranged:.0f} samples in the active step; {per_launch:.0f} per launch unranged")
    assert 0.4 * per_launch < ranged < 2.5 * per_launch  # one launch's samples, not nine


def test_kernel_filter_and_period(cuda_runs):
    tree, meta = cuda_runs["filtered"]
    pc = meta["pc"]
    assert pc["period_log2"] == 14 and pc["kernel_filter"] == "^nomatch$"
    assert pc["samples_filtered"] > 0 and not instructions(tree, "")


def test_default_context_pays_nothing(cuda_runs):
    tree, meta = cuda_runs["default"]
    assert "pc" not in meta and not instructions(tree, "")


def test_gpu_stall_rule_names_the_hot_loop(cuda_runs):
    tree, _ = cuda_runs["serialized"]
    found = [f for f in analyze(tree, rules=[GpuStallRule()]) if "hot_loop" in f.title]
    for f in found:
        say(f"finding: {f.title} | {f.message} | {f.suggestion}")
    assert len(found) == 1
    # The rule names the stall reason with the most samples in the kernel: recount it from the
    # instruction frames. On the H200 the four parallel loads of the loop fill the load/store
    # queue (lg_throttle, 56%) and the FMA waits on them (long_scoreboard): memory-bound either way.
    reasons: dict[str, float] = {}
    for n in instructions(tree, "hot_loop"):
        for metric, v in n.metrics.items():
            if metric.startswith("stall."):
                reasons[metric[6:]] = reasons.get(metric[6:], 0.0) + v
    top = max(reasons, key=reasons.get)
    assert found[0].evidence["reason"] == top, (found[0].evidence, reasons)
    assert top in ("lg_throttle", "long_scoreboard"), reasons
    assert f"hot_loop.cu:{line_of('hot_loop.cu', 'HOT')}" in found[0].message


def test_cost_of_the_layer(cuda_runs):
    per_launch = {}
    for label in ("default", "continuous", "serialized"):
        tree, _ = cuda_runs[label]
        k = [n for n in tree.nodes[1:] if n.frame.kind == KERNEL and n.frame.name == "hot_loop"]
        time_s = sum(n.metrics.get("gpu.time", 0.0) for n in k)
        launches = sum(n.metrics.get("gpu.launches", 0.0) for n in k)
        assert launches == 5, (label, launches)
        per_launch[label] = time_s / launches
    say("\npc layer cost, hot_loop kernel time per launch: " + ", ".join(
        f"{m} {t * 1e3:.2f} ms ({t / per_launch['default']:.2f}x)" for m, t in per_launch.items()))


def test_triton_samples_land_on_triton_source_lines(tmp_path):
    pytest.importorskip("triton")
    tree, meta = record(tmp_path, "triton", "python,op,gpu,pc", [str(PROGRAMS / "pc_triton.py")],
                        "--pc-kernels", "gather_sum", stdout="pc_triton done\n")
    instrs = instructions(tree, "gather_sum")
    assert instrs, f"no instruction frames under gather_sum: {meta.get('pc')}"
    lines = samples_by_line(instrs)
    hot = f"pc_triton.py:{line_of('pc_triton.py', 'HOT')}"
    assert max(lines, key=lines.get) == hot, dict(lines)
    assert all(n.frame.get("sass") for n in instrs)
    assert not [n for n in tree.nodes[1:] if n.frame.kind == INSTRUCTION
                and not tree.nodes[n.parent].frame.name.startswith("gather_sum")]
