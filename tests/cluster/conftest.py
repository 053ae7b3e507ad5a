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

from cluster import ROOT, Cluster, Node

if os.environ.get("IBVERBS_VM") == "1":
    collect_ignore_glob = ["test_*.py"]


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """Every test is marked `cluster`.  The order: the tests that leave the
    nodes and the wire as they are, beside which the torchrun job across
    the nodes (`examples_job`) starts torch; then its test, which lets it
    go and waits for it; then the tests marked `disturbs` (a node killed,
    the wire cut or lossy, an MTU changed), which the job must not see."""
    for item in items:
        item.add_marker(pytest.mark.cluster)

    def rank(item: pytest.Item) -> int:
        if item.path.name == "test_torch_cross_node.py":
            return 1
        return 2 if item.get_closest_marker("disturbs") else 0
    items.sort(key=rank)


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


# The torchrun job across the nodes (test_torch_cross_node.py): the four
# examples of examples/ in one job (examples/run_all.py) after the gate
# (tests/examples_gate.py), started niced with the session, so that its
# four `import torch` (an agent and a worker on each node, about a minute
# each under emulation) overlap the tests that run first.
EXAMPLES = ["rc_bootstrap", "write_with_imm", "rdma_read", "send_recv_striped"]
EXAMPLES_GO = "/tmp/ibverbs-examples-go"        # in each node's own /tmp
EXAMPLES_PORT = 29400                          # the c10d rendezvous, on node1


def torchrun_command(node_rank: int) -> str:
    """What a user types on two real hosts, niced and behind the gate."""
    import shlex
    exe = shlex.quote(str(ROOT / ".venv" / "bin" / "torchrun"))
    env = ("PYTHONPATH=%s GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 "
           "IBVERBS_CUDA=0 IBVERBS_EXAMPLES_GO=%s" % (shlex.quote(str(ROOT)), EXAMPLES_GO))
    return ("rm -f %s; %s nice -n 19 %s --nnodes=2 --nproc-per-node=1 --node-rank=%d "
            "--rdzv-backend=c10d --rdzv-endpoint=node1:%d --rdzv-id=cluster-test "
            "examples/run_all.py %s %s 2>&1"
            % (EXAMPLES_GO, env, exe, node_rank, EXAMPLES_PORT, ROOT / "tests" / "examples_gate.py",
               " ".join(EXAMPLES)))


class ExamplesJob:
    """The job's two halves, one per node, waiting at the gate."""

    def __init__(self, nodes: "list[Node]") -> None:
        import time
        self.nodes = nodes
        self.started = time.monotonic()
        self.jobs = [node.spawn(torchrun_command(rank), 3600) for rank, node in enumerate(nodes)]

    def finish(self, timeout: float) -> "list[str]":
        """Say go on both nodes and wait: each node's output."""
        for node in self.nodes:
            node.run("touch %s" % EXAMPLES_GO)
        return [r.out for r in wait_all(self.jobs, timeout)]

    def stop(self) -> None:
        import signal
        for job in self.jobs:
            if not job.done.is_set():
                job.signal(signal.SIGKILL)


@pytest.fixture(scope="session", autouse=True)
def examples_job(request: pytest.FixtureRequest, cluster: Cluster) -> Iterator["ExamplesJob | None"]:
    """Started with the session when test_torch_cross_node.py is selected
    and torch is installed (else None); killed, if still running, at the
    end."""
    import importlib.util
    wanted = any(item.path.name == "test_torch_cross_node.py" for item in request.session.items)
    if not wanted or importlib.util.find_spec("torch") is None:
        yield None
        return
    job = ExamplesJob([cluster[1], cluster[2]])
    yield job
    job.stop()


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
