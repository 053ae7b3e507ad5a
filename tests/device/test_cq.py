"""Completion queues and completion channels."""
import contextlib
import errno
import gc
import threading
import weakref

import pytest


def test_create_cq_checks_arguments(ib, ctx, ctx2):
    with pytest.raises(ValueError):
        ctx.create_cq(0)
    with pytest.raises(ValueError):
        ctx.create_cq(16, comp_vector=ctx.num_comp_vectors)
    with ctx2.create_comp_channel() as other:
        if ctx2.name != ctx.name:
            with pytest.raises(ValueError, match="another context"):
                ctx.create_cq(16, channel=other)


def test_cq_attributes_and_empty_poll(ib, ctx):
    with ctx.create_cq(32) as cq:
        assert cq.cqe >= 32 and cq.context is ctx and cq.channel is None
        assert cq.poll(16) == []
        with pytest.raises(ValueError):
            cq.poll(0)
        cq.resize(100)
        assert cq.cqe >= 100


def test_ack_more_events_than_received_raises(ctx):
    with ctx.create_comp_channel() as ch, ctx.create_cq(8, channel=ch) as cq:
        assert cq.channel is ch
        with pytest.raises(ValueError, match="more CQ events"):
            cq.ack_events(1)


def test_completion_event_wakes_a_thread_while_python_runs(ib, rc_pair, make_buffer, port):
    ctx = rc_pair.qp_a.pd.context
    with ctx.create_comp_channel() as ch, ctx.create_cq(16, channel=ch) as cq:
        qp = rc_pair.qp_a.pd.create_qp(ib.QPInitAttr(cq, cq))
        try:
            cq.req_notify()
            got = []
            t = threading.Thread(target=lambda: got.append(ch.get_cq_event()))
            t.start()
            # The main thread keeps running Python while the other one waits
            # in get_cq_event with the GIL released.
            spins = 0
            while spins < 20000:
                spins += 1
            assert t.is_alive()
            # Provoke a completion on cq: post a receive, then flush it by
            # moving the QP to ERR.
            b = make_buffer(64)
            qp.to_init(port, ib.AccessFlags.LOCAL_WRITE)
            qp.post_recv(ib.RecvWR(wr_id=7, sg_list=[b.mr.sge(64)]))
            qp.modify(ib.QPAttrMask.STATE, qp_state=ib.QPState.ERR)
            t.join(10)
            assert not t.is_alive() and got == [cq]
            (wc,) = cq.poll(4)
            assert wc.wr_id == 7 and wc.status == ib.WCStatus.WR_FLUSH_ERR
            cq.ack_events(1)
            with pytest.raises(ValueError, match="more CQ events"):
                cq.ack_events(1)
        finally:
            qp.close()


def test_poll_results_stay_the_programs_own(ib, ctx, pd, port):
    """poll() reuses the lists and WC objects that the program dropped; what
    the program still holds (a list, a WC, an object it put in a list) is
    never touched."""
    with ctx.create_cq(64) as cq:
        qp = pd.create_qp(ib.QPInitAttr(cq, cq, max_recv_wr=32))
        try:
            qp.to_init(port, ib.AccessFlags.LOCAL_WRITE)
            buf = bytearray(64)
            with pd.reg_mr(buf, ib.AccessFlags.LOCAL_WRITE) as mr:
                for wr_id in range(1, 13):
                    qp.post_recv(ib.RecvWR(wr_id=wr_id, sg_list=[mr.sge(8)]))
                # ERR flushes every posted receive: 12 completions, in order.
                qp.modify(ib.QPAttrMask.STATE, qp_state=ib.QPState.ERR)
            kept = cq.poll(1)[0]                  # the list is dropped, the WC kept
            second = cq.poll(1)[0]
            assert (kept.wr_id, second.wr_id) == (1, 2) and kept is not second
            # the fields looked up by name identity and by the generic path agree
            for name in ("status", "opcode", "wr_id", "byte_len", "qp_num"):
                assert getattr(kept, "".join(name)) == getattr(kept, name)
            assert kept.qp_num == qp.qp_num and kept.status == ib.WCStatus.WR_FLUSH_ERR
            first_list = cq.poll(1)               # a list the program keeps
            second_list = cq.poll(1)
            assert first_list is not second_list
            assert [wc.wr_id for wc in first_list + second_list] == [3, 4]
            mutated = cq.poll(2)
            assert [wc.wr_id for wc in mutated] == [5, 6]
            planted = bytearray(b"mine")          # only the list refers to it
            mutated[0] = planted
            del mutated, planted
            assert [wc.wr_id for wc in cq.poll(2)] == [7, 8]
            assert [wc.wr_id for wc in cq.poll(2)] == [9, 10]    # the dropped list again
            assert [(wc.wr_id, wc.status) for wc in cq.poll(16)] == [
                (11, ib.WCStatus.WR_FLUSH_ERR), (12, ib.WCStatus.WR_FLUSH_ERR)]
            assert (kept.wr_id, second.wr_id) == (1, 2)
            assert [wc.wr_id for wc in first_list] == [3]
            held_empty = cq.poll(4)
            assert held_empty == [] and cq.poll(4) == [] and cq.poll(4) is not held_empty
        finally:
            qp.close()


@contextlib.contextmanager
def flushed_receives(ib, pd, cq, port, wr_ids):
    """A QP on cq whose receives wr_ids were flushed (QP to ERR): their
    completions, in order, are on cq."""
    qp = pd.create_qp(ib.QPInitAttr(cq, cq, max_recv_wr=len(wr_ids)))
    buf = bytearray(64)
    try:
        qp.to_init(port, ib.AccessFlags.LOCAL_WRITE)
        with pd.reg_mr(buf, ib.AccessFlags.LOCAL_WRITE) as mr:
            for wr_id in wr_ids:
                qp.post_recv(ib.RecvWR(wr_id=wr_id, sg_list=[mr.sge(8)]))
            qp.modify(ib.QPAttrMask.STATE, qp_state=ib.QPState.ERR)
        yield qp
    finally:
        qp.close()


