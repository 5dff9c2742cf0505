"""A profiling session: starts the monitor's sources, flushes the tree to the profile file
periodically and at exit, and survives the ways a program ends."""

from __future__ import annotations

import atexit
import contextlib
import os
import platform
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

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


class Session:
    def __init__(self, output: str | os.PathLike[str] | None = None, *,
                 context: str | Iterable[str] | None = None, flush_interval: float = 10.0,
                 sample_interval: float = 0.01, schedule: Schedule | None = None,
                 force: bool = False, command: list[str] | None = None,
                 split_ranks: bool = True) -> None:
        if flush_interval <= 0:
            raise DeepContextError("flush interval must be positive")
        if sample_interval < 0:
            raise DeepContextError("sample interval must be >= 0 (0 turns CPU sampling off)")
        self.context = parse_context(context)
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
        self._writer: ProfileWriter | None = None
        self._lock = threading.RLock()
        self._writing = False
        self._end_claim = threading.Lock()  # taken by whoever ends the process on SIGTERM
        self.ended_by: str | None = None
        self._wakeup: tuple[int, int] | None = None  # (read, write) of the signal wakeup pipe
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
        if self._writer is not None or self._stop_event.is_set():
            raise DeepContextError("this profiling session was already started; create a new one")
        self._writer = ProfileWriter(self.output, force=self.force)
        self._start_time = time.time()
        try:
            monitor.init(context=self.context, sample_interval=self.sample_interval)
        except BaseException:
            self._writer.close()
            self._writer = None
            self.output.unlink(missing_ok=True)  # no empty file that looks like a profile
            raise
        _active = self
        self._capturing = True
        if self.schedule is not None:
            self._apply_phase()
        self._flush(complete=False)
        self._install_sigterm()
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
        if self._wakeup is not None:
            with contextlib.suppress(OSError):
                os.write(self._wakeup[1], b"\0")  # wake the flusher now
        if self._flusher is not None and self._flusher is not threading.current_thread():
            self._flusher.join(timeout=2)
        monitor.finalize()
        self._flush(complete=True)
        if self._writer is not None:
            self._writer.close()
        _active = None
        atexit.unregister(self._atexit)
        self._uninstall_sigterm()
        self._say_where()

    def _say_where(self) -> None:
        if self.announce and not self._write_failed:
            print(f"deepcontext: profile written to {self.output}; read it with: "
                  f"deepcontext report {self.output}", file=sys.stderr, flush=True)

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

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- flushing -------------------------------------------------------------------------
    def _flush_loop(self) -> None:
        last = time.monotonic()
        while not self._stop_event.is_set():
            signals = self._wait_for_signal(0.1)
            if self._stop_event.is_set():
                break
            if signals:
                self._on_signals(signals)
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
                tree = monitor.snapshot_tree(self.metadata(complete))
                with _file_size_signal_deferred():
                    self._writer.write(tree)
            except Exception as e:  # noqa: BLE001 - the program must run on
                self._write_failed = True
                print(f"deepcontext: cannot write {self.output} ({e}); profiling output stopped, "
                      "the program continues", file=sys.stderr, flush=True)
            finally:
                self._writing = False

    def _atexit(self) -> None:
        if _active is self:
            self.stop()

    # -- SIGTERM ----------------------------------------------------------------------------
    # A Python handler runs only when the main thread is back in the interpreter, which a long
    # C call (a big matmul, an NCCL wait) can delay past the launcher's SIGKILL. So CPython's
    # C-level handler also writes the signal number into our wakeup pipe, and the flusher
    # thread acts at once whenever the C call has released the GIL.
    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        if os.environ.get("DEEPCONTEXT_SIGNALS", "1") == "0":  # opt-out: touch no signal state
            return
        prev = signal.getsignal(signal.SIGTERM)
        if prev is None or prev == signal.SIG_IGN:  # set from C, or ignored: leave it alone
            return
        self._prev_sigterm = prev

        def on_sigterm(signum: int, frame: Any) -> None:
            if os.getpid() != self._pid:  # inherited by a forked child: behave as before us
                if callable(prev):
                    prev(signum, frame)
                else:
                    _die_by_default_action(signum)
                return
            if callable(prev):
                # The program's own handler decides (it often only sets a "stop soon" flag):
                # keep profiling, but save what we have in case a SIGKILL follows.
                self._flush(complete=False)
                prev(signum, frame)
                return
            self._end_by_sigterm(finalize=True)

        self._sigterm_handler = on_sigterm
        signal.signal(signal.SIGTERM, on_sigterm)
        self._install_wakeup_pipe()

    def _uninstall_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal state is main-thread only; the pipe stays open (no reuse of its fd)
        handler = getattr(self, "_sigterm_handler", None)
        if handler is not None and signal.getsignal(signal.SIGTERM) is handler:
            signal.signal(signal.SIGTERM, self._prev_sigterm)
        if self._wakeup is not None:
            previous = signal.set_wakeup_fd(-1)
            if previous != self._wakeup[1]:  # someone (asyncio) took it over: keep theirs
                signal.set_wakeup_fd(previous)
            for fd in self._wakeup:
                os.close(fd)
            self._wakeup = None

    def _end_by_sigterm(self, finalize: bool) -> None:
        """Write the complete profile, then die by SIGTERM as the program would have."""
        if not self._end_claim.acquire(timeout=30):
            return
        self.ended_by = "SIGTERM"
        if finalize:
            self.stop()
        else:  # flusher thread: the main thread is inside C; leave capture state alone
            self._flush(complete=True)
            self._say_where()
        _die_by_default_action(signal.SIGTERM)

    def _install_wakeup_pipe(self) -> None:
        r, w = os.pipe()
        os.set_blocking(w, False)
        try:
            previous = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except ValueError:
            previous = None
        if previous != -1:  # not ours to take (asyncio or the program has one)
            if previous is not None:
                signal.set_wakeup_fd(previous)
            os.close(r)
            os.close(w)
            return
        self._wakeup = (r, w)

    def _wait_for_signal(self, timeout: float) -> bytes:
        if self._wakeup is None:
            self._stop_event.wait(timeout)
            return b""
        ready, _, _ = select.select([self._wakeup[0]], [], [], timeout)
        if not ready:
            return b""
        try:
            return os.read(self._wakeup[0], 512)
        except OSError:
            return b""

    def _on_signals(self, signals: bytes) -> None:
        if signal.SIGTERM in signals:
            if signal.getsignal(signal.SIGTERM) is getattr(self, "_sigterm_handler", None) \
                    and not callable(self._prev_sigterm):
                self._end_by_sigterm(finalize=False)
            else:
                self._flush(complete=False)  # the program's handler decides; save meanwhile
        elif signal.SIGINT in signals:
            self._flush(complete=False)


