"""The pyverbs side of `make bench`: the workloads of bench/c_bench.c through
Debian's python3-pyverbs, run with /usr/bin/python3 (what it is built for).

    /usr/bin/python3 bench/pyverbs_bench.py GID0 GID1   (then commands on stdin)

Speaks c_bench's protocol (READY, then commands answered with
"RESULT <workload> <value>").  The loops are bench/py_bench.py's plain
ones; a batch is a SendWR chain linked with next_wr, built once and posted
many times (pyverbs' own way of posting a list).  QPs are created with
sq_sig_all=0 (pyverbs' default is 1), as in C.
"""
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

PORT = 1
WINDOW = 128
SWEEP_WINDOW = 16
CQ_DEPTH = 256
MSG = 8
PP_RECVS = 16
BIG = 1 << 20
ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ


class Side:
    def __init__(self, name, gid_index):
        self.ctx = Context(name=name)
        self.pd = PD(self.ctx)
        self.mr = MR(self.pd, 4096, ACCESS)
        self.addr = self.mr.buf
        self.big_mr = MR(self.pd, 2 * BIG, ACCESS)
        self.big_addr = self.big_mr.buf
        self.gid_index = gid_index
        self.gid = self.ctx.query_gid(PORT, gid_index)
        self.mtu = self.ctx.query_port(PORT).active_mtu

    def cq(self):
        return CQ(self.ctx, CQ_DEPTH, None, None, 0)

    def qp(self, cq):
        cap = QPCap(max_send_wr=WINDOW, max_recv_wr=64, max_send_sge=1, max_recv_sge=1)
        # sq_sig_all=0: only SIGNALED requests complete (pyverbs defaults to 1)
        return QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap,
                                      sq_sig_all=0))


def connect(qp, local, peer, remote):
    """RESET -> INIT -> RTR -> RTS with the attributes ibverbs.connect_rc uses."""
    a = QPAttr()
    a.qp_state = e.IBV_QPS_INIT
    a.pkey_index = 0
    a.port_num = PORT
    a.qp_access_flags = ACCESS
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    a = QPAttr()
    a.qp_state = e.IBV_QPS_RTR
    a.path_mtu = min(local.mtu, remote.mtu)
    a.dest_qp_num = peer.qp_num
    a.rq_psn = 0
    a.max_dest_rd_atomic = 1
    a.min_rnr_timer = 12
    gr = GlobalRoute(dgid=remote.gid, sgid_index=local.gid_index, hop_limit=1)
    a.ah_attr = AHAttr(gr=gr, is_global=1, port_num=PORT)
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN |
              e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
    a = QPAttr()
    a.qp_state = e.IBV_QPS_RTS
    a.timeout = 14
    a.retry_cnt = 7
    a.rnr_retry = 7
    a.sq_psn = 0
    a.max_rd_atomic = 1
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY |
              e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC)


def write_chain(addr, length, lkey, remote, rkey, batch, signal_all):
    wrs = []
    for i in range(batch):
        wr = SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                    sg=[SGE(addr, length, lkey)],
                    send_flags=e.IBV_SEND_SIGNALED if signal_all or i == batch - 1 else 0)
        wr.set_wr_rdma(rkey, remote)
        wrs.append(wr)
    for a, b in zip(wrs, wrs[1:]):
        a.next_wr = b
    return wrs


