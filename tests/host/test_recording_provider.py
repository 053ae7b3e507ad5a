"""The recording provider (tests/recording/recverbs.c) records what the
binding hands it: every field of each request of a post, its SGEs by value,
the chain's order; and it models mlx5's CQ lock.  Each body runs in a child
under the provider (the `recording` fixture, tests/host/conftest.py)."""
from __future__ import annotations

import errno


def _rdma_write_with_two_sges(rec):
    ib = rec.ib
    mr, _ = rec.mr()
    qp = rec.qp()
    qp.post_send(ib.SendWR(wr_id=7, sg_list=[mr.sge(8), mr.sge(4, 16)],
                           opcode=ib.WROpcode.RDMA_WRITE, send_flags=ib.SendFlags.SIGNALED,
                           remote_addr=0x1234, rkey=99))
    return rec.requests(), qp.qp_num, mr.addr, mr.lkey


def test_a_send_is_recorded_field_by_field(recording):
    (req,), qp_num, addr, lkey = recording(_rdma_write_with_two_sges)
    assert (req["kind"], req["post"], req["index"], req["target"]) == ("send", 1, 0, qp_num)
    assert (req["wr_id"], req["opcode"], req["send_flags"]) == (7, 0, 2)
    assert (req["rdma_remote_addr"], req["rdma_rkey"]) == (0x1234, 99)
    assert req["num_sge"] == 2
    assert req["sges"] == [(addr, 8, lkey), (addr + 16, 4, lkey)]


def _a_chain_of_three_and_an_atomic(rec):
    ib = rec.ib
    mr, _ = rec.mr()
    qp = rec.qp()
    qp.post_send([ib.SendWR(wr_id=i, sg_list=[mr.sge(8, 8 * i)], opcode=ib.WROpcode.SEND)
                  for i in range(3)])
    qp.post_send(ib.SendWR(wr_id=9, sg_list=[mr.sge(8)], opcode=ib.WROpcode.ATOMIC_CMP_AND_SWP,
                           remote_addr=0x8000, rkey=5, compare_add=11, swap=12))
    return rec.requests(), mr.addr


def test_a_chain_is_one_post_in_order_and_an_atomic_fills_its_member(recording):
    reqs, addr = recording(_a_chain_of_three_and_an_atomic)
    assert [(r["post"], r["index"], r["wr_id"]) for r in reqs] == [
        (1, 0, 0), (1, 1, 1), (1, 2, 2), (2, 0, 9)]
    assert [r["sges"][0][0] - addr for r in reqs[:3]] == [0, 8, 16]
    atomic = reqs[3]
    assert (atomic["atomic_remote_addr"], atomic["atomic_rkey"], atomic["atomic_compare_add"],
            atomic["atomic_swap"]) == (0x8000, 5, 11, 12)


def _ud_send_with_an_ah(rec):
    ib = rec.ib
    mr, _ = rec.mr()
    qp = rec.qp(ib.QPType.UD)
    ah = rec.pd.create_ah(ib.AHAttr(dlid=3, is_global=0))
    qp.post_send(ib.SendWR(wr_id=1, sg_list=[mr.sge(8)], opcode=ib.WROpcode.SEND, ah=ah,
                           remote_qpn=0x42, remote_qkey=0x11111111))
    return rec.requests(), ah.handle


def test_a_ud_send_names_its_ah(recording):
    (req,), ah_handle = recording(_ud_send_with_an_ah)
    assert (req["ud_ah_handle"], req["ud_remote_qpn"], req["ud_remote_qkey"]) == (
        ah_handle, 0x42, 0x11111111)


def _receives_on_a_qp_an_srq_and_through_a_postlist(rec):
    ib = rec.ib
    mr, _ = rec.mr()
    qp = rec.qp()
    srq = rec.pd.create_srq(max_wr=16, max_sge=2)
    qp.post_recv(ib.RecvWR(wr_id=3, sg_list=[mr.sge(64), mr.sge(32, 64)]))
    srq.post_recv([ib.RecvWR(wr_id=4, sg_list=[mr.sge(16)]), ib.RecvWR(wr_id=5)])
    pl = ib.PostList([ib.RecvWR(wr_id=6, sg_list=[mr.sge(8, 128)])])
    qp.post_recv(pl)
    pl[0].wr_id = 60
    qp.post_recv(pl)
    return rec.requests(), qp.qp_num, srq.handle, mr.addr, mr.lkey


