"""Extended completion queues (CQEx): ibv_create_cq_ex, start/next/end_poll
and the ibv_wc_read_* readers, on real traffic over Soft-RoCE."""
import errno
import gc
import time

import pytest

from conftest import skip_if_unsupported

from tests.conftest import poll_until

IMM = 0x12345678


def start_poll_until(cq, timeout=10.0):
    """start_poll() until a completion is current (True)."""
    deadline = time.monotonic() + timeout
    while not cq.start_poll():
        if time.monotonic() > deadline:
            raise AssertionError("no completion within %ss" % timeout)


@pytest.fixture(autouse=True)
def _provider_has_extended_cqs(ib, ctx):
    """rxe got ibv_create_cq_ex in rdma-core 34 (33.2: EOPNOTSUPP)."""
    skip_if_unsupported(ib, "extended CQs", lambda: ctx.create_cq_ex(4))


class ExPair:
    """Two connected RC QPs on one device whose CQs are CQEx objects."""

    def __init__(self, ib, pd, port, gid_index, access, wc_flags=None, channel=None):
        ctx = pd.context
        kw = {} if wc_flags is None else {"wc_flags": wc_flags}
        self.cq_a = ctx.create_cq_ex(64, **kw)
        self.cq_b = ctx.create_cq_ex(64, channel=channel, **kw)
        self.qp_a = pd.create_qp(ib.QPInitAttr(self.cq_a, self.cq_a))
        self.qp_b = pd.create_qp(ib.QPInitAttr(self.cq_b, self.cq_b))
        gid = ctx.query_gid(port, gid_index)
        pattr = ctx.query_port(port)
        info_a = ib.local_qp_info(self.qp_a, pattr, gid, port=port, psn=0x10)
        info_b = ib.local_qp_info(self.qp_b, pattr, gid, port=port, psn=0x20)
        ib.connect_rc(self.qp_a, info_b, port=port, sgid_index=gid_index, access=access,
                      local_psn=0x10)
        ib.connect_rc(self.qp_b, info_a, port=port, sgid_index=gid_index, access=access,
                      local_psn=0x20)

    def close(self):
        for obj in (self.qp_a, self.qp_b, self.cq_a, self.cq_b):
            obj.close()


@pytest.fixture
def ex_pair(ib, pd, port, gid_index, access):
    pair = ExPair(ib, pd, port, gid_index, access)
    yield pair
    pair.close()


def send_imm(ib, pair, src, dst, length, wr_id, imm=IMM):
    pair.qp_b.post_recv(ib.RecvWR(wr_id=wr_id + 1000, sg_list=[dst.mr.sge(length)]))
    pair.qp_a.post_send(ib.SendWR(wr_id=wr_id, sg_list=[src.mr.sge(length)],
                                  opcode=ib.WROpcode.SEND_WITH_IMM, imm_data=imm,
                                  send_flags=ib.SendFlags.SIGNALED))


def test_cqex_is_a_cq_and_an_empty_one_polls_false(ib, ctx):
    with ctx.create_cq_ex(32) as cq:
        assert isinstance(cq, ib.CQEx) and isinstance(cq, ib.CQ)
        assert cq.cqe >= 32 and cq.context is ctx and cq.channel is None
        assert cq.start_poll() is False
        assert cq.poll(4) == []          # the plain poll works on it too
        assert cq.start_poll() is False  # False left nothing to end
        with pytest.raises(RuntimeError, match="end_poll.. without"):
            cq.end_poll()
        with pytest.raises(RuntimeError, match="start_poll"):
            cq.next_poll()
        for read in (lambda: cq.wr_id, lambda: cq.status, cq.read_opcode, cq.read_byte_len,
                     cq.read_imm_data, cq.read_tm_info):
            with pytest.raises(RuntimeError, match="no completion is current"):
                read()
        assert "CQEx" in repr(cq)


def test_create_cq_ex_checks_its_arguments(ib, ctx, ctx2):
    with pytest.raises(ValueError):
        ctx.create_cq_ex(0)
    with pytest.raises(ValueError):
        ctx.create_cq_ex(16, comp_vector=ctx.num_comp_vectors)
    with pytest.raises(ValueError):
        ctx.create_cq_ex(16, wc_flags=-1)
    with pytest.raises(TypeError):
        ctx.create_cq_ex(16, channel=object())
    with pytest.raises(TypeError):
        ctx.create_cq_ex(16, no_such_field=1)
    with ctx2.create_comp_channel() as other:
        if ctx2.name != ctx.name:
            with pytest.raises(ValueError, match="another context"):
                ctx.create_cq_ex(16, channel=other)
    with pytest.raises(TypeError):
        ib.CQEx()


