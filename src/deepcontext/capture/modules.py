"""The ``module`` layer: the ``nn.Module`` path (``transformer.h.3.mlp.act``, with its class)
between the user's line and the operators it runs.

Torch's global forward hooks open a module scope on the calling thread's operator stack in the
core (``core.scope_enter``) and close it after ``forward`` (``always_call``: also when forward
raises), so every operator, CPU sample and kernel inside nests under it. A module's name is the
attribute path from the outermost module being called (the root is named by its class); it is
found once per (parent, child) pair and cached, so a call costs two hook calls and a dict hit.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

#: Cached names beyond this are forgotten at once (modules created per call never hit).
_MAX_NAMES = 1 << 16


class ModuleLayer:
    """Installed global forward hooks; ``close()`` removes them."""

    def __init__(self, torch: Any, core: Any) -> None:
        from torch.nn.modules import module as nn_module

        is_compiling = torch.compiler.is_compiling
        scope_enter, op_exit = core.scope_enter, core.op_exit
        tls = threading.local()
        # (parent prefix, id(parent), id(child)) -> (path, extra, weakref to the child)
        names: dict[tuple[str, int, int], tuple[str, str, Any]] = {}
        roots: dict[type, tuple[str, str]] = {}

        def enter(module: Any, args: Any) -> None:
            if is_compiling():  # traced by dynamo: a constant, so the hook adds nothing to graphs
                return
            stack = getattr(tls, "stack", None)
            if stack is None:
                stack = tls.stack = []
            if stack:
                parent, prefix, _ = stack[-1]
                key = (prefix, id(parent), id(module))
                hit = names.get(key)
                if hit is None or hit[2]() is not module:
                    if len(names) >= _MAX_NAMES:
                        names.clear()
                    hit = names[key] = _child_name(parent, prefix, module)
                path, extra = hit[0], hit[1]
                child_prefix = path
            else:
                cls = type(module)
                root = roots.get(cls)
                if root is None:
                    root = roots[cls] = (cls.__name__, f"class={cls.__name__}")
                path, extra = root
                child_prefix = ""
            stack.append((module, child_prefix, scope_enter(path, extra, 1)))

        def exit(module: Any, args: Any, output: Any) -> None:
            if is_compiling():
                return
            stack = getattr(tls, "stack", None)
            # Only this module's own scope: a pre-hook that raised before ours left none.
            if stack and stack[-1][0] is module:
                op_exit(stack.pop()[2])

        self._handles = [nn_module.register_module_forward_pre_hook(enter),
                         nn_module.register_module_forward_hook(exit, always_call=True)]

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


def _child_name(parent: Any, prefix: str, child: Any) -> tuple[str, str, Any]:
    """``child``'s path below ``parent``: its attribute name, or the dotted path through
    containers (``h.3`` for a block in a ``ModuleList``), or ``<Class>`` when it is not one of
    the parent's submodules (a module passed in, or made during forward)."""
    cls = type(child).__name__
    relative = next((name for name, m in parent._modules.items() if m is child), None)
    if relative is None:
        relative = next((name for name, m in parent.named_modules() if m is child and name), None)
    if relative is None:
        relative = f"<{cls}>"
    path = f"{prefix}.{relative}" if prefix else relative
    return path, f"class={cls}", weakref.ref(child)


def enable(torch: Any) -> ModuleLayer | None:
    """Install the module layer, or None where this torch lacks global forward hooks."""
    from .native import core

    try:
        return ModuleLayer(torch, core)
    except (AttributeError, TypeError):  # torch < 2.0: no always_call / torch.compiler
        return None
