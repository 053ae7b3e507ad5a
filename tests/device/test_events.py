"""Asynchronous events."""
import errno
import fcntl
import os
import threading

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import poll_until


def test_get_async_event_on_a_nonblocking_fd_raises_eagain(ib, ctx):
    flags = fcntl.fcntl(ctx.async_fd, fcntl.F_GETFL)
    fcntl.fcntl(ctx.async_fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    with pytest.raises(ib.VerbsError) as exc:
        ctx.get_async_event()
    assert exc.value.errno == errno.EAGAIN


@pytest.mark.parametrize("address_reused", [False, True])
def test_srq_limit_reached_is_reported_as_an_async_event(ib, ctx, pd, port, gid_index, access,
                                                       make_buffer, address_reused):
    """Arm the SRQ limit, consume receives below it: the context reports
    SRQ_LIMIT_REACHED naming the very SRQ object.  address_reused: the
    registry says the SRQ's address is another SRQ's (the test hook), as
    when an SRQ is destroyed and another made at its address while the
    event is read: the event still names its own SRQ (by its token)."""
    from ibverbs import _ibverbs
    with pd.create_srq(max_wr=16) as srq, ctx.create_cq(16) as cq_a, ctx.create_cq(16) as cq_b, \
            pd.create_srq(max_wr=4) as other:
        a = pd.create_qp(ib.QPInitAttr(cq_a, cq_a))
        b = pd.create_qp(ib.QPInitAttr(cq_b, cq_b, srq=srq))
        if address_reused:
            _ibverbs._registry_alias(srq, other)
        try:
            info = lambda q: ib.local_qp_info(q, ctx.query_port(port), ctx.query_gid(port, gid_index),
                                              port=port)
            ib.connect_rc(a, info(b), port=port, sgid_index=gid_index, access=access)
            ib.connect_rc(b, info(a), port=port, sgid_index=gid_index, access=access)
            dst = make_buffer(16)
            srq.post_recv([ib.RecvWR(wr_id=i, sg_list=[dst.mr.sge()]) for i in range(4)])
            srq.modify(srq_limit=3)
            events = []
            t = threading.Thread(target=lambda: events.append(ctx.get_async_event()))
            t.start()
            src = make_buffer(16, fill=1)
            for _ in range(2):
                a.post_send(ib.SendWR(sg_list=[src.mr.sge()], opcode=ib.WROpcode.SEND,
                                      send_flags=ib.SendFlags.SIGNALED))
            poll_until(cq_a, 2)
            poll_until(cq_b, 2)
            t.join(10)
            assert not t.is_alive(), "no async event within 10 s"
            (ev,) = events
            assert ev.event_type == ib.EventType.SRQ_LIMIT_REACHED
            assert ev.element is srq
            assert ev.event_type_str == ib.event_type_str(ev.event_type)
            ctx.ack_async_event(ev)
            ctx.ack_async_event(ev)          # idempotent
            assert ev.acked
        finally:
            _ibverbs._registry_alias(srq, srq)
            a.close()
            b.close()


def test_error_completion_then_recovery_through_reset(ib, rc_pair, make_buffer, port, gid_index, access):
    """A bad rkey fails the requester QP; RESET -> INIT -> RTR -> RTS makes it work again."""
    src, dst = make_buffer(64, fill=3), make_buffer(64)
    wr = ib.SendWR(sg_list=[src.mr.sge()], opcode=ib.WROpcode.RDMA_WRITE,
                   send_flags=ib.SendFlags.SIGNALED, remote_addr=dst.addr, rkey=dst.mr.rkey + 0x100)
    rc_pair.qp_a.post_send(wr)
    (wc,) = poll_until(rc_pair.cq_a, 1)
    assert wc.status == ib.WCStatus.REM_ACCESS_ERR
    assert rc_pair.qp_a.query()[0]["qp_state"] == ib.QPState.ERR
    ctx = rc_pair.qp_a.pd.context
    for qp in (rc_pair.qp_a, rc_pair.qp_b):
        qp.modify(ib.QPAttrMask.STATE, qp_state=ib.QPState.RESET)
    while rc_pair.cq_a.poll(16) or rc_pair.cq_b.poll(16):
        pass
    info = lambda q, psn: ib.local_qp_info(q, ctx.query_port(port), ctx.query_gid(port, gid_index),
                                           port=port, psn=psn)
    ib.connect_rc(rc_pair.qp_a, info(rc_pair.qp_b, 7), port=port, sgid_index=gid_index,
                  access=access, local_psn=5)
    ib.connect_rc(rc_pair.qp_b, info(rc_pair.qp_a, 5), port=port, sgid_index=gid_index,
                  access=access, local_psn=7)
    wr.rkey = dst.mr.rkey
    rc_pair.qp_a.post_send(wr)
    poll_until(rc_pair.cq_a, 1)[0].raise_for_status()
    assert bytes(dst.array) == b"\x03" * 64


def test_closing_a_context_while_another_thread_waits_is_refused(ib, device_names, port, gid_index,
                                                                 access):
    """close() of a context another thread waits on (get_async_event, GIL
    released) raises EBUSY and changes nothing; an SRQ_LIMIT_REACHED event
    on that same context wakes the waiter, and then everything closes."""
    import time
    import numpy as np
    from conftest import open_device
    ctx = open_device(ib, device_names[0])
    events = []
    t = threading.Thread(target=lambda: events.append(ctx.get_async_event()), daemon=True)
    t.start()
    time.sleep(0.2)
    assert t.is_alive()
    with pytest.raises(ib.VerbsError) as exc:
        ctx.close()          # no children: refused only because a call is in flight
    assert exc.value.errno == errno.EBUSY
    assert not ctx.closed and ctx.query_port(port).state == ib.PortState.ACTIVE
    # Wake the waiter: consume SRQ receives below an armed limit.
    pd = ctx.alloc_pd()
    srq = pd.create_srq(max_wr=16)
    cq_a, cq_b = ctx.create_cq(16), ctx.create_cq(16)
    a = pd.create_qp(ib.QPInitAttr(cq_a, cq_a))
    b = pd.create_qp(ib.QPInitAttr(cq_b, cq_b, srq=srq))
    src = np.ones(16, dtype=np.uint8)
    dst = np.zeros(16, dtype=np.uint8)
    src_mr, dst_mr = ib.reg_tensor(pd, src, access), ib.reg_tensor(pd, dst, access)
    try:
        info = lambda q: ib.local_qp_info(q, ctx.query_port(port), ctx.query_gid(port, gid_index),
                                          port=port)
        ib.connect_rc(a, info(b), port=port, sgid_index=gid_index, access=access)
        ib.connect_rc(b, info(a), port=port, sgid_index=gid_index, access=access)
        srq.post_recv([ib.RecvWR(wr_id=i, sg_list=[dst_mr.sge()]) for i in range(4)])
        srq.modify(srq_limit=3)
        for _ in range(2):
            a.post_send(ib.SendWR(sg_list=[src_mr.sge()], opcode=ib.WROpcode.SEND,
                                  send_flags=ib.SendFlags.SIGNALED))
        poll_until(cq_a, 2)
        poll_until(cq_b, 2)
        t.join(10)
        assert not t.is_alive(), "no async event within 10 s"
        (ev,) = events
        assert ev.event_type == ib.EventType.SRQ_LIMIT_REACHED and ev.element is srq
        del ev, events[:]
    finally:
        for obj in (a, b, src_mr, dst_mr, srq, cq_a, cq_b, pd):
            obj.close()
    ctx.close()
    assert ctx.closed


# ---- fuzz: events of CQs closed while another thread reads them ----------------------

EVENT_FUZZ_EXAMPLES = int(os.environ.get("IBVERBS_EVENT_FUZZ_EXAMPLES", "5"))


@settings(max_examples=EVENT_FUZZ_EXAMPLES, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(plan=st.lists(st.sampled_from(["keep", "close", "close"]), min_size=2, max_size=8))
def test_fuzz_cq_events_while_cqs_are_closed_and_others_made(ib, ctx, pd, port, make_buffer,
                                                              plan):
    """A thread reads CQ events while this one makes CQs on the channel,
    gives each a completion event, and closes some at once (their events
    may be read after: a new CQ can then be at the address).  Every CQ the
    reader gets had its completion before: never a CQ made since at a freed
    one's address.  The last CQ's event ends the reader."""
    buf = make_buffer(16)
    notified, got, wrong, last = set(), [], [], []
    with ctx.create_comp_channel() as ch:
        def reader():
            while True:
                cq = ch.get_cq_event()
                if id(cq) not in notified:
                    wrong.append(cq)
                got.append(cq)
                try:
                    cq.ack_events(1)
                except ib.VerbsError:
                    pass            # closed meanwhile
                if last and cq is last[0]:
                    return

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        kept = []
        for i, what in enumerate(plan + ["last"]):
            cq = ctx.create_cq(4, channel=ch)
            qp = pd.create_qp(ib.QPInitAttr(cq, cq))
            cq.req_notify()
            qp.to_init(port, ib.AccessFlags.LOCAL_WRITE)
            qp.post_recv(ib.RecvWR(wr_id=i, sg_list=[buf.mr.sge(16)]))
            if what == "last":
                last.append(cq)
            notified.add(id(cq))        # ids stay unique: every CQ object is kept alive
            qp.modify(ib.QPAttrMask.STATE, qp_state=ib.QPState.ERR)
            poll_until(cq, 1)
            qp.close()
            kept.append(cq)
            if what == "close":
                cq.close()
        t.join(20)
        assert not t.is_alive(), "the last CQ's event never came"
        for cq in kept:
            cq.close()
    assert wrong == [] and got[-1] is last[0]
