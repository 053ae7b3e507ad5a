"""The extended QP post API (PD.create_qp_ex, QPEx.wr_*): every operation
moves the bytes it should, and misuse is a clean error, never a hang."""
import errno
import struct
import time

import pytest

from conftest import poll_until, skip_if_unsupported

GRH = 40
QKEY = 0x22222222


def all_ops(ib):
    O = ib.QPCreateSendOps
    return (O.RDMA_WRITE | O.RDMA_WRITE_WITH_IMM | O.SEND | O.SEND_WITH_IMM | O.RDMA_READ
            | O.ATOMIC_CMP_AND_SWP | O.ATOMIC_FETCH_AND_ADD | O.LOCAL_INV | O.BIND_MW
            | O.SEND_WITH_INV)


@pytest.fixture(autouse=True)
def _provider_has_the_wr_api(ib, pd, cq):
    """rxe got the ibv_wr_* API in rdma-core 34 (33.2: EOPNOTSUPP)."""
    skip_if_unsupported(ib, "extended QP post API", lambda: pd.create_qp_ex(
        cq, cq, send_ops_flags=ib.QPCreateSendOps.SEND))


class QPExPair:
    """Two connected RC QPExs on one device (a sends, b receives)."""

    def __init__(self, ib, pd, port, gid_index, access, send_ops_flags=None, **kw):
        ctx = pd.context
        ops = all_ops(ib) if send_ops_flags is None else send_ops_flags
        self.cq_a = ctx.create_cq(128)
        self.cq_b = ctx.create_cq(128)
        kw.setdefault("max_send_sge", 4)
        kw.setdefault("max_recv_sge", 4)
        kw.setdefault("max_inline_data", 64)
        self.qp_a = pd.create_qp_ex(self.cq_a, self.cq_a, send_ops_flags=ops, **kw)
        self.qp_b = pd.create_qp_ex(self.cq_b, self.cq_b, send_ops_flags=ops, **kw)
        gid = ctx.query_gid(port, gid_index)
        info = lambda qp, psn: ib.local_qp_info(qp, ctx.query_port(port), gid, port=port, psn=psn)
        ib.connect_rc(self.qp_a, info(self.qp_b, 0x200), port=port, sgid_index=gid_index,
                      access=access, local_psn=0x100)
        ib.connect_rc(self.qp_b, info(self.qp_a, 0x100), port=port, sgid_index=gid_index,
                      access=access, local_psn=0x200)

    def close(self):
        for obj in (self.qp_a, self.qp_b, self.cq_a, self.cq_b):
            obj.close()


@pytest.fixture
def pair(ib, pd, port, gid_index, access):
    p = QPExPair(ib, pd, port, gid_index, access)
    yield p
    p.close()


def post(ib, qp, op, *args, sge=None, sges=None, wr_id=1, signaled=True):
    """One work request in one batch."""
    qp.wr_start()
    qp.wr_id = wr_id
    qp.wr_flags = ib.SendFlags.SIGNALED if signaled else 0
    getattr(qp, op)(*args)
    if sge is not None:
        qp.wr_set_sge(sge.lkey, sge.addr, sge.length)
    if sges is not None:
        qp.wr_set_sge_list(sges)
    qp.wr_complete()


def completed(ib, cq, wr_id, opcode):
    (wc,) = poll_until(cq, 1)
    wc.raise_for_status()
    assert wc.wr_id == wr_id and wc.opcode == opcode
    return wc


def assert_no_completion(cq, seconds=0.3):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert cq.poll(4) == []


# ---- the object ---------------------------------------------------------------------

def test_create_qp_ex_makes_a_qp_that_keeps_working_as_one(ib, pd, cq, pair):
    qp = pair.qp_a
    assert isinstance(qp, ib.QPEx) and isinstance(qp, ib.QP)
    assert qp.pd is pd and qp.send_cq is pair.cq_a and qp.srq is None
    assert qp.state == ib.QPState.RTS and qp.qp_type == ib.QPType.RC
    attr, cap = qp.query()
    assert attr["qp_state"] == ib.QPState.RTS
    assert cap.max_send_sge >= 4 and cap.max_inline_data >= 64
    # closing the CQ under it is refused: it is a child like any QP's
    with pytest.raises(ib.VerbsError) as e:
        pair.cq_a.close()
    assert e.value.errno == errno.EBUSY
    assert repr(qp).startswith("<ibverbs.QPEx at")
    with pytest.raises(TypeError):
        ib.QPEx()


