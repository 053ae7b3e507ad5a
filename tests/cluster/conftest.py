"""Cross-node tier: two VMs, each its own kernel with rxe0 on a virtio-net
NIC, joined by one virtual wire (tests/vm/run-cluster).  The tests run on
the host and drive the nodes through tests/cluster/cluster.py: programs on
the nodes (tests/cluster/peer.py roles) do the verbs and report what
arrived; the host also kills nodes, cuts the wire and sets netem.

One cluster is booted for the whole session (a boot costs ~10-30 s of this
2-core machine); a test that kills or reconfigures a node puts it back.
Not collected inside a VM (the single-VM tier runs tests/device there).

Runs only with IBVERBS_CLUSTER=1 (the make targets set it).
IBVERBS_REQUIRE_DEVICE=1 (make test) turns "cannot boot the cluster" into a
failure: this tier must run, never skip.
"""
from __future__ import annotations

import os
import shutil
from typing import Iterator

import pytest

from cluster import Cluster, Node

if os.environ.get("IBVERBS_VM") == "1":
    collect_ignore_glob = ["test_*.py"]


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    for item in items:
        item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if os.environ.get("IBVERBS_CLUSTER") != "1":
        # A plain `pytest` on the host must not boot two VMs unasked.
        pytest.skip("boots two VMs: set IBVERBS_CLUSTER=1 (make test-cluster-fast does)")
    if shutil.which("qemu-system-x86_64") is None:
        what = "qemu-system-x86_64 is missing (tests/vm/ensure-deps installs it)"
        if os.environ.get("IBVERBS_REQUIRE_DEVICE") == "1":
            pytest.fail(what)
        pytest.skip(what)
    c = Cluster(tmp_path_factory.mktemp("cluster")).start()
    print("cluster booted in %.1f s" % c.boot_secs)
    yield c
    c.stop()


@pytest.fixture
def node1(cluster: Cluster) -> Node:
    return cluster[1]


@pytest.fixture
def node2(cluster: Cluster) -> Node:
    return cluster[2]


_port = [18600]


@pytest.fixture
def tcp_port() -> int:
    """A fresh port for each test's side channel (no TIME_WAIT clash)."""
    _port[0] += 1
    return _port[0]


def pair(server: Node, client: Node, role: str, port: int, args: str = "",
         timeout: float = 240) -> "tuple[dict, dict]":
    """Run ROLE-server on server and ROLE-client on client (peer.py);
    their JSON results."""
    s = server.python("tests/cluster/peer.py %s-server --port %d %s" % (role, port, args), timeout)
    c = client.python("tests/cluster/peer.py %s-client --host %s --port %d %s"
                      % (role, server.name, port, args), timeout)
    rs, rc = wait_all([s, c], timeout + 30)
    return rs.json(), rc.json()


def wait_all(jobs: list, timeout: float = 300) -> list:
    """Wait for every job; as soon as one fails, kill the others (a peer
    that lost its partner would only wait for its own timeout) and raise
    with the failure's output."""
    import signal
    import time
    deadline = time.monotonic() + timeout
    while not all(j.done.is_set() for j in jobs):
        for j in jobs:
            if j.done.is_set() and (j.result is None or j.result.rc != 0):
                for other in jobs:
                    if not other.done.is_set():
                        other.signal(signal.SIGKILL)
                j.wait(1).check()
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    return [j.wait(max(1.0, deadline - time.monotonic())).check() for j in jobs]


_measured: dict = {}


@pytest.fixture
def measurements() -> dict:
    """What a test measured, printed at the end of the session."""
    return _measured


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    if _measured:
        terminalreporter.section("cross-node measurements")
        for k, v in _measured.items():
            terminalreporter.write_line("%s: %s" % (k, v))