def read_one(cq, timeout=10.0):
    """One completion through start_poll/end_poll (each pair consumes one)."""
    start_poll_until(cq, timeout)
    try:
        return (cq.wr_id, cq.status, cq.read_opcode(), cq.read_qp_num())
    finally:
        cq.end_poll()


# rxe before rdma-core 5x: when next_poll() finds the CQ empty (ENOENT) it
# already stores the consumer index and unlocks, and the end_poll() the
# verbs contract then requires advances the index once more (rdma-core
# pull requests 1512 and 1617).  The tests below therefore call next_poll()
# only when they know another completion is there, and check next_poll()
# -> False on a CQ they throw away afterwards.


def test_send_with_imm_read_through_the_extended_readers(ib, ex_pair, make_buffer):
    src = make_buffer(4096, fill=0x5A)
    dst = make_buffer(4096)
    send_imm(ib, ex_pair, src, dst, 300, wr_id=7)

    cq = ex_pair.cq_b
    start_poll_until(cq)
    try:
        assert cq.wr_id == 1007
        assert cq.status == ib.WCStatus.SUCCESS
        assert cq.read_opcode() == ib.WCOpcode.RECV
        assert cq.read_byte_len() == 300
        assert cq.read_imm_data() == IMM            # host order, as WC.imm_data
        assert cq.read_qp_num() == ex_pair.qp_b.qp_num
        assert cq.read_wc_flags() & ib.WCFlags.WITH_IMM
        assert cq.read_vendor_err() == 0
        ext = dict(src_qp=cq.read_src_qp(), slid=cq.read_slid(), sl=cq.read_sl(),
                   dlid_path_bits=cq.read_dlid_path_bits())
    finally:
        cq.end_poll()
    assert (dst.array[:300] == 0x5A).all() and (dst.array[300:] == 0).all()
    assert cq.start_poll() is False                 # that one was consumed

    # The same message again, polled with ibv_poll_cq on the same CQEx: the
    # extended readers agree with struct ibv_wc field by field.
    send_imm(ib, ex_pair, src, dst, 300, wr_id=8)
    (wc,) = poll_until(cq)
    assert wc.wr_id == 1008 and wc.byte_len == 300 and wc.imm_data == IMM
    assert wc.qp_num == ex_pair.qp_b.qp_num
    assert ext == dict(src_qp=wc.src_qp, slid=wc.slid, sl=wc.sl,
                       dlid_path_bits=wc.dlid_path_bits)

    # The sender's side: both signaled sends, in order.
    got = [read_one(ex_pair.cq_a), read_one(ex_pair.cq_a)]
    assert got == [(7, ib.WCStatus.SUCCESS, ib.WCOpcode.SEND, ex_pair.qp_a.qp_num),
                   (8, ib.WCStatus.SUCCESS, ib.WCOpcode.SEND, ex_pair.qp_a.qp_num)]
    assert ex_pair.cq_a.start_poll() is False


def test_rdma_write_with_imm_many_completions_in_one_poll(ib, ex_pair, make_buffer):
    src = make_buffer(4096, fill=3)
    dst = make_buffer(4096)
    n = 8
    for i in range(n):
        ex_pair.qp_b.post_recv(ib.RecvWR(wr_id=100 + i))
    for i in range(n):
        ex_pair.qp_a.post_send(ib.SendWR(
            wr_id=i, sg_list=[src.mr.sge(64, offset=64 * i)],
            opcode=ib.WROpcode.RDMA_WRITE_WITH_IMM, imm_data=i,
            send_flags=ib.SendFlags.SIGNALED,
            remote_addr=dst.addr + 64 * i, rkey=dst.mr.rkey))
    # RC: a request is acknowledged after the responder completed it, so once
    # the sender has all n completions the receiver's n are in its CQ.
    assert len(poll_until(ex_pair.cq_a, n)) == n
    cq = ex_pair.cq_b
    seen = []
    assert cq.start_poll() is True
    for i in range(n):
        if i:
            assert cq.next_poll() is True
        assert cq.status == ib.WCStatus.SUCCESS
        assert cq.read_opcode() == ib.WCOpcode.RECV_RDMA_WITH_IMM
        assert cq.read_wc_flags() & ib.WCFlags.WITH_IMM
        seen.append((cq.wr_id, cq.read_imm_data(), cq.read_byte_len()))
    cq.end_poll()
    assert seen == [(100 + i, i, 64) for i in range(n)]
    assert (dst.array[:64 * n] == 3).all()
    assert cq.start_poll() is False


