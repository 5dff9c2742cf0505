"""DeepContext: one calling context per event, from the Python line through the framework
operator down to the GPU kernel, aggregated online into a calling context tree.

    with deepcontext.profile(output="train.dcprof") as prof:
        for batch in loader:
            train_step(batch)
            prof.step()

    tree = deepcontext.load("train.dcprof")
"""

from __future__ import annotations

from typing import Any, Iterable

from .capture.schedule import Schedule, schedule
from .capture.session import Session
from .errors import DeepContextError, ProfileFormatError
from .tree import CallingContextTree, Frame, Node, load

__version__ = "0.1.0"

__all__ = [
    "profile", "start", "stop", "load", "schedule", "Schedule", "Session",
    "CallingContextTree", "Frame", "Node", "DeepContextError", "ProfileFormatError",
    "load_ipython_extension",
]


def profile(output: str | None = None, *, context: str | Iterable[str] | None = None,
            schedule: Schedule | None = None, flush_interval: float = 10.0,
            sample_interval: float = 0.01, force: bool = False, hooks: str | None = None,
            perf: bool = False) -> Session:
    """A profiling session for a ``with`` block; call ``.step()`` at the end of each step.
    In a Jupyter notebook the flame graph and findings appear under the cell when it ends.

    ``hooks``: a TOML file of runtime functions to intercept; ``perf``: CPU counters per context
    (docs/hooks.md)."""
    session = Session(output, context=context, schedule=schedule, flush_interval=flush_interval,
                      sample_interval=sample_interval, force=force, hooks=hooks, perf=perf)
    from . import jupyter

    if jupyter.in_notebook():
        session.after_stop = lambda s: jupyter.show(s.output)
    return session


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext deepcontext`` in IPython or Jupyter: adds the ``%%deepcontext`` cell magic."""
    from .jupyter import load_ipython_extension as load

    load(ipython)


_global: Session | None = None


def start(output: str | None = None, **kwargs: Any) -> Session:
    """Start profiling this process (see ``profile`` for the arguments)."""
    global _global
    if _global is not None:
        raise DeepContextError("deepcontext.start() was already called; call deepcontext.stop() first")
    _global = profile(output, **kwargs).start()
    return _global


def stop() -> None:
    """Stop the session begun by ``start()`` and write its profile."""
    global _global
    if _global is None:
        raise DeepContextError("deepcontext.stop() called without deepcontext.start()")
    session, _global = _global, None
    session.stop()
