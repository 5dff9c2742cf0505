"""A real notebook, executed headlessly by a real kernel (nbclient + ipykernel): ``%load_ext
deepcontext``, the ``%%deepcontext`` cell magic and ``deepcontext.profile()`` put the flame graph
and the findings under the cell."""

import json
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("torch")

from deepcontext.tree import load, views  # noqa: E402

MODEL = """import torch
net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
for _ in range(20):
    net(torch.randn(8, 16)).sum().backward()"""

CELLS = [
    "%load_ext deepcontext\nimport torch  # imported before, so the profiles hold the model only",
    # no CPU sampler: the report's metric is then op.time, exact, whatever the machine's load
    "%%deepcontext -o magic.dcprof --context python,module,op --sample-interval 0\n" + MODEL,
    "import deepcontext\nwith deepcontext.profile('api.dcprof', context='python,module,op', "
    "sample_interval=0):\n"
    "    for _ in range(20):\n        net(torch.randn(8, 16)).sum().backward()",
    "%%deepcontext --bogus\npass",
]


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nb")
    # A kernel spec for this interpreter, so the kernel imports the deepcontext under test.
    spec = tmp / "jupyter" / "kernels" / "dc-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "deepcontext test", "language": "python"}))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    mp = pytest.MonkeyPatch()
    mp.setenv("JUPYTER_PATH", str(tmp / "jupyter"))
    try:
        client = nbclient.NotebookClient(nb, kernel_name="dc-test", timeout=600,
                                         resources={"metadata": {"path": str(tmp)}})
        client.execute()
    finally:
        mp.undo()
    return tmp, nb


def displays(cell):
    return [o for o in cell.outputs if o.output_type == "display_data"]


def errors(cell):
    return [o for o in cell.outputs if o.output_type == "error"]


@pytest.mark.parametrize("index, name", [(1, "magic.dcprof"), (2, "api.dcprof")])
def test_flame_graph_and_findings_render_under_the_cell(executed, index, name):
    tmp, nb = executed
    cell = nb.cells[index]
    assert errors(cell) == []
    (shown,) = displays(cell)
    page = shown.data["text/html"]
    assert page.startswith(f'<div class="deepcontext"><div>DeepContext profile: <code>{name}</code>')
    assert '<iframe class="deepcontext-flame" sandbox="allow-scripts"' in page
    assert "srcdoc=\"&lt;!DOCTYPE html&gt;" in page
    assert f'<pre class="deepcontext-findings">{name}: ' in page
    plain = shown.data["text/plain"].splitlines()
    assert plain[0] == f"DeepContext profile: {name}"
    assert plain[1].startswith("top-down  total ")
    assert any("[module] Sequential" in line for line in plain)


@pytest.mark.parametrize("index, name", [(1, "magic.dcprof"), (2, "api.dcprof")])
def test_the_cells_lines_and_modules_are_in_the_profile(executed, index, name):
    tmp, nb = executed
    tree = views.user_frames(load(tmp / name))
    # line 4 of both cells (the magic's line is not part of its cell) is the net(...) call
    cells = [n.id for n in tree.nodes if n.frame.kind == "python" and n.frame.line == 4
             and n.frame.file.endswith(".py") and "ipykernel" in n.frame.file]
    assert len(cells) == 1, [n.frame for n in tree.nodes if n.frame.kind == "python"]
    kids = {tree.nodes[c].frame.name for c in tree.nodes[cells[0]].children
            if tree.nodes[c].frame.kind == "module"}
    assert kids == {"Sequential"}
    modules = {(n.frame.name, n.frame.get("class")) for n in tree.nodes if n.frame.kind == "module"}
    assert modules == {("Sequential", "Sequential"), ("0", "Linear"), ("1", "ReLU")}
    (linear,) = [n.id for n in tree.nodes if n.frame.name == "0"]
    ops = {tree.nodes[c].frame.name: tree.exclusive(c, "op.count")
           for c in tree.nodes[linear].children if tree.nodes[c].frame.kind == "op"}
    assert ops == {"aten::linear": 20}


def test_a_bad_magic_option_is_one_line_and_runs_nothing(executed):
    tmp, nb = executed
    cell = nb.cells[3]
    assert errors(cell) == [] and displays(cell) == []
    (stream,) = cell.outputs
    assert stream.name == "stderr"
    assert stream.text == ("deepcontext: error: %%deepcontext: unknown option '--bogus' "
                           "(options: -o FILE, -f, --context LAYERS, --sample-interval S, "
                           "--no-findings)\n")
    assert sorted(p.name for p in tmp.glob("*.dcprof")) == ["api.dcprof", "magic.dcprof"]
