"""Every Python thread gets the CPU-time sampler: those alive now, and those started later."""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable

from .native import core

_previous_hook: Any = None
_installed = False
_per_thread: list[Callable[[], None]] = []  # run on each new thread (e.g. the memory reporter)


def on_new_thread(fn: Callable[[], None]) -> None:
    """Run ``fn`` on every Python thread started from now on, as its first act."""
    if fn not in _per_thread:
        _per_thread.append(fn)


def forget_new_thread(fn: Callable[[], None]) -> None:
    if fn in _per_thread:
        _per_thread.remove(fn)


def _on_new_thread(frame: Any, event: str, arg: Any) -> Any:
    # Runs once, as the new thread's first profile event; then hands back to any earlier hook.
    # The profiler's own threads are not the program's work.
    if not threading.current_thread().name.startswith("deepcontext-"):
        core.register_thread()
        for fn in list(_per_thread):
            fn()
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