def _die_by_default_action(signum: int) -> None:
    """Re-raise ``signum`` with its default action (works from any thread)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signum, signal.SIG_DFL)
    else:
        import ctypes

        # signal.signal is main-thread only; libc's signal() is not.
        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.signal(signum, None)  # SIG_DFL
    os.kill(os.getpid(), signum)


@contextlib.contextmanager
def _file_size_signal_deferred() -> Iterator[None]:
    """Past RLIMIT_FSIZE the kernel sends SIGXFSZ, whose default kills the program: hold it
    for this thread so the write fails with EFBIG instead, and discard the pending signal."""
    sig = getattr(signal, "SIGXFSZ", None)
    if sig is None:
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {sig})
    try:
        yield
    finally:
        if sig not in old:
            if sig in signal.sigpending():
                signal.sigtimedwait({sig}, 0)
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


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
    if session is not None:
        session._writer = None
        _active = None
        if session._wakeup is not None:
            with contextlib.suppress(ValueError):  # after fork this thread is the main one
                previous = signal.set_wakeup_fd(-1)
                if previous not in (-1, session._wakeup[1]):
                    signal.set_wakeup_fd(previous)
            for fd in session._wakeup:
                with contextlib.suppress(OSError):
                    os.close(fd)
            session._wakeup = None
    monitor.pause(True)


def active_session() -> Session | None:
    return _active
