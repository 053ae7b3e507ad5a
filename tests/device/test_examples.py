"""examples/ under torchrun: two ranks, each on its own device (rxe0 and rxe1
in the VM), gloo for the metadata, the payload over RDMA. At the end, the
examples without torch: README's Quickstart (the device it picks, a failure
inside it shown as itself) and examples/rdma_write_tcp.py (two processes,
QPInfo over TCP, one RDMA write, checked on the target).

The torchrun tests are marked slow: `make test-device-slow` runs them, not
`make test`, whose cross-node tier runs the same examples and the same
checks (tests/torch_examples.py) in its torchrun job across the two nodes
(tests/cluster/test_torch_cross_node.py). On the 2-core machine `make test`
is bound by CPU time, and this job, three `import torch` of about a minute
each under emulation, took 155 s of the device tier's 711 s.

torch is an optional extra (the CPU build, torch==2.13.0 in the test
requirements); without it these tests skip. The pytest process never
imports torch: under the VM's emulation that alone takes about a minute.

For the same reason every example runs in ONE torchrun job
(examples/run_all.py runs each script as __main__, in turn, in the same two
workers): a torchrun job starts torch three times (the agent and two
workers), 70-90 s in the VM, and a job per script would take minutes more.
The same job then runs a copy of example 2 whose receiver expects other
data, which must fail (exit status 1) and fail the job. run_all runs each
script as __main__ in the torchrun workers, exactly as `torchrun script.py`
would, so no test starts a job per script. The job is started the way the
torch docs tell people to: `torchrun --standalone --nproc-per-node=2`, no
rendezvous address and no gloo interface named (a second job for that
alone cost 74 s of every `make test`).
"""
import importlib.util
import os
import pathlib
import re
import socket
import subprocess
import sys
import time

import pytest

from torch_examples import (CORRUPTED, EXPECTED, SUMMARY, check_corrupted, check_example, segments,
                            tail)

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
JOB_TIMEOUT = 600            # one torchrun job, in seconds
pytestmark = [pytest.mark.timeout(JOB_TIMEOUT + 120), pytest.mark.processes]


@pytest.fixture(scope="module")
def torch_installed():
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed: the examples need torch (the CPU build, "
                    "`pip install torch==2.13.0`, in the Makefile's test requirements)")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun():
    exe = pathlib.Path(sys.executable).with_name("torchrun")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "torch.distributed.run"]


@pytest.fixture(scope="module")
def run_torchrun(torch_installed, device_names, port):
    """Run a script of examples/ under `torchrun --standalone
    --nproc-per-node=2`, rank r on device_names[r]; returns the
    CompletedProcess (stdout and stderr together). What the torch docs tell
    people to type: no rendezvous address, no gloo interface (it needs the
    machine's hostname to resolve: tests/vm/init writes it to the guest's
    /etc/hosts; gloo must then find its interface silently)."""
    env = dict(os.environ)
    env.pop("GLOO_SOCKET_IFNAME", None)
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
        IBVERBS_DEVICE=",".join(device_names),
        IBVERBS_PORT=str(port),
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
    )

    def run(script, *args):
        cmd = _torchrun() + ["--standalone", "--nproc-per-node=2", str(EXAMPLES / script), *args]
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=JOB_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout or ""
            pytest.fail(f"{script} did not finish within {JOB_TIMEOUT} s:\n"
                        f"{out if isinstance(out, str) else out.decode(errors='replace')}")
        return proc
    return run


@pytest.fixture(scope="module")
def run_all(run_torchrun):
    """One torchrun job: the four examples, then the corrupted copy of
    example 2. Returns (exit status, output, {example: its lines})."""
    t0 = time.monotonic()
    proc = run_torchrun("run_all.py", *EXPECTED, str(CORRUPTED))
    print(proc.stdout)
    print(f"torchrun run_all.py: exit status {proc.returncode} after {time.monotonic() - t0:.1f} s")
    return proc.returncode, proc.stdout, segments(proc.stdout)


@pytest.mark.slow
def test_every_example_passes_in_one_torchrun_job(run_all):
    status, out, seg = run_all
    for rank in (0, 1):
        for name in EXPECTED:
            assert f"[rank {rank}] run_all: {name} passed in " in out, tail(out)
    assert set(seg) == set(EXPECTED) | {"corrupted_write_with_imm"}, tail(out)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EXPECTED))
def test_example_moved_its_data(run_all, name):
    check_example(run_all[2][name], name)


@pytest.mark.slow
def test_a_mismatch_fails_the_example_and_the_job(run_all):
    status, out, seg = run_all
    assert status == 1, tail(out)
    for rank in (0, 1):
        assert f"[rank {rank}] {SUMMARY}" in out, tail(out)
    check_corrupted(seg["corrupted_write_with_imm"])


@pytest.mark.slow
def test_each_rank_used_its_own_device(run_all, device_names):
    for rank, dev in enumerate(device_names):
        for name in EXPECTED:
            assert re.search(rf"^\[rank {rank}\] {name}: {re.escape(dev)} port \d+ GID\[\d+\] ",
                             run_all[2][name], re.M), tail(run_all[1])


