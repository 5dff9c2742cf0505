"""Names come from the profiled program: make them inert for terminals and markup."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def printable(text: str, limit: int = 300) -> str:
    """Control characters (ANSI escapes included) shown as ``\\xNN``, lone surrogates as
    ``\\udXXX``, and very long names shortened in the middle."""
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    if len(text) > limit:
        half = limit // 2 - 2
        text = f"{text[:half]} ... {text[-half:]}"
    return text
