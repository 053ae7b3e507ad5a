"""QP.reset(): the first step of recovering a QP in place (tests/device/test_faults.py
runs it on real QPs in ERR)."""
import ibverbs
from ibverbs import _qp_transitions as tr


class RecordingQP:
    def __init__(self):
        self.calls = []

    def modify(self, attr_mask, **fields):
        self.calls.append((int(attr_mask), fields))


def test_reset_modifies_the_state_alone_to_reset():
    qp = RecordingQP()
    tr.reset(qp)
    assert qp.calls == [(1, {"qp_state": 0})]      # IBV_QP_STATE, IBV_QPS_RESET


def test_reset_is_a_qp_method_next_to_the_transitions():
    # Declared in spec/qp.yaml (python: ibverbs._qp_transitions:reset), so it
    # belongs to the class from the start, with its own docstring.
    assert "reset" in vars(ibverbs.QP)
    assert "RESET" in ibverbs.QP.reset.__doc__
    assert "reset" in tr.__all__
