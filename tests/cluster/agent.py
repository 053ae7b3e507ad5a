"""The node side of tests/cluster: runs commands for the host's tests.

Started on each node by tests/cluster/cluster.py as the node's command
(`run-cluster --control DIR --nodeK '/usr/bin/python3 tests/cluster/agent.py'`),
it reads requests from the virtio-serial port "agent", one JSON object a
line, and answers on the same port:

  {"op": "spawn", "id": N, "cmd": "shell command line", "timeout": S}
      runs the command under /bin/sh in the current directory; when it
      ends: {"id": N, "rc": RC, "out": STDOUT, "err": STDERR, "secs": S}
      (rc -9 after a timeout, which kills its process group)
  {"op": "signal", "id": N, "sig": SIG}   signals a running command's group
  {"op": "exit"}   ends the agent, and with it the node (it powers off)

Standard library only, run by /usr/bin/python3: it must start quickly
under emulation and import nothing from the tree under test.  It first
says {"hello": "nodeK"} so the host knows the node is up.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time


def port_path(name="agent"):
    base = "/sys/class/virtio-ports"
    for p in os.listdir(base):
        with open(os.path.join(base, p, "name")) as f:
            if f.read().strip() == name:
                return "/dev/" + p
    raise SystemExit("agent: no virtio port %r" % name)


class Agent:
    def __init__(self, path):
        self.fd = os.open(path, os.O_RDWR)
        self.lock = threading.Lock()
        self.procs = {}

    def send(self, obj):
        data = (json.dumps(obj) + "\n").encode()
        with self.lock:
            while data:
                data = data[os.write(self.fd, data):]

    def lines(self):
        buf = b""
        while True:
            chunk = os.read(self.fd, 65536)
            if not chunk:
                # The host end is not connected (yet, or any more).
                time.sleep(0.05)
                continue
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    yield json.loads(line)

    def run(self, req):
        t0 = time.monotonic()
        proc = subprocess.Popen(req["cmd"], shell=True, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        self.procs[req["id"]] = proc
        try:
            out, err = proc.communicate(timeout=req.get("timeout"))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            err += b"\nagent: timed out after %ss" % str(req.get("timeout")).encode()
        del self.procs[req["id"]]
        self.send({"id": req["id"], "rc": proc.returncode,
                   "out": out.decode(errors="replace"), "err": err.decode(errors="replace"),
                   "secs": time.monotonic() - t0})

    def serve(self):
        self.send({"hello": socket.gethostname()})
        for req in self.lines():
            op = req.get("op")
            if op == "spawn":
                threading.Thread(target=self.run, args=(req,), daemon=True).start()
            elif op == "signal":
                proc = self.procs.get(req["id"])
                if proc is not None:
                    try:
                        os.killpg(proc.pid, req.get("sig", signal.SIGTERM))
                    except ProcessLookupError:
                        pass
            elif op == "exit":
                return


if __name__ == "__main__":
    Agent(port_path()).serve()
    sys.exit(0)
