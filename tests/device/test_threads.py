"""Threads: calls in flight, close() from another thread, concurrent data paths.

The rule (ibverbs/src/handles.c, applied to every method by
templates/handle.c.h.j2): a method call counts as in flight on its object
(and on the handles passed to it) from entry to return - whether it blocks
with the GIL released (get_cq_event, get_async_event) or runs Python code
in between (an argument's __index__, a list's __iter__, a finalizer).
close() of an object with a call in flight raises VerbsError EBUSY and
changes nothing; the caller retries once the call has returned.
"""
from __future__ import annotations

import errno
import threading
import time

import numpy as np
import pytest

from conftest import RCPair, in_thread as run, open_device, poll_until


def blocked(t, seconds=0.3):
    """Give thread t time to block; it must still be running."""
    time.sleep(seconds)
    assert t.is_alive()
    return True


def flush_one(ib, pd, cq, port, buf_mr):
    """One completion on cq: a receive flushed by moving a fresh QP to ERR."""
    qp = pd.create_qp(ib.QPInitAttr(cq, cq))
    qp.to_init(port, ib.AccessFlags.LOCAL_WRITE)
    qp.post_recv(ib.RecvWR(wr_id=77, sg_list=[buf_mr.sge(16)]))
    qp.modify(ib.QPAttrMask.STATE, qp_state=ib.QPState.ERR)
    return qp


def test_a_thread_blocked_in_get_cq_event_keeps_its_channel_and_context_open(
        ib, device_names, port, access):
    ctx = open_device(ib, device_names[0])
    ch = ctx.create_comp_channel()
    t, box = run(ch.get_cq_event)
    assert blocked(t)
    for obj in (ch, ctx):       # ch: a call in flight; ctx: ch is its child
        with pytest.raises(ib.VerbsError) as exc:
            obj.close()
        assert exc.value.errno == errno.EBUSY
    pd = ctx.alloc_pd()
    buf = np.zeros(64, dtype=np.uint8)
    mr = ib.reg_tensor(pd, buf, access)
    cq = ctx.create_cq(8, channel=ch)
    other = ctx.create_cq(8, channel=ch)
    cq.req_notify()
    other.req_notify()
    other.close()               # not in flight: fine while the channel waits
    qp = flush_one(ib, pd, cq, port, mr)
    t.join(10)
    assert not t.is_alive() and box == {"result": cq}
    cq.ack_events(1)
    (wc,) = poll_until(cq, 1)
    assert wc.wr_id == 77 and wc.status == ib.WCStatus.WR_FLUSH_ERR
    for obj in (qp, cq, mr, pd, ch, ctx):
        obj.close()


def _srq_limit_setup(ib, ctx, port, gid_index, access):
    """Connected RC QPs a -> b with b on an SRQ armed with a limit; returns
    (trigger, objects): trigger() consumes receives below the limit, which
    raises SRQ_LIMIT_REACHED on ctx."""
    pd = ctx.alloc_pd()
    srq = pd.create_srq(max_wr=16)
    cq_a, cq_b = ctx.create_cq(16), ctx.create_cq(16)
    a = pd.create_qp(ib.QPInitAttr(cq_a, cq_a))
    b = pd.create_qp(ib.QPInitAttr(cq_b, cq_b, srq=srq))
    src, dst = np.ones(16, dtype=np.uint8), np.zeros(16, dtype=np.uint8)
    src_mr, dst_mr = ib.reg_tensor(pd, src, access), ib.reg_tensor(pd, dst, access)
    info = lambda q: ib.local_qp_info(q, ctx.query_port(port), ctx.query_gid(port, gid_index),
                                      port=port)
    ib.connect_rc(a, info(b), port=port, sgid_index=gid_index, access=access)
    ib.connect_rc(b, info(a), port=port, sgid_index=gid_index, access=access)
    srq.post_recv([ib.RecvWR(wr_id=i, sg_list=[dst_mr.sge()]) for i in range(4)])
    srq.modify(srq_limit=3)

    def trigger():
        for _ in range(2):
            a.post_send(ib.SendWR(sg_list=[src_mr.sge()], opcode=ib.WROpcode.SEND,
                                  send_flags=ib.SendFlags.SIGNALED))
        poll_until(cq_a, 2)
        poll_until(cq_b, 2)
    return trigger, srq, [a, b, src_mr, dst_mr, srq, cq_a, cq_b, pd]


