"""Pools the rounds of several models.py runs (their --json files) into one table per model:
the median of every paired CPU ratio over all the runs' rounds, with its interquartile range.
One run's 40 rounds on the 2-core CPU VM leave a model's median ~0.02 apart from the next
run's; three runs pooled give each model 120 pairs.

    python benchmarks/models_pool.py RUN1.json RUN2.json RUN3.json

The table has each profiled mode, torch.profiler (its own rounds), and, for the first two modes,
the ratio of the first to the second in the same round (a mode against its floor, e.g.
python,op,gpu against python,op,gpu%op-empty-callbacks).
"""

from __future__ import annotations

import argparse
import json
import statistics


def _cell(xs: list[float]) -> str:
    q = statistics.quantiles(xs, n=4)
    return f"{statistics.median(xs):.3f} ({q[0]:.2f}-{q[2]:.2f})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="models.py --json files")
    runs = [json.load(open(f))["results"] for f in p.parse_args().runs]
    # (every model of any run, in the order first seen: one device call's run may hold only some)
    models = list(dict.fromkeys(m for run in runs for m in run))
    modes = [m for m in runs[0][models[0]]["rounds"][0] if m != "off"]  # (models[0]: runs[0]'s)
    cols = modes + (["first / second"] if len(modes) >= 2 else []) + ["torch"]
    medians: dict[str, list[float]] = {c: [] for c in cols}
    print("| model | rounds | " + " | ".join(f"{c} CPU (IQR)" for c in cols) + " |")
    print("|---|---:|" + "---:|" * len(cols))
    for model in models:
        ratios: dict[str, list[float]] = {c: [] for c in cols}
        for run in runs:
            for rd in run.get(model, {}).get("rounds", []):
                for m in modes:
                    ratios[m].append(rd[m]["cpu"] / rd["off"]["cpu"])
                if len(modes) >= 2:
                    ratios["first / second"].append(rd[modes[0]]["cpu"] / rd[modes[1]]["cpu"])
            for rd in run.get(model, {}).get("torch_rounds", []):
                ratios["torch"].append(rd["torch"]["cpu"] / rd["off"]["cpu"])
        cells = []
        for c in cols:
            if len(ratios[c]) < 2:
                cells.append("")
                continue
            medians[c].append(statistics.median(ratios[c]))
            cells.append(_cell(ratios[c]))
        print(f"| {model} | {len(ratios[modes[0]])} | " + " | ".join(cells) + " |")
    print("\nMedians over the models: " + ", ".join(
        f"{c} {statistics.median(v):.3f}" for c, v in medians.items() if v))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
