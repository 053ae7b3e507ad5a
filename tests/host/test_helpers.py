"""ibverbs.helpers and the QP transitions, against fakes (no device, no
compiled extension needed)."""

from __future__ import annotations

import enum
import pathlib
import struct
import sys
import types

import numpy as np
import pytest
from hypothesis import given, strategies as st

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
try:
    import ibverbs  # noqa: F401  (the real package, once its extension is built)
except ImportError:  # not built here: load the pure-Python modules on their own
    _pkg = types.ModuleType("ibverbs")
    _pkg.__path__ = [str(ROOT / "ibverbs")]
    sys.modules["ibverbs"] = _pkg

import ibverbs.helpers as helpers  # noqa: E402
from ibverbs import _qp_transitions as tr, errors as ib_errors  # noqa: E402
from ibverbs.helpers import QPInfo, connect_rc, local_qp_info, reg_tensor, tensor_addr_len  # noqa: E402

# rdma-core's values (verbs.h), independent of the package's generated enums.
MASK = dict(STATE=1 << 0, ACCESS_FLAGS=1 << 3, PKEY_INDEX=1 << 4, PORT=1 << 5, QKEY=1 << 6,
            AV=1 << 7, PATH_MTU=1 << 8, TIMEOUT=1 << 9, RETRY_CNT=1 << 10, RNR_RETRY=1 << 11,
            RQ_PSN=1 << 12, MAX_QP_RD_ATOMIC=1 << 13, MIN_RNR_TIMER=1 << 15, SQ_PSN=1 << 16,
            MAX_DEST_RD_ATOMIC=1 << 17, DEST_QPN=1 << 20)
QPT = dict(RC=2, UC=3, UD=4, RAW_PACKET=8, XRC_SEND=9)
INIT, RTR, RTS = 1, 2, 3
LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC = 1, 2, 4, 8


def mask(*names):
    m = 0
    for n in names:
        m |= MASK[n]
    return m


# --- stand-ins for the extension and the generated enums ------------------------

class AHAttr:
    """Records its arguments; same signature as ibverbs.AHAttr."""

    def __init__(self, dgid=None, sgid_index=0, dlid=0, is_global=1, port_num=1, hop_limit=1,
                 traffic_class=0, sl=0, flow_label=0, src_path_bits=0, static_rate=0):
        self.kw = dict(dgid=dgid, sgid_index=sgid_index, dlid=dlid, is_global=is_global,
                       port_num=port_num, hop_limit=hop_limit, traffic_class=traffic_class, sl=sl,
                       flow_label=flow_label, src_path_bits=src_path_bits, static_rate=static_rate)


def _standin_enums():
    mod = types.ModuleType("ibverbs.enums")
    mod.QPAttrMask = enum.IntFlag("QPAttrMask", MASK)
    mod.QPType = enum.IntEnum("QPType", QPT)
    mod.QPState = enum.IntEnum("QPState", dict(RESET=0, INIT=INIT, RTR=RTR, RTS=RTS, ERR=6))
    return mod


@pytest.fixture(autouse=True)
def standins(monkeypatch):
    ext = types.ModuleType("ibverbs._ibverbs")
    ext.AHAttr = AHAttr
    monkeypatch.setitem(sys.modules, "ibverbs._ibverbs", ext)
    try:
        import ibverbs.enums  # noqa: F401  (the generated module, when there)
    except ImportError:
        monkeypatch.setitem(sys.modules, "ibverbs.enums", _standin_enums())


# --- fakes -------------------------------------------------------------------------

class FakeContext:
    def __init__(self, active_mtu=5, lid=0x11):
        self.active_mtu = active_mtu
        self.lid = lid
        self.queried = []

    def query_port(self, port):
        self.queried.append(port)
        return types.SimpleNamespace(active_mtu=self.active_mtu, lid=self.lid, link_layer=2)


class FakeQP:
    """Records modify() calls; query() reports the port the last INIT set."""

    def __init__(self, qp_type=QPT["RC"], qp_num=0x1234, active_mtu=5):
        self.qp_type = qp_type
        self.qp_num = qp_num
        self.pd = types.SimpleNamespace(context=FakeContext(active_mtu))
        self.port_num = 0
        self.calls = []

    def modify(self, attr_mask, ah_attr=None, **fields):
        self.calls.append((int(attr_mask), ah_attr, fields))
        if "port_num" in fields:
            self.port_num = fields["port_num"]

    def query(self):
        return {"port_num": self.port_num, "qp_state": 0, "path_mtu": 0}, None

    # as QP has them; connect_rc drives the QP through them
    to_init, to_rtr, to_rts = tr.to_init, tr.to_rtr, tr.to_rts


class FakeGid:
    def __init__(self, raw):
        self.raw = raw

    def __bytes__(self):
        return self.raw


GID = bytes(range(16))
REMOTE = dict(qp_num=0xABCDE, psn=0x42, lid=0x22, gid=GID, port=1, mtu=3)


def remote_info(**kw):
    return QPInfo(**{**REMOTE, **kw})


# --- QPInfo ------------------------------------------------------------------------

def test_qpinfo_fields_and_equality():
    a = remote_info()
    assert (a.qp_num, a.psn, a.lid, a.gid, a.port, a.mtu) == (0xABCDE, 0x42, 0x22, GID, 1, 3)
    assert a == remote_info()
    assert a != remote_info(psn=1)


