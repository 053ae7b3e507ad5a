"""Memory windows: type 1 bound with QP.bind_mw, type 2 bound by a work
request (SendWR BIND_MW, QPEx.wr_bind_mw); remote access through the
window lands the bytes, invalidation (local, or by the sender's
SEND_WITH_INV) makes the next access fail."""
import errno

import pytest

from conftest import RCPair, poll_until, skip_if_unsupported
from test_qpex import QPExPair


@pytest.fixture(autouse=True)
def _provider_has_memory_windows(ib, pd):
    """rxe got memory windows in rdma-core 34 (33.2: EOPNOTSUPP)."""
    skip_if_unsupported(ib, "memory windows", lambda: pd.alloc_mw(ib.MWType.TYPE_2))

@pytest.fixture
def mw_access(ib):
    A = ib.AccessFlags
    return A.LOCAL_WRITE | A.REMOTE_WRITE | A.REMOTE_READ | A.REMOTE_ATOMIC | A.MW_BIND


@pytest.fixture
def rc(ib, pd, port, gid_index, mw_access):
    pair = RCPair(ib, pd, pd, port, gid_index, gid_index, mw_access)
    yield pair
    pair.close()


@pytest.fixture
def qpex(ib, pd, port, gid_index, mw_access):
    pair = QPExPair(ib, pd, port, gid_index, mw_access)
    yield pair
    pair.close()


@pytest.fixture
def window_buffers(make_buffer, mw_access):
    """(target, source): an MR that allows MW binding, and bytes to move."""
    target = make_buffer(4096, acc=mw_access)
    source = make_buffer(4096, fill=0x3C, acc=mw_access)
    return target, source


def win_access(ib):
    return ib.AccessFlags.REMOTE_WRITE | ib.AccessFlags.REMOTE_READ


def ok(cq, wr_id):
    (wc,) = poll_until(cq, 1)
    wc.raise_for_status()
    assert wc.wr_id == wr_id
    return wc


def rdma(ib, qp, opcode, local, remote_addr, rkey, wr_id=50):
    qp.post_send(ib.SendWR(wr_id=wr_id, sg_list=[local], opcode=opcode,
                           send_flags=ib.SendFlags.SIGNALED, remote_addr=remote_addr,
                           rkey=rkey))


def bind_type2_with_sendwr(ib, qp, cq, mw, mr, addr, length, wr_id=7):
    rkey = ib.inc_rkey(mw.rkey)
    qp.post_send(ib.SendWR(wr_id=wr_id, opcode=ib.WROpcode.BIND_MW,
                           send_flags=ib.SendFlags.SIGNALED, mw=mw, rkey=rkey,
                           bind_info=ib.MWBindInfo(mr, addr, length,
                                                   mw_access_flags=win_access(ib))))
    wc = ok(cq, wr_id)
    assert wc.opcode == ib.WCOpcode.BIND_MW
    # (the struct ibv_mw keeps the old rkey: for type 2 the new one is the
    # caller's to remember; rxe does not update it)
    return rkey


def assert_invalidated(ib, rwc, rkey):
    """The receive completion of a SEND_WITH_INV.  rxe of Linux 6.1 does
    not set WITH_INV (nor invalidated_rkey) in it; where it is set it must
    name the window.  That the window is revoked is what the callers check,
    by the next access failing."""
    assert rwc.opcode == ib.WCOpcode.RECV
    if rwc.wc_flags & ib.WCFlags.WITH_INV:
        assert rwc.invalidated_rkey == rkey


def test_type1_window_bound_with_bind_mw_gives_remote_write_access(ib, pd, rc, window_buffers):
    target, source = window_buffers
    with pd.alloc_mw(ib.MWType.TYPE_1) as mw:
        assert mw.type == ib.MWType.TYPE_1
        old = mw.rkey
        rc.qp_a.bind_mw(mw, ib.MWBind(target.mr, target.addr + 1024, 512,
                                      mw_access_flags=win_access(ib), wr_id=5))
        wc = ok(rc.cq_a, 5)
        assert wc.opcode == ib.WCOpcode.BIND_MW
        assert mw.rkey != old                     # a bind changes the rkey
        rdma(ib, rc.qp_b, ib.WROpcode.RDMA_WRITE, source.mr.sge(512), target.addr + 1024, mw.rkey)
        ok(rc.cq_b, 50)
        assert bytes(target.array[1024:1536]) == b"\x3c" * 512
        assert bytes(target.array[:1024]) == bytes(1024)
        # the MR's own rkey never leaves; the window's is enough to read too
        rdma(ib, rc.qp_b, ib.WROpcode.RDMA_READ, source.mr.sge(16, 2048), target.addr + 1024,
             mw.rkey, wr_id=51)
        ok(rc.cq_b, 51)


