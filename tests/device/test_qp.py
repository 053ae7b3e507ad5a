"""Queue pairs: creation, state transitions, query, modify."""
import pytest


def test_new_qp_is_in_reset_with_requested_capacities(ib, pd, cq):
    with pd.create_qp(ib.QPInitAttr(cq, cq, max_send_wr=32, max_recv_wr=16)) as qp:
        assert qp.state == ib.QPState.RESET
        assert qp.qp_type == ib.QPType.RC
        assert 0 < qp.qp_num < 1 << 24
        assert qp.pd is pd and qp.send_cq is cq and qp.recv_cq is cq and qp.srq is None
        attr, cap = qp.query()
        assert attr["qp_state"] == ib.QPState.RESET
        assert cap.max_send_wr >= 32 and cap.max_recv_wr >= 16


def test_rc_transitions_reach_rts(ib, rc_pair, port):
    for qp in (rc_pair.qp_a, rc_pair.qp_b):
        assert qp.state == ib.QPState.RTS
        attr, _ = qp.query()
        assert attr["qp_state"] == ib.QPState.RTS
        assert attr["port_num"] == port
    attr_a, _ = rc_pair.qp_a.query()
    assert attr_a["dest_qp_num"] == rc_pair.qp_b.qp_num
    assert attr_a["sq_psn"] == 0x100 and attr_a["rq_psn"] == 0x200


def test_modify_rejects_unknown_fields(ib, pd, cq):
    with pd.create_qp(ib.QPInitAttr(cq, cq)) as qp:
        with pytest.raises(TypeError, match="unknown QP attribute"):
            qp.modify(ib.QPAttrMask.STATE, qp_state=ib.QPState.INIT, no_such_field=1)
        with pytest.raises(ValueError):
            qp.modify(ib.QPAttrMask.PORT, port_num=300)
        assert qp.state == ib.QPState.RESET


def test_modify_with_a_bad_transition_raises_verbs_error(ib, pd, cq):
    with pd.create_qp(ib.QPInitAttr(cq, cq)) as qp:
        with pytest.raises(ib.VerbsError):
            qp.modify(ib.QPAttrMask.STATE, qp_state=ib.QPState.RTS)


def test_qp_init_attr_with_cq_of_another_context_is_rejected(ib, pd, ctx2, ctx):
    if ctx2.name == ctx.name:
        pytest.skip("one device only")
    with ctx2.create_cq(8) as other:
        with pytest.raises(ValueError, match="another context"):
            pd.create_qp(ib.QPInitAttr(other, other))


def test_srq_of_another_pd_is_rejected(ib, ctx, pd, cq):
    with ctx.alloc_pd() as pd2, pd2.create_srq() as srq:
        with pytest.raises(ValueError, match="another PD"):
            pd.create_qp(ib.QPInitAttr(cq, cq, srq=srq))


def test_query_data_in_order(ib, rc_pair):
    if "ibv_query_qp_data_in_order" in ib._ibverbs._missing_symbols():   # rdma-core < 37
        with pytest.raises(RuntimeError, match="unavailable"):
            rc_pair.qp_a.query_data_in_order(ib.WROpcode.RDMA_WRITE)
        return
    assert rc_pair.qp_a.query_data_in_order(ib.WROpcode.RDMA_WRITE) in (0, 1)
