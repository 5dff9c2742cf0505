"""What the JAX layer reads from an XSpace (the JAX profiler's output): each executable's HLO
from the ``/host:metadata`` plane, and the timed events of every other plane.

``jax.profiler.ProfileData`` reads planes, lines and events in C++, but not the metadata plane's
per-event metadata, where the HLO protos are; that one plane is read with the wire reader.
XPlane fields: name=2, lines=3, event_metadata=4 (map id -> XEventMetadata{stats=5}),
stat_metadata=5 (map id -> XStatMetadata{name=2}); XStat{metadata_id=1, uint64=3, int64=4,
bytes=6}.
"""

from __future__ import annotations

from collections.abc import Container

from .wire import BYTES, fields, text

METADATA_PLANE = "/host:metadata"


def _map_entry(buf: memoryview) -> tuple[int, memoryview | None]:
    key, value = 0, None
    for n, wt, v in fields(buf):
        if n == 1 and wt != BYTES:
            key = int(v)
        elif n == 2 and wt == BYTES:
            value = v
    return key, value


def hlo_protos(xspace: bytes, known: Container[int] = ()) -> dict[int, bytes]:
    """``{program_id: serialized HloProto}`` of the executables in ``xspace`` not in ``known``
    (the plane lists every live executable in every capture)."""
    out: dict[int, bytes] = {}
    for n, wt, plane in fields(xspace):
        if n != 1 or wt != BYTES:
            continue
        name = next((text(v) for pn, _, v in fields(plane) if pn == 2), "")
        if name != METADATA_PLANE:
            continue
        stat_names: dict[int, str] = {}
        metas: list[memoryview] = []
        for pn, pwt, pv in fields(plane):
            if pn == 5 and pwt == BYTES:
                key, value = _map_entry(pv)
                if value is not None:
                    stat_names[key] = next((text(v) for m, _, v in fields(value) if m == 2), "")
            elif pn == 4 and pwt == BYTES:
                _, value = _map_entry(pv)
                if value is not None:
                    metas.append(value)
        for meta in metas:
            proto, pid = None, None
            for m, mwt, mv in fields(meta):
                if m != 5 or mwt != BYTES:
                    continue
                stat = {k: v for k, _, v in fields(mv)}
                sname = stat_names.get(int(stat.get(1, 0)), "")
                if sname == "Hlo Proto" and isinstance(stat.get(6), memoryview):
                    proto = stat[6]
                elif sname == "program_id":
                    value = stat.get(3, stat.get(4))
                    pid = int(value) if isinstance(value, int) else None
            if proto is not None and pid is not None and pid not in known:
                out[pid] = bytes(proto)
    return out
