"""A SendWR or RecvWR posted again unchanged is sent from the C request its
last post kept, SGEs included, without reading its list (ibverbs/src/wr.c,
common.h's struct ibp_sge_cache).  Every way a program can change what the
request says must reach the next post: the bytes land where the request
says now, never where it said before."""
import errno
import gc
import os

import pytest

from conftest import connect_loopback, in_fork_child, paused_call, poll_until, resume


def write(ib, src, dst, length=8, offset=0, wr_id=1):
    return ib.SendWR(wr_id=wr_id, sg_list=[src.mr.sge(length, offset)],
                     opcode=ib.WROpcode.RDMA_WRITE, send_flags=ib.SendFlags.SIGNALED,
                     remote_addr=dst.addr, rkey=dst.mr.rkey)


def posted(pair, wrs, completions=1):
    pair.qp_a.post_send(wrs)
    wcs = poll_until(pair.cq_a, completions)
    for wc in wcs:
        wc.raise_for_status()
    return wcs


@pytest.fixture
def src(make_buffer):
    b = make_buffer(256)
    b.array[:] = list(range(256))
    return b


@pytest.fixture
def dst(make_buffer):
    return make_buffer(256)


def landed(dst, n=8):
    return bytes(dst.array[:n])


def test_an_sge_changed_after_a_post_is_read_again(ib, rc_pair, src, dst):
    wr = write(ib, src, dst)
    sge = wr.sg_list[0]          # read through the getter: kept again once dropped
    posted(rc_pair, wr)
    posted(rc_pair, wr)          # the kept request
    assert landed(dst) == bytes(range(8))
    sge.addr = src.addr + 16
    posted(rc_pair, wr)
    assert landed(dst) == bytes(range(16, 24))
    sge.length = 4
    dst.array[:8] = [0] * 8
    posted(rc_pair, wr)
    assert landed(dst) == bytes(range(16, 20)) + b"\0" * 4
    sge.__init__(src.mr, 8, offset=100)             # a second __init__ is a change too
    posted(rc_pair, wr)
    assert landed(dst) == bytes(range(100, 108))
    sge.lkey = src.mr.lkey ^ 0x5a5a00               # a wrong lkey fails, as at first
    rc_pair.qp_a.post_send(wr)
    (wc,) = poll_until(rc_pair.cq_a, 1)
    assert wc.status != ib.WCStatus.SUCCESS


def test_an_sge_in_two_kept_requests_changes_both(ib, rc_pair, src, dst, make_buffer):
    other = make_buffer(256)
    sge = src.mr.sge(8)
    a = ib.SendWR(wr_id=1, sg_list=[sge], opcode=ib.WROpcode.RDMA_WRITE,
                  send_flags=ib.SendFlags.SIGNALED, remote_addr=dst.addr, rkey=dst.mr.rkey)
    b = ib.SendWR(wr_id=2, sg_list=[sge], opcode=ib.WROpcode.RDMA_WRITE,
                  send_flags=ib.SendFlags.SIGNALED, remote_addr=other.addr, rkey=other.mr.rkey)
    posted(rc_pair, a)
    posted(rc_pair, b)
    sge.addr = src.addr + 40
    posted(rc_pair, a)
    posted(rc_pair, b)
    assert landed(dst) == landed(other) == bytes(range(40, 48))


def test_a_list_changed_through_the_getter_is_read_again(ib, rc_pair, src, dst):
    wr = write(ib, src, dst, length=4)
    posted(rc_pair, wr)
    posted(rc_pair, wr)
    wr.sg_list.append(src.mr.sge(4, 200))    # the list is let go of at once
    posted(rc_pair, wr)
    assert landed(dst) == bytes(range(4)) + bytes(range(200, 204))
    posted(rc_pair, wr)
    first = wr.sg_list[0]                    # held: its death would also tell
    wr.sg_list[0] = src.mr.sge(4, 50)
    posted(rc_pair, wr)
    assert landed(dst) == bytes(range(50, 54)) + bytes(range(200, 204))
    assert first.addr == src.addr


def test_a_list_handed_out_is_read_at_each_post_while_held(ib, rc_pair, src, dst):
    wr = write(ib, src, dst, length=4)
    posted(rc_pair, wr)
    held = wr.sg_list
    posted(rc_pair, wr)
    held.append(src.mr.sge(4, 200))          # after the post: the next one must see it
    posted(rc_pair, wr)
    assert landed(dst) == bytes(range(4)) + bytes(range(200, 204))
    held[0] = src.mr.sge(4, 50)
    posted(rc_pair, wr)
    assert landed(dst) == bytes(range(50, 54)) + bytes(range(200, 204))
    del held[1:]
    dst.array[:8] = [0] * 8
    posted(rc_pair, wr)
    assert landed(dst) == bytes(range(50, 54)) + b"\0" * 4


