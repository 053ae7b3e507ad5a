"""ibverbs.topology's pure parts: bus-id normalisation, the distance class of
two places in a PCI hierarchy, the `ibverbs topo` argument check.  What
sysfs says on real kernels is tested in the PCIe-tree guest
(tests/topology), the plain VM (tests/device/test_topology.py) and the
cluster nodes (tests/cluster/test_topology_nodes.py)."""
from __future__ import annotations

import errno
import subprocess
import sys

import pytest

from ibverbs import topology
from ibverbs.topology import Distance, classify, normalize_bus_id


@pytest.mark.parametrize("given, want", [
    ("00000000:3B:00.0", "0000:3b:00.0"),      # nvidia-smi, cudaDeviceGetPCIBusId
    ("0000:3b:00.0", "0000:3b:00.0"),          # sysfs
    ("3b:00.1", "0000:3b:00.1"),               # lspci without -D
    ("0001:AF:1F.7", "0001:af:1f.7"),
    ("  00000002:01:00.0\n", "0002:01:00.0"),
    ("10000:01:00.0", "10000:01:00.0"),        # Intel VMD domains have 5 digits
])
def test_normalize_bus_id(given, want):
    assert normalize_bus_id(given) == want


@pytest.mark.parametrize("bad", ["", "3b", "0000:3b:00", "0000:3b:00.8", "0000:3b:20.0",
                                 "000000000:3b:00.0", "gg:00.0", "0000:3b:00.0.1"])
def test_normalize_bus_id_refuses(bad):
    with pytest.raises(ValueError, match="PCI bus id"):
        normalize_bus_id(bad)


def test_normalize_bus_id_wants_a_str():
    with pytest.raises(TypeError, match="not int"):
        normalize_bus_id(0x3b)  # type: ignore[arg-type]


# A tree like the PCIe-tree guest's: root port 10:00.0, switch upstream
# 11:00.0 with downstream ports 12:01.0, 12:02.0, 12:03.0, a second switch
# below 12:03.0.
GPU = ("pci0000:10", ["0000:10:00.0", "0000:11:00.0", "0000:12:01.0", "0000:13:00.0"])
PIX_NIC = ("pci0000:10", ["0000:10:00.0", "0000:11:00.0", "0000:12:02.0", "0000:14:00.0"])
PXB_NIC = ("pci0000:10", ["0000:10:00.0", "0000:11:00.0", "0000:12:03.0", "0000:15:00.0",
                          "0000:16:01.0", "0000:17:00.0"])
PHB_NIC = ("pci0000:10", ["0000:10:01.0", "0000:18:00.0"])
OTHER_ROOT = ("pci0000:40", ["0000:40:00.0", "0000:41:00.0"])


@pytest.mark.parametrize("other, numa, want", [
    (GPU, 0, Distance.X),
    (("pci0000:10", GPU[1][:-1] + ["0000:13:00.1"]), 0, Distance.PIX),  # another function
    (PIX_NIC, 0, Distance.PIX),
    (PXB_NIC, 0, Distance.PXB),
    (PHB_NIC, 0, Distance.PHB),
    (OTHER_ROOT, 0, Distance.NODE),
    (OTHER_ROOT, 1, Distance.SYS),
    (OTHER_ROOT, None, Distance.SYS),          # a NUMA node unknown: not NODE
])
def test_classify(other, numa, want):
    assert classify(GPU, other, 0, numa) == want
    assert classify(other, GPU, numa, 0) == want          # symmetric


def test_classify_on_the_root_bus_itself():
    # Integrated endpoints of one root complex share no bridge: PHB.
    assert classify(("pci0000:00", ["0000:00:02.0"]), ("pci0000:00", ["0000:00:03.0"]),
                    None, None) == Distance.PHB


def test_distance_order_is_nvidia_smis():
    assert sorted(Distance, key=int) == [Distance.X, Distance.PIX, Distance.PXB, Distance.PHB,
                                         Distance.NODE, Distance.SYS]


