"""Provider locks in the model (spec cq_locks:, generator/cq_locks.py), on
the host through the recording provider, which models mlx5's CQ lock: a
CQEx's start_poll() that returns a completion holds it until end_poll(),
and destroy_qp, modify_qp to RESET, destroy_wq and modify_wq to RESET or
RESET -> RDY on a QP/WQ of a locked CQ record "would_deadlock" (on mlx5:
a hang).  While the poll lasts those calls are refused with EBUSY before
the provider sees them; a garbage collection takes the failed-destroy
path (reported, leaked) instead of hanging."""
import errno


def _mid_poll(rec):
    """A CQEx holding its modelled lock, mid-poll."""
    cqex = rec.ctx.create_cq_ex(16)
    rec.push_completion(cqex, 7)
    assert cqex.start_poll() and rec.is_locked(cqex)
    return cqex


def _refused(call):
    from ibverbs import VerbsError
    try:
        call()
    except VerbsError as exc:
        return exc.errno, str(exc)
    return None


def _calls_taking_the_lock_mid_poll(rec):
    ib = rec.ib
    cqex = _mid_poll(rec)
    qp = rec.pd.create_qp(ib.QPInitAttr(rec.cq, cqex))         # recv CQ: the CQEx
    wq = rec.pd.create_wq(cqex)
    outcomes = {
        "qp.close": _refused(qp.close),
        "qp.reset": _refused(qp.reset),
        "qp.modify RESET": _refused(lambda: qp.modify(ib.QPAttrMask.STATE,
                                                      qp_state=ib.QPState.RESET)),
        "wq.modify RESET->RDY": _refused(lambda: wq.modify(wq_state=ib.WQState.RDY)),
        "wq.close": _refused(wq.close),
    }
    untouched = (not qp.closed, not wq.closed, wq.state == ib.WQState.RESET)
    # a verb that takes no CQ lock goes through
    qp.modify(ib.QPAttrMask.STATE, qp_state=ib.QPState.ERR)
    during = rec.requests()
    cqex.end_poll()
    qp.reset()
    wq.modify(wq_state=ib.WQState.RDY)
    after_states = (qp.state == ib.QPState.RESET, wq.state == ib.WQState.RDY)
    qp.close()
    wq.close()
    return outcomes, untouched, during, after_states, rec.requests()


def test_verbs_taking_a_cq_lock_are_refused_while_a_cqex_of_theirs_is_mid_poll(recording):
    outcomes, untouched, during, after_states, after = recording(_calls_taking_the_lock_mid_poll)
    verbs = {"qp.close": "ibv_destroy_qp", "qp.reset": "ibv_modify_qp",
             "qp.modify RESET": "ibv_modify_qp", "wq.modify RESET->RDY": "ibv_modify_wq",
             "wq.close": "ibv_destroy_wq"}
    for call, outcome in outcomes.items():
        assert outcome is not None, f"{call} went through mid-poll"
        code, text = outcome
        assert code == errno.EBUSY, (call, outcome)
        assert verbs[call] in text and "end_poll()" in text, (call, text)
    assert untouched == (True, True, True)
    assert during == [], "the provider was handed a call that takes the CQ lock"
    assert after_states == (True, True)
    assert after == []


def _collects_a_qp_mid_poll(rec):
    import gc
    import sys
    ib = rec.ib
    reports = []
    sys.unraisablehook = lambda u: reports.append(str(u.exc_value))
    cqex = _mid_poll(rec)
    qp = rec.pd.create_qp(ib.QPInitAttr(cqex, cqex))
    wq = rec.pd.create_wq(cqex)
    del qp, wq
    gc.collect()
    cqex.end_poll()
    return reports, rec.requests()


def test_a_qp_or_wq_collected_mid_poll_is_reported_and_leaked_not_hung(recording):
    reports, records = recording(_collects_a_qp_mid_poll, timeout=60)
    assert records == [], "the provider was handed a destroy that takes the CQ lock"
    assert len(reports) == 2, reports
    assert "ibv_destroy_qp failed" in reports[0] and "leaked" in reports[0], reports
    assert "ibv_destroy_wq failed" in reports[1] and "leaked" in reports[1], reports
