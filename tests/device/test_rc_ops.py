"""RC loopback on one device: every operation moves the bytes it should."""
import struct

import pytest

from conftest import poll_until

S = None


def post_recv(ib, qp, buf, wr_id=1, length=None):
    qp.post_recv(ib.RecvWR(wr_id=wr_id, sg_list=[buf.mr.sge(length)]))


def send(ib, pair, wr, recv_completions=1):
    pair.qp_a.post_send(wr)
    (wc,) = poll_until(pair.cq_a, 1)
    wc.raise_for_status()
    rwc = poll_until(pair.cq_b, recv_completions) if recv_completions else []
    return wc, rwc


def test_send_recv_moves_the_bytes(ib, rc_pair, make_buffer):
    src = make_buffer(256, fill=0)
    src.array[:] = range(256)
    dst = make_buffer(256)
    post_recv(ib, rc_pair.qp_b, dst, wr_id=42)
    wc, (rwc,) = send(ib, rc_pair, ib.SendWR(wr_id=1, sg_list=[src.mr.sge()],
                                             opcode=ib.WROpcode.SEND,
                                             send_flags=ib.SendFlags.SIGNALED))
    assert wc.opcode == ib.WCOpcode.SEND and wc.wr_id == 1
    assert rwc.wr_id == 42 and rwc.opcode == ib.WCOpcode.RECV and rwc.byte_len == 256
    assert bytes(dst.array) == bytes(range(256))


def test_send_with_imm_delivers_the_immediate_in_host_order(ib, rc_pair, make_buffer):
    src = make_buffer(16, fill=7)
    dst = make_buffer(16)
    post_recv(ib, rc_pair.qp_b, dst)
    _, (rwc,) = send(ib, rc_pair, ib.SendWR(sg_list=[src.mr.sge()], opcode=ib.WROpcode.SEND_WITH_IMM,
                                            send_flags=ib.SendFlags.SIGNALED, imm_data=0x12345678))
    assert rwc.wc_flags & ib.WCFlags.WITH_IMM
    assert rwc.imm_data == 0x12345678
    assert bytes(dst.array) == b"\x07" * 16


def test_rdma_write_lands_in_remote_memory(ib, rc_pair, make_buffer):
    src = make_buffer(4096, fill=0xAB)
    dst = make_buffer(4096)
    send(ib, rc_pair, ib.SendWR(sg_list=[src.mr.sge()], opcode=ib.WROpcode.RDMA_WRITE,
                                send_flags=ib.SendFlags.SIGNALED,
                                remote_addr=dst.addr, rkey=dst.mr.rkey), recv_completions=0)
    assert bytes(dst.array) == b"\xab" * 4096


def test_rdma_write_with_imm_notifies_the_receiver(ib, rc_pair, make_buffer):
    src = make_buffer(64, fill=0x5A)
    dst = make_buffer(64)
    rc_pair.qp_b.post_recv(ib.RecvWR(wr_id=9))   # no SGE needed for WRITE_WITH_IMM
    _, (rwc,) = send(ib, rc_pair, ib.SendWR(sg_list=[src.mr.sge()],
                                            opcode=ib.WROpcode.RDMA_WRITE_WITH_IMM,
                                            send_flags=ib.SendFlags.SIGNALED,
                                            remote_addr=dst.addr, rkey=dst.mr.rkey,
                                            imm_data=0xCAFE))
    assert rwc.opcode == ib.WCOpcode.RECV_RDMA_WITH_IMM and rwc.wr_id == 9
    assert rwc.imm_data == 0xCAFE and rwc.wc_flags & ib.WCFlags.WITH_IMM
    assert bytes(dst.array) == b"\x5a" * 64


def test_rdma_read_copies_remote_bytes(ib, rc_pair, make_buffer):
    remote = make_buffer(1024)
    remote.array[:] = [i % 251 for i in range(1024)]
    local = make_buffer(1024)
    wc, _ = send(ib, rc_pair, ib.SendWR(sg_list=[local.mr.sge()], opcode=ib.WROpcode.RDMA_READ,
                                        send_flags=ib.SendFlags.SIGNALED,
                                        remote_addr=remote.addr, rkey=remote.mr.rkey),
                 recv_completions=0)
    assert wc.opcode == ib.WCOpcode.RDMA_READ
    assert bytes(local.array) == bytes(remote.array)


