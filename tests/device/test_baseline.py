"""Verbs of rdma-core releases after 44.0, from the 65.0 headers the wheel is
built from, on whatever libibverbs runs the tests.

The VM's own libibverbs is 44.0; tools/with-rdma-core runs the same tests on
33.2, 56.1 and 65.0.  A verb that the running libibverbs does not export
must raise RuntimeError naming the symbol and the release that added it,
before it looks at anything else; one it exports but Soft-RoCE has no
provider op for must raise VerbsError (EOPNOTSUPP), and nothing may leak.
"""
from __future__ import annotations

import errno

import numpy as np
import pytest
import rxe

UNSUPPORTED = (errno.EOPNOTSUPP, errno.ENOSYS, errno.EPROTONOSUPPORT)


def exported_since(release):
    """Whether the running libibverbs has the verbs of rdma-core *release*."""
    running = rxe.rdma_core_release()
    if running == (0,):
        pytest.skip("IBVERBS_RDMA_CORE names a prefix, not a release")
    return running >= release


def unavailable(ib, symbol, since):
    """The error a call of a verb newer than the running libibverbs raises."""
    assert symbol in ib._ibverbs._missing_symbols()
    return pytest.raises(RuntimeError, match=rf"{symbol} is unavailable.*added in rdma-core {since}")


def test_completion_counters_fail_cleanly(ib, ctx):
    if not exported_since((65,)):
        with unavailable(ib, "ibv_create_comp_cntr", "65"):
            ctx.create_comp_cntr()
        with unavailable(ib, "_ibv_query_comp_cntr_caps", "65"):
            ctx.query_comp_cntr_caps()
    else:
        with pytest.raises(ib.VerbsError) as e:
            ctx.create_comp_cntr(type=ib.CompCntrType.BYTES)
        assert e.value.errno in UNSUPPORTED and "ibv_create_comp_cntr" in str(e.value)
        with pytest.raises(ib.VerbsError) as e:
            ctx.query_comp_cntr_caps()
        assert e.value.errno in UNSUPPORTED and "ibv_query_comp_cntr_caps" in str(e.value)
    assert ib.CompCntr._open_count() == 0


def test_attach_comp_cntr_checks_its_counter(ib, rc_pair):
    if not exported_since((65,)):
        with unavailable(ib, "ibv_qp_attach_comp_cntr", "65"):
            rc_pair.qp_a.attach_comp_cntr(object(), ib.QPAttachCompCntrOp.SEND)
    else:
        with pytest.raises(TypeError):
            rc_pair.qp_a.attach_comp_cntr(object(), ib.QPAttachCompCntrOp.SEND)


def test_query_port_speed(ib, ctx, port):
    if not exported_since((62,)):
        with unavailable(ib, "ibv_query_port_speed", "62"):
            ctx.query_port_speed(port)
        return
    try:
        speed = ctx.query_port_speed(port)
    except ib.VerbsError as e:      # no provider op and no fallback
        assert e.errno in UNSUPPORTED
    else:
        assert isinstance(speed, int) and speed > 0


def test_wr_opcode_str(ib):
    if not exported_since((56,)):
        with unavailable(ib, "ibv_wr_opcode_str", "56"):
            ib.wr_opcode_str(ib.WROpcode.RDMA_WRITE)
        return
    assert "write" in ib.wr_opcode_str(ib.WROpcode.RDMA_WRITE).lower()


def test_the_65_members_exist_and_flush_access_is_refused_cleanly(ib, pd):
    assert int(ib.AccessFlags.FLUSH_GLOBAL) == 256 and int(ib.AccessFlags.FLUSH_PERSISTENT) == 512
    assert int(ib.WROpcode.FLUSH) == 14 and int(ib.WCOpcode.FLUSH) == 8
    assert int(ib.EventType.DEVICE_SPEED_CHANGE) == 20
    buf = np.zeros(4096, dtype=np.uint8)
    # Linux 6.1's uverbs knows no FLUSH access bit (rxe gained FLUSH in 6.2)
    with pytest.raises(ib.VerbsError) as e:
        pd.reg_mr(buf, ib.AccessFlags.LOCAL_WRITE | ib.AccessFlags.FLUSH_GLOBAL)
    assert e.value.errno in (errno.EINVAL,) + UNSUPPORTED and "ibv_reg_mr" in str(e.value)
    assert ib.MR._open_count() == 0
    # and the same buffer registers without it: the refusal was the bit
    with pd.reg_mr(buf, ib.AccessFlags.LOCAL_WRITE) as mr:
        assert mr.length == 4096
