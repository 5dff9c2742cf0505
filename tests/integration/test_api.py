"""The Python API: profile() with a schedule, and the DLMonitor interface."""

import ast
import subprocess
import sys

import pytest

pytest.importorskip("torch")

import deepcontext  # noqa: E402
from helpers import PROGRAMS, line_of  # noqa: E402


def run(program, *args):
    proc = subprocess.run([sys.executable, str(PROGRAMS / program), *args], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def test_a_sessions_start_is_not_charged_to_the_line_that_starts_it(tmp_path):
    assert run("session_start_unsampled.py", str(tmp_path / "s.dcprof")) == "ok"


def test_active_steps_shorter_than_the_sample_interval_are_sampled(tmp_path):
    assert run("schedule_short_steps_sampled.py", str(tmp_path / "s.dcprof")) == "ok"


def test_schedule_records_only_active_steps(tmp_path):
    # wait=1, warmup=1, active=2, repeat=1 over 6 steps: steps 2 and 3 are recorded
    assert run("api_schedule.py", str(tmp_path / "s.dcprof")) == "2.0"


@pytest.mark.parametrize("when", ["before", "late"])
def test_schedule_pauses_switch_the_operator_hook_off(tmp_path, when):
    # wait, active, wait, active, then done: the hook is on in the active steps only, also when
    # torch is first imported during the first pause
    assert run("api_schedule_hook.py", str(tmp_path / "h.dcprof"), when) == "off on off on off off 2.0"


def test_monitor_callpath_inside_an_op_callback():
    path = ast.literal_eval(run("api_monitor.py"))
    assert path[-1] == ("op", "aten::mul", 0)
    assert ("python", "caller", line_of("api_monitor.py", "CALL")) in path
    assert path[0][1] == "<module>"


def test_api_misuse_is_a_clear_error():
    import deepcontext

    with pytest.raises(deepcontext.DeepContextError, match="without deepcontext.start"):
        deepcontext.stop()


def test_second_session_holds_only_its_own_contexts(tmp_path):
    # first() ran in session 1 and between the sessions; session 2's profile has only second()
    assert run("api_two_sessions.py", str(tmp_path / "p")) == "True False True 7 record_function"


def test_the_operator_floor_switch_records_no_operator_and_the_next_session_does(tmp_path):
    # DEEPCONTEXT_OP_DIAG=empty-callbacks (benchmarks' %op-empty-callbacks): the hook runs but
    # every operator event returns at once; it is read at each start, so a session after it
    # records every operator again
    program = (
        "import os, sys, torch, deepcontext\n"
        "a = torch.ones(4, 4)\n"
        "def session(out):\n"
        "    with deepcontext.profile(out, context='python,op', force=True):\n"
        "        for _ in range(5):\n"
        "            torch.mm(a, a)\n"
        "os.environ['DEEPCONTEXT_OP_DIAG'] = 'empty-callbacks'\n"
        "session(sys.argv[1])\n"
        "del os.environ['DEEPCONTEXT_OP_DIAG']\n"
        "session(sys.argv[2])\n"
        "print(torch.mm(a, a).sum().item())\n")
    empty, full = tmp_path / "empty.dcprof", tmp_path / "full.dcprof"
    proc = subprocess.run([sys.executable, "-c", program, str(empty), str(full)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout == "64.0\n", proc.stderr
    assert deepcontext.load(empty).total("op.count") == 0
    ops = deepcontext.load(full)
    assert ops.total("op.count") == 5
    assert {n.frame.name for n in ops.nodes if n.frame.kind == "op"} == {"aten::mm"}


def test_periodic_flushes_extend_the_tree_to_what_a_whole_build_gives(tmp_path):
    # three points where the program has reached new code since the last: the extended tree
    # equals the whole build of the same snapshot each time
    assert run("api_flushes.py", str(tmp_path / "f.dcprof")) == "3"


def test_a_snapshot_holds_the_sessions_contexts_by_their_ids_in_the_core(tmp_path):
    # the core's tree outlives sessions: a flush reads only the session's part of it
    assert run("session_snapshot.py", str(tmp_path / "s.dcprof")) == "ok"