def test_a_list_reached_through_the_collector_is_not_trusted(ib, rc_pair, src, dst):
    wr = write(ib, src, dst)
    posted(rc_pair, wr)
    posted(rc_pair, wr)
    (lst,) = [r for r in gc.get_referents(wr) if isinstance(r, list)]
    first = lst[0]                           # held: its death would also tell
    lst[0] = src.mr.sge(8, 64)               # no getter involved
    posted(rc_pair, wr)
    assert landed(dst) == bytes(range(64, 72))
    assert first.addr == src.addr


def test_assigning_or_reinitializing_replaces_what_is_kept(ib, rc_pair, src, dst):
    wr = write(ib, src, dst)
    posted(rc_pair, wr)
    posted(rc_pair, wr)
    wr.sg_list = [src.mr.sge(8, 8)]
    posted(rc_pair, wr)
    assert landed(dst) == bytes(range(8, 16))
    posted(rc_pair, wr)
    wr.__init__(wr_id=5, sg_list=[src.mr.sge(8, 24)], opcode=ib.WROpcode.RDMA_WRITE,
                send_flags=ib.SendFlags.SIGNALED, remote_addr=dst.addr + 64, rkey=dst.mr.rkey)
    (wc,) = posted(rc_pair, wr)
    assert wc.wr_id == 5 and bytes(dst.array[64:72]) == bytes(range(24, 32))
    wr.sg_list = None                         # no SGEs: a zero-length write, not the old ones
    dst.array[:] = [0] * 256
    posted(rc_pair, wr)
    assert bytes(dst.array) == b"\0" * 256


def test_kept_requests_in_chains_and_singleton_lists(ib, rc_pair, src, dst, make_buffer):
    other = make_buffer(256)
    a, b = write(ib, src, dst, wr_id=1), write(ib, src, other, offset=32, wr_id=2)
    posted(rc_pair, [a, b], 2)
    a.sg_list[0].addr = src.addr + 8
    b.wr_id = 3
    wcs = posted(rc_pair, (a, b, a), 3)        # a tuple, and one request twice
    assert [wc.wr_id for wc in wcs] == [1, 3, 1]
    assert landed(dst) == bytes(range(8, 16)) and landed(other) == bytes(range(32, 40))
    b.wr_id = 4
    (wc,) = posted(rc_pair, [b])
    assert wc.wr_id == 4


def test_a_kept_request_still_meets_every_post_check(ib, pd, cq, rc_pair, src, dst):
    wr = write(ib, src, dst)
    posted(rc_pair, wr)
    posted(rc_pair, wr)
    # INLINE: the buffers are checked at each post, so it is not kept
    wr.send_flags = ib.SendFlags.SIGNALED | ib.SendFlags.INLINE
    wr.sg_list[0].addr = src.addr + 128
    posted(rc_pair, wr)
    assert landed(dst) == bytes(range(128, 136))
    wr.send_flags = ib.SendFlags.SIGNALED
    posted(rc_pair, wr)
    posted(rc_pair, wr)
    # a UD QP refuses a request without an AH, kept or not
    with pd.create_qp(ib.QPInitAttr(cq, cq, qp_type=ib.QPType.UD, max_send_wr=4)) as ud:
        with pytest.raises(ValueError, match="no ah"):
            ud.post_send(wr)
        with pytest.raises(ValueError, match="no ah"):
            ud.post_send([wr, wr])
    # a closed QP
    with pd.create_qp(ib.QPInitAttr(cq, cq, qp_type=ib.QPType.RC, max_send_wr=4)) as qp:
        pass
    with pytest.raises(ib.VerbsError) as exc:
        qp.post_send(wr)
    assert exc.value.errno == 9


