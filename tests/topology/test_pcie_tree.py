"""ibverbs.topology on a real kernel's PCIe tree (the q35 guest of
tests/vm/run-in-vm --topology pcie-tree; vm-lib.sh, vm_pcie_tree_args):

  pxb 0x10 (node 0) - rp10 - switch up1 - dn11: GPU0 (bochs-display)
                    |                   - dn12: rxe3's NIC
                    |                   - dn13 - switch up2 - dn21: rxe1's NIC
                    - rp11: rxe4's NIC
  pxb 0x40 (node 0) - rp40: rxe0's NIC
  pxb 0x80 (node 1) - rp80: rxe2's NIC
                    - rp81: GPU1 (virtio-gpu-pci)
  pcie.0            - edu (not a display class: listed only when named)

From GPU0: rxe3 PIX, rxe1 PXB, rxe4 PHB, rxe0 NODE, rxe2 SYS.
"""
from __future__ import annotations

import json
import re

import pytest

BOCHS, VIRTIO_GPU, EDU = "1234:1111", "1af4:1050", "1234:11e8"
FROM_GPU0 = {"rxe3": "PIX", "rxe1": "PXB", "rxe4": "PHB", "rxe0": "NODE", "rxe2": "SYS"}
NODE_OF = {"rxe0": 0, "rxe1": 0, "rxe2": 1, "rxe3": 0, "rxe4": 0}


def function(report: dict, pci_id: str) -> str:
    (bdf,) = [b for b, f in report["sysfs"]["pci"].items() if f["id"] == pci_id]
    return bdf


@pytest.fixture(scope="module")
def gpu0(report):
    return function(report, BOCHS)


@pytest.fixture(scope="module")
def gpu1(report):
    return function(report, VIRTIO_GPU)


@pytest.fixture(scope="module")
def nic(report):
    """rxeK -> the PCI address of its NIC, from sysfs directly: the last
    path component of /sys/class/net/<netdev>/device's parent."""
    return {name: n["device"].split("/")[-2] for name, n in report["sysfs"]["nics"].items()}


def test_the_guest_has_the_tree(report, gpu0, gpu1, nic):
    sysfs = report["sysfs"]
    assert sysfs["online"] == "0-1"
    assert sorted(nic) == ["rxe0", "rxe1", "rxe2", "rxe3", "rxe4"]
    for name, n in sysfs["nics"].items():       # each rxeK on the NIC whose MAC ends in K
        assert n["mac"] == "52:54:00:00:02:0%s" % name[-1]
    paths = {name: sysfs["pci"][bdf]["realpath"] for name, bdf in nic.items()}
    paths["gpu0"] = sysfs["pci"][gpu0]["realpath"]
    paths["gpu1"] = sysfs["pci"][gpu1]["realpath"]
    depth = {k: len(re.findall(r"/[0-9a-f]{4}:[0-9a-f]{2}:", p)) for k, p in paths.items()}
    # GPU0 and rxe3: root port, switch up, down, function; rxe1: a second switch
    assert depth == {"gpu0": 4, "rxe3": 4, "rxe1": 6, "rxe4": 2, "rxe0": 2, "rxe2": 2, "gpu1": 2}
    roots = {k: p.split("/")[3] for k, p in paths.items()}
    assert roots["gpu0"] == roots["rxe3"] == roots["rxe1"] == roots["rxe4"] == "pci0000:10"
    assert roots["rxe0"] == "pci0000:40"
    assert roots["rxe2"] == roots["gpu1"] == "pci0000:80"


def test_facts_of_each_port_are_sysfs(report, nic):
    sysfs = report["sysfs"]
    for name, port in report["ports"].items():
        bdf = nic[name]
        assert port["pci_address"] == bdf
        assert port["numa_node"] == sysfs["pci"][bdf]["numa_node"] == NODE_OF[name]
        assert port["netdevs"] == [sysfs["nics"][name]["netdev"]]
        assert port["link_speed"] and re.match(r"[0-9.]+ GT/s", port["link_speed"])
        assert port["link_width"] and port["link_width"] >= 1
        assert port["why"] == {}
        assert report["device_topology"][name] == [port]


def test_every_distance_class_from_gpu0(report, gpu0, nic):
    got = {name: report["distance"][gpu0][bdf] for name, bdf in nic.items()}
    assert got == FROM_GPU0
    assert set(got.values()) == {"PIX", "PXB", "PHB", "NODE", "SYS"}
    assert report["distance"][gpu0][gpu0] == "X"


