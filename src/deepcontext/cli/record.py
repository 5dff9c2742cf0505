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

from ..capture.hooks import check_loadable, load_hooks
from ..capture.ranks import check_outputs_free
from ..capture.session import default_output, parse_context, per_rank
from ..errors import DeepContextError
from ..tree.profile_file import check_writable
from ._program import is_python, program_stem

HELP = "run a command (python script.py, python -m module, a console script) under the profiler"

BOOTSTRAP_DIR = Path(__file__).resolve().parent.parent / "capture" / "bootstrap"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", help="profile file to write (default: <program>.dcprof, never overwriting)")
    p.add_argument("-f", "--force", action="store_true", help="overwrite an existing output file")
    p.add_argument("--context", default=None,
                   help="layers in each context: python,module,op,native,gpu,memory,jax,pc "
                        "(default python,op,gpu,jax; module is opt-in)")
    p.add_argument("--pc-kernels", metavar="REGEX",
                   help="pc layer: keep PC samples only of kernels whose name matches REGEX")
    p.add_argument("--pc-mode", choices=("continuous", "serialized"),
                   help="pc layer: continuous (default) or serialized (kernels one at a time; "
                        "samples joined to their exact launch context)")
    p.add_argument("--pc-period", type=int, metavar="LOG2",
                   help="pc layer: sample every 2^LOG2 cycles (5-31; default CUPTI's)")
    p.add_argument("--flush-interval", type=float, default=10.0, metavar="SECONDS",
                   help="write the profile every SECONDS (default 10) so a killed run keeps data")
    p.add_argument("--sample-interval", type=float, default=0.01, metavar="SECONDS",
                   help="CPU time between samples per thread (default 0.01; 0 turns sampling off)")
    p.add_argument("--hooks", metavar="FILE", default=None,
                   help="TOML file of runtime functions to intercept (docs/hooks.md)")
    p.add_argument("--perf", action="store_true",
                   help="CPU counters (page faults, context switches, ...) per context")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")


def resolve_command(command: list[str]) -> list[str]:
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise DeepContextError("no command to run; usage: deepcontext record [OPTIONS] -- COMMAND [ARGS...]")
    exe = command[0]
    if exe.endswith(".py") and not is_python(exe):
        command = [sys.executable, *command]
        exe = command[0]
    if shutil.which(exe) is None and not (os.sep in exe and os.access(exe, os.X_OK)):
        raise DeepContextError(f"command not found: {exe}")
    if is_python(exe) and len(command) > 1 and command[1].endswith(".py") and not os.path.isfile(command[1]):
        raise DeepContextError(f"script not found: {command[1]}")
    if is_python(exe):
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
    output = per_rank(args.output) if args.output else default_output(program_stem(command))
    check_writable(output, force=args.force)
    hooks = load_hooks(args.hooks) if args.hooks else ()
    if hooks:
        check_loadable(hooks, args.hooks)
    if args.perf and args.sample_interval == 0:
        raise DeepContextError("--perf reads counters at CPU-time samples; it needs --sample-interval > 0")
    check_outputs_free(output, force=args.force)  # the per-rank files of a launched job
    config = {
        "output": str(output.absolute()),
        "context": list(context),
        "flush_interval": args.flush_interval,
        "sample_interval": args.sample_interval,
        "force": bool(args.force),
        "command": command,
        "hooks": [h.to_dict() for h in hooks],
        "perf": bool(args.perf),
    }
    env = dict(os.environ)
    pc_options = {"DEEPCONTEXT_PC_KERNELS": args.pc_kernels, "DEEPCONTEXT_PC_MODE": args.pc_mode,
                  "DEEPCONTEXT_PC_PERIOD": None if args.pc_period is None else str(args.pc_period)}
    env.update({k: v for k, v in pc_options.items() if v is not None})
    if "pc" in context:
        from ..capture.pc import Settings

        try:
            Settings.from_env(env)
        except ValueError as e:
            raise DeepContextError(str(e)) from None
    elif any(v is not None for v in pc_options.values()):
        raise DeepContextError("--pc-kernels/--pc-mode/--pc-period need pc in --context")
    env["DEEPCONTEXT_RECORD"] = json.dumps(config)
    env["PYTHONPATH"] = os.pathsep.join([str(BOOTSTRAP_DIR), *filter(None, [env.get("PYTHONPATH")])])
    return command, env


def _program_python(command: list[str]) -> str | None:
    """The interpreter the program runs on: the command itself, or a console script's shebang."""
    exe = shutil.which(command[0]) or command[0]
    if is_python(command[0]):
        return exe
    try:
        with open(exe, "rb") as fh:
            line = fh.readline(512)
    except OSError:
        return None
    parts = line[2:].decode(errors="replace").split() if line.startswith(b"#!") else []
    if parts and Path(parts[0]).name == "env" and len(parts) > 1:
        parts = [shutil.which(parts[1]) or parts[1]]
    return parts[0] if parts and is_python(parts[0]) else None


def _build_torch_hook(command: list[str], env: dict[str, str]) -> None:
    """Build the compiled operator hook now, before the program runs, so its first-use compile
    (20-40 s) never happens inside the program's ``import torch``. If the build fails, the
    program uses the dispatch tier at once instead of failing the same build again."""
    from ..capture import torch_ops

    python = _program_python(command)
    if python is None or env.get("DEEPCONTEXT_TORCH_TIER") == "dispatch":
        return
    if not torch_ops.build_before_start(python, dict(os.environ)):
        env["DEEPCONTEXT_TORCH_TIER"] = "dispatch"


def run(args: argparse.Namespace) -> int:
    command, env = prepare(args)
    if "op" in json.loads(env["DEEPCONTEXT_RECORD"])["context"]:
        _build_torch_hook(command, env)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(command[0], command, env)
    except OSError as e:
        raise DeepContextError(f"cannot run {command[0]}: {e.strerror}") from None
    return 0  # not reached
