"""The memory layer's PyTorch side (docs/memory.md): the allocation reporter that c10's CPU and
CUDA allocators call, given to every thread that runs the program, and the CUDA caching
allocator's trace of segments, retries and OOMs. Both feed ``csrc/memory`` through the C API."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable

from . import threads, torch_ops
from .native import core


class MemoryLayer:
    """The memory layer while a session runs; ``close()`` takes the reporter off this thread."""

    def __init__(self, torch: Any, hook: Any, note: Callable[[str], None]) -> None:
        self.hook = hook
        self.note = note
        self._attach_here()
        threads.on_new_thread(self._attach_here)
        self._profiler = _TorchProfilerYield(torch, self)

    def _attach_here(self) -> None:
        if not self.hook.memory_attach(core.c_api):
            self.note("memory: another profiler (torch.profiler?) holds a thread's memory "
                      "reporting; its allocations are not attributed")

    def close(self) -> None:
        self._profiler.close()
        threads.forget_new_thread(self._attach_here)
        with contextlib.suppress(Exception):
            self.hook.memory_detach()


class _TorchProfilerYield:
    """torch.profiler needs the thread's reporting slot (it refuses to start while any profiler
    state is there): the reporter steps aside while it runs and comes back when it stops, so a
    program that uses torch.profiler runs unchanged."""

    def __init__(self, torch: Any, layer: MemoryLayer) -> None:
        self.module = getattr(getattr(torch, "autograd", None), "profiler", None)
        self.saved = None
        if self.module is None or not hasattr(self.module, "_enable_profiler"):
            return
        enable, disable = self.module._enable_profiler, self.module._disable_profiler
        self.saved = (enable, disable)

        def _enable_profiler(*args: Any, **kwargs: Any) -> Any:
            layer.hook.memory_detach()
            layer.note("memory: torch.profiler ran; allocations while it ran are not attributed")
            try:
                return enable(*args, **kwargs)
            except BaseException:
                layer._attach_here()
                raise

        def _disable_profiler(*args: Any, **kwargs: Any) -> Any:
            try:
                return disable(*args, **kwargs)
            finally:
                layer._attach_here()

        self.module._enable_profiler = _enable_profiler
        self.module._disable_profiler = _disable_profiler

    def close(self) -> None:
        if self.saved is not None:
            self.module._enable_profiler, self.module._disable_profiler = self.saved
            self.saved = None


def enable(torch: Any, say: Callable[[str], None], note: Callable[[str], None]) -> MemoryLayer | None:
    """Turn allocation reporting on for this process; None (and a note) when it cannot be."""
    try:
        hook = torch_ops.compiled_hook(torch, say)
    except Exception as e:  # noqa: BLE001 - any build failure turns the layer off, not the run
        reason = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        note(f"memory layer off: it needs the compiled PyTorch hook, which could not be built "
             f"({reason[:160]})")
        return None
    layer = MemoryLayer(torch, hook, note)
    if getattr(torch.version, "cuda", None) and torch.cuda.is_available():
        # The caching allocator has no devices to trace until CUDA is initialized.
        torch.cuda._lazy_call(lambda: _trace_cuda_allocator(torch, say, note))
    return layer


_cuda_trace: Any = None


def _cuda_trace_source() -> tuple[Path, list[Path]]:
    source, includes = torch_ops._hook_sources()
    installed = source.parent / "cuda_trace.cpp"
    if installed.is_file():
        return installed, includes
    return source.parent.parent / "memory" / "cuda_trace.cpp", includes


def _trace_cuda_allocator(torch: Any, say: Callable[[str], None],
                          note: Callable[[str], None]) -> None:
    # Runs inside torch.cuda's lazy init: whatever happens, the program's CUDA set-up goes on.
    global _cuda_trace
    try:
        if _cuda_trace is None:
            source, includes = _cuda_trace_source()
            name = torch_ops.extension_name("dc_cuda_trace", str(torch.__version__),
                                            torch_ops.sources_digest(source, includes))
            _cuda_trace = torch_ops.build_extension(
                torch, name, source, includes, say, "the CUDA allocator trace hook",
                with_cuda=True)
        reason = _cuda_trace.attach(core.c_api, torch.cuda.device_count())
    except Exception as e:  # noqa: BLE001
        text = str(e).strip().splitlines()
        reason = f"could not build the trace hook ({(text[-1] if text else type(e).__name__)[:160]})"
    if reason:
        note(f"memory: CUDA allocator segments, retries and OOMs not tracked: {reason}")
