"""What program a command runs: shared by record (its default file name) and diff (are two
profiles of one program?)."""

from __future__ import annotations

from pathlib import Path


def is_python(exe: str) -> bool:
    name = Path(exe).name
    return name.startswith("python") and all(c.isdigit() or c == "." for c in name[6:])


def program_of(command: list[str]) -> tuple[str, str]:
    """``("script", path)``, ``("module", name)``, ``("code", text)`` for ``python -c``,
    ``("stdin", "")`` for ``python -`` or a bare interpreter, or ``("command", exe)``."""
    if not command:
        return "stdin", ""
    if not is_python(command[0]):
        return "command", command[0]
    args = command[1:]
    while args:
        arg = args[0]
        if arg == "-m" and len(args) >= 2:
            return "module", args[1]
        if arg == "-c" and len(args) >= 2:
            return "code", args[1]
        if arg.startswith("-") and arg != "-":
            # -W ARG / -X OPT take the next argument when not attached
            args = args[2:] if arg in ("-W", "-X") else args[1:]
            continue
        return ("stdin", "") if arg == "-" else ("script", arg)
    return "stdin", ""


def program_stem(command: list[str]) -> str:
    """A file name stem for the command's profile: ``train`` for ``python train.py``,
    ``python-c`` for ``python -c CODE``."""
    kind, value = program_of(command)
    if kind == "module":
        return value.split(".")[-1] or "python-m"
    if kind == "code":
        return "python-c"
    if kind == "stdin":
        return "python"
    stem = Path(value).stem if kind == "script" else Path(value).name
    return stem or "program"


def describe(command: list[str]) -> str:
    """The program, for a message and to compare runs: ``train.py``, ``-m pkg.mod``,
    ``-c 'import x'``."""
    kind, value = program_of(command)
    if kind == "module":
        return f"-m {value}"
    if kind == "code":
        short = value if len(value) <= 40 else value[:37] + "..."
        return f"-c {short!r}"
    if kind == "stdin":
        return "python (stdin)"
    return Path(value).name  # the same script run from another directory is the same program
