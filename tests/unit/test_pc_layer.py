"""The pc layer's pure parts (docs/pc-sampling.md): nvdisasm's SASS with line info, CUPTI's
stall reasons as metrics, and the join of PC records to kernel nodes (exact by context, else
split by GPU time), folded into the real native tree and read by the gpu-stall rule."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from deepcontext.analysis import analyze
from deepcontext.analysis.rules.gpu_stall import GpuStallRule
from deepcontext.capture import pc
from deepcontext.capture.snapshot import build_tree
from deepcontext.tree.frame import INSTRUCTION

ROOT = Path(__file__).resolve().parents[2]
NVDISASM_OUT = ROOT / "tests/data/pc/hot_loop_sm90.nvdisasm"  # nvdisasm 13.5 -g -c, sm_90
SOURCE = ROOT / "tests/gpu/programs/hot_loop.cu"
HOT_LINE = next(i for i, t in enumerate(SOURCE.read_text().splitlines(), 1) if "// HOT" in t)
REASONS = ["long_scoreboard", "long_scoreboard_not_issued", "selected", "wait", "barrier"]


def test_parse_nvdisasm_gives_each_pc_its_sass_and_line():
    funcs = pc.parse_nvdisasm(NVDISASM_OUT.read_text())
    assert list(funcs) == ["hot_loop"]
    ins = funcs["hot_loop"]
    assert len(ins) == 80 and sorted(ins) == list(range(0, 80 * 16, 16))  # Hopper: 16 B each
    kernel_line = HOT_LINE - 5  # the `extern "C" __global__ void hot_loop(` line
    assert ins[0] == pc.Instruction(0, "LDC R1, c[0x0][0x28]", "tests/gpu/programs/hot_loop.cu",
                                    kernel_line)
    assert ins[0x10] == pc.Instruction(0x10, "S2R R4, SR_CTAID.X", ins[0].file, kernel_line + 1)
    loads = [i for i in ins.values() if i.sass.startswith("LDG")]
    assert len(loads) == 5 and {i.line for i in loads} == {HOT_LINE}  # unrolled 4x + remainder
    assert sum(i.line == HOT_LINE for i in ins.values()) == 25
    assert all(not i.sass.endswith(";") and i.sass for i in ins.values())


def test_parse_nvdisasm_keeps_functions_apart_and_takes_innermost_inlined_line():
    text = """
.text._Z1av:
	//## File "/src/a.cu", line 3 inlined at "/src/b.cu", line 9
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.text._Z1bv:
        /*0000*/                   EXIT ;
	//## File "/src/b.cu", line 12
        /*0010*/                   BRA `(.L_x_1) ;
"""
    funcs = pc.parse_nvdisasm(text)
    assert funcs["_Z1av"][0] == pc.Instruction(0, "MOV R1, c[0x0][0x28]", "/src/a.cu", 3)
    assert funcs["_Z1bv"][0] == pc.Instruction(0, "EXIT", "", 0)
    assert funcs["_Z1bv"][0x10] == pc.Instruction(0x10, "BRA `(.L_x_1)", "/src/b.cu", 12)


@pytest.mark.skipif(pc.find_nvdisasm() is None or subprocess.run(
    ["which", "nvcc"], capture_output=True).returncode != 0, reason="needs nvcc and nvdisasm")
def test_disassemble_a_cubin_built_with_lineinfo(tmp_path):
    cubin = tmp_path / "hot_loop.cubin"
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-lineinfo", "-o", str(cubin), str(SOURCE)],
                   check=True, timeout=300)
    funcs, why = pc.disassemble(cubin.read_bytes(), pc.find_nvdisasm())
    assert why == ""
    loads = [i for i in funcs["hot_loop"].values() if i.sass.startswith("LDG")]
    assert loads and {(Path(i.file).name, i.line) for i in loads} == {("hot_loop.cu", HOT_LINE)}
    assert pc.disassemble(b"not a cubin", pc.find_nvdisasm())[1].startswith(pc.find_nvdisasm())