def plant(cq, n, make):
    """Put make() in every list poll() keeps for results of n completions:
    three results of n held at once are all of them (it keeps two)."""
    held = [cq.poll(n) for _ in range(3)]
    assert [len(x) for x in held] == [n] * 3
    for x in held:
        x[0] = make()


@pytest.mark.parametrize("then_clear", [False, True])
def test_a_finalizer_that_polls_during_poll_gets_a_list_of_its_own(ib, ctx, pd, port, then_clear):
    """23.2: poll() refilled a kept list it found free, and replacing an
    object the program had put there ran its finalizer mid-refill: a poll
    from that finalizer got the same list (both callers one list, the outer
    completions lost), and clear()ing it crashed the outer refill."""
    if ib._ibverbs._free_threaded:      # cp314t, and abi3t on a GIL build too
        pytest.skip("poll()'s result lists are not reused on a free-threaded target "
                    "(CONTRIBUTING.md, Threads): there is no list to refill")
    inner = []
    armed = []

    class PollsWhenDropped:
        def __del__(self):
            if armed:
                armed.pop()
                inner.append(cq_b.poll(2))
                if then_clear:
                    inner[0].clear()

    with ctx.create_cq(16) as cq_a, ctx.create_cq(16) as cq_b, \
            flushed_receives(ib, pd, cq_a, port, range(1, 9)), \
            flushed_receives(ib, pd, cq_b, port, range(101, 103)):
        plant(cq_a, 2, PollsWhenDropped)          # completions 1-6
        armed.append(True)
        outer = cq_a.poll(2)                      # replaces a planted object
        assert not armed and len(inner) == 1
        assert outer is not inner[0]
        assert [wc.wr_id for wc in outer] == [7, 8]
        assert inner[0] == [] if then_clear else [wc.wr_id for wc in inner[0]] == [101, 102]
        assert cq_a.poll(16) == [] and cq_b.poll(16) == []


def test_poll_results_keep_nothing_the_program_added(ib, ctx, pd, port):
    """23.8: a list poll() returned and keeps for reuse held what the
    program appended to it (or stored in it) for the life of the process."""
    class Payload:
        pass

    appended, stored = Payload(), Payload()
    gone = [weakref.ref(appended), weakref.ref(stored)]
    with ctx.create_cq(16) as cq:
        empty = cq.poll(16)
        empty.append(appended)
        del empty, appended
        for _ in range(1000):
            assert cq.poll(16) == []
        gc.collect()
        assert gone[0]() is None
    with ctx.create_cq(16) as cq, flushed_receives(ib, pd, cq, port, range(1, 4)):
        one = cq.poll(1)
        assert [wc.wr_id for wc in one] == [1]
        one[0] = stored
        del one, stored
        assert [wc.wr_id for wc in cq.poll(16)] == [2, 3]
        for _ in range(10):
            assert cq.poll(16) == []
        gc.collect()
        assert gone[1]() is None


@pytest.mark.parametrize("into", [False, True])
def test_a_failed_poll_reports_its_own_error_not_a_stale_errno(ib, ctx, into):
    """23.13: errno was not cleared before ibv_poll_cq, and a provider that
    fails without setting it had its error reported as whatever errno held
    (_poll_fault: the first poll leaves errno EAGAIN, the second returns
    -EIO and leaves errno alone)."""
    from ibverbs import _ibverbs
    buf = ib.WCBuffer(4)

    def poll():
        return cq.poll_into(buf) if into else len(cq.poll(4))

    with ctx.create_cq(16) as cq:
        _ibverbs._poll_fault(cq, -errno.EIO)
        assert poll() == 0
        with pytest.raises(ib.VerbsError) as e:
            poll()
        assert e.value.errno == errno.EIO, e.value
        assert poll() == 0                       # the provider's own poll_cq again


def test_a_poll_by_the_same_int_makes_every_check(ib, ctx, pd, port):
    """poll(n) with the int object of the last conversion takes the short
    way (before the call is entered, wc.c): it still returns what arrived,
    in order, and a closed CQ, a CQEx mid-poll and a fork() child's poll of
    its parent's CQ are refused as the long way refuses them."""
    from conftest import in_fork_child
    n = 2
    with ctx.create_cq(16) as cq, flushed_receives(ib, pd, cq, port, range(1, 6)):
        got = [wc.wr_id for _ in range(3) for wc in cq.poll(n)]
        assert got == [1, 2, 3, 4, 5] and cq.poll(n) == []

        def child():
            with pytest.raises(ib.VerbsError) as exc:
                cq.poll(n)
            assert exc.value.errno == errno.EBADF and "fork" in str(exc.value), exc.value
            return "ok"

        assert in_fork_child(child) == "ok"
    with pytest.raises(ib.VerbsError) as exc:
        cq.poll(n)
    assert exc.value.errno == errno.EBADF
    with ctx.create_cq_ex(16) as cqex, flushed_receives(ib, pd, cqex, port, range(7, 9)):
        assert cqex.poll(1)[0].wr_id == 7
        assert cqex.start_poll() is True
        with pytest.raises(RuntimeError, match="end_poll"):
            cqex.poll(1)
        assert cqex.wr_id == 8
        cqex.end_poll()
        assert cqex.poll(1) == []
