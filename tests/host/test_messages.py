"""Messages a user reads must say what is allowed (issue 25, point 14).

Each check here found a message that named the wrong range, a private
name, or a Python internals error; the device tier checks the same through
real objects where one is needed (tests/device/test_bad_input.py).
"""
from __future__ import annotations

import math

import pytest

import ibverbs as ib
from ibverbs import _buffers, helpers


@pytest.mark.parametrize("length", [-1, -2**70])
def test_a_negative_sge_length_names_the_range_an_sge_holds(length):
    with pytest.raises(ValueError, match=r"^length must be in 0\.\.4294967295, got "):
        ib.SGE(0x1000, length)


@pytest.mark.parametrize("length", [2**32, 2**63, 2**100])
def test_a_too_long_sge_says_why(length):
    with pytest.raises(ValueError, match=r"^SGE length must be below 2\*\*32; split it"):
        ib.SGE(0x1000, length)


@pytest.mark.parametrize("capacity", [-1, 0, (1 << 20) + 1])
def test_wcbuffer_capacity_range_is_the_one_accepted(capacity):
    with pytest.raises(ValueError, match=rf"^capacity must be in 1\.\.1048576, got {capacity}$"):
        ib.WCBuffer(capacity)
    assert ib.WCBuffer(1).capacity == 1 and ib.WCBuffer(1 << 20).capacity == 1 << 20


class FakePD:
    """What PD.reg_mr hands (addr, length, access) to: the generated
    PD._reg_mr, whose own messages name it (as a function does)."""

    def _reg_mr(self, addr, length, access):
        raise AssertionError("not reached")


@pytest.mark.parametrize("args, kwargs", [((), {}), ((0x1000,), {}), ((), {"access": 1})])
def test_reg_mr_with_too_few_arguments_names_both_forms(args, kwargs):
    with pytest.raises(TypeError) as exc:
        _buffers.reg_mr_any(FakePD(), *args, **kwargs)
    assert str(exc.value).startswith("PD.reg_mr() takes (addr, length, access) or "
                                     "(buffer, access), got ")
    assert "_reg_mr" not in str(exc.value)


def test_reg_mr_messages_name_the_public_method():
    with pytest.raises(TypeError) as exc:
        _buffers.reg_mr_any(FakePD(), 0x1000, 4096, 1, 2)
    assert "_reg_mr" not in str(exc.value) and "PD.reg_mr()" in str(exc.value), exc.value


class EmptyCQ:
    channel = None

    def poll(self, n):
        return []


@pytest.mark.parametrize("timeout", ["1", b"1", [1], True])
def test_cq_wait_timeout_of_another_type_is_a_type_error(timeout):
    with pytest.raises(TypeError, match="CQ.wait: timeout must be None or a number of seconds, "
                                        f"not {type(timeout).__name__}"):
        helpers.cq_wait(EmptyCQ(), timeout=timeout)


@pytest.mark.parametrize("timeout", [-1, -0.5, math.nan])
def test_cq_wait_timeout_below_zero_or_nan_is_a_value_error(timeout):
    with pytest.raises(ValueError, match="CQ.wait: timeout must be None or >= 0 seconds"):
        helpers.cq_wait(EmptyCQ(), timeout=timeout)


def test_cq_wait_timeout_is_a_timeout_error_carrying_the_completions():
    with pytest.raises(ib.WaitTimeoutError) as exc:
        helpers.cq_wait(EmptyCQ(), 2, timeout=0)
    assert isinstance(exc.value, TimeoutError) and exc.value.completions == []
    assert str(exc.value) == "CQ.wait: 0 of 2 completions arrived within 0 s"
    import pickle

    again = pickle.loads(pickle.dumps(exc.value))
    assert type(again) is ib.WaitTimeoutError and again.completions == [] \
        and str(again) == str(exc.value)


def test_qp_type_is_checked_like_a_send_opcode():
    with pytest.raises(ValueError, match="^qp_type 999 is not a QPType$"):
        ib.QPInitAttr(None, None, qp_type=999)
    with pytest.raises(ValueError, match="^opcode 999 is not a WROpcode$"):
        ib.SendWR(opcode=999)
    attr = ib.QPInitAttr(None, None)
    with pytest.raises(ValueError, match="^qp_type 5 is not a QPType$"):
        attr.qp_type = 5
    for member in ib.QPType:
        attr.qp_type = member
        assert attr.qp_type == member


@pytest.mark.parametrize("raw", [bytes(range(16)), bytes(16), b"\xfe\x80" + bytes(6) + b"\x52\x54\x00\xff\xfe\x12\x34\x56"])
def test_gid_repr_round_trips(raw):
    gid = ib.Gid(raw)
    assert eval(repr(gid), {"Gid": ib.Gid}) == gid
    assert ib.Gid(str(gid)) == gid


def test_gid_reads_ipv6_notation_and_names_bad_text():
    assert ib.Gid("::ffff:10.0.0.1").raw == bytes(10) + b"\xff\xff" + bytes([10, 0, 0, 1])
    with pytest.raises(ValueError, match="not a GID: 'fe80'"):
        ib.Gid("fe80")
