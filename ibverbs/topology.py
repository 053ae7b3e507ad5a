"""Where RDMA devices sit in the PCIe tree, and which is nearest a GPU.

Everything here is read from sysfs when asked (nothing is cached, nothing
needs libibverbs or a verbs call), so it also works on a host whose
libibverbs has no provider for a device.

* :func:`ports` / :func:`all_ports`: for each RDMA device and port, its PCI
  function (``domain:bus:device.function``), NUMA node, network devices
  and PCIe link speed and width (:class:`PortTopology`).
* :func:`distance`: how far apart two PCI functions, or a PCI function and a
  NUMA node, are, in the classes of ``nvidia-smi topo -m``
  (:class:`Distance`: PIX, PXB, PHB, NODE, SYS).
* :func:`nearest`: the RDMA ports ordered by distance from a GPU's PCI bus
  id (as nvidia-smi prints it), a torch CUDA device, a NUMA node or a
  buffer, then by link speed, then by name.
* :func:`accelerators`: the PCI display, 3D and processing-accelerator
  functions (what ``ibverbs topo`` lists against the RDMA devices).

A fact that does not apply is None, never an exception; ``PortTopology.why``
says why for each None (docs/guides/topology.md lists the cases).
"""
from __future__ import annotations

import ctypes
import enum
import errno
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

__all__ = ["Distance", "PciFunction", "PortTopology", "Choice", "Accelerator",
           "normalize_bus_id", "pci_function", "ports", "all_ports", "distance",
           "classify", "nearest", "accelerators", "numa_node_of_address",
           "numa_node_of_buffer"]

SYSFS = "/sys"

_BDF = re.compile(r"^([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")
_SHORT_BDF = re.compile(r"^([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")
# A path component of /sys/devices that names a PCI function ("0000:3b:00.0")
# or a PCI root bus ("pci0000:3a"); domains above 0xffff (Intel VMD) are
# printed with 5 digits.
_SYSFS_BDF = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_SYSFS_ROOT = re.compile(r"^pci[0-9a-f]{4,8}:[0-9a-f]{2}$")


class Distance(enum.IntEnum):
    """How far apart two PCI functions are, as ``nvidia-smi topo -m`` says it
    (smaller is nearer)."""

    X = 0      #: the same PCI function
    PIX = 1    #: through at most one PCIe switch (or on the same bridge)
    PXB = 2    #: through several PCIe switches, not through a host bridge
    PHB = 3    #: through one PCIe host bridge (root complex), not between two
    NODE = 4   #: between host bridges of one NUMA node
    SYS = 5    #: across NUMA nodes (or where a NUMA node is unknown)


def normalize_bus_id(bus_id: str) -> str:
    """A PCI bus id in the form sysfs names it: ``"0000:3b:00.0"``.

    Accepts what tools print: an 8-digit domain (``"00000000:3B:00.0"``, as
    nvidia-smi and cudaDeviceGetPCIBusId write it), a 4-digit one, none
    (domain 0: ``"3b:00.0"``), either case.  Raises ValueError otherwise.
    """
    if not isinstance(bus_id, str):
        raise TypeError(f"a PCI bus id is a str, not {type(bus_id).__name__}")
    text = bus_id.strip()
    m = _BDF.match(text)
    if m:
        domain, bus, dev, fn = int(m[1], 16), int(m[2], 16), int(m[3], 16), int(m[4])
    else:
        m = _SHORT_BDF.match(text)
        if not m:
            raise ValueError(f"not a PCI bus id (domain:bus:device.function): {bus_id!r}")
        domain, bus, dev, fn = 0, int(m[1], 16), int(m[2], 16), int(m[3])
    if dev > 0x1f:
        raise ValueError(f"not a PCI bus id: device {dev:#x} is above 0x1f in {bus_id!r}")
    return f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"


