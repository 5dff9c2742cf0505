"""Does a suggested fix pay off? For each inefficiency in benchmarks/fixes/: time the program
before and after the fix (unprofiled, separate processes), record both with deepcontext, check
that `analyze` flags the 'before' program in the expected category and not the 'after' one, and
show `deepcontext diff`. GPU only. Usage: python benchmarks/fix_gains.py OUT_DIR [case,case]"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

FIXES = Path(__file__).parent / "fixes"
CASES = {"fusion": "kernel_fusion", "sync": "sync", "precision": "precision", "memcpy": "memcpy",
         "optimizer": "optimizer"}


def run(args: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=FIXES, **kw)


def median_step(program: str, variant: str) -> float:
    proc = run([sys.executable, program, variant])
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])["median_step_s"]


def findings(profile: Path) -> list[dict]:
    proc = run([sys.executable, "-m", "deepcontext", "analyze", str(profile), "--format", "json"])
    return json.loads(proc.stdout)["findings"] if proc.returncode == 0 else []


def main(out: Path, names: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows = ["| inefficiency | rule fired (before) | warnings left (after) | step before | step after | gain |",
            "|---|---|---|---|---|---|"]
    for name in names:
        category = CASES[name]
        program = f"{name}.py"
        before_t = median_step(program, "before")
        after_t = median_step(program, "after")
        profiles = {}
        for v in ("before", "after"):
            profiles[v] = out / f"{name}_{v}.dcprof"
            profiles[v].unlink(missing_ok=True)
            rec = run([sys.executable, "-m", "deepcontext", "record", "-o", str(profiles[v]), "--",
                       sys.executable, program, v], env={**os.environ, "PYTHONUNBUFFERED": "1"})
            if rec.returncode != 0:
                raise RuntimeError(rec.stderr[-2000:])
        fb, fa = findings(profiles["before"]), findings(profiles["after"])
        fired = [f for f in fb if f["category"] == category]
        left = [f"{f['severity']} {f['rule']}" for f in fa if f["severity"] != "note"]
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


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/fix_gains"),
         sys.argv[2].split(",") if len(sys.argv) > 2 else list(CASES))
