"""This process's threads by their OS name, and any thread's CPU clock: what models.py (the
threads that run a step) and where.py (a second thread to sample) need."""

from __future__ import annotations

import time
from pathlib import Path


def named(prefix: str) -> list[tuple[int, str]]:
    """(id, name) of every thread whose OS name starts with ``prefix``, oldest first."""
    found = []
    for task in sorted(Path("/proc/self/task").iterdir(), key=lambda t: int(t.name)):
        try:
            name = (task / "comm").read_text().strip()
        except OSError:
            continue  # (a thread that ended meanwhile)
        if name.startswith(prefix):
            found.append((int(task.name), name))
    return found


def cpu_seconds(tid: int) -> float:
    """A thread's CPU seconds, from its CPU-time clock (~tid << 3 | CPUCLOCK_PERTHREAD | SCHED);
    0 once the thread is gone."""
    try:
        return time.clock_gettime(((~tid) << 3) | 6)
    except OSError:
        return 0.0
