"""What every rule needs to know about a profile, computed once: the user's line of each node,
inclusive metrics, the operators each line issues, the profiled time and finding construction."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..tree.cct import CallingContextTree, Node
from ..tree.frame import MARKER, OP, PYTHON, THREAD, Frame
from ..tree.usercode import is_user_file, is_user_frame
from .finding import EstimatedGain, Finding, Location

#: autograd's operator that adds a parameter's gradient into ``.grad``: one call per gradient
ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"

_IMPORT_FILES = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")

# One-time work that is its own context, never steady-state host time: compilation (Dynamo's
# frame conversion holds all of torch.compile's tracing, AOT and Inductor work; XLA's lowering
# and compile under jax.jit), autotuning, and the compile markers the capture writes.
_SETUP_FILES = ("/torch/_dynamo/convert_frame.py", "/jax/_src/compiler.py",
                "/jax/_src/interpreters/pxla.py", "/jax/_src/interpreters/mlir.py",
                "/triton/compiler/", "/torch/_inductor/select_algorithm.py")
_SETUP_FUNCTIONS = re.compile(r"(^|\.)(benchmark_all_configs|autotune_to_one_config|precompile)$")
# Building a model and moving or loading it: constructors anywhere, torch's Module methods that
# walk every parameter once, transformers' weight initialisation.
_MODULE_SETUP = re.compile(r"^Module\.(_apply|to|cuda|cpu|half|float|double|bfloat16|type|"
                           r"to_empty|load_state_dict|share_memory)$")
_LIBRARY_SETUP = re.compile(r"(^|\.)(post_init|init_weights|_init_weights|"
                            r"from_pretrained|from_config)$")


def is_setup_frame(f: Frame) -> bool:
    """A frame that starts one-time set-up work: compilation and autotuning (``compile``
    markers written by the capture, or the compilers' own Python entry points), building a
    model (constructors, weight initialisation) and moving it (``Module.to``/``cuda``)."""
    if f.kind == MARKER:
        return f.name.split(":", 1)[0].strip().lower() in ("compile", "autotune", "jit compile")
    if f.kind != PYTHON:
        return False
    if f.name.endswith(".__init__"):
        return True  # constructing a model, a layer, a dataset: once, before the steps
    path = f.file.replace("\\", "/")
    if path.endswith("/torch/nn/modules/module.py") and _MODULE_SETUP.match(f.name):
        return True
    if not is_user_file(f.file) and _LIBRARY_SETUP.search(f.name):
        return True
    return any(part in path for part in _SETUP_FILES) or (
        "/torch/_inductor/" in path and bool(_SETUP_FUNCTIONS.search(f.name)))


@dataclass(frozen=True, slots=True)
class OpSite:
    """One operator node the user's code called directly (not an op nested in another op)."""

    node: int
    name: str
    owner: int  # the deepest user Python frame above it, -1 if none
    backward: bool  # reached through the ``backward`` marker (autograd ran it for this line)


class AnalysisContext:
    """A read-only, precomputed view of one tree for the rules."""

    def __init__(self, tree: CallingContextTree) -> None:
        self.tree = tree
        self.metadata: dict[str, Any] = tree.metadata
        n = len(tree.nodes)
        self.owner = [-1] * n
        self.in_backward = [False] * n
        self.in_import = [False] * n
        self.in_setup = [False] * n
        self.in_worker = [False] * n  # under a [thread] frame: a thread outside Python and ops
        self.in_compile = [False] * n
        for node in tree.nodes[1:]:  # parents come before children in the arena
            p, f = node.parent, node.frame
            self.owner[node.id] = self.owner[p]
            self.in_backward[node.id] = self.in_backward[p] or (f.kind == MARKER
                                                                 and f.name == "backward")
            self.in_import[node.id] = self.in_import[p] or f.file in _IMPORT_FILES
            self.in_setup[node.id] = self.in_setup[p] or is_setup_frame(f)
            self.in_worker[node.id] = self.in_worker[p] or f.kind == THREAD
            self.in_compile[node.id] = self.in_compile[p] or (f.kind == MARKER
                                                               and f.name == "compile")
            if f.kind == PYTHON and is_user_frame(f):  # generated code is no one's line (issue 15)
                self.owner[node.id] = node.id

    # -- metrics ---------------------------------------------------------------------------
    def inc(self, metric: str) -> list[float]:
        """Inclusive values of ``metric`` per node."""
        return self.tree.inclusive_all(metric)

    def host_time(self, node: int) -> float:
        """Steady-state host seconds spent in a context: for an operator its measured wall time;
        for other contexts sampled CPU time or measured operator wall time, whichever is larger
        (sampling misses short contexts; op time misses Python time), less the one-time work
        inside it: CUDA set-up (``gpu.init``), torch.compile's
        compilation (``compile.host`` sampled, ``compile.time`` wall: it can run inside an
        operator when the backward compiles lazily), other set-up and autotuning contexts, and
        each operator context's first call (``op.first_time``, when the capture records it:
        cuBLAS/cuDNN handles, allocator growth, lazy loading)."""
        return self._steady[node]

    @cached_property
    def _steady(self) -> list[float]:
        cpu, ops = self.inc("cpu.time"), self.inc("op.time")
        init, first = self.inc("gpu.init"), self.inc("op.first_time")
        comp_cpu, comp_wall = self.inc("compile.host"), self.inc("compile.time")
        setup = [0.0] * len(self.tree.nodes)
        for node in reversed(self.tree.nodes[1:]):  # children before parents
            i = node.id
            # compile markers are measured by compile.* (subtracted below), not twice
            if (self.in_setup[i] and not self.in_setup[node.parent]
                    and not (node.frame.kind == MARKER and node.frame.name == "compile")):
                setup[i] = max(cpu[i], ops[i])  # the outermost set-up frame holds it all
            setup[node.parent] += setup[i]
        # An operator's own wall time is measured exactly; its CPU samples estimate the same
        # time from a few ticks of the sampler (10 ms each), so one tick inside a 10 us operator
        # called 48 times would read as 200 us a call. Lines (Python time between operators is
        # sampled only) keep the larger of the two.
        timed_op = [n.frame.kind == OP and ops[n.id] > 0 for n in self.tree.nodes]
        return [max(0.0, (ops[i] - first[i] - comp_wall[i] if timed_op[i] else
                          max(cpu[i] - comp_cpu[i], ops[i] - first[i] - comp_wall[i]))
                    - init[i] - setup[i]) for i in range(len(self.tree.nodes))]

    def runs(self, node: int) -> float:
        """How many times the context at ``node`` (a user line) ran, from the operators it
        issued: its least-called operator site (every operator a statement issues runs at
        least once per execution). Lines issuing no operator: their deeper lines' fewest runs;
        0 when nothing under the node issued an operator."""
        return self._runs[node]

    @cached_property
    def _runs(self) -> list[float]:
        n = len(self.tree.nodes)
        own = [math.inf] * n  # fewest calls of a forward operator site the line issued
        for site in self.op_sites:
            c = self.count(site.node)
            if c > 0 and not site.backward and site.owner > 0:
                own[site.owner] = min(own[site.owner], c)
        deeper = [math.inf] * n  # fewest runs of the user lines right below
        value = [0.0] * n
        for node in reversed(self.tree.nodes[1:]):  # deeper lines before the lines above them
            i = node.id
            if self.owner[i] != i:
                continue
            runs = own[i] if own[i] < math.inf else deeper[i]
            value[i] = 0.0 if runs == math.inf else runs
            above = self.owner[node.parent]
            if above > 0 and runs < math.inf:
                deeper[above] = min(deeper[above], runs)
        return value

    def repeated(self, node: int, min_runs: float = 10) -> bool:
        """True when the user line at ``node`` ran at least ``min_runs`` times: part of the steady
        state (a step loop, a per-batch call), not set-up (model construction, a one-time
        ``model.to('cuda')``, a warm-up call)."""
        return self.runs(self.owner[node] if node > 0 else node) >= min_runs

    @cached_property
    def gradients(self) -> float:
        """Parameter gradients accumulated in the run (calls of autograd's AccumulateGrad)."""
        return sum(self.count(n.id) for n in self.tree.nodes
                   if n.frame.kind == OP and n.frame.name == ACCUMULATE_GRAD)

    @cached_property
    def has_gpu(self) -> bool:
        return self.tree.total("gpu.time") > 0 or self.tree.total("gpu.launches") > 0

    @cached_property
    def profiled_time(self) -> float:
        """The time findings are a fraction of: the steady state's host time (sampled CPU time
        or operator wall time, whichever is larger), or the GPU time when that is larger.
        Left out of the host time: interpreter start-up, imports, set-up contexts (building
        and moving the model, compilation, autotuning) and operator contexts' first calls, so a
        short profile reads like a long one, unless the steady state is too short for the
        sampler to measure (then set-up stays in)."""
        return self.profiled_times[self.profiled_metric]

    #: A steady state the CPU-time sampler saw fewer times than this is too coarse a
    #: denominator (a 20 ms steady state is 2 samples: +-50%); such short runs keep set-up in.
    MIN_STEADY_SAMPLES = 50

    @cached_property
    def profiled_times(self) -> dict[str, float]:
        """Each candidate for the profiled time (steady host metrics, GPU totals)."""
        tree = self.tree
        setup = self.setup_included
        times = {m: self._host_total(m, setup) for m in ("cpu.time", "op.time")}
        times["gpu.time"] = tree.total("gpu.time")
        times["sync.wait"] = tree.total("sync.wait")
        return times

    @cached_property
    def setup_included(self) -> bool:
        """True when the steady state is too short to stand alone (profiled_time keeps set-up)."""
        interval = self.metadata.get("sample_interval")
        interval = float(interval) if isinstance(interval, (int, float)) and interval > 0 else 0.01
        return self._host_total("cpu.time", False) < self.MIN_STEADY_SAMPLES * interval

    def _host_total(self, metric: str, setup: bool) -> float:
        """``metric`` over the run outside imports and worker threads: with set-up and one-time
        work when ``setup``, else the steady state's (steady_value, set-up contexts left out).
        Intra-op workers and other threads outside Python run beside the main thread: adding
        their CPU time would make the run look longer the more cores it used."""
        return sum(n.metrics.get(metric, 0.0) if setup else self.steady_value(n, metric)
                   for n in self.tree.nodes if not (
                       self.in_import[n.id] or self.in_worker[n.id]
                       or (not setup and self.in_setup[n.id])))

    @staticmethod
    def steady_value(node: Node, metric: str) -> float:
        """A node's own ``metric`` less its one-time part: for operator time, the context's first
        call (``op.first_time``, as host_time leaves it out: a compiled region's first call holds
        its compilation, tens of seconds against a steady state that can be under one)."""
        value = node.metrics.get(metric, 0.0)
        if metric == "op.time":
            value = max(0.0, value - node.metrics.get("op.first_time", 0.0))
        return value

    @cached_property
    def profiled_metric(self) -> str:
        """Which metric the profiled time is (the largest candidate; reports say which)."""
        times = self.profiled_times
        return max(times, key=lambda m: (times[m], m == "cpu.time"))

    @cached_property
    def wall_time(self) -> float:
        """The run's wall time from the metadata (0 when unknown)."""
        start, end = self.metadata.get("start_time"), self.metadata.get("end_time")
        if isinstance(start, (int, float)) and isinstance(end, (int, float)) and end > start:
            return float(end - start)
        return 0.0

    def fraction(self, seconds: float) -> float:
        """``seconds`` as a fraction of the profiled time, clamped to [0, 1]."""
        if not 0 < self.profiled_time < math.inf:
            return 0.0
        return max(0.0, min(1.0, seconds / self.profiled_time))

    # -- structure -------------------------------------------------------------------------
    @cached_property
    def op_sites(self) -> list[OpSite]:
        """Every operator node whose parent is not an operator, i.e. what a line dispatched."""
        sites = []
        nodes = self.tree.nodes
        for node in nodes[1:]:
            if node.frame.kind == OP and nodes[node.parent].frame.kind != OP and (
                    not self.in_compile[node.id]):  # tracing ops of torch.compile (issue 15)
                sites.append(OpSite(node.id, node.frame.name, self.owner[node.id],
                                    self.in_backward[node.id]))
        return sites

    @cached_property
    def sites_by_owner(self) -> dict[int, list[OpSite]]:
        by: dict[int, list[OpSite]] = defaultdict(list)
        for site in self.op_sites:
            by[site.owner].append(site)
        return dict(by)

    def forward_sites(self, owner: int) -> list[OpSite]:
        return [s for s in self.sites_by_owner.get(owner, ()) if not s.backward]

    def count(self, node: int) -> float:
        """Calls of the op at ``node`` (exclusive op.count: the node's own calls)."""
        return self.tree.exclusive(node, "op.count")

    def user_nodes(self) -> list[int]:
        """Nodes that are the deepest user frame of something (the user's lines)."""
        return sorted({o for o in self.owner if o > 0})

    def descendants(self, node: int) -> list[int]:
        return [n.id for n in self.tree.walk(node)]

    def ancestors(self, node: int) -> list[int]:
        return self.tree.path_ids(node)

    # -- findings --------------------------------------------------------------------------
    def location(self, node: int) -> Location | None:
        """The deepest user frame at or above ``node``."""
        owner = self.owner[node] if node >= 0 else -1
        if owner <= 0:
            return None
        f = self.tree.nodes[owner].frame
        return Location(f.file, f.line, f.name)

    def path_labels(self, node: int) -> list[str]:
        return [f.label() for f in self.tree.path(node)]

    def severity(self, fraction: float, warning: float, error: float) -> str:
        """note below ``warning``, warning below ``error``, else error (fractions of run time)."""
        if fraction >= error:
            return "error"
        return "warning" if fraction >= warning else "note"

    def finding(self, rule: Any, node: int, *, severity: str, title: str, message: str,
                evidence: dict[str, float | int | str], suggestion: str, gain_seconds: float,
                method: str, origin: Location | None = None) -> Finding:
        """Build a finding for ``rule`` about ``node`` with location, path and gain filled in."""
        gain_seconds = _finite(gain_seconds)
        gain = EstimatedGain(round(gain_seconds, 9), round(self.fraction(gain_seconds), 6), method)
        # a damaged profile (inf/NaN metrics) must still give valid JSON
        evidence = {k: _finite(v) if isinstance(v, float) else v for k, v in evidence.items()}
        return Finding(rule=rule.id, category=rule.category, severity=severity, title=title,
                       message=message, node=node, location=self.location(node),
                       path=self.path_labels(node), evidence=evidence, suggestion=suggestion,
                       estimated_gain=gain, origin=origin)

    def where(self, node: int) -> str:
        """``file.py:12`` of the user's line, for messages."""
        loc = self.location(node)
        if loc is None:
            return self.tree.nodes[node].frame.label()
        return f"{loc.file.rsplit('/', 1)[-1]}:{loc.line}"


def _finite(value: float) -> float:
    return value if math.isfinite(value) else 0.0
