"""Example 3: one-sided read: the destination pulls the source tensor.

    torchrun --nproc-per-node 2 examples/rdma_read.py [--mib 1]

Rank 0 (the source) registers its tensor for remote reads only, and its QP
serves only REMOTE_READ; it broadcasts address, rkey and size over gloo
(once the tensor holds its final data: for a CUDA tensor, after the
producing stream is synchronized). Rank 1 (the destination) registers its
tensor with LOCAL_WRITE (the NIC writes the data read into it), posts one
RDMA_READ and waits for its own completion; the source CPU takes no part
and sees no completion. Rank 1 then checks the tensor with torch.equal, and
tells rank 0 over gloo that it may release its tensor (the closing barrier).
"""
import random
import sys
import time

import torch

import _common
import ibverbs as ib

A = ib.AccessFlags
SOURCE, DEST = 0, 1


def configure(parser):
    parser.add_argument("--mib", type=float, default=1.0, help="tensor size in MiB (default 1)")


def run(s, args):
    numel = max(1, int(args.mib * _common.MIB) // 4)
    cq = s.cq(16)
    qp = s.rc_qp(cq)
    psn = random.getrandbits(24)
    local = ib.local_qp_info(qp, s.ctx.query_port(s.port), s.gid, port=s.port, psn=psn)
    remote = ib.QPInfo.from_bytes(s.all_gather_bytes(local.to_bytes())[s.peer])
    ib.connect_rc(qp, remote, port=s.port, sgid_index=s.gid_index,
                  access=A.REMOTE_READ if s.rank == SOURCE else 0, local_psn=psn)

    expected = _common.pattern(numel, seed=3, device=s.tensor_device)
    if s.rank == SOURCE:
        src = expected.clone()
        mr = s.register(src, A.REMOTE_READ)
        s.before_post(src)              # CUDA: finished before the peer may read it
        s.broadcast_remote(mr.remote(), src=SOURCE)
        s.log(f"serving {src.nbytes} bytes ({_common.tensor_desc(src)}) for RDMA_READ")
        # Nothing to do until the reader is done: Session.close() waits for it.
    else:
        dst = torch.zeros(numel, dtype=torch.int32, device=s.tensor_device)
        mr = s.register(dst, A.LOCAL_WRITE)
        source = s.broadcast_remote(None, src=SOURCE)
        if not s.check(source.length == dst.nbytes,
                       f"source has {source.length} bytes, not {dst.nbytes}"):
            return
        t0 = time.perf_counter()
        qp.post_send(ib.SendWR(wr_id=7, sg_list=[mr.sge()], opcode=ib.WROpcode.RDMA_READ,
                               send_flags=ib.SendFlags.SIGNALED, remote_addr=source.addr,
                               rkey=source.rkey))
        (wc,) = s.poll(cq)
        elapsed = time.perf_counter() - t0
        s.check(wc.opcode == ib.WCOpcode.RDMA_READ and wc.wr_id == 7, f"unexpected completion {wc!r}")
        s.after_inbound(dst)            # CUDA: flush before reading dst
        s.check(torch.equal(dst, expected), "the tensor read differs from the source")
        s.report("reader", dst.nbytes, elapsed,
                 f" RDMA_READ from rank {SOURCE} ({_common.tensor_desc(dst)})")


if __name__ == "__main__":
    sys.exit(_common.main("rdma_read", run, configure))
