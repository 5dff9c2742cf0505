"""torch.compile: what the compiler tells us, gathered while the program runs.

When the program imports ``torch._dynamo`` (``torch.compile`` does), a session

- turns on Inductor's provenance tracking (``trace.provenance_tracking_level = 1``: each kernel
  call in the generated wrapper gets a ``[Provenance debug handles] kernel:N`` comment and a list
  of the FX nodes' ``stack_trace``s) and ``cpp.enable_kernel_profile`` (each C++ kernel opens a
  RecordFunction, so the operator layer counts and times it). ``cpp.enable_kernel_profile`` is
  part of the FX graph cache key while ``trace.*`` is not, so graphs compiled under a session
  never share cache entries with graphs compiled without provenance: a warm cache replays the
  provenance that was stored with the entry;
- listens on the ``torch.__trace`` structured log for the generated wrappers, the provenance
  stack traces, compilation metrics (recompile reasons, graph-break counts) and graph-break
  reasons;
- times every compilation with Dynamo's ``on_compile_start``/``on_compile_end`` callbacks at the
  calling context where it ran.

The tree conversion (``placement``) maps each generated wrapper line to its kernel and source
lines when a snapshot is taken; nothing runs per kernel call.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

_CONFIG = (("trace", "provenance_tracking_level", 1), ("cpp", "enable_kernel_profile", True))
_TRACE_LOGGER = "torch.__trace"
_GRAPH_BREAK_LOC = re.compile(r"Graph break in user code at (.+?):(\d+)\s*$", re.MULTILINE)
_GRAPH_BREAK_AT = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


@dataclass
class CompileEvent:
    node: int  # native context node where Dynamo's start callback ran
    trigger: str  # DYNAMO, LAZY_BACKWARD, CUDAGRAPH_RECORDING, ...
    compile_id: str
    seconds: float = 0.0


@dataclass
class _State:
    installed: bool = False
    wrappers: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    last_wrapper: str | None = None
    compiles: list[CompileEvent] = field(default_factory=list)
    open: list[tuple[float, CompileEvent]] = field(default_factory=list)
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)  # by compile id
    graph_breaks: list[dict[str, Any]] = field(default_factory=list)
    fx_cache: dict[str, int] = field(default_factory=dict)  # hit / miss / bypass counts
    saved: list[tuple[Any, str, Any]] = field(default_factory=list)
    saved_level: int = logging.NOTSET
    handler: logging.Handler | None = None
    cache_dir: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)


_state = _State()


def enable() -> None:
    """Install the hooks once ``torch._dynamo`` is imported (now, if it already is)."""
    from ..import_hooks import when_imported

    # a new session counts its own compilations; the provenance of wrappers compiled earlier
    # in the process stays valid (their code still runs)
    with _state.lock:
        _state.compiles.clear()
        _state.open.clear()
        _state.graph_breaks.clear()
        _state.fx_cache.clear()
    when_imported("torch._dynamo", _install)


def active() -> bool:
    """True once a compilation or a generated wrapper has been seen in this process."""
    return bool(_state.compiles or _state.wrappers or _state.open)


def _install(_dynamo: Any) -> None:
    if _state.installed:
        return
    try:
        import torch._dynamo.callback as callbacks
        import torch._inductor.config as config
        from torch._inductor.runtime.cache_dir_utils import cache_dir
    except Exception:  # noqa: BLE001 - an older or partial torch: compile capture stays off
        return
    for section, name, value in _CONFIG:
        holder = getattr(config, section, None)
        if holder is not None and hasattr(holder, name):
            _state.saved.append((holder, name, getattr(holder, name)))
            if not getattr(holder, name):
                setattr(holder, name, value)
    try:
        _state.cache_dir = cache_dir()
    except Exception:  # noqa: BLE001
        _state.cache_dir = ""
    logger = logging.getLogger(_TRACE_LOGGER)
    _state.handler = _TraceHandler()
    logger.addHandler(_state.handler)
    _state.saved_level = logger.level
    if logger.level == logging.NOTSET or logger.level > logging.DEBUG:
        logger.setLevel(logging.DEBUG)
    callbacks.on_compile_start(_compile_start)
    callbacks.on_compile_end(_compile_end)
    _state.installed = True


def disable() -> None:
    """Give torch back its settings; what was recorded stays for the final snapshot."""
    if not _state.installed:
        return
    import torch._dynamo.callback as callbacks

    for remove, fn in ((callbacks.callback_handler.remove_start_callback, _compile_start),
                       (callbacks.callback_handler.remove_end_callback, _compile_end)):
        try:
            remove(fn)
        except ValueError:
            pass
    logger = logging.getLogger(_TRACE_LOGGER)
    if _state.handler is not None:
        logger.removeHandler(_state.handler)
    logger.setLevel(_state.saved_level)
    for holder, name, value in _state.saved:
        setattr(holder, name, value)
    _state.saved.clear()
    _state.installed = False


def _compile_start(args: Any) -> None:
    from ..native import core

    trigger = getattr(getattr(args, "callback_trigger", None), "name", "DYNAMO")
    event = CompileEvent(core.current_node(), trigger, str(getattr(args, "compile_id", "")))
    with _state.lock:
        _state.open.append((time.perf_counter(), event))


def _compile_end(_args: Any) -> None:
    with _state.lock:
        if not _state.open:
            return
        start, event = _state.open.pop()
        event.seconds = time.perf_counter() - start
        _state.compiles.append(event)


class _TraceHandler(logging.Handler):
    """Keeps the few structured-trace records we need; never raises into torch."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            _take(getattr(record, "metadata", None) or {}, getattr(record, "payload", None))
        except Exception:  # noqa: BLE001 - a malformed record must not disturb compilation
            pass