def test_qpinfo_is_positional_in_the_documented_order():
    assert QPInfo(1, 2, 3, GID, 4, 5) == QPInfo(qp_num=1, psn=2, lid=3, gid=GID, port=4, mtu=5)


def test_qpinfo_to_bytes_is_the_28_byte_network_order_layout():
    b = remote_info().to_bytes()
    assert len(b) == 28
    assert b == struct.pack("!IIH16sBB", 0xABCDE, 0x42, 0x22, GID, 1, 3)
    assert b[:4] == b"\x00\x0a\xbc\xde"  # big-endian


@pytest.mark.parametrize("gid", [GID, bytearray(GID), memoryview(GID), FakeGid(GID)])
def test_qpinfo_gid_is_stored_as_bytes(gid):
    info = remote_info(gid=gid)
    assert type(info.gid) is bytes and info.gid == GID


@pytest.mark.parametrize("field, value", [
    ("qp_num", -1), ("qp_num", 1 << 24), ("psn", -1), ("psn", 1 << 24),
    ("lid", -1), ("lid", 1 << 16), ("port", 0), ("port", 256), ("mtu", 0), ("mtu", 6),
    ("gid", b"\x00" * 15), ("gid", b"\x00" * 17), ("gid", b""), ("gid", FakeGid(b"\x01" * 4)),
])
def test_qpinfo_rejects_out_of_range_values(field, value):
    with pytest.raises(ValueError, match=field):
        remote_info(**{field: value})


@pytest.mark.parametrize("field, value", [
    ("qp_num", 1.0), ("psn", "1"), ("lid", None), ("port", 1.5), ("mtu", "MTU_1024"),
    ("gid", 16), ("gid", "fe80::1"), ("gid", None),
])
def test_qpinfo_rejects_wrong_types(field, value):
    with pytest.raises(TypeError, match=field):
        remote_info(**{field: value})


def test_qpinfo_accepts_the_maxima_and_int_likes():
    info = QPInfo(np.uint32((1 << 24) - 1), (1 << 24) - 1, 0xFFFF, GID, np.uint8(255), np.int64(5))
    assert (info.qp_num, info.port, info.mtu) == ((1 << 24) - 1, 255, 5)
    assert all(type(v) is int for v in (info.qp_num, info.port, info.mtu))


def test_qpinfo_assignment_is_validated_too():
    info = remote_info()
    info.psn = 7
    assert info.psn == 7
    with pytest.raises(ValueError):
        info.psn = 1 << 24
    with pytest.raises(ValueError):
        info.gid = b"short"
    assert info.psn == 7 and info.gid == GID


@given(qp_num=st.integers(0, (1 << 24) - 1), psn=st.integers(0, (1 << 24) - 1),
       lid=st.integers(0, 0xFFFF), gid=st.binary(min_size=16, max_size=16),
       port=st.integers(1, 255), mtu=st.integers(1, 5))
def test_qpinfo_round_trips_through_bytes(qp_num, psn, lid, gid, port, mtu):
    info = QPInfo(qp_num, psn, lid, gid, port, mtu)
    b = info.to_bytes()
    assert len(b) == 28
    assert QPInfo.from_bytes(b) == info
    assert QPInfo.from_bytes(bytearray(b)) == info
    assert QPInfo.from_bytes(memoryview(b)) == info


@given(st.binary(min_size=28, max_size=28))
def test_qpinfo_from_any_28_bytes_validates_or_round_trips(b):
    try:
        info = QPInfo.from_bytes(b)
    except ValueError:
        qp_num, psn, _, _, port, mtu = struct.unpack("!IIH16sBB", b)
        assert qp_num >= 1 << 24 or psn >= 1 << 24 or port == 0 or not 1 <= mtu <= 5
    else:
        assert info.to_bytes() == b


@pytest.mark.parametrize("n", [n for n in range(0, 64) if n != 28])
def test_qpinfo_from_bytes_rejects_every_wrong_length(n):
    with pytest.raises(ValueError, match="exactly 28 bytes"):
        QPInfo.from_bytes(b"\x01" * n)


def test_qpinfo_from_bytes_rejects_str():
    with pytest.raises(TypeError):
        QPInfo.from_bytes("x" * 28)


# --- local_qp_info ------------------------------------------------------------------

def test_local_qp_info_takes_lid_and_mtu_from_port_attr():
    qp = FakeQP(qp_num=0x777)
    port_attr = types.SimpleNamespace(lid=0x33, active_mtu=4)
    info = local_qp_info(qp, port_attr, FakeGid(GID), port=2, psn=0x99)
    assert info == QPInfo(qp_num=0x777, psn=0x99, lid=0x33, gid=GID, port=2, mtu=4)


def test_local_qp_info_psn_defaults_to_zero_and_port_is_keyword_only():
    qp = FakeQP()
    port_attr = types.SimpleNamespace(lid=0, active_mtu=3)
    assert local_qp_info(qp, port_attr, GID, port=1).psn == 0
    with pytest.raises(TypeError):
        local_qp_info(qp, port_attr, GID, 1)


# --- transitions: masks per QP type ----------------------------------------------------

