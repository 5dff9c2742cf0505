"""Typed frames: the steps of a calling context, from a Python line down to a GPU kernel.

A frame's identity is its kind plus all its attributes, so the same function reached from two
places yields two tree nodes, and equal frames from two runs compare equal (merge, diff).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PYTHON = "python"
MODULE = "module"
OP = "op"
NATIVE = "native"
KERNEL = "kernel"
MEMCPY = "memcpy"
MEMSET = "memset"
SYNC = "sync"
INSTRUCTION = "instruction"
HOOK = "hook"  # a call of a declared runtime function (docs/hooks.md)
THREAD = "thread"
MARKER = "marker"
ROOT = "root"

#: Every kind a frame may have, outermost layer first.
KINDS = (ROOT, THREAD, MARKER, PYTHON, MODULE, OP, NATIVE, KERNEL, MEMCPY, MEMSET, SYNC, INSTRUCTION,
         HOOK)
#: Kinds that happen on the GPU.
GPU_KINDS = frozenset({KERNEL, MEMCPY, MEMSET, INSTRUCTION})


@dataclass(frozen=True, slots=True)
class Frame:
    """One step of a call path.

    ``name`` is the function, operator, symbol or kernel name; ``file``/``line`` locate Python
    frames (for native frames ``file`` is the library); ``extra`` holds further attributes as
    sorted ``(key, value)`` pairs so that identity and output order are deterministic.
    """

    kind: str
    name: str
    file: str = ""
    line: int = 0
    extra: tuple[tuple[str, str], ...] = field(default=())

    @staticmethod
    def make(kind: str, name: str, file: str = "", line: int = 0, **extra: Any) -> Frame:
        return Frame(kind, name, file, line, tuple(sorted((k, str(v)) for k, v in extra.items())))

    def get(self, key: str, default: str = "") -> str:
        for k, v in self.extra:
            if k == key:
                return v
        return default

    def label(self) -> str:
        """A short human label: ``train.py:12 step`` for Python, the name for everything else."""
        if self.kind == PYTHON:
            return f"{self.name} ({_short(self.file)}:{self.line})"
        if self.kind == NATIVE and self.file:
            return f"{self.name} [{_short(self.file)}]"
        if self.kind == MODULE and self.get("class") not in ("", self.name):
            return f"{self.name} ({self.get('class')})"
        return self.name

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "name": self.name}
        if self.file:
            d["file"] = self.file
        if self.line:
            d["line"] = self.line
        for k, v in self.extra:
            d[k] = v
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Frame:
        extra = {k: v for k, v in d.items() if k not in ("kind", "name", "file", "line")}
        return Frame.make(d["kind"], d["name"], d.get("file", ""), int(d.get("line", 0)), **extra)


ROOT_FRAME = Frame(ROOT, "<root>")


def _short(path: str) -> str:
    return path.rsplit("/", 1)[-1]
