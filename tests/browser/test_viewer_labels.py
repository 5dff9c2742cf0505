"""Labels a person can read in real Chromium: module frames with their class, boxes too narrow
for a full label show its innermost part (never ``Block.__init__.<lo…``), and the source pane
wraps long lines instead of clipping them; the Jupyter display draws the viewer in its iframe."""

from __future__ import annotations

from test_viewer import click_node, next_frame

from deepcontext.tree.cct import CallingContextTree
from deepcontext.tree.frame import Frame

LISTCOMP = Frame.make("python", "Net.__init__.<locals>.<listcomp>", "/app/model.py", 12)
MLP = Frame.make("module", "transformer.h.3.mlp.act", **{"class": "NewGELUActivation"})


def labelled_tree() -> CallingContextTree:
    tree = CallingContextTree()
    tree.add_metric(tree.add_path([Frame.make("python", "main", "/app/train.py", 3), LISTCOMP,
                                   Frame.make("op", "aten::empty")]), "cpu.time", 1.0)
    tree.add_metric(tree.add_path([Frame.make("python", "main", "/app/train.py", 4), MLP,
                                   Frame.make("op", "aten::gelu")]), "cpu.time", 1.0)
    return tree


def test_module_frames_are_labelled_with_their_class(open_viewer):
    v = open_viewer(labelled_tree())
    node = v.api("findNode('transformer.h.3.mlp.act')")
    assert v.api(f"label({node})") == "transformer.h.3.mlp.act (NewGELUActivation)"
    assert v.errors == []


def test_narrow_boxes_show_the_innermost_part_of_a_name(open_viewer):
    v = open_viewer(labelled_tree())
    comp = v.api("findNode('Net.__init__.<locals>.<listcomp>')")
    act = v.api("findNode('transformer.h.3.mlp.act')")
    assert v.api(f"fitLabel({comp}, 200)") == "Net.__init__.<locals>.<listcomp> (model.py:12)"
    assert v.api(f"fitLabel({comp}, 34)") == "__init__.<listcomp> (model.py:12)"
    assert v.api(f"fitLabel({comp}, 20)") == "__init__.<listcomp>"
    assert v.api(f"fitLabel({comp}, 8)") == "\u2026stcomp>"  # 8 characters
    assert v.api(f"fitLabel({act}, 30)") == "transformer.h.3.mlp.act"
    assert v.api(f"fitLabel({act}, 12)") == "mlp.act"
    # the breadcrumb of a zoomed frame carries the full label as its title
    click_node(v, comp)
    crumb = v.page.locator("#dc-crumbs button").last
    assert crumb.get_attribute("title") == "Net.__init__.<locals>.<listcomp> (model.py:12)"
    assert "\u2026" not in crumb.text_content()


def test_long_source_lines_wrap_inside_the_pane(open_viewer, tmp_path):
    src = tmp_path / "model.py"
    long_line = "    y = " + " + ".join(f"weights_{i} * inputs_{i}" for i in range(30))
    src.write_text(f"def step():\n{long_line}\n    return y\n")
    tree = CallingContextTree()
    tree.add_metric(tree.add_path([Frame.make("python", "step", str(src), 2)]), "cpu.time", 1.0)
    v = open_viewer(tree, width=1000)
    click_node(v, v.api("findNode('step')"))
    next_frame(v)
    code = v.page.locator("#dc-source-body .dc-current .dc-code")
    assert code.text_content() == long_line
    pane = v.page.locator("#dc-side").bounding_box()
    box = code.bounding_box()
    assert box["x"] + box["width"] <= pane["x"] + pane["width"] + 1  # inside the pane
    assert box["height"] > 3 * 16  # on several rows, all of it visible
    assert v.page.evaluate("() => document.querySelector('#dc-source-body').scrollWidth "
                           "<= document.querySelector('#dc-source-body').clientWidth")


def test_the_notebook_display_draws_the_viewer_in_its_iframe(browser, tmp_path):
    from deepcontext.jupyter import ProfileDisplay
    from deepcontext.tree.profile_file import save

    save(labelled_tree(), tmp_path / "nb.dcprof")
    bundle = ProfileDisplay(tmp_path / "nb.dcprof", findings=True)._repr_mimebundle_()
    out = tmp_path / "cell.html"
    out.write_text(f"<!DOCTYPE html><html><body>{bundle['text/html']}</body></html>")
    ctx = browser.new_context(viewport={"width": 1200, "height": 900})
    try:
        page = ctx.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(out.as_uri())
        frame = page.frame_locator("iframe.deepcontext-flame")
        frame.locator("#dc-canvas").wait_for(timeout=120_000)  # a loaded 2-core CI machine
        inner = page.frames[1]
        inner.wait_for_function("() => window.deepcontextViewer !== undefined", timeout=120_000)
        assert inner.evaluate("() => window.deepcontextViewer.nodeCount()") == len(labelled_tree())
        # every box drawn, once the iframe has its width (layout can trail the script's start)
        inner.wait_for_function(f"() => window.deepcontextViewer.drawn().length === "
                                f"{len(labelled_tree())}", timeout=120_000)
        assert page.locator("pre.deepcontext-findings").text_content().startswith(
            f"{tmp_path / 'nb.dcprof'}: ")
        assert errors == []
    finally:
        ctx.close()