def test_next_poll_returns_false_when_no_more_and_end_poll_is_still_due(ib, ctx, pd, port,
                                                                       make_buffer):
    with ctx.create_cq_ex(16) as cq:
        qp = pd.create_qp(ib.QPInitAttr(cq, cq))
        b = make_buffer(64)
        qp.to_init(port, ib.AccessFlags.LOCAL_WRITE)
        qp.post_recv(ib.RecvWR(wr_id=5, sg_list=[b.mr.sge(64)]))
        qp.modify(ib.QPAttrMask.STATE, qp_state=ib.QPState.ERR)   # flushes the receive
        qp.close()
        start_poll_until(cq)
        assert cq.wr_id == 5 and cq.status == ib.WCStatus.WR_FLUSH_ERR
        assert cq.next_poll() is False
        with pytest.raises(RuntimeError, match="no completion is current"):
            cq.read_opcode()
        with pytest.raises(ib.VerbsError):
            cq.close()                    # still polling until end_poll()
        cq.end_poll()
        # (this CQ is not polled again: see the rxe note above)


def test_reader_not_requested_in_wc_flags_raises_instead_of_crashing(ib, pd, port, gid_index,
                                                                     access, make_buffer):
    pair = ExPair(ib, pd, port, gid_index, access, wc_flags=0)
    try:
        src, dst = make_buffer(256, fill=1), make_buffer(256)
        send_imm(ib, pair, src, dst, 16, wr_id=1)
        start_poll_until(pair.cq_b)
        try:
            # always there: wr_id, status, opcode, vendor_err, wc_flags
            assert pair.cq_b.wr_id == 1001
            assert pair.cq_b.read_opcode() == ib.WCOpcode.RECV
            assert pair.cq_b.read_wc_flags() & ib.WCFlags.WITH_IMM
            for name in ("byte_len", "imm_data", "invalidated_rkey", "qp_num", "src_qp",
                         "slid", "sl", "dlid_path_bits", "completion_ts",
                         "completion_wallclock_ns", "cvlan", "flow_tag", "tm_info"):
                with pytest.raises(RuntimeError, match="was not requested"):
                    getattr(pair.cq_b, "read_" + name)()
        finally:
            pair.cq_b.end_poll()
        poll_until(pair.cq_a)
    finally:
        pair.close()


def test_while_polling_close_poll_resize_and_a_second_start_are_refused(ib, ex_pair,
                                                                        make_buffer):
    src, dst = make_buffer(256, fill=1), make_buffer(256)
    send_imm(ib, ex_pair, src, dst, 16, wr_id=1)
    cq = ex_pair.cq_b
    ex_pair.qp_b.close()                  # the CQ has no child left
    start_poll_until(cq)
    with pytest.raises(ib.VerbsError) as e:
        cq.close()
    assert e.value.errno == errno.EBUSY
    for call in (lambda: cq.poll(1), lambda: cq.resize(128), cq.start_poll,
                 lambda: cq.poll_into(ib.WCBuffer(4))):
        with pytest.raises(RuntimeError, match="end_poll"):
            call()
    assert cq.wr_id == 1001               # still current, nothing was consumed
    cq.end_poll()
    with pytest.raises(RuntimeError):
        cq.end_poll()                     # paired once only
    assert cq.poll(4) == []
    cq.close()
    assert cq.closed
    poll_until(ex_pair.cq_a)


def test_use_after_close_raises_ebadf(ib, ctx):
    cq = ctx.create_cq_ex(8)
    cq.close()
    cq.close()                            # idempotent
    for call in (cq.start_poll, cq.next_poll, cq.end_poll, cq.read_opcode,
                 cq.read_byte_len, lambda: cq.wr_id, lambda: cq.status, lambda: cq.cqe):
        with pytest.raises(ib.VerbsError) as e:
            call()
        assert e.value.errno == errno.EBADF