def test_a_write_through_a_read_only_window_is_a_remote_access_error(ib, pd, rc,
                                                                     window_buffers):
    # (rxe of Linux 6.1 checks the range against the MR, not the window:
    # only the window's access flags are tested here)
    target, source = window_buffers
    with pd.alloc_mw(ib.MWType.TYPE_1) as mw:
        rc.qp_a.bind_mw(mw, ib.MWBind(target.mr, target.addr, 256,
                                      mw_access_flags=ib.AccessFlags.REMOTE_READ, wr_id=5))
        ok(rc.cq_a, 5)
        rdma(ib, rc.qp_b, ib.WROpcode.RDMA_READ, source.mr.sge(64), target.addr, mw.rkey)
        ok(rc.cq_b, 50)
        rdma(ib, rc.qp_b, ib.WROpcode.RDMA_WRITE, source.mr.sge(64), target.addr, mw.rkey,
             wr_id=51)
        (wc,) = poll_until(rc.cq_b, 1)
        assert wc.wr_id == 51 and wc.status == ib.WCStatus.REM_ACCESS_ERR
        assert bytes(target.array[:64]) == bytes(64)


def test_bind_mw_checks_its_arguments(ib, pd, rc, window_buffers):
    target, _ = window_buffers
    with pd.alloc_mw(ib.MWType.TYPE_1) as mw:
        with pytest.raises(TypeError):
            rc.qp_a.bind_mw("not an MW", ib.MWBind(target.mr, target.addr, 8))
        with pytest.raises(TypeError):
            rc.qp_a.bind_mw(mw, "not a bind")
    # a type 2 window is bound by a work request, not by ibv_bind_mw
    with pd.alloc_mw(ib.MWType.TYPE_2) as mw2:
        with pytest.raises(ib.VerbsError):
            rc.qp_a.bind_mw(mw2, ib.MWBind(target.mr, target.addr, 8,
                                           mw_access_flags=win_access(ib)))


def test_type2_window_bound_by_a_sendwr_then_invalidated_locally(ib, pd, rc, window_buffers):
    target, source = window_buffers
    with pd.alloc_mw(ib.MWType.TYPE_2) as mw:
        assert mw.type == ib.MWType.TYPE_2
        rkey = bind_type2_with_sendwr(ib, rc.qp_a, rc.cq_a, mw, target.mr, target.addr, 128)
        rdma(ib, rc.qp_b, ib.WROpcode.RDMA_WRITE, source.mr.sge(128), target.addr, rkey)
        ok(rc.cq_b, 50)
        assert bytes(target.array[:128]) == b"\x3c" * 128
        rc.qp_a.post_send(ib.SendWR(wr_id=8, opcode=ib.WROpcode.LOCAL_INV,
                                    send_flags=ib.SendFlags.SIGNALED, invalidate_rkey=rkey))
        assert ok(rc.cq_a, 8).opcode == ib.WCOpcode.LOCAL_INV
        target.array[:] = 0
        rdma(ib, rc.qp_b, ib.WROpcode.RDMA_WRITE, source.mr.sge(128), target.addr, rkey, wr_id=9)
        (wc,) = poll_until(rc.cq_b, 1)
        assert wc.wr_id == 9 and wc.status == ib.WCStatus.REM_ACCESS_ERR
        assert bytes(target.array[:128]) == bytes(128)


def test_send_with_invalidate_revokes_the_receivers_window(ib, pd, rc, window_buffers,
                                                           make_buffer):
    target, source = window_buffers
    with pd.alloc_mw(ib.MWType.TYPE_2) as mw:
        # b owns the window this time: a writes into it, then invalidates it
        rkey = bind_type2_with_sendwr(ib, rc.qp_b, rc.cq_b, mw, target.mr, target.addr, 64)
        rdma(ib, rc.qp_a, ib.WROpcode.RDMA_WRITE, source.mr.sge(64), target.addr, rkey)
        ok(rc.cq_a, 50)
        assert bytes(target.array[:64]) == b"\x3c" * 64
        inbox = make_buffer(16)
        rc.qp_b.post_recv(ib.RecvWR(wr_id=3, sg_list=[inbox.mr.sge()]))
        rc.qp_a.post_send(ib.SendWR(wr_id=4, sg_list=[source.mr.sge(16)],
                                    opcode=ib.WROpcode.SEND_WITH_INV,
                                    send_flags=ib.SendFlags.SIGNALED, invalidate_rkey=rkey))
        ok(rc.cq_a, 4)
        rwc = ok(rc.cq_b, 3)
        assert_invalidated(ib, rwc, rkey)
        assert bytes(inbox.array) == b"\x3c" * 16
        target.array[:] = 0
        rdma(ib, rc.qp_a, ib.WROpcode.RDMA_WRITE, source.mr.sge(64), target.addr, rkey, wr_id=5)
        (wc,) = poll_until(rc.cq_a, 1)
        assert wc.wr_id == 5 and wc.status == ib.WCStatus.REM_ACCESS_ERR
        assert bytes(target.array[:64]) == bytes(64)


