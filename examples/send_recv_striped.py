"""Example 4: two-sided SEND/RECV, a large tensor striped over several QPs.

    torchrun --nproc-per-node 2 examples/send_recv_striped.py \
        [--mib 4] [--qps 4] [--depth 4] [--chunk-kib 64]

The tensor is cut into chunks; chunk i travels on QP i % qps, so each QP
carries every qps-th chunk, in order. Both ranks share one CQ over all their
QPs and tell the QPs apart by ``wc.qp_num``.

Receiver (rank 1): before it tells the sender it is ready (a gloo barrier),
it pre-posts ``depth`` receives on every QP, each an SGE over the chunk of
the destination tensor that the QP's next SEND will carry (an RC QP consumes
its receives in order), with the chunk index as wr_id. Each receive
completion frees a slot, and the next receive for that QP is posted at once
(completion-driven refill).

Sender (rank 0): keeps up to ``depth`` SENDs outstanding on every QP; each
send completion posts the QP's next chunk. A SEND that arrives before its
receive is posted is answered with an RNR NAK and retried by the sender's
NIC (rnr_retry=7: no limit), so it is slower but never lost.

Both ranks print what they moved and how fast; the receiver checks every
completion's byte_len and the whole tensor with torch.equal.
"""
import random
import sys
import time

import torch

import _common
import ibverbs as ib

A = ib.AccessFlags
SENDER, RECEIVER = 0, 1


def configure(parser):
    parser.add_argument("--mib", type=float, default=4.0, help="tensor size in MiB (default 4)")
    parser.add_argument("--qps", type=int, default=4, help="QPs to stripe over (default 4)")
    parser.add_argument("--depth", type=int, default=4,
                        help="outstanding work requests per QP (default 4)")
    parser.add_argument("--chunk-kib", type=int, default=64, help="chunk size in KiB (default 64)")


def run(s, args):
    numel = max(1, int(args.mib * _common.MIB) // 4)
    per = max(1, args.chunk_kib * 1024 // 4)
    chunks = [(off, min(per, numel - off)) for off in range(0, numel, per)]  # (offset, numel)
    nqp, depth = max(1, args.qps), max(1, args.depth)

    # One CQ for all QPs: at most depth outstanding per QP on either side.
    cq = s.cq(nqp * depth)
    qps = [s.rc_qp(cq, max_send_wr=depth, max_recv_wr=depth) for _ in range(nqp)]
    psns = [random.getrandbits(24) for _ in qps]
    blob = b"".join(ib.local_qp_info(qp, s.ctx.query_port(s.port), s.gid, port=s.port, psn=psn)
                    .to_bytes() for qp, psn in zip(qps, psns))
    peer = s.all_gather_bytes(blob)[s.peer]
    for i, (qp, psn) in enumerate(zip(qps, psns)):
        remote = ib.QPInfo.from_bytes(peer[28 * i:28 * (i + 1)])
        # timeout=18 (about 1 s before a SEND is resent, NCCL's default) rather
        # than 14 (67 ms): a chunk is 64 packets at MTU 1024, and a slow peer
        # (Soft-RoCE on a loaded host) may ack it later than 67 ms; each
        # needless retry resends the whole chunk.
        ib.connect_rc(qp, remote, port=s.port, sgid_index=s.gid_index, access=0, local_psn=psn,
                      timeout=18)
    stripe = {qp.qp_num: q for q, qp in enumerate(qps)}       # wc.qp_num -> stripe
    todo = [list(range(q, len(chunks), nqp)) for q in range(nqp)]  # chunk indices per QP, in order
    expected = _common.pattern(numel, seed=4, device=s.tensor_device)

    if s.rank == RECEIVER:
        dst = torch.zeros(numel, dtype=torch.int32, device=s.tensor_device)
        mr = s.register(dst, A.LOCAL_WRITE)                   # written by the local NIC only

        def post_next(q):
            if todo[q]:
                c = todo[q].pop(0)
                off, n = chunks[c]
                qps[q].post_recv(ib.RecvWR(wr_id=c, sg_list=[mr.sge(n * 4, off * 4)]))

        for q in range(nqp):
            for _ in range(depth):
                post_next(q)
        s.barrier()                                           # "receives are posted"
        t0 = time.perf_counter()
        got = 0
        while got < len(chunks):
            for wc in s.poll(cq, nqp * depth):
                q, c = stripe[wc.qp_num], wc.wr_id
                s.check(wc.opcode == ib.WCOpcode.RECV and c % nqp == q
                        and wc.byte_len == chunks[c][1] * 4,
                        f"chunk {c} on QP {q}: unexpected completion {wc!r}")
                got += 1
                post_next(q)                                  # refill the slot just freed
        elapsed = time.perf_counter() - t0
        s.after_inbound(dst)                                  # CUDA: flush before reading dst
        s.check(torch.equal(dst, expected), "the received tensor differs from the source")
        s.report("receiver", dst.nbytes, elapsed,
                 f" in {len(chunks)} SENDs over {nqp} QPs (depth {depth})")
    else:
        src = expected.clone()
        mr = s.register(src, 0)
        s.before_post(src)                                    # CUDA: the producing stream must be done

        def post_next(q):
            if todo[q]:
                c = todo[q].pop(0)
                off, n = chunks[c]
                qps[q].post_send(ib.SendWR(wr_id=c, sg_list=[mr.sge(n * 4, off * 4)],
                                           opcode=ib.WROpcode.SEND, send_flags=ib.SendFlags.SIGNALED))

        s.barrier()                                           # wait for the receiver's receives
        t0 = time.perf_counter()
        for q in range(nqp):
            for _ in range(depth):
                post_next(q)
        done = 0
        while done < len(chunks):
            for wc in s.poll(cq, nqp * depth):
                done += 1
                post_next(stripe[wc.qp_num])                  # completion-driven: next chunk
        elapsed = time.perf_counter() - t0
        s.report("sender", src.nbytes, elapsed, f" in {len(chunks)} SENDs over {nqp} QPs (depth {depth})")


if __name__ == "__main__":
    sys.exit(_common.main("send_recv_striped", run, configure))
