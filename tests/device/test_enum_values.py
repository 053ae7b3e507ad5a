"""Enums at run time on a real device (issue 36): what the provider fills
reads as members of the enum classes (wc.status.name works), and they are
still the ints the seed's users compare with."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import poll_until


def test_port_attributes_are_members(ib, ctx, port):
    attr = ctx.query_port(port)
    assert attr.state is ib.PortState.ACTIVE and attr.state == 4
    assert attr.link_layer is ib.LinkLayer.ETHERNET      # Soft-RoCE
    assert type(attr.active_mtu) is ib.MTU and attr.active_mtu.name.startswith("MTU_")
    assert type(attr.port_cap_flags) is ib.PortCapFlags


def test_device_attributes_are_members(ib, ctx):
    attr = ctx.query_device()
    assert type(attr.atomic_cap) is ib.AtomicCap
    assert type(attr.device_cap_flags) is ib.DeviceCapFlags


def test_completions_are_members(ib, rc_pair, make_buffer):
    src, dst = make_buffer(64, fill=7), make_buffer(64)
    rc_pair.qp_a.post_send(ib.SendWR(wr_id=1, sg_list=[ib.SGE(src.mr, 64)],
                                     opcode=ib.WROpcode.RDMA_WRITE, send_flags=ib.SendFlags.SIGNALED,
                                     remote_addr=dst.addr, rkey=dst.mr.rkey))
    wc, = poll_until(rc_pair.cq_a)
    assert wc.status is ib.WCStatus.SUCCESS and wc.status.name == "SUCCESS" and wc.status == 0
    assert wc.opcode is ib.WCOpcode.RDMA_WRITE
    assert type(wc.wc_flags) is ib.WCFlags
    assert bytes(dst.array) == bytes([7]) * 64


def test_a_failed_completion_names_its_status(ib, rc_pair, make_buffer):
    src, dst = make_buffer(64), make_buffer(64)
    rc_pair.qp_a.post_send(ib.SendWR(wr_id=2, sg_list=[ib.SGE(src.mr, 64)],
                                     opcode=ib.WROpcode.RDMA_WRITE, send_flags=ib.SendFlags.SIGNALED,
                                     remote_addr=dst.addr, rkey=dst.mr.rkey ^ 0xFF))
    wc, = poll_until(rc_pair.cq_a)
    assert wc.status is ib.WCStatus.REM_ACCESS_ERR and wc.status.name == "REM_ACCESS_ERR"


def test_qp_state_reads_as_a_member(ib, rc_pair):
    assert rc_pair.qp_a.state is ib.QPState.RTS
    assert rc_pair.qp_a.qp_type is ib.QPType.RC
    # QP.query's dict keeps the seed's plain ints (tests/device/test_seed_compat.py)
    assert type(rc_pair.qp_a.query(ib.QPAttrMask.STATE)[0]["qp_state"]) is int


def test_a_member_of_another_enum_class_is_refused_by_a_method(ib, pd, cq):
    memory = np.zeros(4096, dtype=np.uint8)
    with pytest.raises(TypeError, match="access must be AccessFlags or an int, not <WCOpcode"):
        pd.reg_mr(memory, ib.WCOpcode.RDMA_WRITE)         # == 1 == LOCAL_WRITE: silently taken before
    with pd.reg_mr(memory, 1) as mr:                      # plain ints, as before
        assert mr.lkey
    with pd.create_qp(ib.QPInitAttr(cq, cq, qp_type=ib.QPType.RC)) as qp:
        with pytest.raises(TypeError, match="attr_mask must be QPAttrMask or an int"):
            qp.modify(ib.AccessFlags.LOCAL_WRITE, qp_state=ib.QPState.INIT)
        assert qp.state is ib.QPState.RESET
