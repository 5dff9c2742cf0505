"""``deepcontext report``: the calling context tree in the terminal or as JSON."""

from __future__ import annotations

import argparse
import re
import sys

from ..errors import DeepContextError
from ..render import json_tree, text
from ..tree import views
from ..tree.profile_file import load
from ._profiles import profile_argument
from ..tree.merge import select_rank

HELP = "print a profile's calling context tree (top-down, inverted or flat; text or JSON)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?",
                   help="a .dcprof profile (default: the newest one in this directory)")
    p.add_argument("--rank", type=int, metavar="N",
                   help="one rank's own values of a merged multi-rank profile")
    p.add_argument("--metric", help="metric to rank by (default: gpu.time if present, else cpu.time)")
    p.add_argument("--depth", type=int, help="show at most this many levels")
    p.add_argument("--threshold", type=float, default=None,
                   help="hide nodes below this fraction of the total (default 0.005 for text, 0 for JSON)")
    p.add_argument("--include", metavar="REGEX", help="only contexts through a frame matching REGEX")
    p.add_argument("--exclude", metavar="REGEX", help="drop subtrees at frames matching REGEX")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--inverted", action="store_true", help="bottom-up: hottest frames with their callers")
    view.add_argument("--flat", action="store_true", help="totals per line / operator / kernel")
    p.add_argument("--all-frames", action="store_true",
                   help="keep Python frames of libraries and the standard library (folded into "
                        "their callers by default)")
    p.add_argument("--format", choices=("text", "json"), default="text")


def validate(args: argparse.Namespace) -> None:
    if args.depth is not None and args.depth < 1:
        raise DeepContextError("--depth must be at least 1")
    if args.threshold is not None and not 0 <= args.threshold < 1:
        raise DeepContextError("--threshold is a fraction between 0 and 1")
    for name in ("include", "exclude"):
        pattern = getattr(args, name)
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as e:
                raise DeepContextError(f"--{name}: invalid regular expression: {e}") from None


def run(args: argparse.Namespace) -> int:
    validate(args)
    tree = select_rank(load(profile_argument(args.file, "report")), args.rank)
    metric = args.metric or tree.default_metric()
    if args.metric and args.metric not in tree.metric_names():
        have = ", ".join(tree.metric_names()) or "none"
        raise DeepContextError(f"metric {args.metric!r} is not in this profile (it has: {have})")
    if not args.all_frames:
        tree = views.user_frames(tree)
    if args.include or args.exclude:
        tree = views.filtered(tree, args.include, args.exclude)
    if args.format == "json":
        threshold = args.threshold or 0.0
        if args.flat:
            doc = json_tree.flat_document(tree, views.flat(tree), metric)
        elif args.inverted:
            doc = json_tree.tree_document(views.inverted(tree), metric, depth=args.depth,
                                          threshold=threshold, view="inverted")
        else:
            doc = json_tree.tree_document(tree, metric, depth=args.depth, threshold=threshold)
        sys.stdout.write(json_tree.dumps(doc) + "\n")
        return 0
    threshold = 0.005 if args.threshold is None else args.threshold
    console = text.console()
    text.render_header(console, tree)
    if args.flat:
        text.render_flat(console, views.flat(tree, [metric]), metric, tree.total(metric),
                         threshold=threshold)
    elif args.inverted:
        text.render_tree(console, views.inverted(tree), metric, depth=args.depth,
                         threshold=threshold, title="bottom-up")
    else:
        text.render_tree(console, tree, metric, depth=args.depth, threshold=threshold,
                         title="top-down")
    return 0
