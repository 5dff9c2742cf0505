"""The host-side hooks of the JAX layer, installed when the program imports jax, with no change
to the program's code:

- ``jax.jit`` returns a ``TrackedJit``: the jitted function itself, plus a TraceMe around each
  call naming the calling context, so the profiler capture can hang the executed thunks and
  kernels under the Python line that called it (XLA's threads launch them elsewhere); eager
  primitives (jax.numpy outside jit) are tracked the same way;
- ``jax.monitoring`` duration events (JAX's official compile-time hook) become ``[marker]
  compile`` contexts under the call that triggered the compilation;
- ``block_until_ready`` and device-to-host copies (``jax.device_get``, ``np.asarray``,
  ``float(x)``, ``x.item()``) are timed as host round trips (``sync`` frames);
- ``jax.profiler.start_trace``/``stop_trace``: the program's own trace takes the profiler over
  (only one JAX profiler session may run); the layer steps aside until it ends.

Every hook checks ``on()`` first and calls straight through when capture is off or paused.
"""

from __future__ import annotations

import functools
import threading
import time
import types
from typing import Any, Callable

from .fold import DISPATCH_EVENT

_tls = threading.local()
#: The running layer; a TrackedJit made under an earlier session reports to the current one.
current: list[Any] = [None]


def call_stack() -> list[int]:
    """Context nodes of the tracked jit calls running on this thread, innermost last."""
    stack = getattr(_tls, "calls", None)
    if stack is None:
        stack = _tls.calls = []
    return stack


class TrackedJit:
    """What ``jax.jit`` returns under the profiler: calls are recorded, everything else
    (``lower``, ``trace``, attributes, method binding) is the jitted function's own."""

    __slots__ = ("_dc_fn", "__dict__", "__weakref__")
    eager = 0  # 1: an eager primitive's computation (its HLO's stack is all caller)

    def __init__(self, fn: Any) -> None:
        object.__setattr__(self, "_dc_fn", fn)
        for attr in ("__name__", "__qualname__", "__doc__", "__module__", "__wrapped__"):
            try:
                self.__dict__[attr] = getattr(fn, attr)
            except AttributeError:
                pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        layer = current[0]
        if layer is None or not layer.on():
            return self._dc_fn(*args, **kwargs)
        if layer.needs_session:
            layer.start_with_backend()
        node = layer.current_node()
        stack = call_stack()
        stack.append(node)
        try:
            with layer.trace_me(DISPATCH_EVENT, n=node, e=self.eager):
                return self._dc_fn(*args, **kwargs)
        finally:
            stack.pop()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dc_fn, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._dc_fn, name, value)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else types.MethodType(self, obj)

    def __repr__(self) -> str:
        return repr(self._dc_fn)

    @property
    def __signature__(self) -> Any:
        import inspect

        return inspect.signature(self._dc_fn)


class EagerPrimitive(TrackedJit):
    __slots__ = ()
    eager = 1


def _like(wrapper: Any, original: Any) -> Any:
    """functools.wraps that tolerates C++ methods (their __qualname__ may not be a string)."""
    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        value = getattr(original, attr, None)
        if isinstance(value, str):
            setattr(wrapper, attr, value)
    wrapper.__wrapped__ = original
    return wrapper


def tracked_jit(original: Callable[..., Any]) -> Callable[..., Any]:
    def jit(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        if hasattr(out, "lower"):
            return TrackedJit(out)
        if callable(out):  # jax.jit(static_argnums=...) used as a decorator factory

            @functools.wraps(out)
            def decorate(fun: Any) -> Any:
                made = out(fun)
                return TrackedJit(made) if hasattr(made, "lower") else made

            return decorate
        return out

    jit._dc_original = original  # type: ignore[attr-defined]
    return _like(jit, original)


def tracked_primitive(original: Callable[..., Any]) -> Callable[..., Any]:
    """jax's eager path: a jax.numpy call outside jit runs each primitive as its own small
    jitted computation, made by ``dispatch.xla_primitive_callable`` (``jit(add)``); it is
    tracked like the program's jitted functions, so its kernels sit under its line."""

    def xla_primitive_callable(*args: Any, **kwargs: Any) -> Any:
        return EagerPrimitive(original(*args, **kwargs))

    xla_primitive_callable._dc_original = original  # type: ignore[attr-defined]
    return _like(xla_primitive_callable, original)


def timed_sync(original: Callable[..., Any], layer: Any, what: str) -> Callable[..., Any]:
    """``original`` timed as a host round trip named ``what``."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not layer.on() or getattr(_tls, "in_sync", False):
            return original(*args, **kwargs)
        _tls.in_sync = True
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            _tls.in_sync = False
            layer.host_round_trip(what, time.perf_counter() - start)

    wrapper._dc_original = original  # type: ignore[attr-defined]
    return _like(wrapper, original)


def timed_value(prop: property, layer: Any) -> property:
    """``ArrayImpl._value`` (every device-to-host read goes through it) timed when it copies."""
    getter = prop.fget
    assert getter is not None

    def _value(self: Any) -> Any:
        if not layer.on() or getattr(self, "_npy_value", 0) is not None or getattr(
                _tls, "in_sync", False):
            return getter(self)
        _tls.in_sync = True
        start = time.perf_counter()
        try:
            return getter(self)
        finally:
            _tls.in_sync = False
            layer.host_round_trip("device-to-host copy", time.perf_counter() - start)

    made = _TimedProperty(_value, prop.fset, prop.fdel, prop.__doc__)
    made._dc_original = prop
    return made


class _TimedProperty(property):
    _dc_original: property


class Patches:
    """Attributes replaced on jax's modules and classes, restored by ``undo``."""

    def __init__(self) -> None:
        self._done: list[tuple[Any, str, Any]] = []

    def replace(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        original = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
        if original is None or hasattr(original, "_dc_original"):
            return
        setattr(owner, name, make(original))
        self._done.append((owner, name, original))

    def undo(self) -> None:
        while self._done:
            owner, name, original = self._done.pop()
            setattr(owner, name, original)