def test_receives_are_recorded_with_their_target(recording):
    reqs, qp_num, srq_handle, addr, lkey = recording(_receives_on_a_qp_an_srq_and_through_a_postlist)
    assert [(r["kind"], r["target"], r["wr_id"], r["sges"]) for r in reqs] == [
        ("recv", qp_num, 3, [(addr, 64, lkey), (addr + 64, 32, lkey)]),
        ("srq_recv", srq_handle, 4, [(addr, 16, lkey)]),
        ("srq_recv", srq_handle, 5, []),
        ("recv", qp_num, 6, [(addr + 128, 8, lkey)]),
        ("recv", qp_num, 60, [(addr + 128, 8, lkey)]),
    ]


def _closes_a_qp_while_its_cq_is_locked(rec):
    ib = rec.ib
    qp = rec.qp()
    handle = qp.handle
    rec.set_locked(rec.cq)
    try:
        qp.close()
    except ib.VerbsError as e:
        failed = (e.errno, e.operation)
    else:
        failed = None
    rec.set_locked(rec.cq, False)
    qp.close()
    return failed, rec.requests(), handle, qp.closed


def test_the_cq_lock_model_reports_a_destroy_that_would_deadlock(recording):
    failed, reqs, qp_handle, closed = recording(_closes_a_qp_while_its_cq_is_locked)
    assert failed is not None and failed[0] == errno.EDEADLK
    assert [(r["kind"], r["lock_verb"], r["target"]) for r in reqs] == [
        ("would_deadlock", "destroy_qp", qp_handle)]
    assert closed


def _polls_a_cqex(rec):
    cqex = rec.ctx.create_cq_ex(16)
    rec.push_completion(cqex, 77, byte_len=5)
    states = [rec.is_locked(cqex)]
    assert cqex.start_poll()
    states.append((rec.is_locked(cqex), cqex.wr_id, cqex.read_byte_len()))
    cqex.end_poll()
    states.append(rec.is_locked(cqex))
    states.append(cqex.start_poll())         # empty: no lock held
    states.append(rec.is_locked(cqex))
    cqex.close()
    return states


def test_a_cqex_poll_holds_its_cq_lock_until_end_poll(recording):
    assert recording(_polls_a_cqex) == [False, (True, 77, 5), False, False, False]


def _a_post_the_provider_fails(rec):
    ib = rec.ib
    qp = rec.qp()
    rec.fail_next_post(errno.ENOMEM, 1)
    try:
        qp.post_send([ib.SendWR(wr_id=1), ib.SendWR(wr_id=2)])
    except ib.VerbsError as e:
        return e.errno, [r["wr_id"] for r in rec.requests()]
    return None


def test_a_provider_failure_is_reported(recording):
    assert recording(_a_post_the_provider_fails) == (errno.ENOMEM, [1, 2])


def _binds_a_window_through_each_way_of_posting(rec):
    """A BIND_MW request posted alone, in a chain on the stack and in one
    too long for it; what the provider read of each."""
    ib = rec.ib
    mr, _ = rec.mr()
    mw = rec.pd.alloc_mw(ib.MWType.TYPE_2)
    info = ib.MWBindInfo(mr, mr.addr + 64, 256, ib.AccessFlags.REMOTE_WRITE)
    qp = rec.qp(max_send_wr=128)

    def bind(wr_id):
        return ib.SendWR(wr_id=wr_id, opcode=ib.WROpcode.BIND_MW, mw=mw, rkey=ib.inc_rkey(mw.rkey),
                         bind_info=info)

    qp.post_send(bind(1))
    qp.post_send([bind(2), bind(3)])
    qp.post_send([bind(i) for i in range(100, 140)])
    seen = [(r["wr_id"], r["bind_mr_handle"], r["bind_addr"], r["bind_length"], r["bind_access"],
             r["bind_rkey"]) for r in rec.requests()]
    return seen, mr.handle, mr.addr, ib.inc_rkey(mw.rkey), int(ib.AccessFlags.REMOTE_WRITE)


def test_a_bind_mw_request_hands_the_provider_its_bind_info_on_each_way(recording):
    seen, mr_handle, addr, rkey, access = recording(_binds_a_window_through_each_way_of_posting)
    assert [s[0] for s in seen] == [1, 2, 3] + list(range(100, 140))
    assert {s[1:] for s in seen} == {(mr_handle, addr + 64, 256, access, rkey)}
