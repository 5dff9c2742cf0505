"""The JAX layer: a JAX profiler session captures every executed XLA thunk (CPU) or kernel
(GPU) with its HLO instruction; the executables' optimized HLO names the JAX operators and
source lines inside each; the hooks name the Python call above it all. Contributions are kept
here, keyed by the dispatching context node, and grafted onto each snapshot of the tree.

Each flush stops the profiler session, folds what it captured and starts a new one.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from typing import Any, Callable

from ...tree.cct import CallingContextTree
from ...tree.frame import Frame
from .fold import Execution, Folder
from .hlo import HloModule
from . import hooks
from .hooks import Patches, call_stack, timed_sync, timed_value, tracked_jit, tracked_primitive
from .names import jit_label, op_frames
from .xspace import hlo_protos

#: jax.monitoring duration events -> the compile phase they time.
COMPILE_PHASES = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower to StableHLO",
    "/jax/core/compile/backend_compile_duration": "XLA compile",
    "/jax/compilation_cache/cache_retrieval_time_sec": "load from compilation cache",
}
COUNTED_PHASE = "/jax/core/compile/backend_compile_duration"
COMMAND_BUFFER_FLAG = "--xla_gpu_enable_command_buffer="

Key = tuple[int, int]  # (dispatching context node or -1, path id)


def prepare_environment() -> None:
    """XLA:GPU command buffers (CUDA graphs) tag every kernel inside with the graph's name,
    hiding its HLO instruction: turn them off (before the backend reads XLA_FLAGS) unless the
    user set the flag or DEEPCONTEXT_JAX_COMMAND_BUFFERS=1."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_gpu_enable_command_buffer" in flags or os.environ.get(
            "DEEPCONTEXT_JAX_COMMAND_BUFFERS") == "1":
        return
    os.environ["XLA_FLAGS"] = f"{flags} {COMMAND_BUFFER_FLAG}".strip()