@dataclass(frozen=True)
class PciFunction:
    """One PCI function and where sysfs says it sits."""

    address: str
    """domain:bus:device.function, as sysfs names it (``"0000:3b:00.0"``)."""
    root: str
    """Its root bus (``"pci0000:3a"``): one per PCIe host bridge."""
    bridges: Tuple[str, ...]
    """The bridges between the root bus and the function, top first (root
    port, switch upstream port, switch downstream port, ...)."""
    numa_node: Optional[int]
    """Its NUMA node; None where the firmware gives none and the machine has
    more than one (on a machine with one node, that node)."""
    class_code: int
    """The PCI class code (0x020000 an Ethernet NIC, 0x030200 a 3D controller)."""
    link_speed: Optional[str]
    """``current_link_speed`` as sysfs writes it (``"16.0 GT/s PCIe"``); None
    where the function has no PCIe link (conventional PCI, or ``Unknown``)."""
    link_speed_gts: Optional[float]
    """The same in GT/s (16.0); None with link_speed."""
    link_width: Optional[int]
    """``current_link_width`` (lanes); None without a PCIe link."""


@dataclass(frozen=True)
class PortTopology:
    """Where one port of an RDMA device sits (:func:`ports`)."""

    device: str
    """The RDMA device (``"mlx5_0"``, ``"rxe0"``)."""
    port: int
    """The port number (from 1)."""
    netdevs: Tuple[str, ...]
    """The network devices of the port (RoCE, rxe, siw, iWARP); () for an
    InfiniBand port, which has none."""
    pci: Optional[PciFunction]
    """The PCI function behind the port: the device's own, or for a device
    on a network device (rxe, siw) that network device's.  None where there
    is none (a veth, a bridge, a device that is not on PCI)."""
    why: Dict[str, str] = field(default_factory=dict, compare=False)
    """For each fact that is None, why: keys "pci", "numa_node",
    "link_speed", "netdevs"."""

    @property
    def pci_address(self) -> Optional[str]:
        """The PCI address of :attr:`pci`; None without one."""
        return self.pci.address if self.pci else None

    @property
    def numa_node(self) -> Optional[int]:
        """The NUMA node of :attr:`pci`; None without one, or unknown."""
        return self.pci.numa_node if self.pci else None

    @property
    def link_speed(self) -> Optional[str]:
        """The PCIe link speed of :attr:`pci` (``"16.0 GT/s PCIe"``)."""
        return self.pci.link_speed if self.pci else None

    @property
    def link_width(self) -> Optional[int]:
        """The PCIe link width of :attr:`pci` (lanes)."""
        return self.pci.link_width if self.pci else None

    def as_dict(self) -> Dict[str, Any]:
        """A JSON-ready dict of every fact (what ``ibverbs topo --json`` prints)."""
        return {"device": self.device, "port": self.port, "pci_address": self.pci_address,
                "numa_node": self.numa_node, "netdevs": list(self.netdevs),
                "link_speed": self.link_speed,
                "link_speed_gts": self.pci.link_speed_gts if self.pci else None,
                "link_width": self.link_width,
                "root": self.pci.root if self.pci else None,
                "bridges": list(self.pci.bridges) if self.pci else None,
                "why": dict(self.why)}


@dataclass(frozen=True)
class Choice:
    """One RDMA port as :func:`nearest` ranks it."""

    device: str
    """The RDMA device's name (what ``get_device_list()`` names it)."""
    port: int
    """The port number."""
    distance: Distance
    """How far it is from what :func:`nearest` was given."""
    topology: PortTopology
    """Everything known about where it sits."""


@dataclass(frozen=True)
class Accelerator:
    """A PCI function ``ibverbs topo`` lists as an accelerator."""

    pci: PciFunction
    named: bool
    """True when the caller named it (its class code is not one of ours)."""


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _online_nodes(sysfs: str) -> Optional[List[int]]:
    text = _read(os.path.join(sysfs, "devices/system/node/online"))
    if text is None:
        return None
    nodes: List[int] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            nodes.extend(range(int(lo), int(hi) + 1))
        elif part:
            nodes.append(int(part))
    return nodes


def _split_sysfs_path(real: str) -> Optional[Tuple[str, Tuple[str, ...]]]:
    """/sys/devices/pci0000:10/0000:10:00.0/0000:11:00.0 -> ("pci0000:10",
    ("0000:10:00.0", "0000:11:00.0")); None when the path is not under a PCI
    root bus."""
    parts = real.split("/")
    for i, part in enumerate(parts):
        if _SYSFS_ROOT.match(part):
            chain = []
            for p in parts[i + 1:]:
                if not _SYSFS_BDF.match(p):
                    break
                chain.append(p)
            return (part, tuple(chain)) if chain else None
    return None


