"""Example 2: one-sided write that notifies the receiver (RDMA_WRITE_WITH_IMM).

    torchrun --nproc-per-node 2 examples/write_with_imm.py [--mib 1] [--chunks 8]

Rank 1 (the receiver) registers a tensor for remote writes, pre-posts one
receive per expected message (a write-with-immediate consumes a receive
but no SGE: the data goes where the writer says), and broadcasts the
tensor's address and rkey over gloo. Rank 0 writes its tensor into it in
``--chunks`` pieces with RDMA_WRITE_WITH_IMM, the chunk index as the 32-bit
immediate.

The receiver learns of each write from its own receive completion: opcode
RECV_RDMA_WITH_IMM, the WITH_IMM flag, the immediate value (which chunk
landed) and byte_len (how many bytes). gloo is not involved on the data
path. Once every chunk is in, it checks the tensor with torch.equal.
"""
import random
import sys
import time

import torch

import _common
import ibverbs as ib

A = ib.AccessFlags
WRITER, RECEIVER = 0, 1


def configure(parser):
    parser.add_argument("--mib", type=float, default=1.0, help="tensor size in MiB (default 1)")
    parser.add_argument("--chunks", type=int, default=8, help="writes, one immediate each (default 8)")


def run(s, args):
    numel = max(1, int(args.mib * _common.MIB) // 4)
    chunks = max(1, min(args.chunks, numel))
    per = -(-numel // chunks)                       # elements per chunk (the last may be short)
    spans = [(i * per, min(per, numel - i * per)) for i in range(chunks) if i * per < numel]
    depth = len(spans)

    cq = s.cq(2 * depth)
    qp = s.rc_qp(cq, max_send_wr=depth, max_recv_wr=depth)
    psn = random.getrandbits(24)
    local = ib.local_qp_info(qp, s.ctx.query_port(s.port), s.gid, port=s.port, psn=psn)
    remote = ib.QPInfo.from_bytes(s.all_gather_bytes(local.to_bytes())[s.peer])
    ib.connect_rc(qp, remote, port=s.port, sgid_index=s.gid_index,
                  access=A.REMOTE_WRITE if s.rank == RECEIVER else 0, local_psn=psn)

    expected = _common.pattern(numel, seed=2, device=s.tensor_device)
    if s.rank == RECEIVER:
        dst = torch.zeros(numel, dtype=torch.int32, device=s.tensor_device)
        mr = s.register(dst, A.LOCAL_WRITE | A.REMOTE_WRITE)
        # Receives first, then tell the writer where to write: the
        # broadcast is also the "ready" signal.
        qp.post_recv([ib.RecvWR(wr_id=1000 + i) for i in range(depth)])
        s.broadcast_remote(mr.remote(), src=RECEIVER)
        t0 = time.perf_counter()
        seen = set()
        while len(seen) < depth:
            for wc in s.poll(cq, depth):
                i = wc.imm_data                     # host order, as the writer set it
                if not s.check(wc.opcode == ib.WCOpcode.RECV_RDMA_WITH_IMM
                               and wc.wc_flags & ib.WCFlags.WITH_IMM
                               and 0 <= i < depth and i not in seen,
                               f"unexpected receive completion {wc!r}"):
                    return                          # exit status 1
                s.check(wc.byte_len == spans[i][1] * 4,
                        f"chunk {i}: byte_len {wc.byte_len}, expected {spans[i][1] * 4}")
                seen.add(i)
        elapsed = time.perf_counter() - t0
        s.after_inbound(dst)                        # CUDA: flush before reading dst
        s.check(torch.equal(dst, expected), "the written tensor differs from the source")
        s.report("receiver", dst.nbytes, elapsed,
                 f" in {depth} RDMA_WRITE_WITH_IMM from rank {WRITER}, immediates 0..{depth - 1}")
    else:
        src = expected.clone()
        mr = s.register(src, 0)
        target = s.broadcast_remote(None, src=RECEIVER)
        s.check(target.length == src.nbytes, f"peer tensor has {target.length} bytes, not {src.nbytes}")
        s.before_post(src)                          # CUDA: the producing stream must be done
        wrs = [ib.SendWR(wr_id=i, sg_list=[mr.sge(n * 4, off * 4)],
                         opcode=ib.WROpcode.RDMA_WRITE_WITH_IMM, send_flags=ib.SendFlags.SIGNALED,
                         remote_addr=target.addr + off * 4, rkey=target.rkey, imm_data=i)
               for i, (off, n) in enumerate(spans)]
        t0 = time.perf_counter()
        qp.post_send(wrs)                           # one call posts the whole chain
        s.poll_all(cq, depth)
        elapsed = time.perf_counter() - t0
        s.report("writer", src.nbytes, elapsed,
                 f" in {depth} RDMA_WRITE_WITH_IMM to rank {RECEIVER}")


if __name__ == "__main__":
    sys.exit(_common.main("write_with_imm", run, configure))
