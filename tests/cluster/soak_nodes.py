"""`make soak NODES=2 [MINUTES=30]`: the soak across two nodes.

    node2$ python tests/cluster/soak_nodes.py server --port P
    node1$ python tests/cluster/soak_nodes.py client --host node2 --port P --minutes M

Two long-lived processes, one per node, each keeping a context and a PD on
its rxe0 open for the whole run; the client drives, over one TCP side
channel (JSON lines), random cycles that build every other resource afresh
on both nodes and close it again:

  transfer    RDMA WRITE, RDMA READ and SEND of random bytes between the
              nodes (4 KiB to 1 MiB); every byte checked on the node it
              landed on
  bad_rkey    a WRITE with a wrong rkey: REM_ACCESS_ERR on the client, the
              server's posted receive flushed (its QP in ERR), the target
              untouched; then both QPs reset and reconnected in place, and
              a checked transfer on them
  rnr         a SEND the server has posted no receive for, rnr_retry=0:
              RNR_RETRY_EXC_ERR on the client

In every cycle every signaled work request completes exactly once.  Once a
minute, between cycles (nothing but the persistent objects open), both
processes report RSS, open fds, their open handle objects and their node's
kernel `rdma resource show` counts; the client prints a line per minute.
At the end the kernel counts and handles must equal the first sample's on
both nodes and RSS and fds may not have grown past the first minute's
figures (plus an allowance): the client exits 1 on growth, on a failed
check, or when the server stops answering.  SOAK_SEED=<n> replays a run.
"""
from __future__ import annotations

import argparse
import gc
import hashlib
import json
import math
import os
import pathlib
import random
import sys
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
# peer.py; tests/rxe.py (for the kernel counts); the package of this checkout
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parents[1])]

import ibverbs as ib  # noqa: E402

from peer import ALL_ACCESS, PORT, Link, say  # noqa: E402
# the one-VM soak's checks, growth allowances and kernel-count reader
from soak import (COMPLETION_TIMEOUT, RSS_ALLOWANCE, RSS_ALLOWANCE_FRACTION,  # noqa: E402
                  CheckFailed, _kernel_counts, check)

KINDS = {"transfer": 8, "bad_rkey": 2, "rnr": 2}
SIZES = (4096, 65536, 1 << 20)
HANDLES = ("Context", "PD", "CQ", "QP", "MR")
kernel_counts = _kernel_counts()


def sha(data: "bytes | bytearray") -> str:
    return hashlib.sha256(data).hexdigest()


def sample() -> dict:
    """This process and its node, between cycles."""
    gc.collect()
    with open("/proc/self/status") as f:
        rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    return {"rss": rss, "fds": len(os.listdir("/proc/self/fd")),
            "handles": {name: getattr(ib, name)._open_count() for name in HANDLES},
            "kernel": kernel_counts()}


class End:
    """One node's half of a cycle: CQ, RC QP and a registered buffer."""

    def __init__(self, ctx: "ib.Context", pd: "ib.PD", size: int) -> None:
        self.cq = ctx.create_cq(64)
        self.qp = pd.create_qp(ib.QPInitAttr(self.cq, self.cq, max_send_wr=16, max_recv_wr=16))
        self.buf = bytearray(os.urandom(4 * size))
        self.mr = pd.reg_mr(self.buf, ALL_ACCESS)
        self.size = size

    def post_recv(self) -> None:
        """A receive of wr_id 100: SENDs land in the buffer's last quarter."""
        n = self.size
        self.qp.post_recv(ib.RecvWR(wr_id=100, sg_list=[self.mr.sge(n, offset=3 * n)]))

    def completions(self, wr_ids: "list[int]") -> "dict[int, int]":
        """Exactly one completion per wr_id, nothing more."""
        got: list = []
        deadline = time.monotonic() + COMPLETION_TIMEOUT
        while len(got) < len(wr_ids):
            got += self.cq.poll(16)
            check(time.monotonic() < deadline,
                  f"{len(got)} of {len(wr_ids)} completions in {COMPLETION_TIMEOUT} s")
        time.sleep(0.01)
        got += self.cq.poll(16)
        check(sorted(wc.wr_id for wc in got) == sorted(wr_ids),
              f"completions {sorted(wc.wr_id for wc in got)} for work requests {sorted(wr_ids)}")
        return {wc.wr_id: int(wc.status) for wc in got}

    def close(self) -> None:
        for obj in (self.qp, self.mr, self.cq):
            obj.close()