def test_create_qp_ex_checks_its_arguments(ib, pd, cq, ctx2):
    with pytest.raises(TypeError):
        pd.create_qp_ex(cq, "not a CQ")
    with pytest.raises(TypeError):
        pd.create_qp_ex(cq, cq, bogus=1)
    with pytest.raises(ValueError):
        pd.create_qp_ex(cq, cq, send_ops_flags=-1)
    with pytest.raises(ValueError):
        pd.create_qp_ex(cq, cq, max_tso_header=1 << 16)
    with ctx2.create_cq(4) as other:
        with pytest.raises(ValueError, match="another context"):
            pd.create_qp_ex(cq, other)
    with ctx2.alloc_pd() as pd2, pd2.create_srq() as srq2:
        with pytest.raises(ValueError, match="another"):
            pd.create_qp_ex(cq, cq, srq=srq2)


def test_a_qp_without_send_ops_flags_has_no_wr_api(ib, pd, cq):
    with pd.create_qp_ex(cq, cq) as qp:
        for call in (qp.wr_start, qp.wr_send, lambda: qp.wr_id):
            with pytest.raises(ib.VerbsError) as e:
                call()
            assert e.value.errno == errno.EOPNOTSUPP and "send_ops_flags" in str(e.value)


def test_tso_is_refused_by_rxe_at_creation(ib, pd, cq):
    with pytest.raises(ib.VerbsError) as e:
        pd.create_qp_ex(cq, cq, send_ops_flags=ib.QPCreateSendOps.TSO)
    assert e.value.errno in (errno.EOPNOTSUPP, errno.EINVAL)


def test_wr_id_and_wr_flags_are_fields_of_the_qp_ex(ib, pair):
    qp = pair.qp_a
    qp.wr_id = 2**64 - 1
    qp.wr_flags = int(ib.SendFlags.SIGNALED | ib.SendFlags.FENCE)
    assert qp.wr_id == 2**64 - 1
    assert qp.wr_flags == ib.SendFlags.SIGNALED | ib.SendFlags.FENCE
    with pytest.raises(ValueError):
        qp.wr_id = 2**64
    with pytest.raises(ValueError):
        qp.wr_flags = -1
    with pytest.raises(TypeError):
        qp.wr_id = "1"
    with pytest.raises(AttributeError):
        del qp.wr_id


# ---- every operation ----------------------------------------------------------------

def test_wr_send_moves_the_bytes(ib, pair, make_buffer):
    src, dst = make_buffer(256), make_buffer(256)
    src.array[:] = range(256)
    pair.qp_b.post_recv(ib.RecvWR(wr_id=42, sg_list=[dst.mr.sge()]))
    post(ib, pair.qp_a, "wr_send", sge=src.mr.sge(), wr_id=5)
    completed(ib, pair.cq_a, 5, ib.WCOpcode.SEND)
    rwc = completed(ib, pair.cq_b, 42, ib.WCOpcode.RECV)
    assert rwc.byte_len == 256
    assert bytes(dst.array) == bytes(range(256))


def test_wr_send_imm_delivers_the_immediate_in_host_order(ib, pair, make_buffer):
    src, dst = make_buffer(16, fill=7), make_buffer(16)
    pair.qp_b.post_recv(ib.RecvWR(wr_id=1, sg_list=[dst.mr.sge()]))
    post(ib, pair.qp_a, "wr_send_imm", 0x12345678, sge=src.mr.sge())
    completed(ib, pair.cq_a, 1, ib.WCOpcode.SEND)
    rwc = completed(ib, pair.cq_b, 1, ib.WCOpcode.RECV)
    assert rwc.wc_flags & ib.WCFlags.WITH_IMM and rwc.imm_data == 0x12345678
    assert bytes(dst.array) == b"\x07" * 16
    with pytest.raises(ValueError):
        pair.qp_a.wr_send_imm(2**32)


