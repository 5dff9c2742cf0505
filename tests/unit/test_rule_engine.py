"""The analyzer engine and registry: ranking, merging, filtering, custom rules, entry points."""

import warnings

import pytest

from deepcontext.analysis import (
    Finding,
    Rule,
    Threshold,
    analyze,
    builtin_rules,
    is_user_file,
    load_rules_file,
    registry,
)
from deepcontext.analysis.finding import CATEGORIES
from deepcontext.analysis.testing import build, op, user
from deepcontext.errors import DeepContextError

KEYS = {"rule", "category", "severity", "title", "message", "node", "location", "path",
        "evidence", "suggestion", "estimated_gain", "origin"}


class Fixed(Rule):
    """Emits one finding per (node, severity, gain) given at construction."""

    id = "fixed"
    category = "hotspot"
    description = "test rule"

    def __init__(self, items):
        super().__init__()
        self.items = items

    def check(self, ctx):
        for node, severity, gain in self.items:
            yield ctx.finding(self, node, severity=severity, title="t", message="m",
                              evidence={"x": 1}, suggestion="s", gain_seconds=gain, method="m")


def small_tree():
    return build([([user(10), op("aten::mul")], {"op.time": 0.5}),
                  ([user(11), op("aten::add")], {"op.time": 0.3}),
                  ([user(20), user(11)], {"op.time": 0.2})])


def test_every_builtin_rule_has_id_category_description_and_justified_thresholds():
    rules = builtin_rules()
    assert len({r.id for r in rules}) == len(rules) == 24
    assert {r.category for r in rules} <= set(CATEGORIES)
    for r in rules:
        assert r.description and r.thresholds
        assert all(isinstance(t, Threshold) and t.why for t in r.thresholds.values())


def test_findings_sorted_by_severity_then_gain_and_filtered():
    tree = small_tree()
    n10, n11, n20 = 1, 3, 5
    rule = Fixed([(n10, "note", 0.5), (n11, "warning", 0.1), (n20, "warning", 0.3)])
    got = analyze(tree, rules=[rule])
    assert [(f.severity, f.estimated_gain.seconds) for f in got] == [
        ("warning", 0.3), ("warning", 0.1), ("note", 0.5)]
    assert [f.severity for f in analyze(tree, rules=[rule], min_severity="warning")] == [
        "warning", "warning"]
    assert analyze(tree, rules=[rule], min_severity="error") == []


def test_same_rule_same_user_line_is_merged_with_gains_added():
    tree = small_tree()
    line11 = [n.id for n in tree.nodes if n.frame.line == 11]
    assert len(line11) == 2  # reached from main and from line 20
    (f,) = analyze(tree, rules=[Fixed([(line11[0], "warning", 0.1), (line11[1], "note", 0.2)])])
    assert f.severity == "warning" and f.estimated_gain.seconds == pytest.approx(0.3)
    assert f.evidence["merged_contexts"] == 2 and f.merged_nodes == [line11[1]]


def test_finding_to_dict_has_exactly_the_documented_keys():
    (f,) = analyze(small_tree(), rules=[Fixed([(1, "note", 0.5)])])
    d = f.to_dict()
    assert set(d) == KEYS
    assert d["location"] == {"file": "/home/user/project/train.py", "line": 10, "function": "main"}
    assert d["path"] == ["main (train.py:10)"]
    assert set(d["estimated_gain"]) == {"seconds", "fraction", "method"}
    assert d["estimated_gain"]["fraction"] == 0.5


def test_invalid_severity_and_multiline_title_are_refused():
    with pytest.raises(ValueError):
        Finding("r", "hotspot", "fatal", "t", "m", 1, None, [], {}, "s", None)
    with pytest.raises(ValueError):
        Finding("r", "hotspot", "note", "a\nb", "m", 1, None, [], {}, "s", None)


def test_a_broken_rule_warns_and_the_others_still_run():
    class Broken(Rule):
        id, category, description = "broken", "hotspot", "raises"

        def check(self, ctx):
            raise RuntimeError("boom")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = analyze(small_tree(), rules=[Broken(), Fixed([(1, "note", 0.1)])])
    assert [f.rule for f in got] == ["fixed"]
    assert "rule broken failed: RuntimeError: boom" in str(caught[0].message)


def test_threshold_overrides_and_unknown_names():
    from deepcontext.analysis.rules.layout import LayoutChurnRule
    assert LayoutChurnRule(min_copies=5).t("min_copies") == 5
    with pytest.raises(ValueError):
        LayoutChurnRule(nope=1)


RULE_FILE = '''
from deepcontext.analysis import Rule, Threshold

class TooManyOps(Rule):
    id = "too-many-ops"
    category = "hotspot"
    description = "a line issuing more than N operator calls"
    thresholds = {"max_calls": Threshold(100, "example")}

    def check(self, ctx):
        for owner, sites in ctx.sites_by_owner.items():
            calls = sum(ctx.count(s.node) for s in sites)
            if owner > 0 and calls > self.t("max_calls"):
                yield ctx.finding(self, owner, severity="warning", title="many ops",
                                  message=f"{calls:.0f} calls", evidence={"calls": calls},
                                  suggestion="batch them", gain_seconds=0.0, method="none")
'''