def test_reason_metrics_count_each_sample_once_and_keep_issued_apart():
    m = pc.reason_metrics(REASONS, {0: 70, 1: 60, 2: 20, 3: 10})
    assert m == {"pc.samples": 100, "stall.long_scoreboard": 70, "pc.selected": 20,
                 "stall.wait": 10}
    assert pc.reason_metrics(REASONS, {4: 0}) == {}


K = [pc.KernelNode(node=10, parent=5, name="hot_loop", gpu_time=3.0),
     pc.KernelNode(node=11, parent=7, name="hot_loop", gpu_time=1.0),
     pc.KernelNode(node=12, parent=7, name="other", gpu_time=0.0)]
SASS = {"hot_loop": {0x40: pc.Instruction(0x40, "LDG.E R2, desc[UR4][R2.64]", "k.cu", 10)}}


def test_fold_exact_where_a_context_is_known_else_split_by_gpu_time():
    records = [(1, "hot_loop", "hot_loop", 0x40, 5, {0: 8}),   # serialized: exact
               (1, "hot_loop", "hot_loop", 0x40, -1, {0: 40, 3: 40}),  # continuous: split
               (1, "gone", "_Z4gonev", 0x10, -1, {3: 5})]      # no kernel node
    placed, counts = pc.fold(records, REASONS, K, SASS)
    assert counts == {"exact": 8, "split": 80, "unmatched": 5, "filtered": 0}
    assert [(p.kernel_node, p.metrics) for p in placed] == [
        (10, {"pc.samples": 8, "stall.long_scoreboard": 8}),
        (10, {"pc.samples": 60, "stall.long_scoreboard": 30, "stall.wait": 30}),
        (11, {"pc.samples": 20, "stall.long_scoreboard": 10, "stall.wait": 10})]
    assert placed[0].name == "0x0040 LDG.E R2, desc[UR4][R2.64]"
    assert placed[0].extra == "pc=0x0040;source=k.cu:10;sass=LDG.E R2, desc[UR4][R2.64]"


def test_fold_falls_back_to_split_and_equal_shares_and_filters_kernels():
    # a context that launched no kernel of that name: split over the kernel's contexts
    placed, counts = pc.fold([(1, "hot_loop", "hot_loop", 0x40, 99, {0: 4})], REASONS, K, SASS)
    assert counts["split"] == 4 and [p.metrics["pc.samples"] for p in placed] == [3.0, 1.0]
    # no GPU time at all: equal shares; unknown PC: the frame says only its offset
    k0 = [pc.KernelNode(1, 0, "z", 0.0), pc.KernelNode(2, 3, "z", 0.0)]
    placed, _ = pc.fold([(1, "z", "z", 0x80, -1, {3: 6})], REASONS, k0, {})
    assert [(p.kernel_node, p.metrics["pc.samples"], p.name, p.extra) for p in placed] == [
        (1, 3.0, "0x0080", "pc=0x0080"), (2, 3.0, "0x0080", "pc=0x0080")]
    placed, counts = pc.fold([(1, "hot_loop", "hot_loop", 0x40, -1, {0: 4})], REASONS, K, SASS,
                             kernel_filter=re.compile("^other$"))
    assert placed == [] and counts["filtered"] == 4


def test_settings_from_env_reject_bad_values_in_one_line():
    s = pc.Settings.from_env({"DEEPCONTEXT_PC_MODE": "serialized", "DEEPCONTEXT_PC_PERIOD": "14",
                              "DEEPCONTEXT_PC_KERNELS": "gemm|hot"})
    assert (s.mode, s.period_log2, s.kernels.pattern) == ("serialized", 14, "gemm|hot")
    assert pc.Settings.from_env({}) == pc.Settings("continuous", 0, None)
    for env, msg in [({"DEEPCONTEXT_PC_MODE": "fast"}, "choose from continuous, serialized"),
                     ({"DEEPCONTEXT_PC_PERIOD": "x"}, "expected an integer"),
                     ({"DEEPCONTEXT_PC_PERIOD": "40"}, "expected 5 to 31"),
                     ({"DEEPCONTEXT_PC_KERNELS": "("}, "not a regular expression")]:
        with pytest.raises(ValueError, match=msg):
            pc.Settings.from_env(env)