class Persistent:
    """What each process keeps open for the whole run."""

    def __init__(self) -> None:
        dev = next(d for d in ib.get_device_list() if d.name == "rxe0")
        self.ctx = dev.open()
        self.gid_index, self.gid = self.ctx.find_gid(PORT)
        self.pd = self.ctx.alloc_pd()

    def info(self, end: End) -> str:
        return ib.local_qp_info(end.qp, self.ctx.query_port(PORT), self.gid,
                                port=PORT).to_bytes().hex()

    def connect(self, end: End, remote_hex: str, **kw: object) -> None:
        ib.connect_rc(end.qp, ib.QPInfo.from_bytes(bytes.fromhex(remote_hex)), port=PORT,
                      sgid_index=self.gid_index, access=ALL_ACCESS, timeout=14, retry_cnt=3,
                      **kw)

    def close(self) -> None:
        self.pd.close()
        self.ctx.close()


# --- the server: serves the client's commands until "bye" -----------------------------

def server(args: argparse.Namespace) -> int:
    mine = Persistent()
    link = Link.serve(args.port, timeout=600)
    end: Any = None          # the cycle's End between "open" and "close"
    while True:
        msg = link.recv()
        cmd = msg["cmd"]
        if cmd == "open":
            end = End(mine.ctx, mine.pd, msg["size"])
            link.send(qp=mine.info(end), addr=end.mr.addr, rkey=end.mr.rkey)
        elif cmd == "connect":
            mine.connect(end, msg["qp"], rnr_retry=msg.get("rnr_retry", 7))
            for _ in range(msg["recvs"]):
                end.post_recv()
            link.send(ready=True)
        elif cmd == "post_recv":
            end.post_recv()
            link.send(posted=True)
        elif cmd == "expect":                   # the completions of the posted receives
            try:
                got = end.completions(msg["wr_ids"])
                link.send(statuses={str(k): v for k, v in got.items()})
            except CheckFailed as exc:
                link.send(failed=str(exc))
        elif cmd == "digest":                   # of a range of the buffer
            link.send(sha=sha(end.buf[msg["start"]:msg["stop"]]))
        elif cmd == "reset":                    # to RESET, for a reconnection in place
            end.qp.reset()
            link.send(reset=True)
        elif cmd == "close":
            end.close()
            end = None
            link.send(closed=True)
        elif cmd == "sample":
            link.send(**sample())
        elif cmd == "bye":
            link.send(bye=True)
            break
    mine.close()
    return 0


# --- the client: the cycles, the samples, the verdict ----------------------------------