def test_qps_and_cqs_close_while_another_thread_waits_for_async_events(
        ib, device_names, port, gid_index, access):
    """Objects that are not in flight close normally while a thread waits
    on their context; the waiter then gets the next event, naming a live
    object (never a freed one)."""
    ctx = open_device(ib, device_names[0])
    trigger, srq, objs = _srq_limit_setup(ib, ctx, port, gid_index, access)
    t, box = run(ctx.get_async_event)
    try:
        assert blocked(t)
        pd = objs[-1]
        with ctx.create_cq(8) as cq:
            qp = pd.create_qp(ib.QPInitAttr(cq, cq, srq=srq))
            qp.close()
        with pytest.raises(ib.VerbsError):
            ctx.close()
        trigger()
        t.join(10)
        assert not t.is_alive(), "no async event within 10 s"
        ev = box["result"]
        assert ev.event_type == ib.EventType.SRQ_LIMIT_REACHED and ev.element is srq
        del ev, box["result"]
    finally:
        for obj in objs:
            obj.close()
    ctx.close()


class Gate:
    """An argument whose conversion blocks (GIL released) until released:
    the call it is passed to stays in flight meanwhile."""

    def __init__(self, value):
        self.value = value
        self.entered = threading.Event()
        self.go = threading.Event()

    def __index__(self):
        self.entered.set()
        assert self.go.wait(10)
        return self.value


class GateList(list):
    """A list of work requests whose iteration blocks the same way."""

    def __init__(self, items):
        super().__init__(items)
        self.entered = threading.Event()
        self.go = threading.Event()

    def __iter__(self):
        self.entered.set()
        assert self.go.wait(10)
        return super().__iter__()


def test_close_from_another_thread_is_refused_while_a_call_is_in_flight(ib, ctx, port, access):
    pd = ctx.alloc_pd()
    cq = ctx.create_cq(16)
    lone_cq = ctx.create_cq(16)          # no QP on it: only the call in flight holds it
    srq = pd.create_srq(max_wr=8)
    qp = pd.create_qp(ib.QPInitAttr(cq, cq))
    qp.to_init(port, access)
    buf = np.zeros(4096, dtype=np.uint8)
    mr = ib.reg_tensor(pd, buf, access)
    ch = ctx.create_comp_channel()
    cases = [
        ("CQ.poll", lone_cq, lambda g: lone_cq.poll(g), Gate(4)),
        ("QP.post_recv", qp, lambda g: qp.post_recv(g), GateList([ib.RecvWR(wr_id=1)])),
        ("SRQ.post_recv", srq, lambda g: srq.post_recv(g), GateList([ib.RecvWR(wr_id=2)])),
        ("MR.sge", mr, lambda g: mr.sge(offset=g), Gate(0)),
        ("PD.reg_mr", pd, lambda g: pd.reg_mr(buf.ctypes.data, g, access).close(), Gate(64)),
        ("Context.query_port", ctx, lambda g: ctx.query_port(g), Gate(port)),
        ("QP.modify", qp, lambda g: qp.modify(ib.QPAttrMask.ACCESS_FLAGS, qp_access_flags=g),
         Gate(int(access))),
        ("SRQ.modify", srq, lambda g: srq.modify(srq_limit=g), Gate(1)),
        ("CompChannel as an argument", ch,
         lambda g: ctx.create_cq(4, channel=ch, comp_vector=g).close(), Gate(0)),
    ]
    try:
        for name, obj, call, gate in cases:
            t, box = run(lambda: call(gate))
            assert gate.entered.wait(10), name
            try:
                obj.close()
            except ib.VerbsError as exc:
                assert exc.errno == errno.EBUSY, name
                # Context and PD also have children; the others only the call.
                assert obj in (ctx, pd) or "in progress" in str(exc), (name, str(exc))
            else:
                raise AssertionError(f"{name}: closed while a call was in flight")
            finally:
                gate.go.set()
            t.join(10)
            assert not t.is_alive() and "error" not in box, (name, box)
            assert not obj.closed, name
    finally:
        for _, _, _, gate in cases:
            gate.go.set()
        for obj in (mr, qp, srq, cq, lone_cq, ch, pd):
            obj.close()