def test_a_kept_receive_lands_where_its_sge_says_now(ib, rc_pair, src, make_buffer):
    first, second = make_buffer(64), make_buffer(64)
    rwr = ib.RecvWR(wr_id=7, sg_list=[first.mr.sge(16)])
    send = ib.SendWR(wr_id=1, sg_list=[src.mr.sge(16)], opcode=ib.WROpcode.SEND,
                     send_flags=ib.SendFlags.SIGNALED)
    for k in range(2):                         # the second post is the kept one
        rc_pair.qp_b.post_recv(rwr)
        posted(rc_pair, send)
        (rwc,) = poll_until(rc_pair.cq_b, 1)
        assert rwc.wr_id == 7 and rwc.byte_len == 16
    assert bytes(first.array[:16]) == bytes(range(16))
    rwr.sg_list[0].addr = second.addr
    rwr.sg_list[0].lkey = second.mr.lkey
    rwr.wr_id = 8
    rc_pair.qp_b.post_recv([rwr])
    posted(rc_pair, send)
    (rwc,) = poll_until(rc_pair.cq_b, 1)
    assert rwc.wr_id == 8 and bytes(second.array[:16]) == bytes(range(16))
    rwr.sg_list = [first.mr.sge(4)]            # shorter than what comes: an error completion
    rc_pair.qp_b.post_recv(rwr)
    rc_pair.qp_a.post_send(send)
    (rwc,) = poll_until(rc_pair.cq_b, 1)
    assert rwc.wr_id == 8 and rwc.status != ib.WCStatus.SUCCESS


def test_a_receive_posted_inside_an_assignment_is_not_kept_past_it(ib, rc_pair, src, make_buffer):
    """Issue 35, point 1: a post made while sg_list's assignment runs Python
    code (the new sequence's __iter__) was kept, and every later post
    received into the old buffer."""
    first, second = make_buffer(64), make_buffer(64)
    old = first.mr.sge(16)          # held: its death would have told the old caches
    rwr = ib.RecvWR(wr_id=7, sg_list=[old])
    send = ib.SendWR(wr_id=1, sg_list=[src.mr.sge(16)], opcode=ib.WROpcode.SEND,
                     send_flags=ib.SendFlags.SIGNALED)

    def receive():
        posted(rc_pair, send)
        (rwc,) = poll_until(rc_pair.cq_b, 1)
        rwc.raise_for_status()

    for _ in range(2):                         # the second post is the kept one
        rc_pair.qp_b.post_recv(rwr)
        receive()

    class PostsWhileIterated:
        def __iter__(self):
            rc_pair.qp_b.post_recv(rwr)        # before the store: the old buffer, rightly
            return iter([second.mr.sge(16)])

    rwr.sg_list = PostsWhileIterated()
    receive()
    first.array[:] = [0] * 64
    for _ in range(2):
        rc_pair.qp_b.post_recv(rwr)
        receive()
        assert bytes(second.array[:16]) == bytes(range(16))
        assert bytes(first.array[:16]) == b"\0" * 16
        second.array[:] = [0] * 64


def test_a_kept_srq_receive_lands_where_its_sge_says_now(ib, pd, ctx, port, gid_index, access,
                                                        src, make_buffer):
    """SRQ.post_recv's short way: the kept request is posted again, then
    changed (wr_id only: still kept; the SGE: read again)."""
    first, second = make_buffer(64), make_buffer(64)
    with ctx.create_cq(16) as cq_a, ctx.create_cq(16) as cq_b, pd.create_srq(max_wr=8) as srq:
        a = pd.create_qp(ib.QPInitAttr(cq_a, cq_a))
        b = pd.create_qp(ib.QPInitAttr(cq_b, cq_b, srq=srq))
        connect_loopback(ib, ctx, a, b, port, gid_index, access)
        send = ib.SendWR(wr_id=1, sg_list=[src.mr.sge(16)], opcode=ib.WROpcode.SEND,
                         send_flags=ib.SendFlags.SIGNALED)
        rwr = ib.RecvWR(wr_id=20, sg_list=[first.mr.sge(16)])
        for k in range(3):                  # the second and third posts are kept ones
            rwr.wr_id = 20 + k
            srq.post_recv(rwr)
            a.post_send(send)
            poll_until(cq_a, 1)[0].raise_for_status()
            (rwc,) = poll_until(cq_b, 1)
            assert rwc.wr_id == 20 + k and rwc.byte_len == 16
        rwr.sg_list[0].addr = second.addr
        rwr.sg_list[0].lkey = second.mr.lkey
        srq.post_recv(rwr)
        a.post_send(send)
        poll_until(cq_a, 1)[0].raise_for_status()
        (rwc,) = poll_until(cq_b, 1)
        assert rwc.is_success and bytes(second.array[:16]) == bytes(range(16))
        a.close()
        b.close()


def refusal(post):
    """What post() raises: (its class's name, errno, its text)."""
    with pytest.raises(Exception) as exc:
        post()
    return type(exc.value).__name__, getattr(exc.value, "errno", None), str(exc.value)


