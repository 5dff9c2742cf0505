"""File paths as a person at this terminal would type them."""

from __future__ import annotations

import os
from functools import lru_cache


@lru_cache(maxsize=4096)
def shown_path(path: str) -> str:
    """``path`` relative to the working directory when it lies below it, else as recorded
    (``../../x`` is shorter but harder to read than the absolute path)."""
    if not path.startswith("/"):
        return path
    try:
        rel = os.path.relpath(path)
    except (ValueError, OSError):  # no working directory (deleted), or another drive
        return path
    return path if rel == ".." or rel.startswith("../") else rel
