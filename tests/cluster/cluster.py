"""Host side of the cross-node tier: a cluster of run-cluster VMs that the
tests drive.

`Cluster(root, nodes=2)` boots the nodes with tests/vm/run-cluster
--control ROOT, each running tests/cluster/agent.py, and gives a `Node` per
node to

* run a shell command line on the node and wait for it (`run`), or start it
  and wait later (`spawn` -> `Job`), in the repository root, with this
  process's environment (what run-cluster passes);
* kill the node (SIGKILL to its QEMU: a host crash as the peer sees it),
  boot it again (`restart`), take its side of the wire down or up
  (`set_link`, QEMU's monitor) and set its MTU or netem (`run` of `ip`/`tc`).

Standard library only (the host tier imports it without ibverbs).
"""
from __future__ import annotations

import json
import os
import pathlib
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUN_CLUSTER = ROOT / "tests" / "vm" / "run-cluster"
AGENT = "exec /usr/bin/python3 tests/cluster/agent.py"
# The python the tests run on the nodes: the project's venv, as on the host,
# importing ibverbs from this tree (the venv may hold another checkout's).
PY = "PYTHONPATH=%s %s" % (shlex.quote(str(ROOT)), shlex.quote(str(ROOT / ".venv" / "bin" / "python")))


class NodeError(AssertionError):
    pass


class Result:
    def __init__(self, msg: dict) -> None:
        self.rc: int = msg["rc"]
        self.out: str = msg["out"]
        self.err: str = msg["err"]
        self.secs: float = msg["secs"]

    def json(self) -> dict:
        """The last line of stdout that is a JSON object (what the node
        programs in tests/cluster/peer.py print as their result)."""
        for line in reversed(self.out.splitlines()):
            if line.startswith("{"):
                return json.loads(line)
        raise NodeError("no JSON result in stdout:\n" + self.describe())

    def describe(self) -> str:
        return "rc=%s after %.1fs\n--- stdout\n%s\n--- stderr\n%s" % (
            self.rc, self.secs, self.out[-4000:], self.err[-4000:])

    def check(self) -> "Result":
        if self.rc != 0:
            raise NodeError(self.describe())
        return self


class Job:
    def __init__(self, node: "Node", jid: int, cmd: str) -> None:
        self.node, self.id, self.cmd = node, jid, cmd
        self.done = threading.Event()
        self.result: Optional[Result] = None

    def wait(self, timeout: float = 300) -> Result:
        if not self.done.wait(timeout):
            raise NodeError("%s: %r still running after %ss" % (self.node.name, self.cmd, timeout))
        if self.result is None:
            raise NodeError("%s died while running %r" % (self.node.name, self.cmd))
        return self.result

    def signal(self, sig: int = signal.SIGTERM) -> None:
        self.node._send({"op": "signal", "id": self.id, "sig": int(sig)})