def test_wr_rdma_write_lands_in_remote_memory(ib, pair, make_buffer):
    src, dst = make_buffer(4096, fill=0xAB), make_buffer(4096)
    post(ib, pair.qp_a, "wr_rdma_write", dst.mr.rkey, dst.addr, sge=src.mr.sge(), wr_id=9)
    completed(ib, pair.cq_a, 9, ib.WCOpcode.RDMA_WRITE)
    assert bytes(dst.array) == b"\xab" * 4096


def test_wr_rdma_write_imm_notifies_the_receiver(ib, pair, make_buffer):
    src, dst = make_buffer(64, fill=0x5A), make_buffer(64)
    pair.qp_b.post_recv(ib.RecvWR(wr_id=3))
    post(ib, pair.qp_a, "wr_rdma_write_imm", dst.mr.rkey, dst.addr, 0xCAFE, sge=src.mr.sge())
    completed(ib, pair.cq_a, 1, ib.WCOpcode.RDMA_WRITE)
    rwc = completed(ib, pair.cq_b, 3, ib.WCOpcode.RECV_RDMA_WITH_IMM)
    assert rwc.imm_data == 0xCAFE
    assert bytes(dst.array) == b"\x5a" * 64


def test_wr_rdma_read_copies_remote_bytes(ib, pair, make_buffer):
    remote, local = make_buffer(512), make_buffer(512)
    remote.array[:] = [i % 251 for i in range(512)]
    post(ib, pair.qp_a, "wr_rdma_read", remote.mr.rkey, remote.addr, sge=local.mr.sge())
    completed(ib, pair.cq_a, 1, ib.WCOpcode.RDMA_READ)
    assert bytes(local.array) == bytes(remote.array)


def test_wr_atomic_cmp_swp_swaps_and_returns_the_old_value(ib, pair, make_buffer):
    target, old = make_buffer(8), make_buffer(8)
    target.array[:] = list(struct.pack("<Q", 100))
    post(ib, pair.qp_a, "wr_atomic_cmp_swp", target.mr.rkey, target.addr, 100, 555,
         sge=old.mr.sge())
    completed(ib, pair.cq_a, 1, ib.WCOpcode.COMP_SWAP)
    assert struct.unpack("<Q", bytes(target.array))[0] == 555
    assert struct.unpack("<Q", bytes(old.array))[0] == 100
    # a compare that does not match leaves it alone
    post(ib, pair.qp_a, "wr_atomic_cmp_swp", target.mr.rkey, target.addr, 1, 2,
         sge=old.mr.sge(), wr_id=2)
    completed(ib, pair.cq_a, 2, ib.WCOpcode.COMP_SWAP)
    assert struct.unpack("<Q", bytes(target.array))[0] == 555
    assert struct.unpack("<Q", bytes(old.array))[0] == 555


def test_wr_atomic_fetch_add_adds_and_returns_the_old_value(ib, pair, make_buffer):
    target, old = make_buffer(8), make_buffer(8)
    target.array[:] = list(struct.pack("<Q", 40))
    post(ib, pair.qp_a, "wr_atomic_fetch_add", target.mr.rkey, target.addr, 2,
         sge=old.mr.sge())
    completed(ib, pair.cq_a, 1, ib.WCOpcode.FETCH_ADD)
    assert struct.unpack("<Q", bytes(target.array))[0] == 42
    assert struct.unpack("<Q", bytes(old.array))[0] == 40


def test_wr_atomic_write_is_refused_when_not_asked_for(ib, pair, make_buffer):
    if not hasattr(pair.qp_a, "wr_atomic_write"):
        pytest.skip("generated from rdma-core headers without ibv_wr_atomic_write")
    target = make_buffer(8)
    pair.qp_a.wr_start()
    with pytest.raises(ib.VerbsError) as e:
        pair.qp_a.wr_atomic_write(target.mr.rkey, target.addr, b"12345678")
    assert e.value.errno == errno.EOPNOTSUPP and "send_ops_flags" in str(e.value)
    with pytest.raises(ValueError, match="8 bytes"):
        pair.qp_a.wr_atomic_write(target.mr.rkey, target.addr, b"1234")
    pair.qp_a.wr_abort()