def pci_function(bus_id: str, *, sysfs: str = SYSFS) -> Optional[PciFunction]:
    """The PCI function of a bus id (any form :func:`normalize_bus_id`
    accepts), read from ``/sys/bus/pci/devices``; None where there is no
    such function.  Raises ValueError for what is not a bus id."""
    address = normalize_bus_id(bus_id)
    link = os.path.join(sysfs, "bus/pci/devices", address)
    if not os.path.exists(link):
        return None
    return _function_at(os.path.realpath(link), sysfs)


def _function_at(real: str, sysfs: str) -> Optional[PciFunction]:
    split = _split_sysfs_path(real)
    if split is None:
        return None
    root, chain = split
    # real may be below the function (a netdev's virtio device): cut there.
    fn_dir = real[:real.index(chain[-1]) + len(chain[-1])]
    numa_text = _read(os.path.join(fn_dir, "numa_node"))
    numa: Optional[int] = int(numa_text) if numa_text else None
    if numa is not None and numa < 0:
        online = _online_nodes(sysfs)
        # No proximity domain from the firmware: on a one-node machine that
        # node is the only answer; on more, it is not known.
        numa = online[0] if online is not None and len(online) == 1 else None
    speed = _read(os.path.join(fn_dir, "current_link_speed"))
    gts: Optional[float] = None
    if speed:
        m = re.match(r"^([0-9.]+)\s*GT/s", speed)
        gts = float(m[1]) if m else None
    if gts is None:
        speed = None
    width_text = _read(os.path.join(fn_dir, "current_link_width"))
    width = int(width_text) if speed and width_text and width_text.isdigit() else None
    class_text = _read(os.path.join(fn_dir, "class"))
    return PciFunction(address=chain[-1], root=root, bridges=chain[:-1], numa_node=numa,
                       class_code=int(class_text, 16) if class_text else 0,
                       link_speed=speed, link_speed_gts=gts, link_width=width)


def _port_netdevs(dev_dir: str, port: int, sysfs: str) -> Tuple[str, ...]:
    # A PCI NIC's netdevs are its function's (device/net); rxe and siw name
    # the one they sit on in "parent".  Only without either, the port's GID
    # table says (gid_attrs/ndevs: one file per entry, 1024 on rxe, hence
    # the last resort).
    try:
        names = sorted(os.listdir(os.path.join(dev_dir, "device", "net")))
    except OSError:
        names = []
    if names:
        return tuple(names)
    parent = _read(os.path.join(dev_dir, "parent"))
    if parent and os.path.isdir(os.path.join(sysfs, "class/net", parent)):
        return (parent,)
    ndevs = os.path.join(dev_dir, "ports", str(port), "gid_attrs", "ndevs")
    try:
        entries = sorted(os.listdir(ndevs), key=lambda e: int(e) if e.isdigit() else 0)
    except OSError:
        entries = []
    for entry in entries:
        name = _read(os.path.join(ndevs, entry))
        if name and name not in names:
            names.append(name)
    return tuple(names)


def _port_numbers(dev_dir: str) -> List[int]:
    try:
        return sorted(int(p) for p in os.listdir(os.path.join(dev_dir, "ports")) if p.isdigit())
    except OSError:
        return []