def test_distances_between_nics_and_from_gpu1(report, gpu1, nic):
    d = report["distance"]
    assert d[nic["rxe3"]][nic["rxe1"]] == d[nic["rxe1"]][nic["rxe3"]] == "PXB"
    assert d[nic["rxe4"]][nic["rxe3"]] == "PHB"
    assert d[nic["rxe0"]][nic["rxe4"]] == "NODE"
    assert d[gpu1][nic["rxe2"]] == "PHB"
    assert {d[gpu1][nic[n]] for n in ("rxe0", "rxe1", "rxe3", "rxe4")} == {"SYS"}


def test_distance_to_a_numa_node(report, gpu0, gpu1, nic):
    dn = report["distance_node"]
    assert dn[gpu0] == ["NODE", "SYS"] and dn[gpu1] == ["SYS", "NODE"]
    assert dn[nic["rxe2"]] == ["SYS", "NODE"]


def test_nearest_from_each_gpu(report, gpu0, gpu1):
    by_gpu0 = report["nearest_gpu"][gpu0]
    assert [(d, c) for d, _, c in by_gpu0] == sorted(FROM_GPU0.items(), key=lambda i: [
        "PIX", "PXB", "PHB", "NODE", "SYS"].index(i[1]))
    assert [d for d, _, _ in by_gpu0] == ["rxe3", "rxe1", "rxe4", "rxe0", "rxe2"]
    by_gpu1 = report["nearest_gpu"][gpu1]
    # then the other node's four, all SYS: by link speed, then name
    assert by_gpu1[0] == ["rxe2", 1, "PHB"] and {c for _, _, c in by_gpu1[1:]} == {"SYS"}
    assert sorted(by_gpu1[1:], key=lambda r: (-speed(report, r[0]), r[0])) == by_gpu1[1:]


def speed(report, name):
    return report["ports"][name]["link_speed_gts"]


def test_nearest_from_a_numa_node_and_a_buffer(report):
    for node in (0, 1):
        ranked = report["nearest_node"][str(node)]
        near = sorted((n for n, k in NODE_OF.items() if k == node),
                      key=lambda n: (-speed(report, n), n))
        assert [d for d, _, c in ranked if c == "NODE"] == near
        assert [c for _, _, c in ranked] == ["NODE"] * len(near) + ["SYS"] * (5 - len(near))
        buf = report["buffer"][str(node)]
        assert buf["node"] == node                  # move_pages saw where the pages are
        assert buf.get("numpy_node", node) == node
        assert buf["nearest"] == ranked


def test_accelerators_by_class(report, gpu0, gpu1):
    assert report["accelerators"] == sorted([gpu0, gpu1])


def test_cli_topo_json_is_what_sysfs_says(report, gpu0, gpu1, nic):
    r = report["topo_json"]
    assert r["rc"] == 0, r["err"]
    doc = json.loads(r["out"])                      # exactly one document
    edu = function(report, EDU)
    gpus = {a["name"]: a for a in doc["accelerators"]}
    assert [(a["pci_address"], a["named"]) for a in gpus.values()] == \
        [(a, False) for a in sorted([gpu0, gpu1])] + [(edu, True)]
    name0 = next(n for n, a in gpus.items() if a["pci_address"] == gpu0)
    assert doc["matrix"][name0] == FROM_GPU0
    assert {p["name"]: p["pci_address"] for p in doc["rdma"]} == nic
    assert [p["name"] for p in doc["rdma"]] == sorted(nic)
    assert doc["matrix"]["rxe2"]["rxe2"] == "X"
    # edu sits on the root complex, which has no NUMA node: SYS to every NIC
    name_edu = next(n for n, a in gpus.items() if a["pci_address"] == edu)
    assert gpus[name_edu]["numa_node"] is None
    assert set(doc["matrix"][name_edu].values()) == {"SYS"}


def test_cli_topo_text(report, gpu0):
    r = report["topo_text"]
    assert r["rc"] == 0, r["err"]
    lines = r["out"].splitlines()
    assert lines[0].split() == ["rxe0", "rxe1", "rxe2", "rxe3", "rxe4", "NUMA", "Affinity"]
    row = next(line for line in lines if line.startswith("GPU0 "))
    assert row.split() == ["GPU0", "NODE", "PXB", "SYS", "PIX", "PHB", "0"]
    assert ("GPU0: %s  class 0x" % gpu0) in r["out"]
    print("\n" + r["out"])
