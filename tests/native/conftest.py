"""Fixtures for the native-frame tests: the core module and the test extension, built once."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from build_ext import build  # noqa: E402


class CoreForTests:
    """The core with its test-only entry points (``_core.testing``) reachable as attributes."""

    def __init__(self, core):
        self._core = core

    def __getattr__(self, name):
        testing = self._core.testing
        return getattr(testing if hasattr(testing, name) else self._core, name)


def load_core():
    """deepcontext._core, or a standalone _core from $DEEPCONTEXT_CORE_DIR (other interpreters)."""
    where = os.environ.get("DEEPCONTEXT_CORE_DIR")
    if where:
        sys.path.insert(0, where)
        return CoreForTests(importlib.import_module("_core"))
    from deepcontext import _core

    return CoreForTests(_core)


@pytest.fixture(scope="session")
def core():
    return load_core()


@pytest.fixture(scope="session")
def chain_ext(tmp_path_factory):
    out = build(tmp_path_factory.mktemp("dcnative_ext"))
    sys.path.insert(0, str(out.parent))
    return importlib.import_module("dcnative_chain")
