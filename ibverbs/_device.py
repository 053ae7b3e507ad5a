"""Device discovery: get_device_list() and Device."""
from __future__ import annotations

from . import _ibverbs

__all__ = ["Device", "get_device_list"]


class Device:
    """An RDMA device found by ibv_get_device_list: Device(name, guid).

    open() looks the device up by name when called, so a Device is a plain
    value that can be built by hand or pickled.
    """

    __slots__ = ("name", "guid", "index", "node_type", "transport_type")

    def __init__(self, name: str, guid: int, index: int = -1,
                 node_type: int = 0, transport_type: int = 0) -> None:
        self.name = name
        self.guid = guid
        self.index = index
        self.node_type = node_type
        self.transport_type = transport_type

    def open(self) -> "_ibverbs.Context":
        """Open the device (ibv_open_device) -> Context."""
        return _ibverbs._open_device(self.name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Device):
            return NotImplemented
        return (self.name, self.guid) == (other.name, other.guid)

    def __hash__(self) -> int:
        return hash((self.name, self.guid))

    def __repr__(self) -> str:
        return f"Device(name={self.name!r}, guid=0x{self.guid:016x})"


def get_device_list() -> "list[Device]":
    """The RDMA devices of this host (ibv_get_device_list); [] when the
    kernel has RDMA support but no device.

    Raises VerbsError (errno ENOSYS, "ibv_get_device_list failed: Function
    not implemented") when the kernel has no RDMA support at all (no
    /sys/class/infiniband), as the seed did.
    """
    return [Device(*row) for row in _ibverbs._device_list()]
