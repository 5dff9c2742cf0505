"""Names come from the profiled program: make them inert for terminals and markup."""

from __future__ import annotations

import re

# C0/C1 controls (ANSI/OSC escapes, CR, BEL, NUL), bidirectional overrides and isolates
# ("Trojan Source" reordering), and the Unicode line/paragraph separators.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, limit: int = 300) -> str:
    """Control and reordering characters (ANSI escapes included) shown as ``\\xNN`` or
    ``\\uXXXX``, lone surrogates as ``\\udXXX``, and very long names shortened in the middle."""
    if len(text) > 4 * limit:  # bound the work on huge names before escaping
        text = f"{text[:2 * limit]}{text[-2 * limit:]}"
    text = _CONTROL.sub(_escape, text)
    text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    if len(text) > limit:
        half = limit // 2 - 2
        text = f"{text[:half]} ... {text[-half:]}"
    return text