def test_rc_transitions_use_the_full_masks():
    qp = FakeQP(QPT["RC"], active_mtu=5)
    tr.to_init(qp, 2, access=LOCAL_WRITE | REMOTE_WRITE, pkey_index=3, qkey=0x1111)
    tr.to_rtr(qp, remote_info(mtu=3), 4, hop_limit=64, min_rnr_timer=10, max_dest_rd_atomic=16,
              sl=2, traffic_class=96)
    tr.to_rts(qp, 0x55, timeout=20, retry_cnt=6, rnr_retry=5, max_rd_atomic=8)
    (m1, ah1, f1), (m2, ah2, f2), (m3, ah3, f3) = qp.calls

    assert m1 == mask("STATE", "PKEY_INDEX", "PORT", "ACCESS_FLAGS")
    assert (ah1, f1) == (None, dict(qp_state=INIT, port_num=2, pkey_index=3,
                                    qp_access_flags=LOCAL_WRITE | REMOTE_WRITE))

    assert m2 == mask("STATE", "AV", "PATH_MTU", "DEST_QPN", "RQ_PSN", "MAX_DEST_RD_ATOMIC", "MIN_RNR_TIMER")
    assert f2 == dict(qp_state=RTR, path_mtu=3, dest_qp_num=0xABCDE, rq_psn=0x42,
                      max_dest_rd_atomic=16, min_rnr_timer=10)
    assert ah2.kw == dict(dgid=GID, sgid_index=4, dlid=0x22, is_global=1, port_num=2, hop_limit=64,
                          traffic_class=96, sl=2, flow_label=0, src_path_bits=0, static_rate=0)

    assert m3 == mask("STATE", "TIMEOUT", "RETRY_CNT", "RNR_RETRY", "SQ_PSN", "MAX_QP_RD_ATOMIC")
    assert (ah3, f3) == (None, dict(qp_state=RTS, sq_psn=0x55, timeout=20, retry_cnt=6, rnr_retry=5,
                                    max_rd_atomic=8))


def test_rc_transition_defaults():
    qp = FakeQP(QPT["RC"])
    tr.to_init(qp, 1)
    tr.to_rtr(qp, remote_info(), 0)
    tr.to_rts(qp, 0)
    (_, _, f1), (_, ah2, f2), (_, _, f3) = qp.calls
    assert f1 == dict(qp_state=INIT, port_num=1, pkey_index=0, qp_access_flags=0)
    assert (f2["min_rnr_timer"], f2["max_dest_rd_atomic"]) == (12, 1)
    assert (ah2.kw["hop_limit"], ah2.kw["sl"], ah2.kw["traffic_class"], ah2.kw["sgid_index"]) == (1, 0, 0, 0)
    assert f3 == dict(qp_state=RTS, sq_psn=0, timeout=14, retry_cnt=7, rnr_retry=7, max_rd_atomic=1)


def test_uc_transitions():
    qp = FakeQP(QPT["UC"])
    tr.to_init(qp, 1, access=REMOTE_WRITE)
    tr.to_rtr(qp, remote_info(), 1)
    tr.to_rts(qp, 9, timeout=3)
    (m1, _, f1), (m2, ah2, f2), (m3, _, f3) = qp.calls
    assert m1 == mask("STATE", "PKEY_INDEX", "PORT", "ACCESS_FLAGS")
    assert f1 == dict(qp_state=INIT, port_num=1, pkey_index=0, qp_access_flags=REMOTE_WRITE)
    assert m2 == mask("STATE", "AV", "PATH_MTU", "DEST_QPN", "RQ_PSN")
    assert f2 == dict(qp_state=RTR, path_mtu=3, dest_qp_num=0xABCDE, rq_psn=0x42)
    assert ah2.kw["dgid"] == GID
    assert m3 == mask("STATE", "SQ_PSN")
    assert f3 == dict(qp_state=RTS, sq_psn=9)


def test_ud_qps_take_the_ud_masks():
    qp = FakeQP(QPT["UD"])
    tr.to_init(qp, 1, access=REMOTE_WRITE, pkey_index=2, qkey=0x11111111)
    tr.to_rtr(qp, None, 0)  # remote is not used by UD
    tr.to_rts(qp, 0x10)
    (m1, _, f1), (m2, ah2, f2), (m3, _, f3) = qp.calls
    assert m1 == mask("STATE", "PKEY_INDEX", "PORT", "QKEY")
    assert f1 == dict(qp_state=INIT, port_num=1, pkey_index=2, qkey=0x11111111)
    assert (m2, ah2, f2) == (mask("STATE"), None, dict(qp_state=RTR))
    assert m3 == mask("STATE", "SQ_PSN")
    assert f3 == dict(qp_state=RTS, sq_psn=0x10)
    assert qp.pd.context.queried == []  # no port query for UD


def test_raw_packet_transitions():
    qp = FakeQP(QPT["RAW_PACKET"])
    tr.to_init(qp, 1)
    tr.to_rtr(qp, None, 0)
    tr.to_rts(qp, 0)
    assert [(m, f) for m, _, f in qp.calls] == [
        (mask("STATE", "PORT"), dict(qp_state=INIT, port_num=1)),
        (mask("STATE"), dict(qp_state=RTR)),
        (mask("STATE"), dict(qp_state=RTS)),
    ]


@pytest.mark.parametrize("fn, args", [(tr.to_init, (1,)), (tr.to_rtr, (None, 0)), (tr.to_rts, (0,))])
def test_transitions_reject_other_qp_types(fn, args):
    qp = FakeQP(QPT["XRC_SEND"])
    with pytest.raises(ValueError, match="XRC_SEND.*QP.modify"):
        fn(qp, *args)
    assert qp.calls == []


