"""`make soak [MINUTES=10]`: random connect/transfer/close cycles with faults
injected, in several processes at once, on rxe0/rxe1 (inside the VM).

Each worker process keeps a context and a PD per device open and loops over
cycles, each cycle building everything else afresh and closing it again:

  transfer    RDMA WRITE, RDMA READ and SEND of random bytes; every byte checked
  bad_rkey    a remote access error on both ends, then the same QPs recovered
              in place (QP.reset + connect_rc) and a checked transfer
  rnr         a SEND nobody receives with rnr_retry=0: RNR_RETRY_EXC_ERR
  cq_overrun  more signaled writes than the CQ holds: CQ_ERR async event
  peer_kill   a peer process (tests/fault_peer.py) SIGKILLed with writes in
              flight: every work request completes, once, the rest in error

and the controller takes veth1 down and up now and then under live QPs.  A
cycle that overlaps a link flap may fail in any way a verb can fail
(VerbsError, error completions); every other cycle must give exactly the
outcome above.  In every cycle, every signaled work request completes
exactly once.

Once a minute the controller pauses the workers between cycles and
reports, per worker, RSS and open fds, the open handle objects (which must
be the persistent ones alone), and the kernel's `rdma resource show`
counts (which must equal the first sample's).  At the end, RSS and fds may
not have grown past the first minute's figures (plus a small allowance);
the run fails on growth, on a worker's failed check, or on a hang.

SOAK_SEED=<n> replays a run; the seed is printed at the start.
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import multiprocessing as mp
import os
import pathlib
import queue
import random
import signal
import subprocess
import sys
import threading
import time
import traceback

TESTS = pathlib.Path(__file__).resolve().parent
ROOT = TESTS.parent
for _p in (str(ROOT), str(TESTS)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import rxe  # noqa: E402

PORT = 1
DEVICES = ("rxe0", "rxe1")
KINDS = {"transfer": 8, "bad_rkey": 2, "rnr": 2, "cq_overrun": 1, "peer_kill": 1}
FLAP_NETDEV = "veth1"
COMPLETION_TIMEOUT = 30.0
RSS_ALLOWANCE = 8 << 20          # bytes of RSS growth tolerated past the first minute
RSS_ALLOWANCE_FRACTION = 0.10


class CheckFailed(AssertionError):
    pass


def check(cond, what):
    if not cond:
        raise CheckFailed(what)


# --- the worker ---------------------------------------------------------------------------

class Worker:
    def __init__(self, wid, seed, flap_gen):
        import ibverbs as ib
        self.ib = ib
        self.wid = wid
        self.rng = random.Random(seed)
        self.flap_gen = flap_gen
        self.access = (ib.AccessFlags.LOCAL_WRITE | ib.AccessFlags.REMOTE_WRITE
                       | ib.AccessFlags.REMOTE_READ)
        self.ends = {}
        for name in DEVICES:
            ctx = next(d for d in ib.get_device_list() if d.name == name).open()
            self.ends[name] = (ctx, ctx.alloc_pd())
        self.counts = {k: 0 for k in KINDS}
        self.disturbed = 0

    def close(self):
        for ctx, pd in self.ends.values():
            pd.close()
            ctx.close()

    # building blocks -------------------------------------------------------------
    def gid_index(self, dev):
        return rxe.roce_v2_ipv4_gid_index(dev, PORT)

    def endpoint(self, stack, dev, size, cqe=64, mr_access=None):
        ib = self.ib
        ctx, pd = self.ends[dev]
        cq = stack.enter(ctx.create_cq(cqe))
        qp = stack.enter(pd.create_qp(ib.QPInitAttr(cq, cq, qp_type=ib.QPType.RC, max_send_wr=64,
                                                    max_recv_wr=64)))
        buf = bytearray(size)
        mr = stack.enter(pd.reg_mr(buf, self.access if mr_access is None else mr_access))
        return {"dev": dev, "ctx": ctx, "cq": cq, "qp": qp, "buf": buf, "mr": mr}

    def info(self, e, psn):
        ctx = e["ctx"]
        return self.ib.local_qp_info(e["qp"], ctx.query_port(PORT),
                                     ctx.query_gid(PORT, self.gid_index(e["dev"])), port=PORT,
                                     psn=psn)

    def connect(self, a, b, **rts):
        ib = self.ib
        ib.connect_rc(a["qp"], self.info(b, 0x20), port=PORT, sgid_index=self.gid_index(a["dev"]),
                      access=self.access, local_psn=0x10, timeout=10, retry_cnt=1, **rts)
        ib.connect_rc(b["qp"], self.info(a, 0x10), port=PORT, sgid_index=self.gid_index(b["dev"]),
                      access=self.access, local_psn=0x20, timeout=10, retry_cnt=1, **rts)

    def completions(self, cq, wr_ids):
        """Exactly one completion per wr_id (any order), nothing more."""
        got = []
        deadline = time.monotonic() + COMPLETION_TIMEOUT
        while len(got) < len(wr_ids):
            got += cq.poll(16)
            check(time.monotonic() < deadline,
                  f"{len(got)} of {len(wr_ids)} completions in {COMPLETION_TIMEOUT} s")
        time.sleep(0.01)
        got += cq.poll(16)
        check(sorted(wc.wr_id for wc in got) == sorted(wr_ids),
              f"completions {sorted(wc.wr_id for wc in got)} for work requests {sorted(wr_ids)}")
        return {wc.wr_id: wc.status for wc in got}

    def post_write(self, a, wr_id, offset, length, remote_addr, rkey, opcode=None):
        ib = self.ib
        a["qp"].post_send(ib.SendWR(
            wr_id=wr_id, sg_list=[a["mr"].sge(length, offset=offset)],
            opcode=ib.WROpcode.RDMA_WRITE if opcode is None else opcode,
            remote_addr=remote_addr, rkey=rkey, send_flags=ib.SendFlags.SIGNALED))

    def async_event(self, ctx, want, timeout=10.0):
        import select
        deadline = time.monotonic() + timeout
        while True:
            ready, _, _ = select.select([ctx.async_fd], [], [], max(0.0, deadline - time.monotonic()))
            check(ready, f"no {want!r} async event within {timeout} s")
            ev = ctx.get_async_event()
            ctx.ack_async_event(ev)
            if ev.event_type == want:
                return ev

    def drain_async_events(self):
        """Port events of the link flaps pile up otherwise."""
        import select
        for ctx, _ in self.ends.values():
            while select.select([ctx.async_fd], [], [], 0)[0]:
                ctx.ack_async_event(ctx.get_async_event())

    # the cycles ----------------------------------------------------------------------
    def transfer(self, stack, a, b):
        """WRITE a->b, READ b->a, SEND a->b of random bytes; every byte checked."""
        ib, S = self.ib, self.ib.WCStatus.SUCCESS
        n = len(a["buf"]) // 4
        a["buf"][:] = os.urandom(len(a["buf"]))
        b["buf"][:] = os.urandom(len(b["buf"]))
        expect_read = bytes(b["buf"][n:2 * n])
        b["qp"].post_recv(ib.RecvWR(wr_id=9, sg_list=[b["mr"].sge(n, offset=3 * n)]))
        self.post_write(a, 1, 0, n, b["mr"].addr, b["mr"].rkey)
        self.post_write(a, 2, n, n, b["mr"].addr + n, b["mr"].rkey, opcode=ib.WROpcode.RDMA_READ)
        a["qp"].post_send(ib.SendWR(wr_id=3, sg_list=[a["mr"].sge(n, offset=2 * n)],
                                    opcode=ib.WROpcode.SEND, send_flags=ib.SendFlags.SIGNALED))
        statuses = self.completions(a["cq"], [1, 2, 3])
        check(all(s == S for s in statuses.values()), f"transfer statuses {statuses}")
        check(self.completions(b["cq"], [9]) == {9: S}, "receive failed")
        check(b["buf"][:n] == a["buf"][:n], "RDMA WRITE: bytes differ")
        check(a["buf"][n:2 * n] == expect_read, "RDMA READ: bytes differ")
        check(b["buf"][3 * n:4 * n] == a["buf"][2 * n:3 * n], "SEND: bytes differ")

    def cycle_transfer(self, stack):
        a, b = self.pair(stack)
        self.connect(a, b)
        for _ in range(self.rng.randint(1, 3)):
            self.transfer(stack, a, b)

    def pair(self, stack, **kw_b):
        size = self.rng.choice((4096, 65536, 262144))
        da, db = self.rng.choice(DEVICES), self.rng.choice(DEVICES)
        return self.endpoint(stack, da, size), self.endpoint(stack, db, size, **kw_b)

    def cycle_bad_rkey(self, stack):
        ib = self.ib
        a, b = self.pair(stack)
        self.connect(a, b)
        b["qp"].post_recv(ib.RecvWR(wr_id=50, sg_list=[b["mr"].sge(64)]))
        self.post_write(a, 1, 0, 64, b["mr"].addr, b["mr"].rkey ^ 0x100)
        self.post_write(a, 2, 0, 64, b["mr"].addr, b["mr"].rkey)
        got = self.completions(a["cq"], [1, 2])
        check(got == {1: ib.WCStatus.REM_ACCESS_ERR, 2: ib.WCStatus.WR_FLUSH_ERR}, f"bad rkey: {got}")
        check(self.completions(b["cq"], [50]) == {50: ib.WCStatus.WR_FLUSH_ERR}, "responder not flushed")
        for e in (a, b):
            e["qp"].reset()
        self.connect(a, b)
        self.transfer(stack, a, b)

    def cycle_rnr(self, stack):
        ib = self.ib
        a, b = self.pair(stack)
        self.connect(a, b, rnr_retry=0)
        a["qp"].post_send(ib.SendWR(wr_id=1, sg_list=[a["mr"].sge(64)], opcode=ib.WROpcode.SEND,
                                    send_flags=ib.SendFlags.SIGNALED))
        got = self.completions(a["cq"], [1])
        check(got == {1: ib.WCStatus.RNR_RETRY_EXC_ERR}, f"rnr: {got}")

    def cycle_cq_overrun(self, stack):
        ib = self.ib
        size = 4096
        da = self.rng.choice(DEVICES)
        a = self.endpoint(stack, da, size, cqe=4)
        b = self.endpoint(stack, self.rng.choice(DEVICES), size)
        self.connect(a, b)
        n = a["cq"].cqe + 3
        for i in range(n):
            self.post_write(a, i, 0, 64, b["mr"].addr, b["mr"].rkey)
        ev = self.async_event(a["ctx"], ib.EventType.CQ_ERR)
        check(ev.element is a["cq"], f"CQ_ERR names {ev.element!r}")

    def cycle_peer_kill(self, stack):
        ib = self.ib
        chunk = 65536
        peer_dev = self.rng.choice(DEVICES)
        peer = subprocess.Popen([sys.executable, str(TESTS / "fault_peer.py"), peer_dev,
                                 str(32 * chunk)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            hello = json.loads(peer.stdout.readline())
            a = self.endpoint(stack, self.rng.choice(DEVICES), chunk)
            ib.connect_rc(a["qp"], ib.QPInfo.from_bytes(bytes.fromhex(hello["info"])), port=PORT,
                          sgid_index=self.gid_index(a["dev"]), access=self.access, local_psn=0x10,
                          timeout=10, retry_cnt=1)
            peer.stdin.write(json.dumps({"info": self.info(a, 0x10).to_bytes().hex()}) + "\n")
            peer.stdin.flush()
            check(json.loads(peer.stdout.readline()) == {"ready": True}, "peer not ready")
            before = self.rng.randint(0, 24)
            for i in range(before):
                self.post_write(a, i, 0, chunk, hello["addr"] + i * chunk, hello["rkey"])
            peer.send_signal(signal.SIGKILL)
            peer.wait(30)
            for i in range(before, 32):
                self.post_write(a, i, 0, chunk, hello["addr"] + i * chunk, hello["rkey"])
            got = self.completions(a["cq"], list(range(32)))
        finally:
            if peer.poll() is None:
                peer.kill()
                peer.wait()
            peer.stdin.close()
            peer.stdout.close()
        S = ib.WCStatus
        statuses = [got[i] for i in range(32)]
        first = next((i for i, s in enumerate(statuses) if s != S.SUCCESS), None)
        check(first is not None and first <= before, f"writes after the peer died succeeded: {statuses}")
        check(statuses[first] in (S.RETRY_EXC_ERR, S.REM_ACCESS_ERR, S.REM_INV_REQ_ERR)
              and all(s == S.WR_FLUSH_ERR for s in statuses[first + 1:]), f"peer kill: {statuses}")

    def run_cycle(self):
        kind = self.rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
        gen = self.flap_gen.value
        try:
            with Stack() as stack:
                getattr(self, "cycle_" + kind)(stack)
        except (self.ib.VerbsError, CheckFailed, LookupError, ValueError):
            if gen % 2 == 0 and self.flap_gen.value == gen:
                raise
            self.disturbed += 1          # overlapped a link flap: any verbs failure goes
        self.counts[kind] += 1
        self.drain_async_events()

    def stats(self):
        gc.collect()
        with open("/proc/self/status") as f:
            rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
        handles = {name: getattr(self.ib, name)._open_count()
                   for name in ("Context", "PD", "CQ", "QP", "MR", "AH", "MW", "SRQ", "CompChannel")}
        return {"wid": self.wid, "rss": rss, "fds": len(os.listdir("/proc/self/fd")),
                "handles": handles, "cycles": dict(self.counts), "disturbed": self.disturbed}


class Stack:
    """Closes what it was given, last first, even when a cycle fails half-way."""

    def __init__(self):
        self.objs = []

    def enter(self, obj):
        self.objs.append(obj)
        return obj

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for obj in reversed(self.objs):
            obj.close()


def worker_main(wid, seed, flap_gen, pause, stop, reports):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        w = Worker(wid, seed, flap_gen)
        while not stop.is_set():
            if pause.is_set():
                reports.put(("stats", w.stats()))
                while pause.is_set() and not stop.is_set():
                    time.sleep(0.05)
                continue
            w.run_cycle()
        w.close()
        reports.put(("done", wid))
    except BaseException:
        reports.put(("failed", f"worker {wid}:\n{traceback.format_exc()}"))


# --- the controller ------------------------------------------------------------------------

def _kernel_counts():
    path = TESTS / "device" / "conftest.py"
    spec = importlib.util.spec_from_file_location("_soak_device_conftest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kernel_counts


def _ip(*args):
    subprocess.run(["ip", *args], check=True, timeout=30)


def _wait_ready(timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if all(rxe.port_state(d) == "ACTIVE" and rxe.roce_v2_ipv4_gid_index(d) is not None
                   for d in DEVICES):
                return
        except LookupError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"rxe ports not ACTIVE {timeout} s after link up")


def flapper(flap_gen, stop, rng, flaps):
    """veth1 down ~0.5 s, then up, every 20-40 s; flap_gen is odd meanwhile."""
    while not stop.wait(rng.uniform(20, 40)):
        with flap_gen.get_lock():
            flap_gen.value += 1
        try:
            _ip("link", "set", FLAP_NETDEV, "down")
            time.sleep(0.5)
        finally:
            _ip("link", "set", FLAP_NETDEV, "up")
            _ip("route", "replace", "10.0.0.1", "dev", FLAP_NETDEV, "src", "10.0.0.2",
                "table", "101")
            _wait_ready()
            time.sleep(0.2)
            with flap_gen.get_lock():
                flap_gen.value += 1
        flaps.append(time.monotonic())


def collect(reports, workers, n, timeout):
    got, deadline = {}, time.monotonic() + timeout
    while len(got) < n:
        try:
            kind, payload = reports.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            dead = [p.pid for p in workers if not p.is_alive()]
            raise RuntimeError(f"workers did not report within {timeout} s (dead: {dead})") from None
        if kind == "failed":
            raise RuntimeError(payload)
        if kind == "stats":
            got[payload["wid"]] = payload
    return [got[i] for i in sorted(got)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--no-flap", action="store_true", help="no link flaps")
    args = ap.parse_args(argv)
    if not rxe.in_vm():
        print("soak: runs inside the Soft-RoCE VM (make soak)", file=sys.stderr)
        return 2
    seed = int(os.environ.get("SOAK_SEED", random.randrange(1 << 32)))
    print(f"soak: {args.minutes:g} min, {args.workers} workers, seed {seed} (SOAK_SEED={seed} replays)",
          flush=True)
    kernel_counts = _kernel_counts()
    baseline_kernel = kernel_counts()
    mpc = mp.get_context("spawn")
    flap_gen = mpc.Value("l", 0)
    pause, stop_workers, reports = mpc.Event(), mpc.Event(), mpc.Queue()
    workers = [mpc.Process(target=worker_main,
                           args=(i, seed + i, flap_gen, pause, stop_workers, reports))
               for i in range(args.workers)]
    stop, flaps = threading.Event(), []
    flap_thread = None
    samples, status = [], 0
    try:
        pause.set()                      # the first sample comes before any cycle
        for p in workers:
            p.start()
        end = time.monotonic() + args.minutes * 60
        minute = 0
        header = ("min  cycles  disturbed flaps  RSS MiB per worker     fds per worker  "
                  "kernel (pd cq qp mr ctx)  open handles")
        print(header, flush=True)
        while True:
            stats = collect(reports, workers, args.workers, 120)
            kernel = kernel_counts()
            k = {kind: sum(c[kind] for c in kernel.values()) for kind in ("pd", "cq", "qp", "mr", "ctx")}
            sample = {"minute": minute, "workers": stats, "kernel": k}
            samples.append(sample)
            cycles = sum(sum(s["cycles"].values()) for s in stats)
            rss = " ".join("%6.1f" % (s["rss"] / 2**20) for s in stats)
            fds = " ".join("%4d" % s["fds"] for s in stats)
            print(f"{minute:3}  {cycles:6}  {sum(s['disturbed'] for s in stats):9} {len(flaps):5}  "
                  f"{rss:22} {fds:15} "
                  f"{k['pd']:3} {k['cq']:3} {k['qp']:3} {k['mr']:3} {k['ctx']:3}       "
                  f"{sum(sum(s['handles'].values()) for s in stats)}", flush=True)
            problems = check_sample(samples, args.workers)
            if problems:
                raise RuntimeError("; ".join(problems))
            if time.monotonic() >= end:
                break
            minute += 1
            if flap_thread is None and not args.no_flap:
                flap_thread = threading.Thread(target=flapper,
                                               args=(flap_gen, stop, random.Random(seed), flaps),
                                               daemon=True)
                flap_thread.start()
            pause.clear()
            time.sleep(max(0.0, min(60.0, end - time.monotonic())))
            pause.set()
        totals = {}
        for s in samples[-1]["workers"]:
            for kind, n in s["cycles"].items():
                totals[kind] = totals.get(kind, 0) + n
        growth = check_growth(samples)
        if growth:
            raise RuntimeError("; ".join(growth))
        print(f"soak: passed: cycles {totals}, {len(flaps)} link flaps, "
              f"{sum(s['disturbed'] for s in samples[-1]['workers'])} cycles disturbed by them; "
              f"RSS, fds and verbs resources flat", flush=True)
    except Exception as exc:
        print(f"soak: FAILED: {exc}", flush=True)
        status = 1
    finally:
        stop.set()
        if flap_thread is not None:
            flap_thread.join(60)
        stop_workers.set()
        for p in workers:
            p.join(60)
            if p.is_alive():
                p.kill()
                p.join()
                status = 1
    after = kernel_counts()
    if after != baseline_kernel:
        print(f"soak: FAILED: kernel resources {baseline_kernel} -> {after} after the workers exited")
        status = 1
    return status


PERSISTENT = {"Context": len(DEVICES), "PD": len(DEVICES)}


def check_sample(samples, nworkers):
    """Between cycles a worker holds its contexts and PDs only, and the
    kernel counts are those of the first sample."""
    problems = []
    last = samples[-1]
    for s in last["workers"]:
        extra = {k: v for k, v in s["handles"].items() if v != PERSISTENT.get(k, 0)}
        if extra:
            problems.append(f"worker {s['wid']} holds {extra} between cycles")
    if last["kernel"] != samples[0]["kernel"]:
        problems.append(f"kernel resources {samples[0]['kernel']} -> {last['kernel']}")
    return problems


def check_growth(samples):
    """RSS and fds at the end against the first minute's (the first sample
    is taken before any cycle, so it is no baseline for RSS)."""
    base = samples[1] if len(samples) > 2 else samples[-1]
    problems = []
    for b, e in zip(base["workers"], samples[-1]["workers"]):
        limit = b["rss"] + max(RSS_ALLOWANCE, RSS_ALLOWANCE_FRACTION * b["rss"])
        if e["rss"] > limit:
            problems.append(f"worker {b['wid']}: RSS {b['rss'] >> 20} -> {e['rss'] >> 20} MiB")
        if e["fds"] > b["fds"]:
            problems.append(f"worker {b['wid']}: fds {b['fds']} -> {e['fds']}")
    return problems


if __name__ == "__main__":
    sys.exit(main())
