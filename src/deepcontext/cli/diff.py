"""``deepcontext diff BEFORE AFTER``: what changed per context (time, operators, kernels,
launches), with totals and the speedup, to prove a fix paid off."""

from __future__ import annotations

import argparse
import json
import sys

from ..analysis.diff import ContextDiff, ProfileDiff, diff_profiles, significant
from ..errors import DeepContextError
from ..render._safe import printable
from ..tree.metrics import format_value, unit_of
from ..tree.merge import select_rank
from ..tree.profile_file import load
from ._program import describe

HELP = "compare two profiles context by context: time, operators, kernels, launches, speedup"
SCHEMA = "deepcontext.diff/1"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("before", help="the profile before the change")
    p.add_argument("after", help="the profile after the change")
    p.add_argument("--rank", type=int, metavar="N",
                   help="compare rank N's own values of merged multi-rank profiles")
    p.add_argument("--rank-before", type=int, metavar="N",
                   help="rank of BEFORE (one job against itself: --rank-before 0 --rank-after 1)")
    p.add_argument("--rank-after", type=int, metavar="N", help="rank of AFTER")
    p.add_argument("--metric", help="metric to compare (default: gpu.time, else cpu.time, ...)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--threshold", type=float, default=0.01,
                   help="show contexts whose metric changed by at least this fraction of the "
                        "total (default 0.01)")
    p.add_argument("--match", choices=("exact", "function"), default="exact",
                   help="match lines exactly, or by function only (for code edited in between)")


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.threshold < 1:
        raise DeepContextError("--threshold is a fraction between 0 and 1")
    pick = lambda own: args.rank if own is None else own  # noqa: E731
    before = select_rank(load(args.before), pick(args.rank_before))
    after = select_rank(load(args.after), pick(args.rank_after))
    if args.metric:
        have = set(before.metric_names()) | set(after.metric_names())
        if args.metric not in have:
            raise DeepContextError(f"metric {args.metric!r} is in neither profile (they have: "
                                   f"{', '.join(sorted(have)) or 'none'})")
    d = diff_profiles(before, after, metric=args.metric, match=args.match)
    rows = significant(d, args.threshold)
    programs = (_program(before.metadata), _program(after.metadata))
    warning = different_programs(*programs)
    if args.format == "json":
        doc = to_json(d, rows, args)
        doc["programs"] = {"before": programs[0], "after": programs[1], "same": not warning}
        if warning:
            print(f"deepcontext: warning: {warning}", file=sys.stderr)
        sys.stdout.write(json.dumps(doc, indent=1, default=str) + "\n")
    else:
        sys.stdout.write(to_text(d, rows, args, warning))
    return 0


def _program(meta: dict) -> str | None:
    command = meta.get("command")
    if not isinstance(command, list) or not command:
        return None
    return describe([str(c) for c in command])


def different_programs(before: str | None, after: str | None) -> str:
    """A warning when the two profiles ran different programs ('' when they are one program,
    or a profile does not say what it ran)."""
    if before is None or after is None or before == after:
        return ""
    return (f"the profiles are of different programs ({printable(before)} and "
            f"{printable(after)}); only the contexts they share are compared")


def _ratio(before: float, after: float) -> float | None:
    return before / after if after > 0 else None


def to_json(d: ProfileDiff, rows: list[ContextDiff], args: argparse.Namespace) -> dict:
    """The ``deepcontext.diff/1`` document."""
    return {
        "schema": SCHEMA,
        "before": str(args.before),
        "after": str(args.after),
        "metric": d.metric,
        "match": args.match,
        "threshold": args.threshold,
        "speedup": _ratio(d.totals_before.get(d.metric, 0.0), d.totals_after.get(d.metric, 0.0)),
        "profiled_time": {"before": d.time_before, "after": d.time_after,
                          "speedup": _ratio(d.time_before, d.time_after)},
        "wall_time": {"before": d.wall_before, "after": d.wall_after,
                      "speedup": _ratio(d.wall_before, d.wall_after)},
        "totals": {m: {"before": d.totals_before.get(m, 0.0), "after": d.totals_after.get(m, 0.0),
                       "delta": d.totals_after.get(m, 0.0) - d.totals_before.get(m, 0.0)}
                   for m in sorted(set(d.totals_before) | set(d.totals_after))},
        "contexts": [{
            "context": r.label,
            "frames": [list(p) for p in r.key],
            "before": r.before, "after": r.after,
            "delta": {m: r.delta(m) for m in sorted(set(r.before) | set(r.after))},
            "ops": {n: {"before": b, "after": a} for n, (b, a) in r.changed_ops().items()},
            "kernels": {n: {"before": b, "after": a} for n, (b, a) in r.changed_kernels().items()},
            **({"ranks": {str(k): {"before": r.ranks_before.get(k, {}),
                                   "after": r.ranks_after.get(k, {})}
                          for k in sorted(set(r.ranks_before) | set(r.ranks_after))}}
               if len(set(r.ranks_before) | set(r.ranks_after)) > 1 else {}),
        } for r in rows],
    }