def test_split_sysfs_path_below_a_function():
    # A virtio-net NIC's netdev resolves below its PCI function.
    real = "/sys/devices/pci0000:10/0000:10:00.0/0000:11:00.0/virtio3/net/eth0"
    assert topology._split_sysfs_path(real) == ("pci0000:10", ("0000:10:00.0", "0000:11:00.0"))
    assert topology._split_sysfs_path("/sys/devices/virtual/net/veth0") is None


def test_nearest_takes_exactly_one_target():
    with pytest.raises(TypeError, match="one target"):
        topology.nearest()
    with pytest.raises(TypeError, match="one target"):
        topology.nearest("0000:00:00.0", numa_node=0)


def test_topo_refuses_a_bad_bus_id_as_a_usage_error():
    r = subprocess.run([sys.executable, "-m", "ibverbs", "topo", "--bus-id", "3b:00"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "not a PCI bus id" in r.stderr and "Traceback" not in r.stderr


def test_numa_node_of_buffer_refuses_read_only():
    with pytest.raises(TypeError, match="read-only bytes buffer"):
        topology.numa_node_of_buffer(b"abc")


def _choice(name, distance, gts):
    fn = None if gts is None else topology.PciFunction(
        address="0000:01:00.0", root="pci0000:00", bridges=(), numa_node=0, class_code=0x020000,
        link_speed=f"{gts} GT/s PCIe", link_speed_gts=gts, link_width=16)
    return topology.Choice(device=name, port=1, distance=distance,
                           topology=topology.PortTopology(device=name, port=1, netdevs=(), pci=fn))


def test_rank_is_distance_then_link_speed_then_name():
    # (the PCIe-tree guest's virtio NICs all train at 2.5 GT/s: speed is checked here)
    choices = [_choice("a", Distance.SYS, 32.0), _choice("b", Distance.NODE, 8.0),
               _choice("c", Distance.NODE, 16.0), _choice("d", Distance.NODE, None),
               _choice("a0", Distance.NODE, 8.0), _choice("z", Distance.PIX, 2.5)]
    assert [c.device for c in sorted(choices, key=topology._rank)] == ["z", "c", "a0", "b", "d", "a"]


def test_torch_is_not_imported_unless_given():
    code = ("import sys, ibverbs.topology as t; t.nearest(0); t.nearest(bytearray(64)); "
            "t.distance.__doc__; print('torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_a_cpu_tensor_ranks_from_its_memorys_numa_node():
    torch = pytest.importorskip("torch")
    tensor = torch.ones(1 << 16)
    node = topology.numa_node_of_address(tensor.data_ptr())
    assert topology.numa_node_of_buffer(tensor) == node >= 0
    assert topology._torch_target(tensor) == node
    with pytest.raises(ValueError, match="neither a CUDA device nor a CPU tensor"):
        topology.nearest(torch.device("cpu"))


def test_a_cuda_devices_bus_id_is_made_from_torchs_three_ints():
    # torch's device properties hold cudaDeviceProp's pciDomainID, pciBusID
    # and pciDeviceID as ints (pci_bus_id=59, not '00000000:3B:00.0')
    from types import SimpleNamespace
    props = SimpleNamespace(pci_domain_id=0, pci_bus_id=0x3B, pci_device_id=0)
    assert topology._torch_bus_id(props) == "00000000:3b:00.0"
    assert topology.normalize_bus_id(topology._torch_bus_id(props)) == "0000:3b:00.0"
    with pytest.raises(LookupError, match="nvidia-smi"):
        topology._torch_bus_id(SimpleNamespace(name="an older torch"))


def test_a_kernel_without_numa_support_has_node_0(monkeypatch):
    # move_pages is ENOSYS on a kernel built without NUMA (and under
    # qemu-user): one node, unless sysfs shows several
    def no_numa(name, *args):
        raise OSError(errno.ENOSYS, f"{name}: Function not implemented")
    monkeypatch.setattr(topology, "_syscall", no_numa)
    monkeypatch.setattr(topology, "_online_nodes", lambda sysfs: [0])
    assert topology.numa_node_of_buffer(bytearray(64)) == 0
    monkeypatch.setattr(topology, "_online_nodes", lambda sysfs: [0, 1])
    with pytest.raises(OSError) as info:
        topology.numa_node_of_buffer(bytearray(64))
    assert info.value.errno == errno.ENOSYS
