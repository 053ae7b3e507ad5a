"""Regression tests of issue 12: defects found by reading the C (crashes,
use-after-free, races).  Each test drives the call sequence that crashed
or corrupted memory before its fix and checks what moved (or that nothing
did) on Soft-RoCE; the memory ones are meant for `make test-asan` too."""
import gc
import sys
import threading
import time

import pytest

from conftest import poll_until, skip_if_unsupported

GRH = 40
QKEY = 0x11111111


def ud_qp(ib, pd, cq, port, create=None):
    qp = create() if create else pd.create_qp(ib.QPInitAttr(cq, cq, qp_type=ib.QPType.UD))
    qp.to_init(port, qkey=QKEY)
    qp.to_rtr(None, 0)
    qp.to_rts(0)
    return qp


def make_ah(ib, ctx, pd, port, gid_index):
    return pd.create_ah(ib.AHAttr(dgid=ctx.query_gid(port, gid_index), sgid_index=gid_index,
                                  port_num=port, is_global=1, hop_limit=64))


# ---- 2: the AH of a send must fit the QP type -----------------------------------------

def test_ud_send_without_ah_is_refused_and_nothing_is_sent(ib, ctx, pd, port, gid_index,
                                                           make_buffer):
    with ctx.create_cq(16) as cq:
        qp = ud_qp(ib, pd, cq, port)
        try:
            src = make_buffer(64, fill=1)
            wr = ib.SendWR(wr_id=5, opcode=ib.WROpcode.SEND, sg_list=[src.mr.sge()],
                           send_flags=ib.SendFlags.SIGNALED, remote_addr=0xdeadbeef000)
            with pytest.raises(ValueError, match="UD QP"):
                qp.post_send(wr)
            with pytest.raises(ValueError, match="work request 1 has no ah"):
                ah = make_ah(ib, ctx, pd, port, gid_index)
                ok = ib.SendWR(wr_id=4, opcode=ib.WROpcode.SEND, sg_list=[src.mr.sge()],
                               ah=ah, remote_qpn=qp.qp_num, remote_qkey=QKEY)
                qp.post_send([ok, wr])
            with pytest.raises(ValueError, match="UD QP"):
                qp.post_send(ib.PostList([wr]))
            time.sleep(0.1)
            assert cq.poll(4) == []
            # the same request with its AH goes (and completes)
            wr.ah, wr.remote_qpn, wr.remote_qkey = ah, qp.qp_num, QKEY
            qp.post_send(ib.PostList([wr]))
            assert poll_until(cq, 1)[0].wr_id == 5
            ah.close()
        finally:
            qp.close()


def test_ah_on_an_rc_qp_is_refused(ib, ctx, pd, port, gid_index, rc_pair, make_buffer):
    src = make_buffer(8, fill=3)
    dst = make_buffer(8)
    with make_ah(ib, ctx, pd, port, gid_index) as ah:
        wr = ib.SendWR(wr_id=9, opcode=ib.WROpcode.RDMA_WRITE, sg_list=[src.mr.sge()],
                       send_flags=ib.SendFlags.SIGNALED, remote_addr=dst.addr,
                       rkey=dst.mr.rkey, ah=ah)
        with pytest.raises(ValueError, match="only a UD QP"):
            rc_pair.qp_a.post_send(wr)
        plist = ib.PostList([wr])
        with pytest.raises(ValueError, match="only a UD QP"):
            rc_pair.qp_a.post_send(plist)
        time.sleep(0.1)
        assert rc_pair.cq_a.poll(4) == [] and bytes(dst.array) == b"\0" * 8
        plist[0] = ib.SendWR(wr_id=9, opcode=ib.WROpcode.RDMA_WRITE, sg_list=[src.mr.sge()],
                             send_flags=ib.SendFlags.SIGNALED, remote_addr=dst.addr,
                             rkey=dst.mr.rkey)
        rc_pair.qp_a.post_send(plist)
        poll_until(rc_pair.cq_a, 1)[0].raise_for_status()
        assert bytes(dst.array) == b"\3" * 8


