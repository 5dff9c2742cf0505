"""``deepcontext`` command line: one module per subcommand, each with ``add_parser`` and ``run``."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from ..errors import DeepContextError
from ..render._safe import printable

#: subcommand -> module (each defines HELP, add_arguments(parser) and run(args) -> int)
SUBCOMMANDS = {
    "record": "record",
    "report": "report",
    "analyze": "analyze",
    "view": "view",
    "export": "export",
    "diff": "diff",
    "merge": "merge",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        raise DeepContextError(f"{message} (see: {self.prog} --help)")


def _load(name: str):
    return importlib.import_module(f"deepcontext.cli.{SUBCOMMANDS[name]}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or (``only``) one with just that subcommand: each run imports only the
    module it needs, so it starts fast and a broken module cannot take the others down."""
    parser = _Parser(prog="deepcontext",
                     description="Calling-context profiler for deep-learning programs.")
    parser.add_argument("--version", action="version", version="deepcontext 0.1.0")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in SUBCOMMANDS:
        if only is not None and name != only:
            continue
        try:
            mod = _load(name)
        except ImportError:
            continue
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_module=mod)
    return parser


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Pure parsing, no side effects (tested directly)."""
    argv = list(argv)
    only = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    if only is not None:
        try:
            _load(only)
        except ImportError:
            only = None  # the full parser names the commands that do exist
    args = build_parser(only).parse_args(argv)
    if getattr(args, "_module", None) is None:
        raise DeepContextError("no command given (see: deepcontext --help)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parse_args(argv)
        return int(args._module.run(args) or 0)
    except DeepContextError as e:
        # One line, inert: messages quote file names, which may hold newlines or escapes.
        print(f"deepcontext: error: {printable(str(e), 2000)}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("deepcontext: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
