"""Read one capture of the JAX profiler into executions: each timed XLA thunk (CPU) or kernel
(GPU) with its executable (program id), HLO instruction and the Python call that dispatched it.

The link from a thunk to its call: the tracked ``jax.jit`` wrapper opens a TraceMe named
``DISPATCH_EVENT`` carrying the context node on the calling thread. Inside it XLA records
``PjitFunction(<name>)`` and, on XLA:CPU, a ``ThreadpoolListener::Record`` flow event whose id
the worker thread's ``ThreadpoolListener::StartRegion`` consumes; the thunks run in that region
carry a ``run_id``. On the GPU a kernel's ``correlation_id`` names its launch API call; a launch
inside a dispatch's time span belongs to it, and so does a compile-time kernel (no program id:
XLA's autotuner) that ran inside one. When neither link exists the latest dispatch of a
function of that name before the execution is taken; failing that the execution is unlinked.
User TraceMe spans (``jax.profiler.TraceAnnotation``) open around a dispatch become its markers.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass
from typing import Any

DISPATCH_EVENT = "deepcontext.jax_call"
_FLOW_RECORD = "ThreadpoolListener::Record"
_REGION_START = "ThreadpoolListener::StartRegion"
_REGION_STOP = "ThreadpoolListener::StopRegion"
_MAX_CARRIED_RUNS = 4096
_MAX_PENDING = 64


@dataclass(eq=False, slots=True)
class Dispatch:
    """One tracked call (identity is the object: a run links to exactly one)."""

    node: int
    markers: tuple[str, ...]
    function: str  # from PjitFunction(<function>), "" when not seen
    start: int
    end: int
    eager: bool = False  # an eager primitive's computation, not a jitted function's


@dataclass(frozen=True, slots=True)
class Execution:
    dispatch: Dispatch | None
    program_id: int
    hlo_op: str
    kernel: str
    device: str  # "cpu" or "gpu"
    seconds: float
    module: str = ""  # the executable's name (hlo_module), for events without a program id


@dataclass(slots=True)
class _Timed:
    name: str
    start: int
    end: int
    stats: dict[str, Any]
    line: int
    exclusive: int = 0


_NO_STATS: dict[str, Any] = {}


def _events(line: Any, wants: Callable[[str], bool] | None) -> list[
        tuple[int, int, str, Any]]:
    """A line's events in start order (outer spans first), as ``(start, end, name, stats)``.
    Reading an event's stats costs ~4 us, 20x its name and times: events ``wants`` names get
    their stats dict (all when None), the others carry the event to read them on demand."""
    out = []
    for e in line.events:
        start = int(e.start_ns)
        name = e.name
        out.append((start, start + int(e.duration_ns), name,
                    dict(e.stats) if wants is None or wants(name) else e))
    out.sort(key=lambda t: (t[0], -t[1]))
    return out


def _stats(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else dict(value.stats)


class Folder:
    """Turns captures into executions. Calls enqueued in one capture and run in the next stay
    linked (``pending``, ``carry``)."""

    def __init__(self) -> None:
        self.carry: dict[int, Dispatch | None] = {}  # run id -> its dispatch
        self.pending: dict[str, list[_Enqueue]] = {}  # function -> calls not yet seen running

    def executions(self, profile: Any, instructions: Container[str] = ()) -> Iterator[Execution]:
        """The executions in ``profile``. XLA:CPU names a thunk event after its instruction,
        so on host lines only events named in ``instructions`` (of the known executables) or
        in ``_HOST_STATS`` have their stats read."""

        def wants(name: str) -> bool:
            return name in instructions or name == DISPATCH_EVENT

        dispatches: list[Dispatch] = []
        by_flow: dict[int, Dispatch] = {}
        enqueues: list[_Enqueue] = []
        launches: list[tuple[int, int]] = []  # (time, correlation id) of host launch calls
        thunks: list[_Timed] = []
        kernels: list[_Timed] = []
        for li, (plane, line) in enumerate((p, ln) for p in profile.planes for ln in p.lines):
            if plane.name.startswith("/device:"):
                for start, end, name, stats in _events(line, None):
                    if "hlo_op" in stats or "program_id" in stats:
                        kernels.append(_Timed(name, start, end, stats, li))
                continue
            host = wants if plane.name == "/host:CPU" else None  # e.g. CUPTI's API plane: all
            _HostLine(li, dispatches, by_flow, enqueues, launches, thunks).read(_events(line, host))
        dispatches.sort(key=lambda d: d.start)
        yield from self._cpu(thunks, by_flow, enqueues, dispatches)
        yield from self._gpu(kernels, launches, dispatches)

    # -- linking ---------------------------------------------------------------------------
    def _cpu(self, thunks: list[_Timed], by_flow: dict[int, Dispatch], enqueues: list[_Enqueue],
             dispatches: list[Dispatch]) -> Iterator[Execution]:
        runs: dict[int, Dispatch | None] = {}
        first: dict[int, _Timed] = {}
        for t in thunks:
            run = t.stats.get("run_id")
            if run is None:
                continue
            run = int(run)
            if run not in first or t.start < first[run].start:
                first[run] = t
            if "_dispatch" in t.stats:  # ran inline, inside the call on the calling thread
                runs[run] = t.stats["_dispatch"]
            elif t.stats.get("_region_flow") in by_flow:
                runs[run] = by_flow[t.stats["_region_flow"]]
        for run in first:
            if run not in runs and run in self.carry:
                runs[run] = self.carry[run]
        self._in_order(first, runs, enqueues)
        for t in thunks:
            run = t.stats.get("run_id")
            disp = runs.get(int(run)) if run is not None else None
            yield Execution(disp, int(t.stats["program_id"]), str(t.stats["hlo_op"]), t.name,
                            "cpu", max(0, t.exclusive) * 1e-9, str(t.stats.get("hlo_module", "")))
        self.carry.update(runs)
        while len(self.carry) > _MAX_CARRIED_RUNS:
            self.carry.pop(next(iter(self.carry)))

    def _in_order(self, first: dict[int, _Timed], runs: dict[int, Dispatch | None],
                  enqueues: list[_Enqueue]) -> None:
        """Runs not linked exactly: XLA runs one function's calls in the order they were
        enqueued, so the k-th unlinked run of ``jit_f`` is the k-th unclaimed call of ``f``
        (never one enqueued after the run began)."""
        claimed = {id(d) for d in runs.values() if d is not None}
        queues: dict[str, list[_Enqueue]] = {k: list(v) for k, v in self.pending.items()}
        for e in sorted(enqueues, key=lambda e: e.start):
            if e.dispatch is None or id(e.dispatch) not in claimed:
                queues.setdefault(e.function, []).append(e)
        heads = {k: 0 for k in queues}
        for run, t in sorted(first.items(), key=lambda kv: kv[1].start):
            if run in runs:
                continue
            name = _function_key(str(t.stats.get("hlo_module", "")).removeprefix("jit_"))
            queue = queues.get(name, [])
            i = heads.get(name, 0)
            if i < len(queue) and queue[i].start <= t.start:
                runs[run] = queue[i].dispatch
                heads[name] = i + 1
        self.pending = {k: q[heads.get(k, 0):][-_MAX_PENDING:] for k, q in queues.items()
                        if q[heads.get(k, 0):]}

    def _gpu(self, kernels: list[_Timed], launches: list[tuple[int, int]],
             dispatches: list[Dispatch]) -> Iterator[Execution]:
        launch_time = {corr: t for t, corr in launches}
        starts = [d.start for d in dispatches]
        seen: set[tuple[Any, int]] = set()
        for k in kernels:
            corr = k.stats.get("correlation_id")
            if corr is not None:  # one kernel, even if a plane shows it on two lines
                if (corr, k.start) in seen:
                    continue
                seen.add((corr, k.start))
            at = launch_time.get(int(corr)) if corr is not None else None
            disp = _containing(dispatches, starts, at) if at is not None else None
            if disp is None and "program_id" not in k.stats:
                # compile-time work (XLA's autotuner timing candidate kernels, launched from
                # its own threads): it runs inside the call that is compiling
                disp = _containing(dispatches, starts, k.start)
            if disp is None:
                disp = _latest_before(dispatches, at if at is not None else k.start,
                                      str(k.stats.get("hlo_module", "")))
            yield Execution(disp, int(k.stats.get("program_id", -1)), str(k.stats.get("hlo_op", "")),
                            k.name, "gpu", (k.end - k.start) * 1e-9,
                            str(k.stats.get("hlo_module", "")))


@dataclass(frozen=True, slots=True)
class _Enqueue:
    """One call of a jitted function that ran an executable (``PjitFunction`` with an execute
    inside); ``dispatch`` is None for calls the hooks did not see (jax's own jitted functions)."""

    start: int
    function: str
    dispatch: Dispatch | None


def _function_key(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name)


class _HostLine:
    """One host thread's events, in start order: dispatch spans and what nests in them."""

    def __init__(self, li: int, dispatches: list[Dispatch], by_flow: dict[int, Dispatch],
                 enqueues: list[_Enqueue], launches: list[tuple[int, int]],
                 thunks: list[_Timed]) -> None:
        self.li, self.dispatches, self.by_flow = li, dispatches, by_flow
        self.enqueues, self.launches, self.thunks = enqueues, launches, thunks

    def read(self, events: list[tuple[int, int, str, Any]]) -> None:
        spans: list[tuple[int, str]] = []  # open user spans (TraceAnnotation) outside any call
        dstack: list[tuple[int, Dispatch]] = []  # open dispatch spans
        cstack: list[tuple[int, list[Any]]] = []  # open PjitFunction spans
        region: Any = None  # the open thread-pool region's StartRegion (its flow id on demand)
        hlo_stack: list[_Timed] = []
        calls: list[list[Any]] = []  # [start, end, function, dispatch, executed]
        for start, end, name, stats in events:
            for stack in (spans, dstack, cstack):
                while stack and stack[-1][0] <= start:
                    stack.pop()
            disp = dstack[-1][1] if dstack else None
            call = cstack[-1][1] if cstack else None
            if name == DISPATCH_EVENT and isinstance(stats, dict) and "n" in stats:
                markers = tuple(s[1] for s in spans) if not dstack else dstack[-1][1].markers
                d = Dispatch(int(stats["n"]), markers, "", start, end, bool(stats.get("e")))
                self.dispatches.append(d)
                dstack.append((end, d))
                continue
            if name.startswith("PjitFunction("):
                if call is None:  # the outer of XLA's two nested PjitFunction spans
                    c = [start, end, name[len("PjitFunction("):-1], disp, False]
                    if disp is not None and not disp.function:
                        disp.function = c[2]
                    calls.append(c)
                    cstack.append((end, c))
                continue
            if call is not None and "Execute" in name:
                call[4] = True
            if name == _FLOW_RECORD:
                if disp is not None:  # the call handing its run to XLA's thread pool
                    flow = _stats(stats).get("_p")
                    if flow is not None:
                        self.by_flow[int(flow)] = disp
                continue
            if name == _REGION_START:
                region = stats
                continue
            if name == _REGION_STOP:
                region = None
                continue
            if isinstance(stats, dict):
                if "correlation_id" in stats:
                    self.launches.append((start, int(stats["correlation_id"])))
                if "hlo_op" in stats and "program_id" in stats:
                    flow = None
                    if region is not None:
                        region = _stats(region)  # read once per region that ran thunks
                        flow = int(region["_c"]) if "_c" in region else None
                    self._thunk(start, end, name, stats, flow, disp, hlo_stack)
                    continue
            if end > start and disp is None and not name.startswith("end: "):
                spans.append((end, name))  # a user span: a marker of the calls inside it
        for c in calls:
            if c[4]:
                self.enqueues.append(_Enqueue(c[0], _function_key(c[2]), c[3]))

    def _thunk(self, start: int, end: int, name: str, stats: dict[str, Any],
               region_flow: int | None, disp: Dispatch | None, hlo_stack: list[_Timed]) -> None:
        t = _Timed(name, start, end, stats, self.li, end - start)
        if region_flow is not None:
            t.stats["_region_flow"] = region_flow
        if disp is not None:
            t.stats["_dispatch"] = disp
        while hlo_stack and hlo_stack[-1].end <= start:
            hlo_stack.pop()
        if hlo_stack:  # a thunk inside another (a while or call thunk's body)
            hlo_stack[-1].exclusive -= end - start
        hlo_stack.append(t)
        self.thunks.append(t)


def _containing(dispatches: list[Dispatch], starts: list[int], t: int) -> Dispatch | None:
    """The innermost (latest started) dispatch whose span holds time ``t``."""
    for i in range(bisect.bisect_right(starts, t) - 1, -1, -1):
        if dispatches[i].end >= t:
            return dispatches[i]
    return None


def _latest_before(dispatches: list[Dispatch], t: int, module: str) -> Dispatch | None:
    """The last dispatch of the function ``module`` (``jit_<function>``) started before ``t``."""
    function = _function_key(module.removeprefix("jit_"))
    for d in reversed(dispatches):
        if d.start <= t and d.function and _function_key(d.function) == function:
            return d
    return None