class JaxLayer:
    def __init__(self, core: Any, note: Callable[[str], None]) -> None:
        self.core = core
        self.note = note
        self.jax: Any = None
        self.enabled = False
        self.paused = False
        self.yielded = False  # the program's own jax.profiler trace is running
        self._session: Any = None
        self._pid = os.getpid()
        self._start_failed = False
        self._lock = threading.RLock()  # the session and the contributions
        self._fold_lock = threading.Lock()  # one fold at a time (its own state is unshared)
        self._charges: dict[Key, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._saved: dict[Key, dict[str, float]] = {}  # contributions before a warm-up began
        self._modules: dict[int, HloModule | None] = {}
        self._labels: dict[int, str] = {}  # id(module) -> jit(f)
        self._instructions: set[str] = set()  # instruction names of every known module
        self._path_ids: dict[tuple[Frame, ...], int] = {}  # contributions are keyed by ids
        self._path_list: list[tuple[Frame, ...]] = []
        self._folder = Folder()
        self._counted: dict[Any, None] = {}  # dispatches already counted
        self._plans: dict[tuple[Any, ...], Any] = {}
        self._paths: dict[int, tuple[Frame, ...]] = {}
        self._patches = Patches()
        self._listener: Any = None
        self.stats = {"executions": 0, "gpu_executions": 0, "unlinked": 0, "unresolved": 0,
                      "captures": 0, "fold_s": 0.0}
        self.trace_me: Any = None
        self.current_node = core.current_node
        #: ``observer(op_name, node, frames below the node)`` for each executed operator
        self.observer: Callable[[str, int, tuple[Frame, ...]], None] | None = None
        #: called once before the first capture on a GPU backend (the monitor's GPU layer)
        self.release_gpu: Callable[[], None] | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def enable(self, jax: Any) -> None:
        if self.enabled:
            return
        from jax._src.lib import _profiler

        self.jax = jax
        self.trace_me = _profiler.TraceMe
        self._turn_off_command_buffers()
        self._install(jax)
        self.enabled = True
        hooks.current[0] = self
        if self._backend_ready():
            self._start_session()

    def _turn_off_command_buffers(self) -> None:
        if self._backend_ready():
            if self._on_gpu() and COMMAND_BUFFER_FLAG not in os.environ.get("XLA_FLAGS", ""):
                self.note("jax: the XLA backend started before profiling, so command buffers "
                          "stay on; kernels inside one show under its [marker] command buffer")
            return
        prepare_environment()

    def _on_gpu(self) -> bool:
        try:
            return self.jax.default_backend() in ("gpu", "cuda", "rocm")
        except Exception:  # noqa: BLE001
            return False

    def _backend_ready(self) -> bool:
        try:
            from jax._src import xla_bridge

            return bool(getattr(xla_bridge, "_backends", None))
        except Exception:  # noqa: BLE001 - another jax layout: assume it is up
            return True

    def _install(self, jax: Any) -> None:
        from jax._src import api, array, dispatch, profiler

        p = self._patches
        p.replace(jax, "jit", tracked_jit)
        p.replace(dispatch, "xla_primitive_callable", tracked_primitive)
        for owner in (jax, api):
            p.replace(owner, "block_until_ready",
                      lambda f: timed_sync(f, self, "block_until_ready"))
            p.replace(owner, "device_get", lambda f: timed_sync(f, self, "device_get"))
        p.replace(array.ArrayImpl, "block_until_ready",
                  lambda f: timed_sync(f, self, "block_until_ready"))
        p.replace(array.ArrayImpl, "_value", lambda prop: timed_value(prop, self))
        for owner in (jax.profiler, profiler):
            p.replace(owner, "start_trace", self._around_user_start)
            p.replace(owner, "stop_trace", self._around_user_stop)
        from jax._src import monitoring

        self._listener = self._on_duration
        monitoring.register_event_duration_secs_listener(self._listener)

    def on(self) -> bool:
        return self.enabled and not self.paused and self.core.enabled()

    def stop(self) -> None:
        """Final collection; hooks off (a TrackedJit made earlier then calls straight through)."""
        if not self.enabled:
            return
        self.collect(restart=False)
        self.enabled = False
        if hooks.current[0] is self:
            hooks.current[0] = None
        self._patches.undo()
        if self._listener is not None:
            from jax._src import monitoring

            try:
                monitoring.unregister_event_duration_listener(self._listener)
            except (AttributeError, ValueError):
                pass
            self._listener = None

    def _forked(self) -> bool:
        """In a forked child the profiler's threads do not exist: never touch its session."""
        if os.getpid() == self._pid:
            return False
        self._session = None
        self.enabled = False
        return True

    def pause(self, paused: bool) -> None:
        if self._forked() or not self.enabled or paused == self.paused:
            return
        if paused:
            self.collect(restart=False)
        self.paused = paused
        if not paused and not self.yielded:
            self._start_session()

    def reset(self) -> None:
        """Warm-up ended: what was captured so far is dropped."""
        if self._forked():
            return
        with self._lock:
            self._drop_session()
            self._charges.clear()
            if self.on():
                self._start_session()

    def checkpoint(self) -> None:
        """A warm-up begins: fold what ran so far (earlier active cycles) and save it."""
        if self._forked():
            return
        self.collect()
        with self._fold_lock, self._lock:
            self._saved = {k: dict(v) for k, v in self._charges.items()}

    def rollback(self) -> None:
        """A warm-up ends: what it captured is dropped and the saved contributions restored."""
        if self._forked():
            return
        with self._fold_lock, self._lock:
            self._drop_session()
            self._charges.clear()
            for k, v in self._saved.items():
                self._charges[k].update(v)
            self._saved = {}
            if self.on():
                self._start_session()

    # -- the profiler session --------------------------------------------------------------
    @property
    def needs_session(self) -> bool:
        return self._session is None and not self.yielded and not self._start_failed

    def start_with_backend(self) -> None:
        """First tracked call: start XLA's backend (the call was about to) and the capture, so
        the device tracers of the backend are part of it."""
        try:
            from jax._src import xla_bridge

            xla_bridge.get_backend()
        except Exception:  # noqa: BLE001 - the call itself will report it
            return
        self._start_session()

    def _start_session(self) -> None:
        with self._lock:
            if self._session is not None or self.yielded:
                return
            if self.release_gpu is not None and self._on_gpu():
                self.release_gpu()  # XProf's CUPTI tracer needs the one subscriber slot
                self.release_gpu = None
            import jax

            from jax._src.lib import _profiler

            opts = jax.profiler.ProfileOptions()
            opts.python_tracer_level = 0  # the Python stack comes from the hooks, not tracing
            opts.host_tracer_level = 1  # XLA's execution events; not its compiler passes
            opts.enable_hlo_proto = True
            try:
                self._session = _profiler.ProfilerSession(opts)
                self._start_failed = False
            except Exception as e:  # noqa: BLE001 - a profiler already runs (another tool)
                self._start_failed = True
                self.note(f"jax: the JAX profiler could not start ({e}); XLA operators are not "
                          "attributed")
                self._session = None

    def _drop_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            try:
                session.stop()
            except Exception:  # noqa: BLE001
                pass

    def collect(self, restart: bool = True) -> None:
        """Fold the running capture into the contributions and (by default) start a new one
        (the profiler admits one session at a time: stop, restart, then read). The program's
        threads wait on the lock only for the stop and restart, never for the fold."""
        if self._forked():
            return
        with self._fold_lock:
            with self._lock:
                session, self._session = self._session, None
                xspace = None
                if session is not None:
                    try:
                        xspace = session.stop()
                    except Exception as e:  # noqa: BLE001 - keep the program running
                        self.note(f"jax: reading the JAX profiler capture failed ({e})")
                if self.on() and (restart or session is None) and self._backend_ready():
                    self._start_failed = False
                    self._start_session()
            if xspace is not None:
                try:
                    self._fold(xspace)
                except Exception as e:  # noqa: BLE001 - the profile and the program go on
                    self.note(f"jax: a capture could not be read ({type(e).__name__}: {e}); "
                              "its operators are missing")

    def _fold(self, xspace: bytes) -> None:
        from jax.profiler import ProfileData

        t0 = time.perf_counter()
        self._fold_capture(xspace, ProfileData)
        self.stats["fold_s"] = round(self.stats["fold_s"] + time.perf_counter() - t0, 6)

    def _fold_capture(self, xspace: bytes, ProfileData: Any) -> None:  # noqa: N803
        self.stats["captures"] += 1
        for pid, proto in hlo_protos(xspace, self._modules).items():
            try:
                self._modules[pid] = module = HloModule(proto)
                self._instructions.update(module.instruction_names())
            except (ValueError, IndexError):
                self._modules[pid] = None
        profile = ProfileData.from_serialized_xspace(xspace)
        for ex in self._folder.executions(profile, self._instructions):
            self._charge_execution(ex)

    # -- charging --------------------------------------------------------------------------
    def _label(self, module: HloModule) -> str:
        """``jit(f)`` as its operators spell it (module names mangle: ``jit__lambda``)."""
        label = self._labels.get(id(module))  # modules are kept for the layer's life
        if label is None:
            label = self._labels[id(module)] = jit_label(module.name, module.first_op_name())
        return label

    def _charge_execution(self, ex: Execution) -> None:
        self.stats["executions"] += 1
        linked = ex.dispatch is not None
        node = ex.dispatch.node if linked else -1
        if not linked:
            self.stats["unlinked"] += 1
        markers = ex.dispatch.markers if linked else ()
        function = ex.dispatch.function if linked else ""
        eager = linked and ex.dispatch.eager
        key = (ex.program_id, ex.hlo_op, ex.kernel, ex.device, linked, markers, function, eager)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._plan(ex, linked, markers, function, eager)
        head, entries, time_metric = plan
        charges = self._charges
        compiling = ex.device == "gpu" and ex.program_id < 0  # not a run of the executable
        if linked and not compiling and ex.dispatch not in self._counted:  # one call
            self._counted[ex.dispatch] = None
            if len(self._counted) > 4096:
                self._counted.pop(next(iter(self._counted)))
            charges[(node, head)]["op.count"] += 1
        gpu = ex.device == "gpu"
        if gpu:
            self.stats["gpu_executions"] += 1
        for op_name, op_path, leaf_path, share in entries:
            if op_path >= 0:
                charges[(node, op_path)]["op.count"] += 1
                if self.observer is not None:
                    self.observer(op_name, node, self._path_list[op_path])
            leaf = charges[(node, leaf_path)]
            leaf[time_metric] += ex.seconds * share
            if gpu:
                leaf["gpu.launches"] += share

    def _id(self, path: tuple[Frame, ...]) -> int:
        pid = self._path_ids.get(path)
        if pid is None:
            pid = self._path_ids[path] = len(self._path_list)
            self._path_list.append(path)
        return pid

    def _plan(self, ex: Execution, linked: bool, markers: tuple[str, ...], function: str,
              eager: bool) -> tuple[int, list[tuple[str, int, int, float]], str]:
        """Where one kind of execution is charged (computed once per executable, instruction
        and calling markers): the executable's frame path, and per operator its path, its
        kernel's path and its share of the time."""
        module = self._modules.get(ex.program_id)
        if module is None and ex.module:  # no program id on the event: the latest of that name
            module = next((m for m in reversed(self._modules.values())
                           if m is not None and m.name == ex.module), None)
        head = [Frame.make("marker", m) for m in markers]
        head.append(Frame.make("op", self._label(module) if module is not None
                               else jit_label(ex.module or f"program {ex.program_id}")))
        kernel = Frame.make("kernel", ex.kernel if ex.device == "gpu" else ex.hlo_op,
                            device=ex.device, hlo_op=ex.hlo_op)
        time_metric = "gpu.time" if ex.device == "gpu" else "op.time"
        ops = module.ops(ex.hlo_op) if module is not None else ()
        if ex.device == "gpu" and ex.program_id < 0:  # no executable yet: compile-time
            if function:  # under the compiling call's compile marker (as _on_duration puts it)
                head = [Frame.make("op", function if function.startswith("jit(")
                                   else f"jit({function})")]
            tail = [Frame.make("marker", "compile"), Frame.make("marker", "autotuning"), kernel]
            return self._id(tuple(head)), [("", -1, self._id(tuple(head + tail)), 1.0)], time_metric
        if not ops:
            if module is None or not module.has(ex.hlo_op):
                self.stats["unresolved"] += 1
            tail = [kernel]
            if ex.hlo_op.startswith("command_buffer"):
                tail.insert(0, Frame.make("marker", "command buffer"))
            return self._id(tuple(head)), [("", -1, self._id(tuple(head + tail)), 1.0)], time_metric
        fused = (Frame.make("marker", f"fused 1/{len(ops)}"),) if len(ops) > 1 else ()
        entries = []
        for op in ops:
            outer, below = op_frames(op, linked, eager)
            op_path = tuple(outer + head + below)
            entries.append((op.op_name, self._id(op_path), self._id(op_path + fused + (kernel,)),
                            1.0 / len(ops)))
        return self._id(tuple(head)), entries, time_metric

    def _add(self, node: int, frames: list[Frame], metrics: dict[str, float]) -> None:
        with self._lock:
            slot = self._charges[(node, self._id(tuple(frames)))]
            for k, v in metrics.items():
                slot[k] += v

    def host_round_trip(self, what: str, seconds: float) -> None:
        """A blocking wait or device-to-host copy on the calling thread."""
        self._add(self.core.current_node(), [Frame.make("sync", f"jax {what}")],
                  {"sync.count": 1, "sync.wait": seconds})

    def _on_duration(self, event: str, duration: float, **kwargs: Any) -> None:
        phase = COMPILE_PHASES.get(event)
        if phase is None or not self.on():
            return
        stack = call_stack()
        node = stack[-1] if stack else self.core.current_node()
        fun = str(kwargs.get("fun_name", "") or "")
        frames = []
        if fun:
            frames.append(Frame.make("op", fun if fun.startswith("jit(") else f"jit({fun})"))
        frames.append(Frame.make("marker", "compile"))
        if event == COUNTED_PHASE:
            self._add(node, frames, {"compile.count": 1})
        self._add(node, frames + [Frame.make("marker", phase)], {"compile.time": duration})

    # -- the tree --------------------------------------------------------------------------
    def _dispatch_path(self, node: int) -> tuple[Frame, ...]:
        path = self._paths.get(node)
        if path is None:
            from ..snapshot import _is_launcher, _is_own, _parse_extra

            out: list[Frame] = []
            for kind, name, file, line, extra in self.core.path_frames(node):
                f = Frame.make(kind, name, file, line, **_parse_extra(extra))
                if f.kind == "python" and (_is_own(f.file) or (not out and _is_launcher(f.file))):
                    continue
                out.append(f)
            path = self._paths[node] = tuple(out)
        return path

    def graft(self, tree: CallingContextTree) -> None:
        """Add the contributions to a freshly built snapshot of the tree."""
        with self._lock:
            charges = list(self._charges.items())  # a fold may add to it meanwhile
        for (node, path), metrics in charges:
            prefix = self._dispatch_path(node) if node >= 0 else ()
            leaf = tree.add_path(prefix + self._path_list[path])
            for metric, value in list(metrics.items()):
                if value:
                    tree.add_metric(leaf, metric, value)

    def metadata(self) -> dict[str, Any]:
        import jax
        import jaxlib

        return {"jax": str(jax.__version__), "jaxlib": str(jaxlib.__version__),
                "jax_layer": dict(self.stats)}

    # -- the program's own jax.profiler trace ----------------------------------------------
    def _around_user_start(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def start_trace(*args: Any, **kwargs: Any) -> Any:
            if self.enabled:
                self.collect(restart=False)
                self.yielded = True
                self.note("jax: the program ran its own jax.profiler trace; XLA operators run "
                          "during it are not attributed")
            try:
                return original(*args, **kwargs)
            except BaseException:
                self.yielded = False
                raise

        start_trace._dc_original = original  # type: ignore[attr-defined]
        return start_trace

    def _around_user_stop(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def stop_trace(*args: Any, **kwargs: Any) -> Any:
            try:
                return original(*args, **kwargs)
            finally:
                if self.yielded:
                    self.yielded = False
                    if self.on():
                        self._start_session()

        stop_trace._dc_original = original  # type: ignore[attr-defined]
        return stop_trace
