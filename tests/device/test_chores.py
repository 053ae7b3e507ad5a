"""The helpers for the everyday chores, on rxe: Context.find_gid, CQ.wait,
RemoteBuffer / MR.remote (issue #15, point 3)."""
from __future__ import annotations

import ipaddress
import socket
import time

import pytest

import rxe
from conftest import high_fds, poll_until


def _write(ib, qp, src_mr, remote, wr_id=1):
    qp.post_send(ib.SendWR(wr_id=wr_id, sg_list=[src_mr.sge(remote.length)],
                           opcode=ib.WROpcode.RDMA_WRITE, send_flags=ib.SendFlags.SIGNALED,
                           remote_addr=remote.addr, rkey=remote.rkey))


# --- find_gid --------------------------------------------------------------------

@pytest.mark.parametrize("which", [0, 1])
def test_find_gid_picks_the_roce_v2_ipv4_gid(ib, device_names, port, which):
    name = device_names[which]
    with rxe_context(ib, name) as ctx:
        index, gid = ctx.find_gid(port)
        assert (index, str(ipaddress.IPv6Address(gid.raw).ipv4_mapped)) == \
            rxe.roce_v2_ipv4_gid(name, port)
        assert gid == ctx.query_gid(port, index)
        assert ctx.find_gid(port, family=socket.AF_INET) == (index, gid)
        assert ctx.find_gid(port, netdev=rxe.netdev_of(name, port)) == (index, gid)


def rxe_context(ib, name):
    return next(d for d in ib.get_device_list() if d.name == name).open()


def test_find_gid_with_other_criteria(ib, ctx, port):
    v4_index, v4 = ctx.find_gid(port)
    # rxe lists a RoCE v2 GID for the netdev's IPv6 link-local address too
    v6_index, v6 = ctx.find_gid(port, family="ipv6")
    assert v6.raw[:8] == bytes.fromhex("fe80000000000000") and v6_index != v4_index
    assert ctx.find_gid(port, family=socket.AF_INET6) == (v6_index, v6)
    assert ctx.find_gid(port, family=None) == min((v4_index, v4), (v6_index, v6),
                                                  key=lambda e: e[0])
    assert ctx.find_gid(port, gid_type=None) == (v4_index, v4)


def test_find_gid_says_what_the_port_has_when_nothing_fits(ib, ctx, port):
    with pytest.raises(LookupError, match=r"no RoCE v2 IPv4 GID on no-such-netdev \(it has: .*RoCE v2"):
        ctx.find_gid(port, netdev="no-such-netdev")
    with pytest.raises(LookupError, match="no IB IPv4 GID"):
        ctx.find_gid(port, gid_type=ib.GIDType.IB)      # an Ethernet port has none
    with pytest.raises(ValueError, match="family"):
        ctx.find_gid(port, family="ipx")
    with pytest.raises(ib.VerbsError):
        ctx.find_gid(99)


def test_a_pair_connected_with_find_gid_moves_bytes(ib, pd, port, access, make_buffer):
    index, _ = pd.context.find_gid(port)
    pair = _pair(ib, pd, port, index, access)
    try:
        src, dst = make_buffer(4096, fill=0x5A), make_buffer(4096)
        _write(ib, pair.qp_a, src.mr, dst.mr.remote())
        assert pair.cq_a.wait(timeout=10)[0].wr_id == 1
        assert (dst.array == 0x5A).all()
    finally:
        pair.close()


def _pair(ib, pd, port, index, access):
    from conftest import RCPair
    return RCPair(ib, pd, pd, port, index, index, access)


# --- CQ.wait -------------------------------------------------------------------------

def test_wait_returns_n_completions_and_leaves_the_rest_queued(ib, rc_pair, make_buffer):
    src, dst = make_buffer(64, fill=1), make_buffer(64)
    for wr_id in range(1, 4):
        _write(ib, rc_pair.qp_a, src.mr, dst.mr.remote(0, 64), wr_id=wr_id)
    got = rc_pair.cq_a.wait(2, timeout=10)
    assert [wc.wr_id for wc in got] == [1, 2]
    assert [wc.wr_id for wc in poll_until(rc_pair.cq_a, 1)] == [3]


def test_wait_times_out_and_counts_what_arrived(ib, rc_pair, make_buffer):
    src, dst = make_buffer(64, fill=1), make_buffer(64)
    _write(ib, rc_pair.qp_a, src.mr, dst.mr.remote(0, 64))
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="1 of 3 completions arrived within 0.3 s") as exc:
        rc_pair.cq_a.wait(3, timeout=0.3)
    assert 0.3 <= time.monotonic() - start < 5
    assert [wc.wr_id for wc in exc.value.completions] == [1]
    with pytest.raises(TimeoutError, match="0 of 1"):
        rc_pair.cq_a.wait(timeout=0)


