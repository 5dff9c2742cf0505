"""Just enough of the protocol-buffers wire format to write a message: varints, length-delimited
fields and packed repeated integers. Writing by hand keeps pprof export dependency-free."""

from __future__ import annotations

from collections.abc import Iterable

_MASK64 = (1 << 64) - 1


def varint(value: int) -> bytes:
    """Base-128 varint; negative int64 values take ten bytes, as in protobuf."""
    value &= _MASK64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class Message:
    """Appends fields to a growing buffer; zero scalars are skipped like proto3 defaults."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def int(self, field: int, value: int) -> Message:
        if value:
            self.buf += varint(field << 3)
            self.buf += varint(value)
        return self

    def bytes(self, field: int, data: bytes) -> Message:
        self.buf += varint(field << 3 | 2)
        self.buf += varint(len(data))
        self.buf += data
        return self

    def string(self, field: int, text: str) -> Message:
        return self.bytes(field, text.encode("utf-8", "backslashreplace"))

    def message(self, field: int, sub: Message) -> Message:
        return self.bytes(field, bytes(sub.buf))

    def packed(self, field: int, values: Iterable[int]) -> Message:
        body = b"".join(varint(v) for v in values)
        if body:
            self.bytes(field, body)
        return self

    def to_bytes(self) -> bytes:
        return bytes(self.buf)
