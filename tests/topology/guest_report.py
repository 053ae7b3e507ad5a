"""Runs inside the PCIe-tree guest (tests/vm/run-in-vm --topology pcie-tree):
prints one JSON document of what ibverbs.topology and `ibverbs topo` say
there, beside what sysfs says read directly, for test_pcie_tree.py to
check on the host.  No assertion here: the host side names what failed."""
from __future__ import annotations

import ctypes
import json
import mmap
import os
import platform
import subprocess
import sys

from ibverbs import get_device_list, topology

SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237}[platform.machine()]
MPOL_BIND, MPOL_DEFAULT = 2, 0


def read(path):
    with open(path) as f:
        return f.read().strip()


def sysfs_pci():
    """Every PCI function: vendor:device, class, NUMA node, realpath."""
    out = {}
    for bdf in sorted(os.listdir("/sys/bus/pci/devices")):
        d = "/sys/bus/pci/devices/" + bdf
        out[bdf] = {"id": read(d + "/vendor")[2:] + ":" + read(d + "/device")[2:],
                    "class": read(d + "/class"), "numa_node": int(read(d + "/numa_node")),
                    "realpath": os.path.realpath(d)}
    return out


def sysfs_nics():
    """Each rxe device: its netdev, that netdev's MAC and the realpath of
    its device link."""
    out = {}
    for name in sorted(os.listdir("/sys/class/infiniband")):
        netdev = read(f"/sys/class/infiniband/{name}/ports/1/gid_attrs/ndevs/0")
        out[name] = {"netdev": netdev, "mac": read(f"/sys/class/net/{netdev}/address"),
                     "device": os.path.realpath(f"/sys/class/net/{netdev}/device")}
    return out


def ranked(choices):
    return [[c.device, c.port, c.distance.name] for c in choices]


def buffer_on_node(node):
    """An mmap whose pages the kernel placed on `node` (set_mempolicy
    MPOL_BIND while it was touched), and where nearest() ranks from it."""
    libc = ctypes.CDLL(None, use_errno=True)
    mask = ctypes.c_ulong(1 << node)
    if libc.syscall(SET_MEMPOLICY, MPOL_BIND, ctypes.byref(mask), 64) != 0:
        raise OSError(ctypes.get_errno(), "set_mempolicy")
    try:
        buf = mmap.mmap(-1, 1 << 20)
        buf[:] = b"\1" * len(buf)                   # fault every page in, on `node`
    finally:
        libc.syscall(SET_MEMPOLICY, MPOL_DEFAULT, None, 0)
    node_seen = topology.numa_node_of_buffer(buf)
    result = {"node": node_seen, "nearest": ranked(topology.nearest(buf))}
    try:
        import numpy as np
        array = np.frombuffer(buf, dtype=np.uint8)
        result["numpy_node"] = topology.numa_node_of_buffer(array)
        del array
    except ImportError:
        pass
    buf.close()
    return result


def main():
    pci = sysfs_pci()
    fn = {bdf: topology.pci_function(bdf) for bdf in pci}
    gpus = [bdf for bdf, f in pci.items() if f["class"].startswith("0x03")]
    doc = {
        "sysfs": {"pci": pci, "nics": sysfs_nics(),
                  "online": read("/sys/devices/system/node/online")},
        "ports": {p.device: p.as_dict() for p in topology.all_ports()},
        "device_topology": {d.name: [p.as_dict() for p in d.topology()]
                            for d in get_device_list()},
        "accelerators": [a.pci.address for a in topology.accelerators()],
        # The torch form of each accelerator's bus id: 8-digit domain, upper case.
        "nearest_gpu": {bdf: ranked(topology.nearest("0000" + bdf.upper())) for bdf in gpus},
        "nearest_node": {n: ranked(topology.nearest(numa_node=n)) for n in (0, 1)},
        "buffer": {n: buffer_on_node(n) for n in (0, 1)},
        "distance": {a: {b: topology.distance(fn[a], fn[b]).name for b in pci} for a in pci},
        "distance_node": {a: [topology.distance(fn[a], n).name for n in (0, 1)] for a in pci},
    }
    edu = [bdf for bdf, f in pci.items() if f["id"] == "1234:11e8"]
    cli = [sys.executable, "-m", "ibverbs", "topo"] + [a for bdf in edu for a in ("-b", bdf)]
    for key, argv in (("topo_json", cli + ["--json"]), ("topo_text", cli)):
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        doc[key] = {"rc": r.returncode, "out": r.stdout, "err": r.stderr}
    json.dump(doc, sys.stdout)


if __name__ == "__main__":
    main()
