"""Code written against the seed (ibverbs 2026.7.18) runs unchanged.

The first tests are the seed's README examples as its users copied them,
changed only where the README leaves a choice open (which device, which
GID index: rxe0/rxe1 and their RoCE v2 GID here; the out-of-band exchange
is a local variable).  The others pin, one by one, the behaviours issue #13
found different from the seed, each checked by what moved on Soft-RoCE.
"""
from __future__ import annotations

import errno
import inspect

import numpy as np
import pytest

from conftest import connect_loopback, poll_until, skip_if_unsupported


# --- the seed's README, as written --------------------------------------------------

def test_seed_readme_quickstart_runs_unchanged(device_names, gid_index, gid_index2):
    import ibverbs as ib

    devices = {d.name: d for d in ib.get_device_list()}
    peer_ctx = devices[device_names[1]].open()            # the peer, in the same process
    peer_pd = peer_ctx.alloc_pd()
    peer_cq = peer_ctx.create_cq(64)
    peer_buf = np.zeros(4096, dtype=np.uint8)

    # 1. Open a device and set up resources.
    dev = devices[device_names[0]]                        # (the README: ib.get_device_list()[0])
    ctx = dev.open()
    pd = ctx.alloc_pd()
    cq = ctx.create_cq(64)

    # 2. Register memory (host or GPU address — any integer VA works).
    buf = np.zeros(4096, dtype=np.uint8)
    buf[:] = np.arange(4096) % 251
    access = ib.AccessFlags.LOCAL_WRITE | ib.AccessFlags.REMOTE_WRITE | ib.AccessFlags.REMOTE_READ
    mr = pd.reg_mr(buf.ctypes.data, buf.nbytes, access)
    peer_mr = peer_pd.reg_mr(peer_buf.ctypes.data, peer_buf.nbytes, access)

    # 3. Create a reliable-connected QP.
    qp = pd.create_qp(ib.QPInitAttr(send_cq=cq, recv_cq=cq, qp_type=ib.QPType.RC))
    peer_qp = peer_pd.create_qp(ib.QPInitAttr(send_cq=peer_cq, recv_cq=peer_cq, qp_type=ib.QPType.RC))

    # 4. Exchange connection info with the peer out-of-band, then connect.
    port = 1
    port_attr = ctx.query_port(port)
    gid = ctx.query_gid(port, gid_index)              # pick a routable RoCEv2 GID
    local = ib.local_qp_info(qp, port_attr, gid, port=port, psn=0)
    peer_local = ib.local_qp_info(peer_qp, peer_ctx.query_port(port),
                                  peer_ctx.query_gid(port, gid_index2), port=port, psn=0)
    remote_bytes = peer_local.to_bytes()
    remote = ib.QPInfo.from_bytes(remote_bytes)
    ib.connect_rc(qp, remote, port=port, sgid_index=gid_index, access=access)
    ib.connect_rc(peer_qp, ib.QPInfo.from_bytes(local.to_bytes()), port=port,
                  sgid_index=gid_index2, access=access)
    peer_addr, peer_rkey = peer_mr.addr, peer_mr.rkey

    # 5. Post an RDMA write and reap the completion.
    qp.post_send(ib.SendWR(
        wr_id=1, sg_list=[ib.SGE(mr, 4096)], opcode=ib.WROpcode.RDMA_WRITE,
        send_flags=ib.SendFlags.SIGNALED, remote_addr=peer_addr, rkey=peer_rkey))
    wcs = poll_until(cq, 1)                           # (the README polls once: rxe needs a moment)
    for wc in wcs:
        wc.raise_for_status()
    assert wcs[0].wr_id == 1
    assert (peer_buf == buf).all()

    for obj in (qp, peer_qp, mr, peer_mr, cq, peer_cq, pd, peer_pd, ctx, peer_ctx):
        obj.close()


def test_seed_readme_register_host_tensor_and_gpudirect_paths(ib, pd):
    """The README's host-tensor registration and its two GPUDirect paths,
    the latter on host memory (no GPU here): reg_mr of an integer address,
    reg_dmabuf_mr failing cleanly for a bad fd."""
    access = ib.AccessFlags.LOCAL_WRITE | ib.AccessFlags.REMOTE_WRITE
    tensor = np.ones(1024, dtype=np.float32)
    mr = ib.reg_tensor(pd, tensor, access)
    assert (mr.owner is tensor, mr.addr, mr.length) == (True, tensor.ctypes.data, 4096)
    mr.close()
    assert mr.owner is None
    raw = pd.reg_mr(tensor.ctypes.data, tensor.nbytes, access)
    assert raw.owner is None and raw.length == 4096
    raw.close()
    if ib._ibverbs._has_dmabuf():
        with pytest.raises(ib.VerbsError):
            pd.reg_dmabuf_mr(0, 4096, iova=tensor.ctypes.data, fd=-1, access=access)


