"""The viewer in real headless Chromium: first paint, zoom, search, metric switch, bottom-up,
findings, source, hostile names, no network, and 100,000 nodes."""

from __future__ import annotations

import io
import json

import pytest
from _trees import HOSTILE, big_tree, hostile_tree, training_tree

from deepcontext.render.html import render_page
from deepcontext.render.html._data import build_document
from deepcontext.tree.cct import CallingContextTree
from deepcontext.tree.frame import Frame

ROW = 18
KIND_RGB = {"python": (0x66, 0xBB, 0x6A), "op": (0x42, 0xA5, 0xF5), "kernel": (0xFF, 0xA7, 0x26),
            "memcpy": (0xEF, 0x53, 0x50), "thread": (0xB0, 0xBE, 0xC5)}
MATCH_RGB = (0xE0, 0x40, 0xFB)


def canvas_box(opened) -> dict:
    return opened.page.locator("#dc-canvas").bounding_box()


def next_frame(opened) -> None:
    opened.page.evaluate("() => new Promise(r => requestAnimationFrame(() => r()))")


def node_box(opened, node_id: int) -> list:
    next_frame(opened)
    for box in opened.api("drawn()"):
        if box[0] == node_id:
            return box
    raise AssertionError(f"node {node_id} is not drawn")


def click_node(opened, node_id: int) -> None:
    _, x, w, row = node_box(opened, node_id)
    r = canvas_box(opened)
    opened.page.mouse.click(r["x"] + x + w / 2, r["y"] + row * ROW + ROW / 2)
    next_frame(opened)


def widths(opened) -> dict[str, float]:
    next_frame(opened)
    return {opened.api(f"label({b[0]})"): b[2] for b in opened.api("drawn()")}


def colour_counts(png: bytes, colours: dict) -> dict:
    image = pytest.importorskip("PIL.Image").open(io.BytesIO(png)).convert("RGB")
    counts = dict.fromkeys(colours, 0)
    for n, pixel in image.getcolors(maxcolors=1 << 24):
        for name, rgb in colours.items():
            if all(abs(p - q) <= 3 for p, q in zip(pixel, rgb)):
                counts[name] += n
    return counts


def test_first_paint_draws_the_tree_in_kind_colours(open_viewer):
    tree = training_tree()
    v = open_viewer(tree)
    assert v.errors == []
    assert v.api("nodeCount()") == len(tree)
    drawn = v.api("drawn()")
    assert len(drawn) == 8  # gpu.time: root, thread, 2 python, 2 ops, kernel, copy
    full = canvas_box(v)["width"]
    assert drawn[0][:3] == [0, 0, full]
    counts = colour_counts(v.page.screenshot(), KIND_RGB)
    assert all(n > 500 for n in counts.values()), counts
    assert v.page.locator("#dc-total").text_content() == "total gpu.time = 1s"


def test_the_canvas_follows_its_pane_when_the_layout_changes_without_a_window_resize(open_viewer):
    # A notebook iframe can get its width after the viewer starts, and a wrapping header resizes
    # the pane; neither fires a resize event on the window.
    v = open_viewer(training_tree())
    full = canvas_box(v)["width"]
    v.page.evaluate("() => { document.getElementById('dc-side').style.display = 'none'; }")
    v.page.wait_for_function(f"() => window.deepcontextViewer.drawn()[0][2] > {full + 100}")
    wide = canvas_box(v)["width"]
    assert wide == v.page.evaluate("() => document.getElementById('dc-flame').clientWidth")
    assert v.api("drawn()")[0][:3] == [0, 0, wide]
    assert len(v.api("drawn()")) == 8
    v.page.evaluate("() => { document.getElementById('dc-header').style.height = '300px'; }")
    v.page.wait_for_function("() => document.getElementById('dc-canvas').height === "
                             "Math.round(document.getElementById('dc-flame').clientHeight "
                             "* (window.devicePixelRatio || 1))")
    assert v.errors == []


