"""Gid: a 16-byte RDMA global identifier."""
from __future__ import annotations

# typing costs milliseconds to import: for the type checker only
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Union

__all__ = ["Gid"]


class Gid:
    """Gid(raw: bytes) -- 16 bytes; compares equal to a Gid or the same bytes.

    ``Gid(text)`` reads what ``str(gid)`` and ``repr(gid)`` show (eight
    groups of four hex digits, ``'fe80:0000:...'``) or any IPv6 notation
    (``'::ffff:10.0.0.1'``), so ``eval(repr(gid)) == gid``.
    """

    __slots__ = ("_raw",)

    def __init__(self, raw: Union[Gid, bytes, bytearray, memoryview, str]) -> None:
        if isinstance(raw, Gid):
            raw = raw.raw
        if isinstance(raw, str):
            import socket

            try:
                raw = socket.inet_pton(socket.AF_INET6, raw)
            except (OSError, ValueError):
                raise ValueError(f"not a GID: {raw!r} (eight groups of four hex digits, "
                                 "or IPv6 notation)") from None
        if not isinstance(raw, (bytes, bytearray, memoryview)):
            raise TypeError(f"Gid needs 16 bytes or their text, not {type(raw).__name__}")
        raw = bytes(raw)
        if len(raw) != 16:
            raise ValueError(f"a GID is exactly 16 bytes, got {len(raw)}")
        self._raw: bytes = raw

    @property
    def raw(self) -> bytes:
        """The 16 bytes of the GID, network order (what QPInfo.gid holds)."""
        return self._raw

    @property
    def subnet_prefix(self) -> int:
        """The first 8 bytes as an int (fe80::/64 for link-local; on RoCE the IPv6 prefix)."""
        return int.from_bytes(self._raw[:8], "big")

    @property
    def interface_id(self) -> int:
        """The last 8 bytes as an int (the port GUID on InfiniBand; an IPv4-mapped address on RoCE)."""
        return int.from_bytes(self._raw[8:], "big")

    def __bytes__(self) -> bytes:
        return self._raw

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Gid):
            return self._raw == other._raw
        if isinstance(other, (bytes, bytearray, memoryview)):
            return self._raw == bytes(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._raw)

    def __str__(self) -> str:
        h = self._raw.hex()
        return ":".join(h[i:i + 4] for i in range(0, 32, 4))

    def __repr__(self) -> str:
        return f"Gid('{self}')"
