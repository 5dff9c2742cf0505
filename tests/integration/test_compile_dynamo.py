"""torch.compile's Dynamo level on the CPU (backend="eager": real tracing, guards and graph
breaks without Inductor's build time): recompilations with their reasons, graph breaks with
their location, and the analyzer's compile rules on them."""

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from deepcontext.tree import views  # noqa: E402
from helpers import PROGRAMS, line_of, loaded, python_nodes, record, subtree_ids  # noqa: E402

pytestmark = pytest.mark.timeout(1200)

PROG = "compile_churn.py"
LENGTHS = 6
STEPS = 100


@pytest.fixture(scope="module")
def churn(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("churn")
    proc, path = record(tmp, PROG, str(LENGTHS), str(STEPS), timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"done {LENGTHS} {STEPS}\n"
    analyzed = subprocess.run([sys.executable, "-m", "deepcontext", "analyze", str(path),
                               "--format", "json"], capture_output=True, text=True)
    assert analyzed.returncode == 0, analyzed.stderr
    return loaded(path), json.loads(analyzed.stdout)["findings"]


def _compiles_under(tree, line):
    (node,) = python_nodes(tree, PROG, line)
    return sum(tree.exclusive(n, "compile.count") for n in subtree_ids(tree, node)
               if tree.nodes[n].frame.kind == "marker" and tree.nodes[n].frame.name == "compile")


def test_every_compilation_is_counted_under_its_line(churn):
    tree = views.user_frames(churn[0])
    assert _compiles_under(tree, line_of(PROG, "CHURN")) == LENGTHS
    # the forward up to the break, then the resume function after it
    assert _compiles_under(tree, line_of(PROG, "BROKEN_CALL")) == 2


def test_recompile_reasons_come_from_dynamo_guards(churn):
    compiles = churn[0].metadata["torch_compile"]["compiles"]
    scale = [c for c in compiles if c.get("co_name") == "scale"]
    assert len(scale) == LENGTHS
    assert "recompile_reason" not in scale[0]
    for n, c in enumerate(scale[1:], 1):
        assert c["recompile_reason"].endswith(f"size mismatch at index 0. expected {n}, actual {n + 1}")
        assert c["at"]["line"] == line_of(PROG, "CHURN")


def test_graph_break_has_its_line_and_reason(churn):
    (gb,) = churn[0].metadata["torch_compile"]["graph_breaks"]
    assert gb["file"] == str(PROGRAMS / PROG)
    assert gb["line"] == line_of(PROG, "GRAPH_BREAK")
    assert gb["function"] == "forward"
    assert "print" in gb["reason"]


def test_analyzer_reports_churn_and_the_break(churn):
    findings = churn[1]
    (rc,) = [f for f in findings if f["rule"] == "recompile-churn"]
    assert rc["location"]["line"] == line_of(PROG, "CHURN")
    assert rc["evidence"]["compilations"] == LENGTHS
    assert rc["evidence"]["recompilations"] == LENGTHS - 1
    assert rc["evidence"]["calls"] == LENGTHS
    (gb,) = [f for f in findings if f["rule"] == "graph-break"]
    assert gb["location"]["line"] == line_of(PROG, "GRAPH_BREAK")
    assert gb["severity"] == "warning"
    assert not [f for f in findings if f["rule"] == "cpu-latency"]
    # torch.compile's compilations are not JAX's (jax-recompile read them as "<jax>" before)
    assert not [f for f in findings if f["rule"].startswith("jax-")]