def test_wr_atomic_write_on_rxe(ib, pd, port, gid_index, access, make_buffer):
    """The 6.1 kernel's rxe accepts the flag at creation but has no atomic
    write on the wire: the request ends in an error completion (local QP
    operation error, seen in the VM) and nothing is written.  A device that
    has it must land the 8 bytes."""
    p = QPExPair(ib, pd, port, gid_index, access,
                 send_ops_flags=all_ops(ib) | ib.QPCreateSendOps.ATOMIC_WRITE)
    try:
        target = make_buffer(8)
        qp = p.qp_a
        qp.wr_start()
        qp.wr_flags = ib.SendFlags.SIGNALED
        qp.wr_atomic_write(target.mr.rkey, target.addr, struct.pack("<Q", 0x1122334455667788))
        try:
            qp.wr_complete()
        except ib.VerbsError:
            return
        (wc,) = poll_until(p.cq_a, 1)
        if wc.is_success:
            # a kernel that has it: the 8 bytes landed
            assert struct.unpack("<Q", bytes(target.array))[0] == 0x1122334455667788
        else:
            assert bytes(target.array) == bytes(8)
    finally:
        p.close()


def test_wr_set_inline_data_needs_no_lkey(ib, pair, make_buffer):
    dst = make_buffer(64)
    for i, data in enumerate((b"inline!" * 4, bytearray(b"\x01\x02\x03"),
                              memoryview(b"view data"))):
        pair.qp_a.wr_start()
        pair.qp_a.wr_id = i
        pair.qp_a.wr_flags = ib.SendFlags.SIGNALED | ib.SendFlags.INLINE
        pair.qp_a.wr_rdma_write(dst.mr.rkey, dst.addr + 16 * i)
        pair.qp_a.wr_set_inline_data(data)
        pair.qp_a.wr_complete()
        completed(ib, pair.cq_a, i, ib.WCOpcode.RDMA_WRITE)
    first = b"inline!" * 4            # 28 bytes at 0, partly overwritten at 16 and 32
    assert bytes(dst.array[0:16]) == first[:16] and bytes(dst.array[19:28]) == first[19:]
    assert bytes(dst.array[16:19]) == b"\x01\x02\x03"
    assert bytes(dst.array[32:41]) == b"view data"
    with pytest.raises(TypeError):
        pair.qp_a.wr_set_inline_data(12)


def test_wr_set_inline_data_list_gathers_the_buffers(ib, pair, make_buffer):
    dst = make_buffer(64)
    pair.qp_b.post_recv(ib.RecvWR(wr_id=8, sg_list=[dst.mr.sge()]))
    qp = pair.qp_a
    qp.wr_start()
    qp.wr_flags = ib.SendFlags.SIGNALED | ib.SendFlags.INLINE
    qp.wr_send()
    qp.wr_set_inline_data_list([b"abc", bytearray(b"defg"), memoryview(b"hi")])
    qp.wr_complete()
    completed(ib, pair.cq_a, qp.wr_id, ib.WCOpcode.SEND)
    rwc = completed(ib, pair.cq_b, 8, ib.WCOpcode.RECV)
    if rwc.byte_len == 0:
        # rxe of rdma-core 44 copies the buffers into the request but never
        # sums their lengths (tot_length stays 0): an empty message
        assert bytes(dst.array) == bytes(64)
    else:
        assert rwc.byte_len == 9 and bytes(dst.array[:10]) == b"abcdefghi\x00"
    qp.wr_start()
    qp.wr_send()
    with pytest.raises(TypeError):
        qp.wr_set_inline_data_list(b"not a list")
    with pytest.raises(TypeError):
        qp.wr_set_inline_data_list([b"ok", 5])
    qp.wr_abort()