def _op(name: str) -> str:
    """Backward ops read ``evaluate_function: MulBackward0``; keep the node name."""
    return name.split("evaluate_function: ", 1)[-1]


def _fmt(metric: str, value: float) -> str:
    return format_value(value, unit_of(metric))


_TOTALS = ("op.count", "op.time", "gpu.launches", "gpu.time", "sync.wait", "memcpy.time",
           "memcpy.bytes")


def _hint(d: ProfileDiff, metric: str) -> str:
    """Where nothing changed in ``metric``: the time metric that changed most, if any did."""
    best, name = 0.0, ""
    for other in ("gpu.time", "memcpy.time", "sync.wait", "op.time", "cpu.time"):
        b, a = d.totals_before.get(other, 0.0), d.totals_after.get(other, 0.0)
        if other != metric and max(a, b) > 0 and abs(b - a) / max(a, b) > max(best, 0.1):
            best, name = abs(b - a) / max(a, b), other
    return f"; {name} changed most: try --metric {name}" if name else ""


def to_text(d: ProfileDiff, rows: list[ContextDiff], args: argparse.Namespace,
            warning: str = "") -> str:
    m = d.metric
    tb, ta = d.totals_before.get(m, 0.0), d.totals_after.get(m, 0.0)
    speed = _ratio(tb, ta)
    out = [f"diff {printable(str(args.before))} -> {printable(str(args.after))}  ({m})",
           *([f"warning: {warning}"] if warning else []),
           f"total {m}: {_fmt(m, tb)} -> {_fmt(m, ta)}"
           + (f"  speedup {speed:.2f}x" if speed else "")]
    pt = _ratio(d.time_before, d.time_after)
    if pt:
        out.append(f"profiled time outside imports: {format_value(d.time_before, 's')} -> "
                   f"{format_value(d.time_after, 's')}  speedup {pt:.2f}x")
    for other in _TOTALS:
        if other != m and (d.totals_before.get(other) or d.totals_after.get(other)):
            out.append(f"total {other}: {_fmt(other, d.totals_before.get(other, 0.0))} -> "
                       f"{_fmt(other, d.totals_after.get(other, 0.0))}")
    out.append("")
    if not rows:
        out.append(f"no context changed by {100 * args.threshold:g}% of the total or more"
                   + _hint(d, m))
    for r in rows:
        delta = r.delta(m)
        sign = "+" if delta > 0 else "-"
        out.append(f"{_fmt(m, r.before.get(m, 0.0)):>9} -> {_fmt(m, r.after.get(m, 0.0)):>9}  "
                   f"({sign}{_fmt(m, abs(delta))})  {printable(r.label)}")
        ranks = sorted(set(r.ranks_before) | set(r.ranks_after))
        if len(ranks) > 1:  # merged jobs: each rank's own change
            out.append("      ranks: " + ", ".join(
                f"r{k} {_fmt(m, r.ranks_before.get(k, {}).get(m, 0.0))}->"
                f"{_fmt(m, r.ranks_after.get(k, {}).get(m, 0.0))}" for k in ranks))
        ops = r.changed_ops()
        if ops:
            shown = sorted(ops.items(), key=lambda kv: -abs(kv[1][1] - kv[1][0]))[:6]
            out.append("      ops: " + ", ".join(f"{printable(_op(n))} {b:.0f}->{a:.0f}"
                                                 for n, (b, a) in shown)
                       + (f" (+{len(ops) - 6} more)" if len(ops) > 6 else ""))
        kernels = r.changed_kernels()
        if kernels:
            lb = sum(r.kernels_before.values())
            la = sum(r.kernels_after.values())
            out.append(f"      launches: {lb:.0f}->{la:.0f}, kernels: "
                       + ", ".join(f"{printable(n)[:60]} {b:.0f}->{a:.0f}"
                                   for n, (b, a) in list(kernels.items())[:4]))
    return "\n".join(out) + "\n"
