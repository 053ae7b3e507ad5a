"""The ibverbs side of `make bench`: the workloads of bench/c_bench.c
through the Python bindings.

    python bench/py_bench.py VARIANT GID0 GID1   (then commands on stdin)

VARIANT
  plain  what a first program writes (the seed's API): SendWR/RecvWR
         objects built once and passed to post_send/post_recv, completions
         as WC objects from cq.poll(n).
  hot    the hot-loop API: work requests converted once into a PostList and
         posted many times, completions polled into a reusable WCBuffer
         (cq.poll_into), no object created per work request or completion.
  hot-gil  hot with PostList(release_gil=True): every post releases and
         retakes the GIL (to measure what that costs a single thread).

Speaks c_bench's protocol (READY, then commands answered with
"RESULT <workload> <value>"; see there).  The loops do what the C loops do
(same batches, same posting schedule, every status checked), written as a
Python programmer would.  bench/pyverbs_bench.py uses the plain loops.
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
SWEEP_WINDOW = 16
CQ_DEPTH = 256
MSG = 8
PP_RECVS = 16
BIG = 1 << 20
RDMA_WRITE, SEND = 0, 2          # WROpcode
SIGNALED = 2                     # SendFlags
WC_RECV = 128                    # WCOpcode.RECV
ACCESS = 1 | 2 | 4               # LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ


class Side:
    def __init__(self, name, gid_index):
        dev = next(d for d in ib.get_device_list() if d.name == name)
        self.ctx = dev.open()
        self.pd = self.ctx.alloc_pd()
        self.mem = mmap.mmap(-1, 4096)
        self.addr = ctypes.addressof(ctypes.c_char.from_buffer(self.mem))
        self.mr = self.pd.reg_mr(self.addr, 4096, ACCESS)
        self.big = mmap.mmap(-1, 2 * BIG)
        self.big_addr = ctypes.addressof(ctypes.c_char.from_buffer(self.big))
        self.big_mr = self.pd.reg_mr(self.big_addr, 2 * BIG, ACCESS)
        self.gid_index = gid_index
        self.gid = self.ctx.query_gid(PORT, gid_index)
        self.port_attr = self.ctx.query_port(PORT)

    def cq(self):
        return self.ctx.create_cq(CQ_DEPTH)

    def qp(self, cq):
        return self.pd.create_qp(ib.QPInitAttr(
            cq, cq, qp_type=ib.QPType.RC, max_send_wr=WINDOW, max_recv_wr=64,
            max_send_sge=1, max_recv_sge=1, max_inline_data=0))


def connect(qp, local, peer, remote):
    info = ib.local_qp_info(peer, remote.port_attr, remote.gid, port=PORT, psn=0)
    ib.connect_rc(qp, info, port=PORT, sgid_index=local.gid_index, access=ACCESS, local_psn=0)


def write_wrs(mr, addr, length, batch, signal_all, offset=0):
    return [ib.SendWR(wr_id=i, sg_list=[ib.SGE(mr, length, offset=offset)], opcode=RDMA_WRITE,
                      send_flags=SIGNALED if signal_all or i == batch - 1 else 0,
                      remote_addr=addr, rkey=mr.rkey) for i in range(batch)]


# ---- plain API ----------------------------------------------------------

def write_strict_plain(qp, cq, s, batch, total):
    wrs = write_wrs(s.mr, s.addr + 2048, MSG, batch, False)
    item = wrs[0] if batch == 1 else wrs
    post, poll = qp.post_send, cq.poll
    t0 = time.perf_counter()
    for _ in range(total // batch):
        post(item)
        while not (wcs := poll(1)):
            pass
        if wcs[0].status:
            raise RuntimeError(f"completion status {wcs[0].status}")
    return total / (time.perf_counter() - t0)


def write_build(qp, cq, s, total):
    """write_b1 with the requests built per message, as a program that
    does not keep them writes it (the hot variant too: no PostList)."""
    mr, addr, remote, rkey = s.mr, s.addr, s.addr + 2048, s.mr.rkey
    lkey = mr.lkey
    post, poll = qp.post_send, cq.poll
    t0 = time.perf_counter()
    for i in range(total):
        post(ib.SendWR(wr_id=i, sg_list=[ib.SGE(addr, MSG, lkey)], opcode=RDMA_WRITE,
                       send_flags=SIGNALED, remote_addr=remote, rkey=rkey))
        while not (wcs := poll(1)):
            pass
        if wcs[0].status:
            raise RuntimeError(f"completion status {wcs[0].status}")
    return total / (time.perf_counter() - t0)


def write_windowed_plain(qp, cq, wr, window, total):
    post, poll = qp.post_send, cq.poll
    # C's loop: fill the window, then each completion frees a slot,
    # refilled at once while WRs are left.
    left = total - min(window, total)
    done = 0
    t0 = time.perf_counter()
    for _ in range(total - left):
        post(wr)
    while done < total:
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
                    post(wr)
                    n -= 1
    rate = total / (time.perf_counter() - t0)
    if cq.poll(16):
        raise RuntimeError("completions left over: the loop miscounted")
    return rate


def pingpong_plain(a, b, iters):
    (send_a, recv_a, qa, cqa), (send_b, recv_b, qb, cqb) = a, b
    send_on_a, recv_on_a, poll_a = qa.post_send, qa.post_recv, cqa.poll
    send_on_b, recv_on_b, poll_b = qb.post_send, qb.post_recv, cqb.poll
    t0 = time.perf_counter()
    for _ in range(iters):
        send_on_a(send_a)
        got = 0
        while not got:
            for wc in poll_b(16):
                if wc.status:
                    raise RuntimeError(f"completion status {wc.status}")
                if wc.opcode == WC_RECV:
                    got += 1
        for _ in range(got):
            recv_on_b(recv_b)
        send_on_b(send_b)
        got = 0
        while not got:
            for wc in poll_a(16):
                if wc.status:
                    raise RuntimeError(f"completion status {wc.status}")
                if wc.opcode == WC_RECV:
                    got += 1
        for _ in range(got):
            recv_on_a(recv_a)
    return (time.perf_counter() - t0) / iters * 1e6


# ---- hot-loop API -------------------------------------------------------

RELEASE_GIL = False


def write_strict_hot(qp, cq, s, batch, total):
    plist = ib.PostList(write_wrs(s.mr, s.addr + 2048, MSG, batch, False),
                        release_gil=RELEASE_GIL)
    buf = ib.WCBuffer(1, raise_on_error=True)     # poll_into checks every status
    post, poll_into = qp.post_send, cq.poll_into
    t0 = time.perf_counter()
    for _ in range(total // batch):
        post(plist)
        while not poll_into(buf):
            pass
    return total / (time.perf_counter() - t0)


def write_windowed_hot(qp, cq, wr, window, total):
    plist = ib.PostList([wr], release_gil=RELEASE_GIL)
    buf = ib.WCBuffer(16, raise_on_error=True)
    post, poll_into = qp.post_send, cq.poll_into
    left = total - min(window, total)
    done = 0
    t0 = time.perf_counter()
    for _ in range(total - left):
        post(plist)
    while done < total:
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


def pingpong_hot(a, b, iters):
    (send_a, recv_a, qa, cqa), (send_b, recv_b, qb, cqb) = a, b
    send_a, recv_a, send_b, recv_b = (ib.PostList([w], release_gil=RELEASE_GIL)
                                      for w in (send_a, recv_a, send_b, recv_b))
    buf = ib.WCBuffer(16, raise_on_error=True)     # poll_into checks every status
    recvs = buf.count_opcode
    send_on_a, recv_on_a, poll_a = qa.post_send, qa.post_recv, cqa.poll_into
    send_on_b, recv_on_b, poll_b = qb.post_send, qb.post_recv, cqb.poll_into
    t0 = time.perf_counter()
    for _ in range(iters):
        send_on_a(send_a)
        while not (poll_b(buf) and (got := recvs(WC_RECV))):
            pass
        for _ in range(got):
            recv_on_b(recv_b)
        send_on_b(send_b)
        while not (poll_a(buf) and (got := recvs(WC_RECV))):
            pass
        for _ in range(got):
            recv_on_a(recv_a)
    return (time.perf_counter() - t0) / iters * 1e6


def pingpong_post(a, b, iters, hot):
    """"<in>:<total>": microseconds per round trip spent inside post_send,
    and the whole round trip of the same loop; the ping-pong otherwise as
    pingpong_plain/pingpong_hot run it (rxe runs the whole transfer in the
    post's doorbell system call: c_bench's pingpong_post times the same
    calls)."""
    (send_a, recv_a, qa, cqa), (send_b, recv_b, qb, cqb) = a, b
    if hot:
        send_a, recv_a, send_b, recv_b = (ib.PostList([w], release_gil=RELEASE_GIL)
                                          for w in (send_a, recv_a, send_b, recv_b))
    buf = ib.WCBuffer(16, raise_on_error=True)
    clock = time.perf_counter
    in_post = 0.0
    t0 = clock()

    def wait(cq):
        got = 0
        while not got:
            if hot:
                if cq.poll_into(buf):
                    got = buf.count_opcode(WC_RECV)
                continue
            for wc in cq.poll(16):
                if wc.status:
                    raise RuntimeError(f"completion status {wc.status}")
                if wc.opcode == WC_RECV:
                    got += 1
        return got

    for _ in range(iters):
        t = clock()
        qa.post_send(send_a)
        in_post += clock() - t
        for _ in range(wait(cqb)):
            qb.post_recv(recv_b)
        t = clock()
        qb.post_send(send_b)
        in_post += clock() - t
        for _ in range(wait(cqa)):
            qa.post_recv(recv_a)
    total = clock() - t0
    return f"{in_post / iters * 1e6:.3f}:{total / iters * 1e6:.3f}"


def poll_empty(cq, iters, hot):
    """Nanoseconds per empty poll of 16, the loop's own cost subtracted."""
    if hot:
        poll, arg = cq.poll_into, ib.WCBuffer(16)
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


