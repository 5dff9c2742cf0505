"""DLMonitor: the framework-agnostic monitor layer the profiler is built on.

A small interface for any tool that wants multi-layer calling contexts:

- ``init(context=..., sample_interval=...)`` turns the capture sources on (Python frames, the
  PyTorch operator layer as soon as torch is imported, the GPU layer where CUPTI is available,
  and a per-thread CPU-time sampler);
- ``register(domain, callback)`` calls ``callback(event)`` on every event of a domain;
- ``callpath()`` returns the calling thread's current path (Python frames and operators,
  outermost first) as ``Frame`` objects;
- ``finalize()`` turns everything off.

Native aggregation into the calling context tree is always on while initialized; Python
callbacks are for tools that need each event and cost a GIL round trip per event.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import DeepContextError
from ..tree.frame import Frame
from . import gpu

__all__ = ["DOMAINS", "OpEvent", "init", "register", "unregister", "callpath", "finalize",
           "initialized"]

#: Domains a callback can be registered on.
DOMAINS = ("torch.op", "jax.op")

_tls = threading.local()
_state: dict[str, Any] = {"init": False, "notes": [], "torch_tier": None, "tier_handle": None,
                          "modules": None, "callbacks": {}, "memory": None, "jax": None,
                          "own_work": 0, "paused": False}


@dataclass(frozen=True)
class OpEvent:
    """One operator event: ``phase`` is ``"enter"`` or ``"exit"``; ``node`` the context node."""

    domain: str
    name: str | None
    phase: str
    node: int


def _core() -> Any:
    from ..capture.native import core

    return core


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def note(text: str) -> None:
    """Record a one-line note for the profile (what was not captured and why)."""
    if text not in _state["notes"]:
        _state["notes"].append(text)


@contextlib.contextmanager
def own_work() -> Iterator[None]:
    """The profiler's own work on the program's thread (a session's start, loading the torch
    hook): capture is paused while it runs, so that its CPU samples (~150 ms for the first session
    of a process, which loads the hook) are not charged to the program's line that started it.
    Nests; afterwards capture is as the session's phase says (paused in a schedule's wait)."""
    _state["own_work"] += 1
    if _state["own_work"] == 1:
        _core().set_paused(True)
    try:
        yield
    finally:
        _state["own_work"] -= 1
        if _state["own_work"] == 0:
            _core().drop_pending_sample()  # (else its last tick's sample lands on the next line)
            _core().set_paused(_state["paused"])


def initialized() -> bool:
    return bool(_state["init"])


def init(context: tuple[str, ...] = ("python", "op"), sample_interval: float = 0.01,
         hooks: tuple[Any, ...] = (), perf: bool = False) -> None:
    if _state["init"]:
        raise DeepContextError("the deepcontext monitor is already initialized in this process")
    core = _core()
    if "pc" in context:
        from ..capture import pc

        try:
            _state["pc_settings"] = pc.Settings.from_env()
        except ValueError as e:
            raise DeepContextError(str(e)) from None
    _state["torch_tier"] = None
    _state["notes"] = []
    _state["jax"] = None  # a previous session's layer was stopped by finalize
    _state["builder"] = None  # a session's trees grow from its own first one
    core.reset_metrics()
    _start_hooks_and_perf(core, hooks, perf and sample_interval > 0)
    core.start(python="python" in context, ops="op" in context, sample=sample_interval > 0,
               interval=sample_interval or 0.01, native="native" in context)
    _state["paused"] = False
    with own_work():
        _init_layers(core, context, sample_interval > 0)


def _init_layers(core: Any, context: tuple[str, ...], sample: bool) -> None:
    """The layers of a started core, and the state the other calls read."""
    from ..capture import threads

    threads.install()
    _state["init"] = True
    _state["context"] = context
    _state["sample"] = sample
    if "native" in context:
        info = core.native_info()
        _state["native"] = {**info, "mismatches_before": core.splice_mismatches(),
                            "stacks_before": core.native_stack_memo()}
        if info["unwinder"] != "libunwind":
            note("native frames: libunwind.so.8 not found, using libgcc's unwinder (about 10x "
                 "slower per event); install libunwind8 or set DEEPCONTEXT_LIBUNWIND")
    else:
        _state["native"] = None
    if "memory" in context:
        core.memory_start()
    if "op" in context or "module" in context or "memory" in context:
        from ..capture.import_hooks import when_imported

        when_imported("torch", _enable_torch, on_error=_torch_hook_failed)
    if "jax" in context:
        from ..capture.import_hooks import when_imported

        when_imported("jax", _enable_jax)
    if "pc" in context:
        from ..capture import pc

        pc.configure(core, _state["pc_settings"])
    if "gpu" in context or "pc" in context:
        reason = gpu.start(core)
        if reason:
            note(reason)


def _start_hooks_and_perf(core: Any, hooks: tuple[Any, ...], perf: bool) -> None:
    """Declared hooks (all or none) and CPU counters, before the sampler arms any timer."""
    _state["hooks"] = bool(hooks)
    _state["hooks_final"] = None
    _state["perf"] = perf
    if hooks:
        error = core.hooks_install([h.native() for h in hooks])
        if error:
            _state["hooks"] = False
            raise DeepContextError(f"hooks: {error}; nothing was hooked")
    if perf and (reason := core.perf_configure(True)):
        note(reason)


def _enable_torch(torch: Any) -> None:
    if _state["init"]:
        with own_work():
            _enable_torch_layers(torch)


def _enable_torch_layers(torch: Any) -> None:
    if "memory" in _state["context"] and _state["memory"] is None:
        from ..capture import memory

        _state["memory"] = memory.enable(torch, _say, note)
    if "module" in _state["context"] and _state["modules"] is None:
        from ..capture import modules

        _state["modules"] = modules.enable(torch)
        if _state["modules"] is None:
            note("module layer: this torch has no global module hooks (needs torch >= 2.0)")
    if "op" not in _state["context"] or _state["tier_handle"] is not None or (
            _state["torch_tier"] == "record_function"):
        return
    from ..capture import torch_ops

    tier, handle = torch_ops.enable(torch, _say, nested="nested" in _state["context"], note=note)
    _state["torch_tier"] = tier
    _state["tier_handle"] = handle
    if _state["paused"]:  # torch imported during a schedule's pause: the hook waits for its end
        handle.pause(True)
    _state["torch_version"] = str(torch.__version__)
    if tier == "dispatch":
        note("operator layer: TorchDispatchMode tier (the compiled hook could not be built); "
             "composite operators appear as their parts")


def _torch_hook_failed(e: BaseException) -> None:
    text = (f"operator layer off: the hook on `import torch` failed ({type(e).__name__}: {e}); "
            "operators are not captured")
    note(text)
    _say(f"deepcontext: {text}")


def _enable_jax(jax: Any) -> None:
    if _state["init"] and _state["jax"] is None:
        with own_work():
            _enable_jax_layer(jax)


def _enable_jax_layer(jax: Any) -> None:
    from ..capture.jax import JaxLayer

    layer = JaxLayer(_core(), note)
    layer.release_gpu = _release_gpu
    try:
        layer.enable(jax)
    except Exception as e:  # noqa: BLE001 - another jax layout: the program runs on unprofiled
        note(f"jax layer off: {type(e).__name__}: {e}")
        return
    _state["jax"] = layer
    _install_observer()


def _release_gpu() -> None:
    """The JAX profiler traces the GPU itself (kernels with their HLO instruction), and CUDA
    admits one CUPTI subscriber: the GPU layer steps aside when a JAX program uses a GPU."""
    if gpu.active():
        gpu.stop(_core(), wait=0.5)  # on the program's thread, at its first jitted call
        note("GPU capture handed to the JAX profiler (one CUPTI subscriber per process): "
             "kernels show under their JAX operators")


def register(domain: str, callback: Callable[[OpEvent], None]) -> None:
    if domain not in DOMAINS:
        raise DeepContextError(f"unknown monitor domain {domain!r}; choose from {', '.join(DOMAINS)}")
    _state["callbacks"].setdefault(domain, []).append(callback)
    _install_observer()


def unregister(domain: str, callback: Callable[[OpEvent], None]) -> None:
    cbs = _state["callbacks"].get(domain, [])
    if callback in cbs:
        cbs.remove(callback)
    _install_observer()


def _install_observer() -> None:
    layer = _state["jax"]
    jax_cbs = _state["callbacks"].get("jax.op", [])
    if layer is not None:
        layer.observer = _jax_observer(jax_cbs) if jax_cbs else None
    cbs = _state["callbacks"].get("torch.op", [])
    if not cbs:
        _core().set_op_observer(None)
        return

    def observer(name: str | None, phase: int, node: int) -> None:
        event = OpEvent("torch.op", name, "enter" if phase == 0 else "exit", node)
        _tls.event_node = node  # callpath() inside a callback is the event's path
        try:
            for cb in list(cbs):
                cb(event)
        finally:
            _tls.event_node = None

    _core().set_op_observer(observer)


def _jax_observer(cbs: list[Callable[[OpEvent], None]]) -> Callable[..., None]:
    def observer(name: str, node: int, below: tuple[Frame, ...]) -> None:
        # delivered when a capture is folded (each flush): the execution already happened
        event = OpEvent("jax.op", name, "exec", node)
        _tls.event_node, _tls.event_below = node, below
        try:
            for cb in list(cbs):
                try:
                    cb(event)
                except Exception as e:  # noqa: BLE001 - a tool's bug must not stop the flush
                    note(f"jax.op callback failed: {type(e).__name__}: {e}")
        finally:
            _tls.event_node, _tls.event_below = None, ()

    return observer


def callpath() -> list[Frame]:
    """The calling thread's current multi-layer path, outermost first (profiler frames hidden).

    Inside a ``register`` callback it is the path of the event being delivered."""
    if not _state["init"]:
        raise DeepContextError("call deepcontext.monitor.init() first")
    from ..capture.snapshot import _is_launcher, _is_own, _parse_extra

    core = _core()
    node = getattr(_tls, "event_node", None)
    if node is None:
        node = core.current_node()
    frames = [Frame.make(kind, name, file, line, **_parse_extra(extra))
              for kind, name, file, line, extra in core.path_frames(node)] if node >= 0 else []
    frames += getattr(_tls, "event_below", ())
    return [f for f in frames
            if not (f.kind == "python" and (_is_own(f.file) or _is_launcher(f.file)))]


def pause(paused: bool, *, final: bool = False, in_forked_child: bool = False) -> None:
    """Pause or resume capture (a schedule's steps). Paused steps should run as if unprofiled:
    the operator hook is switched off in torch (RecordFunction then skips its work), and once the
    schedule is done (``final``) the GPU layer detaches CUPTI, whose hooks would cost every launch
    what tracing costs; in a wait phase it stays attached, since attaching it again costs more
    than a few waiting steps gain (docs/gpu.md). A forked child only pauses the core."""
    _state["paused"] = paused
    handle = None if in_forked_child else _state["tier_handle"]
    if handle is not None and not paused:  # on before the core resumes: no operator missed
        handle.pause(False)
    if not _state["own_work"]:  # (else own_work's end sets it)
        _core().set_paused(paused)
    if handle is not None and paused:
        handle.pause(True)
    if final and paused and not in_forked_child:
        gpu.release(_core())
    if _state["jax"] is not None:
        _state["jax"].pause(paused)


def reset_metrics() -> None:
    gpu.flush(_core())  # warm-up kernels already finished are zeroed with the rest
    _core().reset_metrics()
    if _state["jax"] is not None:
        _state["jax"].reset()


def checkpoint_metrics() -> None:
    """A warm-up begins: save the metrics (earlier active cycles) it must not touch."""
    gpu.flush(_core())
    _core().checkpoint_metrics()
    if _state["jax"] is not None:
        _state["jax"].checkpoint()


def rollback_metrics() -> None:
    """A warm-up ends: its metrics are discarded, the saved ones restored."""
    gpu.flush(_core())  # warm-up kernels already finished are discarded with the rest
    _core().rollback_metrics()
    if _state["jax"] is not None:
        _state["jax"].rollback()


def resolve() -> None:
    """Periodic upkeep from the flusher thread: fold buffered samples in, and give threads that
    Python code runs on but that never passed threading's hook (started from C) their timer."""
    core = _core()
    gpu.maybe_flush(core)
    core.resolve()
    _sample_new_threads(core)


def _sample_new_threads(core: Any) -> None:
    """Threads that run Python but never passed threading's hook (started from C) get their
    timer; threads with no Python are found by the core's own /proc scan (Polled workers)."""
    if not (_state["init"] and _state.get("sample")):
        return
    core.register_python_threads(threading.get_native_id())


def snapshot_tree(metadata: dict[str, Any], fresh: bool = True) -> Any:
    """The session's tree now. Not ``fresh``: the last one's nodes kept, with what is new added
    and every metric set again (capture/snapshot.py: TreeBuilder), which a periodic flush wants."""
    from ..capture.snapshot import TreeBuilder, take

    core = _core()
    _sample_new_threads(core)
    gpu.flush(core)  # completed GPU activity first, so the snapshot holds it
    layer = _state["jax"]
    if layer is not None:
        layer.collect()  # XLA executions captured since the last snapshot
        metadata.update(layer.metadata())
    raw = take(core)
    metadata.update(gpu.metadata(core))  # counters as of this snapshot
    builder = _state.get("builder")
    if builder is None:
        builder = _state["builder"] = TreeBuilder()
    # (JAX's layer grafts its own nodes onto each tree: built whole)
    tree = builder.build(raw, metadata, fresh=fresh or layer is not None)
    if layer is not None:
        layer.graft(tree)
    return tree


def metadata() -> dict[str, Any]:
    core = _core()
    notes = list(_state["notes"]) + [n for n in core.notes().splitlines() if n]
    layer = _state.get("jax")
    jax_gpu = layer is not None and layer.stats["gpu_executions"] > 0
    if jax_gpu:  # the JAX profiler traced the GPU: the GPU layer's own state says nothing
        notes = [n for n in notes if not n.startswith("GPU capture off: another CUPTI client")]
        if not any(n.startswith("GPU capture handed to the JAX profiler") for n in notes):
            notes.append("GPU capture by the JAX profiler (it held CUPTI before the GPU layer "
                         "could): kernels show under their JAX operators")
    elif "gpu" in (_state.get("context") or ()) and (unused := gpu.unused_note(core)):
        notes.append(unused)
    meta: dict[str, Any] = {"notes": notes, "dropped_samples": core.dropped_samples()}
    if "op" in (_state.get("context") or ()):
        meta["op_clock"] = core.op_clock()  # "tsc": operator times read the TSC (cct/clock.h)
    native = _state.get("native")
    if native:
        unwound, recalled, learned = (now - before for now, before in
                                      zip(core.native_stack_memo(), native["stacks_before"]))
        meta["native"] = {"unwinder": native["unwinder"], "line_reader": native["line_reader"],
                          "unpaired_events": core.splice_mismatches() - native["mismatches_before"],
                          "stacks_unwound": unwound, "stacks_recalled": recalled,
                          "stacks_learned": learned}
    if _state.get("hooks"):
        meta["hooks"] = [{"library": lib, "function": fn, "loaded": loaded, "bindings": n}
                         for lib, fn, loaded, n in _state.get("hooks_final") or core.hooks_installed()]
    if _state.get("perf"):
        meta["perf"] = True
    if _state.get("torch_tier"):
        meta["torch"] = _state.get("torch_version")
        meta["op_tier"] = _state["torch_tier"]
    if "pc" in (_state.get("context") or ()):
        from ..capture import pc

        if (summary := pc.summary()) is not None:
            meta["pc"] = summary
    if "memory" in (_state.get("context") or ()):
        meta["memory"] = {"devices": list(core.memory_devices()), **core.memory_footprint()}
    return meta


def finalize() -> None:
    if not _state["init"]:
        return
    core = _core()
    layer = _state["jax"]
    if layer is not None:
        layer.stop()  # before capture stops: the final capture is folded while nodes are valid
    gpu.stop(core)
    if "pc" in (_state.get("context") or ()):
        from ..capture import pc

        pc.finish(core)  # instruction frames join the tree before the final snapshot
    core.stop()
    core.memory_stop()
    if _state["memory"] is not None:
        _state["memory"].close()
        _state["memory"] = None
    if _state.get("hooks"):
        _state["hooks_final"] = core.hooks_installed()
        core.hooks_uninstall()
    if _state.get("perf") and core.perf_close():
        note("perf counters: some threads went without (a quarter of the open-file limit is the cap)")
    from ..capture import threads

    threads.uninstall()
    for key in ("tier_handle", "modules"):
        handle = _state.get(key)
        if handle is not None:
            handle.close()
    _state["modules"] = None
    _state["init"] = False
    _state["tier_handle"] = None  # the tier name stays: the final flush reports it
    core.set_op_observer(None)


def _after_fork_in_child() -> None:
    if _state["init"]:
        _core().set_paused(True)


os.register_at_fork(after_in_child=_after_fork_in_child)
