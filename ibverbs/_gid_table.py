"""A port's GID table with each GID's type and network device, as
``show_gids`` reads it: from sysfs, else from ibv_query_gid_table.
Used by Context.find_gid (ibverbs.helpers) and the ``gids`` command."""
from __future__ import annotations

import os

# typing costs milliseconds to import: for the type checker only
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterator, List, Optional, Tuple

    GidEntryRow = Tuple[int, bytes, int, Optional[str]]   # index, GID, type, netdev

SYSFS_INFINIBAND = "/sys/class/infiniband"
GID_TYPE_NAMES = {0: "IB", 1: "RoCE v1", 2: "RoCE v2"}   # enum ibv_gid_type


def _read_text(path: str) -> Optional[str]:
    """A sysfs attribute, or None where the kernel has nothing there (an
    unused GID slot reads as EINVAL)."""
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return None


def sysfs_gid_entries(device: str, port: int, ethernet: bool) -> Optional[List[GidEntryRow]]:
    """(index, GID bytes, GID type, netdev) of each used GID of a port, from
    /sys/class/infiniband/<device>/ports/<port>/; None without sysfs.
    sysfs says "IB/RoCE v1" for type 0/1: the port's link layer decides."""
    entries = sysfs_gid_iter(device, port, ethernet)
    return None if entries is None else list(entries)


def sysfs_gid_iter(device: str, port: int, ethernet: bool) -> Optional[Iterator[GidEntryRow]]:
    """The same, read as it is consumed: find_gid stops at the first match.
    A port has up to 1024 slots (rxe, mlx5) and most are unused, each a
    sysfs read; reading them all took a second under the test VM's
    emulation, and find_gid's GID is nearly always among the first."""
    base = f"{SYSFS_INFINIBAND}/{device}/ports/{port}"
    try:
        names = os.listdir(f"{base}/gids")
    except OSError:
        return None
    return _sysfs_rows(base, sorted(int(n) for n in names if n.isdigit()), ethernet)


def _sysfs_rows(base: str, indexes: List[int], ethernet: bool) -> Iterator[GidEntryRow]:
    for index in indexes:
        text = _read_text(f"{base}/gids/{index}")
        if text is None:
            continue
        raw = bytes.fromhex(text.replace(":", ""))
        if not any(raw):
            continue
        kind_text = _read_text(f"{base}/gid_attrs/types/{index}") or ""
        kind = 2 if "v2" in kind_text else (1 if ethernet else 0)
        netdev = _read_text(f"{base}/gid_attrs/ndevs/{index}") or None
        yield index, raw, kind, netdev


def verbs_gid_entries(ctx: Any, port: int) -> List[GidEntryRow]:
    """The same from ibv_query_gid_table (rdma-core 35+), where sysfs is
    not mounted."""
    import socket

    entries: List[GidEntryRow] = []
    for e in ctx.query_gid_table():
        if e.port_num != port:
            continue
        try:
            netdev: Optional[str] = socket.if_indextoname(e.ndev_ifindex) if e.ndev_ifindex else None
        except OSError:
            netdev = None
        entries.append((int(e.gid_index), bytes(e.gid), int(e.gid_type), netdev))
    return entries
