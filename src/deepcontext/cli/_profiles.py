"""Which profile a reading command works on when none is named: the newest one here."""

from __future__ import annotations

import sys
from pathlib import Path

from ..capture.session import paste_safe
from ..errors import DeepContextError


def newest_profile(directory: str | Path = ".") -> Path:
    """The most recently written ``*.dcprof`` in ``directory``."""
    candidates = []
    for p in Path(directory).glob("*.dcprof"):
        try:
            candidates.append((p.stat().st_mtime_ns, p.name, p))
        except OSError:
            continue
    if not candidates:
        raise DeepContextError("no profile named and no .dcprof file in this directory; record "
                               "one with: deepcontext record -- python train.py")
    return max(candidates)[2]


def profile_argument(value: str | None, command: str) -> str:
    """``value``, or the newest profile here (saying which, on stderr, so output is never of a
    file the user did not mean)."""
    if value:
        return value
    path = newest_profile()
    print(f"deepcontext: {command} {paste_safe(str(path))} (the newest profile here)",
          file=sys.stderr, flush=True)
    return str(path)
