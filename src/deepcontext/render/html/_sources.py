"""Source lines embedded into the viewer at export time, so the page needs no file access.

Bounded on purpose: only ``.py`` files of the user's program (not the standard library or
installed packages), and the ``.cu``/``.cuh`` files that sampled GPU instructions name, whole files up to ``WHOLE_FILE_LINES`` lines and windows around the
profiled lines beyond that, at most ``TOTAL_CHARS`` characters in all. A profile names files,
and only these are read, so viewing a foreign profile cannot pull arbitrary files into a page.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from dataclasses import dataclass, field
from typing import Any

from ...tree.cct import CallingContextTree
from ...tree.frame import INSTRUCTION, PYTHON

WHOLE_FILE_LINES = 3000
WINDOW = 30  # lines either side of a profiled line, in files longer than WHOLE_FILE_LINES
FILE_BYTES = 4 << 20  # never read more of one file than this
TOTAL_CHARS = 4_000_000


def _library_roots() -> list[str]:
    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(os.path.realpath(path))
    for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix):
        roots.add(os.path.realpath(os.path.join(prefix, "lib")))
    return sorted(roots)


#: suffixes of the source files embedded: Python, and CUDA (sampled instructions' lines)
SOURCE_SUFFIXES = (".py", ".cu", ".cuh")


def is_user_file(path: str, library_roots: list[str] | None = None) -> bool:
    """A source file (SOURCE_SUFFIXES) outside the interpreter's library and package directories."""
    if not path.endswith(SOURCE_SUFFIXES) or path.startswith("<"):
        return False
    if "site-packages" in path or "dist-packages" in path:
        return False
    try:
        real = os.path.realpath(path)
    except (ValueError, UnicodeError, OSError):  # NUL bytes, lone surrogates: not a real file
        return False
    roots = _library_roots() if library_roots is None else library_roots
    return not any(real == r or real.startswith(r + os.sep) for r in roots)


@dataclass
class SourceBundle:
    """What the page gets: line chunks per file, and why other files are missing."""

    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"files": self.files, "missing": self.missing}


def referenced_lines(tree: CallingContextTree) -> dict[str, set[int]]:
    """Source files named by the tree, with the lines that carry a frame: Python frames' files,
    and the ``source=file:line`` of sampled GPU instructions (Triton's Python, CUDA's .cu)."""
    out: dict[str, set[int]] = {}
    for node in tree.nodes:
        f = node.frame
        if f.kind == PYTHON and f.file:
            out.setdefault(f.file, set()).add(f.line)
        elif f.kind == INSTRUCTION and (source := f.get("source")):
            file, _, line = source.rpartition(":")
            if file and line.isdigit():
                out.setdefault(file, set()).add(int(line))
    return out


def _windows(lines: set[int], count: int) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for line in sorted(x for x in lines if x > 0):
        lo, hi = max(1, line - WINDOW), min(count, line + WINDOW)
        if spans and lo <= spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], max(hi, spans[-1][1]))
        elif lo <= hi:
            spans.append((lo, hi))
    return spans


def collect_sources(tree: CallingContextTree, total_chars: int = TOTAL_CHARS) -> SourceBundle:
    """Read the user files the tree references, within the size bounds."""
    bundle = SourceBundle()
    roots = _library_roots()
    budget = total_chars
    refs = referenced_lines(tree)
    for path in sorted(refs):
        if not is_user_file(path, roots):
            continue
        try:
            with open(path, "rb") as fh:
                raw = fh.read(FILE_BYTES + 1)
                mtime = os.fstat(fh.fileno()).st_mtime
        except OSError as e:
            bundle.missing[path] = f"not readable when the page was made ({e.strerror or e})"
            continue
        except (ValueError, UnicodeError):
            continue
        if len(raw) > FILE_BYTES or b"\x00" in raw:
            bundle.missing[path] = "not embedded (too large or not text)"
            continue
        lines = raw.decode("utf-8", "replace").splitlines()
        spans = [(1, len(lines))] if len(lines) <= WHOLE_FILE_LINES else _windows(refs[path], len(lines))
        chunks = [[lo, lines[lo - 1:hi]] for lo, hi in spans if lo <= hi]
        size = sum(len(text) + 1 for _, chunk in chunks for text in chunk)
        if size > budget:
            bundle.missing[path] = "not embedded (the page's source size limit was reached)"
            continue
        budget -= size
        bundle.files[path] = {"chunks": chunks, "lines": len(lines),
                              "mtime": mtime}
    return bundle
