"""The module layer on real models: exact nn.Module paths between the user's line and the
operators, backward under the module that ran forward, and a Hugging Face GPT-2."""

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from deepcontext.tree import Frame, views  # noqa: E402
from helpers import PROGRAMS, children_named, line_of, loaded, python_nodes, record  # noqa: E402

PROG = "nested_modules.py"
STEPS = 3


def module(name: str, cls: str) -> Frame:
    return Frame.make("module", name, **{"class": cls})


@pytest.fixture(scope="module")
def nested(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nested")
    proc, out = record(tmp, PROG, str(STEPS), options=("--context", "python,module,op"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"done {STEPS}\n"
    return views.user_frames(loaded(out))


def only_child(tree, nid, frame):
    kids = [c for c in tree.nodes[nid].children if tree.nodes[c].frame == frame]
    assert len(kids) == 1, (frame, [tree.nodes[c].frame for c in tree.nodes[nid].children])
    return kids[0]


def py_child(tree, nid, marker):
    line = line_of(PROG, marker)
    kids = [c for c in tree.nodes[nid].children
            if tree.nodes[c].frame.kind == "python" and tree.nodes[c].frame.line == line]
    assert len(kids) == 1, marker
    return kids[0]


def test_module_paths_nest_between_the_users_lines_and_the_operators(nested):
    tree = nested
    (fwd,) = python_nodes(tree, PROG, line_of(PROG, "FORWARD"))
    root = only_child(tree, fwd, module("Net", "Net"))
    loop = py_child(tree, root, "BLOCKS")
    for i in range(2):
        block = only_child(tree, loop, module(f"blocks.{i}", "Block"))
        body = py_child(tree, block, "BLOCK")
        fc = only_child(tree, body, module(f"blocks.{i}.fc", "Linear"))
        act = only_child(tree, body, module(f"blocks.{i}.act", "GELU"))
        (linear,) = children_named(tree, fc, "op", "aten::linear")
        assert tree.exclusive(linear, "op.count") == STEPS
        (gelu,) = children_named(tree, act, "op", "aten::gelu")
        assert tree.exclusive(gelu, "op.count") == STEPS
    head = only_child(tree, py_child(tree, root, "HEAD"), module("head", "Linear"))
    (linear,) = children_named(tree, head, "op", "aten::linear")
    assert tree.exclusive(linear, "op.count") == STEPS
    # a module made during forward is named by its class below its caller
    made = only_child(tree, py_child(tree, root, "MADE"), module("<ReLU>", "ReLU"))
    assert tree.exclusive(children_named(tree, made, "op", "aten::relu")[0], "op.count") == STEPS


def test_a_module_that_raises_closes_its_scope(nested):
    tree = nested
    fails = [n.id for n in tree.nodes if n.frame == module("fails", "Fails")]
    assert len(fails) == 1
    body = py_child(tree, fails[0], "FAILS")
    (mul,) = children_named(tree, body, "op", "aten::mul")
    assert tree.exclusive(mul, "op.count") == STEPS
    # nothing after the exception nests under it: its subtree is its own body only
    assert {tree.nodes[c].frame.kind for c in tree.nodes[body].children} == {"op"}


def test_every_module_frame_is_exactly_the_models_modules(nested):
    names = {(n.frame.name, n.frame.get("class")) for n in nested.nodes if n.frame.kind == "module"}
    assert names == {("Net", "Net"), ("blocks.0", "Block"), ("blocks.1", "Block"),
                     ("blocks.0.fc", "Linear"), ("blocks.1.fc", "Linear"),
                     ("blocks.0.act", "GELU"), ("blocks.1.act", "GELU"), ("head", "Linear"),
                     ("fails", "Fails"), ("<ReLU>", "ReLU")}


def test_backward_ops_land_under_the_module_that_ran_forward(nested):
    tree = nested
    fc = [n.id for n in tree.nodes if n.frame == module("blocks.1.fc", "Linear")]
    assert len(fc) == 1
    (marker,) = children_named(tree, fc[0], "marker", "backward")
    (node,) = children_named(tree, marker, "op", "AddmmBackward0")
    assert tree.exclusive(node, "op.count") == STEPS
    everywhere = [n.id for n in tree.nodes if n.frame.name == "AddmmBackward0"]
    assert len(everywhere) == 3  # blocks.0.fc, blocks.1.fc, head: one each
    for nid in everywhere:
        path = [f.name for f in tree.path(nid) if f.kind == "module"]
        assert path[-1] in ("blocks.0.fc", "blocks.1.fc", "head")


def test_module_scopes_add_no_op_metrics(nested):
    tree = nested
    for n in tree.nodes:
        if n.frame.kind == "module":
            assert "op.count" not in n.metrics and "op.time" not in n.metrics, n.frame


def test_without_the_module_layer_there_are_no_module_frames(tmp_path):
    proc, out = record(tmp_path, PROG, "1", options=("--context", "python,op"))
    assert proc.returncode == 0, proc.stderr
    tree = loaded(out)
    assert not [n for n in tree.nodes if n.frame.kind == "module"]
    assert tree.metadata["context"] == ["python", "op"]


def test_module_and_native_layers_are_refused_together(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "--context",
                           "python,module,op,native", "--", sys.executable, "-c", "pass"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == ("deepcontext: error: the module and native layers cannot be combined "
                           "yet; drop one (e.g. --context python,op,native,gpu)\n")
    assert list(tmp_path.iterdir()) == []


def test_scope_names_built_per_call_keep_their_own_frames(tmp_path):
    # The core knows a scope's name by its address, checked against its text: a string freed
    # and another built in its place (a name made per call) is another module, not the last one.
    out = tmp_path / "names.dcprof"
    code = ("import torch, deepcontext\n"
            "from deepcontext.capture.native import core\n"
            "x = torch.ones(2)\n"
            f"with deepcontext.profile({str(out)!r}, context='python,op'):\n"
            "    for i in range(300):\n"
            "        h = core.scope_enter(f'block{i % 150}', f'class=B{i % 3}', 0)\n"
            "        x.add_(1)\n"
            "        core.op_exit(h)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    tree = loaded(out)
    adds = {}
    for n in tree.nodes:
        if n.frame.kind == "op" and n.frame.name == "aten::add_":
            scope = tree.nodes[n.parent].frame
            key = (scope.kind, scope.name, dict(scope.extra)["class"])
            adds[key] = adds.get(key, 0) + n.metrics["op.count"]
    assert adds == {("module", f"block{i}", f"B{i % 3}"): 2 for i in range(150)}


def test_hooks_are_removed_when_the_session_stops(tmp_path):
    code = ("import torch, deepcontext\n"
            "from torch.nn.modules import module as m\n"
            "before = (len(m._global_forward_pre_hooks), len(m._global_forward_hooks))\n"
            f"with deepcontext.profile({str(tmp_path / 'a.dcprof')!r}, context='python,module,op'):\n"
            "    during = (len(m._global_forward_pre_hooks), len(m._global_forward_hooks))\n"
            "after = (len(m._global_forward_pre_hooks), len(m._global_forward_hooks))\n"
            "print(before, during, after)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "(0, 0) (1, 1) (0, 0)\n"


def test_compiled_models_see_no_hook_and_no_graph_break(tmp_path):
    code = ("import torch, deepcontext\n"
            "net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())\n"
            f"with deepcontext.profile({str(tmp_path / 'c.dcprof')!r}, context='python,module,op'):\n"
            "    fn = torch.compile(net, backend='eager', fullgraph=True)\n"
            "    print(fn(torch.ones(2, 4)).shape)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "torch.Size([2, 4])\n"


# -- a real library model -----------------------------------------------------------------------

GPT2_MODULES = {
    # GPT2LMHeadModel(n_layer=2).named_modules(), less the ModuleList `transformer.h` (never
    # called) and `attn.attn_dropout` (the SDPA attention path does not call it).
    ("GPT2LMHeadModel", "GPT2LMHeadModel"), ("transformer", "GPT2Model"),
    ("transformer.wte", "Embedding"), ("transformer.wpe", "Embedding"),
    ("transformer.drop", "Dropout"), ("transformer.ln_f", "LayerNorm"), ("lm_head", "Linear"),
    *((f"transformer.h.{i}{name}", cls) for i in range(2) for name, cls in (
        ("", "GPT2Block"), (".ln_1", "LayerNorm"), (".ln_2", "LayerNorm"),
        (".attn", "GPT2Attention"), (".attn.c_attn", "Conv1D"), (".attn.c_proj", "Conv1D"),
        (".attn.resid_dropout", "Dropout"), (".mlp", "GPT2MLP"), (".mlp.c_fc", "Conv1D"),
        (".mlp.c_proj", "Conv1D"), (".mlp.act", "NewGELUActivation"),
        (".mlp.dropout", "Dropout"))),
}


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    pytest.importorskip("transformers")
    tmp = tmp_path_factory.mktemp("gpt2")
    proc, out = record(tmp, "gpt2_config.py", "2", options=("--context", "python,module,op"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "done 2\n"
    return views.user_frames(loaded(out))


def test_gpt2_shows_its_module_tree(gpt2):
    tree = gpt2
    names = {(n.frame.name, n.frame.get("class")) for n in tree.nodes if n.frame.kind == "module"}
    assert names == GPT2_MODULES
    (fwd,) = python_nodes(tree, "gpt2_config.py", line_of("gpt2_config.py", "FORWARD"))
    # the user's line, then the model, with no library frames between
    assert [tree.nodes[c].frame for c in tree.nodes[fwd].children
            if tree.nodes[c].frame.kind == "module"] == [module("GPT2LMHeadModel", "GPT2LMHeadModel")]
    act = [n.id for n in tree.nodes if n.frame.name == "transformer.h.1.mlp.act"]
    assert len(act) == 1
    assert [f.name for f in tree.path(act[0]) if f.kind == "module"] == [
        "GPT2LMHeadModel", "transformer", "transformer.h.1", "transformer.h.1.mlp",
        "transformer.h.1.mlp.act"]
    # its backward ops hang under it, not under the .backward() line
    (marker,) = children_named(tree, act[0], "marker", "backward")
    assert tree.inclusive(marker, "op.count") > 0
