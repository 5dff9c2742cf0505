"""``deepcontext merge``: add several profiles into one (e.g. the per-rank files of one job)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import DeepContextError
from ..tree.merge import merge_profiles
from ..tree.profile_file import check_writable, load, save

HELP = "add profiles together (e.g. one file per rank) into one profile"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE", help="profiles to merge")
    p.add_argument("-o", "--output", required=True, help="merged profile to write")
    p.add_argument("-f", "--force", action="store_true", help="overwrite an existing output")


def run(args: argparse.Namespace) -> int:
    if len(args.files) < 2:
        raise DeepContextError("merge needs at least two profiles")
    output = check_writable(args.output, force=args.force)
    if any(Path(f).resolve() == output.resolve() for f in args.files):
        raise DeepContextError(f"{output} is also an input; write the merge to another file")
    trees = [load(f) for f in args.files]
    merged = merge_profiles(trees, [str(f) for f in args.files])
    save(merged, output, force=args.force)
    ranks = merged.ranks()
    kept = f"; per-rank values of ranks {_ranges(ranks)} kept" if ranks else ""
    print(f"merged {len(trees)} profiles into {output} ({len(merged.nodes):,} nodes{kept})")
    return 0


def _ranges(ranks: list[int]) -> str:
    """``0-3,8`` for [0, 1, 2, 3, 8]."""
    parts, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ",".join(parts)