def ports(device: str, *, sysfs: str = SYSFS) -> List[PortTopology]:
    """Where each port of the RDMA device named ``device`` sits, read from
    ``/sys/class/infiniband/<device>`` now.  Raises LookupError when there is
    no such device (the message names the ones there are)."""
    dev_dir = os.path.join(sysfs, "class/infiniband", device)
    if not device or "/" in device or not os.path.isdir(dev_dir):
        there = _device_names(sysfs)
        raise LookupError(f"no RDMA device {device!r} in {sysfs}/class/infiniband "
                          f"(there: {', '.join(there) or 'none'})")
    own = os.path.join(dev_dir, "device")
    own_fn = _function_at(os.path.realpath(own), sysfs) if os.path.exists(own) else None
    result = []
    for port in _port_numbers(dev_dir):
        why: Dict[str, str] = {}
        netdevs = _port_netdevs(dev_dir, port, sysfs)
        if not netdevs:
            why["netdevs"] = "the port has no network device (InfiniBand, or no GID bound yet)"
        fn = own_fn
        if fn is None:
            for name in netdevs:
                net_dev = os.path.join(sysfs, "class/net", name, "device")
                if os.path.exists(net_dev):
                    fn = _function_at(os.path.realpath(net_dev), sysfs)
                    if fn is not None:
                        break
            if fn is None:
                why["pci"] = (f"{device} has no PCI device and its network device "
                              f"{'/'.join(netdevs)} is not on PCI (virtual: veth, bridge, ...)"
                              if netdevs else f"{device} has no PCI device and no network device")
        if fn is None:
            why["numa_node"] = why["link_speed"] = "no PCI function"
        else:
            if fn.numa_node is None:
                why["numa_node"] = (f"{fn.address} has no NUMA node from the firmware "
                                    "(numa_node -1) and the machine has several")
            if fn.link_speed is None:
                why["link_speed"] = f"{fn.address} has no PCIe link (conventional PCI or Unknown)"
        result.append(PortTopology(device=device, port=port, netdevs=netdevs, pci=fn, why=why))
    return result


def _device_names(sysfs: str) -> List[str]:
    try:
        return sorted(os.listdir(os.path.join(sysfs, "class/infiniband")))
    except OSError:
        return []


def all_ports(*, sysfs: str = SYSFS) -> List[PortTopology]:
    """:func:`ports` of every RDMA device of this host, by name; [] without
    RDMA support or devices."""
    return [p for name in _device_names(sysfs) for p in ports(name, sysfs=sysfs)]


def classify(a: Tuple[str, Sequence[str]], b: Tuple[str, Sequence[str]],
             numa_a: Optional[int], numa_b: Optional[int]) -> Distance:
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
    root_a, chain_a = a[0], list(a[1])
    root_b, chain_b = b[0], list(b[1])
    if root_a != root_b:
        if numa_a is not None and numa_a == numa_b:
            return Distance.NODE
        return Distance.SYS
    if chain_a == chain_b:
        return Distance.X
    shared = 0
    while shared < min(len(chain_a), len(chain_b)) and chain_a[shared] == chain_b[shared]:
        shared += 1
    if shared == 0:
        return Distance.PHB
    below_a, below_b = len(chain_a) - shared, len(chain_b) - shared
    if below_a == 0 or below_b == 0:
        # One is a bridge above the other: what lies between them counts.
        return Distance.PIX if max(below_a, below_b) <= 2 else Distance.PXB
    return Distance.PIX if below_a <= 2 and below_b <= 2 else Distance.PXB


def _as_function(where: Union[str, PciFunction, PortTopology], sysfs: str) -> PciFunction:
    if isinstance(where, PciFunction):
        return where
    if isinstance(where, PortTopology):
        if where.pci is None:
            raise ValueError(f"{where.device} port {where.port} has no PCI function: "
                             f"{where.why.get('pci', '')}")
        return where.pci
    fn = pci_function(where, sysfs=sysfs)
    if fn is None:
        raise LookupError(f"no PCI function {normalize_bus_id(where)} in {sysfs}/bus/pci/devices")
    return fn


def distance(a: Union[str, PciFunction, PortTopology],
             b: Union[str, int, PciFunction, PortTopology], *, sysfs: str = SYSFS) -> Distance:
    """How far ``a`` (a PCI bus id, a :class:`PciFunction` or a
    :class:`PortTopology`) is from ``b`` (the same, or an int: a NUMA node).

    To a NUMA node: NODE when the function is on it, SYS when on another or
    unknown.  Raises LookupError for a bus id with no function in sysfs,
    ValueError for a port without one.
    """
    fa = _as_function(a, sysfs)
    if isinstance(b, bool):
        raise TypeError("a NUMA node is an int, not a bool")
    if isinstance(b, int):
        return Distance.NODE if fa.numa_node == b else Distance.SYS
    fb = _as_function(b, sysfs)
    return classify((fa.root, fa.bridges + (fa.address,)), (fb.root, fb.bridges + (fb.address,)),
                    fa.numa_node, fb.numa_node)


# --- NUMA node of memory -------------------------------------------------

