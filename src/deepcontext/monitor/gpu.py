"""The monitor's GPU layer: starts CUPTI capture in the native core, flushes GPU activity into
the tree before each snapshot, and describes the devices and counters for the profile metadata.

Capture itself is C++ (csrc/gpu): this module only finds libcupti and moves results around.
"""

from __future__ import annotations

import glob
import os
import sys
import time
from typing import Any

#: Seconds the final flush waits for GPU records still in flight (never syncs the device).
EXIT_WAIT = float(os.environ.get("DEEPCONTEXT_GPU_FLUSH_TIMEOUT", "5"))
#: Minimum seconds between background flushes of completed activity buffers.
FLUSH_PERIOD = 1.0

_state: dict[str, Any] = {"on": False, "last_flush": 0.0}


def cupti_lib_dirs() -> list[str]:
    """Directories of the nvidia-* wheels that hold libcupti, newest CUDA major first."""
    found: list[str] = []
    for entry in dict.fromkeys(p for p in sys.path if p and os.path.isdir(p)):
        for lib in glob.glob(os.path.join(entry, "nvidia", "*", "lib", "libcupti.so*")):
            d = os.path.dirname(lib)
            if d not in found:
                found.append(d)
    # nvidia/cu13/lib before nvidia/cuda_cupti/lib (cu12): prefer the newest runtime
    return sorted(found, key=lambda d: ("cu13" not in d, d))


def _native(core: Any) -> bool:
    # A core built before the GPU layer (stale editable build) has none of its entry points.
    return hasattr(core, "gpu_stats")


def start(core: Any) -> str:
    """Start CUPTI capture; returns "" or the one-line reason it is off."""
    if not _native(core):
        return core.gpu_start()
    reason = core.gpu_start(cupti_lib_dirs())
    _state["on"] = not reason
    if reason and "no CUDA driver" not in reason and "no CUPTI headers" not in reason:
        # A GPU machine where capture failed: say so at once, not only in the profile.
        print(f"deepcontext: {reason}", file=sys.stderr, flush=True)
    return reason


def active() -> bool:
    return bool(_state["on"])


def flush(core: Any, wait: float = 0.0) -> None:
    """Fold completed GPU activity buffers into the native tree."""
    if _state["on"]:
        core.gpu_flush(wait)
        _state["last_flush"] = time.monotonic()


def maybe_flush(core: Any) -> None:
    """Background flush, at most every FLUSH_PERIOD seconds."""
    if _state["on"] and time.monotonic() - _state["last_flush"] >= FLUSH_PERIOD:
        flush(core)


def release(core: Any) -> None:
    """A schedule is done: stop tracing and detach CUPTI (the records already due still come
    in), so the rest of the run pays nothing for it."""
    if _state["on"]:
        core.gpu_release()


def stop(core: Any, wait: float = EXIT_WAIT) -> None:
    """Final flush (bounded wait for records in flight), then unsubscribe from CUPTI."""
    if _state["on"]:
        _state["on"] = False
        core.gpu_stop(wait)


def metadata(core: Any) -> dict[str, Any]:
    """``{"gpu": counters, "devices": [...]}`` once GPU capture has run, else ``{}``."""
    if not _native(core) or not core.gpu_available():
        return {}
    stats = core.gpu_stats()
    if not stats["library"]:
        return {}
    devices = stats.pop("devices")
    return {"gpu": stats, "devices": devices}


def unused_note(core: Any) -> str:
    """A note when GPU capture ran but the program used no CUDA device (so an empty GPU section
    is explained), else ""."""
    if not _native(core) or not core.gpu_available():
        return ""
    stats = core.gpu_stats()
    if not stats["library"] or stats["records"] or stats["devices"]:
        return ""
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    why = (f" (CUDA_VISIBLE_DEVICES={hidden!r} hides every GPU)"
           if hidden is not None and hidden.strip() in ("", "-1", "none", "NoDevFiles") else "")
    return f"GPU capture on, but the program used no GPU{why}: no kernels or copies to show"
