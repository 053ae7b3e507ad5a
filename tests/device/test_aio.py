"""asyncio: awaitable completions and asynchronous events (ibverbs.aio)."""
import asyncio
import os
import select

import pytest

from conftest import poll_until

TIMEOUT = 20


class ChannelPair:
    """RC loopback on one device whose CQs report to completion channels:
    qp_a sends (send CQ cq_a), qp_b receives (CQ cq_b).  With shared=True
    both CQs are on one channel."""

    def __init__(self, ib, ctx, pd, port, gid_index, access, shared=False):
        self.channels = [ctx.create_comp_channel()]
        if not shared:
            self.channels.append(ctx.create_comp_channel())
        self.cq_a = ctx.create_cq(64, channel=self.channels[0])
        self.cq_b = ctx.create_cq(64, channel=self.channels[-1])
        self.qp_a = pd.create_qp(ib.QPInitAttr(self.cq_a, self.cq_a))
        self.qp_b = pd.create_qp(ib.QPInitAttr(self.cq_b, self.cq_b))
        info = lambda q: ib.local_qp_info(q, ctx.query_port(port), ctx.query_gid(port, gid_index),
                                          port=port)
        ib.connect_rc(self.qp_a, info(self.qp_b), port=port, sgid_index=gid_index, access=access)
        ib.connect_rc(self.qp_b, info(self.qp_a), port=port, sgid_index=gid_index, access=access)

    def close(self):
        for obj in (self.qp_a, self.qp_b, self.cq_a, self.cq_b, *self.channels):
            obj.close()


@pytest.fixture
def chpair(ib, ctx, pd, port, gid_index, access):
    p = ChannelPair(ib, ctx, pd, port, gid_index, access)
    yield p
    p.close()


@pytest.fixture
def shared_pair(ib, ctx, pd, port, gid_index, access):
    p = ChannelPair(ib, ctx, pd, port, gid_index, access, shared=True)
    yield p
    p.close()


def send(ib, qp, buf, wr_id=1, length=None):
    qp.post_send(ib.SendWR(wr_id=wr_id, sg_list=[buf.mr.sge(length)], opcode=ib.WROpcode.SEND,
                           send_flags=ib.SendFlags.SIGNALED))


def test_wait_returns_a_receive_that_arrives_while_it_awaits(ib, chpair, make_buffer):
    src, dst = make_buffer(64, fill=0x42), make_buffer(64)
    chpair.qp_b.post_recv(ib.RecvWR(wr_id=77, sg_list=[dst.mr.sge()]))

    async def main():
        waiter = asyncio.ensure_future(chpair.cq_b.async_wait())
        for _ in range(20):                 # give it every chance to finish early
            await asyncio.sleep(0.005)
        assert not waiter.done(), "wait() returned before anything was sent"
        send(ib, chpair.qp_a, src)
        return await asyncio.wait_for(waiter, TIMEOUT)

    wcs = asyncio.run(main())
    assert [wc.wr_id for wc in wcs] == [77]
    assert wcs[0].opcode == ib.WCOpcode.RECV and wcs[0].byte_len == 64 and wcs[0].is_success
    assert (dst.array == 0x42).all()
    poll_until(chpair.cq_a, 1)
    # the channel fd became non-blocking; the reader is gone
    assert not os.get_blocking(chpair.channels[-1].fd)
    from ibverbs import aio
    assert not aio._channels
    with pytest.raises(ValueError, match="more CQ events"):
        chpair.cq_b.ack_events(1)           # the event was read and acknowledged


def test_async_for_yields_every_completion_in_order(ib, chpair, make_buffer):
    n = 6
    src, dst = make_buffer(64, fill=1), make_buffer(64 * n)
    chpair.qp_b.post_recv([ib.RecvWR(wr_id=i, sg_list=[dst.mr.sge(64, 64 * i)]) for i in range(n)])

    async def receive():
        got = []
        async for wc in chpair.cq_b.completions():
            got.append(wc)
            if len(got) == n:
                return got

    async def main():
        receiver = asyncio.ensure_future(receive())
        for i in range(n):                   # one at a time, each after a pause
            await asyncio.sleep(0.01)
            send(ib, chpair.qp_a, src, wr_id=i)
        return await asyncio.wait_for(receiver, TIMEOUT)

    got = asyncio.run(main())
    assert [wc.wr_id for wc in got] == list(range(n))
    assert all(wc.is_success and wc.byte_len == 64 for wc in got)
    assert (dst.array == 1).all()
    poll_until(chpair.cq_a, n)


def test_two_cqs_on_one_channel_each_get_their_own_completions(ib, shared_pair, make_buffer):
    p = shared_pair
    assert p.cq_a.channel is p.cq_b.channel
    src, dst = make_buffer(32, fill=9), make_buffer(32)
    p.qp_b.post_recv(ib.RecvWR(wr_id=2, sg_list=[dst.mr.sge()]))

    async def main():
        both = asyncio.gather(p.cq_a.async_wait(), p.cq_b.async_wait())
        await asyncio.sleep(0.02)
        send(ib, p.qp_a, src, wr_id=1)
        return await asyncio.wait_for(both, TIMEOUT)

    sent, received = asyncio.run(main())
    assert [(wc.wr_id, wc.opcode) for wc in sent] == [(1, ib.WCOpcode.SEND)]
    assert [(wc.wr_id, wc.opcode) for wc in received] == [(2, ib.WCOpcode.RECV)]
    assert (dst.array == 9).all()