def test_click_zooms_and_breadcrumb_goes_back(open_viewer):
    v = open_viewer(training_tree())
    step = v.api("findNode('train_step')")
    before = node_box(v, step)
    click_node(v, step)
    state = v.api("state()")
    assert state["zoom"] == step and state["selected"] == step
    after = v.api("drawn()")
    assert after[0][0] == step and after[0][2] == canvas_box(v)["width"] > before[2] * 0.99
    crumbs = v.page.locator("#dc-crumbs button").all_text_contents()
    assert crumbs == ["all", "MainThread", "<module> (train.py:30)", "train_step (train.py:12)"]
    assert "train_step" in v.page.locator("#dc-details-body").text_content()
    v.page.locator("#dc-crumbs button", has_text="MainThread").click()
    assert v.api("state()")["zoom"] == v.api("findNode('MainThread')")
    v.page.locator("#dc-crumbs button", has_text="all").click()
    assert v.api("state()")["zoom"] == 0


def test_search_highlights_matches_and_sums_their_share(open_viewer):
    v = open_viewer(training_tree())
    result = v.page.locator("#dc-search-result")
    v.page.fill("#dc-search", "aten")
    v.page.wait_for_function("() => document.getElementById('dc-search-result').textContent")
    assert result.text_content() == "2 matches \u00b7 100.0% of gpu.time"
    next_frame(v)
    counts = colour_counts(v.page.screenshot(), {"match": MATCH_RGB})
    assert counts["match"] > 1000
    v.page.fill("#dc-search", "/^aten::mm$/")
    v.page.wait_for_function("() => document.getElementById('dc-search-result').textContent.startsWith('1 ')")
    assert result.text_content() == "1 match \u00b7 75.0% of gpu.time"
    v.page.fill("#dc-search", "/^read/")  # python read() contains native read(): counted once
    v.page.select_option("#dc-metric", "cpu.time")
    v.page.wait_for_function("() => document.getElementById('dc-search-result').textContent.startsWith('2 ')")
    assert result.text_content() == "2 matches \u00b7 50.0% of cpu.time"
    v.page.fill("#dc-search", "/[/")
    v.page.wait_for_function("() => document.getElementById('dc-search-result').textContent.includes('invalid')")


def test_metric_switch_changes_widths(open_viewer):
    v = open_viewer(training_tree())
    full = canvas_box(v)["width"]
    gpu = widths(v)
    assert gpu["MainThread"] == full and "Loader" not in gpu
    assert gpu["aten::mm"] == pytest.approx(0.75 * full)
    v.page.select_option("#dc-metric", "cpu.time")
    next_frame(v)
    cpu = widths(v)
    assert cpu["MainThread"] == pytest.approx(2.0 / 4.0 * full)
    assert cpu["Loader"] == pytest.approx(2.0 / 4.0 * full)
    assert "aten::mm" not in cpu
    assert v.page.locator("#dc-total").text_content() == "total cpu.time = 4s"


def test_bottom_up_puts_hot_leaves_first(open_viewer):
    v = open_viewer(training_tree())
    v.page.select_option("#dc-metric", "cpu.time")
    v.page.click("#dc-mode-bottomup")
    next_frame(v)
    rows: dict[int, list[tuple[str, float]]] = {}
    for node, _, w, row in v.api("drawn()"):
        rows.setdefault(row, []).append((v.api(f"label({node})"), round(w / canvas_box(v)["width"], 3)))
    assert sorted(rows[1]) == [("cudaDeviceSynchronize", 0.125), ("read [libc.so.6]", 0.5),
                               ("train_step (train.py:12)", 0.375)]
    assert ("read (data.py:7)", 0.5) in rows[2]  # the caller of libc's read
    assert v.api("state()")["mode"] == "bottomup"


def test_findings_panel_jumps_to_the_node(open_viewer, tmp_path):
    tree = training_tree()
    kernel = next(n.id for n in tree.nodes if n.frame.kind == "kernel")
    finding = {"rule": "gemm-fp32", "category": "precision", "severity": "high",
               "title": "FP32 GEMM " + HOSTILE, "message": "use bf16", "node": kernel,
               "location": {"file": "/w/train.py", "line": 12, "function": "train_step"},
               "suggestion": "torch.autocast", "estimated_gain": {"seconds": 0.4, "fraction": 0.4}}
    html = tmp_path / "f.html"
    html.write_text(render_page(build_document(tree, findings=[finding], sources=False)))
    v = open_viewer.load_page(html.as_uri())
    item = v.page.locator("#dc-findings-list li")
    assert item.count() == 1
    assert HOSTILE in item.text_content() and "gain up to 400ms (40.0%)" in item.text_content()
    item.click()
    next_frame(v)
    state = v.api("state()")
    assert state["selected"] == kernel and state["zoom"] == tree.nodes[kernel].parent
    assert v.dialogs == [] and v.page.locator("img").count() == 0


