"""Example 1: bootstrap an RC connection between two torchrun ranks.

    torchrun --nproc-per-node 2 examples/rc_bootstrap.py [--mib 1]

Each rank opens its own device and creates one RC QP. The 28-byte
``QPInfo.to_bytes()`` records (QP number, PSN, LID, GID, port, MTU) travel
over gloo with ``all_gather``; both ranks then call ``connect_rc`` with the
peer's record. Each QP allows only the remote operations its rank serves:
rank 1 lets rank 0 write into one tensor (REMOTE_WRITE), rank 0 serves
nothing (access 0).

To show the connection works, rank 0 RDMA-writes a tensor into rank 1's
tensor (address and rkey broadcast over gloo). A plain RDMA write leaves no
trace on the receiver, so rank 0 tells rank 1 over gloo (a barrier) once its
own completion has arrived; rank 1 then checks the tensor with torch.equal.
(Example 2 replaces that barrier with a write-with-immediate.)
"""
import random
import sys
import time

import torch

import _common
import ibverbs as ib

A = ib.AccessFlags
WRITER, TARGET = 0, 1


def configure(parser):
    parser.add_argument("--mib", type=float, default=1.0, help="tensor size in MiB (default 1)")


def run(s, args):
    numel = max(1, int(args.mib * _common.MIB) // 4)

    # 1. One CQ and one RC QP per rank, on this rank's own device.
    cq = s.cq(16)
    qp = s.rc_qp(cq)

    # 2. Exchange the connection records over gloo. all_gather needs one
    #    fixed-size tensor per rank: QPInfo.to_bytes() is always 28 bytes.
    psn = random.getrandbits(24)
    local = ib.local_qp_info(qp, s.ctx.query_port(s.port), s.gid, port=s.port, psn=psn)
    records = s.all_gather_bytes(local.to_bytes())
    remote = ib.QPInfo.from_bytes(records[s.peer])
    s.log(f"local QP {local.qp_num:#x} psn {psn:#x} <-> remote QP {remote.qp_num:#x} "
          f"psn {remote.psn:#x} (GID {ib.Gid(remote.gid)})")

    # 3. Connect. The QP's access flags say which remote operations the peer
    #    may perform on this rank's memory: only what this rank serves.
    qp_access = A.REMOTE_WRITE if s.rank == TARGET else 0
    t0 = time.perf_counter()
    ib.connect_rc(qp, remote, port=s.port, sgid_index=s.gid_index, access=qp_access,
                  local_psn=psn)
    s.barrier()  # both QPs are in RTS before anything is posted
    s.log(f"connected ({ib.QPState(qp.state).name}) in {(time.perf_counter() - t0) * 1e3:.1f} ms")

    # 4. Use it: rank 0 writes a tensor into rank 1's tensor.
    expected = _common.pattern(numel, seed=1, device=s.tensor_device)
    if s.rank == TARGET:
        dst = torch.zeros(numel, dtype=torch.int32, device=s.tensor_device)
        mr = s.register(dst, A.LOCAL_WRITE | A.REMOTE_WRITE)
        s.broadcast_remote(mr.remote(), src=TARGET)   # addr, rkey, length: 20 bytes
        t0 = time.perf_counter()
        s.barrier()                      # "rank 0's write has completed"
        elapsed = time.perf_counter() - t0
        s.after_inbound(dst)             # CUDA: flush before reading dst
        s.check(torch.equal(dst, expected), "the written tensor differs from the source")
        s.report("target", dst.nbytes, elapsed, f" written by rank {WRITER} ({_common.tensor_desc(dst)})")
    else:
        src = expected.clone()
        mr = s.register(src, 0)          # the NIC only reads it: no access flag
        target = s.broadcast_remote(None, src=TARGET)
        s.check(target.length == src.nbytes, f"peer tensor has {target.length} bytes, not {src.nbytes}")
        s.before_post(src)               # CUDA: the producing stream must be done
        t0 = time.perf_counter()
        qp.post_send(ib.SendWR(wr_id=1, sg_list=[mr.sge()], opcode=ib.WROpcode.RDMA_WRITE,
                               send_flags=ib.SendFlags.SIGNALED, remote_addr=target.addr,
                               rkey=target.rkey))
        (wc,) = s.poll(cq)               # RC: acknowledged by the peer's NIC
        elapsed = time.perf_counter() - t0
        s.check(wc.wr_id == 1 and wc.opcode == ib.WCOpcode.RDMA_WRITE, f"unexpected completion {wc}")
        s.barrier()                      # tell rank 1 the data is there
        s.report("writer", src.nbytes, elapsed, f" RDMA_WRITE to rank {TARGET}")


if __name__ == "__main__":
    sys.exit(_common.main("rc_bootstrap", run, configure))