@pytest.mark.parametrize("active, remote_mtu", [(5, 3), (3, 5), (4, 4), (1, 5)])
def test_to_rtr_mtu_defaults_to_the_remote_mtu_as_in_the_seed(active, remote_mtu):
    qp = FakeQP(QPT["RC"], active_mtu=active)
    tr.to_init(qp, 3)
    tr.to_rtr(qp, remote_info(mtu=remote_mtu), 0)
    assert qp.calls[-1][2]["path_mtu"] == remote_mtu
    assert qp.pd.context.queried == []


def test_to_rtr_explicit_mtu_skips_the_port_query():
    qp = FakeQP(QPT["RC"], active_mtu=5)
    tr.to_init(qp, 1)
    tr.to_rtr(qp, remote_info(mtu=1), 0, mtu=4)
    assert qp.calls[-1][2]["path_mtu"] == 4
    assert qp.pd.context.queried == []


def test_to_rtr_uses_the_port_from_the_qp_query_for_the_address_vector():
    qp = FakeQP(QPT["RC"])
    tr.to_init(qp, 7)
    tr.to_rtr(qp, remote_info(), 0)
    assert qp.calls[-1][1].kw["port_num"] == 7


def test_to_rtr_before_to_init_is_a_clear_error():
    qp = FakeQP(QPT["RC"])
    with pytest.raises(ValueError, match="to_init"):
        tr.to_rtr(qp, remote_info(), 0)
    assert qp.calls == []


def test_to_rtr_accepts_a_duck_typed_remote_and_a_gid_object():
    qp = FakeQP(QPT["RC"])
    tr.to_init(qp, 1)
    remote = types.SimpleNamespace(qp_num=5, psn=6, lid=7, gid=FakeGid(GID), mtu=2)
    tr.to_rtr(qp, remote, 0)
    _, ah, f = qp.calls[-1]
    assert (f["dest_qp_num"], f["rq_psn"], f["path_mtu"], ah.kw["dlid"]) == (5, 6, 2, 7)
    assert ah.kw["dgid"] is remote.gid


def test_to_rtr_rejects_a_remote_that_is_not_a_qpinfo():
    qp = FakeQP(QPT["RC"])
    tr.to_init(qp, 1)
    with pytest.raises(TypeError, match="QPInfo"):
        tr.to_rtr(qp, b"\x00" * 28, 0)


@pytest.mark.parametrize("kw, word", [
    (dict(port=0), "port"), (dict(port=256), "port"), (dict(port=-1), "port"),
    (dict(port=1, pkey_index=1 << 16), "pkey_index"), (dict(port=1, access=-1), "access"),
    (dict(port=1, access=1 << 32), "access"),
])
def test_to_init_validates(kw, word):
    qp = FakeQP(QPT["RC"])
    with pytest.raises(ValueError, match=word):
        tr.to_init(qp, **kw)
    assert qp.calls == []


def test_to_init_validates_qkey_for_ud():
    with pytest.raises(ValueError, match="qkey"):
        tr.to_init(FakeQP(QPT["UD"]), 1, qkey=1 << 32)


@pytest.mark.parametrize("value", [1.0, "1", None])
def test_transition_arguments_must_be_integers(value):
    with pytest.raises(TypeError, match="port must be an integer"):
        tr.to_init(FakeQP(), value)


def test_transition_arguments_accept_numpy_integers():
    qp = FakeQP(QPT["RC"])
    tr.to_init(qp, np.uint8(1), access=np.int64(LOCAL_WRITE))
    assert qp.calls[0][2]["port_num"] == 1 and type(qp.calls[0][2]["port_num"]) is int


@pytest.mark.parametrize("kw, word", [
    (dict(sgid_index=256), "sgid_index"), (dict(sgid_index=-1), "sgid_index"),
    (dict(mtu=0), "mtu"), (dict(mtu=6), "mtu"), (dict(hop_limit=256), "hop_limit"),
    (dict(min_rnr_timer=32), "min_rnr_timer"), (dict(max_dest_rd_atomic=256), "max_dest_rd_atomic"),
    (dict(sl=16), "sl"), (dict(traffic_class=256), "traffic_class"),
])
def test_to_rtr_validates(kw, word):
    qp = FakeQP(QPT["RC"])
    tr.to_init(qp, 1)
    args = {"sgid_index": 0, **kw}
    with pytest.raises(ValueError, match=word):
        tr.to_rtr(qp, remote_info(), **args)
    assert len(qp.calls) == 1


@pytest.mark.parametrize("field, value", [("qp_num", 1 << 24), ("psn", 1 << 24), ("lid", 1 << 16),
                                          ("mtu", 7)])
def test_to_rtr_validates_a_duck_typed_remote(field, value):
    qp = FakeQP(QPT["RC"])
    tr.to_init(qp, 1)
    remote = types.SimpleNamespace(**{**REMOTE, field: value})
    with pytest.raises(ValueError, match=f"remote.{field}"):
        tr.to_rtr(qp, remote, 0)


@pytest.mark.parametrize("kw, word", [
    (dict(psn=1 << 24), "psn"), (dict(psn=-1), "psn"), (dict(psn=0, timeout=32), "timeout"),
    (dict(psn=0, retry_cnt=8), "retry_cnt"), (dict(psn=0, rnr_retry=8), "rnr_retry"),
    (dict(psn=0, max_rd_atomic=256), "max_rd_atomic"),
])
def test_to_rts_validates(kw, word):
    qp = FakeQP(QPT["RC"])
    with pytest.raises(ValueError, match=word):
        tr.to_rts(qp, **kw)
    assert qp.calls == []