class Node:
    def __init__(self, cluster: "Cluster", k: int) -> None:
        self.cluster, self.k, self.name = cluster, k, "node%d" % k
        self.dir = cluster.root / self.name
        self.ip = "10.0.1.%d" % k
        self.sock: Optional[socket.socket] = None
        self.jobs: Dict[int, Job] = {}
        self.lock = threading.Lock()
        self.next_id = 0
        self.up = threading.Event()

    # -- the agent ---------------------------------------------------------
    def _connect(self, deadline: float) -> None:
        path = str(self.dir / "agent")
        while True:
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(path)
                break
            except OSError:
                s.close()
                if time.monotonic() > deadline or self.cluster.proc_done(self.k):
                    raise NodeError("%s: no agent socket %s\n%s" % (
                        self.name, path, self.cluster.log_tail()))
                time.sleep(0.1)
        self.sock = s
        self.up.clear()
        threading.Thread(target=self._reader, args=(s,), daemon=True).start()
        if not self.up.wait(max(1.0, deadline - time.monotonic())):
            raise NodeError("%s: agent did not start\n%s" % (self.name, self.cluster.log_tail()))

    def _reader(self, s: socket.socket) -> None:
        buf = b""
        while True:
            try:
                chunk = s.recv(1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = json.loads(line)
                if "hello" in msg:
                    self.up.set()
                    continue
                job = self.jobs.pop(msg["id"], None)
                if job is not None:
                    job.result = Result(msg)
                    job.done.set()
        # The node is gone: whatever ran there will never answer.
        for job in list(self.jobs.values()):
            job.done.set()
        self.jobs.clear()

    def _send(self, obj: dict) -> None:
        if self.sock is None:
            raise NodeError("%s is not running" % self.name)
        with self.lock:
            self.sock.sendall((json.dumps(obj) + "\n").encode())

    def spawn(self, cmd: str, timeout: float = 300) -> Job:
        with self.lock:
            self.next_id += 1
            job = Job(self, self.next_id, cmd)
            self.jobs[job.id] = job
        self._send({"op": "spawn", "id": job.id, "cmd": cmd, "timeout": timeout})
        return job

    def run(self, cmd: str, timeout: float = 300, check: bool = True) -> Result:
        r = self.spawn(cmd, timeout).wait(timeout + 30)
        return r.check() if check else r

    cluster_python = PY

    def python(self, args: str, timeout: float = 300) -> Job:
        """Start the project's python on the node with these arguments."""
        return self.spawn("%s %s" % (PY, args), timeout)

    # -- the machine -------------------------------------------------------
    def qemu_pid(self) -> int:
        return int((self.dir / "pid").read_text())

    def kill(self) -> float:
        """SIGKILL the node's QEMU; returns the monotonic time of the kill."""
        pid = self.qemu_pid()
        t = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        self.cluster.wait_node(self.k)
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        return t

    def restart(self, deadline_s: float = 240) -> None:
        self.cluster.boot([self.k])
        self._connect(time.monotonic() + deadline_s)

    def qmp(self, command: str, **arguments: object) -> dict:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(self.dir / "qmp"))
            f = s.makefile("rwb")
            json.loads(f.readline())                       # the greeting
            for cmd in ({"execute": "qmp_capabilities"},
                        {"execute": command, "arguments": arguments}):
                f.write((json.dumps(cmd) + "\n").encode())
                f.flush()
                while True:
                    reply = json.loads(f.readline())
                    if "event" not in reply:
                        break
                if "error" in reply:
                    raise NodeError("%s: qmp %s: %s" % (self.name, command, reply["error"]))
            return reply

    def set_link(self, up: bool) -> None:
        """Take this node's side of the wire down or up: the NIC loses (or
        regains) its carrier and nothing passes."""
        self.qmp("set_link", name="nic", up=up)


class Cluster:
    def __init__(self, root: "os.PathLike[str] | str", nodes: int = 2, smp: int = 1,
                 mem: str = "2G", mtu: Optional[Dict[int, int]] = None, timeout: int = 1800,
                 extra: Optional[List[str]] = None) -> None:
        self.root = pathlib.Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        # 2G: torch's libraries (~1 GB) sit in each node's page cache.
        self.n, self.smp, self.mem, self.mtu, self.timeout = nodes, smp, mem, mtu or {}, timeout
        self.extra = extra or []
        self.procs: Dict[int, subprocess.Popen] = {}
        self.log = open(self.root / "run-cluster.log", "ab")
        self.nodes = [Node(self, k) for k in range(1, nodes + 1)]

    def __getitem__(self, k: int) -> Node:
        return self.nodes[k - 1]

    def boot(self, which: List[int]) -> None:
        argv = [str(RUN_CLUSTER), "--control", str(self.root), "--timeout", str(self.timeout),
                "--smp", str(self.smp), "--mem", self.mem, "--only", ",".join(map(str, which))] + self.extra
        for k in range(1, self.n + 1):
            argv += ["--node%d" % k, AGENT]
        for k, m in self.mtu.items():
            argv += ["--mtu", "%d=%d" % (k, m)]
        proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=self.log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        for k in which:
            self.procs[k] = proc

    def start(self, deadline_s: float = 300) -> "Cluster":
        t0 = time.monotonic()
        self.boot(list(range(1, self.n + 1)))
        for node in self.nodes:
            node._connect(t0 + deadline_s)
        self.boot_secs = time.monotonic() - t0
        return self

    def proc_done(self, k: int) -> bool:
        p = self.procs.get(k)
        return p is None or p.poll() is not None

    def wait_node(self, k: int, timeout: float = 30) -> None:
        """Wait until node k's QEMU is gone (its pid file removed)."""
        deadline = time.monotonic() + timeout
        while (self.root / ("node%d" % k) / "pid").exists() and time.monotonic() < deadline:
            time.sleep(0.05)

    def log_tail(self) -> str:
        if not self.log.closed:
            self.log.flush()
        try:
            return (self.root / "run-cluster.log").read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def stop(self) -> None:
        for node in self.nodes:
            try:
                node._send({"op": "exit"})
            except (NodeError, OSError):
                pass
        deadline = time.monotonic() + 30
        for p in set(self.procs.values()):
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(10)
        self.log.close()


if __name__ == "__main__":
    # A manual check: boot, say hello from each node, stop.
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        c = Cluster(d).start()
        print("booted in %.1fs" % c.boot_secs)
        for node in c.nodes:
            print(node.run("hostname; uptime").out.strip())
        c.stop()
        sys.stdout.write(c.log_tail())
