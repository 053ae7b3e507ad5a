"""RC between the two devices (rxe0 on 10.0.0.1 <-> rxe1 on 10.0.0.2)."""
import pytest

from conftest import RCPair, poll_until


@pytest.fixture
def cross_pair(ib, ctx, ctx2, port, gid_index, gid_index2, access):
    if ctx.name == ctx2.name:
        pytest.skip("needs two devices")
    pd_a, pd_b = ctx.alloc_pd(), ctx2.alloc_pd()
    pair = RCPair(ib, pd_a, pd_b, port, gid_index, gid_index2, access)
    pair.pds = (pd_a, pd_b)
    yield pair
    pair.close()
    pd_a.close()
    pd_b.close()


def test_rdma_write_across_devices(ib, cross_pair, access):
    import numpy as np
    pd_a, pd_b = cross_pair.pds
    src = np.full(8192, 0x3C, dtype=np.uint8)
    dst = np.zeros(8192, dtype=np.uint8)
    with pd_a.reg_mr(src.ctypes.data, src.nbytes, access) as smr, \
            pd_b.reg_mr(dst.ctypes.data, dst.nbytes, access) as dmr:
        cross_pair.qp_a.post_send(ib.SendWR(sg_list=[smr.sge()], opcode=ib.WROpcode.RDMA_WRITE,
                                            send_flags=ib.SendFlags.SIGNALED,
                                            remote_addr=dmr.addr, rkey=dmr.rkey))
        poll_until(cross_pair.cq_a, 1)[0].raise_for_status()
        assert (dst == 0x3C).all()


def test_send_recv_across_devices(ib, cross_pair, access):
    import numpy as np
    pd_a, pd_b = cross_pair.pds
    src = np.frombuffer(b"hello from rxe0!", dtype=np.uint8).copy()
    dst = np.zeros(16, dtype=np.uint8)
    with pd_a.reg_mr(src.ctypes.data, 16, access) as smr, pd_b.reg_mr(dst.ctypes.data, 16, access) as dmr:
        cross_pair.qp_b.post_recv(ib.RecvWR(wr_id=1, sg_list=[dmr.sge()]))
        cross_pair.qp_a.post_send(ib.SendWR(sg_list=[smr.sge()], opcode=ib.WROpcode.SEND,
                                            send_flags=ib.SendFlags.SIGNALED))
        poll_until(cross_pair.cq_a, 1)[0].raise_for_status()
        (rwc,) = poll_until(cross_pair.cq_b, 1)
        assert rwc.byte_len == 16 and bytes(dst) == b"hello from rxe0!"