def test_source_pane_shows_lines_with_metrics(open_viewer, tmp_path):
    src = tmp_path / "model.py"
    src.write_text("import torch\n\n\ndef step(x):\n    y = x @ x\n    return y.sum()\n")
    tree = CallingContextTree()
    for line, value in ((5, 3.0), (6, 1.0)):
        leaf = tree.add_path([Frame.make("python", "step", str(src), line),
                              Frame.make("op", "aten::mm" if line == 5 else "aten::sum")])
        tree.add_metric(leaf, "cpu.time", value)
    gone = tree.add_path([Frame.make("python", "lost", str(tmp_path / "deleted.py"), 1)])
    tree.add_metric(gone, "cpu.time", 1.0)
    v = open_viewer(tree)
    click_node(v, v.api("findNode('step')"))
    rows = v.page.locator("#dc-source-body .dc-line")
    assert rows.count() == 6
    current = v.page.locator("#dc-source-body .dc-current")
    assert current.locator(".dc-code").text_content() == "    y = x @ x"
    assert current.locator(".dc-val").text_content() == "3s"
    assert rows.nth(5).locator(".dc-val").text_content() == "1s"
    v.page.locator("#dc-crumbs button", has_text="all").click()
    click_node(v, v.api("findNode('lost')"))
    assert "not in this page" in v.page.locator("#dc-source-body").text_content()
    assert v.errors == []


def test_hostile_names_stay_inert_text(open_viewer):
    v = open_viewer(hostile_tree())
    page = v.page
    assert v.errors == [] and v.dialogs == []
    assert page.locator("img, iframe, object, embed").count() == 0
    assert page.locator("script").count() == 2
    assert "<img src=x onerror=alert(1)>" in page.locator("#dc-title").text_content()
    assert "<img src=x onerror=alert(1)>" in page.locator("#dc-status").text_content()
    py = v.api("findNode(" + json.dumps(HOSTILE) + ")")
    click_node(v, py)
    r, box = canvas_box(v), node_box(v, py)
    page.mouse.move(r["x"] + box[1] + 5, r["y"] + ROW * (box[3] + 1) + 5)  # hover the child
    assert page.locator("#dc-tooltip").is_visible()
    assert "</script><script>alert(2)</script>" in page.locator("#dc-tooltip").text_content()
    assert "note=" + HOSTILE.split("\x1b")[0] in page.locator("#dc-tooltip").text_content()
    assert "<img src=x" in page.locator("#dc-details-body").text_content()
    # a long crumb shows the innermost part of its name; its title is the whole name
    assert "<img src=x" in page.locator("#dc-crumbs button").last.get_attribute("title")
    page.fill("#dc-search", "onerror")
    page.wait_for_function("() => document.getElementById('dc-search-result').textContent")
    assert page.locator("#dc-search-result").text_content().startswith("3 matches")
    page.wait_for_timeout(200)
    assert v.dialogs == [] and page.locator("img, iframe").count() == 0 and v.errors == []


def test_no_network_request_and_csp_blocks_any(open_viewer):
    v = open_viewer(training_tree())
    assert v.requests == [v.url]
    blocked = v.page.evaluate("""() => new Promise(resolve => {
        const seen = [];
        document.addEventListener('securitypolicyviolation', e => seen.push(e.violatedDirective));
        const img = new Image(); img.src = 'http://127.0.0.1:9/x.png';
        document.body.appendChild(img);
        fetch('http://127.0.0.1:9/').then(() => resolve(['fetched']), () =>
            setTimeout(() => resolve(seen), 100));
    })""")
    assert "connect-src" in blocked and "img-src" in blocked
    assert all(u == v.url for u in v.requests if not u.startswith("http://127.0.0.1:9"))


