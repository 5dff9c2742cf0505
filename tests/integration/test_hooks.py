"""Declared hooks on a stand-in runtime and framework built here with the system cc: exact
counts and bytes per Python line, through the PLT, dlsym, a RUNPATH-only plugin loaded late,
the Python API, and one-line errors for bad files before the program starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import build as fixtures
from helpers import PROGRAMS, line_of, loaded, python_nodes, record

pytestmark = pytest.mark.skipif(fixtures.compiler() is None, reason="needs a C compiler")

HOOKS = """
[[hook]]
library = "libfakeaccel.so"
function = "fa_launch"
kind = "launch"
bytes_arg = 1

[[hook]]
library = "libfakeaccel.so"
function = "fa_memcpy"
kind = "copy"
bytes_arg = 2

[[hook]]
library = "libfakeaccel.so"
function = "fa_sync"
kind = "sync"

[[hook]]
library = "libfakeaccel.so"
function = "fa_flush"
kind = "call"

[[hook]]
library = "libfakeaccel.so"
function = "fa_malloc"
kind = "alloc"
bytes_arg = 0

[[hook]]
library = "libfakeaccel.so"
function = "fa_launch_grid"
kind = "launch"
bytes_arg = 6

[[hook]]
library = "libfakeaccel.so"
function = "fa_mix"
kind = "call"