def test_atomic_compare_and_swap(ib, rc_pair, make_buffer):
    target = make_buffer(8)
    target.array.view("<u8")[0] = 100
    result = make_buffer(8)
    send(ib, rc_pair, ib.SendWR(sg_list=[result.mr.sge()], opcode=ib.WROpcode.ATOMIC_CMP_AND_SWP,
                                send_flags=ib.SendFlags.SIGNALED, remote_addr=target.addr,
                                rkey=target.mr.rkey, compare_add=100, swap=555),
         recv_completions=0)
    assert target.array.view("<u8")[0] == 555
    assert result.array.view("<u8")[0] == 100     # the old value comes back


def test_atomic_fetch_and_add(ib, rc_pair, make_buffer):
    target = make_buffer(8)
    target.array.view("<u8")[0] = 40
    result = make_buffer(8)
    send(ib, rc_pair, ib.SendWR(sg_list=[result.mr.sge()], opcode=ib.WROpcode.ATOMIC_FETCH_AND_ADD,
                                send_flags=ib.SendFlags.SIGNALED, remote_addr=target.addr,
                                rkey=target.mr.rkey, compare_add=2), recv_completions=0)
    assert target.array.view("<u8")[0] == 42
    assert result.array.view("<u8")[0] == 40


def test_several_sges_gather_and_scatter(ib, rc_pair, make_buffer):
    a, b = make_buffer(100, fill=1), make_buffer(50, fill=2)
    d1, d2 = make_buffer(120), make_buffer(30)
    rc_pair.qp_b.post_recv(ib.RecvWR(wr_id=3, sg_list=[d1.mr.sge(), d2.mr.sge()]))
    _, (rwc,) = send(ib, rc_pair, ib.SendWR(sg_list=[a.mr.sge(), b.mr.sge()],
                                            opcode=ib.WROpcode.SEND, send_flags=ib.SendFlags.SIGNALED))
    assert rwc.byte_len == 150
    assert bytes(d1.array) == b"\x01" * 100 + b"\x02" * 20
    assert bytes(d2.array) == b"\x02" * 30


def test_inline_send_needs_no_lkey(ib, rc_pair, make_buffer):
    src = make_buffer(32, fill=0x33)
    dst = make_buffer(32)
    post_recv(ib, rc_pair.qp_b, dst)
    sge = ib.SGE(src.addr, 32)          # plain address, lkey 0: inline copies it
    send(ib, rc_pair, ib.SendWR(sg_list=[sge], opcode=ib.WROpcode.SEND,
                                send_flags=ib.SendFlags.SIGNALED | ib.SendFlags.INLINE))
    assert bytes(dst.array) == b"\x33" * 32


def test_a_list_of_work_requests_is_posted_as_one_chain(ib, rc_pair, make_buffer):
    dst = make_buffer(8 * 40)
    srcs = [make_buffer(8, fill=i) for i in range(40)]
    wrs = [ib.SendWR(wr_id=i, sg_list=[s.mr.sge()], opcode=ib.WROpcode.RDMA_WRITE,
                     remote_addr=dst.addr + 8 * i, rkey=dst.mr.rkey,
                     send_flags=ib.SendFlags.SIGNALED if i == 39 else 0)
           for i, s in enumerate(srcs)]
    rc_pair.qp_a.post_send(wrs)
    (wc,) = poll_until(rc_pair.cq_a, 1)
    assert wc.wr_id == 39 and wc.is_success
    assert bytes(dst.array) == b"".join(bytes([i]) * 8 for i in range(40))


