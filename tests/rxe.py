"""Soft-RoCE (rxe) facts for test fixtures, read from sysfs.

Standard library only.  Inside the run-in-vm guest (tests/vm/run-in-vm) there
are two devices: rxe0 on veth0 (10.0.0.1) and rxe1 on veth1 (10.0.0.2), both
ACTIVE; `in_vm()` tells whether we are there.

GID indices are never assumed: index 0 is usually the link-local GID and 1
the IPv4-mapped RoCE v2 one, but the table is filled asynchronously and its
order depends on the kernel, so look it up with `roce_v2_ipv4_gid_index`.

Run as a script (`python3 tests/rxe.py`) it prints what it finds.
"""

import os
from typing import Iterator, List, Optional, Tuple

SYSFS_IB = "/sys/class/infiniband"

__all__ = [
    "in_vm", "rdma_devices", "port_state", "roce_v2_ipv4_gid_index",
    "roce_v2_ipv4_gid", "netdev_of", "ipv4_of", "VM_DEVICES",
]

# The devices run-in-vm creates, and the IPv4 address of each netdev.
VM_DEVICES = {"rxe0": "10.0.0.1", "rxe1": "10.0.0.2"}


def in_vm() -> bool:
    """True inside the run-in-vm guest (its init exports IBVERBS_VM=1)."""
    return os.environ.get("IBVERBS_VM") == "1"


def rdma_core_release() -> Tuple[int, ...]:
    """The rdma-core release whose libibverbs and providers run the tests:
    tools/with-rdma-core's, else the VM's own (Debian bookworm: 44.0)."""
    release = os.environ.get("IBVERBS_RDMA_CORE", "44.0")
    try:
        return tuple(int(x) for x in release.split("."))
    except ValueError:            # a prefix rather than a release
        return (0,)


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def rdma_devices() -> List[str]:
    """Names of the RDMA devices, sorted; [] when there are none."""
    try:
        return sorted(os.listdir(SYSFS_IB))
    except OSError:
        return []


def port_state(dev: str, port: int = 1) -> Optional[str]:
    """The port state word, e.g. "ACTIVE" (sysfs says "4: ACTIVE"), or None."""
    s = _read("%s/%s/ports/%d/state" % (SYSFS_IB, dev, port))
    return s.split(":", 1)[-1].strip() if s else None


def _ipv4_mapped(gid: str) -> Optional[str]:
    """"a.b.c.d" if gid (sysfs form, 8 groups of 4 hex digits) is the
    IPv4-mapped ::ffff:a.b.c.d, else None.  (ipaddress would do, but costs
    a noticeable import under emulation.)"""
    g = gid.lower().split(":")
    if len(g) != 8 or g[:6] != ["0000"] * 5 + ["ffff"]:
        return None
    try:
        hi, lo = int(g[6], 16), int(g[7], 16)
    except ValueError:
        return None
    return "%d.%d.%d.%d" % (hi >> 8, hi & 255, lo >> 8, lo & 255)


def _ipv4_gids(dev: str, port: int) -> Iterator[Tuple[int, str]]:
    """(index, "a.b.c.d") for each RoCE v2 GID of dev/port that is an
    IPv4-mapped address (::ffff:a.b.c.d), in index order, read as consumed:
    rxe has 1024 slots, and reading them all takes a second in the VM."""
    base = "%s/%s/ports/%d" % (SYSFS_IB, dev, port)
    try:
        names = os.listdir(base + "/gids")
    except OSError:
        return
    for i in sorted(int(n) for n in names if n.isdigit()):
        gid = _read("%s/gids/%d" % (base, i))
        if not gid:
            continue
        ipv4 = _ipv4_mapped(gid)
        if ipv4 is None:
            continue
        # Unused entries read as all zeros (not IPv4-mapped) and have no
        # readable type; RoCE v1 entries carry the same address.
        if _read("%s/gid_attrs/types/%d" % (base, i)) != "RoCE v2":
            continue
        yield i, ipv4


def roce_v2_ipv4_gid_index(dev: str, port: int = 1) -> int:
    """Index of the RoCE v2 GID with an IPv4-mapped address on dev/port.

    Raises LookupError when there is none (no IPv4 address on the netdev, or
    the GID table is not filled yet)."""
    return roce_v2_ipv4_gid(dev, port)[0]


def roce_v2_ipv4_gid(dev: str, port: int = 1) -> Tuple[int, str]:
    """(index, "a.b.c.d") of the GID that roce_v2_ipv4_gid_index picks."""
    for found in _ipv4_gids(dev, port):
        return found
    raise LookupError("%s port %d has no RoCE v2 IPv4 GID" % (dev, port))


def netdev_of(dev: str, port: int = 1) -> Optional[str]:
    """Name of the network device under an RDMA device (e.g. "veth0").

    Taken from the GID attributes, which rxe fills for RoCE GIDs; None if no
    GID names one."""
    base = "%s/%s/ports/%d/gid_attrs/ndevs" % (SYSFS_IB, dev, port)
    try:
        names = os.listdir(base)
    except OSError:
        return None
    for i in sorted(int(n) for n in names if n.isdigit()):
        nd = _read("%s/%d" % (base, i))
        if nd:
            return nd
    return None


def ipv4_of(dev: str, port: int = 1) -> str:
    """The IPv4 address of an RDMA device, as its RoCE v2 GID carries it."""
    return roce_v2_ipv4_gid(dev, port)[1]


def main() -> int:
    devs = rdma_devices()
    print("in_vm: %s" % in_vm())
    if not devs:
        print("no RDMA devices under %s" % SYSFS_IB)
        return 1
    for dev in devs:
        idx: Optional[int]
        ip: Optional[str]
        try:
            idx, ip = roce_v2_ipv4_gid(dev)
        except LookupError:
            idx, ip = None, None
        print("%s: state=%s netdev=%s roce_v2_ipv4_gid_index=%s ipv4=%s" % (
            dev, port_state(dev), netdev_of(dev), idx, ip))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def own_stderr(text: str) -> str:
    """A child process's stderr without libibverbs' own provider warnings
    ("libibverbs: Warning: couldn't load driver ..."), which come from how the
    machine's rdma-core is installed (e.g. tools/with-rdma-core's newer
    provider list seen by a child running the VM's older libibverbs), not
    from ibverbs, and without the interpreter's warning about a fork() the
    test itself makes while threads run."""
    return "".join(line for line in text.splitlines(keepends=True)
                   if not line.startswith("libibverbs: Warning:")
                   # CPython 3.12+ on a test's own fork() with threads running
                   and "is multi-threaded, use of fork() may lead to deadlocks" not in line)
