"""Display forms of long names (the full name stays in every data format)."""

from __future__ import annotations

_OPERATOR_CHARS = set("<>=!+-*/%&|^~[]")


def short_symbol(name: str) -> str:
    """A C++ symbol without template arguments and parameter lists:
    ``c10::impl::wrap_kernel_functor_unboxed_<...>::call(c10::OperatorKernel*, ...)`` becomes
    ``c10::impl::wrap_kernel_functor_unboxed_<>::call()``."""
    out: list[str] = []
    angle = paren = 0
    i = 0
    while i < len(name):
        if angle == 0 and paren == 0 and name.startswith("operator", i):
            j = i + len("operator")
            while j < len(name) and name[j] in _OPERATOR_CHARS:
                j += 1
            out.append(name[i:j])  # operator<<, operator->, operator[] stay as written
            i = j
            continue
        ch = name[i]
        i += 1
        if ch == "<" and paren == 0:
            angle += 1
            if angle == 1:
                out.append("<>")
        elif ch == ">" and angle > 0 and paren == 0:
            angle -= 1
        elif ch == "(" and angle == 0:
            paren += 1
            if paren == 1:
                out.append("()")
        elif ch == ")" and paren > 0 and angle == 0:
            paren -= 1
        elif angle == 0 and paren == 0:
            out.append(ch)
    return "".join(out).strip() or name
