"""Declared hooks (``--hooks FILE``): the functions of a device runtime without profiling
callbacks, read from a TOML file and checked before the program starts (docs/hooks.md).

    [[hook]]
    library = "libfakeaccel.so"   # soname or path of the library that defines the function
    function = "fa_launch"
    kind = "launch"               # launch | copy | sync | alloc | free | call
    bytes_arg = 1                 # optional: 0-based index of an integer argument holding bytes
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from ..errors import DeepContextError

__all__ = ["KINDS", "HookSpec", "load_hooks", "check_loadable", "hooks_from_config"]

#: Kinds of declared functions, in the order the native core numbers them.
KINDS = ("launch", "copy", "sync", "alloc", "free", "call")
_KEYS = {"library", "function", "kind", "bytes_arg"}
_MAX_BYTES_ARG = 15
# The profiler runs on these itself: hooking them would trace its own work.
_RUNTIME_LIBS = ("libc.so", "libc-", "ld-linux", "libpthread", "libdl.so", "libm.so",
                 "libstdc++", "libgcc_s", "librt.so")


@dataclass(frozen=True, slots=True)
class HookSpec:
    library: str
    function: str
    kind: str
    bytes_arg: int | None = None

    def native(self) -> tuple[str, str, int, int]:
        return (self.library, self.function, KINDS.index(self.kind),
                -1 if self.bytes_arg is None else self.bytes_arg)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"library": self.library, "function": self.function, "kind": self.kind}
        if self.bytes_arg is not None:
            d["bytes_arg"] = self.bytes_arg
        return d


def _spec(where: str, entry: Any) -> HookSpec:
    if not isinstance(entry, dict):
        raise DeepContextError(f"{where}: each [[hook]] must be a table")
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise DeepContextError(f"{where}: unknown key {unknown[0]!r} (keys: library, function, kind, bytes_arg)")
    for key in ("library", "function", "kind"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise DeepContextError(f"{where}: {key} must be a non-empty string")
    function = entry["function"]
    if not function.replace("_", "a").isalnum() or function[0].isdigit():
        raise DeepContextError(f"{where}: {function!r} is not a C function name")
    kind = entry["kind"]
    if kind not in KINDS:
        raise DeepContextError(f"{where}: unknown kind {kind!r}; choose from {' | '.join(KINDS)}")
    bytes_arg = entry.get("bytes_arg")
    if bytes_arg is not None and (isinstance(bytes_arg, bool) or not isinstance(bytes_arg, int)
                                  or not 0 <= bytes_arg <= _MAX_BYTES_ARG):
        raise DeepContextError(f"{where}: bytes_arg must be an argument index from 0 to {_MAX_BYTES_ARG}")
    library = entry["library"]
    base = os.path.basename(library)
    if any(base.startswith(p) for p in _RUNTIME_LIBS):
        raise DeepContextError(f"{where}: functions of {base} cannot be hooked (deepcontext itself runs on it)")
    return HookSpec(library, function, kind, bytes_arg)


def load_hooks(path: str | os.PathLike[str]) -> tuple[HookSpec, ...]:
    """Parse and check the shape of a hooks file; one-line errors name the file and the entry."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except OSError as e:
        raise DeepContextError(f"cannot read hooks file {p}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise DeepContextError(f"{p}: not valid TOML ({e})") from None
    unknown = sorted(set(data) - {"hook"})
    if unknown:
        raise DeepContextError(f"{p}: unknown table {unknown[0]!r} (declare functions as [[hook]])")
    entries = data.get("hook")
    if not isinstance(entries, list) or not entries:
        raise DeepContextError(f"{p}: no [[hook]] entries")
    specs = []
    seen: set[tuple[str, str]] = set()
    for i, entry in enumerate(entries, 1):
        spec = _spec(f"{p}: hook {i}", entry)
        if (spec.library, spec.function) in seen:
            raise DeepContextError(f"{p}: hook {i}: {spec.function} of {spec.library} is declared twice")
        seen.add((spec.library, spec.function))
        specs.append(spec)
    return tuple(specs)


# Run in a throwaway interpreter: loading a library runs its constructors, and the program's
# own process must not see a library it has not loaded yet.
_CHECK = r"""
import ctypes, json, sys
for lib, fns in json.loads(sys.argv[1]):
    try:
        h = ctypes.CDLL(lib, mode=ctypes.RTLD_LOCAL)
    except OSError as e:
        print(json.dumps(["library", lib, str(e)])); sys.exit(0)
    for fn in fns:
        if not hasattr(h, fn):
            print(json.dumps(["function", lib, fn])); sys.exit(0)
print("[]")
"""


def check_loadable(specs: Iterable[HookSpec], source: str = "hooks file") -> None:
    """Every library must load (as the program's loader would find it) and define its functions."""
    by_lib: dict[str, list[str]] = {}
    for s in specs:
        by_lib.setdefault(s.library, []).append(s.function)
    arg = json.dumps(sorted(by_lib.items()))
    try:
        proc = subprocess.run([sys.executable, "-I", "-S", "-c", _CHECK, arg], capture_output=True,
                              text=True, timeout=120)
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        raise DeepContextError(f"{source}: cannot check its libraries") from None
    if answer and answer[0] == "library":
        raise DeepContextError(f"{source}: library {answer[1]} not found ({answer[2]})")
    if answer and answer[0] == "function":
        raise DeepContextError(f"{source}: {answer[1]} has no function {answer[2]}")


def hooks_from_config(value: str | os.PathLike[str] | Iterable[Any] | None) -> tuple[HookSpec, ...]:
    """A session's hooks: a file path (parsed and checked), or specs / dicts checked already."""
    if value is None:
        return ()
    if isinstance(value, (str, os.PathLike)):
        specs = load_hooks(value)
        check_loadable(specs, str(value))
        return specs
    out = []
    for i, item in enumerate(value, 1):
        out.append(item if isinstance(item, HookSpec) else _spec(f"hook {i}", item))
    return tuple(out)
