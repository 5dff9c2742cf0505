"""The viewer page: inert data, a CSP that matches our own script, bounded embedded source,
findings from the analyzer when it is there."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import sys
import types

import pytest
from _export_trees import HOSTILE, hostile_tree, training_tree

import deepcontext.analysis
from deepcontext.render.html import _sources, build_page, json_for_script
from deepcontext.render.html._data import build_document
from deepcontext.tree.cct import CallingContextTree
from deepcontext.tree.frame import Frame


def data_of(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="dc-data">(.*?)</script>', html, re.DOTALL)
    return json.loads(m.group(1))


def test_hostile_names_cannot_leave_the_data_element():
    html = build_page(hostile_tree(), findings=False)
    assert html.count("<script") == 2 and html.count("</script>") == 2
    assert "<img" not in html and "onerror=alert(1)>" not in html
    data = json.loads(json.dumps(data_of(html)))
    assert HOSTILE in data["strings"]
    assert data["meta"]["command"] == [HOSTILE]


def test_json_for_script_escapes_markup_characters():
    text = json_for_script({"a": "</script><!--&"})
    assert not set("<>&") & set(text)
    assert json.loads(text) == {"a": "</script><!--&"}


def test_csp_forbids_network_and_pins_our_script():
    html = build_page(training_tree(), findings=False)
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    assert "default-src 'none'" in csp and "connect-src 'none'" in csp
    assert "unsafe-inline" not in csp and "http" not in csp
    script = re.search(r"<script>(.*)</script>", html, re.DOTALL).group(1)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"'sha256-{digest}'" in csp
    assert not re.search(r"\b(src|href)=", html)  # nothing to load: no src/href attributes


def test_document_columns_describe_the_tree():
    tree = training_tree()
    doc = build_document(tree, sources=False)
    assert len(doc["nodes"]["parent"]) == len(tree)
    for m in tree.metric_names():
        assert sum(doc["values"][m]) == tree.total(m)
    kernel = next(n for n in tree.nodes if n.frame.kind == "kernel")
    fid = doc["nodes"]["frame"][kernel.id]
    assert doc["strings"][doc["frames"]["name"][fid]] == "ampere_sgemm_128x64<float>"
    assert doc["kinds"][doc["frames"]["kind"][fid]] == "kernel"
    thread = next(n for n in tree.nodes if n.frame.kind == "thread")
    assert doc["frames"]["extra"][str(doc["nodes"]["frame"][thread.id])] == [["tid", "1"]]
    assert doc["defaultMetric"] == "gpu.time"


def test_non_finite_values_do_not_break_the_json():
    tree = training_tree()
    tree.add_metric(1, "cpu.time", float("nan"))
    tree.metadata["end_time"] = float("inf")
    html = build_page(tree, findings=False)
    data = data_of(html)
    assert data["values"]["cpu.time"][1] == 0 and data["meta"]["end_time"] is None


def _tree_with_files(*files: tuple[str, int]) -> CallingContextTree:
    tree = CallingContextTree()
    for path, line in files:
        leaf = tree.add_path([Frame.make("python", "f", path, line)])
        tree.add_metric(leaf, "cpu.time", 1.0)
    return tree


def test_sources_embed_user_files_only(tmp_path):
    user = tmp_path / "train.py"
    user.write_text("import torch\n\ndef step():\n    return 1\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("password")
    tree = _tree_with_files((str(user), 3), (str(secret), 1), (json.__file__, 10),
                            (str(tmp_path / "gone.py"), 2), ("<frozen importlib._bootstrap>", 5))
    bundle = _sources.collect_sources(tree)
    assert list(bundle.files) == [str(user)]
    assert bundle.files[str(user)]["chunks"] == [[1, ["import torch", "", "def step():",
                                                      "    return 1"]]]
    assert "No such file" in bundle.missing[str(tmp_path / "gone.py")]
    assert str(secret) not in bundle.files and json.__file__ not in bundle.files


def test_sampled_instructions_embed_their_cuda_and_triton_sources(tmp_path):
    cu, triton, text = tmp_path / "hot.cu", tmp_path / "kern.py", tmp_path / "notes.txt"
    cu.write_text("__global__ void k(float* x) {\n  x[0] = 1;\n}\n")
    triton.write_text("import triton\n")
    text.write_text("secret\n")
    tree = CallingContextTree()
    kernel = tree.add_path([Frame.make("op", "aten::add"), Frame.make("kernel", "k")])
    for i, source in enumerate((f"{cu}:2", f"{triton}:1", f"{text}:1", "no-line-number")):
        tree.child(kernel, Frame.make("instruction", f"0x{i:04x}", pc=f"0x{i:04x}", source=source))
    bundle = _sources.collect_sources(tree)
    assert sorted(bundle.files) == sorted([str(cu), str(triton)])
    assert bundle.files[str(cu)]["chunks"] == [[1, ["__global__ void k(float* x) {", "  x[0] = 1;",
                                                    "}"]]]


def test_long_files_are_windowed_and_the_total_is_capped(tmp_path, monkeypatch):
    big = tmp_path / "big.py"
    big.write_text("".join(f"x{i} = {i}\n" for i in range(1, 10001)))
    small = tmp_path / "small.py"
    small.write_text("a = 1\n" * 100)
    tree = _tree_with_files((str(big), 5000), (str(big), 5040), (str(big), 9000), (str(small), 1))
    bundle = _sources.collect_sources(tree)
    chunks = bundle.files[str(big)]["chunks"]
    w = _sources.WINDOW
    assert [(c[0], c[0] + len(c[1]) - 1) for c in chunks] == [(5000 - w, 5040 + w),
                                                              (9000 - w, 9000 + w)]
    assert chunks[0][1][0] == f"x{5000 - w} = {5000 - w}"
    capped = _sources.collect_sources(tree, total_chars=2000)
    assert list(capped.files) == [str(small)]
    assert "limit" in capped.missing[str(big)]


def test_findings_are_embedded_when_the_analyzer_exists(monkeypatch):
    class Finding:
        def to_dict(self):
            return {"rule": "r", "category": "c", "severity": "high", "title": HOSTILE,
                    "message": "m", "node": 3, "location": None, "suggestion": "s",
                    "estimated_gain": {"seconds": 0.5, "fraction": 0.1}}

    monkeypatch.setattr(deepcontext.analysis, "analyze", lambda tree: [Finding()], raising=False)
    data = data_of(build_page(training_tree()))
    assert data["findings"][0]["title"] == HOSTILE and data["findings"][0]["node"] == 3


def test_viewer_works_without_or_with_a_broken_analyzer(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "deepcontext.analysis", None)  # import fails
    data = data_of(build_page(training_tree()))
    assert data["findings"] == [] and data["findingsStatus"] == "analyzer not available"
    broken = types.ModuleType("deepcontext.analysis")

    def analyze(tree):
        raise RuntimeError("rule crashed")

    broken.analyze = analyze
    monkeypatch.setitem(sys.modules, "deepcontext.analysis", broken)
    data = data_of(build_page(training_tree()))
    assert data["findings"] == [] and data["findingsStatus"] == "analysis failed"
    assert "rule crashed" in capsys.readouterr().err


@pytest.mark.parametrize("n", [0, 1])
def test_empty_and_tiny_trees(n):
    tree = CallingContextTree()
    if n:
        tree.add_metric(tree.add_path([Frame.make("op", "x")]), "op.count", 1)
    data = data_of(build_page(tree, findings=False))
    assert len(data["nodes"]["parent"]) == n + 1