# --- connect_rc ----------------------------------------------------------------------

def test_connect_rc_goes_init_rtr_rts():
    qp = FakeQP(QPT["RC"], active_mtu=5)
    remote = remote_info(mtu=4)
    connect_rc(qp, remote, port=1, sgid_index=3, access=LOCAL_WRITE | REMOTE_READ, local_psn=0x77)
    (m1, _, f1), (m2, ah2, f2), (m3, _, f3) = qp.calls
    assert (m1, f1) == (mask("STATE", "PKEY_INDEX", "PORT", "ACCESS_FLAGS"),
                        dict(qp_state=INIT, port_num=1, pkey_index=0, qp_access_flags=LOCAL_WRITE | REMOTE_READ))
    assert m2 == mask("STATE", "AV", "PATH_MTU", "DEST_QPN", "RQ_PSN", "MAX_DEST_RD_ATOMIC", "MIN_RNR_TIMER")
    assert f2 == dict(qp_state=RTR, path_mtu=4, dest_qp_num=remote.qp_num, rq_psn=remote.psn,
                      max_dest_rd_atomic=1, min_rnr_timer=12)
    assert (ah2.kw["dgid"], ah2.kw["sgid_index"], ah2.kw["dlid"], ah2.kw["port_num"]) == (GID, 3, 0x22, 1)
    assert (m3, f3) == (mask("STATE", "TIMEOUT", "RETRY_CNT", "RNR_RETRY", "SQ_PSN", "MAX_QP_RD_ATOMIC"),
                        dict(qp_state=RTS, sq_psn=0x77, timeout=14, retry_cnt=7, rnr_retry=7, max_rd_atomic=1))


@pytest.mark.parametrize("active, remote_mtu, expected", [(5, 3, 3), (2, 5, 2)])
def test_connect_rc_mtu_defaults_to_min_of_local_active_and_remote(active, remote_mtu, expected):
    qp = FakeQP(QPT["RC"], active_mtu=active)
    connect_rc(qp, remote_info(mtu=remote_mtu), port=2, sgid_index=0, access=0)
    assert qp.calls[1][2]["path_mtu"] == expected
    assert qp.pd.context.queried == [2]


def test_connect_rc_explicit_mtu_and_rts_kwargs():
    qp = FakeQP(QPT["RC"], active_mtu=1)
    connect_rc(qp, remote_info(mtu=1), port=1, sgid_index=0, access=0, mtu=5, timeout=18, retry_cnt=3,
               rnr_retry=6, max_rd_atomic=4)
    assert qp.calls[1][2]["path_mtu"] == 5
    f3 = qp.calls[2][2]
    assert (f3["timeout"], f3["retry_cnt"], f3["rnr_retry"], f3["max_rd_atomic"]) == (18, 3, 6, 4)
    assert qp.pd.context.queried == []


@pytest.mark.parametrize("kw, exc", [
    (dict(timeout=32), ValueError), (dict(rnr_retry=9), ValueError), (dict(bogus=64), TypeError), (dict(hop_limit=300), ValueError),
    (dict(mtu=9), ValueError), (dict(sgid_index=300), ValueError), (dict(port=0), ValueError),
    (dict(access=-1), ValueError), (dict(local_psn=1 << 24), ValueError),
])
def test_connect_rc_checks_everything_before_modifying_the_qp(kw, exc):
    qp = FakeQP(QPT["RC"])
    args = {"port": 1, "sgid_index": 0, "access": 0, **kw}
    with pytest.raises(exc):
        connect_rc(qp, remote_info(), **args)
    assert qp.calls == []


def test_connect_rc_takes_keyword_only_arguments():
    with pytest.raises(TypeError):
        connect_rc(FakeQP(), remote_info(), 1, 0, 0)


def test_connect_rc_connects_uc_and_rejects_ud():
    uc = FakeQP(QPT["UC"])
    connect_rc(uc, remote_info(), port=1, sgid_index=0, access=REMOTE_WRITE)
    assert [m for m, _, _ in uc.calls] == [mask("STATE", "PKEY_INDEX", "PORT", "ACCESS_FLAGS"),
                                           mask("STATE", "AV", "PATH_MTU", "DEST_QPN", "RQ_PSN"),
                                           mask("STATE", "SQ_PSN")]
    ud = FakeQP(QPT["UD"])
    with pytest.raises(ValueError, match="RC"):
        connect_rc(ud, remote_info(), port=1, sgid_index=0, access=0)
    assert ud.calls == []


# --- tensor_addr_len with numpy ----------------------------------------------------

def test_tensor_addr_len_of_a_contiguous_numpy_array():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    assert tensor_addr_len(a) == (a.ctypes.data, 96)


def test_tensor_addr_len_of_a_contiguous_view_starts_at_the_view():
    a = np.arange(100, dtype=np.int64)
    v = a[10:20]
    assert tensor_addr_len(v) == (a.ctypes.data + 80, 80)


@pytest.mark.parametrize("make", [
    lambda: np.arange(10)[::2],
    lambda: np.zeros((4, 4)).T,
    lambda: np.zeros((4, 4))[:, :2],
    lambda: np.zeros((4, 4), order="F"),
])
def test_tensor_addr_len_rejects_non_c_contiguous_arrays(make):
    with pytest.raises(ValueError, match="C-contiguous"):
        tensor_addr_len(make())