# get_mempolicy(2) and move_pages(2) through syscall(2): glibc has no
# wrappers (libnuma does, and is not a dependency).
_SYSCALLS = {"x86_64": {"get_mempolicy": 239, "move_pages": 279},
             "aarch64": {"get_mempolicy": 236, "move_pages": 239},
             "ppc64le": {"get_mempolicy": 260, "move_pages": 301},
             "s390x": {"get_mempolicy": 269, "move_pages": 310}}
_MPOL_F_NODE, _MPOL_F_ADDR = 1, 2
_libc: Optional[ctypes.CDLL] = None


def _syscall(name: str, *args: Any) -> int:
    global _libc
    import platform
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None:
        raise OSError(errno.ENOSYS, f"{name}: no syscall number known for {platform.machine()}")
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    _libc.syscall.restype = ctypes.c_long
    rc = _libc.syscall(ctypes.c_long(numbers[name]), *args)
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")
    return int(rc)


def numa_node_of_address(address: int) -> int:
    """The NUMA node of the page holding ``address`` in this process.

    move_pages(2) with no target nodes reports where a resident page is;
    a page not yet touched has no node, and get_mempolicy(2)
    (MPOL_F_NODE | MPOL_F_ADDR) is asked instead, which reads it in (the
    kernel places it by the policy in force: where it will live).  A kernel
    without NUMA support (ENOSYS) has one node, 0, when sysfs shows at most
    one.  Raises OSError (EFAULT: not mapped; ENOSYS with several nodes).
    """
    page = address - address % os.sysconf("SC_PAGE_SIZE")
    pages = (ctypes.c_void_p * 1)(page)
    status = (ctypes.c_int * 1)(-1)
    try:
        _syscall("move_pages", ctypes.c_int(0), ctypes.c_ulong(1), pages, None, status,
                 ctypes.c_int(0))
    except OSError as exc:
        if exc.errno == errno.ENOSYS and len(_online_nodes(SYSFS) or ()) <= 1:
            return 0
        raise
    if status[0] >= 0:
        return int(status[0])
    if status[0] != -errno.ENOENT:
        raise OSError(-status[0], f"move_pages: {os.strerror(-status[0])} at {address:#x}")
    node = ctypes.c_int(-1)
    _syscall("get_mempolicy", ctypes.byref(node), None, ctypes.c_ulong(0),
             ctypes.c_void_p(page), ctypes.c_ulong(_MPOL_F_NODE | _MPOL_F_ADDR))
    return node.value


def _buffer_address(obj: Any) -> int:
    interface = getattr(obj, "__array_interface__", None)
    if isinstance(interface, dict) and "data" in interface:
        return int(interface["data"][0])
    view = memoryview(obj)
    if view.nbytes == 0:
        raise ValueError("an empty buffer has no address")
    if view.readonly:
        # ctypes reaches the memory of writable buffers only (from_buffer).
        raise TypeError(f"a read-only {type(obj).__name__} buffer: pass address= instead")
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def numa_node_of_buffer(buffer: Any) -> int:
    """The NUMA node of a buffer's first page: a numpy array, a CPU torch
    tensor, or any object with the buffer protocol (bytearray, mmap, ...)."""
    if _is_torch(buffer):
        return numa_node_of_address(int(buffer.data_ptr()))
    return numa_node_of_address(_buffer_address(buffer))


# --- choice --------------------------------------------------------------

def _is_torch(obj: Any) -> bool:
    return type(obj).__module__.split(".")[0] == "torch"


def _torch_bus_id(props: Any) -> str:
    """A CUDA device's PCI bus id from torch's device properties, whose
    pci_domain_id, pci_bus_id and pci_device_id are ints (cudaDeviceProp's
    pciDomainID, pciBusID, pciDeviceID); a GPU is function 0."""
    parts = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if not all(isinstance(part, int) for part in parts):
        raise LookupError("this torch does not report its GPU's PCI address (pci_domain_id, "
                          "pci_bus_id, pci_device_id): pass the bus id nvidia-smi shows")
    domain, bus, device = parts
    return f"{domain:08x}:{bus:02x}:{device:02x}.0"