def test_wait_raises_or_returns_a_failed_completion(ib, rc_pair, make_buffer):
    src, dst = make_buffer(64, fill=1), make_buffer(64)
    bad = ib.RemoteBuffer(dst.mr.addr, dst.mr.rkey ^ 0x5A5A00, 64)   # a wrong rkey
    _write(ib, rc_pair.qp_a, src.mr, bad, wr_id=7)
    with pytest.raises(ib.CompletionError) as exc:
        rc_pair.cq_a.wait(timeout=10)
    assert exc.value.wc.wr_id == 7
    # the QP is in the error state now: what is posted next is flushed
    rc_pair.qp_a.post_send(ib.SendWR(wr_id=8, sg_list=[src.mr.sge(8)],
                                     opcode=ib.WROpcode.SEND, send_flags=ib.SendFlags.SIGNALED))
    (wc,) = rc_pair.cq_a.wait(timeout=10, raise_on_error=False)
    assert wc.wr_id == 8 and wc.status == ib.WCStatus.WR_FLUSH_ERR


def test_wait_sleeping_on_the_channel(ib, ctx, pd, port, gid_index, access, make_buffer):
    channel = ctx.create_comp_channel()
    cq = ctx.create_cq(16, channel=channel)
    qp = pd.create_qp(ib.QPInitAttr(cq, cq))
    try:
        info = ib.local_qp_info(qp, ctx.query_port(port), ctx.query_gid(port, gid_index), port=port)
        ib.connect_rc(qp, info, port=port, sgid_index=gid_index, access=access)
        src, dst = make_buffer(64, fill=9), make_buffer(64)
        with pytest.raises(TimeoutError, match="0 of 1"):
            cq.wait(timeout=0.2, sleep=True)
        _write(ib, qp, src.mr, dst.mr.remote(0, 64), wr_id=5)
        assert [wc.wr_id for wc in cq.wait(timeout=10, sleep=True)] == [5]
        assert (dst.array == 9).all()
    finally:
        qp.close()
        cq.close()
        channel.close()


def test_wait_sleeps_on_a_channel_fd_above_1023(ib, ctx, pd, port, gid_index, access,
                                                make_buffer):
    """A process with a thousand connections has channel fds of 1024 and
    more: select() refuses those (FD_SETSIZE), the wait must not."""
    src, dst = make_buffer(64, fill=3), make_buffer(64)
    with high_fds(), ctx.create_comp_channel() as channel:
        assert channel.fd >= 1024
        with ctx.create_cq(16, channel=channel) as cq, pd.create_qp(ib.QPInitAttr(cq, cq)) as qp:
            info = ib.local_qp_info(qp, ctx.query_port(port), ctx.query_gid(port, gid_index),
                                    port=port)
            ib.connect_rc(qp, info, port=port, sgid_index=gid_index, access=access)
            with pytest.raises(TimeoutError, match="0 of 1"):
                cq.wait(timeout=0.2, sleep=True)
            _write(ib, qp, src.mr, dst.mr.remote(0, 64), wr_id=6)
            assert [wc.wr_id for wc in cq.wait(timeout=10, sleep=True)] == [6]
            assert (dst.array == 3).all()


def test_wait_checks_its_arguments(ib, cq):
    with pytest.raises(ValueError, match="n must be"):
        cq.wait(0)
    with pytest.raises(ValueError, match="timeout"):
        cq.wait(timeout=-1)
    with pytest.raises(ValueError, match="completion channel"):
        cq.wait(sleep=True)


# --- RemoteBuffer ----------------------------------------------------------------------

def test_remote_buffer_through_its_wire_bytes_reaches_the_memory(ib, rc_pair, make_buffer):
    # What an all_gather hands the peer: a uint8 array holding the 20 bytes.
    # A numpy array, not a torch tensor: `import torch` costs ~50 s in the
    # VM, and from_bytes reading a uint8 tensor is a host test
    # (test_helpers.py::test_wire_formats_read_a_uint8_tensor_and_a_numpy_array;
    # the torch examples of test_examples.py do it on the device).
    np = pytest.importorskip("numpy")
    src, dst = make_buffer(4096, fill=0x33), make_buffer(4096)
    wire = np.frombuffer(bytearray(dst.mr.remote(1024, 2048).to_bytes()), dtype=np.uint8)
    remote = ib.RemoteBuffer.from_bytes(wire)
    assert remote == ib.RemoteBuffer(dst.mr.addr + 1024, dst.mr.rkey, 2048)
    _write(ib, rc_pair.qp_a, src.mr, remote)
    rc_pair.cq_a.wait(timeout=10)
    assert (dst.array[1024:3072] == 0x33).all()
    assert not dst.array[:1024].any() and not dst.array[3072:].any()


def test_mr_remote_checks_the_range(ib, make_buffer):
    buf = make_buffer(4096)
    assert buf.mr.remote() == ib.RemoteBuffer(buf.mr.addr, buf.mr.rkey, 4096)
    with pytest.raises(ValueError, match="exceeds"):
        buf.mr.remote(4000, 100)