def test_wrong_rkey_gives_an_error_completion(ib, rc_pair, make_buffer):
    src = make_buffer(64)
    dst = make_buffer(64)
    rc_pair.qp_a.post_send(ib.SendWR(wr_id=5, sg_list=[src.mr.sge()], opcode=ib.WROpcode.RDMA_WRITE,
                                     send_flags=ib.SendFlags.SIGNALED, remote_addr=dst.addr,
                                     rkey=dst.mr.rkey ^ 0xFF00))
    (wc,) = poll_until(rc_pair.cq_a, 1)
    assert not wc.is_success and wc.status == ib.WCStatus.REM_ACCESS_ERR
    assert wc.status_str == ib.wc_status_str(wc.status)
    with pytest.raises(ib.CompletionError) as exc:
        wc.raise_for_status()
    assert exc.value.status == ib.WCStatus.REM_ACCESS_ERR and exc.value.wc is wc


def test_posting_more_than_the_queue_holds_fails_and_the_queue_stays_usable(
        ib, pd, port, gid_index, access, make_buffer):
    from conftest import RCPair
    pair = RCPair(ib, pd, pd, port, gid_index, gid_index, access, max_send_wr=4)
    try:
        src, dst = make_buffer(8, fill=9), make_buffer(8)
        _, cap = pair.qp_a.query()
        wrs = [ib.SendWR(wr_id=i, sg_list=[src.mr.sge()], opcode=ib.WROpcode.RDMA_WRITE,
                         send_flags=ib.SendFlags.SIGNALED, remote_addr=dst.addr, rkey=dst.mr.rkey)
               for i in range(cap.max_send_wr + 8)]
        with pytest.raises(ib.VerbsError) as exc:
            pair.qp_a.post_send(wrs)
        assert exc.value.errno != 0 and "work request" in str(exc.value)
        accepted = poll_until(pair.cq_a, cap.max_send_wr)
        assert [wc.wr_id for wc in accepted] == list(range(cap.max_send_wr))
        dst.array[:] = 0
        pair.qp_a.post_send(wrs[0])
        (wc,) = poll_until(pair.cq_a, 1)
        assert wc.is_success and bytes(dst.array) == b"\x09" * 8
    finally:
        pair.close()


def test_lists_whose_sges_outgrow_the_stack_chain_are_posted_whole(
        ib, pd, port, gid_index, access, make_buffer):
    # Up to 32 requests with up to 64 SGEs in all are converted in one pass
    # on the stack; three requests of 30 SGEs each overflow it in the third
    # request, and the post starts over with a counted heap chain.
    from conftest import RCPair
    pair = RCPair(ib, pd, pd, port, gid_index, gid_index, access, max_sge=30)
    try:
        src, dst = make_buffer(3 * 30 * 4, fill=0), make_buffer(3 * 30 * 4)
        src.array[:] = [i % 251 for i in range(len(src.array))]
        recvs = [ib.RecvWR(wr_id=100 + r, sg_list=[dst.mr.sge(4, 4 * (30 * r + j)) for j in range(30)])
                 for r in range(3)]
        pair.qp_b.post_recv(tuple(recvs))
        sends = [ib.SendWR(wr_id=r, sg_list=[src.mr.sge(4, 4 * (30 * r + j)) for j in range(30)],
                           opcode=ib.WROpcode.SEND, send_flags=ib.SendFlags.SIGNALED)
                 for r in range(3)]
        pair.qp_a.post_send(sends)
        assert [wc.wr_id for wc in poll_until(pair.cq_a, 3)] == [0, 1, 2]
        got = poll_until(pair.cq_b, 3)
        assert [(wc.wr_id, wc.byte_len) for wc in got] == [(100, 120), (101, 120), (102, 120)]
        assert bytes(dst.array) == bytes(src.array)
        # a wrong item after requests already converted on the stack
        with pytest.raises(TypeError, match="item 2 must be a SendWR, not int"):
            pair.qp_a.post_send(sends[:2] + [7])
        with pytest.raises(TypeError, match="item 1 must be a RecvWR, not SendWR"):
            pair.qp_b.post_recv((recvs[0], sends[0]))
        assert pair.cq_a.poll(4) == [] and pair.cq_b.poll(4) == []
    finally:
        pair.close()
