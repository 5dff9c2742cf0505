"""Run a callback once a module is imported, so `record` can hook torch whenever the program
imports it, without importing it ourselves."""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any, Callable

_waiting: dict[str, list[Callable[[Any], None]]] = {}


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in _waiting:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                _wrap(spec.loader, name)
                return spec
        return None


def _wrap(loader: Any, name: str) -> None:
    original = loader.exec_module

    def exec_module(module: Any) -> None:
        original(module)
        for cb in _waiting.pop(name, []):
            cb(module)

    loader.exec_module = exec_module


_finder = _PostImportFinder()


def when_imported(name: str, callback: Callable[[Any], None]) -> None:
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    _waiting.setdefault(name, []).append(callback)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