def test_qpex_ud_request_needs_wr_set_ud_addr(ib, ctx, pd, cq, port, gid_index, make_buffer):
    skip_if_unsupported(ib, "extended QP post API", lambda: pd.create_qp_ex(
        cq, cq, send_ops_flags=ib.QPCreateSendOps.SEND))
    src = make_buffer(64, fill=2)
    qp = ud_qp(ib, pd, cq, port, create=lambda: pd.create_qp_ex(
        cq, cq, qp_type=ib.QPType.UD, send_ops_flags=ib.QPCreateSendOps.SEND))
    try:
        qp.wr_start()
        qp.wr_flags = ib.SendFlags.SIGNALED
        qp.wr_send()
        qp.wr_set_sge(src.mr.lkey, src.addr, 64)
        with pytest.raises(ib.VerbsError, match="wr_set_ud_addr"):
            qp.wr_send()
        with pytest.raises(ib.VerbsError, match="no destination"):
            qp.wr_complete()
        time.sleep(0.1)
        assert cq.poll(4) == []
        qp.wr_start()        # the batch was aborted: a new one starts
        qp.wr_abort()
    finally:
        qp.close()


def test_qpex_wr_set_ud_addr_on_rc_is_refused(ib, ctx, pd, cq, port, gid_index):
    skip_if_unsupported(ib, "extended QP post API", lambda: pd.create_qp_ex(
        cq, cq, send_ops_flags=ib.QPCreateSendOps.SEND))
    with pd.create_qp_ex(cq, cq, send_ops_flags=ib.QPCreateSendOps.SEND) as qp, \
            make_ah(ib, ctx, pd, port, gid_index) as ah:
        qp.wr_start()
        qp.wr_send()
        with pytest.raises(ib.VerbsError, match="only a UD QP"):
            qp.wr_set_ud_addr(ah, 1, QKEY)
        qp.wr_abort()


# ---- 11: poll(n) allocates no more than the CQ holds ----------------------------------

def test_poll_of_a_huge_count_is_clamped_to_the_cq(ib, ctx, rc_pair, make_buffer):
    # 2**31-1 entries of struct ibv_wc would be ~96 GiB: before, MemoryError (or worse)
    assert rc_pair.cq_a.poll(2**31 - 1) == []
    src, dst = make_buffer(8, fill=7), make_buffer(8)
    for i in range(3):
        rc_pair.qp_a.post_send(ib.SendWR(wr_id=i, opcode=ib.WROpcode.RDMA_WRITE,
                                         sg_list=[src.mr.sge()], remote_addr=dst.addr,
                                         rkey=dst.mr.rkey, send_flags=ib.SendFlags.SIGNALED))
    got = []
    deadline = time.monotonic() + 10
    while len(got) < 3 and time.monotonic() < deadline:
        got += rc_pair.cq_a.poll(2**31 - 1)
    assert [wc.wr_id for wc in got] == [0, 1, 2]


# ---- 13: T.__new__(T) skips the constructor's checks ----------------------------------

def test_qp_init_attr_made_by_new_is_refused(ib, pd):
    attr = ib.QPInitAttr.__new__(ib.QPInitAttr)
    # Its CQs may be None placeholders (the seed's QPInitAttr(None, None)):
    # create_qp says what is missing.
    with pytest.raises(TypeError, match="must be CQs, not None"):
        pd.create_qp(attr)


def test_bind_mw_with_a_bind_info_made_by_new_is_refused(ib, pd, rc_pair):
    skip_if_unsupported(ib, "type 2 memory windows", lambda: pd.alloc_mw(ib.MWType.TYPE_2))
    with pd.alloc_mw(ib.MWType.TYPE_2) as mw:
        info = ib.MWBindInfo.__new__(ib.MWBindInfo)
        wr = ib.SendWR(wr_id=1, opcode=ib.WROpcode.BIND_MW, mw=mw, bind_info=info,
                       rkey=ib.inc_rkey(mw.rkey), send_flags=ib.SendFlags.SIGNALED)
        with pytest.raises(ValueError, match="MWBindInfo.mr is not set"):
            rc_pair.qp_a.post_send(wr)
        time.sleep(0.1)
        assert rc_pair.cq_a.poll(4) == []


