"""The exact interleaved path through the test extension: Python -> dcn_chain_a -> dcn_chain_b
-> dcn_chain_c -> Python, spliced from a real native stack and the real Python frames."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import _chain_calls as calls
from build_ext import SOURCE, call_lines

HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def _install(core, chain_ext):
    calls.install(core, chain_ext)


def py(name: str, marker: str | None = None):
    return ("python", name, calls.FILE, calls.line_of(marker or name))


def chain_frames(core, chain_ext):
    """The three native frames as native_callpath reports them (file:line where DWARF is read)."""
    lines = call_lines()
    out = []
    for x in "abc":
        if core.native_info()["line_reader"]:
            out.append(("native", f"dcn_chain_{x}", str(SOURCE), lines[x]))
        else:
            out.append(("native", f"dcn_chain_{x}", chain_ext.__file__, 0))
    return out


def normalize(path):
    """Native source files resolved (DWARF may keep the path as given to the compiler)."""
    return [(k, n, str(Path(f).resolve()) if k == "native" and f else f, ln)
            for k, n, f, ln in path]


def only_chain_native(path):
    return [p[1] for p in path if p[0] == "native"]


def test_python_native_python(core, chain_ext):
    status, path = calls.caller()
    path = normalize(path)
    assert status == "exact"
    expect = [py("caller")] + chain_frames(core, chain_ext) + [py("callback")]
    assert path[-5:] == expect
    assert path[-6][:2] == ("python", "test_python_native_python")
    # Everything outside the chain is Python: interpreter frames were replaced or dropped.
    assert only_chain_native(path) == ["dcn_chain_a", "dcn_chain_b", "dcn_chain_c"]


def test_nested_chain_with_inline_python_call(core, chain_ext):
    # reenter -> helper is a Python-to-Python call: one eval frame on 3.11+, two on 3.10.
    status, path = calls.nested()
    path = normalize(path)
    native = chain_frames(core, chain_ext)
    expect = ([py("nested")] + native + [py("reenter"), py("helper")] + native + [py("callback")])
    assert status == "exact"
    assert path[-len(expect):] == expect
    assert len(only_chain_native(path)) == 6


def test_chain_into_the_core_directly(core, chain_ext):
    path = normalize(calls.direct())
    # The core's own frames (nanobind, the capture) never appear: the path ends in the chain.
    assert path[-4:] == [py("direct")] + chain_frames(core, chain_ext)


def test_generator_frames(core, chain_ext):
    status, path = calls.drive_gen()
    path = normalize(path)
    assert status == "exact"
    assert path[-6:] == [py("drive_gen"), py("gen")] + chain_frames(core, chain_ext) + [py("callback")]


def test_thread_path_starts_at_its_bootstrap(core, chain_ext):
    status, path = calls.in_thread()
    path = normalize(path)
    assert status == "exact"
    assert path[0][:2] == ("python", "Thread._bootstrap" if sys.version_info >= (3, 11) else "_bootstrap")
    assert path[-5:] == [py("caller")] + chain_frames(core, chain_ext) + [py("callback")]
    assert only_chain_native(path) == ["dcn_chain_a", "dcn_chain_b", "dcn_chain_c"]


def python_rows_match_the_python_stack(path, stack):
    """The spliced path keeps every Python frame, in order (file and line of each)."""
    return [(f, ln) for k, _n, f, ln in path if k == "python"] == [
        (s.filename, s.lineno) for s in stack]


def test_every_python_frame_kept_in_order(core, chain_ext):
    (status, path), stack = calls.caller(calls.callback_and_stack)
    assert status == "exact"
    assert python_rows_match_the_python_stack(path, stack)


def test_deep_native_stack_is_cut_and_paired_from_the_innermost(core, chain_ext):
    (status, path), stack = calls.recurse(60)
    path = normalize(path)
    assert status == "truncated"
    lam = "recurse.<locals>.<lambda>" if sys.version_info >= (3, 11) else "<lambda>"
    level = [py("recurse")] + chain_frames(core, chain_ext) + [("python", lam, calls.FILE,
                                                                 calls.line_of("recurse"))]
    assert path[-(2 * len(level) + 2):] == level + level + [
        py("recurse", "recurse_leaf"), py("callback_and_stack")]
    # The frames cut from the native stack are all Python frames, which stay in the path.
    assert python_rows_match_the_python_stack(path, stack)
    assert 0 < len(only_chain_native(path)) < 3 * 60


@pytest.mark.parametrize("unwinder,lines", [("libgcc", "1"), ("libunwind", "0")])
def test_fallbacks_give_the_same_path(core, chain_ext, unwinder, lines):
    # libgcc's unwinder instead of libunwind; no line reader (as without libdw.so.1).
    env = dict(os.environ, DEEPCONTEXT_UNWINDER=unwinder, DEEPCONTEXT_NATIVE_LINES=lines,
               DCN_EXT_DIR=str(Path(chain_ext.__file__).parent))
    script = (
        "import json, sys, importlib\n"
        f"sys.path[:0] = [{str(HERE)!r}]\n"
        "from conftest import load_core\n"
        "import _chain_calls as calls, os\n"
        "sys.path.insert(0, os.environ['DCN_EXT_DIR'])\n"
        "core = load_core(); calls.install(core, importlib.import_module('dcnative_chain'))\n"
        "status, path = calls.caller()\n"
        "print(json.dumps([core.native_info(), status, path]))\n")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    info, status, path = json.loads(out.stdout)
    path = normalize([tuple(p) for p in path])
    if unwinder == "libgcc" or core.native_info()["unwinder"] == "libunwind":
        assert info["unwinder"] == unwinder
    assert status == "exact"
    native = chain_frames(core, chain_ext)
    if lines == "0":
        assert info["line_reader"] == ""
        native = [("native", n, chain_ext.__file__, 0) for _, n, _, _ in native]
    assert path[-5:] == [py("caller")] + native + [py("callback")]
    assert only_chain_native(path) == ["dcn_chain_a", "dcn_chain_b", "dcn_chain_c"]