def test_served_page_works_over_loopback(open_viewer, tmp_path):
    from deepcontext.render.html import build_page, page_csp
    from deepcontext.render.html.server import PageServer

    server = PageServer(build_page(training_tree(), findings=False).encode(), "run.html",
                        page_csp())
    server.serve_in_thread()
    try:
        v = open_viewer.load_page(server.url)
        assert v.errors == [] and v.requests == [server.url]
        assert len(v.api("drawn()")) == 8
    finally:
        server.shutdown()
        server.server_close()


def test_stays_fluid_with_100k_nodes(open_viewer):
    tree = big_tree()
    assert len(tree) >= 100_000
    v = open_viewer(tree, "big")
    assert v.errors == [] and v.api("nodeCount()") == len(tree)
    redraw = max(v.api("drawNow()") for _ in range(5))
    assert redraw < 100, f"redraw took {redraw:.0f} ms"
    assert 0 < len(v.api("drawn()")) < 20_000  # sub-pixel nodes are skipped
    t_switch = v.page.evaluate("""() => { const t = performance.now();
        deepcontextViewer.setMetric('cpu.time'); deepcontextViewer.drawNow();
        deepcontextViewer.setMode('bottomup'); deepcontextViewer.drawNow();
        return performance.now() - t; }""")
    assert t_switch < 3000, f"metric switch + bottom-up took {t_switch:.0f} ms"
    v.page.fill("#dc-search", "kernel_3_")
    v.page.wait_for_function("() => document.getElementById('dc-search-result').textContent")
    assert v.page.locator("#dc-search-result").text_content().startswith("2,000 matches") or \
        v.page.locator("#dc-search-result").text_content().split(" ")[0].isdigit()
    click_node(v, v.api("drawn()")[1][0])
    assert v.api("state()")["zoom"] != 0 and v.errors == []


def test_names_that_are_javascript_object_keys(open_viewer):
    tree = CallingContextTree({"command": ["__proto__"]})
    leaf = tree.add_path([Frame.make("python", "constructor", "__proto__", 1),
                          Frame.make("python", "toString", "constructor", 2)])
    tree.add_metric(leaf, "__proto__", 2.0)
    tree.add_metric(leaf, "constructor", 1.0)
    v = open_viewer(tree, "proto")
    assert v.errors == []
    assert v.page.locator("#dc-metric option").all_text_contents() == ["__proto__ (2)",
                                                                      "constructor (1)"]
    click_node(v, v.api("findNode('toString')"))
    assert "not in this page" in v.page.locator("#dc-source-body").text_content()
    v.page.select_option("#dc-metric", "constructor")
    v.page.click("#dc-mode-bottomup")
    next_frame(v)
    assert len(v.api("drawn()")) == 3 and v.errors == []


def _by_path(parent, kind, name, values) -> dict[tuple, float]:
    paths: list[tuple] = [()]
    for i in range(1, len(parent)):
        paths.append(paths[parent[i]] + ((kind[i], name[i]),))
    out: dict[tuple, float] = {}
    for i in range(1, len(parent)):
        out[paths[i]] = out.get(paths[i], 0.0) + values[i]
    return out


@pytest.mark.parametrize("metric", ["cpu.time", "gpu.time"])
def test_bottom_up_matches_the_python_inverted_view(open_viewer, metric):
    from deepcontext.tree import views

    tree = training_tree()
    rec = tree.add_path([Frame.make("python", "rec", "/w/r.py", 1),
                         Frame.make("python", "rec", "/w/r.py", 2)])
    for depth in range(5):  # recursion: the same frames again and again
        rec = tree.add_path([Frame.make("python", "rec", "/w/r.py", 1),
                             Frame.make("op", "aten::mm")], rec)
        tree.add_metric(rec, metric, 0.1 * (depth + 1))
    v = open_viewer(tree)
    v.page.select_option("#dc-metric", metric)
    v.page.click("#dc-mode-bottomup")
    snap = v.api("snapshot()")
    inv = views.inverted(tree)
    inc = inv.inclusive_all(metric)
    expected = _by_path([n.parent for n in inv.nodes], [n.frame.kind for n in inv.nodes],
                        [n.frame.name for n in inv.nodes], inc)
    got = _by_path(snap["parent"], snap["kind"], snap["name"], snap["inclusive"])
    assert got.keys() == expected.keys()
    assert all(got[k] == pytest.approx(expected[k]) for k in expected)
    assert snap["inclusive"][0] == pytest.approx(tree.total(metric))
