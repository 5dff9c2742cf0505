"""compile-time on literal trees shaped like the Inductor layer's output: compilation against
the steady state that the rest of the profile measured."""

from deepcontext.analysis import analyze
from deepcontext.analysis.rules.compile import CompileTimeRule
from deepcontext.analysis.testing import build, marker, op, user

STEADY = ([user(10), op("aten::addmm")], {"cpu.time": 1.0, "op.time": 0.9, "op.count": 100})


def compiled(seconds, host):
    # (wall time and count at the compile marker, the sampled host time in its phases)
    return [([user(9), marker("compile"), marker("compile: dynamo")],
             {"compile.host": host, "cpu.time": host}),
            ([user(9), marker("compile")], {"compile.time": seconds, "compile.count": 1})]


def test_compilation_is_weighed_against_the_steady_state():
    (f,) = analyze(build([STEADY, *compiled(10.0, 8.0)]), rules=[CompileTimeRule()])
    assert f.severity == "note" and f.location.line == 9
    # the steady state is the profiled time, which leaves compilation out already
    assert f.evidence == {"compile_time_s": 10.0, "compilations": 1, "rest_time_s": 1.0}


def test_quiet_when_compilation_is_a_small_share():
    assert analyze(build([STEADY, *compiled(0.4, 0.3)]), rules=[CompileTimeRule()]) == []
