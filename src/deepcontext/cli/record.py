"""``deepcontext record``: run a program under the profiler, unchanged.

The checks run here, then this process becomes the program (exec), so its stdin, stdout,
stderr, signals and exit status are the program's own. A bootstrap ``sitecustomize`` starts
the profiler inside the first Python interpreter the command runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from ..capture.ranks import check_outputs_free
from ..capture.session import default_output, parse_context, per_rank
from ..errors import DeepContextError
from ..tree.profile_file import check_writable

HELP = "run a command (python script.py, python -m module, a console script) under the profiler"

BOOTSTRAP_DIR = Path(__file__).resolve().parent.parent / "capture" / "bootstrap"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", help="profile file to write (default: <program>.dcprof, never overwriting)")
    p.add_argument("-f", "--force", action="store_true", help="overwrite an existing output file")
    p.add_argument("--context", default=None,
                   help="layers in each context: python,op,native,gpu (default python,op,gpu)")
    p.add_argument("--flush-interval", type=float, default=10.0, metavar="SECONDS",
                   help="write the profile every SECONDS (default 10) so a killed run keeps data")
    p.add_argument("--sample-interval", type=float, default=0.01, metavar="SECONDS",
                   help="CPU time between samples per thread (default 0.01; 0 turns sampling off)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")


def _program_stem(command: list[str]) -> str:
    args = command[1:] if _is_python(command[0]) else command
    while args and args[0].startswith("-") and args[0] != "-m":
        args = args[1:]
    if len(args) >= 2 and args[0] == "-m":
        return args[1].split(".")[-1]
    return Path(args[0]).stem if args else "python"


def _is_python(exe: str) -> bool:
    name = Path(exe).name
    return name.startswith("python") and all(c.isdigit() or c == "." for c in name[6:])


def resolve_command(command: list[str]) -> list[str]:
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise DeepContextError("no command to run; usage: deepcontext record [OPTIONS] -- COMMAND [ARGS...]")
    exe = command[0]
    if exe.endswith(".py") and not _is_python(exe):
        command = [sys.executable, *command]
        exe = command[0]
    if shutil.which(exe) is None and not (os.sep in exe and os.access(exe, os.X_OK)):
        raise DeepContextError(f"command not found: {exe}")
    if _is_python(exe) and len(command) > 1 and command[1].endswith(".py") and not os.path.isfile(command[1]):
        raise DeepContextError(f"script not found: {command[1]}")
    if _is_python(exe):
        _refuse_flags_that_skip_the_bootstrap(command[1:])
    return command


def _refuse_flags_that_skip_the_bootstrap(args: list[str]) -> None:
    """-E/-I ignore PYTHONPATH and -S skips sitecustomize: the program would run unprofiled
    and no profile would appear, so say it before anything runs."""
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-") or arg in ("-", "--") or arg.startswith("--"):
            return  # the script (or long options, which take no bootstrap-relevant flags)
        letters = arg[1:]
        for j, letter in enumerate(letters):
            if letter in "EIS":
                raise DeepContextError(
                    f"python -{letter} skips the bootstrap deepcontext record relies on; drop the "
                    "flag, or profile with the API (deepcontext.profile) instead")
            if letter in "cm":  # -c CODE / -m MODULE: the rest are the program's arguments
                return
            if letter in "WX":  # -W ARG / -X OPT: the value is attached or the next argument
                if j == len(letters) - 1:
                    i += 1
                break
        i += 1


def prepare(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """Validate everything and build the command and environment to exec (no side effects)."""
    command = resolve_command(list(args.command))
    context = parse_context(args.context)
    if args.flush_interval <= 0:
        raise DeepContextError("--flush-interval must be positive")
    if args.sample_interval < 0:
        raise DeepContextError("--sample-interval must be >= 0")
    # One file per rank in a multi-rank job: no two processes ever write one path.
    output = per_rank(args.output) if args.output else default_output(_program_stem(command))
    check_writable(output, force=args.force)
    check_outputs_free(output, force=args.force)  # the per-rank files of a launched job
    config = {
        "output": str(output.absolute()),
        "context": list(context),
        "flush_interval": args.flush_interval,
        "sample_interval": args.sample_interval,
        "force": bool(args.force),
        "command": command,
    }
    env = dict(os.environ)
    env["DEEPCONTEXT_RECORD"] = json.dumps(config)
    env["PYTHONPATH"] = os.pathsep.join([str(BOOTSTRAP_DIR), *filter(None, [env.get("PYTHONPATH")])])
    return command, env


def run(args: argparse.Namespace) -> int:
    command, env = prepare(args)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(command[0], command, env)
    except OSError as e:
        raise DeepContextError(f"cannot run {command[0]}: {e.strerror}") from None
    return 0  # not reached
