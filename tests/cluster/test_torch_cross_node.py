"""torch.distributed across nodes: the examples of examples/ under
torchrun on the two VMs, one rank per node (rank r on node r+1's rxe0),
the c10d rendezvous and gloo on the wire, the payload over RDMA between
the two kernels.  What a user types on two real hosts:

    node1$ torchrun --nnodes=2 --nproc-per-node=1 --node-rank=0 \\
               --rdzv-backend=c10d --rdzv-endpoint=node1:29400 examples/rc_bootstrap.py
    node2$ torchrun --nnodes=2 --nproc-per-node=1 --node-rank=1 \\
               --rdzv-backend=c10d --rdzv-endpoint=node1:29400 examples/rc_bootstrap.py

All four examples run in one job (examples/run_all.py): `import torch`
under emulation costs about a minute per process, and each node starts two
(the agent and its worker). Then a copy of example 2 whose receiver expects
other data (tests/corrupted_write_with_imm.py) must fail, and fail the job
on both nodes. The checks are tests/torch_examples.py's, the same as the
single-VM job's (tests/device/test_examples.py, `make test-device-slow`).
"""
from __future__ import annotations

import importlib.util
import re
import shlex

import pytest

from cluster import ROOT
from torch_examples import (CORRUPTED, EXPECTED, SUMMARY, check_corrupted, check_example, segments,
                            tail)

JOB_TIMEOUT = 900


def torchrun(node_rank: int, port: int) -> str:
    exe = shlex.quote(str(ROOT / ".venv" / "bin" / "torchrun"))
    env = ("PYTHONPATH=%s GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 "
           "IBVERBS_CUDA=0" % shlex.quote(str(ROOT)))
    return ("%s %s --nnodes=2 --nproc-per-node=1 --node-rank=%d --rdzv-backend=c10d "
            "--rdzv-endpoint=node1:%d --rdzv-id=cluster-test examples/run_all.py %s %s 2>&1"
            % (env, exe, node_rank, port, " ".join(EXPECTED), shlex.quote(str(CORRUPTED))))


COUNTERS = "/sys/class/infiniband/rxe0/ports/1/hw_counters"


def rxe_counters(node) -> dict:
    """The node's Soft-RoCE counters (since its boot: every test's)."""
    r = node.run("cd %s && grep . *" % COUNTERS, timeout=60, check=False)
    return {k: int(v) for k, _, v in (line.partition(":") for line in r.out.split())
            if v.isdigit()}


def rxe_state(before, *nodes) -> str:
    """For a failure's message, each node's Soft-RoCE counters that moved
    during the job (which side counted a duplicate, a sequence error, a
    retry, an RNR) and the kernel's last lines."""
    parts = []
    for node, was in zip(nodes, before):
        moved = {k: v - was.get(k, 0) for k, v in rxe_counters(node).items() if v != was.get(k, 0)}
        r = node.run("dmesg 2>&1 | tail -n 15", timeout=60, check=False)
        parts.append("--- %s, counters moved during the job: %s\n%s" % (node.name, moved, r.out))
    return "\n".join(parts)


@pytest.mark.timeout(JOB_TIMEOUT + 200)
def test_examples_under_torchrun_across_nodes(node1, node2, tcp_port, measurements):
    if importlib.util.find_spec("torch") is None:
        pytest.fail("torch is not installed in the venv (make venv-test installs torch==2.13.0)")
    import time
    before = [rxe_counters(node1), rxe_counters(node2)]
    t0 = time.monotonic()
    jobs = [node1.spawn(torchrun(0, tcp_port), JOB_TIMEOUT),
            node2.spawn(torchrun(1, tcp_port), JOB_TIMEOUT)]
    # Both fail: the corrupted copy comes last, and run_all exits 1.
    done = [job.wait(JOB_TIMEOUT + 60) for job in jobs]
    measurements["torchrun, two nodes, four examples and the corrupted copy (s)"] = \
        "%.0f" % (time.monotonic() - t0)
    outs = [r.out for r in done]
    both = "\n".join(outs)
    seg = segments(both)
    assert [r.rc for r in done] == [1, 1], tail(both) + rxe_state(before, node1, node2)
    assert set(seg) == set(EXPECTED) | {"corrupted_write_with_imm"}, \
        tail(both) + rxe_state(before, node1, node2)
    for name in EXPECTED:
        check_example(seg[name], name)
    check_corrupted(seg["corrupted_write_with_imm"])
    for rank, out in enumerate(outs):
        assert "[rank %d] %s" % (rank, SUMMARY) in out, tail(out)
        # one device per node: each rank's rxe0, on its own kernel
        for name in EXPECTED:
            assert re.search(r"^\[rank %d\] %s: rxe0 port 1 GID\[\d+\] " % (rank, name),
                             out, re.M), tail(out)
