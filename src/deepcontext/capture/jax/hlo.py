"""The optimized HLO of one executable, read for provenance: which JAX operators (op_name, the
name stack such as ``jit(step)/transpose(jvp(loss))/dot_general``) and which source lines each
executed HLO instruction or fusion came from.

Fields read (xla/service/hlo.proto, xla/xla_data.proto), all present since jaxlib 0.4.x:
HloProto.hlo_module=1; HloModuleProto name=1, computations=3, id=5, stack_frame_index=17;
HloComputationProto instructions=2, id=5; HloInstructionProto name=1, opcode=2, metadata=7,
called_computation_ids=38; OpMetadata op_type=1, op_name=2, source_file=3, source_line=4,
stack_frame_id=15; StackFrameIndexProto file_names=1, function_names=2, file_locations=3
{file_name_id=1, function_name_id=2, line=3}, stack_frames=4 {file_location_id=1,
parent_frame_id=2}; the index's ids are 1-based, 0 is "none".
"""

from __future__ import annotations

from dataclasses import dataclass

from .wire import BYTES, fields, packed_ints, text

#: A source frame: (file, line, function).
SourceFrame = tuple[str, int, str]
# Instructions that only move or name data; they carry no operator of the user's.
_PLUMBING = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "copy",
                       "copy-start", "copy-done", "after-all", "partition-id", "replica-id"})


@dataclass(frozen=True, slots=True)
class JaxOp:
    """One JAX operator as XLA recorded it: ``op_name`` is the name stack plus the primitive,
    ``stack`` the source frames outermost first (the Python stack when it was traced)."""

    op_name: str
    op_type: str
    stack: tuple[SourceFrame, ...]

    @property
    def primitive(self) -> str:
        return self.op_name.rsplit("/", 1)[-1]


@dataclass(slots=True)
class _Instr:
    name: str
    opcode: str
    op_name: str
    op_type: str
    source_file: str
    source_line: int
    frame_id: int
    called: list[int]


class HloModule:
    """An executable's optimized HLO: instructions by name, and the operators each one ran."""

    def __init__(self, hlo_proto: bytes | memoryview) -> None:
        self.name = ""
        self.id = 0
        self._computations: dict[int, list[_Instr]] = {}
        self._by_name: dict[str, _Instr] = {}
        self._frames: dict[int, SourceFrame] = {}
        self._parents: dict[int, int] = {}
        self._ops_cache: dict[str, tuple[JaxOp, ...]] = {}
        module = next((v for n, wt, v in fields(hlo_proto) if n == 1 and wt == BYTES), None)
        if module is not None:
            self._read_module(module)

    def _read_module(self, module: memoryview) -> None:
        for n, wt, v in fields(module):
            if n == 1 and wt == BYTES:
                self.name = text(v)
            elif n == 5 and wt != BYTES:
                self.id = int(v)
            elif n == 3 and wt == BYTES:
                self._read_computation(v)
            elif n == 17 and wt == BYTES:
                self._read_frames(v)

    def _read_computation(self, comp: memoryview) -> None:
        cid, instrs = 0, []
        for n, wt, v in fields(comp):
            if n == 2 and wt == BYTES:
                instrs.append(self._read_instruction(v))
            elif n == 5 and wt != BYTES:
                cid = int(v)
        self._computations[cid] = instrs
        for ins in instrs:
            self._by_name.setdefault(ins.name, ins)

    @staticmethod
    def _read_instruction(buf: memoryview) -> _Instr:
        ins = _Instr("", "", "", "", "", 0, 0, [])
        for n, wt, v in fields(buf):
            if n == 1:
                ins.name = text(v)
            elif n == 2:
                ins.opcode = text(v)
            elif n == 38:
                ins.called.extend(packed_ints(v))
            elif n == 7 and wt == BYTES:
                for m, mwt, mv in fields(v):
                    if m == 1:
                        ins.op_type = text(mv)
                    elif m == 2:
                        ins.op_name = text(mv)
                    elif m == 3:
                        ins.source_file = text(mv)
                    elif m == 4 and mwt != BYTES:
                        ins.source_line = int(mv)
                    elif m == 15 and mwt != BYTES:
                        ins.frame_id = int(mv)
        return ins

    def _read_frames(self, index: memoryview) -> None:
        files: list[str] = []
        functions: list[str] = []
        locations: list[tuple[int, int, int]] = []
        frames: list[tuple[int, int]] = []
        for n, wt, v in fields(index):
            if wt != BYTES:
                continue
            if n == 1:
                files.append(text(v))
            elif n == 2:
                functions.append(text(v))
            elif n == 3:
                loc = {m: mv for m, _, mv in fields(v)}
                locations.append((int(loc.get(1, 0)), int(loc.get(2, 0)), int(loc.get(3, 0))))
            elif n == 4:
                fr = {m: mv for m, _, mv in fields(v)}
                frames.append((int(fr.get(1, 0)), int(fr.get(2, 0))))
        for i, (loc_id, parent) in enumerate(frames, start=1):
            if not 0 < loc_id <= len(locations):
                continue
            file_id, func_id, line = locations[loc_id - 1]
            file = files[file_id - 1] if 0 < file_id <= len(files) else ""
            func = functions[func_id - 1] if 0 < func_id <= len(functions) else ""
            self._frames[i] = (file, line, func)
            self._parents[i] = parent

    def stack(self, frame_id: int) -> tuple[SourceFrame, ...]:
        """The frames from the outermost to ``frame_id`` (following parent links)."""
        out: list[SourceFrame] = []
        seen: set[int] = set()
        while frame_id in self._frames and frame_id not in seen:
            seen.add(frame_id)
            out.append(self._frames[frame_id])
            frame_id = self._parents.get(frame_id, 0)
        return tuple(reversed(out))

    def _op(self, ins: _Instr) -> JaxOp | None:
        if not ins.op_name or ins.opcode in _PLUMBING:
            return None
        if ins.frame_id:
            stack = self.stack(ins.frame_id)
        elif ins.source_file:  # older XLA: only the innermost frame, as flat fields
            stack = ((ins.source_file, ins.source_line, ""),)
        else:
            stack = ()
        return JaxOp(ins.op_name, ins.op_type, stack)

    def first_op_name(self) -> str:
        """An operator name of the module (they all start with the jitted function's name)."""
        return next((i.op_name for i in self._by_name.values() if i.op_name.startswith("jit(")),
                    "")

    def instruction_names(self) -> list[str]:
        return list(self._by_name)

    def has(self, name: str) -> bool:
        return name in self._by_name

    def ops(self, instruction: str) -> tuple[JaxOp, ...]:
        """The distinct JAX operators an executed instruction ran: its own when it has one,
        else those of the computations it calls (a fusion's fused computation, a while's body),
        in program order."""
        cached = self._ops_cache.get(instruction)
        if cached is not None:
            return cached
        ins = self._by_name.get(instruction)
        found: dict[JaxOp, None] = {}
        if ins is not None:
            own = self._op(ins)
            if own is not None and not ins.called:
                found[own] = None
            else:
                self._collect(ins.called, found, set())
                if not found and own is not None:
                    found[own] = None
        result = tuple(found)
        self._ops_cache[instruction] = result
        return result

    def _collect(self, computations: list[int], found: dict[JaxOp, None], seen: set[int]) -> None:
        for cid in computations:
            if cid in seen:
                continue
            seen.add(cid)
            for ins in self._computations.get(cid, ()):
                op = self._op(ins)
                if op is not None:
                    found[op] = None
                if ins.called:
                    self._collect(ins.called, found, seen)
