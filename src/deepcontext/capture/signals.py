"""How a profiling session lives with the program's signals: SIGTERM ends the program as it
would have without us, but only after the complete profile is written; the program's own
handlers keep their meaning; our own writes never die of SIGXFSZ.

A Python signal handler runs only when the main thread is back in the interpreter, which a long
C call (a big matmul, an NCCL wait, a device sync) can delay past the launcher's SIGKILL. So
CPython's C-level handler is also told to write the signal number into a private pipe
(``signal.set_wakeup_fd``); the session's flusher thread waits on it and acts at once whenever
that C call has released the GIL.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

#: ``DEEPCONTEXT_SIGNALS=0`` leaves every signal disposition and the wakeup descriptor alone.
OPT_OUT_VARIABLE = "DEEPCONTEXT_SIGNALS"


class SigtermBridge:
    """SIGTERM handling for one session.

    ``snapshot()`` saves an incomplete profile; ``finish(in_main_thread)`` writes the complete
    one (stopping capture only when called on the main thread, which is then back in Python).
    """

    def __init__(self, pid: int, snapshot: Callable[[], None],
                 finish: Callable[[bool], None]) -> None:
        self._pid = pid
        self._snapshot = snapshot
        self._finish = finish
        self._prev: Any = None
        self._handler: Callable[[int, Any], None] | None = None
        self._wakeup: tuple[int, int] | None = None  # (read, write) ends of the wakeup pipe
        self._claim = threading.Lock()  # whoever holds it is ending the process
        self._poll: Any = None
        self._lost = False  # the program closed our pipe (daemonizing): never touch its fds
        #: Set while the final write before a SIGTERM death runs. Without us the program would
        #: already be gone, so a process it forks meanwhile (a pool replacing its killed
        #: workers) dies at once instead of outliving it.
        self.ending = False

    # -- main thread ------------------------------------------------------------------------
    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        if os.environ.get(OPT_OUT_VARIABLE, "1") == "0":
            return
        prev = signal.getsignal(signal.SIGTERM)
        if prev is None or prev == signal.SIG_IGN:  # set from C, or ignored: leave it alone
            return
        self._prev = prev
        self._handler = self._on_sigterm
        signal.signal(signal.SIGTERM, self._handler)
        self._install_wakeup_pipe()

    def uninstall(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal state is main-thread only; the pipe stays open (its fd not reused)
        if self._handler is not None and signal.getsignal(signal.SIGTERM) == self._handler:
            signal.signal(signal.SIGTERM, self._prev)
        self._handler = None
        if self._wakeup is not None:
            previous = signal.set_wakeup_fd(-1)
            if previous != self._wakeup[1]:  # someone (asyncio) took it over: keep theirs
                signal.set_wakeup_fd(previous)
            if not self._lost:
                for fd in self._wakeup:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self._wakeup = None

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        prev = self._prev
        if os.getpid() != self._pid:  # inherited by a forked child: behave as before us
            if callable(prev):
                prev(signum, frame)
            else:
                die_by_default_action(signum)
            return
        if callable(prev):
            # The program's own handler decides (it often only sets a "stop soon" flag): keep
            # profiling, but save what we have in case a SIGKILL follows.
            self._snapshot()
            prev(signum, frame)
            return
        self._end(in_main_thread=True)

    def _install_wakeup_pipe(self) -> None:
        r, w = (_out_of_the_way(fd) for fd in os.pipe())
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
        self._poll = select.poll()
        self._poll.register(r, select.POLLIN)

    # -- any thread -------------------------------------------------------------------------
    def _end(self, in_main_thread: bool) -> None:
        """Write the complete profile, then die by SIGTERM as the program would have."""
        # The flusher never waits: if the main thread holds the claim it is ending the process
        # itself (and is about to join the flusher). The main thread waits for a flusher that
        # is writing, but not forever: it dies all the same.
        if self._claim.acquire(timeout=30 if in_main_thread else 0):
            self.ending = True
            self._finish(in_main_thread)
        elif not in_main_thread:
            return
        die_by_default_action(signal.SIGTERM)

    def wake(self) -> None:
        """Make a pending ``wait`` return now (the session is stopping)."""
        if self._wakeup is not None:
            with contextlib.suppress(OSError):
                os.write(self._wakeup[1], b"\0")

    # -- flusher thread ---------------------------------------------------------------------
    def wait(self, timeout: float, stop: threading.Event) -> None:
        """Sleep up to ``timeout``; act on SIGTERM/SIGINT delivered meanwhile."""
        if self._wakeup is None or self._lost:
            stop.wait(timeout)
            return
        events = self._poll.poll(timeout * 1000)
        if not events or stop.is_set():
            return
        try:
            if events[0][1] & (select.POLLNVAL | select.POLLERR | select.POLLHUP):
                raise OSError("wakeup pipe closed")
            signals = os.read(self._wakeup[0], 512)
        except OSError:
            # The program closed every descriptor (daemonizing): take our numbers back if they
            # are still free, else fall back to the Python handler alone.
            self._lost = not self._reclaim_pipe()
            return
        if signal.SIGTERM in signals:
            ours = self._handler is not None and signal.getsignal(signal.SIGTERM) == self._handler
            if ours and not callable(self._prev):
                self._end(in_main_thread=False)
            else:
                self._snapshot()  # the program's handler decides; save meanwhile
        elif signal.SIGINT in signals:
            self._snapshot()

    def _reclaim_pipe(self) -> bool:
        assert self._wakeup is not None
        for fd in self._wakeup:
            try:
                os.fstat(fd)
                return False  # the number is someone else's now: never touch it
            except OSError:
                pass
        r, w = os.pipe()
        os.dup2(r, self._wakeup[0], inheritable=False)
        os.dup2(w, self._wakeup[1], inheritable=False)
        os.close(r)
        os.close(w)
        os.set_blocking(self._wakeup[1], False)
        self._poll = select.poll()
        self._poll.register(self._wakeup[0], select.POLLIN)
        return True

    # -- forked child -----------------------------------------------------------------------
    def forget_in_child(self) -> None:
        """The child's signals must not reach the parent's flusher through the shared pipe, and
        the child gets back the SIGTERM disposition it would have had without us: a forked pool
        worker blocked in C (a semaphore wait) must die at once when its pool terminates it."""
        if self._handler is not None:
            with contextlib.suppress(ValueError, OSError):  # after fork this thread is the main one
                if signal.getsignal(signal.SIGTERM) == self._handler:
                    signal.signal(signal.SIGTERM, self._prev)
            self._handler = None
        if self._wakeup is None:
            return
        with contextlib.suppress(ValueError):  # after fork, this thread is the main one
            previous = signal.set_wakeup_fd(-1)
            if previous not in (-1, self._wakeup[1]):
                signal.set_wakeup_fd(previous)
        for fd in self._wakeup:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._wakeup = None


def _out_of_the_way(fd: int) -> int:
    """Move ``fd`` to a high number: a program that closes descriptors it does not know and
    opens new files then gets low numbers, never ours, so no signal byte lands in its files."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        base = 900 if soft == resource.RLIM_INFINITY else min(900, soft - 64)
        if base <= fd:
            return fd
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, base)
    except (OSError, ValueError, ImportError):
        return fd
    os.close(fd)
    return high


def die_by_default_action(signum: int) -> None:
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
def file_size_signal_deferred() -> Iterator[None]:
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
