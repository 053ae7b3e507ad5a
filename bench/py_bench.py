"""The ibverbs side of `make bench`: the workloads of bench/c_bench.c
through the Python bindings.

    python bench/py_bench.py VARIANT GID0 GID1   (then commands on stdin)

VARIANT
  plain  what a first program writes: SendWR/RecvWR objects passed to
         post_send/post_recv, completions as WC objects from cq.poll(16).
  fast   the hot-loop API: work requests converted once into a PostList and
         posted many times, completions polled into a reusable WCBuffer
         (cq.poll_into), no object created per work request or completion.
  fast-gil  fast with PostList(release_gil=True): every post releases and
         retakes the GIL (to measure what that costs a single thread).

Speaks c_bench's protocol (READY, then "<workload> N" commands answered
with "RESULT <workload> <value>"; see there).  The loops do what the C
loops do (same window, same batches, same posting schedule, every status
checked), written as a Python programmer would: the message-rate loop
counts in batches and refills the window as completions free it, which
posts exactly when C's "post while there is room" loop posts, with a
third of the bytecode per work request.  bench/pyverbs_bench.py uses the
same loops.
"""
import ctypes
import mmap
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ibverbs as ib  # noqa: E402

PORT = 1
WINDOW = 128
CQ_DEPTH = 256
MSG = 8
RDMA_WRITE, SEND = 0, 2          # WROpcode
SIGNALED = 2                     # SendFlags
WC_RECV = 128                    # WCOpcode.RECV
ACCESS = 1 | 2 | 4               # LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ


class Side:
    def __init__(self, name, gid_index):
        dev = next(d for d in ib.get_device_list() if d.name == name)
        self.ctx = dev.open()
        self.pd = self.ctx.alloc_pd()
        self.cq = self.ctx.create_cq(CQ_DEPTH)
        self.mem = mmap.mmap(-1, 4096)
        self.addr = ctypes.addressof(ctypes.c_char.from_buffer(self.mem))
        self.mr = self.pd.reg_mr(self.addr, 4096, ACCESS)
        self.gid_index = gid_index
        self.gid = self.ctx.query_gid(PORT, gid_index)
        self.port_attr = self.ctx.query_port(PORT)

    def qp(self):
        return self.pd.create_qp(ib.QPInitAttr(
            self.cq, self.cq, qp_type=ib.QPType.RC, max_send_wr=WINDOW, max_recv_wr=64,
            max_send_sge=1, max_recv_sge=1, max_inline_data=0))


def connect(qp, local, peer, remote):
    info = ib.local_qp_info(peer, remote.port_attr, remote.gid, port=PORT, psn=0)
    ib.connect_rc(qp, info, port=PORT, sgid_index=local.gid_index, access=ACCESS, local_psn=0)


def write_wrs(s, batch):
    return [ib.SendWR(wr_id=i, sg_list=[ib.SGE(s.mr, MSG)], opcode=RDMA_WRITE,
                      send_flags=SIGNALED if i == batch - 1 else 0,
                      remote_addr=s.addr + 2048, rkey=s.mr.rkey) for i in range(batch)]