def write_strict(qp, cq, s, batch, total):
    head = write_chain(s.addr, MSG, s.mr.lkey, s.addr + 2048, s.mr.rkey, batch, False)[0]
    post, poll = qp.post_send, cq.poll
    t0 = time.perf_counter()
    for _ in range(total // batch):
        post(head)
        while not (got := poll(1))[0]:
            pass
        if got[1][0].status:
            raise RuntimeError(f"completion status {got[1][0].status}")
    return total / (time.perf_counter() - t0)


def write_build(qp, cq, s, total):
    """write_b1 with the SGE and SendWR built per message."""
    addr, lkey, remote, rkey = s.addr, s.mr.lkey, s.addr + 2048, s.mr.rkey
    post, poll = qp.post_send, cq.poll
    t0 = time.perf_counter()
    for i in range(total):
        wr = SendWR(wr_id=i, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(addr, MSG, lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(rkey, remote)
        post(wr)
        while not (got := poll(1))[0]:
            pass
        if got[1][0].status:
            raise RuntimeError(f"completion status {got[1][0].status}")
    return total / (time.perf_counter() - t0)


def write_windowed(qp, cq, wr, window, total):
    post, poll = qp.post_send, cq.poll
    left = total - min(window, total)
    done = 0
    t0 = time.perf_counter()
    for _ in range(total - left):
        post(wr)
    while done < total:
        n = 0
        for wc in poll(16)[1]:
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
    if cq.poll(16)[0]:
        raise RuntimeError("completions left over: the loop miscounted")
    return rate


def pp_end(s, qp, cq, big, size=MSG):
    """(SEND, RECV, qp, cq) of one ping-pong side (see bench/py_bench.py)."""
    mr, addr = (s.big_mr, s.big_addr) if big else (s.mr, s.addr)
    recv_off, recv_len = (BIG, BIG) if big else (1024, MSG)
    send = SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(addr, size, mr.lkey)],
                  send_flags=e.IBV_SEND_SIGNALED)
    recv = RecvWR(wr_id=2, num_sge=1, sg=[SGE(addr + recv_off, recv_len, mr.lkey)])
    return send, recv, qp, cq


def pingpong(a, b, iters):
    (send_a, recv_a, qa, cqa), (send_b, recv_b, qb, cqb) = a, b
    send_on_a, recv_on_a, poll_a = qa.post_send, qa.post_recv, cqa.poll
    send_on_b, recv_on_b, poll_b = qb.post_send, qb.post_recv, cqb.poll
    WC_RECV = e.IBV_WC_RECV
    t0 = time.perf_counter()
    for _ in range(iters):
        send_on_a(send_a)
        got = 0
        while not got:
            for wc in poll_b(16)[1]:
                if wc.status:
                    raise RuntimeError(f"completion status {wc.status}")
                if wc.opcode == WC_RECV:
                    got += 1
        for _ in range(got):
            recv_on_b(recv_b)
        send_on_b(send_b)
        got = 0
        while not got:
            for wc in poll_a(16)[1]:
                if wc.status:
                    raise RuntimeError(f"completion status {wc.status}")
                if wc.opcode == WC_RECV:
                    got += 1
        for _ in range(got):
            recv_on_a(recv_a)
    return (time.perf_counter() - t0) / iters * 1e6


def poll_empty(cq, iters):
    poll = cq.poll
    r = range(iters)
    t0 = time.perf_counter()
    for _ in r:
        poll(16)
    t1 = time.perf_counter()
    for _ in r:
        pass
    t2 = time.perf_counter()
    if poll(16)[0]:
        raise RuntimeError("CQ not empty")
    return ((t1 - t0) - (t2 - t1)) / iters * 1e9


def main(argv):
    gid0, gid1 = int(argv[0]), int(argv[1])
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
    window_wr = write_chain(s0.addr, MSG, s0.mr.lkey, s0.addr + 2048, s0.mr.rkey, 1, True)[0]

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
        elif cmd == "poll_empty":
            value = poll_empty(empty_cq, n)
        elif cmd == "bw":
            wr = write_chain(s0.big_addr, size, s0.big_mr.lkey, s0.big_addr + BIG,
                             s0.big_mr.rkey, 1, True)[0]
            value = write_windowed(qa, wcq, wr, SWEEP_WINDOW, n) * size / 1e6
        elif cmd == "lat":
            value = pingpong(pp_end(s0, sa, pcq0, True, size), pp_end(s1, sb, pcq1, True, size), n)
        else:
            raise SystemExit(f"unknown command {cmd}")
        print(f"RESULT {cmd} {value:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
