"""A profiling session: starts the monitor's sources, flushes the tree to the profile file
periodically and at exit, and survives the ways a program ends."""

from __future__ import annotations

import atexit
import os
import platform
import shlex
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .. import monitor
from ..errors import DeepContextError
from ..tree.profile_file import ProfileWriter
from . import inductor
from .hooks import HookSpec, hooks_from_config
from .schedule import ACTIVE, DONE, WARMUP, Schedule
from .signals import SigtermBridge, die_by_default_action, file_size_signal_deferred

CONTEXT_LAYERS = ("python", "module", "op", "nested", "native", "gpu", "memory", "jax", "pc")
# The module layer is opt-in: on third-party models it cost 1.2-1.4x more than python,op,gpu on
# the H200 (benchmarks/results/h200-2026-12-01-models-merged.md), above the overhead targets.
DEFAULT_CONTEXT = ("python", "op", "gpu", "jax")

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
    if "nested" in items and "op" not in items:
        raise DeepContextError("the nested layer records operators called by operators: it "
                               "needs the op layer (e.g. --context python,op,nested,gpu)")
    if "module" in items and "native" in items:
        # The native splice pairs the C stack with Python frames from the root; an open module
        # scope would hide that pairing, and the ops under it would lose their native frames.
        raise DeepContextError("the module and native layers cannot be combined yet; drop one "
                               "(e.g. --context python,op,native,gpu)")
    return tuple(dict.fromkeys(items))


def _rank_suffix() -> str | None:
    """``rank<N>`` in a multi-process job (torchrun sets RANK and WORLD_SIZE), else None."""
    rank = os.environ.get("RANK")
    if rank is not None and os.environ.get("WORLD_SIZE", "1") != "1":
        return f"rank{rank}"
    return None


def default_output(stem: str = "deepcontext") -> Path:
    """``<stem>.dcprof``, or the first free ``<stem>.N.dcprof``: predictable, never clobbering."""
    suffix = _rank_suffix()
    if suffix:
        stem = f"{stem}.{suffix}"
    p = Path(f"{stem}.dcprof")
    n = 1
    while p.exists():
        p = Path(f"{stem}.{n}.dcprof")
        n += 1
    return p


def per_rank(path: str | os.PathLike[str]) -> Path:
    """In a multi-rank job every rank gets its own file: ``out.dcprof`` -> ``out.rank3.dcprof``."""
    p = Path(path)
    suffix = _rank_suffix()
    if suffix is None or f".{suffix}." in p.name:
        return p
    return p.with_name(f"{p.stem}.{suffix}{p.suffix or '.dcprof'}")


def _shown_path(path: Path) -> str:
    """The path as the user would type it here: relative to the working directory when it
    lies below it, else absolute."""
    full = str(path.absolute())
    try:
        rel = os.path.relpath(full)
    except (ValueError, OSError):
        return full
    return full if rel == ".." or rel.startswith("../") else rel


