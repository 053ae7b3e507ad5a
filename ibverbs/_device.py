"""Device discovery: get_device_list() and Device."""
from __future__ import annotations

import sys

from . import _ibverbs

# Not typing.TYPE_CHECKING: `import ibverbs` imports no typing (a few ms);
# mypy knows the name.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import ibverbs.topology

__all__ = ["Device", "get_device_list"]


def guid_text(guid: int) -> str:
    """A GUID as ibv_devinfo and ``rdma -j`` print it (xxxx:xxxx:xxxx:xxxx).

    Every GUID the verbs give (Device.guid, DeviceAttr.node_guid,
    sys_image_guid, PortAttr's) is a __be64: network byte order read as a
    host integer, so its bytes are written in memory order, not as the
    integer's hex digits (which a little-endian host shows reversed)."""
    h = guid.to_bytes(8, sys.byteorder).hex()
    return ":".join(h[i:i + 4] for i in range(0, 16, 4))


class Device:
    """An RDMA device found by ibv_get_device_list: Device(name, guid).

    open() looks the device up by name when called, so a Device is a plain
    value that can be built by hand or pickled.
    """

    # A dict: each slot's docstring (help(), the reference).
    __slots__ = {
        "name": "The device name (\"mlx5_0\", \"rxe0\", ...; ibv_get_device_name).",
        "guid": ("The node GUID as ibv_get_device_guid gives it: network byte order read "
                 "as a 64-bit int, as in ibverbs 2026.7.18 (DeviceAttr.node_guid is the same value)."),
        "index": "The kernel's device index (ibv_get_device_index; -1 when unknown).",
        "node_type": "What the device is (a NodeType: CA for a NIC, RNIC for iWARP, ...).",
        "transport_type": "Its transport (a TransportType: IB for InfiniBand and RoCE, IWARP, ...).",
    }

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

    def topology(self) -> "list[ibverbs.topology.PortTopology]":
        """Where each port of the device sits, read from sysfs now: PCI
        address, NUMA node, network devices, PCIe link (ibverbs.topology.ports;
        a fact that does not apply is None, PortTopology.why says why)."""
        from . import topology
        return topology.ports(self.name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Device):
            return NotImplemented
        return (self.name, self.guid) == (other.name, other.guid)

    def __hash__(self) -> int:
        return hash((self.name, self.guid))

    def __repr__(self) -> str:
        # The GUID as ibv_devinfo prints it: the integer's hex digits are
        # byte-swapped on a little-endian host
        return f"Device(name={self.name!r}, guid={guid_text(self.guid)})"


def get_device_list() -> "list[Device]":
    """The RDMA devices of this host (ibv_get_device_list); [] when the
    kernel has RDMA support but no device.

    Raises VerbsError (errno ENOSYS, "ibv_get_device_list failed: Function
    not implemented") when the kernel has no RDMA support at all (no
    /sys/class/infiniband), as ibverbs 2026.7.18 did.
    """
    return [Device(*row) for row in _ibverbs._device_list()]
