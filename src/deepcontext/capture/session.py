"""A profiling session: starts the monitor's sources, flushes the tree to the profile file
periodically and at exit, and survives the ways a program ends."""

from __future__ import annotations

import atexit
import os
import platform
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterable

from .. import monitor
from ..errors import DeepContextError
from ..tree.profile_file import ProfileWriter
from .schedule import ACTIVE, WARMUP, Schedule

CONTEXT_LAYERS = ("python", "op", "native", "gpu")
DEFAULT_CONTEXT = ("python", "op", "gpu")

_active: Session | None = None


def parse_context(spec: str | Iterable[str] | None) -> tuple[str, ...]:
    if spec is None:
        return DEFAULT_CONTEXT
    items = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    bad = [s for s in items if s not in CONTEXT_LAYERS]
    if bad:
        raise DeepContextError(f"unknown context layer {bad[0]!r}; choose from {','.join(CONTEXT_LAYERS)}")
    if not items:
        raise DeepContextError("--context needs at least one layer")
    return tuple(dict.fromkeys(items))


def default_output(stem: str = "deepcontext") -> Path:
    """``<stem>.dcprof``, or the first free ``<stem>.N.dcprof``: predictable, never clobbering."""
    rank = os.environ.get("RANK")
    if rank is not None and os.environ.get("WORLD_SIZE", "1") != "1":
        stem = f"{stem}.rank{rank}"
    p = Path(f"{stem}.dcprof")
    n = 1
    while p.exists():
        p = Path(f"{stem}.{n}.dcprof")
        n += 1
    return p


class Session:
    def __init__(self, output: str | os.PathLike[str] | None = None, *,
                 context: str | Iterable[str] | None = None, flush_interval: float = 10.0,
                 sample_interval: float = 0.01, schedule: Schedule | None = None,
                 force: bool = False, command: list[str] | None = None) -> None:
        if flush_interval <= 0:
            raise DeepContextError("flush interval must be positive")
        if sample_interval < 0:
            raise DeepContextError("sample interval must be >= 0 (0 turns CPU sampling off)")
        self.context = parse_context(context)
        self.output = Path(output) if output is not None else default_output()
        self.flush_interval = flush_interval
        self.sample_interval = sample_interval
        self.schedule = schedule
        self.force = force
        self.command = command or list(sys.argv)
        self.step_num = 0
        self._writer: ProfileWriter | None = None
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._flusher: threading.Thread | None = None
        self._pid = os.getpid()
        self._start_time = 0.0
        self._write_failed = False
        self._capturing = False
        self._prev_sigterm: Any = None
        self.announce = False  # say where the profile went (record)

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> Session:
        global _active
        if _active is not None:
            raise DeepContextError(
                f"deepcontext is already profiling this process into {_active.output}; "
                "stop that session first")
        self._writer = ProfileWriter(self.output, force=self.force)
        self._start_time = time.time()
        _active = self
        monitor.init(context=self.context, sample_interval=self.sample_interval)
        self._capturing = True
        if self.schedule is not None:
            self._apply_phase()
        self._flush(complete=False)
        self._flusher = threading.Thread(target=self._flush_loop, name="deepcontext-flush",
                                         daemon=True)
        self._flusher.start()
        atexit.register(self._atexit)
        self._install_sigterm()
        os.register_at_fork(after_in_child=_forget_in_child)
        return self

    def stop(self) -> None:
        global _active
        if _active is not self:
            return
        self._stop_event.set()
        monitor.finalize()
        self._flush(complete=True)
        if self._writer is not None:
            self._writer.close()
        _active = None
        atexit.unregister(self._atexit)
        if self.announce and not self._write_failed:
            print(f"deepcontext: profile written to {self.output}; read it with: "
                  f"deepcontext report {self.output}", file=sys.stderr)

    def step(self) -> None:
        """Mark the end of a training step; applies the schedule."""
        self.step_num += 1
        if self.schedule is not None:
            self._apply_phase()

    def _apply_phase(self) -> None:
        phase = self.schedule.phase(self.step_num) if self.schedule else ACTIVE
        capture = phase in (ACTIVE, WARMUP)
        if phase == ACTIVE and self._last_phase == WARMUP:
            monitor.reset_metrics()
        if capture != self._capturing:
            monitor.pause(not capture)
            self._capturing = capture
        self._last_phase = phase

    _last_phase = ACTIVE

    def __enter__(self) -> Session:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- flushing -------------------------------------------------------------------------
    def _flush_loop(self) -> None:
        last = time.monotonic()
        while not self._stop_event.wait(0.1):
            if time.monotonic() - last >= self.flush_interval:
                self._flush(complete=False)
                last = time.monotonic()
            else:
                monitor.resolve()

    def metadata(self, complete: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "command": self.command,
            "host": socket.gethostname(),
            "pid": self._pid,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "start_time": self._start_time,
            "end_time": time.time(),
            "complete": complete,
            "context": list(self.context),
            "sample_interval": self.sample_interval,
            "steps": self.step_num,
        }
        meta.update(monitor.metadata())
        return meta

    def _flush(self, complete: bool) -> None:
        if os.getpid() != self._pid or self._writer is None or self._write_failed:
            return
        with self._lock:
            try:
                tree = monitor.snapshot_tree(self.metadata(complete))
                self._writer.write(tree)
            except Exception as e:  # noqa: BLE001 - the program must run on
                self._write_failed = True
                print(f"deepcontext: cannot write {self.output} ({e}); profiling output stopped, "
                      "the program continues", file=sys.stderr)

    def _atexit(self) -> None:
        if _active is self:
            self.stop()

    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        prev = signal.getsignal(signal.SIGTERM)
        if prev is None:  # set from C: leave it alone
            return
        self._prev_sigterm = prev

        def on_sigterm(signum: int, frame: Any) -> None:
            self.stop()
            if callable(prev):
                prev(signum, frame)
                return
            if prev == signal.SIG_IGN:
                return
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

        signal.signal(signal.SIGTERM, on_sigterm)


def _forget_in_child() -> None:
    # A forked child (e.g. a DataLoader worker) never writes its parent's file.
    global _active
    if _active is not None:
        _active._writer = None
        _active = None
    monitor.pause(True)


def active_session() -> Session | None:
    return _active
