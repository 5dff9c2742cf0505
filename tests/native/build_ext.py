"""Builds the test-only extension ext/dcnative_chain.c for the running interpreter with gcc."""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

SOURCE = Path(__file__).parent / "ext" / "dcnative_chain.c"


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise RuntimeError("no C compiler (gcc/cc) to build the test code")
    return cc


def _compile_library(source: str, out: Path, *libs: str) -> Path:
    """Compiles ext/<source> into the plain shared library `out` (debug info on, -O1)."""
    subprocess.run([_compiler(), "-shared", "-fPIC", "-g", "-O1", str(SOURCE.parent / source),
                    "-o", str(out), *libs], check=True, capture_output=True, text=True)
    return out


def build(out_dir: Path) -> Path:
    """Compiles the extension into out_dir (debug info on, sibling calls off); returns its path."""
    out = out_dir / ("dcnative_chain" + sysconfig.get_config_var("EXT_SUFFIX"))
    cmd = [_compiler(), "-shared", "-fPIC", "-g", "-O1", "-fno-optimize-sibling-calls",
           "-I", sysconfig.get_paths()["include"], str(SOURCE), "-o", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


def build_malloc_threads(out_dir: Path) -> Path:
    """Compiles ext/malloc_threads.c (C threads that live in malloc) into a plain library."""
    return _compile_library("malloc_threads.c", out_dir / "libdc_malloc_threads.so", "-lpthread")


def build_tls_libraries(out_dir: Path, copies: int) -> Path:
    """Compiles ext/tls_allocating_init.c once and copies it `copies` times (distinct files, so
    each load is a new object with its own TLS) into out_dir/tls; returns that directory."""
    lib_dir = out_dir / "tls"
    lib_dir.mkdir()
    first = _compile_library("tls_allocating_init.c", lib_dir / "lib0.so")
    for i in range(1, copies):
        shutil.copyfile(first, lib_dir / f"lib{i}.so")
    return lib_dir


def call_lines() -> dict[str, int]:
    """Line of each `/* call:X */` marker in the source: where dcn_chain_X makes its call."""
    lines = {}
    for no, text in enumerate(SOURCE.read_text().splitlines(), start=1):
        if "/* call:" in text:
            lines[text.split("/* call:")[1].split(" ")[0]] = no
    return lines
