"""Converting a native tree that ran compiled code: kernels under the model lines they came
from, compilation under ``[marker] compile``.

Each native node maps to one or more tree nodes with a weight. A Python frame of a generated
wrapper at a kernel call line maps to one tree node per source stack of that kernel (Inductor's
provenance), each with weight ``1/k`` for ``k`` stacks, and everything measured below it (the
kernel's RecordFunction, its GPU kernel, its samples) is split the same way: a kernel fused from
``relu`` at line 7 and ``mul``/``add`` at line 8 charges half of its time, launches and calls to
each line. Totals are unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ...tree.cct import CallingContextTree
from ...tree.frame import MARKER, PYTHON, Frame
from ...tree.usercode import is_user_frame
from . import _State
from .wrapper import call_sites, stack_frames

COMPILE = Frame.make(MARKER, "compile")
#: Compilation phases, outermost first; a phase marker is added where a deeper phase begins.
PHASES = ("dynamo", "aot autograd", "inductor", "kernel build", "autotune", "cuda graph recording")
_PHASE_MARKERS = {p: Frame.make(MARKER, f"compile: {p}") for p in PHASES}
# (path fragment, qualname fragment or "", phase, may start a compilation)
_PHASE_RULES = (
    # Dynamo's frame callback runs for every new frame while a compiled region is on the stack
    # and mostly decides to skip it (CatchErrorsWrapper, ConvertFrameAssert): runtime, not a
    # compilation. One starts in _compile (its compile_inner installs the compile callbacks).
    ("/torch/_dynamo/convert_frame.py", "_compile", "dynamo", True),
    ("/torch/_dynamo/convert_frame.py", "", "dynamo", False),
    ("/torch/_functorch/_aot_autograd/runtime_wrappers.py", "get_or_compile", "aot autograd", True),
    ("/torch/_functorch/", "", "aot autograd", False),
    # compile_fx() itself only hands the graph to AOTAutograd; Inductor's own work starts in
    # compile_fx_inner (forward, and the lazily compiled backward)
    ("/torch/_inductor/compile_fx.py", "compile_fx_inner", "inductor", True),
    ("/torch/_inductor/runtime/triton_heuristics.py", "autotune", "autotune", True),
    ("/torch/_inductor/runtime/triton_heuristics.py", "benchmark_all_configs", "autotune", True),
    ("/torch/_inductor/runtime/triton_heuristics.py", "precompile", "kernel build", True),
    ("/torch/_inductor/select_algorithm.py", "", "autotune", False),
    ("/torch/_inductor/codecache.py", "", "kernel build", False),
    ("/torch/_inductor/async_compile.py", "", "kernel build", False),
    ("/torch/_inductor/cpp_builder.py", "", "kernel build", False),
    ("/triton/compiler/", "", "kernel build", False),
    ("/torch/_inductor/cudagraph_trees.py", "record", "cuda graph recording", True),
)
_GENERATED = re.compile(r"/torchinductor_[^/]+/.+\.py$")

Placements = list[tuple[int, float]]


def _phase(frame: Frame) -> tuple[int, bool]:
    """(rank in PHASES or -1, whether this frame may open a compilation)."""
    if frame.name == "<module>":  # a module body runs at import, not while compiling
        return -1, False
    file = frame.file.replace("\\", "/")
    for part, qual, phase, entry in _PHASE_RULES:
        if part in file and qual in frame.name:
            return PHASES.index(phase), entry
    return -1, False


def _generated(state: _State, file: str) -> bool:
    """Whether ``file`` is code Inductor generated (a wrapper)."""
    return (file in state.wrappers or bool(_GENERATED.search(file))
            or bool(state.cache_dir and file.startswith(state.cache_dir) and file.endswith(".py")))


# The paths where a compilation can start (_PHASE_RULES' entries): a frame in no such file
# opens no phase.
_ENTRY_PARTS = tuple(sorted({part for part, _, _, entry in _PHASE_RULES if entry}))


def needed(state: _State, frames: list[Frame]) -> bool:
    """Whether placing a snapshot with these frames changes it: a compilation in the session, a
    frame of generated code, or a frame where a compilation starts. An eager session after a
    compiled one in the same process needs none, and its flushes build incrementally."""
    if state.compiles or state.open:
        return True
    by_file: dict[str, list[Frame]] = {}
    for frame in frames:
        if frame.kind == PYTHON:
            by_file.setdefault(frame.file, []).append(frame)
    for file, here in by_file.items():
        if _generated(state, file):
            return True
        path = file.replace("\\", "/")  # (as _phase reads it)
        if any(part in path for part in _ENTRY_PARTS) and any(_phase(f)[1] for f in here):
            return True
    return False


class Placer:
    def __init__(self, state: _State, tree: CallingContextTree) -> None:
        self.state = state
        self.tree = tree
        self.unmapped_calls: set[tuple[str, int]] = set()
        self.mapped_calls: set[tuple[str, int]] = set()
        # each core node placed so far: (placements, phase rank, in a wrapper)
        self.known: dict[int, tuple[Placements, int, bool]] = {}

    def generated(self, file: str) -> bool:
        return _generated(self.state, file)

    def sources(self, file: str, line: int) -> list[tuple[Frame, ...]] | None:
        """The distinct source stacks of the kernel called at ``file:line`` (None: not a kernel
        call; empty: a kernel call without provenance)."""
        site = call_sites(file).get(line)
        if site is None:
            return None
        traces = self.state.wrappers.get(file, {})
        stacks = traces.get(site.key)
        if stacks is None and site.key == site.kernel:  # no handle: a unique kernel name only
            matches = [v for k, v in traces.items() if k.rsplit(":", 1)[0] == site.kernel]
            stacks = matches[0] if len(matches) == 1 else None
        out: list[tuple[Frame, ...]] = []
        for stack in stacks or ():
            frames = stack_frames(stack)
            if frames and frames not in out:
                out.append(frames)
        (self.mapped_calls if out else self.unmapped_calls).add((file, line))
        return out

    def build(self, nodes: list[tuple[int, int]], made: list[Frame],
              folds: Callable[[Frame, bool], bool], ids: list[int]) -> list[Placements]:
        """Placements of every node of a snapshot (children always follow parents; ``ids``: each
        node's id in the core). A node placed by an earlier call keeps its placement, so a
        session's periodic flushes place only the contexts new since the last one."""
        placed: list[Placements] = [[] for _ in nodes]
        placed[0] = [(0, 1.0)]
        # compilation phase rank: -1 outside compilation, -2 below a CUDA graph replay (the
        # capture frames there ran while recording, but the time is the replay's)
        phase = [-1] * len(nodes)
        in_wrapper = [False] * len(nodes)
        known = self.known
        for i in range(1, len(nodes)):
            got = known.get(ids[i])
            if got is None:
                parent, fid = nodes[i]
                got = known[ids[i]] = self._place(made[fid], placed[parent], phase[parent],
                                                  in_wrapper[parent], folds)
            placed[i], phase[i], in_wrapper[i] = got
        return placed

    def _place(self, frame: Frame, here: Placements, phase: int, in_wrapper: bool,
               folds: Callable[[Frame, bool], bool]) -> tuple[Placements, int, bool]:
        """A node's placements, phase and whether it runs in a wrapper, from its frame and its
        parent's."""
        tree = self.tree
        if frame.kind != PYTHON:
            if frame.kind == MARKER and frame.name == "cuda graph":
                phase = -2
            return [(tree.child(n, frame), w) for n, w in here], phase, in_wrapper
        if folds(frame, here == [(0, 1.0)]):
            return here, phase, in_wrapper
        rank, entry = _phase(frame)
        if phase != -2 and rank > phase and (phase >= 0 or entry):
            markers = [] if phase >= 0 else [COMPILE]
            markers.append(_PHASE_MARKERS[PHASES[rank]])
            here = [(tree.add_path(markers, n), w) for n, w in here]
            phase = rank
        if self.generated(frame.file):
            frame = Frame.make(PYTHON, frame.name, frame.file, frame.line, generated="inductor")
            here = [(tree.child(n, frame), w) for n, w in here]
            stacks = self.sources(frame.file, frame.line) if phase < 0 else None
            if stacks:
                share = 1.0 / len(stacks)
                here = [(tree.add_path(s, n), w * share) for n, w in here for s in stacks]
            return here, phase, True
        if in_wrapper and frame.file.startswith("<"):  # Triton's generated launcher
            frame = Frame.make(PYTHON, frame.name, frame.file, frame.line, generated="triton")
        return [(tree.child(n, frame), w) for n, w in here], phase, in_wrapper

    def add_compiles(self, placed: list[Placements],
                     index: dict[int, int]) -> list[dict[str, Any]]:
        """Compile time and count at each compilation's ``[marker] compile`` node (``index``:
        the core's node id -> the snapshot's)."""
        tree = self.tree
        out = []
        for event in self.state.compiles:
            at = index.get(event.node)
            if at is None or not placed[at]:
                continue
            node = placed[at][0][0]
            target = next((a for a in reversed(tree.path_ids(node))
                           if tree.nodes[a].frame == COMPILE), None)
            if target is None:
                target = tree.child(node, COMPILE)
            tree.add_metric(target, "compile.time", event.seconds)
            tree.add_metric(target, "compile.count", 1)
            info: dict[str, Any] = {"id": event.compile_id, "trigger": event.trigger,
                                    "seconds": round(event.seconds, 6)}
            info.update({k: v for k, v in self.state.metrics.get(event.compile_id, {}).items()
                         if v not in (None, "", [])})
            owner = next((a for a in reversed(tree.path_ids(target))
                          if tree.nodes[a].frame.kind == PYTHON
                          and is_user_frame(tree.nodes[a].frame)), None)
            if owner is not None:
                f = tree.nodes[owner].frame
                info["at"] = {"file": f.file, "line": f.line, "function": f.name}
            out.append(info)
        return out

    def add_compile_host(self) -> None:
        """``compile.host``: the CPU time sampled inside each outermost compile marker, so
        host-time rules can leave compilation out (with ``compile.time`` for operator wall
        time that contains a compilation) the way they leave ``gpu.init`` out."""
        tree = self.tree
        cpu = tree.inclusive_all("cpu.time")
        outer = []
        for node in tree.walk():
            if node.frame == COMPILE and not any(tree.nodes[a].frame == COMPILE
                                                 for a in tree.path_ids(node.parent)):
                outer.append(node.id)
        for nid in outer:
            if cpu[nid] > 0:
                tree.add_metric(nid, "compile.host", cpu[nid])
