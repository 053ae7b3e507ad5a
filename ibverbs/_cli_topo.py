"""``ibverbs topo``: the accelerators against the RDMA devices, as
``nvidia-smi topo -m`` prints GPUs against NICs, read from sysfs
(ibverbs.topology); ``--json`` prints one JSON document instead."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List, Optional, Tuple

from ._cli_args import EXIT_NO_DEVICE, EXIT_OK

# ibverbs.topology (dataclasses, ctypes) is imported when `topo` runs, not
# with the command line's other subcommands.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from . import topology

# What each class means, in nvidia-smi's words.
LEGEND = (
    ("X", "the same PCI function"),
    ("SYS", "across NUMA nodes (the SMP interconnect between them), or a NUMA node unknown"),
    ("NODE", "between PCIe host bridges of one NUMA node"),
    ("PHB", "through one PCIe host bridge (typically the CPU)"),
    ("PXB", "through several PCIe switches, not through a host bridge"),
    ("PIX", "through at most one PCIe switch"),
    ("n/a", "an RDMA port with no PCI function (rxe or siw on a veth, ...)"),
)


def _port_labels(ports: List[topology.PortTopology]) -> List[str]:
    """The device name, or name:port where a device has several ports."""
    per_device: Dict[str, int] = {}
    for p in ports:
        per_device[p.device] = per_device.get(p.device, 0) + 1
    return [p.device if per_device[p.device] == 1 else f"{p.device}:{p.port}" for p in ports]


def _cell(a: Optional[topology.PciFunction], b: Optional[topology.PciFunction]) -> str:
    from . import topology as topo
    if a is None or b is None:
        return "n/a"
    return topo.distance(a, b).name


def topo_document(named: List[str]) -> Dict[str, Any]:
    """What ``ibverbs topo --json`` prints: the accelerators, the RDMA
    ports (every fact of :meth:`PortTopology.as_dict`) and the matrix of
    distance class names, rows and columns by label."""
    from . import topology as topo
    gpus = topo.accelerators(named)
    ports = topo.all_ports()
    port_labels = _port_labels(ports)
    rows: List[Tuple[str, Optional[topology.PciFunction]]] = \
        [(f"GPU{i}", g.pci) for i, g in enumerate(gpus)] + \
        [(label, p.pci) for label, p in zip(port_labels, ports)]
    matrix = {label: {col: _cell(fn, p.pci) for col, p in zip(port_labels, ports)}
              for label, fn in rows}
    listed = [{"name": f"GPU{i}", "pci_address": g.pci.address,
                     "class": f"0x{g.pci.class_code:06x}", "named": g.named,
                     "numa_node": g.pci.numa_node, "link_speed": g.pci.link_speed,
                     "link_width": g.pci.link_width, "root": g.pci.root,
                     "bridges": list(g.pci.bridges)} for i, g in enumerate(gpus)]
    rdma = [dict(p.as_dict(), name=label) for label, p in zip(port_labels, ports)]
    return {"accelerators": listed, "rdma": rdma, "matrix": matrix,
            "legend": {k: v for k, v in LEGEND}}


def _numa(value: Optional[int]) -> str:
    return "n/a" if value is None else str(value)


def topo_text(doc: Dict[str, Any]) -> str:
    """The matrix and its legends as ``nvidia-smi topo -m`` lays them out."""
    cols = [r["name"] for r in doc["rdma"]]
    names = [a["name"] for a in doc["accelerators"]] + cols
    numa = {a["name"]: a["numa_node"] for a in doc["accelerators"]}
    numa.update({r["name"]: r["numa_node"] for r in doc["rdma"]})
    first = max([len(n) for n in names] + [4])
    width = max([len(c) for c in cols] + [4]) + 2
    lines = [" " * (first + 2) + "".join(c.ljust(width) for c in cols) + "NUMA Affinity"]
    for name in names:
        row = doc["matrix"][name]
        lines.append(name.ljust(first + 2) + "".join(row[c].ljust(width) for c in cols)
                     + _numa(numa[name]))
    lines += ["", "Legend:", ""]
    lines += [f"  {k:<4} = {v}" for k, v in LEGEND]
    if doc["accelerators"]:
        lines += ["", "Accelerators:", ""]
        for a in doc["accelerators"]:
            named = "  (named)" if a["named"] else ""
            lines.append(f"  {a['name']}: {a['pci_address']}  class {a['class']}{named}")
    if doc["rdma"]:
        lines += ["", "RDMA ports:", ""]
        for r in doc["rdma"]:
            where = r["pci_address"] or f"no PCI function ({r['why'].get('pci', '')})"
            link = f"  {r['link_speed']} x{r['link_width']}" if r["link_speed"] else ""
            netdevs = ",".join(r["netdevs"]) or "-"
            lines.append(f"  {r['name']}: port {r['port']}  {where}  netdev {netdevs}{link}")
    return "\n".join(lines)


def cmd_topo(args: argparse.Namespace) -> int:
    """``ibverbs topo [--bus-id ID ...] [--json]``."""
    doc = topo_document(list(args.bus_id or ()))
    print(json.dumps(doc) if args.json else topo_text(doc))
    if not doc["rdma"]:
        print("ibverbs: no RDMA device in /sys/class/infiniband", file=sys.stderr)
        return EXIT_NO_DEVICE
    return EXIT_OK