@pytest.mark.slow
def test_the_standalone_job_warns_of_no_hostname_or_interface(run_all):
    """`--standalone` resolves the machine's hostname and lets gloo pick
    its interface: neither may fall back with a warning."""
    for warning in ("Unable to resolve hostname", "loopback address as fallback",
                    "client socket has timed out"):
        assert warning not in run_all[1], tail(run_all[1])


# --- without torch: README's Quickstart and examples/rdma_write_tcp.py -----------------

def _quickstart():
    """README's Quickstart block, as a user copies it."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Quickstart"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _run_python(code, env_extra=None, timeout=120):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("IBVERBS_DEVICE", None)             # the Quickstart's choice, unless given
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("which", [None, 1], ids=["first-active", "IBVERBS_DEVICE"])
def test_readme_quickstart_runs_on_the_device_it_picks(device_names, which):
    extra = None if which is None else {"IBVERBS_DEVICE": device_names[which]}
    out = _run_python(_quickstart(), extra)
    assert out.returncode == 0, out.stderr
    name = device_names[0] if which is None else device_names[which]
    assert re.fullmatch(rf"{name} port \d+: 4096 bytes written\n", out.stdout), out.stdout


def test_the_readme_no_nic_command_writes_on_rxe():
    """README's no-NIC path, from its text: the command after
    `tests/vm/run-in-vm` (we are inside that VM here), run in the checkout:
    examples/quickstart.py, the README's program (tests/host/
    test_readme_commands.py keeps the two equal), writes on rxe0."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"^<!-- tested: no-nic -->\n```bash\n(.*?)```", text, re.S | re.M).group(1)
    line, = [ln for ln in block.splitlines() if ln.startswith("tests/vm/run-in-vm ")]
    argv = line.split("#", 1)[0].split()[1:]
    assert argv[0] == "python", argv
    expected = line.split("#", 1)[1].strip()             # what the README says it prints
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("IBVERBS_DEVICE", None)
    out = subprocess.run([sys.executable, *argv[1:]], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout == expected + "\n", (out.stdout, expected)


def test_readme_quickstart_names_a_missing_device():
    out = _run_python(_quickstart(), {"IBVERBS_DEVICE": "no_such_dev"})
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip() == "no RDMA device no_such_dev with an ACTIVE port (`ibverbs devices`)"


def test_a_failure_inside_the_quickstart_is_the_error_shown():
    """ExitStack closes the QPs and MRs before the PD, CQ and context: the
    traceback ends with the real error, not "cannot close ... open child
    resource(s)" raised while unwinding."""
    code = _quickstart().replace("    cq.wait(timeout=10)", "    raise RuntimeError('the real error')")
    assert "the real error" in code
    out = _run_python(code)
    assert out.returncode == 1
    assert out.stderr.rstrip().endswith("RuntimeError: the real error"), out.stderr
    assert "cannot close" not in out.stderr and "During handling" not in out.stderr, out.stderr


def _tcp_example(device_names, *writer_args):
    """The target (--listen) on device 1, the writer on device 0, over
    127.0.0.1: (target's status and output, writer's status and output)."""
    script = str(EXAMPLES / "rdma_write_tcp.py")
    tcp_port = str(_free_port())
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    target = subprocess.Popen([sys.executable, script, "--listen", "-d", device_names[1],
                               "-p", tcp_port], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        lines = [target.stdout.readline(), target.stdout.readline()]
        assert "target: listening on port" in lines[1], "".join(lines)
        writer = subprocess.run([sys.executable, script, "127.0.0.1", "-d", device_names[0],
                                 "-p", tcp_port, *writer_args], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                timeout=120)
        rest, _ = target.communicate(timeout=60)
    finally:
        if target.poll() is None:
            target.kill()
            target.communicate()
    return (target.returncode, "".join(lines) + rest), (writer.returncode, writer.stdout)


def test_two_processes_write_over_rdma_with_qpinfo_over_tcp(device_names):
    (t_status, t_out), (w_status, w_out) = _tcp_example(device_names)
    assert (t_status, w_status) == (0, 0), t_out + w_out
    assert "target: 1048576 bytes written by 127.0.0.1: OK" in t_out, t_out
    assert "writer: 1048576 bytes to 127.0.0.1: OK" in w_out, w_out
    assert re.match(rf"target: {device_names[1]} port \d+ GID\[\d+\] ", t_out), t_out
    assert re.match(rf"writer: {device_names[0]} port \d+ GID\[\d+\] ", w_out), w_out


def test_the_tcp_example_target_catches_other_bytes(device_names):
    """The check can fail: a writer writing another pattern is BAD on both sides."""
    (t_status, t_out), (w_status, w_out) = _tcp_example(device_names, "--seed", "5")
    assert (t_status, w_status) == (1, 1), t_out + w_out
    assert "BAD (not the pattern)" in t_out and "BAD (the target saw other bytes)" in w_out
