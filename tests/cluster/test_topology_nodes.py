"""ibverbs.topology on each cluster node: rxe0 sits on the virtio-net NIC
eth0, a PCI function on the pc machine's root bus, so its PCI address,
NUMA node (the node's only one) and netdev are known; `ibverbs topo
--json` and Device.topology() say what sysfs says, read here directly."""
from __future__ import annotations

import json
import re

REPORT = r"""
import json, os
import ibverbs
from ibverbs import topology
real = os.path.realpath("/sys/class/net/eth0/device")
print(json.dumps({
    "device_topology": [p.as_dict() for p in ibverbs.get_device_list()[0].topology()],
    "eth0_device": real,
    "online": open("/sys/devices/system/node/online").read().strip(),
    "nearest": [[c.device, c.distance.name] for c in topology.nearest(numa_node=0)],
}))
"""


def test_rxe0_sits_on_the_nodes_virtio_nic(node1, node2):
    py = node1.cluster_python
    for node in (node1, node2):
        topo = json.loads(node.run("%s -m ibverbs topo --json" % py).out)
        facts = json.loads(node.run("%s -c '%s'" % (py, REPORT)).out)
        (port,) = topo["rdma"]
        assert (port["device"], port["port"], port["netdevs"]) == ("rxe0", 1, ["eth0"])
        address = port["pci_address"]
        assert re.fullmatch(r"0000:00:[0-9a-f]{2}\.0", address), address
        # eth0's device is the virtio device below that PCI function
        assert facts["eth0_device"].startswith("/sys/devices/pci0000:00/%s/virtio" % address)
        assert port["root"] == "pci0000:00" and port["bridges"] == []
        assert facts["online"] == "0" and port["numa_node"] == 0     # one node: node 0
        assert port["why"] == {"link_speed": "%s has no PCIe link (conventional PCI or "
                                             "Unknown)" % address}   # the pc machine is PCI
        assert facts["device_topology"] == [{k: v for k, v in port.items() if k != "name"}]
        assert facts["nearest"] == [["rxe0", "NODE"]]
        assert topo["accelerators"] == [] and topo["matrix"] == {"rxe0": {"rxe0": "X"}}
