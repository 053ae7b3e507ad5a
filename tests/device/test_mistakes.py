"""The common mistakes, explained: each comes back with the exception class
and errno it always had (code catching them keeps working) and a message
that names the cause (issue 36, "errors that explain")."""
from __future__ import annotations

import errno

import numpy as np
import pytest

from conftest import RCPair


def _rc_qp(ib, pd, cq, **caps):
    init = dict(qp_type=ib.QPType.RC, max_send_wr=4, max_recv_wr=4, max_send_sge=1,
                max_recv_sge=1)
    init.update(caps)
    return pd.create_qp(ib.QPInitAttr(cq, cq, **init))


def _state(ib, qp):
    return qp.query(ib.QPAttrMask.STATE)[0]["qp_state"]


@pytest.mark.parametrize("state", ["RESET", "INIT"])
def test_post_send_before_rts_names_the_state(ib, pd, cq, port, make_buffer, state):
    buf = make_buffer(64)
    with _rc_qp(ib, pd, cq) as qp:
        if state == "INIT":
            qp.to_init(port, ib.AccessFlags.LOCAL_WRITE)
        with pytest.raises(ib.VerbsError) as failed:
            qp.post_send(ib.SendWR(wr_id=7, sg_list=[ib.SGE(buf.mr, 64)],
                                   opcode=ib.WROpcode.SEND))
        assert failed.value.errno == errno.EINVAL
        message = str(failed.value)
        assert f"post_send on a QP in state {state}" in message, message
        assert "must be RTS to send" in message, message


def test_post_recv_on_reset_names_the_state(ib, pd, cq, make_buffer):
    buf = make_buffer(64)
    with _rc_qp(ib, pd, cq) as qp:
        try:
            qp.post_recv(ib.RecvWR(wr_id=1, sg_list=[ib.SGE(buf.mr, 64)]))
        except ib.VerbsError as exc:   # rxe takes receives in RESET; a NIC may not
            assert exc.errno == errno.EINVAL
            assert "post_recv on a QP in state RESET" in str(exc), str(exc)


@pytest.mark.parametrize("remote", ["REMOTE_WRITE", "REMOTE_ATOMIC"])
def test_remote_access_without_local_write_is_explained(ib, pd, remote):
    memory = np.zeros(4096, dtype=np.uint8)
    with pytest.raises(ib.VerbsError) as failed:
        pd.reg_mr(memory, getattr(ib.AccessFlags, remote))
    assert failed.value.errno == errno.EINVAL
    assert f"{remote} needs LOCAL_WRITE" in str(failed.value), str(failed.value)


def test_query_port_that_does_not_exist_says_the_port_count(ib, ctx):
    ports = ctx.query_device().phys_port_cnt
    with pytest.raises(ib.VerbsError) as failed:
        ctx.query_port(ports + 1)
    assert failed.value.errno == errno.EINVAL
    assert (f"port {ports + 1} does not exist: the device has {ports} port"
            in str(failed.value)), str(failed.value)


def test_to_init_on_a_port_that_does_not_exist_says_the_port_count(ib, ctx, pd, cq):
    ports = ctx.query_device().phys_port_cnt
    with _rc_qp(ib, pd, cq) as qp:
        with pytest.raises(ib.VerbsError) as failed:
            qp.to_init(ports + 1, ib.AccessFlags.LOCAL_WRITE)
        assert failed.value.errno == errno.EINVAL
        assert failed.value.operation == "ibv_modify_qp(->INIT)"
        assert f"the device has {ports} port" in str(failed.value), str(failed.value)
        assert _state(ib, qp) == ib.QPState.RESET


def test_create_ah_on_a_port_that_does_not_exist_says_the_port_count(ib, ctx, pd, port,
                                                                      gid_index):
    ports = ctx.query_device().phys_port_cnt
    gid = ctx.query_gid(port, gid_index)
    with pytest.raises(ib.VerbsError) as failed:
        pd.create_ah(ib.AHAttr(dgid=gid, sgid_index=gid_index, port_num=ports + 1))
    assert failed.value.errno == errno.EINVAL
    assert f"port {ports + 1} does not exist" in str(failed.value), str(failed.value)


