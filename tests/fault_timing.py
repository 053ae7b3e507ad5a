"""How long a dead peer or a receiver that never posts goes unnoticed.

Run inside the Soft-RoCE VM (the README's timeout table comes from it):

    flock /tmp/ibverbs-vm.lock tests/vm/run-in-vm .venv/bin/python tests/fault_timing.py

A dead peer: an RC QP on rxe0 connected to a QP on rxe1 that is then
destroyed (what the kernel does to a SIGKILLed process's QPs); rxe drops
packets for a QP number that no longer exists, so the requester retries
until `retry_cnt` is spent, waiting `timeout` (4.096 us * 2**timeout) for
each acknowledgement.  Not ready: a SEND to a QP with no receive posted,
which answers each try with an RNR NAK telling the sender to wait
`min_rnr_timer` (set on the receiver) before trying again, `rnr_retry`
times.
"""
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import ibverbs as ib  # noqa: E402
import rxe  # noqa: E402

PORT = 1
ACCESS = ib.AccessFlags.LOCAL_WRITE | ib.AccessFlags.REMOTE_WRITE
# ibv_modify_qp(3): min_rnr_timer codes -> milliseconds
RNR_MS = {1: 0.01, 12: 0.64, 14: 1.28, 18: 5.12, 22: 20.48, 26: 81.92, 31: 491.52}


def _open(name):
    return next(d for d in ib.get_device_list() if d.name == name).open()


def _qp(pd, cq):
    return pd.create_qp(ib.QPInitAttr(cq, cq, qp_type=ib.QPType.RC))


def _info(qp, ctx, gid_index, psn):
    return ib.local_qp_info(qp, ctx.query_port(PORT), ctx.query_gid(PORT, gid_index), port=PORT,
                            psn=psn)


def _wait(cq, limit):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        wcs = cq.poll(1)
        if wcs:
            return wcs[0]
    return None


def dead_peer(ends, timeout, retry_cnt, limit=30.0):
    """Seconds to RETRY_EXC_ERR, or None when none came within limit."""
    (ctx_a, pd_a, gid_a, mr_a), (ctx_b, pd_b, gid_b, mr_b) = ends
    with ctx_a.create_cq(4) as cq_a, ctx_b.create_cq(4) as cq_b:
        a, b = _qp(pd_a, cq_a), _qp(pd_b, cq_b)
        ib.connect_rc(a, _info(b, ctx_b, gid_b, 2), port=PORT, sgid_index=gid_a, access=ACCESS,
                      local_psn=1, timeout=timeout, retry_cnt=retry_cnt)
        ib.connect_rc(b, _info(a, ctx_a, gid_a, 1), port=PORT, sgid_index=gid_b, access=ACCESS,
                      local_psn=2)
        b.close()
        t0 = time.monotonic()
        a.post_send(ib.SendWR(wr_id=1, sg_list=[mr_a.sge(64)], opcode=ib.WROpcode.RDMA_WRITE,
                              remote_addr=mr_b.addr, rkey=mr_b.rkey,
                              send_flags=ib.SendFlags.SIGNALED))
        wc = _wait(cq_a, limit)
        took = time.monotonic() - t0
        a.close()
    if wc is None:
        return None
    assert wc.status == ib.WCStatus.RETRY_EXC_ERR, wc
    return took


def not_ready(ends, rnr_retry, min_rnr_timer):
    (ctx_a, pd_a, gid_a, mr_a), (ctx_b, pd_b, gid_b, mr_b) = ends
    with ctx_a.create_cq(4) as cq_a, ctx_b.create_cq(4) as cq_b:
        a, b = _qp(pd_a, cq_a), _qp(pd_b, cq_b)
        ib.connect_rc(a, _info(b, ctx_b, gid_b, 2), port=PORT, sgid_index=gid_a, access=ACCESS,
                      local_psn=1, rnr_retry=rnr_retry)
        ib.connect_rc(b, _info(a, ctx_a, gid_a, 1), port=PORT, sgid_index=gid_b, access=ACCESS,
                      local_psn=2, min_rnr_timer=min_rnr_timer)
        t0 = time.monotonic()
        a.post_send(ib.SendWR(wr_id=1, sg_list=[mr_a.sge(64)], opcode=ib.WROpcode.SEND,
                              send_flags=ib.SendFlags.SIGNALED))
        wc = _wait(cq_a, 60.0)
        took = time.monotonic() - t0
        a.close()
        b.close()
    assert wc.status == ib.WCStatus.RNR_RETRY_EXC_ERR, wc
    return took


def main():
    ends = []
    for name in ("rxe0", "rxe1"):
        ctx = _open(name)
        pd = ctx.alloc_pd()
        mr = pd.reg_mr(bytearray(4096), ACCESS)
        ends.append((ctx, pd, rxe.roce_v2_ipv4_gid_index(name, PORT), mr))
    print("dead peer: time to RETRY_EXC_ERR (median of 3)")
    print("timeout  ack wait  retry_cnt  theory (wait*(retry_cnt+1))  measured")
    for timeout, retry_cnt in ((8, 1), (10, 1), (12, 3), (14, 1), (14, 6), (16, 6), (18, 6)):
        runs = sorted(dead_peer(ends, timeout, retry_cnt) for _ in range(3))
        wait = 4.096e-6 * 2 ** timeout
        print(f"{timeout:7}  {wait * 1e3:6.1f} ms  {retry_cnt:9}  {wait * (retry_cnt + 1):10.3f} s"
              f"                  {runs[1]:.3f} s")
    # rxe (rdma_rxe, rxe_comp.c) treats retry_cnt=7 as "retry forever", as
    # the spec does only for rnr_retry=7; hardware retries 7 times.
    took = dead_peer(ends, 14, 7, limit=10.0)
    print(f"     14    67.1 ms          7  (hardware: 0.537 s)            "
          f"{'none within 10 s' if took is None else f'{took:.3f} s'}")
    print("receiver not ready: time to RNR_RETRY_EXC_ERR (median of 3)")
    print("rnr_retry  min_rnr_timer  theory (rnr_retry*timer)  measured")
    for rnr_retry, timer in ((0, 12), (1, 12), (6, 1), (6, 12), (6, 22), (3, 31)):
        runs = sorted(not_ready(ends, rnr_retry, timer) for _ in range(3))
        print(f"{rnr_retry:9}  {timer:4} ({RNR_MS[timer]:6.2f} ms)  {rnr_retry * RNR_MS[timer] / 1e3:10.3f} s"
              f"             {runs[1]:.3f} s")
    for ctx, pd, _, mr in ends:
        mr.close()
        pd.close()
        ctx.close()


if __name__ == "__main__":
    main()
