"""The benchmarks' small C helpers (``_pc_sampler.c``, ``_unw_shim.c``), compiled at first use
with the system C compiler ($CC, else cc) into the temp folder, under a name that carries the
source's digest (a changed source is built again; a finished build is renamed into place, so a
concurrent run never loads half a file)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def build_c_library(source: str, *link: str) -> Path:
    src = HERE / source
    digest = hashlib.sha1(src.read_bytes()).hexdigest()[:12]
    lib = Path(tempfile.gettempdir()) / f"dc{src.stem}_{digest}.so"
    if not lib.exists():
        tmp = lib.with_suffix(f".{os.getpid()}.so")
        subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-o", str(tmp),
                        str(src), *link], check=True)
        tmp.replace(lib)
    return lib