# --- 1: query results ---------------------------------------------------------------

SEED_QP_KEYS = ("qp_state", "path_mtu", "qkey", "rq_psn", "sq_psn", "dest_qp_num", "qp_access_flags",
                "port_num", "timeout", "retry_cnt", "rnr_retry", "min_rnr_timer", "max_rd_atomic",
                "max_dest_rd_atomic")


def test_srq_query_is_the_seeds_dict(ib, pd):
    with pd.create_srq(max_wr=32, max_sge=2, srq_limit=0) as srq:
        srq.modify(srq_limit=5)
        attrs = srq.query()
        assert type(attrs) is dict and set(attrs) == {"max_wr", "max_sge", "srq_limit"}
        assert attrs["max_wr"] >= 32 and attrs["max_sge"] >= 2 and attrs["srq_limit"] == 5
        assert all(type(v) is int for v in attrs.values())


def test_qp_query_has_the_seeds_scalar_keys_with_ints(ib, rc_pair, access):
    attrs, cap = rc_pair.qp_a.query()
    assert set(SEED_QP_KEYS) <= set(attrs)
    assert all(type(attrs[k]) is int for k in SEED_QP_KEYS), {k: type(attrs[k]) for k in SEED_QP_KEYS}
    assert attrs["qp_state"] == ib.QPState.RTS and attrs["sq_psn"] == 0x100
    assert attrs["dest_qp_num"] == rc_pair.qp_b.qp_num and attrs["qp_access_flags"] == int(access)
    assert cap.max_send_wr >= 64


# --- 2, 3: posting --------------------------------------------------------------------

def write_wr(ib, src, dst, wr_id, offset=0, length=64):
    return ib.SendWR(wr_id=wr_id, sg_list=[src.mr.sge(length, offset)], opcode=ib.WROpcode.RDMA_WRITE,
                     send_flags=ib.SendFlags.SIGNALED, remote_addr=dst.addr + offset, rkey=dst.mr.rkey)


def test_post_send_takes_wrs_by_keyword_and_any_iterable(ib, rc_pair, make_buffer):
    src, dst = make_buffer(1024, fill=0x5A), make_buffer(1024)
    qp, cq = rc_pair.qp_a, rc_pair.cq_a
    qp.post_send(wrs=write_wr(ib, src, dst, 1, 0))
    qp.post_send(wrs=[write_wr(ib, src, dst, 2, 64)])
    qp.post_send((write_wr(ib, src, dst, 3, 128), write_wr(ib, src, dst, 4, 192)))
    qp.post_send(write_wr(ib, src, dst, i, 64 * (i - 1)) for i in (5, 6))      # a generator
    qp.post_send(iter([write_wr(ib, src, dst, 7, 384)]))
    qp.post_send(ib.PostList([write_wr(ib, src, dst, 8, 448), write_wr(ib, src, dst, 9, 512)]))
    qp.post_send([])                                                     # nothing, no error
    qp.post_send(wrs=())
    qp.post_send(x for x in ())
    got = poll_until(cq, 9)
    assert sorted(wc.wr_id for wc in got) == list(range(1, 10)) and all(wc.is_success for wc in got)
    assert (dst.array[:576] == 0x5A).all() and (dst.array[576:] == 0).all()
    assert cq.poll(num_entries=4) == []


def test_post_recv_takes_wrs_by_keyword_qp_and_srq(ib, pd, ctx, port, gid_index, access, make_buffer):
    src = make_buffer(256, fill=0x33)
    landing = make_buffer(256)
    with ctx.create_cq(16) as cq_a, ctx.create_cq(16) as cq_b, pd.create_srq(max_wr=8) as srq:
        a = pd.create_qp(ib.QPInitAttr(cq_a, cq_a))
        b = pd.create_qp(ib.QPInitAttr(cq_b, cq_b, srq=srq))
        connect_loopback(ib, ctx, a, b, port, gid_index, access)
        srq.post_recv(wrs=[ib.RecvWR(wr_id=10 + i, sg_list=[landing.mr.sge(128, 128 * i)])
                           for i in range(2)])
        srq.post_recv(wrs=[])
        a.post_recv(wrs=(w for w in []))
        for i in range(2):
            a.post_send(ib.SendWR(wr_id=i, sg_list=[src.mr.sge(100, 0)], opcode=ib.WROpcode.SEND,
                                  send_flags=ib.SendFlags.SIGNALED))
        poll_until(cq_a, 2)
        recvs = poll_until(cq_b, 2)
        assert sorted(wc.wr_id for wc in recvs) == [10, 11] and all(wc.byte_len == 100 for wc in recvs)
        assert (landing.array[:100] == 0x33).all() and (landing.array[128:228] == 0x33).all()
        a.close()
        b.close()