def test_wr_set_sge_list_gathers(ib, pair, make_buffer):
    # SGEs of one length: rxe of rdma-core 44 takes the first SGE's length
    # for every SGE of the list (tot_length = num_sge * sg_list[0].length),
    # which fails SGEs of different lengths with a local QP operation error
    # while post_send of the same list works (seen in the VM).
    a, b, c = make_buffer(32, fill=1), make_buffer(32, fill=2), make_buffer(32, fill=3)
    dst = make_buffer(256)
    post(ib, pair.qp_a, "wr_rdma_write", dst.mr.rkey, dst.addr,
         sges=[a.mr.sge(), b.mr.sge(), c.mr.sge()])
    assert completed(ib, pair.cq_a, 1, ib.WCOpcode.RDMA_WRITE).byte_len == 96
    assert bytes(dst.array[:97]) == b"\x01" * 32 + b"\x02" * 32 + b"\x03" * 32 + b"\x00"
    # a SEND gathers the same way, here from parts of two MRs
    inbox = make_buffer(64)
    pair.qp_b.post_recv(ib.RecvWR(wr_id=4, sg_list=[inbox.mr.sge()]))
    post(ib, pair.qp_a, "wr_send", sges=[a.mr.sge(8, 4), c.mr.sge(8)], wr_id=2)
    completed(ib, pair.cq_a, 2, ib.WCOpcode.SEND)
    assert completed(ib, pair.cq_b, 4, ib.WCOpcode.RECV).byte_len == 16
    assert bytes(inbox.array[:17]) == b"\x01" * 8 + b"\x03" * 8 + b"\x00"
    pair.qp_a.wr_start()
    pair.qp_a.wr_send()
    with pytest.raises(TypeError):
        pair.qp_a.wr_set_sge_list([a.mr.sge(), "x"])
    with pytest.raises(TypeError):
        pair.qp_a.wr_set_sge_list(a.mr.sge())
    pair.qp_a.wr_abort()


def test_a_send_scattered_over_several_receive_sges(ib, pair, make_buffer):
    src = make_buffer(160)
    src.array[:] = [i % 200 for i in range(160)]
    d1, d2 = make_buffer(80), make_buffer(80)
    pair.qp_b.post_recv(ib.RecvWR(wr_id=1, sg_list=[d1.mr.sge(), d2.mr.sge()]))
    post(ib, pair.qp_a, "wr_send", sge=src.mr.sge())
    completed(ib, pair.cq_a, 1, ib.WCOpcode.SEND)
    assert completed(ib, pair.cq_b, 1, ib.WCOpcode.RECV).byte_len == 160
    assert bytes(d1.array) + bytes(d2.array) == bytes(src.array)