def test_rules_file_with_subclasses(tmp_path):
    path = tmp_path / "my_rules.py"
    path.write_text(RULE_FILE)
    (rule,) = load_rules_file(path)
    assert rule.id == "too-many-ops"
    tree = build([([user(10), op("aten::mul")], {"op.count": 101})])
    (f,) = analyze(tree, rules=[rule])
    assert f.rule == "too-many-ops" and f.location.line == 10


def test_rules_file_with_a_rules_list_and_bad_files(tmp_path):
    listed = tmp_path / "listed.py"
    listed.write_text(RULE_FILE + "\nRULES = [TooManyOps(max_calls=5)]\n")
    (rule,) = load_rules_file(listed)
    assert rule.t("max_calls") == 5
    broken = tmp_path / "broken.py"
    broken.write_text("import nonexistent_module_xyz\n")
    with pytest.raises(DeepContextError, match="ModuleNotFoundError"):
        load_rules_file(broken)
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(DeepContextError, match="defines no Rule"):
        load_rules_file(empty)
    with pytest.raises(DeepContextError, match="no such file"):
        load_rules_file(tmp_path / "missing.py")


def test_entry_point_rules_are_loaded_and_broken_ones_warn(monkeypatch):
    class EP:
        def __init__(self, name, obj):
            self.name, self.obj = name, obj

        def load(self):
            if isinstance(self.obj, Exception):
                raise self.obj
            return self.obj

    class Plugin(Rule):
        id, category, description = "plugin-rule", "memory", "from a plugin"

        def check(self, ctx):
            return []

    monkeypatch.setattr(registry, "entry_points",
                        lambda group: [EP("good", Plugin), EP("bad", ImportError("gone"))])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rules = registry.default_rules()
    assert rules[-1].id == "plugin-rule"
    assert "'bad' failed to load: gone" in str(caught[0].message)


@pytest.mark.parametrize("path, mine", [
    ("/home/me/proj/train.py", True),
    ("<string>", True),
    ("<frozen importlib._bootstrap>", False),
    ("/usr/lib/python3.11/site-packages/torch/nn/modules/linear.py", False),
    ("/root/.pyenv/versions/3.11.7/lib/python3.11/functools.py", False),
    ("/venv/lib/python3.12/dist-packages/numpy/core/numeric.py", False),
    ("/home/me/src/pytorch/torch/nn/functional.py", False),
    ("/home/me/torch-experiments/train.py", True),
    ("/tmp/train.py", True),  # a script of the user's in the temp directory
    ("/tmp/pytest-of-me/pytest-3/test_x0/tmpab12cd34.py", True),
    # generated at run time: a template rendered into a NamedTemporaryFile, Inductor's output
    ("/tmp/torch_geometric.nn.conv.gcn_conv_GCNConv_propagate_x1y2z3w4.py", False),
    ("/tmp/tmpab12cd34.py", False),
    ("/tmp/torchinductor_me/xy/cxyzabc.py", False),
    ("", False),
])
def test_user_code_detection(path, mine):
    assert is_user_file(path) is mine


def test_non_finite_metrics_still_give_valid_json():
    import json

    from deepcontext.render.findings import FindingsReport, render
    tree = build([([user(10), user(4, "gelu"), op(n)], {"op.count": 100, "op.time": float("inf")})
                  for n in ("aten::mul", "aten::add", "aten::tanh", "aten::sub")]
                 + [([user(11), op("aten::item")], {"op.count": 500, "op.time": float("nan")})])
    rules = builtin_rules()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no rule fails on them (format_value printed "inf")
        found = analyze(tree, rules=rules)
    rep = FindingsReport(findings=found, profile="x", rules=rules, profiled_time=0.0)
    for fmt in ("json", "sarif"):
        json.loads(render(rep, fmt), parse_constant=lambda c: pytest.fail(f"{fmt}: {c}"))


def test_profiled_time_leaves_out_worker_threads_and_set_up_is_not_steady_host_time():
    from deepcontext.analysis.context import AnalysisContext
    from deepcontext.analysis.testing import lib
    from deepcontext.tree.frame import Frame
    worker = Frame.make("thread", "intra-op")
    tree = build([([user(10), op("aten::mm")], {"op.count": 100, "op.time": 1.0}),
                  ([worker, Frame.make("native", "sgemm_kernel", "libopenblas.so")],
                   {"cpu.time": 3.0}),
                  ([user(4, "main"), lib("GPT2LMHeadModel.__init__",
                                         "/sp/site-packages/transformers/gpt2.py")],
                   {"cpu.time": 0.5})])
    ctx = AnalysisContext(tree)
    # the main thread's work (1 s of operators); the BLAS workers' 3 s of CPU ran beside it
    assert ctx.profiled_time == 1.0
    line4 = next(n.id for n in tree.nodes if n.frame.line == 4)
    line10 = next(n.id for n in tree.nodes if n.frame.line == 10)
    assert ctx.host_time(line4) == 0.0  # building the model: set-up, not steady host time
    assert ctx.host_time(line10) == 1.0 and ctx.runs(line10) == 100
    assert ctx.repeated(line10) and not ctx.repeated(line4)