def test_sg_list_defaults_to_a_fresh_list_and_appends_are_posted(ib, rc_pair, make_buffer):
    src, dst = make_buffer(256, fill=0x77), make_buffer(256)
    wr = ib.SendWR(wr_id=42, opcode=ib.WROpcode.RDMA_WRITE, send_flags=ib.SendFlags.SIGNALED,
                   remote_addr=dst.addr, rkey=dst.mr.rkey)
    other = ib.SendWR()
    assert wr.sg_list == [] and wr.sg_list is not other.sg_list
    wr.sg_list.append(src.mr.sge(32, 0))
    wr.sg_list.append(ib.SGE(src.mr, 32, offset=64))
    rc_pair.qp_a.post_send(wr)
    (wc,) = poll_until(rc_pair.cq_a, 1)
    assert wc.is_success and wc.wr_id == 42
    assert (dst.array[:64] == 0x77).all() and (dst.array[64:] == 0).all()
    recv = ib.RecvWR(wr_id=1)
    recv.sg_list.append(dst.mr.sge(16))
    assert len(recv.sg_list) == 1
    with pytest.raises(TypeError, match="SGE"):
        wr.sg_list.append("not an SGE")
        rc_pair.qp_a.post_send(wr)


# --- 4: keyword names -----------------------------------------------------------------

def test_the_seeds_keyword_names(ib, ctx, port, gid_index, cq):
    assert ctx.query_port(port_num=port).state == ib.PortState.ACTIVE
    assert ctx.query_gid(port_num=port, index=gid_index) == ctx.query_gid(port, gid_index)
    assert cq.poll(num_entries=8) == []
    with pytest.raises(ValueError):
        cq.ack_events(0)
    for method, names in ((ctx.query_port, ["port_num"]), (ctx.query_gid, ["port_num", "index"]),
                          (cq.poll, ["num_entries"]), (ctx.ack_async_event, ["ev"])):
        params = inspect.signature(method).parameters
        assert list(params) == names
        assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params.values())


# --- 5: errors ----------------------------------------------------------------------------

def test_closing_a_context_with_children_says_so_in_the_seeds_words(ib, device_names):
    ctx = {d.name: d for d in ib.get_device_list()}[device_names[0]].open()
    pd = ctx.alloc_pd()
    cq = ctx.create_cq(4)
    with pytest.raises(ib.VerbsError) as info:
        ctx.close()
    assert info.value.errno == errno.EBUSY
    assert "cannot close context with 2 open child resource(s)" in str(info.value)
    assert str(info.value).startswith(f"[Errno {errno.EBUSY}] ")
    with pytest.raises(ib.VerbsError, match="cannot close PD with 1 open child resource"):
        mr_buf = bytearray(64)
        mr = pd.reg_mr(mr_buf, ib.AccessFlags.LOCAL_WRITE)
        pd.close()
    mr.close()
    pd.close()
    cq.close()
    ctx.close()
    with pytest.raises(ib.VerbsError) as closed:
        ctx.query_device()
    assert closed.value.errno == errno.EBADF and closed.value.args == (errno.EBADF, "Context is closed")


def test_a_failed_completion_raises_the_seeds_completion_error(ib, rc_pair, make_buffer):
    src, dst = make_buffer(64, fill=1), make_buffer(64)
    rc_pair.qp_a.post_send(ib.SendWR(wr_id=9, sg_list=[src.mr.sge()], opcode=ib.WROpcode.RDMA_WRITE,
                                     send_flags=ib.SendFlags.SIGNALED, remote_addr=dst.addr,
                                     rkey=dst.mr.rkey ^ 0xFFFF00))
    (wc,) = poll_until(rc_pair.cq_a, 1)
    with pytest.raises(ib.CompletionError) as info:
        wc.raise_for_status()
    e = info.value
    assert e.errno == errno.EIO and e.wc is wc and e.status == wc.status != 0
    assert e.strerror == (f"work completion failed: {wc.status_str} "
                          f"(status={wc.status}, vendor_err={wc.vendor_err:#x})")
    assert e.args == (errno.EIO, e.strerror) and str(e) == f"[Errno {errno.EIO}] {e.strerror}"
    assert (dst.array == 0).all()