def test_context_with_an_open_cqex_refuses_to_close(ib, device_names):
    from tests.conftest import open_device
    ctx = open_device(ib, device_names[0])
    cq = ctx.create_cq_ex(8)
    with pytest.raises(ib.VerbsError) as e:
        ctx.close()
    assert e.value.errno == errno.EBUSY
    cq.close()
    ctx.close()


def test_dropping_a_cqex_in_the_middle_of_a_poll_ends_it(ib, ctx, pd, port, make_buffer):
    cq = ctx.create_cq_ex(16)
    qp = pd.create_qp(ib.QPInitAttr(cq, cq))
    b = make_buffer(64)
    qp.to_init(port, ib.AccessFlags.LOCAL_WRITE)
    qp.post_recv(ib.RecvWR(wr_id=5, sg_list=[b.mr.sge(64)]))
    qp.modify(ib.QPAttrMask.STATE, qp_state=ib.QPState.ERR)   # flushes the receive
    qp.close()
    start_poll_until(cq)
    assert cq.wr_id == 5 and cq.status == ib.WCStatus.WR_FLUSH_ERR
    del cq                                # no end_poll(): dealloc ends it, then destroys
    gc.collect()


def test_cqex_works_with_a_completion_channel(ib, ctx, pd, port, gid_index, access,
                                             make_buffer):
    with ctx.create_comp_channel() as ch:
        pair = ExPair(ib, pd, port, gid_index, access, channel=ch)
        try:
            assert pair.cq_b.channel is ch
            pair.cq_b.req_notify()
            src, dst = make_buffer(64, fill=9), make_buffer(64)
            send_imm(ib, pair, src, dst, 64, wr_id=3)
            assert ch.get_cq_event() is pair.cq_b
            pair.cq_b.ack_events(1)
            start_poll_until(pair.cq_b)
            assert pair.cq_b.wr_id == 1003 and pair.cq_b.read_byte_len() == 64
            pair.cq_b.end_poll()
            poll_until(pair.cq_a)
        finally:
            pair.close()