def test_folded_into_the_native_tree_the_stall_rule_reads_it():
    # In a child: the native tree is process-wide and this test adds nodes to it.
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            "import test_pc_layer as t; t.check_native_fold(); print('ok')")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout == "ok\n", p.stderr[-3000:]


def check_native_fold():
    from deepcontext.capture.native import core

    top = core.child_node(0, 8, "pc-sampling unit test", "")  # a marker of its own
    kernel = core.child_node(top, 4, "hot_loop", "grid=64x1x1;block=256x1x1")
    core.add_metric(kernel, core.metric_id("gpu.time"), 2.0)
    mine = [k for k in pc.kernel_nodes(core.snapshot()) if k.parent == top]
    assert mine == [pc.KernelNode(kernel, top, "hot_loop", 2.0)]
    sass = pc.parse_nvdisasm(NVDISASM_OUT.read_text())
    loads = sorted(i.pc for i in sass["hot_loop"].values() if i.sass.startswith("LDG"))
    records = [(1, "hot_loop", "hot_loop", loads[0], -1, {0: 700, 1: 650}),
               (1, "hot_loop", "hot_loop", 0x0, -1, {3: 200, 2: 100})]
    placed, counts = pc.fold(records, REASONS, mine, sass)
    assert counts["split"] == 1000
    pc.apply(core, placed)
    tree = build_tree(core.snapshot(), {})
    instrs = [n for n in tree.nodes[1:] if n.frame.kind == INSTRUCTION
              and tree.nodes[tree.nodes[n.parent].parent].frame.name == "pc-sampling unit test"]
    assert sorted((n.frame.get("pc"), n.metrics.get("pc.samples")) for n in instrs) == [
        ("0x0000", 300.0), (f"0x{loads[0]:04x}", 700.0)]
    hot = next(n for n in instrs if n.metrics.get("stall.long_scoreboard"))
    assert hot.frame.get("source") == f"tests/gpu/programs/hot_loop.cu:{HOT_LINE}"
    findings = [f for f in analyze(tree, rules=[GpuStallRule()]) if "hot_loop" in f.title]
    assert len(findings) == 1
    f = findings[0]
    assert f.evidence["reason"] == "long_scoreboard" and f.evidence["reason_share"] == 0.7
    assert f"hot_loop.cu:{HOT_LINE}" in f.message and "coalesce" in f.suggestion


def test_a_bad_pc_setting_stops_record_before_the_program_runs(tmp_path):
    prog = tmp_path / "p.py"
    prog.write_text("print('ran')\n")
    p = subprocess.run([sys.executable, "-m", "deepcontext", "record", "--context", "python,pc",
                        "-o", str(tmp_path / "o.dcprof"), "--", sys.executable, str(prog)],
                       capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "DEEPCONTEXT_PC_MODE": "fast"})
    assert p.returncode != 0 and "ran" not in p.stdout
    assert "DEEPCONTEXT_PC_MODE='fast': choose from continuous, serialized" in p.stderr
    assert "Traceback" not in p.stderr


def test_pc_options_are_checked_by_record(tmp_path):
    prog = tmp_path / "p.py"
    prog.write_text("print('ran')\n")

    def record(*opts):
        return subprocess.run([sys.executable, "-m", "deepcontext", "record", *opts, "-o",
                               str(tmp_path / "o.dcprof"), "--", sys.executable, str(prog)],
                              capture_output=True, text=True, timeout=120)
    p = record("--context", "python,pc", "--pc-kernels", "(")
    assert p.returncode != 0 and p.stdout == "" and "Traceback" not in p.stderr
    assert "DEEPCONTEXT_PC_KERNELS='(': not a regular expression" in p.stderr
    p = record("--pc-mode", "serialized")
    assert p.returncode != 0 and "need pc in --context" in p.stderr and p.stdout == ""
    # On this machine (no GPU) the layer says why it is off; the program runs untouched.
    p = record("--context", "python,pc", "--pc-period", "12")
    assert p.returncode == 0 and p.stdout == "ran\n"
    from deepcontext.tree import load

    meta = load(tmp_path / "o.dcprof").metadata
    assert meta["context"] == ["python", "pc"]
    assert meta["pc"]["period_log2"] == 12 and meta["pc"]["pcs"] == 0
