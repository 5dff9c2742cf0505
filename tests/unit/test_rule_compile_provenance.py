"""compile-provenance on literal trees shaped like the Inductor layer's output: kernel call sites
of generated code that carry no source lines are named, with why, at the line that calls the
busiest compiled region."""

from deepcontext.analysis import analyze
from deepcontext.analysis.rules.compile import CompileProvenanceRule
from deepcontext.analysis.testing import build, op, user

REGION = op("Torch-Compiled Region: 0/0")


def profile(missing, compiles=()):
    # two calls of compiled code: line 30 (busy) and line 40; the kernels sit in the compiled
    # function f (line 12) when their source lines are unknown
    meta = {"start_time": 0.0, "end_time": 1.0,
            "torch_compile": {"compiles": list(compiles), "graph_breaks": [], "kernel_calls": 3,
                              "kernel_calls_without_provenance": missing}}
    return build([([user(30), REGION, user(12, "f"), op("aten::mm")],
                   {"op.time": 0.5, "op.count": 50}),
                  ([user(40), REGION, user(12, "f"), op("aten::mm")],
                   {"op.time": 0.1, "op.count": 10})], meta)


def test_call_sites_without_source_lines_are_a_note_at_the_busiest_compiled_call():
    (f,) = analyze(profile(2), rules=[CompileProvenanceRule()])
    assert f.severity == "note" and f.location.line == 30
    assert f.title == "2 of 3 compiled kernel call sites have no source lines"
    assert "compiled before the profile began" in f.message
    assert f.evidence == {"kernel_call_sites": 3, "without_source_lines": 2}
    assert f.estimated_gain.seconds == 0.0


def test_a_session_that_also_compiled_still_gets_the_note():
    (f,) = analyze(profile(1, [{"id": "0/0", "trigger": "DYNAMO", "seconds": 1.0}]),
                   rules=[CompileProvenanceRule()])
    assert f.title == "1 of 3 compiled kernel call sites have no source lines"


def test_quiet_when_every_call_site_has_source_lines():
    assert analyze(profile(0), rules=[CompileProvenanceRule()]) == []
    assert analyze(build([([user(30), op("aten::mm")], {"op.time": 0.5})]),
                   rules=[CompileProvenanceRule()]) == []