# ---- 14: no silent caps -----------------------------------------------------------------

def test_too_many_verbs_objects_in_one_call_is_an_error(ib, ctx, pd, cq):
    # A call holds exactly the handles its spec names (generated, no cap:
    # tests/device/test_gil.py); more arguments than it takes are refused.
    cqs = [ctx.create_cq(1) for _ in range(8)]
    try:
        with pytest.raises(TypeError, match="takes at most 1 argument"):
            pd.create_qp(*cqs)
    finally:
        for c in cqs:
            c.close()


# ---- 4: QPEx.wr_id / wr_flags convert before they check the QP -----------------------

def test_qpex_attribute_whose_index_closes_the_qp(ib, pd, cq):
    skip_if_unsupported(ib, "extended QP post API", lambda: pd.create_qp_ex(
        cq, cq, send_ops_flags=ib.QPCreateSendOps.SEND))
    for name in ("wr_id", "wr_flags"):
        qp = pd.create_qp_ex(cq, cq, send_ops_flags=ib.QPCreateSendOps.SEND)
        qp.wr_id = 1      # the struct ibv_qp_ex is looked up while the QP is open

        class ClosesTheQP:
            def __index__(self):
                qp.close()
                return 3

        with pytest.raises(ib.VerbsError) as e:
            setattr(qp, name, ClosesTheQP())
        assert e.value.errno == 9       # EBADF: nothing was written into the freed QP
        with pytest.raises(ib.VerbsError):
            qp.wr_start()


# ---- 7: INLINE data from the memory of a closed MR -------------------------------------

def test_inline_send_from_a_closed_mr_is_refused(ib, pd, rc_pair, make_buffer):
    buf = bytearray(b"\x05" * 16)
    mr = pd.reg_mr(buf, ib.AccessFlags.LOCAL_WRITE)
    dst = make_buffer(16)
    wr = ib.SendWR(wr_id=1, opcode=ib.WROpcode.RDMA_WRITE, sg_list=[mr.sge()],
                   send_flags=ib.SendFlags.INLINE | ib.SendFlags.SIGNALED,
                   remote_addr=dst.addr, rkey=dst.mr.rkey)
    plist = ib.PostList([wr])
    rc_pair.qp_a.post_send(plist)
    poll_until(rc_pair.cq_a, 1)[0].raise_for_status()
    assert bytes(dst.array) == b"\x05" * 16
    dst.array[:] = 0
    mr.close()
    del buf[:]        # the export is gone: the memory may go with it
    for what in (wr, plist):
        with pytest.raises(ib.VerbsError) as e:
            rc_pair.qp_a.post_send(what)
        assert e.value.errno == 9
    time.sleep(0.1)
    assert rc_pair.cq_a.poll(4) == [] and bytes(dst.array) == b"\0" * 16


# ---- 6: a release_gil post holds the AHs and MRs it reads -------------------------------

