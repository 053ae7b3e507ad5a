# Types of ibverbs/topology.py (stubgen --include-docstrings, then checked by hand;
# the fields' own docstrings are in the module).
import enum
from dataclasses import dataclass, field
from typing import Any, Sequence

__all__ = ['Distance', 'PciFunction', 'PortTopology', 'Choice', 'Accelerator', 'normalize_bus_id', 'pci_function', 'ports', 'all_ports', 'distance', 'classify', 'nearest', 'accelerators', 'numa_node_of_address', 'numa_node_of_buffer']

SYSFS: str

class Distance(enum.IntEnum):
    """How far apart two PCI functions are, as ``nvidia-smi topo -m`` says it
    (smaller is nearer)."""
    X = 0
    PIX = 1
    PXB = 2
    PHB = 3
    NODE = 4
    SYS = 5

def normalize_bus_id(bus_id: str) -> str:
    '''A PCI bus id in the form sysfs names it: ``"0000:3b:00.0"``.

    Accepts what tools print: an 8-digit domain (``"00000000:3B:00.0"``, as
    nvidia-smi and cudaDeviceGetPCIBusId write it), a 4-digit one, none
    (domain 0: ``"3b:00.0"``), either case.  Raises ValueError otherwise.
    '''

@dataclass(frozen=True)
class PciFunction:
    """One PCI function and where sysfs says it sits."""
    address: str
    root: str
    bridges: tuple[str, ...]
    numa_node: int | None
    class_code: int
    link_speed: str | None
    link_speed_gts: float | None
    link_width: int | None

@dataclass(frozen=True)
class PortTopology:
    """Where one port of an RDMA device sits (:func:`ports`)."""
    device: str
    port: int
    netdevs: tuple[str, ...]
    pci: PciFunction | None
    why: dict[str, str] = field(default_factory=dict, compare=False)
    @property
    def pci_address(self) -> str | None:
        """The PCI address of :attr:`pci`; None without one."""
    @property
    def numa_node(self) -> int | None:
        """The NUMA node of :attr:`pci`; None without one, or unknown."""
    @property
    def link_speed(self) -> str | None:
        '''The PCIe link speed of :attr:`pci` (``"16.0 GT/s PCIe"``).'''
    @property
    def link_width(self) -> int | None:
        """The PCIe link width of :attr:`pci` (lanes)."""
    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every fact (what ``ibverbs topo --json`` prints)."""

@dataclass(frozen=True)
class Choice:
    """One RDMA port as :func:`nearest` ranks it."""
    device: str
    port: int
    distance: Distance
    topology: PortTopology

@dataclass(frozen=True)
class Accelerator:
    """A PCI function ``ibverbs topo`` lists as an accelerator."""
    pci: PciFunction
    named: bool

def pci_function(bus_id: str, *, sysfs: str = ...) -> PciFunction | None:
    """The PCI function of a bus id (any form :func:`normalize_bus_id`
    accepts), read from ``/sys/bus/pci/devices``; None where there is no
    such function.  Raises ValueError for what is not a bus id."""
def ports(device: str, *, sysfs: str = ...) -> list[PortTopology]:
    """Where each port of the RDMA device named ``device`` sits, read from
    ``/sys/class/infiniband/<device>`` now.  Raises LookupError when there is
    no such device (the message names the ones there are)."""
def all_ports(*, sysfs: str = ...) -> list[PortTopology]:
    """:func:`ports` of every RDMA device of this host, by name; [] without
    RDMA support or devices."""
def classify(a: tuple[str, Sequence[str]], b: tuple[str, Sequence[str]], numa_a: int | None, numa_b: int | None) -> Distance:
    """The distance between two PCI functions given where they sit: each a
    (root bus, chain) pair, the chain being the bridges below the root bus
    followed by the function itself (read from its realpath under
    /sys/devices), and their NUMA nodes (None: unknown).

    On different root buses: NODE when both NUMA nodes are known and equal,
    else SYS.  Under one root bus, with no bridge shared (below different
    root ports): PHB.  Under one shared bridge, each at most two levels
    below it (side by side on its bus, or each below one downstream port of
    one switch): PIX.  Deeper, through more switches: PXB.
    """
def distance(a: str | PciFunction | PortTopology, b: str | int | PciFunction | PortTopology, *, sysfs: str = ...) -> Distance:
    """How far ``a`` (a PCI bus id, a :class:`PciFunction` or a
    :class:`PortTopology`) is from ``b`` (the same, or an int: a NUMA node).

    To a NUMA node: NODE when the function is on it, SYS when on another or
    unknown.  Raises LookupError for a bus id with no function in sysfs,
    ValueError for a port without one.
    """
def numa_node_of_address(address: int) -> int:
    """The NUMA node of the page holding ``address`` in this process.

    move_pages(2) with no target nodes reports where a resident page is;
    a page not yet touched has no node, and get_mempolicy(2)
    (MPOL_F_NODE | MPOL_F_ADDR) is asked instead, which reads it in (the
    kernel places it by the policy in force: where it will live).  A kernel
    without NUMA support (ENOSYS) has one node, 0, when sysfs shows at most
    one.  Raises OSError (EFAULT: not mapped; ENOSYS with several nodes).
    """
def numa_node_of_buffer(buffer: Any) -> int:
    """The NUMA node of a buffer's first page: a numpy array, a CPU torch
    tensor, or any object with the buffer protocol (bytearray, mmap, ...)."""
def nearest(target: Any = None, *, numa_node: int | None = None, address: int | None = None, sysfs: str = ...) -> list[Choice]:
    '''Every RDMA port of this host, nearest first: by :class:`Distance`
    from the target, then by PCIe link speed (fastest first; none last),
    then by device name and port.

    The target is one of:

    * a PCI bus id, str (``nvidia-smi --query-gpu=pci.bus_id``,
      ``"00000000:3B:00.0"``; any form :func:`normalize_bus_id` accepts);
    * a torch device or tensor: CUDA -> its GPU\'s bus id, a CPU tensor -> the
      NUMA node of its memory (torch is only used when given);
    * a numpy array or any buffer object: the NUMA node of its first page;
    * an int: a NUMA node (or ``numa_node=``); ``address=`` a process address
      whose page\'s NUMA node counts.

    A port with no PCI function (rxe on a veth) ranks SYS.  Raises
    LookupError for a bus id with no PCI function in sysfs.
    '''
def accelerators(named: Sequence[str] = (), *, sysfs: str = ...) -> list[Accelerator]:
    """The PCI functions of class display (0x03xx, 3D controllers among
    them) or processing accelerator (0x1200), by address, then those in
    ``named`` (bus ids) not already there.  Raises LookupError for a named
    bus id with no PCI function."""
