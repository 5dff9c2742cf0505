"""jax-recompile and jax-host-round-trip on literal trees shaped like the JAX layer's output."""

from deepcontext.analysis import analyze
from deepcontext.analysis.rules.jax import (JAX_COMPILE_PHASES, JaxHostRoundTripRule,
                                             JaxRecompileRule)
from deepcontext.analysis.rules.sync import SyncRule
from deepcontext.analysis.testing import build, kernel, marker, op, sync, user

STEP = ([user(30), op("jit(step)"), user(12, "loss"), op("jit(step)/jvp()/dot_general"),
         kernel("ynn_fusion", device="cpu", hlo_op="ynn_fusion")], {"op.time": 0.9})


def compiles(line, n, seconds):
    return ([user(line), op("jit(step)"), marker("compile"), marker("XLA compile")],
            {"compile.time": seconds}), ([user(line), op("jit(step)"), marker("compile")],
                                         {"compile.count": n})


def test_recompiled_function_fires_at_the_line_with_most_compiles():
    tree = build([STEP, *compiles(30, 5, 0.5), *compiles(40, 1, 0.1)], {"steps": 10})
    (f,) = analyze(tree, rules=[JaxRecompileRule()])
    assert f.rule == "jax-recompile" and f.location.line == 30
    assert f.evidence == {"compiles": 6, "compile_time_s": 0.6, "function": "jit(step)"}
    assert f.estimated_gain.seconds == 0.5  # all but one compilation's share
    assert "0.6 per step" in f.message and "train.py:40 (1x)" in f.message
    # both causes' levers: a loop's changing shapes, and set-up code making one shape per layer
    assert "keep the shapes fixed" in f.suggestion
    assert "make them with numpy" in f.suggestion


def test_a_compile_without_the_function_name_is_still_jax():
    # (the JAX layer hangs a compile whose function it did not learn under the calling line)
    tree = build([STEP] + [([user(30), marker("compile"), marker(phase)], {"compile.time": 0.2})
                           for phase in ("trace", "XLA compile")]
                 + [([user(30), marker("compile")], {"compile.count": 4})])
    (f,) = analyze(tree, rules=[JaxRecompileRule()])
    assert f.evidence == {"compiles": 4, "compile_time_s": 0.4, "function": "<jax>"}


def test_torch_compile_compilations_are_not_jax():
    # torch.compile's markers, as the Inductor layer writes them: under the line and under the
    # compiled region's ops, with "compile: <phase>" below (or nothing below)
    tree = build([STEP,
                  ([user(9), marker("compile"), marker("compile: dynamo")], {"compile.time": 2.0}),
                  ([user(9), marker("compile")], {"compile.count": 5}),
                  ([user(9), op("Torch-Compiled Region: 1/0"), marker("compile")],
                   {"compile.count": 4, "compile.time": 1.0})])
    assert analyze(tree, rules=[JaxRecompileRule()]) == []


def test_phase_names_are_the_jax_layers():
    from deepcontext.capture.jax.layer import COMPILE_PHASES

    assert JAX_COMPILE_PHASES == {*COMPILE_PHASES.values(), "autotuning"}


def test_two_compilations_are_normal():
    tree = build([STEP, *compiles(30, 2, 0.5)])
    assert analyze(tree, rules=[JaxRecompileRule()]) == []


def test_per_step_scalar_reads_are_round_trips_with_jax_advice():
    frames = [user(33), sync("jax device-to-host copy")]
    tree = build([STEP, (frames, {"sync.count": 50, "sync.wait": 0.05})], {"steps": 50})
    findings = analyze(tree, rules=[JaxHostRoundTripRule(), SyncRule()])
    (f,) = findings  # the generic host-sync rule leaves JAX's round trips to this one
    assert f.rule == "jax-host-round-trip" and f.location.line == 33
    assert f.evidence == {"round_trips": 50, "sync_wait_s": 0.05, "cause": "jax device-to-host copy"}
    assert "(1 per step)" in f.message and "float()/jax.device_get" in f.suggestion


def test_few_round_trips_are_quiet():
    tree = build([STEP, ([user(33), sync("jax block_until_ready")], {"sync.count": 9,
                                                                      "sync.wait": 0.5})])
    assert analyze(tree, rules=[JaxHostRoundTripRule()]) == []


def test_a_library_function_compiled_once_per_shape_at_several_lines_is_normal():
    # jax.random.normal's jit(_normal) at three calls with three shapes (two on one set-up
    # line, one in the loop, cached after its first call): compiled 3 times, never again at a line
    normal = [([user(line), op("jit(_normal)"), marker("compile")], {"compile.count": n,
                                                                     "compile.time": 0.3 * n})
              for line, n in ((6, 2), (22, 1))]
    assert analyze(build([STEP, *normal]), rules=[JaxRecompileRule()]) == []
    # a third shape at the set-up line is three compilations there: fires
    normal[0] = ([user(6), op("jit(_normal)"), marker("compile")], {"compile.count": 3,
                                                                    "compile.time": 0.9})
    (f,) = analyze(build([STEP, *normal]), rules=[JaxRecompileRule()])
    assert f.location.line == 6 and f.evidence["compiles"] == 4
