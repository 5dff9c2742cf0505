"""``deepcontext merge``: add several profiles into one (e.g. the per-rank files of one job)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import DeepContextError
from ..tree.cct import CallingContextTree
from ..tree.profile_file import check_writable, load, save

HELP = "add profiles together (e.g. one file per rank) into one profile"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE", help="profiles to merge")
    p.add_argument("-o", "--output", required=True, help="merged profile to write")
    p.add_argument("-f", "--force", action="store_true", help="overwrite an existing output")


def merge(trees: list[CallingContextTree], sources: list[str]) -> CallingContextTree:
    """One tree with every context of every input; metrics of equal contexts are added."""
    out = CallingContextTree({
        "merged_from": sources,
        "command": trees[0].metadata.get("command"),
        "complete": all(t.metadata.get("complete") is True for t in trees),
        "notes": sorted({str(n) for t in trees for n in t.metadata.get("notes") or []}),
    })
    for tree in trees:
        out.merge(tree)
    return out


def run(args: argparse.Namespace) -> int:
    if len(args.files) < 2:
        raise DeepContextError("merge needs at least two profiles")
    output = check_writable(args.output, force=args.force)
    if any(Path(f).resolve() == output.resolve() for f in args.files):
        raise DeepContextError(f"{output} is also an input; write the merge to another file")
    trees = [load(f) for f in args.files]
    merged = merge(trees, [str(f) for f in args.files])
    save(merged, output, force=args.force)
    print(f"merged {len(trees)} profiles into {output} ({len(merged.nodes):,} nodes)")
    return 0
