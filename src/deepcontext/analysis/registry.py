"""Where rules come from: the built-in families, a user's ``--rules FILE.py`` and the
``deepcontext.rules`` entry point group."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import sys
import warnings
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType

from ..errors import DeepContextError
from .rule import Rule

ENTRY_POINT_GROUP = "deepcontext.rules"
_BUILTIN_MODULES = ("hotspot", "kernel_fusion", "cpu_latency", "sync", "memcpy", "layout",
                    "serialization", "precision", "optimizer", "dataloader", "autograd",
                    "gpu_stall", "memory", "compile", "jax", "distributed")


def builtin_rules() -> list[Rule]:
    """One instance of every built-in rule: the families above in documentation order, then
    any other module of ``rules/`` (a new family needs no edit here)."""
    from . import rules as package

    found = sorted(m.name for m in pkgutil.iter_modules(package.__path__)
                   if not m.name.startswith("_") and m.name not in _BUILTIN_MODULES)
    rules: list[Rule] = []
    for name in (*_BUILTIN_MODULES, *found):
        module = importlib.import_module(f"deepcontext.analysis.rules.{name}")
        rules.extend(rules_in_module(module))
    return rules


def rules_in_module(module: ModuleType) -> list[Rule]:
    """A module's ``RULES`` list if it has one, else an instance of each Rule subclass it defines."""
    listed = getattr(module, "RULES", None)
    if listed is not None:
        return [_instance(r, module.__name__) for r in listed]
    found = [obj for obj in vars(module).values()
             if inspect.isclass(obj) and issubclass(obj, Rule) and obj is not Rule
             and obj.__module__ == module.__name__ and obj.id]
    return [cls() for cls in found]


def _instance(obj: object, origin: str) -> Rule:
    if inspect.isclass(obj) and issubclass(obj, Rule):
        return obj()
    if isinstance(obj, Rule):
        return obj
    raise DeepContextError(f"{origin}: RULES holds {obj!r}, which is not a Rule subclass or instance")


def load_rules_file(path: str | Path) -> list[Rule]:
    """Import a user's rule file and return its rules; errors become one-line messages."""
    p = Path(path)
    if not p.is_file():
        raise DeepContextError(f"--rules {p}: no such file")
    name = f"deepcontext_user_rules_{abs(hash(str(p.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise DeepContextError(f"--rules {p}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 (a user's file: report it in one line)
        raise DeepContextError(f"--rules {p}: {type(e).__name__}: {e}") from None
    rules = rules_in_module(module)
    if not rules:
        raise DeepContextError(f"--rules {p} defines no Rule subclass and no RULES list")
    _check_ids(rules, str(p))
    return rules


def entry_point_rules() -> list[Rule]:
    """Rules installed by other packages under the ``deepcontext.rules`` entry point group.
    Each entry point names a Rule subclass, a list of rules, or a module."""
    rules: list[Rule] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            if isinstance(obj, ModuleType):
                rules.extend(rules_in_module(obj))
            elif isinstance(obj, (list, tuple)):
                rules.extend(_instance(r, ep.name) for r in obj)
            else:
                rules.append(_instance(obj, ep.name))
        except Exception as e:  # noqa: BLE001 (one broken plugin must not stop the analysis)
            warnings.warn(f"rule entry point {ep.name!r} failed to load: {e}", stacklevel=2)
    return rules


def default_rules() -> list[Rule]:
    """Built-in rules plus installed entry-point rules."""
    rules = builtin_rules() + entry_point_rules()
    _check_ids(rules, "installed rules")
    return rules


def _check_ids(rules: list[Rule], origin: str) -> None:
    seen: set[str] = set()
    for r in rules:
        if not r.id or not r.category:
            raise DeepContextError(f"{origin}: rule {type(r).__name__} has no id or category")
        if r.id in seen:
            raise DeepContextError(f"{origin}: two rules share the id {r.id!r}")
        seen.add(r.id)
