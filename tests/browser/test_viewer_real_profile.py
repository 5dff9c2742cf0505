"""The viewer on a profile recorded from a real PyTorch program."""

from __future__ import annotations

import pytest

from deepcontext.cli.main import main as cli_main
from deepcontext.tree.profile_file import load

pytestmark = [pytest.mark.torch, pytest.mark.slow]


def test_real_torch_profile_renders_and_searches(open_viewer, torch_profile, tmp_path):
    tree = load(torch_profile)
    html = tmp_path / "real.html"
    assert cli_main(["view", str(torch_profile), "-o", str(html), "--no-browser"]) == 0
    v = open_viewer.load_page(html.as_uri())
    assert v.errors == [] and v.dialogs == [] and v.requests == [html.as_uri()]
    assert v.api("nodeCount()") == len(tree)
    try:
        from deepcontext.analysis import analyze
    except ImportError:
        pass
    else:  # the analyzer's findings are in the panel, one entry each
        assert v.page.locator("#dc-findings-list li").count() == len(analyze(tree))
    v.page.select_option("#dc-metric", "op.time")
    v.page.evaluate("() => new Promise(r => requestAnimationFrame(() => r()))")
    labels = [v.api(f"label({b[0]})") for b in v.api("drawn()")]
    assert any(label.startswith("aten::") for label in labels)
    assert any(label.startswith("layer (prog.py:") for label in labels)
    v.page.fill("#dc-search", "aten::matmul")
    v.page.wait_for_function("() => document.getElementById('dc-search-result').textContent")
    text = v.page.locator("#dc-search-result").text_content()
    assert not text.startswith("0 ") and text.endswith("of op.time")
    # the program's own file is embedded: selecting its line shows the source
    layer = next(n.id for n in tree.nodes if n.frame.kind == "python" and n.frame.name == "layer")
    v.api(f"jumpTo({layer})")
    assert "return torch.relu(x @ w)" in v.page.locator("#dc-source-body .dc-current").text_content()