[[hook]]
library = "{plugin}"
function = "fp_run"
kind = "launch"
"""


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    return fixtures.build(tmp_path_factory.mktemp("fakeaccel"))


@pytest.fixture
def env(libs):
    return {"LD_LIBRARY_PATH": os.pathsep.join(
        filter(None, [str(libs["accel"].parent), os.environ.get("LD_LIBRARY_PATH")]))}


def write_hooks(tmp_path: Path, libs, text: str = HOOKS) -> Path:
    p = tmp_path / "hooks.toml"
    p.write_text(text.replace("{plugin}", str(libs["plugin"])))
    return p


def hook_children(tree, program, marker):
    """{function: metrics} of the hook frames right under a marked line (all its nodes)."""
    out: dict[str, dict[str, float]] = {}
    for nid in python_nodes(tree, program, line_of(program, marker)):
        for c in tree.nodes[nid].children:
            node = tree.nodes[c]
            if node.frame.kind == "hook":
                into = out.setdefault(node.frame.name, {})
                for k, v in node.metrics.items():
                    into[k] = into.get(k, 0.0) + v
    return out


def test_counts_and_bytes_per_line(tmp_path, libs, env):
    hooks = write_hooks(tmp_path, libs)
    proc, out = record(tmp_path, "hooks_framework.py", str(libs["framework"]),
                       options=("--hooks", str(hooks)), env=env)
    assert proc.returncode == 7, proc.stderr  # the program's exit status, untouched
    # arguments and results intact; calls left by longjmp leave later ones intact
    assert proc.stdout == "plugin 10\nabi ok\nlongjmp 3\nc threads 1000\n"
    tree = loaded(out)
    prog = "hooks_framework.py"

    launch = hook_children(tree, prog, "LAUNCH")
    assert set(launch) == {"fa_launch"}  # through the framework's PLT
    assert launch["fa_launch"]["hook.count"] == 5
    assert launch["fa_launch"]["hook.bytes"] == 500
    assert launch["fa_launch"]["hook.time"] > 0

    step = hook_children(tree, prog, "STEP_LAUNCH")  # one line, three calls of step()
    assert step["fa_launch"]["hook.count"] == 6
    assert step["fa_launch"]["hook.bytes"] == 6 * 4096

    copy = hook_children(tree, prog, "COPY")  # a pointer the framework got from dlsym
    assert copy["fa_memcpy"]["hook.count"] == 3
    assert copy["fa_memcpy"]["hook.bytes"] == 3 * 64

    sync = hook_children(tree, prog, "SYNC")
    assert sync["fa_sync"]["hook.count"] == 1
    assert sync["fa_sync"]["sync.count"] == 1
    assert sync["fa_sync"]["sync.wait"] == sync["fa_sync"]["hook.time"] > 0
    # fa_sync calls fa_flush through the runtime's own PLT: nested under it
    [sync_node] = [c for n in python_nodes(tree, prog, line_of(prog, "SYNC"))
                   for c in tree.nodes[n].children if tree.nodes[c].frame.name == "fa_sync"]
    [flush] = tree.nodes[sync_node].children
    assert tree.nodes[flush].frame.name == "fa_flush"
    assert tree.nodes[flush].metrics["hook.count"] == 1
    assert tree.nodes[sync_node].frame.get("type") == "sync"

    alloc = hook_children(tree, prog, "ALLOC")
    assert alloc == {"fa_malloc": {"hook.count": 1, "hook.bytes": 1 << 20,
                                   "hook.time": alloc["fa_malloc"]["hook.time"]}}  # fa_free: undeclared

    plugin = hook_children(tree, prog, "PLUGIN")  # loaded late, found by RUNPATH, via dlsym
    assert plugin["fp_run"]["hook.count"] == 4

    abi = hook_children(tree, prog, "ABI")  # a stack argument as bytes_arg; doubles; stack args
    assert abi["fa_launch_grid"]["hook.bytes"] == 1000
    assert abi["fa_mix"]["hook.count"] == 1

    # fa_fail never returned (longjmp): not counted; the launch after it is
    assert hook_children(tree, prog, "LONGJMP") == {"fa_launch": {
        "hook.count": 1, "hook.bytes": 1,
        "hook.time": hook_children(tree, prog, "LONGJMP")["fa_launch"]["hook.time"]}}
    # four Python threads at once: every call counted, under the workers' line
    threaded = hook_children(tree, prog, "THREAD_LAUNCH")["fa_launch"]
    assert threaded["hook.count"] == 4000 and threaded["hook.bytes"] == 12000
    # C threads run no Python: their calls hang outside any Python line
    outside = sum(n.metrics.get("hook.count", 0) for n in tree.nodes if n.frame.kind == "hook"
                  and not any(f.kind == "python" for f in tree.path(n.id)))
    assert outside == 1000
    assert tree.total("hook.count") == 5 + 6 + 3 + 1 + 1 + 1 + 4 + 1 + 1 + 1 + 4000 + 1000
    meta = {(h["function"]): h for h in tree.metadata["hooks"]}
    assert meta["fa_launch"]["loaded"] and meta["fa_launch"]["bindings"] >= 1
    assert not any(k.startswith("perf.") for n in tree.nodes for k in n.metrics)  # opt-in


def test_python_api_on_a_runtime_loaded_before_start(tmp_path, libs, env):
    hooks = write_hooks(tmp_path, libs)
    out = tmp_path / "api.dcprof"
    proc = subprocess.run([sys.executable, str(PROGRAMS / "hooks_api.py"), str(libs["framework"]),
                           str(hooks), str(out)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ("dlsym gave the stub inside True\ndlsym gives the function after True\n"
                           "done\n")
    tree = loaded(out)
    inside = hook_children(tree, "hooks_api.py", "INSIDE")
    assert inside["fa_launch"]["hook.count"] == 3
    assert inside["fa_launch"]["hook.bytes"] == 24
    assert tree.total("hook.count") == 3  # nothing before the session, nothing after it


BAD = [
    ("missing library", 'library = "libnosuchaccel.so"\nfunction = "f"\nkind = "call"',
     "library libnosuchaccel.so not found"),
    ("unknown function", 'library = "libfakeaccel.so"\nfunction = "fa_lanch"\nkind = "launch"',
     "libfakeaccel.so has no function fa_lanch"),
    ("bad kind", 'library = "libfakeaccel.so"\nfunction = "fa_launch"\nkind = "kernel"',
     "unknown kind 'kernel'"),
    ("bad bytes_arg", 'library = "libfakeaccel.so"\nfunction = "fa_launch"\nkind = "launch"\n'
     'bytes_arg = "1"', "bytes_arg must be an argument index"),
    ("libc", 'library = "libc.so.6"\nfunction = "malloc"\nkind = "alloc"', "cannot be hooked"),
]


@pytest.mark.parametrize("case,entry,message", BAD, ids=[b[0] for b in BAD])
def test_bad_file_is_one_line_error_before_the_program_runs(tmp_path, libs, env, case, entry,
                                                           message):
    # One good entry first: nothing may be hooked half-way.
    hooks = write_hooks(tmp_path, libs, '[[hook]]\nlibrary = "libfakeaccel.so"\n'
                        'function = "fa_launch"\nkind = "launch"\n\n[[hook]]\n' + entry + "\n")
    marker = tmp_path / "ran"
    script = tmp_path / "job.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "--hooks", str(hooks),
                           "--", sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env={**os.environ, **env})
    assert proc.returncode != 0
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not marker.exists() and not list(tmp_path.glob("*.dcprof"))


def test_api_refuses_a_loaded_library_without_the_function(tmp_path, libs, env):
    # Specs given as data skip the file checks; the native core still checks loaded libraries
    # and patches nothing unless every function exists.
    script = tmp_path / "job.py"
    script.write_text(
        "import ctypes, sys\nimport deepcontext\n"
        f"fw = ctypes.CDLL({str(libs['framework'])!r})\n"
        "specs = [{'library': 'libfakeaccel.so', 'function': 'fa_launch', 'kind': 'launch'},\n"
        "         {'library': 'libfakeaccel.so', 'function': 'fa_nope', 'kind': 'call'}]\n"
        "try:\n"
        "    deepcontext.profile('x.dcprof', hooks=specs).start()\n"
        "except deepcontext.DeepContextError as e:\n"
        "    print(e)\n"
        "from deepcontext.capture.native import core\n"
        "print(core.hooks_installed(), fw.fw_launch(2, 1))\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ("hooks: libfakeaccel.so has no function fa_nope; nothing was hooked\n"
                           "[] 1\n")
    assert not (tmp_path / "x.dcprof").exists()


def test_native_frames_between_the_line_and_the_hook(tmp_path, libs, env):
    hooks = write_hooks(tmp_path, libs)
    proc, out = record(tmp_path, "hooks_framework.py", str(libs["framework"]),
                       options=("--hooks", str(hooks), "--context", "python,op,native"), env=env)
    assert proc.returncode == 7, proc.stderr
    tree = loaded(out)
    launch_line = line_of("hooks_framework.py", "LAUNCH")
    hooks_on_line = [n for n in tree.nodes if n.frame.kind == "hook" and n.frame.name == "fa_launch"
                     and any(f.kind == "python" and f.line == launch_line for f in tree.path(n.id))]
    assert sum(n.metrics["hook.count"] for n in hooks_on_line) == 5
    for n in hooks_on_line:  # the framework function that made the call sits right above it
        parent = tree.path(n.id)[-2]
        assert parent.kind == "native" and parent.name == "fw_launch"
        assert parent.file.endswith("libfakeframework.so")


@pytest.mark.torch
def test_hook_under_the_operator_that_made_it(tmp_path, libs, env):
    pytest.importorskip("torch")
    hooks = write_hooks(tmp_path, libs)
    proc, out = record(tmp_path, "hooks_torch_op.py", str(libs["framework"]),
                       options=("--hooks", str(hooks)), env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok 4.0\n"
    tree = loaded(out)
    prog = "hooks_torch_op.py"
    [hook] = [n for n in tree.nodes if n.frame.kind == "hook"]
    assert hook.metrics["hook.count"] == 6 and hook.metrics["hook.bytes"] == 42
    path = tree.path(hook.id)
    kinds = [(f.kind, f.name if f.kind != "python" else f.line) for f in path]
    op_at = kinds.index(("op", "fakeaccel::launch"))
    assert ("python", line_of(prog, "OP")) in kinds[:op_at]
    assert kinds[op_at + 1:] == [("python", line_of(prog, "IMPL")), ("hook", "fa_launch")]