def write_rate_plain(qp, cq, s, batch, total):
    wrs = write_wrs(s, batch)
    item = wrs[0] if batch == 1 else wrs
    post, poll = qp.post_send, cq.poll
    # C's loop in units of batches: fill the window, then each completion
    # (one per batch) frees a slot, refilled at once while batches are left.
    nb = total // batch
    left = nb - min(WINDOW // batch, nb)
    done = 0
    t0 = time.perf_counter()
    for _ in range(nb - left):
        post(item)
    while done < nb:
        n = 0
        for wc in poll(16):
            if wc.status:
                raise RuntimeError(f"completion status {wc.status}")
            n += 1
        if n:
            done += n
            if left:
                if n > left:
                    n = left
                left -= n
                while n:
                    post(item)
                    n -= 1
    rate = total / (time.perf_counter() - t0)
    if cq.poll(16):
        raise RuntimeError("completions left over: the loop miscounted")
    return rate


RELEASE_GIL = False


def write_rate_fast(qp, cq, s, batch, total):
    plist = ib.PostList(write_wrs(s, batch), release_gil=RELEASE_GIL)
    buf = ib.WCBuffer(16, raise_on_error=True)     # poll_into checks every status
    post, poll_into = qp.post_send, cq.poll_into
    # C's loop in units of batches: fill the window, then each completion
    # (one per batch) frees a slot, refilled at once while batches are left.
    nb = total // batch
    left = nb - min(WINDOW // batch, nb)
    done = 0
    t0 = time.perf_counter()
    for _ in range(nb - left):
        post(plist)
    while done < nb:
        n = poll_into(buf)
        if n:
            done += n
            if left:
                if n > left:
                    n = left
                left -= n
                while n:
                    post(plist)
                    n -= 1
    rate = total / (time.perf_counter() - t0)
    if cq.poll(16):
        raise RuntimeError("completions left over: the loop miscounted")
    return rate


def pp_wrs(s):
    send = ib.SendWR(wr_id=1, sg_list=[ib.SGE(s.mr, MSG)], opcode=SEND, send_flags=SIGNALED)
    recv = ib.RecvWR(wr_id=2, sg_list=[ib.SGE(s.mr, MSG, offset=1024)])
    return send, recv


def pingpong_plain(qa, a, qb, b, iters):
    send_a, recv_a = pp_wrs(a)
    send_b, recv_b = pp_wrs(b)
    send_on_a, recv_on_a, poll_a = qa.post_send, qa.post_recv, a.cq.poll
    send_on_b, recv_on_b, poll_b = qb.post_send, qb.post_recv, b.cq.poll
    t0 = time.perf_counter()
    for _ in range(iters):
        send_on_a(send_a)
        got = False
        while not got:
            for wc in poll_b(16):
                if wc.status:
                    raise RuntimeError(f"completion status {wc.status}")
                if wc.opcode == WC_RECV:
                    got = True
        recv_on_b(recv_b)
        send_on_b(send_b)
        got = False
        while not got:
            for wc in poll_a(16):
                if wc.status:
                    raise RuntimeError(f"completion status {wc.status}")
                if wc.opcode == WC_RECV:
                    got = True
        recv_on_a(recv_a)
    return (time.perf_counter() - t0) / iters * 1e6


def pingpong_fast(qa, a, qb, b, iters):
    send_a, recv_a = (ib.PostList([w], release_gil=RELEASE_GIL) for w in pp_wrs(a))
    send_b, recv_b = (ib.PostList([w], release_gil=RELEASE_GIL) for w in pp_wrs(b))
    buf = ib.WCBuffer(16, raise_on_error=True)     # poll_into checks every status
    recvs = buf.count_opcode
    send_on_a, recv_on_a, poll_a = qa.post_send, qa.post_recv, a.cq.poll_into
    send_on_b, recv_on_b, poll_b = qb.post_send, qb.post_recv, b.cq.poll_into
    t0 = time.perf_counter()
    for _ in range(iters):
        send_on_a(send_a)
        while not (poll_b(buf) and recvs(WC_RECV)):
            pass
        recv_on_b(recv_b)
        send_on_b(send_b)
        while not (poll_a(buf) and recvs(WC_RECV)):
            pass
        recv_on_a(recv_a)
    return (time.perf_counter() - t0) / iters * 1e6


def drain(cq):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.2:
        cq.poll(16)


def poll_empty(cq, iters, fast):
    """Nanoseconds per empty poll, the loop's own cost subtracted."""
    if fast:
        buf = ib.WCBuffer(16)
        poll, arg = cq.poll_into, buf
    else:
        poll, arg = cq.poll, 16
    r = range(iters)
    t0 = time.perf_counter()
    for _ in r:
        poll(arg)
    t1 = time.perf_counter()
    for _ in r:
        pass
    t2 = time.perf_counter()
    if poll(arg):
        raise RuntimeError("CQ not empty")
    return ((t1 - t0) - (t2 - t1)) / iters * 1e9


def main(argv):
    variant = argv[0]
    gid0, gid1 = int(argv[1]), int(argv[2])
    global RELEASE_GIL
    fast = variant in ("fast", "fast-gil")
    RELEASE_GIL = variant == "fast-gil"
    write_rate = write_rate_fast if fast else write_rate_plain
    pingpong = pingpong_fast if fast else pingpong_plain
    s0, s1 = Side("rxe0", gid0), Side("rxe1", gid1)

    qa, qb = s0.qp(), s0.qp()
    connect(qa, s0, qb, s0)
    connect(qb, s0, qa, s0)
    write_rate(qa, s0.cq, s0, 1, 256)

    pa, pb = s0.qp(), s1.qp()
    connect(pa, s0, pb, s1)
    connect(pb, s1, pa, s0)
    pa.post_recv(pp_wrs(s0)[1])
    pb.post_recv(pp_wrs(s1)[1])
    pingpong(pa, s0, pb, s1, 20)
    drain(s0.cq)
    drain(s1.cq)
    print("READY", flush=True)

    for line in sys.stdin:
        cmd, n = line.split()
        n = int(n)
        if cmd == "write1":
            value = write_rate(qa, s0.cq, s0, 1, n)
        elif cmd == "write32":
            value = write_rate(qa, s0.cq, s0, 32, n)
        elif cmd == "pingpong":
            value = pingpong(pa, s0, pb, s1, n)
            drain(s0.cq)
            drain(s1.cq)
        elif cmd == "poll_empty":
            value = poll_empty(s0.cq, n, fast)
        else:
            raise SystemExit(f"unknown command {cmd}")
        print(f"RESULT {cmd} {value:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
