"""The native core, imported once, with a clear message when the build is missing."""

from __future__ import annotations

from ..errors import DeepContextError

try:
    from .. import _core as core  # type: ignore[attr-defined]
except ImportError as e:  # pragma: no cover - only on a broken install
    raise DeepContextError(
        f"deepcontext's native core is not built ({e}); reinstall with: pip install ."
    ) from None

__all__ = ["core"]