def test_one_batch_posts_several_requests_in_order(ib, pair, make_buffer):
    src = make_buffer(96)
    src.array[:] = [i // 32 + 1 for i in range(96)]
    dst = make_buffer(96)
    qp = pair.qp_a
    qp.wr_start()
    for i in range(3):
        qp.wr_id = 100 + i
        qp.wr_flags = ib.SendFlags.SIGNALED
        qp.wr_rdma_write(dst.mr.rkey, dst.addr + 32 * i)
        qp.wr_set_sge(src.mr.lkey, src.addr + 32 * i, 32)
    qp.wr_complete()
    wcs = poll_until(pair.cq_a, 3)
    assert [w.wr_id for w in wcs] == [100, 101, 102] and all(w.is_success for w in wcs)
    assert bytes(dst.array) == bytes(src.array)


def test_unsignaled_requests_complete_silently(ib, pair, make_buffer):
    src, dst = make_buffer(8, fill=9), make_buffer(8)
    post(ib, pair.qp_a, "wr_rdma_write", dst.mr.rkey, dst.addr, sge=src.mr.sge(), wr_id=1,
         signaled=False)
    post(ib, pair.qp_a, "wr_rdma_read", dst.mr.rkey, dst.addr, sge=src.mr.sge(), wr_id=2)
    (wc,) = poll_until(pair.cq_a, 1)
    assert wc.wr_id == 2 and wc.is_success
    assert bytes(dst.array) == b"\x09" * 8


def test_wr_abort_posts_nothing_and_the_qp_stays_usable(ib, pair, make_buffer):
    src, dst = make_buffer(64, fill=0xEE), make_buffer(64)
    qp = pair.qp_a
    qp.wr_start()
    qp.wr_flags = ib.SendFlags.SIGNALED
    qp.wr_rdma_write(dst.mr.rkey, dst.addr)
    qp.wr_set_sge(src.mr.lkey, src.addr, 64)
    qp.wr_abort()
    assert_no_completion(pair.cq_a)
    assert bytes(dst.array) == bytes(64)
    # the send queue is free again: the classic post works, then a batch
    qp.post_send(ib.SendWR(wr_id=7, sg_list=[src.mr.sge(32)], opcode=ib.WROpcode.RDMA_WRITE,
                           send_flags=ib.SendFlags.SIGNALED, remote_addr=dst.addr,
                           rkey=dst.mr.rkey))
    completed(ib, pair.cq_a, 7, ib.WCOpcode.RDMA_WRITE)
    post(ib, qp, "wr_rdma_write", dst.mr.rkey, dst.addr + 32, sge=src.mr.sge(32), wr_id=8)
    completed(ib, pair.cq_a, 8, ib.WCOpcode.RDMA_WRITE)
    assert bytes(dst.array) == b"\xee" * 64


def test_a_batch_larger_than_the_queue_fails_whole(ib, pd, port, gid_index, access, make_buffer):
    p = QPExPair(ib, pd, port, gid_index, access, max_send_wr=4)
    try:
        src, dst = make_buffer(8, fill=1), make_buffer(8)
        room = p.qp_a.query()[1].max_send_wr
        qp = p.qp_a
        qp.wr_start()
        for i in range(room + 4):
            qp.wr_flags = ib.SendFlags.SIGNALED
            qp.wr_rdma_write(dst.mr.rkey, dst.addr)
            qp.wr_set_sge(src.mr.lkey, src.addr, 8)
        with pytest.raises(ib.VerbsError):
            qp.wr_complete()
        assert_no_completion(p.cq_a)
        assert bytes(dst.array) == bytes(8)
        post(ib, qp, "wr_rdma_write", dst.mr.rkey, dst.addr, sge=src.mr.sge(), wr_id=3)
        completed(ib, p.cq_a, 3, ib.WCOpcode.RDMA_WRITE)
        assert bytes(dst.array) == b"\x01" * 8
    finally:
        p.close()


def test_ud_send_with_wr_set_ud_addr(ib, ctx, pd, port, gid_index, make_buffer):
    with ctx.create_cq(16) as cq_a, ctx.create_cq(16) as cq_b:
        qps = []
        try:
            for cq in (cq_a, cq_b):
                qp = pd.create_qp_ex(cq, cq, qp_type=ib.QPType.UD,
                                     send_ops_flags=ib.QPCreateSendOps.SEND
                                     | ib.QPCreateSendOps.SEND_WITH_IMM)
                qp.to_init(port, qkey=QKEY)
                qp.to_rtr(None, 0)
                qp.to_rts(0)
                qps.append(qp)
            a, b = qps
            dst, src = make_buffer(GRH + 64), make_buffer(64, fill=0x42)
            b.post_recv(ib.RecvWR(wr_id=1, sg_list=[dst.mr.sge()]))
            gid = ctx.query_gid(port, gid_index)
            with pd.create_ah(ib.AHAttr(dgid=gid, sgid_index=gid_index, port_num=port,
                                        is_global=1, hop_limit=64)) as ah:
                a.wr_start()
                a.wr_id = 2
                a.wr_flags = ib.SendFlags.SIGNALED
                a.wr_send_imm(77)
                a.wr_set_ud_addr(ah, b.qp_num, QKEY)
                a.wr_set_sge(src.mr.lkey, src.addr, 64)
                a.wr_complete()
                completed(ib, cq_a, 2, ib.WCOpcode.SEND)
                rwc = completed(ib, cq_b, 1, ib.WCOpcode.RECV)
            assert rwc.src_qp == a.qp_num and rwc.imm_data == 77
            assert rwc.byte_len == GRH + 64 and bytes(dst.array[GRH:]) == b"\x42" * 64
            a.wr_start()
            a.wr_send()
            with pytest.raises(TypeError):
                a.wr_set_ud_addr("not an AH", b.qp_num, QKEY)
            with ctx.alloc_pd() as other, other.create_ah(ib.AHAttr(
                    dgid=gid, sgid_index=gid_index, port_num=port, is_global=1,
                    hop_limit=64)) as foreign:
                with pytest.raises(ValueError, match="ah belongs to another PD"):
                    a.wr_set_ud_addr(foreign, b.qp_num, QKEY)
            a.wr_abort()
        finally:
            for qp in qps:
                qp.close()


# ---- misuse: clear errors, never a crash or a hang ----------------------------------

def test_wr_calls_out_of_order_raise(ib, pair, make_buffer):
    qp = pair.qp_a
    src = make_buffer(8)
    for call in (qp.wr_send, qp.wr_complete, qp.wr_abort,
                 lambda: qp.wr_set_sge(src.mr.lkey, src.addr, 8),
                 lambda: qp.wr_set_inline_data(b"x"),
                 lambda: qp.wr_set_sge_list([src.mr.sge()])):
        with pytest.raises(ib.VerbsError) as e:
            call()
        assert e.value.errno == errno.EINVAL and "wr_start" in str(e.value)
    qp.wr_start()
    with pytest.raises(ib.VerbsError) as e:
        qp.wr_start()
    assert e.value.errno == errno.EBUSY
    with pytest.raises(ib.VerbsError, match="call an operation"):
        qp.wr_set_sge(src.mr.lkey, src.addr, 8)
    # the send queue is the batch's until it ends: no other way in
    with pytest.raises(ib.VerbsError) as e:
        qp.post_send(ib.SendWR(opcode=ib.WROpcode.SEND))
    assert e.value.errno == errno.EBUSY
    with pytest.raises(ib.VerbsError) as e:
        qp.post_send(ib.PostList([ib.SendWR(opcode=ib.WROpcode.SEND)]))
    assert e.value.errno == errno.EBUSY
    with pd_mw(ib, qp) as mw:
        with pytest.raises(ib.VerbsError) as e:
            qp.bind_mw(mw, ib.MWBind(src.mr, src.addr, 8))
        assert e.value.errno == errno.EBUSY
    # the other QP is not affected
    pair.qp_b.wr_start()
    pair.qp_b.wr_abort()
    qp.wr_abort()
    with pytest.raises(ib.VerbsError):
        qp.wr_abort()


class pd_mw:
    def __init__(self, ib, qp):
        self.mw = qp.pd.alloc_mw(ib.MWType.TYPE_1)

    def __enter__(self):
        return self.mw

    def __exit__(self, *exc):
        self.mw.close()


def test_an_operation_not_in_send_ops_flags_is_refused(ib, pd, cq):
    with pd.create_qp_ex(cq, cq, send_ops_flags=ib.QPCreateSendOps.SEND) as qp:
        qp.wr_start()
        for call in (lambda: qp.wr_rdma_write(1, 2), lambda: qp.wr_atomic_fetch_add(1, 2, 3),
                     lambda: qp.wr_local_inv(5), lambda: qp.wr_send_tso(b"hdr", 1000)):
            with pytest.raises(ib.VerbsError) as e:
                call()
            assert e.value.errno == errno.EOPNOTSUPP
        qp.wr_send()          # in send_ops_flags: fine
        qp.wr_abort()


def test_closing_a_qp_with_an_open_batch_drops_the_batch(ib, ctx, pd, port, gid_index, access,
                                                          make_buffer):
    p = QPExPair(ib, pd, port, gid_index, access)
    try:
        src, dst = make_buffer(8, fill=5), make_buffer(8)
        p.qp_a.wr_start()
        p.qp_a.wr_rdma_write(dst.mr.rkey, dst.addr)
        p.qp_a.wr_set_sge(src.mr.lkey, src.addr, 8)
        p.qp_a.close()
        assert p.qp_a.closed
        with pytest.raises(ib.VerbsError) as e:
            p.qp_a.wr_start()
        assert e.value.errno == errno.EBADF
        with pytest.raises(ib.VerbsError) as e:
            p.qp_a.wr_id
        assert e.value.errno == errno.EBADF
        assert bytes(dst.array) == bytes(8)
        # garbage collection of one in a batch is as safe
        p.qp_b.wr_start()
        p.qp_b.wr_send()
        p.qp_b = None
        import gc
        gc.collect()
        p.qp_b = pd.create_qp_ex(p.cq_b, p.cq_b)
    finally:
        p.close()
