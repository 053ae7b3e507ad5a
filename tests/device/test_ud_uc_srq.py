"""UD with an address handle and GRH, UC writes, shared receive queues."""
import pytest

from conftest import RCPair, poll_until

GRH = 40
QKEY = 0x11111111


def ud_qp(ib, pd, cq, port, qkey=QKEY):
    qp = pd.create_qp(ib.QPInitAttr(cq, cq, qp_type=ib.QPType.UD))
    qp.to_init(port, qkey=qkey)
    qp.to_rtr(None, 0)
    qp.to_rts(0)
    return qp


def test_ud_send_through_an_address_handle(ib, ctx, pd, port, gid_index, make_buffer):
    with ctx.create_cq(16) as cq_a, ctx.create_cq(16) as cq_b:
        a = ud_qp(ib, pd, cq_a, port)
        b = ud_qp(ib, pd, cq_b, port)
        try:
            assert a.state == b.state == ib.QPState.RTS
            dst = make_buffer(GRH + 64)
            src = make_buffer(64, fill=0x42)
            b.post_recv(ib.RecvWR(wr_id=1, sg_list=[dst.mr.sge()]))
            gid = ctx.query_gid(port, gid_index)
            ah = pd.create_ah(ib.AHAttr(dgid=gid, sgid_index=gid_index, port_num=port,
                                        is_global=1, hop_limit=64))
            a.post_send(ib.SendWR(wr_id=2, sg_list=[src.mr.sge()], opcode=ib.WROpcode.SEND,
                                  send_flags=ib.SendFlags.SIGNALED, ah=ah,
                                  remote_qpn=b.qp_num, remote_qkey=QKEY))
            poll_until(cq_a, 1)[0].raise_for_status()
            (rwc,) = poll_until(cq_b, 1)
            rwc.raise_for_status()
            assert rwc.byte_len == GRH + 64 and rwc.src_qp == a.qp_num
            assert rwc.wc_flags & ib.WCFlags.GRH
            assert bytes(dst.array[GRH:]) == b"\x42" * 64
            reply = ctx.init_ah_from_wc(port, rwc, bytes(dst.array[:GRH]))
            assert reply.dgid == gid
            with pd.create_ah_from_wc(rwc, bytes(dst.array[:GRH]), port) as ah2:
                assert ah2.pd is pd
            ah.close()
        finally:
            a.close()
            b.close()


def test_uc_rdma_write(ib, pd, port, gid_index, access, make_buffer):
    pair = RCPair(ib, pd, pd, port, gid_index, gid_index, access, qp_type=ib.QPType.UC)
    try:
        src, dst = make_buffer(128, fill=0x77), make_buffer(128)
        pair.qp_a.post_send(ib.SendWR(sg_list=[src.mr.sge()], opcode=ib.WROpcode.RDMA_WRITE,
                                      send_flags=ib.SendFlags.SIGNALED, remote_addr=dst.addr,
                                      rkey=dst.mr.rkey))
        poll_until(pair.cq_a, 1)[0].raise_for_status()
        import time
        deadline = time.monotonic() + 5
        while bytes(dst.array) != b"\x77" * 128 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert bytes(dst.array) == b"\x77" * 128
    finally:
        pair.close()


def test_srq_feeds_the_receives_of_a_qp(ib, ctx, pd, port, gid_index, access, make_buffer):
    with pd.create_srq(max_wr=16, max_sge=1) as srq:
        attr = srq.query()
        assert attr["max_wr"] >= 16 and set(attr) == {"max_wr", "max_sge", "srq_limit"}
        srq.modify(srq_limit=4)
        assert srq.query()["srq_limit"] == 4
        with pytest.raises(ValueError):
            srq.modify(max_wr=-1)
        with ctx.create_cq(16) as cq_a, ctx.create_cq(16) as cq_b:
            a = pd.create_qp(ib.QPInitAttr(cq_a, cq_a))
            b = pd.create_qp(ib.QPInitAttr(cq_b, cq_b, srq=srq))
            assert b.srq is srq
            try:
                info = lambda q, psn: ib.local_qp_info(q, ctx.query_port(port),
                                                       ctx.query_gid(port, gid_index), port=port, psn=psn)
                ib.connect_rc(a, info(b, 0), port=port, sgid_index=gid_index, access=access)
                ib.connect_rc(b, info(a, 0), port=port, sgid_index=gid_index, access=access)
                dsts = [make_buffer(32) for _ in range(3)]
                srq.post_recv([ib.RecvWR(wr_id=10 + i, sg_list=[d.mr.sge()]) for i, d in enumerate(dsts)])
                src = make_buffer(32, fill=0x21)
                for _ in range(3):
                    a.post_send(ib.SendWR(sg_list=[src.mr.sge()], opcode=ib.WROpcode.SEND,
                                          send_flags=ib.SendFlags.SIGNALED))
                poll_until(cq_a, 3)
                rwcs = poll_until(cq_b, 3)
                assert sorted(w.wr_id for w in rwcs) == [10, 11, 12]
                assert all(bytes(d.array) == b"\x21" * 32 for d in dsts)
            finally:
                a.close()
                b.close()


def test_post_srq_ops_without_tag_matching_is_a_clean_error(ib, pd):
    import errno
    with pd.create_srq() as srq:
        with pytest.raises(ib.VerbsError) as exc:
            srq.post_srq_ops(opcode=0, wr_id=1, tag=5)   # IBV_WR_TAG_ADD
        assert exc.value.errno == errno.EOPNOTSUPP
        with pytest.raises(ValueError):
            srq.post_srq_ops(opcode=0, tag=2**64)


def test_a_ud_request_with_an_ah_of_another_pd_or_context_is_refused_by_every_post(
        ib, ctx, ctx2, pd, port, gid_index, gid_index2, make_buffer):
    """The provider would read another PD's (or device's) address vector:
    every post path refuses it before the call, as QPEx.wr_set_ud_addr does."""
    src = make_buffer(64, fill=0x42)
    with ctx.create_cq(16) as cq, ctx.alloc_pd() as pd_other, ctx2.alloc_pd() as pd2:
        qp = ud_qp(ib, pd, cq, port)
        attr = ib.AHAttr(dgid=ctx.query_gid(port, gid_index), sgid_index=gid_index,
                         port_num=port, is_global=1, hop_limit=64)
        attr2 = ib.AHAttr(dgid=ctx2.query_gid(port, gid_index2), sgid_index=gid_index2,
                          port_num=port, is_global=1, hop_limit=64)
        try:
            with pd.create_ah(attr) as own, pd_other.create_ah(attr) as other_pd, \
                    pd2.create_ah(attr2) as other_ctx:
                def wr(ah):
                    return ib.SendWR(wr_id=2, sg_list=[src.mr.sge()], opcode=ib.WROpcode.SEND,
                                     send_flags=ib.SendFlags.SIGNALED, ah=ah,
                                     remote_qpn=qp.qp_num, remote_qkey=QKEY)
                for ah, mismatch in ((other_pd, "another PD"), (other_ctx, "another context")):
                    for post in (lambda: qp.post_send(wr(ah)),
                                 lambda: qp.post_send([wr(own), wr(ah)]),
                                 lambda: qp.post_send(ib.PostList([wr(own), wr(ah)]))):
                        with pytest.raises(ValueError, match=mismatch):
                            post()
                assert cq.poll(16) == []       # nothing reached the provider
                qp.post_send(wr(own))          # its own PD's AH still goes
                poll_until(cq, 1)[0].raise_for_status()
        finally:
            qp.close()
