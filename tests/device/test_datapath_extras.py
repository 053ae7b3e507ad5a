"""The hot-loop data path API: PostList (prebuilt work requests, updated in
place) and WCBuffer / CQ.poll_into (completions without objects), plus the
behaviour the faster post_send/post_recv/poll must keep."""
import gc
import sys
import threading
import time
import types

import pytest

from conftest import RCPair, poll_until

GRH = 40
QKEY = 0x11111111


def poll_into_until(cq, buf, n=1, timeout=10.0):
    """Poll into buf until n completions came; returns them as WC copies."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        k = cq.poll_into(buf)
        assert k == len(buf)
        got += list(buf)
        if len(got) < n and time.monotonic() > deadline:
            raise AssertionError(f"only {len(got)} of {n} completions within {timeout}s")
    return got


def write_wr(ib, src, dst, wr_id=1, signaled=True, length=None, offset=0):
    """RDMA_WRITE of src[offset:offset+length] to the same offset of dst."""
    return ib.SendWR(wr_id=wr_id, sg_list=[src.mr.sge(length, offset)],
                     opcode=ib.WROpcode.RDMA_WRITE,
                     send_flags=ib.SendFlags.SIGNALED if signaled else 0,
                     remote_addr=dst.addr + offset, rkey=dst.mr.rkey)


# ---- PostList ------------------------------------------------------------------

def test_postlist_posts_the_same_chain_many_times(ib, rc_pair, make_buffer):
    src = make_buffer(64, fill=0x3C)
    dst = make_buffer(64)
    plist = ib.PostList([write_wr(ib, src, dst, wr_id=i, signaled=(i == 3)) for i in range(4)])
    assert len(plist) == 4 and plist.kind is ib.SendWR and not plist.release_gil
    for round_ in range(5):
        dst.array[:] = 0
        rc_pair.qp_a.post_send(plist)
        (wc,) = poll_until(rc_pair.cq_a, 1)
        wc.raise_for_status()
        assert wc.wr_id == 3
        assert bytes(dst.array) == b"\x3c" * 64


def test_postlist_entries_update_the_converted_requests(ib, rc_pair, make_buffer):
    src = make_buffer(4096)
    src.array[:] = [i % 256 for i in range(4096)]
    dst = make_buffer(4096)
    plist = ib.PostList(write_wr(ib, src, dst, wr_id=1, length=8))
    entry = plist[0]
    assert (entry.wr_id, entry.length, entry.addr, entry.num_sge) == (1, 8, src.addr, 1)
    assert entry.opcode == ib.WROpcode.RDMA_WRITE and entry.rkey == dst.mr.rkey
    for k in range(1, 4):
        entry.wr_id = 100 + k
        entry.addr = src.addr + 256 * k
        entry.length = 16 * k
        entry.remote_addr = dst.addr + 1024 * k
        rc_pair.qp_a.post_send(plist)
        (wc,) = poll_until(rc_pair.cq_a, 1)
        wc.raise_for_status()
        assert wc.wr_id == 100 + k
        got = bytes(dst.array[1024 * k:1024 * k + 16 * k])
        assert got == bytes(src.array[256 * k:256 * k + 16 * k])
        assert dst.array[1024 * k + 16 * k] == 0
    assert plist[-1].wr_id == 103 and plist[0].index == 0 and plist[0].list is plist


def test_postlist_entry_replaced_whole(ib, rc_pair, make_buffer):
    src, dst = make_buffer(64, fill=0x11), make_buffer(64)
    plist = ib.PostList([write_wr(ib, src, dst, wr_id=1, length=8)])
    plist[0] = ib.SendWR(wr_id=9, sg_list=[src.mr.sge(32, 8)], opcode=ib.WROpcode.RDMA_WRITE,
                         send_flags=ib.SendFlags.SIGNALED, remote_addr=dst.addr + 32,
                         rkey=dst.mr.rkey)
    rc_pair.qp_a.post_send(plist)
    (wc,) = poll_until(rc_pair.cq_a, 1)
    assert wc.is_success and wc.wr_id == 9
    assert bytes(dst.array) == b"\0" * 32 + b"\x11" * 32
    with pytest.raises(ValueError, match="room for 1"):
        plist[0] = ib.SendWR(sg_list=[src.mr.sge(8), src.mr.sge(8)])
    with pytest.raises(TypeError):
        plist[0] = ib.RecvWR()
    with pytest.raises(TypeError):
        del plist[0]
    with pytest.raises(IndexError):
        plist[1]
    assert plist[0].wr_id == 9   # failed updates changed nothing


def test_postlist_keeps_its_memory_regions_alive(ib, pd, rc_pair, access):
    import numpy as np
    src_arr, dst_arr = np.full(64, 5, dtype=np.uint8), np.zeros(64, dtype=np.uint8)
    src_mr = ib.reg_tensor(pd, src_arr, access)
    dst_mr = ib.reg_tensor(pd, dst_arr, access)
    plist = ib.PostList(ib.SendWR(wr_id=4, sg_list=[src_mr.sge()], opcode=ib.WROpcode.RDMA_WRITE,
                                  send_flags=ib.SendFlags.SIGNALED, remote_addr=dst_mr.addr,
                                  rkey=dst_mr.rkey))
    rkey = dst_mr.rkey
    del src_mr
    gc.collect()
    rc_pair.qp_a.post_send(plist)
    (wc,) = poll_until(rc_pair.cq_a, 1)
    assert wc.is_success and (dst_arr == 5).all() and plist[0].rkey == rkey
    del plist
    gc.collect()
    dst_mr.close()


def test_postlist_of_receives_on_a_qp_and_an_srq(ib, ctx, pd, rc_pair, make_buffer, port,
                                                 gid_index, access):
    src = make_buffer(32, fill=0x66)
    dst = make_buffer(4096)
    recvs = ib.PostList([ib.RecvWR(wr_id=10 + i, sg_list=[dst.mr.sge(32, 64 * i)])
                         for i in range(3)])
    assert recvs.kind is ib.RecvWR
    rc_pair.qp_b.post_recv(recvs)
    send = ib.PostList(ib.SendWR(wr_id=1, sg_list=[src.mr.sge()], opcode=ib.WROpcode.SEND,
                                 send_flags=ib.SendFlags.SIGNALED))
    for _ in range(3):
        rc_pair.qp_a.post_send(send)
    assert [wc.wr_id for wc in poll_until(rc_pair.cq_a, 3)] == [1, 1, 1]
    got = poll_until(rc_pair.cq_b, 3)
    assert [wc.wr_id for wc in got] == [10, 11, 12]
    assert all(wc.opcode == ib.WCOpcode.RECV and wc.byte_len == 32 for wc in got)
    for i in range(3):
        assert bytes(dst.array[64 * i:64 * i + 32]) == b"\x66" * 32
    with pytest.raises(TypeError, match="PostList of SendWR"):
        rc_pair.qp_a.post_send(recvs)
    with pytest.raises(TypeError, match="PostList of RecvWR"):
        rc_pair.qp_b.post_recv(send)

    with pd.create_srq(max_wr=16, max_sge=1) as srq, ctx.create_cq(16) as cq_a, \
            ctx.create_cq(16) as cq_b:
        a = pd.create_qp(ib.QPInitAttr(cq_a, cq_a))
        b = pd.create_qp(ib.QPInitAttr(cq_b, cq_b, srq=srq))
        try:
            info = lambda q, psn: ib.local_qp_info(q, ctx.query_port(port),
                                                   ctx.query_gid(port, gid_index), port=port,
                                                   psn=psn)
            ib.connect_rc(a, info(b, 2), port=port, sgid_index=gid_index, access=access,
                          local_psn=1)
            ib.connect_rc(b, info(a, 1), port=port, sgid_index=gid_index, access=access,
                          local_psn=2)
            dst.array[:] = 0
            srq_recvs = ib.PostList([ib.RecvWR(wr_id=20, sg_list=[dst.mr.sge(32)])])
            srq.post_recv(srq_recvs)
            a.post_send(send)
            poll_until(cq_a, 1)[0].raise_for_status()
            (rwc,) = poll_until(cq_b, 1)
            assert rwc.is_success and rwc.wr_id == 20 and bytes(dst.array[:32]) == b"\x66" * 32
        finally:
            a.close()
            b.close()


def test_postlist_ud_checks_its_address_handle_at_each_post(ib, ctx, pd, port, gid_index,
                                                            make_buffer):
    with ctx.create_cq(16) as cq_a, ctx.create_cq(16) as cq_b:
        qps = []
        for cq in (cq_a, cq_b):
            qp = pd.create_qp(ib.QPInitAttr(cq, cq, qp_type=ib.QPType.UD))
            qp.to_init(port, qkey=QKEY)
            qp.to_rtr(None, 0)
            qp.to_rts(0)
            qps.append(qp)
        a, b = qps
        try:
            dst = make_buffer(GRH + 64)
            src = make_buffer(64, fill=0x42)
            b.post_recv(ib.PostList(ib.RecvWR(wr_id=1, sg_list=[dst.mr.sge()])))
            ah = pd.create_ah(ib.AHAttr(dgid=ctx.query_gid(port, gid_index),
                                        sgid_index=gid_index, port_num=port, is_global=1,
                                        hop_limit=64))
            plist = ib.PostList(ib.SendWR(wr_id=2, sg_list=[src.mr.sge()],
                                          opcode=ib.WROpcode.SEND,
                                          send_flags=ib.SendFlags.SIGNALED, ah=ah,
                                          remote_qpn=0, remote_qkey=QKEY))
            entry = plist[0]
            entry.remote_qpn = b.qp_num
            assert entry.remote_qpn == b.qp_num and entry.remote_qkey == QKEY
            with pytest.raises(AttributeError):
                entry.remote_addr = 5
            a.post_send(plist)
            poll_until(cq_a, 1)[0].raise_for_status()
            (rwc,) = poll_until(cq_b, 1)
            assert rwc.is_success and rwc.src_qp == a.qp_num
            assert bytes(dst.array[GRH:]) == b"\x42" * 64
            ah.close()
            with pytest.raises(ib.VerbsError) as exc:
                a.post_send(plist)
            assert exc.value.errno == 9   # EBADF
        finally:
            a.close()
            b.close()


def test_postlist_with_the_gil_released(ib, rc_pair, make_buffer):
    """A PostList with release_gil=True lets another thread run during the post.  With a
    switch interval far longer than the test, a GIL build hands the GIL over only when a
    thread gives it up: the polls here keep it, so the other thread runs only inside the
    posts.  The free-threaded build has no GIL: there the other thread just runs."""
    src, dst = make_buffer(64, fill=0x21), make_buffer(64)
    plist = ib.PostList([write_wr(ib, src, dst, wr_id=7)], release_gil=True)
    assert plist.release_gil
    ticks = []
    running, stop = threading.Event(), threading.Event()

    def other():
        running.set()
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0)

    t = threading.Thread(target=other)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    t.start()
    try:
        assert running.wait(10)
        before, posts = len(ticks), 0
        # A released GIL may be taken back before the other thread wakes: post until it
        # ran once (20 posts at least), for up to 10 s.
        deadline = time.monotonic() + 10
        while posts < 20 or (len(ticks) == before and time.monotonic() < deadline):
            rc_pair.qp_a.post_send(plist)
            (wc,) = poll_until(rc_pair.cq_a, 1)
            assert wc.is_success and wc.wr_id == 7
            posts += 1
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(interval)
    assert bytes(dst.array) == b"\x21" * 64
    assert len(ticks) > before, f"the other thread never ran during {posts} posts"
    plist.release_gil = False
    assert "release_gil" not in repr(plist)


def test_postlist_rejects_bad_input(ib, make_buffer):
    with pytest.raises(ValueError):
        ib.PostList([])
    with pytest.raises(TypeError):
        ib.PostList([ib.SendWR(), ib.RecvWR()])
    with pytest.raises(TypeError):
        ib.PostList(5)
    with pytest.raises(TypeError):
        ib.PostListEntry()
    recv = ib.PostList(ib.RecvWR(wr_id=1))
    with pytest.raises(AttributeError):
        recv[0].rkey
    with pytest.raises(AttributeError):
        recv[0].addr         # no SGE
    with pytest.raises(ValueError):
        recv[0].wr_id = -1


def test_posting_to_a_closed_qp_fails_cleanly(ib, pd, cq, make_buffer):
    qp = pd.create_qp(ib.QPInitAttr(cq, cq))
    plist = ib.PostList(ib.SendWR(wr_id=1))
    qp.close()
    with pytest.raises(ib.VerbsError) as exc:
        qp.post_send(plist)
    assert exc.value.errno == 9


def test_a_test_double_in_sg_list_is_refused_at_post_and_posts_nothing(ib, rc_pair, make_buffer):
    """As the seed: a request stores any sg_list items (a client's unit test
    builds RecvWR(sg_list=[fake_mr.sge(...)])), and a post refuses one that
    is no SGE, with TypeError, before the provider sees the chain."""
    src = make_buffer(64, fill=0x5A)
    dst = make_buffer(64)
    fake = types.SimpleNamespace(addr=dst.addr, length=64, lkey=dst.mr.lkey)
    refs = sys.getrefcount(fake), sys.getrefcount(dst.mr)
    recv = ib.RecvWR(wr_id=1, sg_list=[fake])
    send = ib.SendWR(wr_id=2, sg_list=[src.mr.sge(64), fake], opcode=ib.WROpcode.SEND,
                     send_flags=ib.SendFlags.SIGNALED)
    for post, wr, index in ((rc_pair.qp_b.post_recv, recv, 0), (rc_pair.qp_a.post_send, send, 1)):
        for arg in (wr, [wr], (wr,)):
            with pytest.raises(TypeError, match=rf"^sg_list\[{index}\] must be an SGE, "
                                                r"not SimpleNamespace$"):
                post(arg)
    with pytest.raises(TypeError, match=r"must be an SGE, not SimpleNamespace"):
        ib.PostList([recv])
    assert rc_pair.cq_a.poll(4) == [] and rc_pair.cq_b.poll(4) == []
    # the same requests, their items SGEs now: the receive the provider
    # gets is the one posted now (nothing of the refused posts queued)
    recv.sg_list[0] = dst.mr.sge(64)
    recv.wr_id = 3
    rc_pair.qp_b.post_recv(recv)
    send.sg_list = [src.mr.sge(64)]
    rc_pair.qp_a.post_send(send)
    (sent,) = poll_until(rc_pair.cq_a, 1)
    (got,) = poll_until(rc_pair.cq_b, 1)
    sent.raise_for_status()
    got.raise_for_status()
    assert (sent.wr_id, got.wr_id, got.byte_len) == (2, 3, 64)
    assert bytes(dst.array) == b"\x5a" * 64
    del recv, send
    assert (sys.getrefcount(fake), sys.getrefcount(dst.mr)) == refs


# ---- WCBuffer / poll_into -------------------------------------------------------

def test_poll_into_fills_the_buffer(ib, rc_pair, make_buffer):
    src, dst = make_buffer(256, fill=0x5A), make_buffer(256)
    buf = ib.WCBuffer(4)
    assert buf.capacity == 4 and len(buf) == 0 and list(buf) == []
    assert rc_pair.cq_a.poll_into(buf) == 0
    rc_pair.qp_a.post_send([write_wr(ib, src, dst, wr_id=100 + i, length=32, offset=32 * i)
                            for i in range(6)])
    got = poll_into_until(rc_pair.cq_a, buf, 6)
    assert [wc.wr_id for wc in got] == list(range(100, 106))
    assert all(isinstance(wc, ib.WC) and wc.is_success for wc in got)
    assert bytes(dst.array[:192]) == b"\x5a" * 192


def test_wcbuffer_accessors_read_the_entries(ib, rc_pair, make_buffer):
    src, dst = make_buffer(64, fill=1), make_buffer(64)
    rc_pair.qp_b.post_recv(ib.RecvWR(wr_id=77, sg_list=[dst.mr.sge()]))
    rc_pair.qp_a.post_send(ib.SendWR(wr_id=5, sg_list=[src.mr.sge(48)],
                                     opcode=ib.WROpcode.SEND_WITH_IMM, imm_data=0xABCD0123,
                                     send_flags=ib.SendFlags.SIGNALED))
    poll_until(rc_pair.cq_a, 1)[0].raise_for_status()
    buf = ib.WCBuffer(8, raise_on_error=True)
    deadline = time.monotonic() + 10
    while not rc_pair.cq_b.poll_into(buf):
        assert time.monotonic() < deadline
    assert len(buf) == 1
    assert buf.wr_id(0) == 77 and buf.wr_id(-1) == 77 and buf.status(0) == ib.WCStatus.SUCCESS
    assert buf.opcode(0) == ib.WCOpcode.RECV and buf.byte_len(0) == 48
    assert buf.imm_data(0) == 0xABCD0123 and buf.wc_flags(0) & ib.WCFlags.WITH_IMM
    assert buf.qp_num(0) == rc_pair.qp_b.qp_num and buf.vendor_err(0) == 0
    assert buf.src_qp(0) == buf[0].src_qp
    assert buf.count_opcode(ib.WCOpcode.RECV) == 1 and buf.count_opcode(ib.WCOpcode.SEND) == 0
    assert buf.wr_ids() == [77]
    buf.raise_for_status()
    wc = buf[0]
    assert (wc.wr_id, wc.byte_len, wc.imm_data) == (77, 48, 0xABCD0123)
    with pytest.raises(IndexError):
        buf.wr_id(1)
    with pytest.raises(IndexError):
        buf[1]
    buf.clear()
    assert len(buf) == 0 and "0 valid" in repr(buf)


def test_wcbuffer_reports_failed_completions(ib, rc_pair, make_buffer):
    src, dst = make_buffer(64), make_buffer(64)
    bad = ib.SendWR(wr_id=5, sg_list=[src.mr.sge()], opcode=ib.WROpcode.RDMA_WRITE,
                    send_flags=ib.SendFlags.SIGNALED, remote_addr=dst.addr,
                    rkey=dst.mr.rkey ^ 0xFF00)
    rc_pair.qp_a.post_send(bad)
    buf = ib.WCBuffer(4, raise_on_error=True)
    deadline = time.monotonic() + 10
    with pytest.raises(ib.CompletionError) as exc:
        while not rc_pair.cq_a.poll_into(buf):
            assert time.monotonic() < deadline
    assert exc.value.status == ib.WCStatus.REM_ACCESS_ERR and exc.value.wc.wr_id == 5
    assert len(buf) == 1 and buf.status(0) == ib.WCStatus.REM_ACCESS_ERR
    with pytest.raises(ib.CompletionError):
        buf.raise_for_status()
    buf.raise_on_error = False
    assert not buf.raise_on_error


def test_wcbuffer_input_checks(ib, cq):
    with pytest.raises(ValueError):
        ib.WCBuffer(0)
    with pytest.raises(ValueError):
        ib.WCBuffer(-1)
    with pytest.raises(TypeError):
        cq.poll_into(16)
    buf = ib.WCBuffer()
    assert buf.capacity == 16
    cq.close()
    with pytest.raises(ib.VerbsError) as exc:
        cq.poll_into(buf)
    assert exc.value.errno == 9


def test_poll_into_takes_a_wcbuffer_subclass(ib, rc_pair, make_buffer):
    """23.12: poll_into refused WCBuffer subclasses (an exact type check),
    though WCBuffer can be subclassed."""
    class Tagged(ib.WCBuffer):
        tag = "mine"

    src, dst = make_buffer(64, fill=0x5A), make_buffer(64)
    buf = Tagged(4, raise_on_error=True)
    rc_pair.qp_a.post_send(write_wr(ib, src, dst, wr_id=41))
    (wc,) = poll_into_until(rc_pair.cq_a, buf, 1)
    assert wc.wr_id == 41 and wc.is_success and buf.tag == "mine"
    assert bytes(dst.array) == b"\x5a" * 64
    with pytest.raises(TypeError, match="poll_into needs a WCBuffer, not list"):
        rc_pair.cq_a.poll_into([])


def test_sequences_that_lie_post_what_they_iterate(ib, rc_pair, make_buffer):
    """23.1: what a list or tuple subclass's __iter__ gives is what is
    posted or built, whatever its storage and __len__ say; a PostList of
    nothing is refused (it posted 128 bytes read from a 16-byte block)."""
    src, dst = make_buffer(64, fill=0x21), make_buffer(64)
    given = []

    class Lies(list):
        def __iter__(self):
            return iter(given)

        def __len__(self):
            return 1000

    stored = [write_wr(ib, src, dst, wr_id=900 + i) for i in range(3)]
    with pytest.raises(ValueError, match="at least one work request"):
        ib.PostList(Lies(stored))
    rc_pair.qp_a.post_send(Lies(stored))                # nothing to post
    assert rc_pair.cq_a.poll(16) == []
    given[:] = [write_wr(ib, src, dst, wr_id=i, signaled=True) for i in (1, 2)]
    plist = ib.PostList(Lies(stored))
    assert [e.wr_id for e in plist] == [1, 2]
    for post in (plist, Lies(stored)):
        dst.array[:] = 0
        rc_pair.qp_a.post_send(post)
        assert sorted(wc.wr_id for wc in poll_until(rc_pair.cq_a, 2)) == [1, 2]
        assert bytes(dst.array) == b"\x21" * 64
    assert rc_pair.cq_a.poll(16) == []


# ---- what the faster paths must keep ------------------------------------------------

def test_post_send_takes_a_tuple_and_list_subclasses(ib, rc_pair, make_buffer):
    src, dst = make_buffer(64, fill=0x44), make_buffer(64)

    class WRList(list):
        def __iter__(self):        # seen by the snapshot post_send takes
            return iter(list.__iter__(self))

    for wrs in ((write_wr(ib, src, dst, wr_id=1),), WRList([write_wr(ib, src, dst, wr_id=2)])):
        rc_pair.qp_a.post_send(wrs)
        (wc,) = poll_until(rc_pair.cq_a, 1)
        assert wc.is_success
    rc_pair.qp_a.post_send([])          # nothing to post (the seed's behaviour)
    assert rc_pair.cq_a.poll(4) == []
    with pytest.raises(TypeError, match="item 1 must be a SendWR"):
        rc_pair.qp_a.post_send([write_wr(ib, src, dst), 5])
    with pytest.raises(TypeError, match="expected a SendWR"):
        rc_pair.qp_a.post_send(5)


def test_poll_results_survive_reuse_of_completion_objects(ib, rc_pair, make_buffer):
    src, dst = make_buffer(64, fill=1), make_buffer(64)
    kept = []
    for round_ in range(20):
        rc_pair.qp_a.post_send([write_wr(ib, src, dst, wr_id=1000 * round_ + i)
                                for i in range(8)])
        got = poll_until(rc_pair.cq_a, 8)
        kept.append(got[round_ % 8])
        del got                  # the others go back to the free list
    assert [wc.wr_id for wc in kept] == [1000 * r + r % 8 for r in range(20)]
    assert all(wc.is_success for wc in kept)


def test_poll_accepts_index_objects_and_checks_its_argument(ib, rc_pair):
    import numpy as np
    assert rc_pair.cq_a.poll(np.int64(4)) == []
    with pytest.raises(ValueError):
        rc_pair.cq_a.poll(0)
    with pytest.raises(ValueError):
        rc_pair.cq_a.poll(2**31)
    with pytest.raises(ValueError):
        rc_pair.cq_a.poll(2**70)
    with pytest.raises(TypeError):
        rc_pair.cq_a.poll("4")
    assert rc_pair.cq_a.poll(100) == []       # more than fit on the stack


def test_empty_polls_give_independent_lists(ib, cq):
    held = [cq.poll(4) for _ in range(5)]       # all alive at once: all distinct
    assert held == [[]] * 5 and len({id(x) for x in held}) == 5
    first = cq.poll(4)
    first.append("mine")
    again = cq.poll(4)
    assert again == [] and again is not first and first == ["mine"]
    wcs = None
    for _ in range(4):                           # the previous result held meanwhile
        previous, wcs = wcs, cq.poll(4)
        assert wcs == [] and wcs is not previous
        wcs.extend([1, 2])                       # the caller owns what it got
        assert cq.poll(4) == []


def test_a_sendwr_changed_between_posts_posts_its_new_fields(ib, ctx, pd, port, gid_index,
                                                             access, rc_pair, make_buffer):
    """post_send keeps each SendWR's converted request between posts; every
    change made through an attribute must reach the next post."""
    src = make_buffer(64)
    src.array[:] = list(range(64))
    dst, other = make_buffer(4096), make_buffer(4096)
    recv_buf = make_buffer(64)
    wr = ib.SendWR(wr_id=1, sg_list=[src.mr.sge(8)], opcode=ib.WROpcode.RDMA_WRITE,
                   send_flags=ib.SendFlags.SIGNALED, remote_addr=dst.addr, rkey=dst.mr.rkey)

    def post(wrs):
        rc_pair.qp_a.post_send(wrs)
        (wc,) = poll_until(rc_pair.cq_a, 1)
        return wc

    assert post(wr).is_success and bytes(dst.array[:8]) == bytes(range(8))
    wr.remote_addr = dst.addr + 512                       # new address, same MR
    wr.wr_id = 2
    wc = post([wr])
    assert wc.is_success and wc.wr_id == 2
    assert bytes(dst.array[512:520]) == bytes(range(8))
    wr.remote_addr, wr.rkey = other.addr + 8, other.mr.rkey     # another MR
    assert post(wr).is_success and bytes(other.array[8:16]) == bytes(range(8))
    wr.sg_list[0] = src.mr.sge(4, 32)                     # the list's items, read at each post
    assert post(wr).is_success and bytes(other.array[8:16]) == bytes(range(32, 36)) + bytes(range(4, 8))
    wr.sg_list.append(src.mr.sge(4, 60))
    assert post(wr).is_success and bytes(other.array[8:16]) == bytes(range(32, 36)) + bytes(range(60, 64))

    # the opcode and immediate data: a write with immediate consumes a receive
    rc_pair.qp_b.post_recv([ib.RecvWR(wr_id=7, sg_list=[recv_buf.mr.sge()])])
    wr.opcode, wr.imm_data = ib.WROpcode.RDMA_WRITE_WITH_IMM, 0x12345678
    assert post(wr).is_success
    (rwc,) = poll_until(rc_pair.cq_b, 1)
    assert rwc.wr_id == 7 and rwc.opcode == ib.WCOpcode.RECV_RDMA_WITH_IMM
    assert rwc.imm_data == 0x12345678
    wr.opcode = ib.WROpcode.RDMA_WRITE

    # send_flags: unsignaled gives no completion, signaled again does
    wr.send_flags = 0
    rc_pair.qp_a.post_send(wr)
    wr.send_flags, wr.wr_id = ib.SendFlags.SIGNALED, 3
    wc = post(wr)
    assert wc.wr_id == 3 and wc.is_success and rc_pair.cq_a.poll(4) == []

    # a wrong rkey set after good posts fails on the wire (it was not kept)
    wr.rkey = other.mr.rkey ^ 0x5a5a00
    wc = post(wr)
    assert wc.status == ib.WCStatus.REM_ACCESS_ERR

    # an AH added afterwards is refused on RC as it would be at first, and
    # taking it away again makes the request an RDMA write once more
    with pd.create_ah(ib.AHAttr(dgid=ctx.query_gid(port, gid_index), sgid_index=gid_index,
                                port_num=port, is_global=1, hop_limit=64)) as ah:
        wr.ah = ah
        with pytest.raises(ValueError, match="only a UD QP takes one"):
            rc_pair.qp_a.post_send(wr)
        wr.ah = None
    pair = RCPair(ib, pd, pd, port, gid_index, gid_index, access)   # rc_pair's QP failed
    try:
        other.array[:16] = 0
        wr.rkey = other.mr.rkey
        pair.qp_a.post_send(wr)
        (wc,) = poll_until(pair.cq_a, 1)
        assert wc.is_success and bytes(other.array[8:16]) == bytes(range(32, 36)) + bytes(range(60, 64))
    finally:
        pair.close()
