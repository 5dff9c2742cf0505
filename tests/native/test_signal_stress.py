"""CPU samples with native frames taken while frames are being linked and unlinked never crash
the process (the signal-time Python walk stops at implausible pointers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAM = Path(__file__).parent / "_signal_stress.py"


@pytest.mark.slow
@pytest.mark.parametrize("run", range(3))
def test_sampling_through_frame_churn(tmp_path, run):
    if os.environ.get("DEEPCONTEXT_CORE_DIR"):
        pytest.skip("records with the installed package, not a standalone core")
    out = tmp_path / "stress.dcprof"
    proc = subprocess.run(
        [sys.executable, "-m", "deepcontext", "record", "-o", str(out), "--context",
         "python,native", "--sample-interval", "0.0002", "--", sys.executable, str(PROGRAM), "1.0"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip().endswith("ok")
    from deepcontext.tree import load

    tree = load(out)
    assert any(n.frame.kind == "python" and n.frame.name == "churn" for n in tree.nodes)


@pytest.mark.slow
def test_fresh_threads_sampled_inside_malloc_do_not_deadlock(tmp_path):
    if os.environ.get("DEEPCONTEXT_CORE_DIR"):
        pytest.skip("records with the installed package, not a standalone core")
    program = Path(__file__).parent / "_fresh_threads_malloc.py"
    out = tmp_path / "fresh.dcprof"
    proc = subprocess.run(
        [sys.executable, "-m", "deepcontext", "record", "-o", str(out), "--context",
         "python,native", "--sample-interval", "0.0002", "--", sys.executable, str(program)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip() == "ok"


@pytest.mark.slow
def test_libraries_loading_while_sampled_inside_malloc_do_not_deadlock(tmp_path):
    # Each library has TLS, so each load bumps glibc's TLS generation, and its constructor then
    # runs inside malloc. libunwind's cache is in TLS and libunwind is dlopen'ed, so a sample's
    # unwind goes through __tls_get_addr, which after such a load grows the thread's DTV with
    # realloc: over an interrupted malloc, the thread waited on its own arena lock (4 runs in 5
    # hung before the handler refused to unwind in the allocator's, libc's and ld.so's code).
    if os.environ.get("DEEPCONTEXT_CORE_DIR"):
        pytest.skip("records with the installed package, not a standalone core")
    from build_ext import build_tls_libraries

    lib_dir = build_tls_libraries(tmp_path, 200)
    out = tmp_path / "tls.dcprof"
    proc = subprocess.run(
        [sys.executable, "-m", "deepcontext", "record", "-o", str(out), "--context",
         "python,native", "--sample-interval", "0.0001", "--", sys.executable,
         str(Path(__file__).parent / "_load_tls_libraries.py"), str(lib_dir)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip() == "loaded 200"
    from deepcontext.tree import load

    tree = load(out)
    # Samples in the constructors' own code (outside malloc) still carry their native paths ...
    inits = [n for n in tree.nodes
             if n.frame.kind == "native" and n.frame.name == "dcn_init_allocating"]
    assert inits and all("/tls/lib" in n.frame.file for n in inits), [n.frame for n in inits][:3]
    # ... and those in the allocator keep their function, under the marker for the frames between
    markers = [n for n in tree.nodes
               if n.frame.kind == "marker" and n.frame.name == "<native unwind incomplete>"]
    leaves = {tree.nodes[c].frame.name for m in markers for c in m.children}
    assert any("malloc" in name or "free" in name for name in leaves), leaves


@pytest.mark.slow
def test_c_threads_living_in_malloc_are_measured_without_signals(tmp_path):
    # C threads that run no Python and no operator (found by the core's /proc scan) are foreign
    # pools: they are measured by reading their CPU clocks and never interrupted (XLA:CPU's pool
    # corrupts its heap under any signal, docs/design.md "Threads"). Their CPU time lands whole
    # under "[thread] <name>", with no frames of their own.
    if os.environ.get("DEEPCONTEXT_CORE_DIR"):
        pytest.skip("records with the installed package, not a standalone core")
    from build_ext import build_malloc_threads

    lib = build_malloc_threads(tmp_path)
    out = tmp_path / "cthreads.dcprof"
    proc = subprocess.run(
        [sys.executable, "-m", "deepcontext", "record", "-o", str(out), "--context",
         "python,native", "--sample-interval", "0.0002", "--flush-interval", "0.2", "--",
         sys.executable, str(Path(__file__).parent / "_malloc_threads.py"), str(lib), "4", "3"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip() == "threads 4"
    from deepcontext.tree import load

    tree = load(out)
    workers = [n for n in tree.nodes if n.frame.kind == "thread" and n.parent == 0]
    assert sum(tree.inclusive(w.id, "cpu.time") for w in workers) > 1.0
    assert all(list(tree.walk(w.id)) == [w] for w in workers)
