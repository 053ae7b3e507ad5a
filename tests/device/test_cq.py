"""Completion queues and completion channels."""
import threading

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