def paste_safe(text: str) -> str:
    """``text`` as one shell word that is safe to paste: quoted, and with control characters
    (newlines, escapes) written as ``$'\\xNN'`` so the terminal never interprets them."""
    if text.isprintable():
        return shlex.quote(text)
    out = []
    for c in text:
        if c in "'\\":
            out.append("\\" + c)
        elif c.isprintable():
            out.append(c)
        else:
            code = ord(c)
            out.append(f"\\x{code:02x}" if code < 0x100 else
                       f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "$'" + "".join(out) + "'"


class Session:
    def __init__(self, output: str | os.PathLike[str] | None = None, *,
                 context: str | Iterable[str] | None = None, flush_interval: float = 10.0,
                 sample_interval: float = 0.01, schedule: Schedule | None = None,
                 force: bool = False, command: list[str] | None = None,
                 split_ranks: bool = True, hooks: str | os.PathLike[str] | Iterable[Any] | None = None,
                 perf: bool = False) -> None:
        if flush_interval <= 0:
            raise DeepContextError("flush interval must be positive")
        if sample_interval < 0:
            raise DeepContextError("sample interval must be >= 0 (0 turns CPU sampling off)")
        self.context = parse_context(context)
        # Declared hooks and CPU counters (docs/hooks.md): checked here, before anything runs.
        self.hooks: tuple[HookSpec, ...] = hooks_from_config(hooks)
        if perf and sample_interval == 0:
            raise DeepContextError("perf counters are read at CPU-time samples; they need a "
                                   "sample interval > 0")
        self.perf = bool(perf)
        if output is None:
            self.output = default_output()
        else:
            self.output = per_rank(output) if split_ranks else Path(output)
        self.flush_interval = flush_interval
        self.sample_interval = sample_interval
        self.schedule = schedule
        self.force = force
        self.command = command or list(sys.argv)
        self.step_num = 0
        self.flushes = 0  # profile writes so far (one at start, then each periodic one)
        self._writer: ProfileWriter | None = None
        self._lock = threading.RLock()
        self._writing = False
        self.ended_by: str | None = None
        self._stop_event = threading.Event()
        self._flusher: threading.Thread | None = None
        self._pid = os.getpid()
        self._signals = SigtermBridge(self._pid, snapshot=lambda: self._flush(complete=False),
                                      finish=self._finish_for_sigterm)
        self._start_time = 0.0
        self._write_failed = False
        self._capturing = False
        self.announce = False  # say where the profile went (record)
        self._deferred_to: Session | None = None  # record's session, which this one defers to
        self.after_stop: Callable[[Session], None] | None = None  # e.g. show it in a notebook

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> Session:
        global _active
        if _active is not None and _active.announce and self._deferred_to is None:
            # `deepcontext record` profiles this program, which starts a session of its own:
            # record's covers the whole run, so the program's defers to it (its steps counted
            # there) rather than fail the program it measures.
            self._deferred_to = _active
            own = paste_safe(_shown_path(self.output))
            print(f"deepcontext: the program's own session ({own}) records nothing: "
                  f"`deepcontext record` profiles the whole run into {paste_safe(_active._shown)}",
                  file=sys.stderr, flush=True)
            return self
        if _active is not None:
            raise DeepContextError(
                f"deepcontext is already profiling this process into {_active.output}; "
                "stop that session first")
        started = self._writer is not None or self._deferred_to is not None
        if started or self._stop_event.is_set():
            raise DeepContextError("this profiling session was already started; create a new one")
        self._writer = ProfileWriter(self.output, force=self.force)
        self._shown = _shown_path(self.output)  # before the program can chdir
        self._start_time = time.time()
        try:
            monitor.init(context=self.context, sample_interval=self.sample_interval,
                         hooks=self.hooks, perf=self.perf)
        except BaseException:
            self._writer.close()
            self._writer = None
            self.output.unlink(missing_ok=True)  # no empty file that looks like a profile
            raise
        _active = self
        with monitor.own_work():  # (capture starts as this returns, not at monitor.init)
            inductor.enable()  # torch.compile: provenance, compile timing (docs/torch-compile.md)
            self._capturing = True
            if self.schedule is not None:
                self._apply_phase()
            self._flush(complete=False)
            self._signals.install()
            self._flusher = threading.Thread(target=self._flush_loop, name="deepcontext-flush",
                                             daemon=True)
            self._flusher.start()
            atexit.register(self._atexit)
            _register_fork_hook()
        return self

    def stop(self) -> None:
        """Stop capture and write the complete profile; a no-op unless this session is active."""
        global _active
        if _active is not self:
            return
        self._stop_event.set()
        self._signals.wake()
        if self._flusher is not None and self._flusher is not threading.current_thread():
            self._flusher.join(timeout=2)
        monitor.finalize()
        inductor.disable()
        self._flush(complete=True)
        if self._writer is not None:
            self._writer.close()
        _active = None
        atexit.unregister(self._atexit)
        self._signals.uninstall()
        self._say_where()
        if self.after_stop is not None:
            self.after_stop(self)

    def _say_where(self) -> None:
        if self.announce and not self._write_failed:
            shown = paste_safe(self._shown)
            print(f"deepcontext: profile written to {shown}; read it with: "
                  f"deepcontext report {shown}", file=sys.stderr, flush=True)

    def step(self) -> None:
        """Mark the end of a training step; applies the schedule."""
        if self._deferred_to is not None:
            self._deferred_to.step()
            return
        self.step_num += 1
        if self.schedule is not None:
            self._apply_phase()

    def _apply_phase(self) -> None:
        phase = self.schedule.phase(self.step_num) if self.schedule else ACTIVE
        capture = phase in (ACTIVE, WARMUP)
        # A warm-up's metrics are discarded, and only those: earlier active cycles are kept.
        if phase == WARMUP and self._last_phase != WARMUP:
            monitor.checkpoint_metrics()
        if phase == ACTIVE and self._last_phase == WARMUP:
            monitor.rollback_metrics()
        if capture != self._capturing:
            monitor.pause(not capture, final=phase == DONE)
            self._capturing = capture
        self._last_phase = phase

    _last_phase = ACTIVE

    def __enter__(self) -> Session:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- flushing -------------------------------------------------------------------------
    def _flush_loop(self) -> None:
        from .native import core

        core.ignore_thread(threading.get_native_id())  # the profiler's own work is not measured
        last = time.monotonic()
        # (An interval under the 0.1 s wake-up, as a benchmark's short blocks need, is kept too.)
        tick = min(0.1, self.flush_interval / 2)
        while not self._stop_event.is_set():
            self._signals.wait(tick, self._stop_event)
            if self._stop_event.is_set():
                break
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
        if self.ended_by:
            meta["ended_by"] = self.ended_by
        meta.update(monitor.metadata())
        return meta

    def _flush(self, complete: bool) -> None:
        if os.getpid() != self._pid or self._writer is None or self._write_failed:
            return
        with self._lock:
            if self._writing:  # a signal handler interrupted this thread's own flush
                return
            self._writing = True
            try:
                # (the last one whole: its node ids do not depend on when flushes ran)
                tree = monitor.snapshot_tree(self.metadata(complete), fresh=complete)
                with file_size_signal_deferred():
                    self._writer.write(tree)
                self.flushes += 1
            except Exception as e:  # noqa: BLE001 - the program must run on
                self._write_failed = True
                print(f"deepcontext: cannot write {self.output} ({e}); profiling output stopped, "
                      "the program continues", file=sys.stderr, flush=True)
            finally:
                self._writing = False

    def _atexit(self) -> None:
        if _active is self:
            self.stop()

    def _finish_for_sigterm(self, in_main_thread: bool) -> None:
        self.ended_by = "SIGTERM"
        if in_main_thread:
            self.stop()
        else:  # flusher thread: the main thread is inside C; leave capture state alone
            self._flush(complete=True)
            self._say_where()


_fork_hook_registered = False


def _register_fork_hook() -> None:
    global _fork_hook_registered
    if not _fork_hook_registered:
        os.register_at_fork(after_in_child=_forget_in_child)
        _fork_hook_registered = True


def _forget_in_child() -> None:
    # A forked child (e.g. a DataLoader worker) never writes its parent's file, and its
    # signals must not reach the parent's flusher through the inherited wakeup pipe.
    global _active
    session = _active
    if session is not None and session._signals.ending:
        die_by_default_action(signal.SIGTERM)
    if session is not None:
        session._writer = None
        _active = None
        session._signals.forget_in_child()
    monitor.pause(True, in_forked_child=True)


def active_session() -> Session | None:
    return _active