def test_a_bind_sendwr_needs_its_mw_and_bind_info(ib, pd, rc, window_buffers):
    target, _ = window_buffers
    with pd.alloc_mw(ib.MWType.TYPE_2) as mw:
        with pytest.raises(ValueError, match="mw and bind_info"):
            rc.qp_a.post_send(ib.SendWR(opcode=ib.WROpcode.BIND_MW, mw=mw))
        with pytest.raises(TypeError):
            ib.SendWR(mw="x")
        with pytest.raises(TypeError):
            ib.SendWR(bind_info=mw)
        wr = ib.SendWR(opcode=ib.WROpcode.BIND_MW, mw=mw,
                       bind_info=ib.MWBindInfo(target.mr, target.addr, 8))
        assert wr.mw is mw and wr.bind_info.length == 8
        with pytest.raises(ValueError, match="PostList"):
            ib.PostList([wr])
        wr.mw = None
        assert wr.mw is None
    # a closed MW in a request is refused, not used
    wr.mw = mw
    with pytest.raises(ib.VerbsError) as e:
        rc.qp_a.post_send(wr)
    assert e.value.errno == errno.EBADF


def test_type2_window_bound_with_wr_bind_mw_and_revoked_with_wr_local_inv(
        ib, pd, qpex, window_buffers):
    target, source = window_buffers
    a, b = qpex.qp_a, qpex.qp_b
    with pd.alloc_mw(ib.MWType.TYPE_2) as mw:
        rkey = ib.inc_rkey(mw.rkey)
        a.wr_start()
        a.wr_id, a.wr_flags = 11, ib.SendFlags.SIGNALED
        a.wr_bind_mw(mw, rkey, ib.MWBindInfo(target.mr, target.addr + 256, 256,
                                             mw_access_flags=win_access(ib)))
        a.wr_complete()
        assert ok(qpex.cq_a, 11).opcode == ib.WCOpcode.BIND_MW
        # b (a's peer) reads and writes through it
        target.array[256:512] = 0x77
        b.wr_start()
        b.wr_id, b.wr_flags = 12, ib.SendFlags.SIGNALED
        b.wr_rdma_read(rkey, target.addr + 256)
        b.wr_set_sge(source.mr.lkey, source.addr, 256)
        b.wr_complete()
        ok(qpex.cq_b, 12)
        assert bytes(source.array[:256]) == b"\x77" * 256
        a.wr_start()
        a.wr_id = 13
        a.wr_local_inv(rkey)
        a.wr_complete()
        assert ok(qpex.cq_a, 13).opcode == ib.WCOpcode.LOCAL_INV
        b.wr_start()
        b.wr_id = 14
        b.wr_rdma_write(rkey, target.addr + 256)
        b.wr_set_sge(source.mr.lkey, source.addr, 16)
        b.wr_complete()
        (wc,) = poll_until(qpex.cq_b, 1)
        assert wc.wr_id == 14 and wc.status == ib.WCStatus.REM_ACCESS_ERR


def test_wr_send_inv_revokes_the_receivers_window(ib, pd, qpex, window_buffers, make_buffer):
    target, source = window_buffers
    a, b = qpex.qp_a, qpex.qp_b
    with pd.alloc_mw(ib.MWType.TYPE_2) as mw:
        rkey = ib.inc_rkey(mw.rkey)
        b.wr_start()
        b.wr_id, b.wr_flags = 21, ib.SendFlags.SIGNALED
        b.wr_bind_mw(mw, rkey, ib.MWBindInfo(target.mr, target.addr, 64,
                                             mw_access_flags=win_access(ib)))
        b.wr_complete()
        ok(qpex.cq_b, 21)
        inbox = make_buffer(8)
        b.post_recv(ib.RecvWR(wr_id=22, sg_list=[inbox.mr.sge()]))
        a.wr_start()
        a.wr_id, a.wr_flags = 23, ib.SendFlags.SIGNALED | ib.SendFlags.INLINE
        a.wr_send_inv(rkey)
        a.wr_set_inline_data(b"revoked!")
        a.wr_complete()
        ok(qpex.cq_a, 23)
        rwc = ok(qpex.cq_b, 22)
        assert_invalidated(ib, rwc, rkey)
        assert bytes(inbox.array) == b"revoked!"
        a.wr_start()
        a.wr_id = 24
        a.wr_rdma_write(rkey, target.addr)
        a.wr_set_sge(source.mr.lkey, source.addr, 8)
        a.wr_complete()
        (wc,) = poll_until(qpex.cq_a, 1)
        assert wc.wr_id == 24 and wc.status == ib.WCStatus.REM_ACCESS_ERR
        with pytest.raises(TypeError):
            b.wr_bind_mw(mw, 1, "not a bind info")


def test_a_window_keeps_its_pd_open_and_closes_cleanly(ib, ctx):
    pd = ctx.alloc_pd()
    mw = pd.alloc_mw(ib.MWType.TYPE_2)
    with pytest.raises(ib.VerbsError) as e:
        pd.close()
    assert e.value.errno == errno.EBUSY
    assert mw.pd is pd
    mw.close()
    with pytest.raises(ib.VerbsError) as e:
        mw.rkey
    assert e.value.errno == errno.EBADF
    pd.close()
