"""The viewer's instruction pane in real headless Chromium: a kernel's sampled instructions (the
pc layer's frames) in program order with SASS, source line and stall breakdown, the per-line
sums, links into the source pane, and hostile SASS text kept inert."""

from __future__ import annotations

import pytest
from _trees import HOSTILE
from test_viewer import click_node

from deepcontext.tree.cct import CallingContextTree
from deepcontext.tree.frame import Frame

KERNEL_PY = """import triton
import triton.language as tl


@triton.jit
def scale(x_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = x * 2.0
    tl.store(x_ptr + offs, y, mask=mask)
"""

# (pc, sass, line in KERNEL_PY, {metric: samples}); pc.samples is the sum of the stall.* and
# pc.selected counts, as the pc layer writes them (capture/pc.py reason_metrics)
INSTRUCTIONS = [
    ("0x0080", "STG.E desc[UR4][R2.64], R5", 12, {"stall.lg_throttle": 8, "pc.selected": 2}),
    ("0x0010", "S2R R0, SR_CTAID.X", 7, {"stall.wait": 4, "pc.selected": 6}),
    ("0x0040", "LDG.E R4, desc[UR4][R2.64]", 10, {"stall.long_scoreboard": 45,
                                                   "stall.mio_throttle": 15}),
    ("0x0050", "FMUL R5, R4, 2", 10, {"stall.long_scoreboard": 10, "pc.selected": 10}),
]


def kernel_tree(src: str) -> CallingContextTree:
    t = CallingContextTree({"command": ["python", "run.py"]})
    kernel = t.add_path([Frame.make("python", "<module>", src, 20),
                         Frame.make("op", "triton::scale"),
                         Frame.make("kernel", "scale_0d1d2")])
    t.add_metric(kernel, "gpu.time", 0.004)
    for pc, sass, line, metrics in INSTRUCTIONS:
        node = t.child(kernel, Frame.make("instruction", f"{pc} {sass}", pc=pc,
                                          source=f"{src}:{line}", sass=sass))
        t.add_metric(node, "pc.samples", sum(metrics.values()))
        for m, v in metrics.items():
            t.add_metric(node, m, v)
    return t


@pytest.fixture
def kernel_view(open_viewer, tmp_path):
    src = tmp_path / "kern.py"
    src.write_text(KERNEL_PY)
    v = open_viewer(kernel_tree(str(src)))
    click_node(v, v.api("findNode('scale_0d1d2')"))
    return v


def cells(row) -> list[str]:
    return [c.strip() for c in row.locator("td").all_text_contents()]


def test_kernel_shows_its_instructions_in_program_order(kernel_view):
    pane = kernel_view.page.locator("#dc-details-body .dc-instr")
    assert pane.locator("h3").first.text_content() == "Sampled instructions (4, 100 samples)"
    rows = pane.locator("table.dc-instr-pcs tr[data-node]")
    assert rows.count() == 4
    got = [cells(rows.nth(i)) for i in range(4)]
    assert [r[0] for r in got] == ["0x0010", "0x0040", "0x0050", "0x0080"]
    assert [r[1] for r in got] == ["10", "60", "20", "10"]
    assert got[1][3] == "LDG.E R4, desc[UR4][R2.64]"
    assert got[1][4] == "kern.py:10"
    assert got[1][5] == "long_scoreboard 75%, mio_throttle 25%"
    assert got[2][5] == "long_scoreboard 50%"  # pc.selected is issue, not a stall
    # the hottest instruction is marked, and only it
    assert [(rows.nth(i).get_attribute("class") or "").split() for i in range(4)] == [[], ["dc-hot"], [], []]
    assert kernel_view.errors == []


def test_samples_are_summed_per_source_line(kernel_view):
    rows = kernel_view.page.locator("#dc-details-body table.dc-instr-lines tr:has(td)")
    assert [cells(rows.nth(i)) for i in range(rows.count())] == [
        ["kern.py:10", "80", "80%", "long_scoreboard 69%, mio_throttle 19%"],
        ["kern.py:7", "10", "10%", "wait 40%"],  # ties stay in program order
        ["kern.py:12", "10", "10%", "lg_throttle 80%"],
    ]


def test_a_source_link_opens_the_kernel_source_with_samples_per_line(kernel_view):
    page = kernel_view.page
    page.locator("#dc-details-body table.dc-instr-lines td.dc-link", has_text="kern.py:10").click()
    assert page.locator("#dc-source-file").text_content() == "kern.py:10"
    current = page.locator("#dc-source-body .dc-current")
    assert current.locator(".dc-code").text_content() == "    x = tl.load(x_ptr + offs, mask=mask)"
    assert current.locator(".dc-val").text_content() == "80"
    vals = {int(r.locator(".dc-ln").text_content()): r.locator(".dc-val").text_content()
            for r in page.locator("#dc-source-body .dc-line").all()}
    assert {n: v for n, v in vals.items() if v} == {7: "10", 10: "80", 12: "10"}
    assert kernel_view.errors == []


def test_selecting_an_instruction_marks_its_row_and_shows_its_line(open_viewer, tmp_path):
    src = tmp_path / "kern.py"
    src.write_text(KERNEL_PY)
    v = open_viewer(kernel_tree(str(src)))
    node = v.api("findNode('0x0080 STG.E desc[UR4][R2.64], R5')")
    v.api(f"select({node})")
    current = v.page.locator("#dc-details-body tr.dc-current")
    assert current.count() == 1 and cells(current)[0] == "0x0080"
    assert v.page.locator("#dc-source-file").text_content() == "kern.py:12"
    # bottom-up, instructions are the roots: no kernel pane
    v.api("setMode('bottomup')")
    kernel = v.api("findNode('scale_0d1d2')")
    v.api(f"select({kernel})")
    assert v.page.locator("#dc-details-body .dc-instr").count() == 0
    assert v.errors == []


def test_a_kernel_without_samples_and_hostile_sass(open_viewer, tmp_path):
    t = CallingContextTree()
    plain = t.add_path([Frame.make("op", "aten::mm"), Frame.make("kernel", "gemm")])
    t.add_metric(plain, "gpu.time", 1.0)
    hot = t.add_path([Frame.make("op", "aten::add"), Frame.make("kernel", "add_kernel")])
    t.add_metric(hot, "gpu.time", 1.0)
    ins = t.child(hot, Frame.make("instruction", "0x0000 " + HOSTILE, pc="0x0000", sass=HOSTILE,
                                  source="/nowhere/k.cu:3"))
    t.add_metric(ins, "pc.samples", 5)
    t.add_metric(ins, "stall.wait", 5)
    v = open_viewer(t)
    click_node(v, v.api("findNode('gemm')"))
    assert v.page.locator("#dc-details-body .dc-instr").count() == 0
    v.page.locator("#dc-crumbs button", has_text="all").click()
    click_node(v, v.api("findNode('add_kernel')"))
    row = v.page.locator("#dc-details-body table.dc-instr-pcs tr[data-node]")
    assert cells(row)[3] == HOSTILE.strip()
    assert v.page.locator("img, iframe, object, embed").count() == 0 and v.dialogs == []
    v.page.locator("#dc-details-body td.dc-link", has_text="k.cu:3").first.click()
    assert "not in this page" in v.page.locator("#dc-source-body").text_content()
    assert v.errors == []
