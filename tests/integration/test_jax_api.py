"""The JAX layer through the monitor API, and what jax.jit returns keeps its behaviour under it."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("jax")

from helpers import PROGRAMS, children_named, line_of, loaded, python_nodes, record  # noqa: E402

CPU = {**os.environ, "JAX_PLATFORMS": "cpu"}  # the XLA:CPU path, also on a GPU machine


def test_jax_op_callback_sees_the_full_path():
    prog = "jax_api.py"
    proc = subprocess.run([sys.executable, str(PROGRAMS / prog), "3"], capture_output=True,
                          text=True, timeout=300, env=CPU)
    assert proc.returncode == 0, proc.stderr
    count, last = proc.stdout.splitlines()
    assert count == "3"  # one event per execution of the dot_general
    assert last == str(("exec", [("python", "<module>", line_of(prog, "CALL")),
                                 ("op", "jit(f)", 0), ("python", "f", line_of(prog, "DOT")),
                                 ("op", "jit(f)/dot_general", 0)]))


def test_jitted_functions_behave_the_same_and_the_programs_own_trace_works(tmp_path):
    prog = "jax_semantics.py"
    plain = subprocess.run([sys.executable, str(PROGRAMS / prog)], capture_output=True,
                           text=True, timeout=300, env=CPU)
    assert plain.returncode == 0, plain.stderr
    proc, out = record(tmp_path, prog, options=("--sample-interval", "0"), env=CPU)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == plain.stdout
    assert proc.stdout.startswith("1 [")  # the program's own jax.profiler.trace wrote its file
    tree = loaded(out)
    assert any("own jax.profiler trace" in n for n in tree.metadata["notes"])
    # a method with a static self, a static keyword, a plain function: each under its line
    for name, marker in (("jit(apply)", "METHOD"), ("jit(power)", "POWER"), ("jit(plain)", "PLAIN")):
        ops = [n for n in tree.nodes if n.frame.kind == "op" and n.frame.name.startswith(name + "/")]
        assert ops and all(tree.nodes[n.parent].frame.line == line_of(prog, marker) for n in ops)
    # after the program's trace ended the layer captures again: three calls at AFTER
    (after,) = python_nodes(tree, prog, line_of(prog, "AFTER"))
    (jit,) = children_named(tree, after, "op", "jit(plain)")
    assert tree.exclusive(jit, "op.count") == 3
    # during the program's trace no operator was attributed (its own hooks still time the wait)
    (during,) = python_nodes(tree, prog, line_of(prog, "USERTRACE"))
    assert tree.inclusive(during, "op.time") == 0 and tree.inclusive(during, "op.count") == 0
    assert tree.inclusive(during, "sync.count") == 1


def test_schedule_keeps_only_the_active_steps(tmp_path):
    # wait=1, warmup=1, active=2, repeat=1 over 6 steps: the calls of steps 2 and 3
    proc = subprocess.run([sys.executable, str(PROGRAMS / "jax_schedule.py"),
                           str(tmp_path / "s.dcprof")], capture_output=True, text=True,
                          timeout=300, env=CPU)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["2.0", "2.0", "2.0"]


def test_a_second_session_tracks_functions_jitted_under_the_first_and_survives_a_fork(tmp_path):
    proc = subprocess.run([sys.executable, "-W", "ignore::RuntimeWarning",
                           str(PROGRAMS / "jax_two_sessions.py"), str(tmp_path / "a.dcprof"),
                           str(tmp_path / "b.dcprof")], capture_output=True, text=True,
                          timeout=300, env=CPU)
    assert proc.returncode == 0, proc.stderr
    # calls at FIRST, SECOND, AFTER_FORK in the first profile, then in the second
    assert proc.stdout.strip() == "[1.0, 0, 0, 0, 3.0, 1.0]"


@pytest.mark.parametrize("env, expected", [
    ({}, "--xla_gpu_enable_command_buffer="),
    ({"XLA_FLAGS": "--xla_gpu_enable_command_buffer=FUSION"}, "--xla_gpu_enable_command_buffer=FUSION"),
    ({"DEEPCONTEXT_JAX_COMMAND_BUFFERS": "1"}, "None"),
])
def test_command_buffers_are_turned_off_before_the_backend_starts(tmp_path, env, expected):
    base = {k: v for k, v in CPU.items()
            if k not in ("XLA_FLAGS", "DEEPCONTEXT_JAX_COMMAND_BUFFERS")}
    code = "import os, jax; print(os.environ.get('XLA_FLAGS'))"
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "-o",
                           str(tmp_path / "p.dcprof"), "--sample-interval", "0", "--",
                           sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env={**base, **env})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == expected