def test_a_failed_verb_reads_like_the_seeds_oserror(ib, ctx):
    with pytest.raises(ib.VerbsError) as info:
        ctx.query_port(99)
    e = info.value
    assert e.args == (e.errno, e.strerror) and e.operation == "ibv_query_port"
    assert str(e) == f"[Errno {e.errno}] {e.strerror}" and e.strerror.startswith("ibv_query_port failed: ")


# --- 6: Device.guid -----------------------------------------------------------------------

def test_device_guid_is_the_node_guid(ib):
    for dev in ib.get_device_list():
        with dev.open() as ctx:
            assert dev.guid == ctx.query_device().node_guid != 0


# --- 8: QPInitAttr placeholders ----------------------------------------------------------

def test_qp_init_attr_placeholders_are_filled_later(ib, pd, ctx):
    attr = ib.QPInitAttr(send_cq=None, recv_cq=None, qp_type=ib.QPType.RC, sq_sig_all=True)
    with pytest.raises(TypeError, match="must be CQs, not None"):
        pd.create_qp(attr)
    with ctx.create_cq(8) as cq:
        attr.send_cq = cq
        attr.recv_cq = cq
        assert attr.sq_sig_all is True
        with pd.create_qp(attr) as qp:
            assert qp.send_cq is cq and qp.recv_cq is cq


class FakeCQ:
    """A unit test's stand-in for a CQ (the seed's QPInitAttr took it)."""


def test_a_struct_holds_any_object_and_the_verb_checks_it(ib, pd, ctx):
    """Issue 25, point 11: QPInitAttr(send_cq=FakeCQ()) constructs, as in the
    seed; create_qp refuses it (the real type, before the provider sees a
    pointer), and a closed CQ there is EBADF."""
    fake = FakeCQ()
    with ctx.create_cq(8) as cq:
        for kw in (dict(send_cq=fake, recv_cq=cq), dict(send_cq=cq, recv_cq=fake),
                   dict(send_cq=cq, recv_cq=cq, srq=fake)):
            attr = ib.QPInitAttr(**kw)
            name = next(k for k, v in kw.items() if v is fake)
            with pytest.raises(TypeError, match=rf"QPInitAttr\.{name} must be None or "
                                                rf"(CQ|SRQ), not FakeCQ"):
                pd.create_qp(attr)
        attr = ib.QPInitAttr(send_cq=cq, recv_cq=cq)
        attr.send_cq = fake                      # assignment is not checked either
        with pytest.raises(TypeError, match="not FakeCQ"):
            pd.create_qp(attr)
        attr.send_cq = cq
        with pd.create_qp(attr) as qp:
            assert qp.send_cq is cq
    with pytest.raises(ib.VerbsError) as closed:
        pd.create_qp(attr)                       # cq is closed now
    assert closed.value.errno == errno.EBADF


def test_a_work_request_binding_a_fake_mr_is_refused_at_post(ib, pd, rc_pair):
    skip_if_unsupported(ib, "type 2 memory windows", lambda: pd.alloc_mw(ib.MWType.TYPE_2))
    with pd.alloc_mw(ib.MWType.TYPE_2) as mw:
        info = ib.MWBindInfo(mr=FakeCQ(), addr=0, length=1)
        wr = ib.SendWR(wr_id=1, opcode=ib.WROpcode.BIND_MW, mw=mw, bind_info=info,
                       rkey=ib.inc_rkey(mw.rkey), send_flags=ib.SendFlags.SIGNALED)
        with pytest.raises(TypeError, match="MWBindInfo.mr must be MR, not FakeCQ"):
            rc_pair.qp_a.post_send(wr)
        assert rc_pair.cq_a.poll(4) == []


# --- 9: transitions ---------------------------------------------------------------------