def test_a_qp_closed_under_a_thread_posting_on_it_gives_that_thread_ebadf(
        ib, pd, port, gid_index, access, make_buffer):
    pair = RCPair(ib, pd, pd, port, gid_index, gid_index, access)
    src, dst = make_buffer(64, fill=1), make_buffer(64)
    stop = threading.Event()
    posted = []

    def poster():
        wr = ib.SendWR(sg_list=[src.mr.sge()], opcode=ib.WROpcode.RDMA_WRITE,
                       send_flags=ib.SendFlags.SIGNALED, remote_addr=dst.addr, rkey=dst.mr.rkey)
        while not stop.is_set():
            pair.qp_a.post_send(wr)          # raises once the QP is closed
            posted.append(1)
            poll_until(pair.cq_a, 1)[0].raise_for_status()

    t, box = run(poster)
    try:
        deadline = time.monotonic() + 10
        while len(posted) < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(posted) >= 20
        for _ in range(1000):
            try:
                pair.qp_a.close()
                break
            except ib.VerbsError as exc:      # a call in flight: retry
                assert exc.errno == errno.EBUSY
        assert pair.qp_a.closed
        t.join(10)
        assert not t.is_alive()
        assert isinstance(box.get("error"), ib.VerbsError) and box["error"].errno == errno.EBADF
    finally:
        stop.set()
        t.join(10)
        box.clear()
        pair.close()


def test_a_cq_closed_under_a_thread_polling_it_gives_that_thread_ebadf(ib, ctx):
    cq = ctx.create_cq(16)
    polls = []

    def poller():
        while True:
            cq.poll(4)
            polls.append(1)

    t, box = run(poller)
    deadline = time.monotonic() + 10
    while len(polls) < 100 and time.monotonic() < deadline:
        time.sleep(0.01)
    while True:
        try:
            cq.close()
            break
        except ib.VerbsError as exc:
            assert exc.errno == errno.EBUSY
    t.join(10)
    assert not t.is_alive()
    assert isinstance(box["error"], ib.VerbsError) and box["error"].errno == errno.EBADF


@pytest.mark.parametrize("nthreads", [4])
def test_threads_posting_and_polling_on_their_own_qps_get_exactly_their_completions(
        ib, ctx, ctx2, port, gid_index, gid_index2, access, nthreads):
    """Each thread drives its own RC pair (half of them across rxe0 and
    rxe1): RDMA writes, and sends with immediate data, checked byte for byte
    and completion for completion."""
    rounds = 40
    pds = [ctx.alloc_pd(), ctx2.alloc_pd()]
    pairs, bufs = [], []
    for k in range(nthreads):
        pd_b = pds[k % 2]
        pairs.append(RCPair(ib, pds[0], pd_b, port, gid_index,
                            gid_index if pd_b is pds[0] else gid_index2, access))
        src = np.zeros(256, dtype=np.uint8)
        dst = np.zeros(256, dtype=np.uint8)
        inbox = np.zeros(256, dtype=np.uint8)
        bufs.append((src, dst, inbox, ib.reg_tensor(pds[0], src, access),
                     ib.reg_tensor(pd_b, dst, access), ib.reg_tensor(pd_b, inbox, access)))
    start = threading.Barrier(nthreads)

    def worker(k):
        pair = pairs[k]
        src, dst, inbox, src_mr, dst_mr, inbox_mr = bufs[k]
        start.wait()
        for r in range(rounds):
            src[:] = (k * 31 + r) % 256
            pair.qp_b.post_recv(ib.RecvWR(wr_id=10_000 * k + r, sg_list=[inbox_mr.sge()]))
            pair.qp_a.post_send([
                ib.SendWR(wr_id=2 * r, sg_list=[src_mr.sge()], opcode=ib.WROpcode.RDMA_WRITE,
                          remote_addr=dst_mr.addr, rkey=dst_mr.rkey),
                ib.SendWR(wr_id=2 * r + 1, sg_list=[src_mr.sge()],
                          opcode=ib.WROpcode.SEND_WITH_IMM, imm_data=k << 16 | r,
                          send_flags=ib.SendFlags.SIGNALED)])
            (wc,) = poll_until(pair.cq_a, 1)
            assert wc.is_success and wc.wr_id == 2 * r + 1, wc
            (rwc,) = poll_until(pair.cq_b, 1)
            assert rwc.is_success and rwc.wr_id == 10_000 * k + r and rwc.imm_data == k << 16 | r
            assert (dst == (k * 31 + r) % 256).all() and (inbox == (k * 31 + r) % 256).all()
        return rounds

    threads = [run(lambda k=k: worker(k)) for k in range(nthreads)]
    try:
        for t, _ in threads:
            t.join(120)
        for t, box in threads:
            assert not t.is_alive()
            if "error" in box:
                raise box["error"]
            assert box["result"] == rounds
        for pair in pairs:
            assert pair.cq_a.poll(16) == [] and pair.cq_b.poll(16) == []
    finally:
        for b in bufs:
            for mr in b[3:]:
                mr.close()
        for pair in pairs:
            pair.close()
        for pd in pds:
            pd.close()
