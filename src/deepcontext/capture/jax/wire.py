"""A minimal reader of the protobuf wire format, for the two messages the JAX layer reads
(XSpace's metadata plane and the HloProto it carries). jaxlib ships no Python classes for them,
and only the few fields named in xspace.py and hlo.py are needed."""

from __future__ import annotations

from collections.abc import Iterator

VARINT, FIXED64, BYTES, FIXED32 = 0, 1, 2, 5


def _varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def fields(buf: bytes | memoryview) -> Iterator[tuple[int, int, int | memoryview]]:
    """``(field number, wire type, value)`` for each field: an int for varints and fixed-width
    values, a memoryview for length-delimited ones (sub-messages, strings, packed arrays)."""
    view = memoryview(buf)
    pos, end = 0, len(view)
    while pos < end:
        key, pos = _varint(view, pos)
        num, wt = key >> 3, key & 7
        if wt == VARINT:
            value, pos = _varint(view, pos)
            yield num, wt, value
        elif wt == BYTES:
            n, pos = _varint(view, pos)
            yield num, wt, view[pos:pos + n]
            pos += n
        elif wt == FIXED64:
            yield num, wt, int.from_bytes(view[pos:pos + 8], "little")
            pos += 8
        elif wt == FIXED32:
            yield num, wt, int.from_bytes(view[pos:pos + 4], "little")
            pos += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wt}")


def signed(value: int) -> int:
    """An int64 field read as a varint (two's complement over 64 bits)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def text(value: int | memoryview) -> str:
    return bytes(value).decode("utf-8", "replace") if isinstance(value, memoryview) else ""


def packed_ints(value: int | memoryview) -> list[int]:
    """A repeated int64 field: packed (one BYTES field) or a single unpacked varint."""
    if isinstance(value, int):
        return [value]
    out, pos, view = [], 0, value
    while pos < len(view):
        v, pos = _varint(view, pos)
        out.append(signed(v))
    return out