def call_floor(iters):
    """Nanoseconds per call of the cheapest builtin taking one argument
    (abs of a small int), measured like poll_empty: what any one-argument
    call from a Python loop costs here, before it does anything."""
    f, r = abs, range(iters)
    t0 = time.perf_counter()
    for _ in r:
        f(16)
    t1 = time.perf_counter()
    for _ in r:
        pass
    t2 = time.perf_counter()
    return ((t1 - t0) - (t2 - t1)) / iters * 1e9


def pp_end(s, qp, cq, big, size=MSG):
    """(SEND, RECV, qp, cq) of one ping-pong side: 8-byte messages in the
    small buffer, or the sweep's in the big one (receives of BIG bytes)."""
    mr = s.big_mr if big else s.mr
    recv_off, recv_len = (BIG, BIG) if big else (1024, MSG)
    send = ib.SendWR(wr_id=1, sg_list=[ib.SGE(mr, size)], opcode=SEND, send_flags=SIGNALED)
    recv = ib.RecvWR(wr_id=2, sg_list=[ib.SGE(mr, recv_len, offset=recv_off)])
    return send, recv, qp, cq


def main(argv):
    variant = argv[0]
    gid0, gid1 = int(argv[1]), int(argv[2])
    global RELEASE_GIL
    hot = variant in ("hot", "hot-gil")
    RELEASE_GIL = variant == "hot-gil"
    write_strict = write_strict_hot if hot else write_strict_plain
    write_windowed = write_windowed_hot if hot else write_windowed_plain
    pingpong = pingpong_hot if hot else pingpong_plain
    s0, s1 = Side("rxe0", gid0), Side("rxe1", gid1)

    wcq, empty_cq = s0.cq(), s0.cq()
    qa, qb = s0.qp(wcq), s0.qp(wcq)
    connect(qa, s0, qb, s0)
    connect(qb, s0, qa, s0)

    pcq0, pcq1 = s0.cq(), s1.cq()
    pa, pb, sa, sb = s0.qp(pcq0), s1.qp(pcq1), s0.qp(pcq0), s1.qp(pcq1)
    for x, lx, y, ly in ((pa, s0, pb, s1), (pb, s1, pa, s0), (sa, s0, sb, s1), (sb, s1, sa, s0)):
        connect(x, lx, y, ly)
    ea, eb = pp_end(s0, pa, pcq0, False), pp_end(s1, pb, pcq1, False)
    for end in (ea, eb, pp_end(s0, sa, pcq0, True), pp_end(s1, sb, pcq1, True)):
        for _ in range(PP_RECVS):
            end[2].post_recv(end[1])
    window_wr = write_wrs(s0.mr, s0.addr + 2048, MSG, 1, True)[0]

    write_strict(qa, wcq, s0, 1, 256)
    pingpong(ea, eb, 20)
    print("READY", flush=True)

    for line in sys.stdin:
        cmd, *args = line.split()
        n = int(args[-1])
        size = int(args[0]) if len(args) == 2 else MSG
        if cmd == "write_b1":
            value = write_strict(qa, wcq, s0, 1, n)
        elif cmd == "write_b1_build":
            value = write_build(qa, wcq, s0, n)
        elif cmd == "write_b32":
            value = write_strict(qa, wcq, s0, 32, n)
        elif cmd == "write_window":
            value = write_windowed(qa, wcq, window_wr, WINDOW, n)
        elif cmd == "pingpong":
            value = pingpong(ea, eb, n)
        elif cmd == "pingpong_post":
            value = pingpong_post(ea, eb, n, hot)
        elif cmd == "poll_empty":
            value = poll_empty(empty_cq, n, hot)
        elif cmd == "call_floor":
            value = call_floor(n)
        elif cmd == "bw":
            wr = write_wrs(s0.big_mr, s0.big_addr + BIG, size, 1, True)[0]
            value = write_windowed(qa, wcq, wr, SWEEP_WINDOW, n) * size / 1e6
        elif cmd == "lat":
            # the sweep pair's receives stay posted between measurements
            value = pingpong(pp_end(s0, sa, pcq0, True, size), pp_end(s1, sb, pcq1, True, size), n)
        else:
            raise SystemExit(f"unknown command {cmd}")
        print(f"RESULT {cmd} {value if isinstance(value, str) else f'{value:.3f}'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