def test_modify_takes_ah_attr_positionally_or_as_none(ib, pd, cq, ctx, port, gid_index, access):
    M = ib.QPAttrMask
    with pd.create_qp(ib.QPInitAttr(cq, cq)) as a, pd.create_qp(ib.QPInitAttr(cq, cq)) as b:
        a.modify(M.STATE | M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS, None, qp_state=ib.QPState.INIT,
                 pkey_index=0, port_num=port, qp_access_flags=access)
        assert a.query()[0]["qp_state"] == ib.QPState.INIT
        gid = ctx.query_gid(port, gid_index)
        ah = ib.AHAttr(dgid=gid, sgid_index=gid_index, port_num=port)
        assert ah.dgid == bytes(gid) and type(ah.dgid) is bytes
        a.modify(M.STATE | M.AV | M.PATH_MTU | M.DEST_QPN | M.RQ_PSN | M.MAX_DEST_RD_ATOMIC
                 | M.MIN_RNR_TIMER, ah, qp_state=ib.QPState.RTR, path_mtu=ib.MTU.MTU_1024,
                 dest_qp_num=b.qp_num, rq_psn=0, max_dest_rd_atomic=1, min_rnr_timer=12)
        attrs, _ = a.query()
        assert (attrs["qp_state"], attrs["dest_qp_num"]) == (ib.QPState.RTR, b.qp_num)
        b.modify(M.STATE | M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS, ah_attr=None,
                 qp_state=ib.QPState.INIT, pkey_index=0, port_num=port, qp_access_flags=0)
        assert b.query()[0]["qp_state"] == ib.QPState.INIT


def test_to_rtr_uses_the_remote_mtu_and_the_port_of_to_init(ib, pd, cq, ctx, port, gid_index, access):
    with pd.create_qp(ib.QPInitAttr(cq, cq)) as a, pd.create_qp(ib.QPInitAttr(cq, cq)) as b:
        info_b = ib.local_qp_info(b, ctx.query_port(port), ctx.query_gid(port, gid_index), port=port)
        info_b.mtu = ib.MTU.MTU_512
        a.to_init(port, access)
        a.to_rtr(info_b, gid_index)
        attrs, _ = a.query()
        assert attrs["path_mtu"] == ib.MTU.MTU_512 and attrs["port_num"] == port


def test_a_failed_transition_is_named(ib, pd, cq, ctx, port, gid_index):
    with pd.create_qp(ib.QPInitAttr(cq, cq)) as a:
        info = ib.local_qp_info(a, ctx.query_port(port), ctx.query_gid(port, gid_index), port=port)
        with pytest.raises(ib.VerbsError) as failed:
            a.to_rts(0)                          # RESET -> RTS: refused
        assert failed.value.operation == "ibv_modify_qp(->RTS)" and failed.value.errno == errno.EINVAL
        assert a.query()[0]["qp_state"] == ib.QPState.RESET
        assert info.qp_num == a.qp_num


def test_connect_rc_drives_a_wrapper_through_its_transitions(ib, pd, port, gid_index, access,
                                                            make_buffer):
    class Traced:
        """Wraps a QP the way seed users did: connect_rc sees only these."""

        def __init__(self, qp):
            self.qp, self.pd, self.steps = qp, qp.pd, []

        def to_init(self, *args, **kwargs):
            self.steps.append("INIT")
            return self.qp.to_init(*args, **kwargs)

        def to_rtr(self, *args, **kwargs):
            self.steps.append("RTR")
            return self.qp.to_rtr(*args, **kwargs)

        def to_rts(self, *args, **kwargs):
            self.steps.append("RTS")
            return self.qp.to_rts(*args, **kwargs)

    ctx = pd.context
    with ctx.create_cq(8) as cq:
        a, b = (pd.create_qp(ib.QPInitAttr(cq, cq)) for _ in range(2))
        gid = ctx.query_gid(port, gid_index)
        ta, tb = Traced(a), Traced(b)
        ib.connect_rc(ta, ib.local_qp_info(b, ctx.query_port(port), gid, port=port),
                      port=port, sgid_index=gid_index, access=access)
        ib.connect_rc(tb, ib.local_qp_info(a, ctx.query_port(port), gid, port=port),
                      port=port, sgid_index=gid_index, access=access)
        assert ta.steps == tb.steps == ["INIT", "RTR", "RTS"]
        src, dst = make_buffer(64, fill=9), make_buffer(64)
        a.post_send(write_wr(ib, src, dst, 5))
        assert poll_until(cq, 1)[0].is_success and (dst.array == 9).all()
        a.close()
        b.close()


# --- 11: MR owner ---------------------------------------------------------------------------

def test_mr_keepalive_returns_the_mr_and_close_drops_the_owner(ib, pd):
    buf = np.zeros(4096, dtype=np.uint8)
    mr = pd.reg_mr(buf.ctypes.data, buf.nbytes, ib.AccessFlags.LOCAL_WRITE)
    assert mr.owner is None
    assert mr._keepalive(buf) is mr and mr.owner is buf
    mr.close()
    assert mr.owner is None and mr.closed
