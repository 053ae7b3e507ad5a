"""test_examples.py's torchrun job: examples/run_all.py under `torchrun
--standalone --nproc-per-node=2`, rank r on device r, what the torch docs
tell people to type (no rendezvous address, no gloo interface named).

conftest.py's `examples_job` starts it niced with the session, behind
tests/examples_gate.py, so that its three `import torch` (agent and two
workers, 70-90 s in the VM) overlap the modules before test_examples.py;
test_examples.py's `run_all` fixture says go and waits for it, its verbs
alone on the devices.  Started without the gate (`Job(..., gate=False)`),
it runs at once, as when test_examples.py runs on its own.
"""
from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Optional, Sequence, Tuple

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
GATE = ROOT / "tests" / "examples_gate.py"
JOB_TIMEOUT = 600            # from go to the job's end, in seconds
NAMES = ["rc_bootstrap", "write_with_imm", "rdma_read", "send_recv_striped"]   # run_all's order

# A copy of example 2 in which rank 1 expects other data than rank 0 sends:
# it must report a MISMATCH and exit 1, and run_all must count it failed.
CORRUPTED = """\
import os, runpy
import _common
real = _common.pattern
if int(os.environ["RANK"]) == 1:
    _common.pattern = lambda numel, seed, device: real(numel, seed + 1000, device)
try:
    runpy.run_path({path!r}, run_name="__main__")
finally:
    _common.pattern = real
"""


def _torchrun() -> list:
    exe = pathlib.Path(sys.executable).with_name("torchrun")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "torch.distributed.run"]


class Job:
    """One torchrun job of run_all.py: the gate (if any), `names`, then the
    corrupted copy of example 2.  Its output goes to a file, not a pipe
    nobody reads while it waits."""

    def __init__(self, names: Sequence[str], device_names: Sequence[str], port: int,
                 workdir: pathlib.Path, gate: bool = True) -> None:
        corrupted = workdir / "corrupted_write_with_imm.py"
        corrupted.write_text(CORRUPTED.format(path=str(EXAMPLES / "write_with_imm.py")))
        self.go = workdir / "go"
        self.log = workdir / "torchrun.log"
        env = dict(os.environ)
        env.pop("GLOO_SOCKET_IFNAME", None)
        env.update(
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
            IBVERBS_DEVICE=",".join(device_names),
            IBVERBS_PORT=str(port),
            IBVERBS_EXAMPLES_GO=str(self.go),
            OMP_NUM_THREADS="1",
            PYTHONUNBUFFERED="1",
        )
        scripts = ([str(GATE)] if gate else []) + list(names) + [str(corrupted)]
        cmd = _torchrun() + ["--standalone", "--nproc-per-node=2", str(EXAMPLES / "run_all.py"),
                             *scripts]
        self.started = time.monotonic()
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        if gate:
            # The tests that run meanwhile come first on the vCPUs.  Set
            # before the agent, a minute into its import, starts a worker.
            os.setpriority(os.PRIO_PROCESS, self.proc.pid, 19)
        self.result: Optional[Tuple[int, str]] = None

    def finish(self) -> Tuple[int, str, float]:
        """Say go and wait: (exit status, output, seconds from go to the end)."""
        if self.result is None:
            self.go.touch()
            t0 = time.monotonic()
            try:
                status = self.proc.wait(JOB_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.stop()
                status = None
            out = self.log.read_text(errors="replace")
            if status is None:
                raise AssertionError(f"run_all.py did not finish within {JOB_TIMEOUT} s of go:\n{out}")
            self.result = (status, out)
            self.after_go = time.monotonic() - t0
        return self.result[0], self.result[1], self.after_go

    def stop(self) -> None:
        """Kill what is left of the job (the agent and its workers)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