def test_release_gil_post_holds_its_ah_and_mrs(ib, ctx, pd, port, gid_index, make_buffer):
    with ctx.create_cq(256) as cq:
        qp = ud_qp(ib, pd, cq, port)
        ah = make_ah(ib, ctx, pd, port, gid_index)
        src = make_buffer(64, fill=1)
        mr = pd.reg_mr(src.addr, 64, ib.AccessFlags.LOCAL_WRITE)
        plist = ib.PostList([ib.SendWR(wr_id=i, opcode=ib.WROpcode.SEND, sg_list=[mr.sge()],
                                       ah=ah, remote_qpn=qp.qp_num, remote_qkey=QKEY,
                                       send_flags=ib.SendFlags.SIGNALED)
                             for i in range(4)], release_gil=True)
        outcomes = {"busy": 0}
        stop, started = threading.Event(), threading.Event()

        def closer():
            started.wait()
            while not stop.is_set():
                for obj in (ah, mr):
                    try:
                        obj.close()
                    except ib.VerbsError as e:
                        assert e.errno == 16      # EBUSY, never a close under the post
                        outcomes["busy"] += 1
                        continue
                    stop.set()
                    return

        t = threading.Thread(target=closer)
        posted = 0
        try:
            t.start()
            started.set()       # the closer gets the GIL when a post gives it up
            while not stop.is_set() and posted < 2000:
                try:
                    qp.post_send(plist)
                except ib.VerbsError as e:
                    assert e.errno in (9, 12)     # closed meanwhile; or the queue is full
                    if e.errno == 12:
                        poll_until(cq, 1)
                    continue
                posted += 4
                while cq.poll(64):
                    pass
        finally:
            stop.set()
            t.join()
            time.sleep(0.1)
            while cq.poll(64):
                pass
            for obj in (qp, ah, mr):
                obj.close()
        # the closer takes the GIL when a post gives it up: it meets posts in flight
        assert posted > 0 and outcomes["busy"] > 0


# ---- 8: get_cq_event returns CQs only -------------------------------------------------

def flush_one_receive(ib, qp, port, buf):
    """A flushed receive: one completion on qp's receive CQ without a peer."""
    qp.to_init(port, ib.AccessFlags.LOCAL_WRITE)
    qp.post_recv(ib.RecvWR(wr_id=7, sg_list=[buf.mr.sge(16)]))
    qp.modify(ib.QPAttrMask.STATE, qp_state=ib.QPState.ERR)


@pytest.mark.parametrize("other_type", ["QP", "CQ"])
def test_get_cq_event_finds_its_cq_when_the_address_names_another_object(
        ib, ctx, pd, port, make_buffer, other_type):
    # The registry maps the verbs objects of CQs, QPs, SRQs and CM IDs back to
    # their objects.  A CQ destroyed and another object (a QP, or a CQ) made at
    # its address while the event is read would make an address lookup hand
    # the event to that object: the hook makes the registry say so on purpose.
    # The event carries the CQ's token (its cq_context), so it finds the CQ
    # that completed, whatever its address names.
    from ibverbs import _ibverbs
    with ctx.create_comp_channel() as ch:
        cq_aliased = ctx.create_cq(4, channel=ch)
        cq_real = ctx.create_cq(4, channel=ch)
        qp_a = pd.create_qp(ib.QPInitAttr(cq_aliased, cq_aliased))
        qp_b = pd.create_qp(ib.QPInitAttr(cq_real, cq_real))
        buf = make_buffer(16)
        try:
            _ibverbs._registry_alias(cq_aliased, qp_b if other_type == "QP" else cq_real)
            cq_aliased.req_notify()
            cq_real.req_notify()
            flush_one_receive(ib, qp_a, port, buf)
            assert ch.get_cq_event() is cq_aliased
            cq_aliased.ack_events(1)
            assert poll_until(cq_aliased, 1)[0].wr_id == 7
            flush_one_receive(ib, qp_b, port, buf)
            assert ch.get_cq_event() is cq_real
            cq_real.ack_events(1)
            assert poll_until(cq_real, 1)[0].wr_id == 7
        finally:
            _ibverbs._registry_alias(cq_aliased, cq_aliased)
            for obj in (qp_a, qp_b, cq_aliased, cq_real):
                obj.close()


# ---- 9: a PostList updated while a release_gil post of it runs -------------------------

@pytest.mark.skipif(sys.version_info >= (3, 12), reason="CPython 3.12+ runs the GC at "
                    "eval-breaker points, never inside the update's allocations")