def test_tensor_addr_len_of_a_0d_array():
    a = np.array(3.5)
    assert tensor_addr_len(a) == (a.ctypes.data, 8)


def test_tensor_addr_len_of_an_empty_array_has_zero_bytes():
    assert tensor_addr_len(np.zeros((3, 0)))[1] == 0
    assert tensor_addr_len(np.zeros((0, 5))[:, ::2])[1] == 0  # empty counts as contiguous


def test_tensor_addr_len_of_a_read_only_array():
    a = np.arange(8, dtype=np.uint8)
    a.setflags(write=False)
    assert tensor_addr_len(a) == (a.ctypes.data, 8)
    b = np.frombuffer(b"\x01" * 16, dtype=np.uint16)
    assert tensor_addr_len(b)[1] == 16


@pytest.mark.parametrize("dtype", ["u1", "<f8", "c16", "M8[ns]", "V12", "U3", "S5", "?"])
def test_tensor_addr_len_item_sizes(dtype):
    a = np.zeros(5, dtype=dtype)
    assert tensor_addr_len(a) == (a.ctypes.data, a.nbytes)


def test_tensor_addr_len_rejects_object_arrays():
    with pytest.raises(TypeError):
        tensor_addr_len(np.zeros(3, dtype=object))


@given(shape=st.lists(st.integers(0, 4), min_size=1, max_size=3),
       steps=st.lists(st.sampled_from([1, 2, -1]), min_size=3, max_size=3),
       transpose=st.booleans())
def test_tensor_addr_len_agrees_with_numpy_contiguity(shape, steps, transpose):
    a = np.zeros(shape, dtype=np.int16)
    a = a[tuple(slice(None, None, s) for s in steps[:len(shape)])]
    if transpose:
        a = a.T
    if a.flags["C_CONTIGUOUS"]:
        assert tensor_addr_len(a) == (a.__array_interface__["data"][0], a.nbytes)
    else:
        with pytest.raises(ValueError, match="C-contiguous"):
            tensor_addr_len(a)


@pytest.mark.parametrize("obj", [b"bytes", bytearray(8), memoryview(b"x"), [1, 2], 5, None, "str"])
def test_tensor_addr_len_rejects_other_types(obj):
    with pytest.raises(TypeError):
        tensor_addr_len(obj)


# --- torch-like tensors --------------------------------------------------------------

class FakeTensor:
    def __init__(self, ptr=0x10000, numel=16, element_size=4, contiguous=True, device="cpu"):
        self._ptr, self._numel, self._es, self._contiguous = ptr, numel, element_size, contiguous
        self.device = types.SimpleNamespace(type=device)
        self.is_cuda = device == "cuda"

    def data_ptr(self):
        return self._ptr

    def element_size(self):
        return self._es

    def numel(self):
        return self._numel

    def is_contiguous(self):
        return self._contiguous


def test_tensor_addr_len_of_a_torch_like_tensor():
    assert tensor_addr_len(FakeTensor(ptr=0x5000, numel=10, element_size=8)) == (0x5000, 80)


def test_tensor_addr_len_rejects_a_non_contiguous_tensor():
    with pytest.raises(ValueError, match="contiguous"):
        tensor_addr_len(FakeTensor(contiguous=False))


# --- reg_tensor -----------------------------------------------------------------------

class FakeMR:
    def __init__(self, addr, length, access):
        self.addr, self.length, self.access = addr, length, access
        self.owner = None


class FakePD:
    def __init__(self):
        self.calls = []

    def reg_mr(self, addr, length, access):
        self.calls.append((addr, length, access))
        return FakeMR(addr, length, access)


def test_reg_tensor_registers_a_numpy_array_and_keeps_it_alive():
    pd = FakePD()
    a = np.zeros(1024, dtype=np.uint8)
    mr = reg_tensor(pd, a, LOCAL_WRITE | REMOTE_WRITE)
    assert pd.calls == [(a.ctypes.data, 1024, LOCAL_WRITE | REMOTE_WRITE)]
    assert mr.owner is a


def test_reg_tensor_registers_a_host_torch_like_tensor():
    pd = FakePD()
    t = FakeTensor(ptr=0x9000, numel=4, element_size=2)
    mr = reg_tensor(pd, t, REMOTE_READ)
    assert pd.calls == [(0x9000, 8, REMOTE_READ)]
    assert mr.owner is t


def test_reg_tensor_rejects_a_cuda_tensor():
    pd = FakePD()
    with pytest.raises(ValueError, match="cuda.register_tensor"):
        reg_tensor(pd, FakeTensor(device="cuda"), 0)
    # recognised by device.type alone, too
    t = FakeTensor()
    del t.is_cuda
    t.device.type = "cuda"
    with pytest.raises(ValueError, match="cuda.register_tensor"):
        reg_tensor(pd, t, 0)
    assert pd.calls == []


def test_reg_tensor_rejects_other_devices():
    with pytest.raises(ValueError, match="meta"):
        reg_tensor(FakePD(), FakeTensor(device="meta"), 0)


@pytest.mark.parametrize("t", [np.zeros(0), np.zeros((2, 0, 3)), FakeTensor(numel=0)])
def test_reg_tensor_rejects_empty_tensors(t):
    pd = FakePD()
    with pytest.raises(ValueError, match="empty"):
        reg_tensor(pd, t, 0)
    assert pd.calls == []


