"""How many native stacks a step unwinds under native frames, and what they cost: every
libunwind unw_backtrace, timed through a stand-in library (``_unw_shim.c``, compiled here at
first use, ``cbuild.py``), split by whether libunwind took its slow path (a return
address missing from its caches: dl_iterate_phdr, then the unwind tables parsed), with the count
of return addresses no earlier unwind in the process had returned. Events that find a
remembered stack do not unwind (``native.stacks_recalled`` in the profile's metadata); CPU
samples always do.

    python benchmarks/unwind_probe.py --device cpu --small --models gpt2_train --steps 60
    python benchmarks/unwind_probe.py --device cuda --models gpt2_train,resnet50_train

Needs libunwind (``--libunwind PATH``, default: the system's ``libunwind.so.8``)."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cbuild import build_c_library

HERE = Path(__file__).resolve().parent


def find_libunwind() -> str:
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"):
        if Path(d, "libunwind.so.8").exists():
            return str(Path(d, "libunwind.so.8"))
    raise SystemExit("unwind_probe.py: no libunwind.so.8 found; pass --libunwind PATH")


def probe(args: argparse.Namespace) -> None:
    """In the child: run each model under native frames and report the shim's counts."""
    import torch

    import deepcontext
    import model_zoo

    lib = ctypes.CDLL(None)
    lib.unw_shim_reset  # noqa: B018 (fails unless the shim is preloaded)
    for name in args.models.split(","):
        step = getattr(model_zoo, name)(args.device, args.small)
        sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
        for _ in range(3):
            step()
        with tempfile.TemporaryDirectory() as d:
            out = f"{d}/p.dcprof"
            with deepcontext.profile(out, context=args.context, force=True):
                for _ in range(3):
                    step()
                sync()
                lib.unw_shim_reset()
                t = time.perf_counter()
                for _ in range(args.steps):
                    step()
                sync()
                el = time.perf_counter() - t
                lib.unw_shim_report(f"{name} {args.context} {args.steps} steps".encode())
            meta = dict(sqlite3.connect(out).execute("select key, value from meta"))
        native = json.loads(meta.get("native", "{}"))
        counts = {k: native[k] for k in ("stacks_unwound", "stacks_recalled", "stacks_learned")
                  if k in native}
        print(f"{name}: {el / args.steps * 1e3:.2f} ms/step; profile metadata (whole session) "
              f"{counts}", file=sys.stderr, flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--models", default="gpt2_train")
    p.add_argument("--small", action="store_true", help="CPU-sized configs")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--context", default="python,op,native,gpu")
    p.add_argument("--libunwind", help="the real libunwind.so.8")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        sys.path.insert(0, str(HERE))
        probe(args)
        return 0
    lib = build_c_library("_unw_shim.c", "-ldl")
    env = dict(os.environ, UNW_REAL=args.libunwind or find_libunwind(),
               DEEPCONTEXT_LIBUNWIND=str(lib), LD_PRELOAD=str(lib), PYTHONUNBUFFERED="1")
    return subprocess.call([sys.executable, __file__, *sys.argv[1:], "--child"], env=env)


if __name__ == "__main__":
    sys.exit(main())
