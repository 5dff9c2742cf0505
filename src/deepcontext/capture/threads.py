"""Every Python thread gets the CPU-time sampler: those alive now, and those started later."""

from __future__ import annotations

import sys
import threading
from typing import Any

from .native import core

_previous_hook: Any = None
_installed = False


def _on_new_thread(frame: Any, event: str, arg: Any) -> Any:
    # Runs once, as the new thread's first profile event; then hands back to any earlier hook.
    # The profiler's own threads are not the program's work.
    if not threading.current_thread().name.startswith("deepcontext-"):
        core.register_thread()
    sys.setprofile(_previous_hook)
    if _previous_hook is not None:
        return _previous_hook(frame, event, arg)
    return None


def install() -> None:
    global _previous_hook, _installed
    if _installed:
        return
    core.register_thread()
    me = threading.current_thread()
    for t in threading.enumerate():
        if t is not me and t.ident is not None and getattr(t, "native_id", None):
            core.register_other_thread(t.ident, t.native_id)
    _previous_hook = getattr(threading, "_profile_hook", None)
    threading.setprofile(_on_new_thread)
    _installed = True


def uninstall() -> None:
    global _installed
    if _installed:
        threading.setprofile(_previous_hook)
        _installed = False