def test_reg_tensor_rejects_non_contiguous():
    with pytest.raises(ValueError, match="C-contiguous"):
        reg_tensor(FakePD(), np.zeros(8)[::2], 0)
    with pytest.raises(ValueError, match="contiguous"):
        reg_tensor(FakePD(), FakeTensor(contiguous=False), 0)


def test_reg_tensor_rejects_other_types():
    with pytest.raises(TypeError):
        reg_tensor(FakePD(), bytearray(16), 0)


def test_reg_tensor_of_a_read_only_array_needs_read_only_access():
    a = np.frombuffer(b"\x00" * 64, dtype=np.uint8)
    pd = FakePD()
    mr = reg_tensor(pd, a, REMOTE_READ)
    assert mr.owner is a and pd.calls == [(a.ctypes.data, 64, REMOTE_READ)]
    for access in (LOCAL_WRITE, REMOTE_WRITE | REMOTE_READ, REMOTE_ATOMIC):
        with pytest.raises(ValueError, match="read-only"):
            reg_tensor(pd, a, access)
    assert len(pd.calls) == 1


def test_helpers_all():
    assert set(helpers.__all__) == {"QPInfo", "RemoteBuffer", "local_qp_info", "connect_rc",
                                    "tensor_addr_len", "reg_tensor"}
    assert all(hasattr(helpers, n) for n in helpers.__all__)


def test_connect_rc_routes_rtr_keywords_to_the_rtr_step_and_names_itself_in_errors():
    import ibverbs.helpers as h
    calls = []

    class Port:
        active_mtu = 3

    class Ctx:
        def query_port(self, port):
            return Port()

    class PD:
        context = Ctx()

    class FakeQP:
        qp_type = 2
        pd = PD()

        def modify(self, mask, **fields):
            calls.append(fields)

        def query(self):
            return {"port_num": 1}, None

        to_init, to_rtr, to_rts = tr.to_init, tr.to_rtr, tr.to_rts

    remote = h.QPInfo(1, 2, 0, bytes(16), 1, 3)
    h.connect_rc(FakeQP(), remote, port=1, sgid_index=1, access=0, max_dest_rd_atomic=16,
                 hop_limit=64, timeout=20)
    assert calls[1]["max_dest_rd_atomic"] == 16
    assert calls[2]["timeout"] == 20
    with pytest.raises(TypeError, match=r"connect_rc\(\) got an unexpected keyword argument 'bogus'"):
        h.connect_rc(FakeQP(), remote, port=1, sgid_index=1, access=0, bogus=1)


# --- the seed's connection rules ---------------------------------------------------

def test_connect_rc_drives_a_wrapper_through_its_own_transitions():
    """connect_rc calls qp.to_init/to_rtr/to_rts (as the seed did), so a
    wrapper that provides them, without being a QP, is connected by them."""
    calls = []

    class Wrapper:
        pd = types.SimpleNamespace(context=FakeContext(4))

        def to_init(self, port, access=0):
            calls.append(("init", port, access))

        def to_rtr(self, remote, sgid_index, mtu=None, **kw):
            calls.append(("rtr", remote.qp_num, sgid_index, mtu))

        def to_rts(self, psn, **kw):
            calls.append(("rts", psn, kw))

    connect_rc(Wrapper(), remote_info(mtu=5), port=1, sgid_index=2, access=7, local_psn=9, timeout=3)
    assert calls == [("init", 1, 7), ("rtr", 0xABCDE, 2, 4), ("rts", 9, {"timeout": 3})]


@pytest.mark.parametrize("step, fn, args", [("INIT", tr.to_init, (1,)),
                                            ("RTR", tr.to_rtr, (remote_info(), 0)),
                                            ("RTS", tr.to_rts, (0,))])
def test_a_failed_transition_names_it(step, fn, args):
    import errno as errno_

    class Refusing(FakeQP):
        def modify(self, attr_mask, ah_attr=None, **fields):
            if fields.get("qp_state") != INIT or step == "INIT":
                raise ib_errors.VerbsError("ibv_modify_qp", errno_.EINVAL)
            super().modify(attr_mask, ah_attr, **fields)

    qp = Refusing()
    if step != "INIT":
        tr.to_init(qp, 1)
    with pytest.raises(ib_errors.VerbsError) as info:
        fn(qp, *args)
    assert info.value.operation == f"ibv_modify_qp(->{step})"
    assert info.value.errno == errno_.EINVAL
    assert str(info.value).startswith(f"[Errno {errno_.EINVAL}] ibv_modify_qp(->{step}) failed: ")


def test_qpinfo_struct_is_the_seeds():
    assert isinstance(QPInfo._STRUCT, struct.Struct)
    assert (QPInfo._STRUCT.format, QPInfo._STRUCT.size) == ("!IIH16sBB", 28)
    info = remote_info()
    assert QPInfo._STRUCT.unpack(info.to_bytes()) == (0xABCDE, 0x42, 0x22, GID, 1, 3)


# --- RemoteBuffer, and QPInfo from any received bytes ------------------------------

def test_remote_buffer_wire_format_is_network_order_addr_rkey_length():
    rb = helpers.RemoteBuffer(0x1122334455667788, 0xAABBCCDD, 4096)
    raw = rb.to_bytes()
    assert raw == struct.pack("!QIQ", 0x1122334455667788, 0xAABBCCDD, 4096)
    assert len(raw) == 20
    for form in (raw, bytearray(raw), memoryview(raw)):
        assert helpers.RemoteBuffer.from_bytes(form) == rb


