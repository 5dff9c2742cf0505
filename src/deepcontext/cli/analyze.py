"""``deepcontext analyze``: expert rules over a profile -> ranked findings (text, JSON, SARIF)."""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from ..analysis import AnalysisContext, analyze, default_rules, load_rules_file
from ..analysis.finding import SEVERITIES
from ..errors import DeepContextError
from ..render.findings import FindingsReport, render, renderers
from ..tree.profile_file import check_writable, load
from ._profiles import profile_argument
from ..tree.merge import select_rank

HELP = "find what to fix: ranked findings with evidence, your source line and a concrete fix"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?",
                   help="a .dcprof profile (default: the newest one in this directory)")
    p.add_argument("--rank", type=int, metavar="N",
                   help="one rank's own values of a merged multi-rank profile")
    p.add_argument("--format", choices=sorted(renderers()), default="text")
    p.add_argument("--rules", action="append", default=[], metavar="FILE.py",
                   help="also run the rules defined in FILE.py (Rule subclasses or a RULES "
                        "list); repeatable")
    p.add_argument("--min-severity", choices=SEVERITIES, default="note",
                   help="hide findings below this severity (default: note, show all)")
    p.add_argument("-o", "--output", metavar="OUT", help="write to OUT instead of stdout")
    p.add_argument("--list-rules", action="store_true",
                   help="print every rule with its thresholds and exit")


def run(args: argparse.Namespace) -> int:
    rules = default_rules()
    for path in args.rules:
        extra = load_rules_file(path)
        taken = {r.id for r in rules}
        clash = [r.id for r in extra if r.id in taken]
        if clash:
            raise DeepContextError(f"--rules {path}: rule id {clash[0]!r} is already defined")
        rules += extra
    if args.list_rules:
        sys.stdout.write(_rules_listing(rules))
        return 0
    args.file = profile_argument(args.file, "analyze")
    out = check_writable(args.output, force=True) if args.output else None
    tree = select_rank(load(args.file), args.rank)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        findings = analyze(tree, rules=rules, min_severity=args.min_severity)
    for w in caught:
        print(f"deepcontext: warning: {w.message}", file=sys.stderr)
    ctx = AnalysisContext(tree)
    report = FindingsReport(findings=findings, profile=str(args.file), rules=rules,
                            profiled_time=ctx.profiled_time, wall_time=ctx.wall_time,
                            profiled_metric=ctx.profiled_metric,
                            profiled_times=ctx.profiled_times,
                            metadata=tree.metadata)
    text = render(report, args.format)
    if out is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        try:
            Path(out).write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
        except OSError as e:
            raise DeepContextError(f"cannot write {out}: {e.strerror}") from None
        print(f"deepcontext: {len(findings)} findings written to {out}", file=sys.stderr)
    return 0


def _rules_listing(rules: list) -> str:
    lines = []
    for r in rules:
        lines.append(f"{r.id}  [{r.category}]  {r.description}")
        for name, th in r.thresholds.items():
            lines.append(f"    {name} = {r.t(name):g}  ({th.why})")
    return "\n".join(lines) + "\n"