def test_completion_timestamps_or_a_clean_error(ib, ctx, pd, port, gid_index, access,
                                               make_buffer):
    attr = ctx.query_device_ex()
    F = ib.CreateCQWCFlags
    if attr.completion_timestamp_mask == 0 or attr.hca_core_clock == 0:
        # rxe: no device clock.  Asking for timestamps fails cleanly, and so
        # does reading the clock.
        with pytest.raises(ib.VerbsError) as e:
            ctx.create_cq_ex(8, wc_flags=F.WITH_BYTE_LEN | F.WITH_COMPLETION_TIMESTAMP)
        assert e.value.errno in (errno.EOPNOTSUPP, errno.EINVAL)
        with pytest.raises(ib.VerbsError) as e:
            ctx.query_rt_values_ex()
        assert e.value.errno in (errno.EOPNOTSUPP, errno.ENOSYS)
        with pytest.raises(ib.VerbsError):
            ctx.create_cq_ex(8, wc_flags=F.WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
        return
    pair = ExPair(ib, pd, port, gid_index, access,
                  wc_flags=F.WITH_BYTE_LEN | F.WITH_COMPLETION_TIMESTAMP)
    try:
        before = ctx.query_rt_values_ex()
        src, dst = make_buffer(64, fill=1), make_buffer(64)
        send_imm(ib, pair, src, dst, 64, wr_id=1)
        start_poll_until(pair.cq_b)
        ts = pair.cq_b.read_completion_ts()
        pair.cq_b.end_poll()
        assert ts & ~attr.completion_timestamp_mask == 0 and ts != 0
        assert isinstance(before, tuple) and len(before) == 2
        poll_until(pair.cq_a)
    finally:
        pair.close()


def test_create_cq_ex_single_threaded_flag(ib, ctx):
    # flags sets its comp_mask bit itself; rxe accepts or refuses it cleanly
    try:
        cq = ctx.create_cq_ex(8, flags=ib.CreateCQAttrFlags.SINGLE_THREADED)
    except ib.VerbsError as e:
        assert e.errno in (errno.EOPNOTSUPP, errno.EINVAL)
    else:
        assert cq.start_poll() is False
        cq.close()


def test_cqex_objects_dropped_without_close_free_their_kernel_cqs(ib, ctx):
    from conftest import kernel_counts
    before, open_before = kernel_counts(), ib.CQ._open_count()
    cqs = [ctx.create_cq_ex(8, wc_flags=0) for _ in range(10)]
    assert kernel_counts() != before                 # they are real kernel CQs
    assert ib.CQ._open_count() == open_before + 10   # a CQEx counts as a CQ
    assert [cq.start_poll() for cq in cqs] == [False] * 10
    del cqs
    gc.collect()
    assert ib.CQ._open_count() == open_before
    assert kernel_counts() == before


def test_another_thread_polling_mid_poll_gets_an_error_not_a_deadlock(ib, ex_pair, make_buffer):
    import threading
    src, dst = make_buffer(64, fill=1), make_buffer(64)
    send_imm(ib, ex_pair, src, dst, 64, wr_id=2)
    cq = ex_pair.cq_b
    start_poll_until(cq)
    errors = []

    def other():
        for call in (lambda: cq.poll(1), cq.start_poll, cq.close):
            try:
                call()
            except (RuntimeError, ib.VerbsError) as e:
                errors.append(type(e).__name__)
    t = threading.Thread(target=other)
    t.start()
    t.join(30)
    assert not t.is_alive()
    assert errors == ["RuntimeError", "RuntimeError", "VerbsError"]
    assert cq.wr_id == 1002
    cq.end_poll()
    poll_until(ex_pair.cq_a)


def flushed_completion(ib, pd, cq, port):
    """A QP on cq whose receive was flushed (QP in ERR): cq holds one
    completion, for start_poll() to make current; the QP and its MR."""
    import numpy as np
    buf = np.zeros(64, dtype=np.uint8)
    mr = pd.reg_mr(buf.ctypes.data, buf.nbytes, ib.AccessFlags.LOCAL_WRITE)
    mr._keepalive(buf)
    qp = pd.create_qp(ib.QPInitAttr(cq, cq))
    qp.to_init(port)
    qp.post_recv(ib.RecvWR(wr_id=7, sg_list=[mr.sge(16)]))
    qp.modify(ib.QPAttrMask.STATE, qp_state=ib.QPState.ERR)
    return qp, mr


def test_verbs_taking_the_cq_lock_are_refused_while_a_cqex_of_theirs_is_mid_poll(ib, ctx, pd,
                                                                                 port):
    """mlx5 takes the CQ's lock in destroy_qp and modify_qp to RESET, and a
    poll holds it from start_poll() to end_poll(): those calls would hang.
    They are refused with EBUSY (rxe takes no such lock: only the refusal
    is seen here), and go through once the poll ended."""
    with ctx.create_cq_ex(16) as cq:
        qp, mr = flushed_completion(ib, pd, cq, port)
        start_poll_until(cq)
        try:
            assert cq.wr_id == 7
            for call, verb in ((qp.close, "ibv_destroy_qp"), (qp.reset, "ibv_modify_qp")):
                with pytest.raises(ib.VerbsError) as exc:
                    call()
                assert exc.value.errno == errno.EBUSY, verb
                assert verb in str(exc.value) and "end_poll()" in str(exc.value), str(exc.value)
            assert not qp.closed and qp.state == ib.QPState.ERR
            qp.modify(ib.QPAttrMask.STATE, qp_state=ib.QPState.ERR)   # no lock taken: allowed
        finally:
            cq.end_poll()
        qp.reset()
        assert qp.state == ib.QPState.RESET
        qp.close()
        mr.close()


def test_a_qp_collected_while_its_cqex_is_mid_poll_is_reported_not_hung(ib, device_names, port):
    """Its dealloc runs with the GIL held: had it taken the poll's lock
    (mlx5), the whole process would hang.  It takes the failed-destroy path
    instead: reported through sys.unraisablehook, the QP leaked (in a fork()
    child, whose exit gives it back)."""
    from conftest import in_fork_child, open_device

    def body():
        import sys
        reports = []
        sys.unraisablehook = lambda u: reports.append(str(u.exc_value))
        ctx = open_device(ib, device_names[0])
        pd = ctx.alloc_pd()
        cq = ctx.create_cq_ex(16)
        qp, mr = flushed_completion(ib, pd, cq, port)
        start_poll_until(cq)
        del qp
        gc.collect()
        cq.end_poll()
        return " | ".join(reports) or "nothing reported"

    out = in_fork_child(body)
    assert "ibv_destroy_qp failed" in out and "leaked" in out, out
