"""Run a callback once a module is imported, so `record` can hook torch whenever the program
imports it, without importing it ourselves.

The program's import always wins: a callback that raises, or a finder or loader we cannot wrap,
never makes the program's own ``import`` fail. The failure goes to the callback's ``on_error``
(the monitor turns it into a note in the profile) and that layer stays off."""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any, Callable

OnError = Callable[[BaseException], None]
_waiting: dict[str, list[tuple[Callable[[Any], None], OnError | None]]] = {}


def _say_failed(name: str) -> OnError:
    def say(e: BaseException) -> None:
        print(f"deepcontext: the hook on `import {name}` failed ({type(e).__name__}: {e}); "
              "that layer is not profiled", file=sys.stderr, flush=True)

    return say


def _run(name: str, callback: Callable[[Any], None], on_error: OnError | None, module: Any) -> None:
    try:
        callback(module)
    except Exception as e:  # noqa: BLE001 - the program's import must succeed regardless
        try:
            (on_error or _say_failed(name))(e)
        except Exception:  # noqa: BLE001, S110 - not even a broken reporter (closed stderr) may
            pass


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in _waiting:
            return None
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None and spec.loader is not None:
                    _wrap(spec.loader, name)
                    return spec
        except Exception as e:  # noqa: BLE001 - let the import system find it as if we were absent
            for callback, on_error in _waiting.pop(name, []):
                _run(name, _raise(e), on_error, None)
        return None


def _raise(e: BaseException) -> Callable[[Any], None]:
    def fail(_module: Any) -> None:
        raise e

    return fail


def _wrap(loader: Any, name: str) -> None:
    original = loader.exec_module

    def exec_module(module: Any) -> None:
        original(module)  # the program's own errors propagate untouched
        for callback, on_error in _waiting.pop(name, []):
            _run(name, callback, on_error, module)

    loader.exec_module = exec_module


_finder = _PostImportFinder()


def when_imported(name: str, callback: Callable[[Any], None],
                  on_error: OnError | None = None) -> None:
    """Call ``callback(module)`` once ``name`` is imported (now, if it already is). If it raises,
    ``on_error(exception)`` is called instead of failing the import (default: one stderr line).
    The same callback and handler asked for again while they wait are called once."""
    module = sys.modules.get(name)
    if module is not None:
        _run(name, callback, on_error, module)
        return
    waiting = _waiting.setdefault(name, [])
    if (callback, on_error) not in waiting:  # each session asks again; one call is enough
        waiting.append((callback, on_error))
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