@pytest.mark.parametrize("field,value,error", [
    ("addr", -1, ValueError), ("addr", 1 << 64, ValueError), ("rkey", 1 << 32, ValueError),
    ("length", -5, ValueError), ("rkey", 1.5, TypeError), ("addr", "0", TypeError)])
def test_remote_buffer_checks_its_fields(field, value, error):
    kwargs = {"addr": 0, "rkey": 0, "length": 0}
    kwargs[field] = value
    with pytest.raises(error, match=field):
        helpers.RemoteBuffer(**kwargs)


def test_remote_buffer_from_bytes_needs_exactly_20_bytes():
    with pytest.raises(ValueError, match="exactly 20 bytes"):
        helpers.RemoteBuffer.from_bytes(bytes(21))
    with pytest.raises(TypeError, match="bytes-like"):
        helpers.RemoteBuffer.from_bytes("x" * 20)


def test_remote_buffer_slice_stays_inside():
    rb = helpers.RemoteBuffer(1000, 7, 100)
    assert rb.slice(10, 20) == helpers.RemoteBuffer(1010, 7, 20)
    assert rb.slice(40) == helpers.RemoteBuffer(1040, 7, 60)
    with pytest.raises(ValueError, match="exceeds"):
        rb.slice(90, 20)
    with pytest.raises(ValueError, match="offset"):
        rb.slice(101)


class _MR:
    addr, rkey, length = 0x10000, 0x42, 256


def test_mr_remote_is_the_mr_or_a_part_of_it():
    assert helpers.mr_remote(_MR()) == helpers.RemoteBuffer(0x10000, 0x42, 256)
    assert helpers.mr_remote(_MR(), 16, 32) == helpers.RemoteBuffer(0x10010, 0x42, 32)
    with pytest.raises(ValueError):
        helpers.mr_remote(_MR(), 200, 100)


def test_wire_formats_read_a_uint8_tensor_and_a_numpy_array():
    torch = pytest.importorskip("torch")
    np = pytest.importorskip("numpy")
    rb = helpers.RemoteBuffer(0xDEADBEEF000, 0x1234, 1 << 20)
    t = torch.frombuffer(bytearray(rb.to_bytes()), dtype=torch.uint8)
    assert helpers.RemoteBuffer.from_bytes(t) == rb
    assert helpers.RemoteBuffer.from_bytes(np.frombuffer(rb.to_bytes(), dtype=np.uint8)) == rb
    info = QPInfo(qp_num=5, psn=6, lid=7, gid=bytes(range(16)), port=1, mtu=3)
    gathered = torch.zeros(2, 28, dtype=torch.uint8)
    gathered[1] = torch.frombuffer(bytearray(info.to_bytes()), dtype=torch.uint8)
    assert QPInfo.from_bytes(gathered[1]) == info          # a row of an all_gather result
    with pytest.raises(ValueError, match="contiguous"):
        QPInfo.from_bytes(torch.zeros(28, 2, dtype=torch.uint8)[:, 0])


# --- connect_rc: the seed's calling convention (issue 25, point 10) -------------------

class KeywordDouble:
    """A test double written against the seed: to_rtr takes the remote and
    keywords only, as users' doubles do (``to_rtr(self, remote, **kw)``)."""

    qp_type = QPT["RC"]

    def __init__(self):
        self.pd = types.SimpleNamespace(context=FakeContext(active_mtu=4))
        self.calls = []

    def to_init(self, port, access):
        self.calls.append(("to_init", (port, access), {}))

    def to_rtr(self, remote, **kw):
        self.calls.append(("to_rtr", (remote,), kw))

    def to_rts(self, psn, **kw):
        self.calls.append(("to_rts", (psn,), kw))


def test_connect_rc_calls_the_qp_as_the_seed_does():
    qp, remote = KeywordDouble(), remote_info(mtu=5)
    connect_rc(qp, remote, port=1, sgid_index=3, access=LOCAL_WRITE, local_psn=7,
               min_rnr_timer=9, timeout=20)
    assert qp.calls == [("to_init", (1, LOCAL_WRITE), {}),
                        ("to_rtr", (remote,), {"sgid_index": 3, "mtu": 4, "min_rnr_timer": 9}),
                        ("to_rts", (7,), {"timeout": 20})]


@pytest.mark.parametrize("qp", [None, object(), "qp"])
def test_connect_rc_names_a_qp_that_is_not_one(qp):
    with pytest.raises(TypeError, match=r"connect_rc\(\) argument 'qp' must be a QP, not "):
        connect_rc(qp, remote_info(), port=1, sgid_index=0, access=0)


def test_connect_rc_names_a_remote_that_is_not_a_qpinfo():
    qp = FakeQP()
    with pytest.raises(TypeError, match="argument 'remote' must be a QPInfo, not NoneType"):
        connect_rc(qp, None, port=1, sgid_index=0, access=0)
    assert qp.calls == []


def test_local_qp_info_names_what_is_missing():
    port_attr = types.SimpleNamespace(lid=0, active_mtu=3)
    with pytest.raises(TypeError, match="argument 'qp' must be a QP, not NoneType"):
        local_qp_info(None, port_attr, GID, port=1)
    with pytest.raises(TypeError, match="argument 'port_attr' must be a PortAttr"):
        local_qp_info(FakeQP(), None, GID, port=1)
