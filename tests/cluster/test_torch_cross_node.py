"""torch.distributed across nodes: the examples of examples/ under
torchrun on the two VMs, one rank per node (rank r on node r+1's rxe0),
the c10d rendezvous and gloo on the wire, the payload over RDMA between
the two kernels.  What a user types on two real hosts:

    node1$ torchrun --nnodes=2 --nproc-per-node=1 --node-rank=0 \\
               --rdzv-backend=c10d --rdzv-endpoint=node1:29400 examples/rc_bootstrap.py
    node2$ torchrun --nnodes=2 --nproc-per-node=1 --node-rank=1 \\
               --rdzv-backend=c10d --rdzv-endpoint=node1:29400 examples/rc_bootstrap.py

All four examples run in one job (examples/run_all.py), as in
tests/device/test_examples.py: `import torch` under emulation costs about
a minute per process, and each node starts two (the agent and its worker).
"""
from __future__ import annotations

import importlib.util
import re
import shlex

import pytest

from cluster import ROOT
from conftest import wait_all

EXAMPLES = ["rc_bootstrap", "write_with_imm", "rdma_read", "send_recv_striped"]
RESULT = re.compile(r"^RESULT example=(\w+) rank=(\d+) role=(\w+) bytes=(\d+) "
                    r"seconds=([0-9.]+) ok=([01])$", re.M)
JOB_TIMEOUT = 900


def torchrun(node_rank: int, port: int) -> str:
    exe = shlex.quote(str(ROOT / ".venv" / "bin" / "torchrun"))
    env = ("PYTHONPATH=%s GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 "
           "IBVERBS_CUDA=0" % shlex.quote(str(ROOT)))
    return ("%s %s --nnodes=2 --nproc-per-node=1 --node-rank=%d --rdzv-backend=c10d "
            "--rdzv-endpoint=node1:%d --rdzv-id=cluster-test examples/run_all.py %s 2>&1"
            % (env, exe, node_rank, port, " ".join(EXAMPLES)))


@pytest.mark.timeout(JOB_TIMEOUT + 200)
def test_examples_under_torchrun_across_nodes(node1, node2, tcp_port, measurements):
    if importlib.util.find_spec("torch") is None:
        pytest.fail("torch is not installed in the venv (make venv-test installs torch==2.13.0)")
    import time
    t0 = time.monotonic()
    jobs = [node1.spawn(torchrun(0, tcp_port), JOB_TIMEOUT),
            node2.spawn(torchrun(1, tcp_port), JOB_TIMEOUT)]
    outs = [r.out for r in wait_all(jobs, JOB_TIMEOUT + 60)]
    measurements["torchrun, two nodes, four examples (s)"] = "%.0f" % (time.monotonic() - t0)
    both = "\n".join(outs)
    results = {}
    for m in RESULT.finditer(both):
        results[(m.group(1), m.group(3))] = (int(m.group(2)), int(m.group(4)), m.group(6) == "1")
    for name in EXAMPLES:
        roles = {role for (ex, role) in results if ex == name}
        assert roles, "%s: no RESULT line\n%s" % (name, both[-6000:])
        for role in roles:
            rank, nbytes, ok = results[(name, role)]
            assert ok and nbytes > 0, (name, role, results[(name, role)])
    ranks = set()
    for out in outs:
        m = re.search(r"\[rank (\d)\] run_all: 4 of 4 examples passed", out)
        assert m, out[-6000:]
        ranks.add(m.group(1))
        # one device per node: each rank's rxe0, on its own kernel
        assert re.search(r"^\[rank \d\] rc_bootstrap: rxe0 port 1 GID\[\d+\] ", out, re.M), out
    assert ranks == {"0", "1"}
    assert "MISMATCH" not in both
