"""What a declared hook costs per call: the stand-in framework (tests/integration/fixtures)
calls fa_launch N times in a C loop from one Python line, in fresh processes:

- ``off``: no profiler;
- ``undeclared``: profiling, hooks file declaring other functions only (fa_launch untouched);
- ``hooked``: profiling with fa_launch declared (kind launch, bytes_arg 1).

Cost per call = (median wall time of the loop - off's) / N. The target is <= 1 us (docs/hooks.md).

    python benchmarks/hook_cost.py [--calls 1000000] [--repeats 7] [--native]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from fixtures import build as fixtures  # noqa: E402

CHILD = r"""
import ctypes, sys, time
fw = ctypes.CDLL(sys.argv[1])
calls, mode, hooks, context = int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]

def loop():
    fw.fw_launch(1000, 8)  # warm: first calls bind the PLT and create the tree nodes
    t0 = time.perf_counter()
    fw.fw_launch(calls, 8)
    return time.perf_counter() - t0

if mode == "off":
    print(loop())
else:
    import deepcontext
    with deepcontext.profile(sys.argv[6], hooks=hooks, context=context, force=True):
        print(loop())
"""

HOOKED = '[[hook]]\nlibrary = "libfakeaccel.so"\nfunction = "fa_launch"\nkind = "launch"\nbytes_arg = 1\n'
UNDECLARED = '[[hook]]\nlibrary = "libfakeaccel.so"\nfunction = "fa_sync"\nkind = "sync"\n'


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--native", action="store_true", help="context python,op,native (default python,op)")
    args = ap.parse_args()
    context = "python,op,native" if args.native else "python,op"
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        libs = fixtures.build(tmp / "libs")
        (tmp / "hooked.toml").write_text(HOOKED)
        (tmp / "undeclared.toml").write_text(UNDECLARED)
        env = {**os.environ, "LD_LIBRARY_PATH": str(libs["accel"].parent)}
        times: dict[str, list[float]] = {"off": [], "undeclared": [], "hooked": []}
        for _ in range(args.repeats):  # round-robin, so drift hits every mode alike
            for mode in times:
                hooks = str(tmp / f"{mode}.toml") if mode != "off" else ""
                out = subprocess.run([sys.executable, "-c", CHILD, str(libs["framework"]),
                                      str(args.calls), mode, hooks, context, str(tmp / "p.dcprof")],
                                     capture_output=True, text=True, env=env, check=True)
                times[mode].append(float(out.stdout.split()[0]))
    off = statistics.median(times["off"])
    print(f"{args.calls:,} calls of fa_launch from one Python line, context {context}, "
          f"median of {args.repeats}")
    for mode, ts in times.items():
        med = statistics.median(ts)
        extra = (med - off) / args.calls * 1e9
        print(f"  {mode:<11} {med * 1e3:9.1f} ms  {med / args.calls * 1e9:7.1f} ns/call  "
              f"{extra:+7.1f} ns/call vs off")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
