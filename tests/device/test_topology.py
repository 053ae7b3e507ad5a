"""ibverbs.topology in the plain VM: rxe0 and rxe1 sit on veth0 and veth1,
virtual network devices with no PCI function, so every PCI fact is None
with its reason, never an exception; the guest has one NUMA node.  The
PCIe tree and every distance class: tests/topology (a q35 guest)."""
from __future__ import annotations

import json
import mmap
import subprocess
import sys

import pytest

from ibverbs import topology
from ibverbs.topology import Distance


@pytest.fixture(scope="module")
def veth_devices(device_names):
    """The two rxe devices and their veths, as tests/vm/init made them."""
    return dict(zip(device_names, ("veth0", "veth1")))


def test_ports_on_a_veth_have_no_pci_function(device_names, veth_devices):
    for name in device_names:
        (port,) = topology.ports(name)
        assert (port.device, port.port) == (name, 1)
        assert port.netdevs == (veth_devices[name],)
        assert port.pci is None and port.pci_address is None
        assert port.numa_node is None and port.link_speed is None and port.link_width is None
        assert veth_devices[name] in port.why["pci"] and "not on PCI" in port.why["pci"]
        assert set(port.why) == {"pci", "numa_node", "link_speed"}
        assert port.as_dict()["pci_address"] is None


def test_device_topology_is_the_same_facts(ib, device_names):
    devices = {d.name: d for d in ib.get_device_list()}
    for name in device_names:
        assert devices[name].topology() == topology.ports(name)


def test_all_ports_lists_both_devices():
    assert [(p.device, p.port) for p in topology.all_ports()] == [("rxe0", 1), ("rxe1", 1)]


def test_unknown_device_is_a_lookup_error():
    with pytest.raises(LookupError, match=r"no RDMA device 'mlx5_9'.*there: rxe0, rxe1"):
        topology.ports("mlx5_9")


def test_one_numa_node_and_buffers_on_it():
    with open("/sys/devices/system/node/online") as f:
        assert f.read().strip() == "0"
    np = pytest.importorskip("numpy")
    array = np.ones(1 << 16)
    assert topology.numa_node_of_buffer(array) == 0
    with mmap.mmap(-1, 1 << 16) as untouched:   # no page yet: get_mempolicy places it
        assert topology.numa_node_of_buffer(untouched) == 0
    assert topology.numa_node_of_address(array.__array_interface__["data"][0]) == 0


def test_unmapped_address_is_efault():
    with pytest.raises(OSError) as info:
        topology.numa_node_of_address(0x1000)
    assert info.value.errno == 14                  # EFAULT


def test_nearest_ranks_ports_without_pci_last_by_name():
    for target in (0, bytearray(4096)):
        ranked = topology.nearest(target)
        assert [(c.device, c.distance) for c in ranked] == [("rxe0", Distance.SYS),
                                                            ("rxe1", Distance.SYS)]


def test_pci_functions_of_the_guest():
    # The pc machine's host bridge: on the root bus, NUMA node 0 (the only one).
    fn = topology.pci_function("00000000:00:00.0")
    assert fn is not None and fn.address == "0000:00:00.0"
    assert fn.root == "pci0000:00" and fn.bridges == () and fn.numa_node == 0
    assert topology.pci_function("0000:ff:1f.7") is None
    with pytest.raises(LookupError, match="no PCI function 0000:ff:1f.7"):
        topology.distance("0000:ff:1f.7", 0)
    assert topology.distance("0000:00:00.0", 0) == Distance.NODE
    assert topology.distance("0000:00:00.0", 1) == Distance.SYS


def test_cli_topo_json(device_names):
    r = subprocess.run([sys.executable, "-m", "ibverbs", "topo", "--json", "-b", "00:00.0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)                     # exactly one document
    assert [a["pci_address"] for a in doc["accelerators"]] == ["0000:00:00.0"]
    assert doc["accelerators"][0]["named"] is True
    assert [(p["name"], p["pci_address"], p["numa_node"], p["netdevs"]) for p in doc["rdma"]] \
        == [("rxe0", None, None, ["veth0"]), ("rxe1", None, None, ["veth1"])]
    assert doc["matrix"]["GPU0"] == {"rxe0": "n/a", "rxe1": "n/a"}


def test_cli_topo_text_names_the_reason(device_names):
    r = subprocess.run([sys.executable, "-m", "ibverbs", "topo"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "rxe0: port 1  no PCI function" in r.stdout and "veth0" in r.stdout