def _take(meta: dict[str, Any], payload: Any) -> None:
    if "inductor_output_code" in meta:
        info = meta["inductor_output_code"] or {}
        path = info.get("file_path") or info.get("filename")
        if path:
            _state.last_wrapper = path
            _state.wrappers.setdefault(path, {})
        return
    if "compilation_metrics" in meta:
        m = meta["compilation_metrics"] or {}
        keep = ("co_name", "co_filename", "co_firstlineno", "recompile_reason",
                "num_graph_breaks", "fail_reason", "entire_frame_compile_time_s")
        _state.metrics[str(m.get("compile_id"))] = {k: m.get(k) for k in keep}
        return
    artifact = (meta.get("artifact") or {}).get("name")
    if artifact == "inductor_provenance_tracking_kernel_stack_traces" and payload:
        if _state.last_wrapper is not None:
            traces = json.loads(payload)
            _state.wrappers[_state.last_wrapper] = {k: list(v) for k, v in traces.items()}
    elif artifact in ("fx_graph_cache_hit", "fx_graph_cache_miss", "fx_graph_cache_bypass"):
        status = artifact.rsplit("_", 1)[1]
        _state.fx_cache[status] = _state.fx_cache.get(status, 0) + 1
    elif artifact == "dynamo_graph_break_reason" and payload:
        _state.graph_breaks.append(_graph_break(str(payload)))


def _graph_break(text: str) -> dict[str, Any]:
    """The reason and user location of a graph break from Dynamo's message: ``Graph break in
    user code at FILE:LINE``, the break's type and its explanation."""
    lines = [line.strip() for line in text.splitlines()]
    out: dict[str, Any] = {}
    if m := _GRAPH_BREAK_LOC.search(text):
        out.update(file=m.group(1), line=int(m.group(2)))
        frames = [f for f in _GRAPH_BREAK_AT.finditer(text)
                  if f.group(1) == m.group(1) and f.group(2) == m.group(2)]
        if frames:
            out["function"] = frames[0].group(3)
    kind = next((line for line in lines if line and not line.startswith(
        ("Graph break in user code", "Graph Break Reason:"))), "")
    why = next((line.removeprefix("Explanation:").strip() for line in lines
                if line.startswith("Explanation:")), "")
    out["reason"] = (f"{kind}: {why}" if why else kind)[:500]
    return out


def snapshot_state() -> _State:
    return _state