class Client:
    def __init__(self, link: Link, rng: random.Random) -> None:
        self.link, self.rng = link, rng
        self.mine = Persistent()
        self.counts = {k: 0 for k in KINDS}

    def ask(self, **msg: object) -> dict:
        self.link.send(**msg)
        return self.link.recv()

    def open_pair(self, recvs: int, **rts: object) -> "tuple[End, dict]":
        size = self.rng.choice(SIZES)
        peer = self.ask(cmd="open", size=size)
        end = End(self.mine.ctx, self.mine.pd, size)
        self.connect(end, peer, recvs, **rts)
        return end, peer

    def connect(self, end: End, peer: dict, recvs: int, **rts: object) -> None:
        self.mine.connect(end, peer["qp"], **rts)
        assert self.ask(cmd="connect", qp=self.mine.info(end), recvs=recvs,
                        rnr_retry=rts.get("rnr_retry", 7)) == {"ready": True}

    def post(self, end: End, wr_id: int, opcode: "ib.WROpcode", offset: int,
             remote: "tuple[int, int] | None" = None, length: "int | None" = None) -> None:
        wr = ib.SendWR(wr_id=wr_id, sg_list=[end.mr.sge(length or end.size, offset=offset)],
                       opcode=opcode, send_flags=ib.SendFlags.SIGNALED)
        if remote is not None:
            wr.remote_addr, wr.rkey = remote
        end.qp.post_send(wr)

    def server_statuses(self, wr_ids: "list[int]") -> "dict[int, int]":
        reply = self.ask(cmd="expect", wr_ids=wr_ids)
        check("failed" not in reply, f"on the server: {reply.get('failed')}")
        return {int(k): v for k, v in reply["statuses"].items()}

    def server_sha(self, start: int, stop: int) -> str:
        return str(self.ask(cmd="digest", start=start, stop=stop)["sha"])

    def transfer(self, end: End, peer: dict) -> None:
        """WRITE, READ and SEND of the client's random bytes (the server's for
        the READ), each checked where it landed; one receive posted."""
        O, S = ib.WROpcode, int(ib.WCStatus.SUCCESS)
        n = end.size
        end.buf[:3 * n] = os.urandom(3 * n)
        expect_read = self.server_sha(n, 2 * n)
        self.post(end, 1, O.RDMA_WRITE, 0, (peer["addr"], peer["rkey"]))
        self.post(end, 2, O.RDMA_READ, n, (peer["addr"] + n, peer["rkey"]))
        self.post(end, 3, O.SEND, 2 * n)
        statuses = end.completions([1, 2, 3])
        check(statuses == {1: S, 2: S, 3: S}, f"transfer statuses {statuses}")
        check(self.server_statuses([100]) == {100: S}, "the server's receive failed")
        check(self.server_sha(0, n) == sha(end.buf[:n]), "RDMA WRITE: bytes differ")
        check(sha(end.buf[n:2 * n]) == expect_read, "RDMA READ: bytes differ")
        check(self.server_sha(3 * n, 4 * n) == sha(end.buf[2 * n:3 * n]), "SEND: bytes differ")

    def cycle_transfer(self) -> None:
        end, peer = self.open_pair(recvs=1)
        try:
            for i in range(self.rng.randint(1, 3)):
                if i > 0:
                    assert self.ask(cmd="post_recv") == {"posted": True}
                self.transfer(end, peer)
        finally:
            self.close(end)

    def cycle_bad_rkey(self) -> None:
        W = ib.WCStatus
        end, peer = self.open_pair(recvs=1)
        try:
            before = self.server_sha(0, 64)
            self.post(end, 1, ib.WROpcode.RDMA_WRITE, 0, (peer["addr"], peer["rkey"] ^ 0x100),
                      length=64)
            self.post(end, 2, ib.WROpcode.RDMA_WRITE, 0, (peer["addr"], peer["rkey"]), length=64)
            got = end.completions([1, 2])
            check(got == {1: int(W.REM_ACCESS_ERR), 2: int(W.WR_FLUSH_ERR)}, f"bad rkey: {got}")
            got = self.server_statuses([100])
            check(got == {100: int(W.WR_FLUSH_ERR)}, f"bad rkey, the server's receive: {got}")
            check(self.server_sha(0, 64) == before, "a refused write changed the target")
            end.qp.reset()                       # recovered in place: same QPs
            assert self.ask(cmd="reset") == {"reset": True}
            self.connect(end, peer, recvs=1)
            self.transfer(end, peer)
        finally:
            self.close(end)

    def cycle_rnr(self) -> None:
        end, _ = self.open_pair(recvs=0, rnr_retry=0)
        try:
            self.post(end, 1, ib.WROpcode.SEND, 0, length=64)
            got = end.completions([1])
            check(got == {1: int(ib.WCStatus.RNR_RETRY_EXC_ERR)}, f"rnr: {got}")
        finally:
            self.close(end)

    def close(self, end: End) -> None:
        end.close()
        assert self.ask(cmd="close") == {"closed": True}

    def run_cycle(self) -> None:
        kind = self.rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
        getattr(self, "cycle_" + kind)()
        self.counts[kind] += 1


