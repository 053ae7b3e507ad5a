"""Enums at run time (issue 36): a field holding an enum or a flag set reads
as a member of its IntEnum / IntFlag (still an int), a member of another
enum class is refused where one is expected, and the stubs name the
classes.  Through the extension, without a device."""
from __future__ import annotations

import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_completion_fields_are_members():
    import ibverbs as ib
    wc = ib.WC()
    assert type(wc.status) is ib.WCStatus and wc.status.name == "SUCCESS"
    assert type(wc.opcode) is ib.WCOpcode
    assert type(wc.wc_flags) is ib.WCFlags
    assert wc.status == 0 and wc.status is ib.WCStatus.SUCCESS   # an int still, and the one member


def test_struct_fields_are_members():
    import ibverbs as ib
    assert type(ib.PortAttr().state) is ib.PortState
    assert type(ib.PortAttr().link_layer) is ib.LinkLayer
    assert type(ib.DeviceAttr().device_cap_flags) is ib.DeviceCapFlags
    attr = ib.QPAttr(qp_state=3, path_mtu=ib.MTU.MTU_1024,
                     qp_access_flags=ib.AccessFlags.LOCAL_WRITE | ib.AccessFlags.REMOTE_READ)
    assert attr.qp_state is ib.QPState.RTS
    assert attr.path_mtu is ib.MTU.MTU_1024
    assert attr.qp_access_flags == ib.AccessFlags.LOCAL_WRITE | ib.AccessFlags.REMOTE_READ
    assert type(attr.qp_access_flags) is ib.AccessFlags
    assert ib.QPInitAttr(None, None, qp_type=4).qp_type is ib.QPType.UD


def test_a_value_that_is_no_member_reads_as_a_plain_int():
    import ibverbs as ib
    attr = ib.QPAttr(qp_state=60)          # no QPState: what the provider said
    assert attr.qp_state == 60 and type(attr.qp_state) is int
    attr = ib.QPAttr(qp_state=200)         # above the table of prebuilt members
    assert attr.qp_state == 200 and type(attr.qp_state) is int
    flags = ib.QPAttr(qp_access_flags=1 << 30).qp_access_flags
    assert flags == 1 << 30 and isinstance(flags, int)


def test_data_path_records_show_members_and_take_ints():
    import ibverbs as ib
    wr = ib.SendWR(opcode=ib.WROpcode.SEND, send_flags=ib.SendFlags.SIGNALED)
    assert wr.opcode is ib.WROpcode.SEND and type(wr.send_flags) is ib.SendFlags
    wr.opcode = 0                          # plain ints, as before
    assert wr.opcode is ib.WROpcode.RDMA_WRITE
    wr.send_flags = 2 | 8
    assert wr.send_flags == ib.SendFlags.SIGNALED | ib.SendFlags.INLINE


def test_a_member_of_another_enum_class_is_refused():
    import ibverbs as ib
    with pytest.raises(TypeError, match="opcode must be WROpcode or an int, not <WCOpcode.SEND: 0>"):
        ib.SendWR(opcode=ib.WCOpcode.SEND)
    wr = ib.SendWR()
    with pytest.raises(TypeError, match="send_flags must be SendFlags or an int"):
        wr.send_flags = ib.AccessFlags.LOCAL_WRITE
    assert wr.opcode == 0 and wr.send_flags == 0      # unchanged
    with pytest.raises(TypeError, match="qp_type must be QPType or an int"):
        ib.QPInitAttr(None, None, qp_type=ib.WCOpcode.SEND)
    with pytest.raises(TypeError, match="qp_state must be QPState or an int"):
        ib.QPAttr(qp_state=ib.PortState.ACTIVE)


def test_the_stubs_name_the_classes():
    stub = (ROOT / "generated" / "_ibverbs.pyi").read_text()
    for line in ("def status(self) -> WCStatus:", "def opcode(self) -> WCOpcode:",
                 "def wc_flags(self) -> WCFlags:", "def state(self) -> PortState:",
                 "def link_layer(self) -> LinkLayer:"):
        assert line in stub, line
    assert "def opcode(self, value: WROpcode | int) -> None: ..." in stub
    assert "qp_type: QPType | int = ..." in stub
    # and the enum arguments of generated methods (spec/docs.yaml's docs.enums)
    assert "access: AccessFlags | int = ...) -> None:" in stub      # MR.rereg_mr
    assert "attr_mask: QPAttrMask | int" in stub
