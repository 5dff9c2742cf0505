"""Does a suggested fix pay off? Two suites, each program with a 'before' and an 'after' variant:

- GPU (default): benchmarks/fixes/*.py, one inefficiency each;
- ``--programs``: the analyzer's real-program suite, tests/analyzer_programs/ (third-party
  models built from configs and user-style programs; runs on the CPU).

For each: time both variants unprofiled in separate processes (median step time; the real
programs alternate before/after ``--rounds`` times and keep each variant's best, on the CPU of
its fastest step, the machine may be shared; DEEPCONTEXT_SUITE_DEVICE=cuda runs them on the
GPU), record both with deepcontext, check that `analyze` flags the 'before'
program as expected and leaves no warning on the 'after' one, and show `deepcontext diff`.

Usage: python benchmarks/fix_gains.py OUT_DIR [case,case]
       python benchmarks/fix_gains.py OUT_DIR --programs [name,name] [--rounds N]"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

FIXES = Path(__file__).parent / "fixes"
PROGRAMS = Path(__file__).parents[1] / "tests" / "analyzer_programs"
CASES = {"fusion": "kernel_fusion", "sync": "sync", "precision": "precision", "memcpy": "memcpy",
         "optimizer": "optimizer"}


def run(args: list[str], cwd: Path = FIXES, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=cwd, **kw)


def median_step(program: str, variant: str, cwd: Path = FIXES,
                key: str = "median_step_s") -> float:
    env = {**os.environ, "DEEPCONTEXT_FIX_TIMING": "1"}
    proc = run([sys.executable, program, variant], cwd=cwd, env=env)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('{"median_step_s"')]
    return json.loads(lines[-1])[key]


def findings(profile: Path) -> list[dict]:
    proc = run([sys.executable, "-m", "deepcontext", "analyze", str(profile), "--format", "json"])
    return json.loads(proc.stdout)["findings"] if proc.returncode == 0 else []


def record(out: Path, name: str, program: str, variant: str, cwd: Path) -> Path:
    path = out / f"{name}_{variant}.dcprof"
    path.unlink(missing_ok=True)
    rec = run([sys.executable, "-m", "deepcontext", "record", "-o", str(path), "--",
               sys.executable, program, variant], cwd=cwd,
              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if rec.returncode != 0:
        raise RuntimeError(rec.stderr[-2000:])
    return path


def warnings_of(found: list[dict]) -> list[dict]:
    return [f for f in found if f["severity"] != "note"]


def label(f: dict) -> str:
    loc = f.get("location") or {}
    origin = f" (in {f['evidence']['library_function']})" if "library_function" in f[
        "evidence"] else ""
    return f"{f['severity']} {f['rule']} at {Path(loc.get('file', '?')).name}:{loc.get('line')}" \
           + origin


def main(out: Path, names: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows = ["| inefficiency | rule fired (before) | warnings left (after) | step before | step after | gain |",
            "|---|---|---|---|---|---|"]
    for name in names:
        category = CASES[name]
        program = f"{name}.py"
        before_t = median_step(program, "before")
        after_t = median_step(program, "after")
        profiles = {v: record(out, name, program, v, FIXES) for v in ("before", "after")}
        fb, fa = findings(profiles["before"]), findings(profiles["after"])
        fired = [f for f in fb if f["category"] == category]
        left = [f"{f['severity']} {f['rule']}" for f in warnings_of(fa)]
        where = (f"{fired[0]['severity']} {fired[0]['rule']} at "
                 f"{(fired[0].get('location') or {}).get('line')}") if fired else "NO"
        left_text = ", ".join(left) if left else "none"
        rows.append(f"| {name} ({category}) | {where} | {left_text} | "
                    f"{before_t * 1e3:.2f} ms | {after_t * 1e3:.2f} ms | {before_t / after_t:.2f}x |")
        diff = run([sys.executable, "-m", "deepcontext", "diff", str(profiles["before"]),
                    str(profiles["after"])])
        (out / f"{name}_diff.txt").write_text(diff.stdout + diff.stderr)
        (out / f"{name}_findings.json").write_text(json.dumps({"before": fb, "after": fa}, indent=1))
        print(rows[-1], flush=True)
    (out / "fix_gains.md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))


def programs(out: Path, names: list[str], rounds: int) -> None:
    # on the CPU the fastest step (the least disturbed one on a shared machine), else the median
    step_key = "median_step_s" if os.environ.get("DEEPCONTEXT_SUITE_DEVICE") == "cuda" \
        else "min_step_s"
    """The real-program suite: every warning on 'before' is checked by the measured gain of
    its fix; well-written programs are recorded once and must have no warning."""
    sys.path.insert(0, str(PROGRAMS))
    from _suite import SUITE

    out.mkdir(parents=True, exist_ok=True)
    rows = ["| program | warnings and errors (as written) | warnings left (after the fix) "
            "| step before | step after | gain |", "|---|---|---|---|---|---|"]
    for name in names:
        program = f"{name}.py"
        variants = ("before", "after") if SUITE[name] else ("before",)
        profiles = {v: record(out, name, program, v, PROGRAMS) for v in variants}
        found = {v: findings(p) for v, p in profiles.items()}
        (out / f"{name}_findings.json").write_text(json.dumps(found, indent=1))
        fired = "; ".join(label(f) for f in warnings_of(found["before"])) or "none"
        if not SUITE[name]:
            rows.append(f"| {name} (well-written) | {fired} | - | - | - | - |")
            print(rows[-1], flush=True)
            continue
        times: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(rounds):  # alternate, so load on a shared machine hits both alike
            for v in times:
                times[v].append(median_step(program, v, PROGRAMS, step_key))
        best = {v: min(t) for v, t in times.items()}
        left = "; ".join(label(f) for f in warnings_of(found["after"])) or "none"
        rows.append(f"| {name} | {fired} | {left} | {best['before'] * 1e3:.1f} ms | "
                    f"{best['after'] * 1e3:.1f} ms | {best['before'] / best['after']:.2f}x |")
        diff = run([sys.executable, "-m", "deepcontext", "diff", str(profiles["before"]),
                    str(profiles["after"]), "--metric", "op.time"])
        (out / f"{name}_diff.txt").write_text(diff.stdout + diff.stderr)
        print(rows[-1], flush=True)
    (out / "fix_gains_programs.md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    args = sys.argv[1:]
    target = Path(args.pop(0) if args and not args[0].startswith("--") else "/tmp/fix_gains")
    if "--programs" in args:
        args.remove("--programs")
        rounds = 3
        if "--rounds" in args:
            i = args.index("--rounds")
            rounds = int(args[i + 1])
            del args[i:i + 2]
        sys.path.insert(0, str(PROGRAMS))
        from _suite import SUITE
        programs(target, args[0].split(",") if args else list(SUITE), rounds)
    else:
        main(target, args[0].split(",") if args else list(CASES))