def test_cancelled_wait_leaves_nothing_unacked(ib, chpair, make_buffer):
    src, dst = make_buffer(16, fill=3), make_buffer(16)
    chpair.qp_b.post_recv([ib.RecvWR(wr_id=i, sg_list=[dst.mr.sge()]) for i in range(2)])
    from ibverbs import aio

    async def main():
        # 1. cancelled while nothing arrived: the reader goes away
        waiter = asyncio.ensure_future(chpair.cq_b.async_wait())
        await asyncio.sleep(0.02)
        assert aio._channels
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert not aio._channels
        # 2. the event is in the channel, the waiter is cancelled before
        #    the loop reads it
        waiter = asyncio.ensure_future(chpair.cq_b.async_wait())
        await asyncio.sleep(0.02)
        send(ib, chpair.qp_a, src, wr_id=1)
        fd = chpair.channels[-1].fd
        assert select.select([fd], [], [], TIMEOUT)[0] == [fd]
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert not aio._channels
        # 3. the completion is still there for the next wait
        first = await asyncio.wait_for(chpair.cq_b.async_wait(), TIMEOUT)
        # 4. the next wait reads (and acks) the stale event, finds nothing,
        #    re-arms and gets the next receive
        waiter = asyncio.ensure_future(chpair.cq_b.async_wait())
        await asyncio.sleep(0.02)
        assert not waiter.done()
        assert select.select([fd], [], [], 0)[0] == []     # the stale event was consumed
        send(ib, chpair.qp_a, src, wr_id=2)
        return first + await asyncio.wait_for(waiter, TIMEOUT)

    wcs = asyncio.run(main())
    assert [wc.wr_id for wc in wcs] == [0, 1] and all(wc.is_success for wc in wcs)
    with pytest.raises(ValueError, match="more CQ events"):
        chpair.cq_b.ack_events(1)           # every event read was acknowledged
    poll_until(chpair.cq_a, 2)
    # an event nobody reads: closing the CQ does not wait for it
    chpair.qp_b.post_recv(ib.RecvWR(wr_id=3, sg_list=[dst.mr.sge()]))
    chpair.cq_b.req_notify()
    send(ib, chpair.qp_a, src, wr_id=3)
    poll_until(chpair.cq_a, 1)


def test_wait_needs_a_channel_and_a_positive_count(ib, cq, chpair):
    with pytest.raises(ValueError, match="completion channel"):
        asyncio.run(cq.async_wait())
    with pytest.raises(ValueError, match="positive"):
        asyncio.run(chpair.cq_b.async_wait(0))


def test_srq_limit_reached_arrives_through_the_async_api(ib, ctx, pd, port, gid_index, access,
                                                        make_buffer):
    with pd.create_srq(max_wr=16) as srq, ctx.create_cq(16) as cq_a, ctx.create_cq(16) as cq_b:
        a = pd.create_qp(ib.QPInitAttr(cq_a, cq_a))
        b = pd.create_qp(ib.QPInitAttr(cq_b, cq_b, srq=srq))
        try:
            info = lambda q: ib.local_qp_info(q, ctx.query_port(port), ctx.query_gid(port, gid_index),
                                              port=port)
            ib.connect_rc(a, info(b), port=port, sgid_index=gid_index, access=access)
            ib.connect_rc(b, info(a), port=port, sgid_index=gid_index, access=access)
            dst, src = make_buffer(16), make_buffer(16, fill=1)
            srq.post_recv([ib.RecvWR(wr_id=i, sg_list=[dst.mr.sge()]) for i in range(4)])
            srq.modify(srq_limit=3)

            async def main():
                first = asyncio.ensure_future(ctx.async_event())
                await asyncio.sleep(0.02)
                assert not first.done()
                for _ in range(2):
                    send(ib, a, src)
                ev = await asyncio.wait_for(first, TIMEOUT)
                # nothing else is pending: the iterator form times out
                async def next_event():
                    async for e in ctx.async_events():
                        return e
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(next_event(), 0.2)
                return ev

            ev = asyncio.run(main())
            assert ev.event_type == ib.EventType.SRQ_LIMIT_REACHED
            assert ev.element is srq and ev.acked
            from ibverbs import aio
            assert not aio._contexts
            assert not os.get_blocking(ctx.async_fd)
            poll_until(cq_a, 2)
            poll_until(cq_b, 2)
        finally:
            a.close()
            b.close()


def test_waiting_does_not_spin(ib, chpair, make_buffer):
    """While nothing arrives, the waiting process sleeps in the event loop:
    it uses almost no CPU (a busy poll would burn the whole interval)."""
    import time
    src, dst = make_buffer(16, fill=5), make_buffer(16)
    chpair.qp_b.post_recv(ib.RecvWR(wr_id=9, sg_list=[dst.mr.sge()]))

    async def main():
        waiter = asyncio.ensure_future(chpair.cq_b.async_wait())
        await asyncio.sleep(0.05)            # the first poll/arm/add_reader happen here
        cpu0, wall0 = time.process_time(), time.monotonic()
        await asyncio.sleep(1.0)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        assert not waiter.done()
        send(ib, chpair.qp_a, src, wr_id=9)
        return cpu, wall, await asyncio.wait_for(waiter, TIMEOUT)

    cpu, wall, wcs = asyncio.run(main())
    assert [wc.wr_id for wc in wcs] == [9]
    assert cpu < 0.25 * wall, f"{cpu:.3f} s of CPU in {wall:.3f} s of waiting"
    poll_until(chpair.cq_a, 1)