def _torch_target(obj: Any) -> Union[str, int]:
    """A torch device or tensor -> a PCI bus id (CUDA) or a NUMA node (CPU).
    torch is already imported: the caller made the object."""
    torch = sys.modules["torch"]
    dev = obj if isinstance(obj, torch.device) else getattr(obj, "device", None)
    if dev is None:
        raise TypeError(f"a torch {type(obj).__name__} has no device")
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        return _torch_bus_id(torch.cuda.get_device_properties(index))
    if dev.type == "cpu" and not isinstance(obj, torch.device):
        return numa_node_of_address(int(obj.data_ptr()))
    raise ValueError(f"torch device {dev} is neither a CUDA device nor a CPU tensor")


def nearest(target: Any = None, *, numa_node: Optional[int] = None,
            address: Optional[int] = None, sysfs: str = SYSFS) -> List[Choice]:
    """Every RDMA port of this host, nearest first: by :class:`Distance`
    from the target, then by PCIe link speed (fastest first; none last),
    then by device name and port.

    The target is one of:

    * a PCI bus id, str (``nvidia-smi --query-gpu=pci.bus_id``,
      ``"00000000:3B:00.0"``; any form :func:`normalize_bus_id` accepts);
    * a torch device or tensor: CUDA -> its GPU's bus id, a CPU tensor -> the
      NUMA node of its memory (torch is only used when given);
    * a numpy array or any buffer object: the NUMA node of its first page;
    * an int: a NUMA node (or ``numa_node=``); ``address=`` a process address
      whose page's NUMA node counts.

    A port with no PCI function (rxe on a veth) ranks SYS.  Raises
    LookupError for a bus id with no PCI function in sysfs.
    """
    given = [t is not None for t in (target, numa_node, address)]
    if sum(given) != 1:
        raise TypeError("nearest() takes one target: a bus id, a NUMA node, an address "
                        "(address=), a buffer or a torch device/tensor")
    where: Union[str, int, PciFunction]
    if numa_node is not None:
        where = numa_node
    elif address is not None:
        where = numa_node_of_address(address)
    elif isinstance(target, str):
        where = _as_function(target, sysfs)
    elif isinstance(target, PciFunction):
        where = target
    elif isinstance(target, int) and not isinstance(target, bool):
        where = target
    elif _is_torch(target):
        resolved = _torch_target(target)
        where = _as_function(resolved, sysfs) if isinstance(resolved, str) else resolved
    else:
        where = numa_node_of_buffer(target)
    choices = []
    for port in all_ports(sysfs=sysfs):
        d = Distance.SYS if port.pci is None else distance(port.pci, where, sysfs=sysfs)
        choices.append(Choice(device=port.device, port=port.port, distance=d, topology=port))
    choices.sort(key=_rank)
    return choices


def _rank(choice: Choice) -> Tuple[Distance, float, str, int]:
    """nearest()'s order: distance, then the fastest PCIe link (none: last),
    then name and port."""
    pci = choice.topology.pci
    speed = (pci.link_speed_gts or 0.0) if pci else 0.0
    return (choice.distance, -speed, choice.device, choice.port)


# --- accelerators --------------------------------------------------------

def _is_accelerator_class(class_code: int) -> bool:
    # 0x03xxxx display controllers (0x0302: 3D, which most datacenter GPUs
    # are), 0x1200xx processing accelerators.
    return class_code >> 16 == 0x03 or class_code >> 8 == 0x1200


def accelerators(named: Sequence[str] = (), *, sysfs: str = SYSFS) -> List[Accelerator]:
    """The PCI functions of class display (0x03xx, 3D controllers among
    them) or processing accelerator (0x1200), by address, then those in
    ``named`` (bus ids) not already there.  Raises LookupError for a named
    bus id with no PCI function."""
    found: Dict[str, Accelerator] = {}
    try:
        addresses = sorted(os.listdir(os.path.join(sysfs, "bus/pci/devices")))
    except OSError:
        addresses = []
    for address in addresses:
        class_text = _read(os.path.join(sysfs, "bus/pci/devices", address, "class"))
        if class_text and _is_accelerator_class(int(class_text, 16)):
            fn = pci_function(address, sysfs=sysfs)
            if fn is not None:
                found[fn.address] = Accelerator(pci=fn, named=False)
    result = list(found.values())
    for bus_id in named:
        fn = _as_function(bus_id, sysfs)
        if fn.address not in found:
            found[fn.address] = Accelerator(pci=fn, named=True)
            result.append(found[fn.address])
    return result
