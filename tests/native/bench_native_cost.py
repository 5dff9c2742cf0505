"""Per-call cost of the native-frame hot path (backtrace) and of the splice, measured in C++
from stacks of several Python depths, for libunwind and the libgcc fallback.

    python3 tests/native/bench_native_cost.py [--iterations N]

Not collected by pytest (no test_ prefix). Prints one row per (unwinder, depth).
"""

from __future__ import annotations

import argparse
import time


def load_core():
    from conftest import load_core as load

    return load()


def at_depth(depth: int, fn):
    """Calls fn() under `depth` extra Python frames."""
    if depth <= 0:
        return fn()
    return at_depth(depth - 1, fn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200_000)
    args = parser.parse_args()
    core = load_core()
    info = core.native_info()
    print(f"unwinder: {info['unwinder']}, line reader: {info['line_reader'] or 'none'}")
    print(f"{'unwinder':<10} {'py depth':>8} {'native':>6} {'python':>6} {'items':>5} "
          f"{'backtrace ns':>12} {'ns/frame':>8} {'walk ns':>8} {'splice ns':>9}  status")
    unwinders = [True, False] if info["unwinder"] == "libunwind" else [False]
    for use_libunwind in unwinders:
        for depth in (0, 10, 50):
            iters = args.iterations if use_libunwind else max(1, args.iterations // 10)
            r = at_depth(depth, lambda: core.native_bench(iters, use_libunwind))
            per_frame = r["backtrace_ns"] / max(1, r["native_frames"])
            print(f"{r['unwinder']:<10} {depth:>8} {r['native_frames']:>6} {r['python_frames']:>6} "
                  f"{r['path_items']:>5} {r['backtrace_ns']:>12.0f} {per_frame:>8.1f} "
                  f"{r['walk_ns']:>8.0f} {r['splice_ns']:>9.0f}  {r['status']}")
    # Symbolization, once per unique address: the first address of each object loads its
    # symbol table and line program (milliseconds); later new addresses take microseconds.
    ips = core.native_backtrace()
    t0 = time.perf_counter()
    for ip in ips:
        core.symbolize(ip)
    cold = time.perf_counter() - t0
    core.native_flush_caches()  # forgets addresses, keeps the loaded tables
    t0 = time.perf_counter()
    for ip in ips:
        core.symbolize(ip)
    warm = (time.perf_counter() - t0) / len(ips)
    t0 = time.perf_counter()
    for _ in range(100):
        for ip in ips:
            core.symbolize(ip)
    cached = (time.perf_counter() - t0) / (100 * len(ips))
    print(f"symbolize {len(ips)} addresses: {cold * 1e3:.1f} ms the first time (tables of "
          f"{len({core.symbolize(ip)[1] for ip in ips})} objects loaded), {warm * 1e6:.1f} us per "
          f"new address once tables are loaded, {cached * 1e9:.0f} ns per cached address "
          f"(incl. the Python call)")

if __name__ == "__main__":
    main()