def test_cq_over_max_cqe_names_the_limit(ib, ctx):
    max_cqe = ctx.query_device().max_cqe
    with pytest.raises(ib.VerbsError) as failed:
        ctx.create_cq(max_cqe + 1)
    assert failed.value.errno == errno.EINVAL
    assert (f"cqe={max_cqe + 1} is over the device's limit max_cqe={max_cqe}"
            in str(failed.value)), str(failed.value)


@pytest.mark.parametrize("field, limit", [("max_send_wr", "max_qp_wr"),
                                          ("max_recv_wr", "max_qp_wr"),
                                          ("max_send_sge", "max_sge")])
def test_qp_over_the_device_limits_names_the_limit(ib, ctx, pd, cq, field, limit):
    most = getattr(ctx.query_device(), limit)
    with pytest.raises(ib.VerbsError) as failed:
        _rc_qp(ib, pd, cq, **{field: most + 1})
    assert failed.value.errno == errno.EINVAL
    assert (f"{field}={most + 1} is over the device's limit {limit}={most}"
            in str(failed.value)), str(failed.value)


def test_full_send_queue_says_so(ib, pd, port, gid_index, access, make_buffer):
    buf = make_buffer(64)
    pair = RCPair(ib, pd, pd, port, gid_index, gid_index, access, max_send_wr=4)
    try:
        granted = pair.qp_a.query(ib.QPAttrMask.CAP)[1].max_send_wr
        wrs = [ib.SendWR(wr_id=i, sg_list=[ib.SGE(buf.mr, 8)], opcode=ib.WROpcode.RDMA_WRITE,
                         remote_addr=buf.addr, rkey=buf.mr.rkey) for i in range(granted + 1)]
        with pytest.raises(ib.VerbsError) as failed:
            pair.qp_a.post_send(wrs)      # one call: nothing completes in between
        assert failed.value.errno == errno.ENOMEM
        assert f"send queue full (max_send_wr={granted})" in str(failed.value), str(failed.value)
    finally:
        pair.close()


def _empty_gid_index(ctx, port):
    """The first index (< 256, what sgid_index holds) with no GID in it."""
    for index in range(min(ctx.query_port(port).gid_tbl_len, 256)):
        try:
            if not any(bytes(ctx.query_gid(port, index))):
                return index
        except OSError:
            return index
    pytest.skip("every GID index below 256 holds a GID")


def test_gid_index_not_in_the_table(ib, ctx, pd, cq, port, gid_index):
    empty = _empty_gid_index(ctx, port)
    table = ctx.query_port(port).gid_tbl_len
    entry = f"GID index {empty} is not in port {port}'s GID table (entry {empty} of {table} is empty)"
    with _rc_qp(ib, pd, cq) as peer:
        remote = ib.local_qp_info(peer, ctx.query_port(port), ctx.query_gid(port, gid_index),
                                  port=port)
        with _rc_qp(ib, pd, cq) as qp:
            # to_rtr alone: refused, the QP stays in INIT (the docs of to_rtr)
            qp.to_init(port, ib.AccessFlags.LOCAL_WRITE)
            with pytest.raises(ib.VerbsError) as failed:
                qp.to_rtr(remote, sgid_index=empty)
            assert failed.value.errno in (errno.ENODATA, errno.EINVAL)
            assert failed.value.operation == "ibv_modify_qp(->RTR)"
            assert entry in str(failed.value), str(failed.value)
            assert _state(ib, qp) == ib.QPState.INIT
        with _rc_qp(ib, pd, cq) as qp:
            # connect_rc: all or nothing, the QP is back in RESET
            with pytest.raises(ib.VerbsError) as failed:
                ib.connect_rc(qp, remote, port=port, sgid_index=empty,
                              access=ib.AccessFlags.LOCAL_WRITE)
            assert entry in str(failed.value), str(failed.value)
            assert _state(ib, qp) == ib.QPState.RESET
            ib.connect_rc(qp, remote, port=port, sgid_index=gid_index,
                          access=ib.AccessFlags.LOCAL_WRITE)   # and usable again
            assert _state(ib, qp) == ib.QPState.RTS


def test_modify_to_rts_from_reset_names_the_state(ib, pd, cq):
    with _rc_qp(ib, pd, cq) as qp:
        with pytest.raises(ib.VerbsError) as failed:
            qp.modify(ib.QPAttrMask.STATE, qp_state=ib.QPState.RTS)
        assert failed.value.errno == errno.EINVAL
        assert ("the QP is in state RESET: RESET -> RTS is not a transition"
                in str(failed.value)), str(failed.value)