def test_a_kept_receive_to_a_closed_queue_is_refused_as_any_request_is(
        ib, ctx, pd, cq, port, rc_pair, src, make_buffer):
    """post_recv's short way makes no open check of its own: it calls the
    queue's entry (spec entries), which for a closed queue is the closed
    one.  A kept RecvWR posted to a closed QP or SRQ, to one closed while
    its close() waits without the GIL, to a QP made by calling the class
    (closed from the start) or a subclass's, is refused exactly as a new
    request is (EBADF, "<class> is closed"); then the same request, still
    kept, lands on an open QP."""
    buf = make_buffer(64)
    rwr = ib.RecvWR(wr_id=9, sg_list=[buf.mr.sge(16)])

    class Sub(ib.QP):
        pass

    spare = pd.create_qp(ib.QPInitAttr(cq, cq, max_recv_wr=4))
    spare.to_init(port)
    spare.post_recv(rwr)                   # from now on rwr is kept
    spare.close()
    srq = pd.create_srq(max_wr=4)
    srq.post_recv(rwr)
    srq.close()
    for queue, name in ((spare, "QP"), (srq, "SRQ"), (ib.QP(), "QP"), (Sub(), "Sub")):
        kept = refusal(lambda: queue.post_recv(rwr))
        new = refusal(lambda: queue.post_recv(ib.RecvWR(wr_id=9, sg_list=[buf.mr.sge(16)])))
        assert kept == new, name
        assert kept[:2] == ("VerbsError", errno.EBADF) and f"{name} is closed" in kept[2], kept

    closing = pd.create_qp(ib.QPInitAttr(cq, cq, max_recv_wr=4))
    closing.to_init(port)
    closing.post_recv(rwr)
    t, box, paused = paused_call(closing.close)
    try:
        assert paused
        kind, code, text = refusal(lambda: closing.post_recv(rwr))
        assert (kind, code) == ("VerbsError", errno.EBADF) and "QP is closed" in text
    finally:
        assert resume(t, box) == {"result": None}
    assert refusal(lambda: closing.post_recv(rwr))[1] == errno.EBADF

    rc_pair.qp_b.post_recv(rwr)            # kept, to an open QP
    send = ib.SendWR(wr_id=1, sg_list=[src.mr.sge(16)], opcode=ib.WROpcode.SEND,
                     send_flags=ib.SendFlags.SIGNALED)
    posted(rc_pair, send)
    (rwc,) = poll_until(rc_pair.cq_b, 1)
    assert rwc.wr_id == 9 and rwc.byte_len == 16 and bytes(buf.array[:16]) == bytes(range(16))


def test_a_fork_child_posts_no_kept_request_to_its_parents_queues(ib, rc_pair, src, dst):
    """A kept request's post makes no fork check of its own: fork() ends
    every kept request, and a child keeps none (not even for a QP it made
    itself), so the child's posts to the parent's QP are refused as any
    call on an inherited object is, and the parent's go on."""
    wr = write(ib, src, dst)
    rwr = ib.RecvWR(wr_id=5, sg_list=[dst.mr.sge(8, 128)])
    posted(rc_pair, wr)
    posted(rc_pair, wr)                 # kept
    rc_pair.qp_b.post_recv(rwr)
    rc_pair.qp_b.post_recv(rwr)         # kept (two receives outstanding)

    def child():
        with ib.get_device_list()[0].open() as ctx, ctx.alloc_pd() as pd, \
                ctx.create_cq(4) as cq, \
                pd.create_qp(ib.QPInitAttr(cq, cq, max_send_wr=4, max_recv_wr=4)) as own:
            for _ in range(2):          # the child's own QP (RESET: it may refuse)
                try:
                    own.post_recv(rwr)
                except ib.VerbsError:
                    pass
        for post in (lambda: rc_pair.qp_a.post_send(wr), lambda: rc_pair.qp_a.post_send([wr]),
                     lambda: rc_pair.qp_b.post_recv(rwr)):
            with pytest.raises(ib.VerbsError) as exc:
                post()
            assert exc.value.errno == errno.EBADF and "fork" in str(exc.value), exc.value
        return "ok"

    assert in_fork_child(child) == "ok"
    assert rc_pair.cq_a.poll(4) == []   # nothing the child tried was posted
    dst.array[:8] = [0] * 8
    posted(rc_pair, wr)                 # the parent's kept request still goes
    assert landed(dst) == bytes(range(8))