def _grew(first: dict, last: dict, node: str) -> "list[str]":
    """RSS and fds past first's figures (plus the allowance)."""
    problems = []
    limit = first["rss"] + max(RSS_ALLOWANCE, int(first["rss"] * RSS_ALLOWANCE_FRACTION))
    if last["rss"] > limit:
        problems.append(f"{node}: RSS grew {first['rss'] >> 10} -> {last['rss'] >> 10} KiB")
    if last["fds"] > first["fds"]:
        problems.append(f"{node}: fds grew {first['fds']} -> {last['fds']}")
    return problems


def _line(minute: int, node1: dict, node2: dict, counts: dict) -> str:
    def one(s: dict) -> str:
        kernel = {k: v for dev in s["kernel"].values() for k, v in dev.items() if v}
        return "rss %d KiB, fds %d, kernel %s" % (s["rss"] >> 10, s["fds"], kernel)
    return "soak minute %d: node1 %s; node2 %s; cycles %s" % (
        minute, one(node1), one(node2), counts)


def client(args: argparse.Namespace) -> int:
    seed = int(os.environ.get("SOAK_SEED") or random.SystemRandom().randrange(1 << 32))
    print(f"soak across nodes: {args.minutes} min, seed {seed} (SOAK_SEED={seed} replays it)",
          flush=True)
    link = Link.dial(args.host, args.port)
    c = Client(link, random.Random(seed))
    samples: list = []

    def take(minute: int) -> None:
        node2 = c.ask(cmd="sample")
        node1 = sample()
        samples.append((node1, node2))
        print(_line(minute, node1, node2, c.counts), flush=True)

    try:
        take(0)
        start = time.monotonic()
        minutes = max(1, math.ceil(args.minutes))
        for minute in range(1, minutes + 1):
            while time.monotonic() - start < minute * 60 * args.minutes / minutes:
                c.run_cycle()
            take(minute)
    except (CheckFailed, ib.VerbsError, ConnectionError, TimeoutError) as exc:
        print(f"soak FAILED after {sum(c.counts.values())} cycles {c.counts}: "
              f"{type(exc).__name__}: {exc}", flush=True)
        return 1
    finally:
        try:
            c.ask(cmd="bye")
        except (OSError, ConnectionError):
            pass
        c.mine.close()
    # The first sample after a minute of cycles is the reference: the
    # allocator's and the interpreter's caches have filled by then.
    ref = samples[1] if len(samples) > 2 else samples[0]
    problems = (_grew(ref[0], samples[-1][0], "node1") + _grew(ref[1], samples[-1][1], "node2")
                + [f"{node}: {what} {samples[0][i][what]} at the start, {samples[-1][i][what]} "
                   "at the end" for i, node in enumerate(("node1", "node2"))
                   for what in ("handles", "kernel") if samples[0][i][what] != samples[-1][i][what]])
    say({"cycles": c.counts, "minutes": args.minutes, "seed": seed,
         "rss_kib": [[s[0]["rss"] >> 10, s[1]["rss"] >> 10] for s in samples],
         "fds": [[s[0]["fds"], s[1]["fds"]] for s in samples], "problems": problems})
    if problems:
        print("soak FAILED: " + "; ".join(problems), flush=True)
        return 1
    print(f"soak passed: {sum(c.counts.values())} cycles {c.counts} in {args.minutes} min; "
          "RSS, fds, handles and kernel resources flat on both nodes", flush=True)
    return 0


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=("server", "client"))
    parser.add_argument("--host", default="node2")
    parser.add_argument("--port", type=int, default=18515)
    parser.add_argument("--minutes", type=float, default=10)
    args = parser.parse_args(argv)
    return server(args) if args.role == "server" else client(args)


if __name__ == "__main__":
    sys.exit(main())
