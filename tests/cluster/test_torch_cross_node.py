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
So the job is started with the session (conftest's `examples_job`), niced,
behind a gate (tests/examples_gate.py) that holds its verbs back until
this test says go: its imports overlap the tests that leave the nodes as
they are, which run first; the tests that kill a node, cut the wire or
change an MTU (marked `disturbs`) run after this one.
"""
from __future__ import annotations

import importlib.util
import re
import time

import pytest

from conftest import EXAMPLES

RESULT = re.compile(r"^RESULT example=(\w+) rank=(\d+) role=(\w+) bytes=(\d+) "
                    r"seconds=([0-9.]+) ok=([01])$", re.M)
JOB_TIMEOUT = 900           # from go to the job's end


@pytest.mark.timeout(JOB_TIMEOUT + 200)
def test_examples_under_torchrun_across_nodes(examples_job, measurements):
    if importlib.util.find_spec("torch") is None:
        pytest.fail("torch is not installed in the venv (make venv-test installs torch==2.13.0)")
    t0 = time.monotonic()
    outs = examples_job.finish(JOB_TIMEOUT)
    measurements["torchrun, two nodes, four examples (s)"] = (
        "%.0f after go, %.0f after its start" % (time.monotonic() - t0,
                                                 time.monotonic() - examples_job.started))
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
    scripts = len(EXAMPLES) + 1          # and the gate
    for out in outs:
        m = re.search(r"\[rank (\d)\] run_all: %d of %d examples passed" % (scripts, scripts), out)
        assert m, out[-6000:]
        ranks.add(m.group(1))
        # one device per node: each rank's rxe0, on its own kernel
        assert re.search(r"^\[rank \d\] rc_bootstrap: rxe0 port 1 GID\[\d+\] ", out, re.M), out
    assert ranks == {"0", "1"}
    assert "MISMATCH" not in both