def test_postlist_update_refused_when_its_allocation_lets_a_post_start(ib, pd, rc_pair,
                                                                      make_buffer):
    # The update converts its SendWR (allocating, so the GC may run, and with it
    # other threads) before it writes the entry: the frozen check must come after.
    # A GC callback waits, inside that allocation, until the posting thread is in
    # ibv_post_send with the GIL released; it then holds the GIL until the update
    # returns, so the post cannot finish meanwhile: the update must be refused.
    src, dst = make_buffer(64, fill=3), make_buffer(64)

    def write(wr_id):
        # 21 SGEs with an owner each: the update's tuple of owners is then too
        # big for CPython's tuple free list, a GC allocation that collects.
        # (More SGEs than the QP takes: the posts fail, but run all the same.)
        return ib.SendWR(wr_id=wr_id, opcode=ib.WROpcode.RDMA_WRITE,
                         sg_list=[src.mr.sge(2, 2 * i) for i in range(21)],
                         remote_addr=dst.addr, rkey=dst.mr.rkey)

    plist = ib.PostList([write(i) for i in range(2)], release_gil=True)
    replacement = write(99)
    stop, go = threading.Event(), threading.Event()
    state = {"armed": False, "seen_posting": False, "posts": 0}

    def poster():
        go.wait()                       # idle until the update is inside its allocation
        while not stop.is_set():
            try:
                rc_pair.qp_a.post_send(plist)
                state["posts"] += 1
            except ib.VerbsError as e:
                # a full send queue; too many SGEs for the QP (33.2's rxe: -EINVAL)
                assert abs(e.errno) in (12, 22)
                time.sleep(0.001)

    def wait_for_the_post(phase, info):
        if phase != "start" or not state["armed"] or threading.get_ident() != updater:
            return
        state["armed"] = False
        go.set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                plist[1].wr_id = 5      # raises while the list is being posted
            except RuntimeError:
                state["seen_posting"] = True
                return                  # keep the GIL: the post stays in flight
            time.sleep(0.0002)          # let the poster reach ibv_post_send

    updater = threading.get_ident()
    thread = threading.Thread(target=poster)
    old_threshold = gc.get_threshold()
    thread.start()
    refused = pytest.raises(RuntimeError, match="being posted")
    try:
        gc.callbacks.append(wait_for_the_post)
        with refused:
            spare = [None]              # the young generation's count is >= 1 now
            gc.set_threshold(gc.get_count()[0])   # its next GC allocation collects:
            state["armed"] = True       # (this allocates nothing)
            plist[0] = replacement      # the update's tuple of owners
        del spare
    finally:
        gc.set_threshold(*old_threshold)
        gc.callbacks.remove(wait_for_the_post)
        stop.set()
        go.set()
        thread.join()
    assert state["seen_posting"]
    assert plist[0].wr_id == 0          # the refused update wrote nothing


# ---- 12's QPEx: a later argument's __index__ closing the AH ----------------------------

def test_qpex_wr_set_ud_addr_holds_its_ah_while_converting(ib, ctx, pd, cq, port, gid_index):
    skip_if_unsupported(ib, "extended QP post API", lambda: pd.create_qp_ex(
        cq, cq, send_ops_flags=ib.QPCreateSendOps.SEND))
    qp = ud_qp(ib, pd, cq, port, create=lambda: pd.create_qp_ex(
        cq, cq, qp_type=ib.QPType.UD, send_ops_flags=ib.QPCreateSendOps.SEND))
    ah = make_ah(ib, ctx, pd, port, gid_index)

    class ClosesTheAH:
        def __index__(self):
            ah.close()
            return qp.qp_num

    try:
        qp.wr_start()
        qp.wr_send()
        with pytest.raises(ib.VerbsError) as e:
            qp.wr_set_ud_addr(ah, ClosesTheAH(), QKEY)
        assert e.value.errno == 16          # EBUSY: the AH stays open under the call
        assert ah.closed is False
        qp.wr_abort()
    finally:
        qp.close()
        ah.close()
