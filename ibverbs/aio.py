"""asyncio integration: awaitable completions and asynchronous events.

Built on the file descriptors libibverbs already gives, with
``loop.add_reader``: no busy polling, no thread per CQ.

* ``await cq.async_wait()`` arms the CQ (``req_notify``), and when nothing is
  there yet, waits for its completion channel to become readable, reads the
  event, acknowledges it and returns the completions (a non-empty list of WC).
* ``async for wc in cq.completions():`` yields every completion, forever.
* ``await ctx.async_event()`` returns the next AsyncEvent;
  ``async for ev in ctx.async_events():`` yields them.

Those methods are attached to CQ and Context by the package, and import
this module (and asyncio) on first use only; the functions here take the
CQ or Context first and can be called directly too.

How it works.  The first use sets the channel's fd (or the context's
async fd) non-blocking: ``CompChannel.get_cq_event()`` and
``Context.get_async_event()`` then raise VerbsError EAGAIN instead of
blocking, so they are called only when the loop says the fd is readable,
until EAGAIN.  One reader per fd serves every CQ of the channel: each event
is handed to the coroutines waiting on its CQ (several CQs may share one
channel).  Every event read is acknowledged at once (the extension acks
libibverbs on receipt; ``ack_events`` keeps the count), so a cancelled
``wait()`` leaves nothing unacknowledged and the CQ can always be closed.
The reader is removed when nobody waits any more, so nothing holds the
channel or context alive between waits (async events read beyond what was
awaited are kept, with the context, for the next ``async_event()``).

Readers are kept by fd, not by Python object: several Context objects can
wrap one ibv_context (each CMID's ``.context`` is its own), and the loop
watches an fd for one callback only, so their waiters share one reader (its
events go to them in order, whichever object each awaited through).

The fds stay non-blocking: do not mix these coroutines with blocking
``get_cq_event()`` / ``get_async_event()`` calls on the same channel or
context (those would raise EAGAIN).  Everything runs in the event loop's
thread; a channel or context is served by one event loop at a time.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections import deque
from typing import TYPE_CHECKING, AsyncIterator, Deque, Dict, List

from .errors import VerbsError

if TYPE_CHECKING:  # pragma: no cover
    from ._ibverbs import CQ, WC, AsyncEvent, CompChannel, Context

__all__ = ["wait", "completions", "async_event", "async_events"]


def _drained(exc: VerbsError) -> bool:
    return exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK)


class _FdReader:
    """One fd watched by one event loop while someone waits on it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self.loop, self.fd, self.reading = loop, fd, False
        os.set_blocking(fd, False)

    def start(self) -> None:
        if not self.reading:
            self.loop.add_reader(self.fd, self.on_readable)
            self.reading = True

    def stop(self) -> None:
        if self.reading:
            self.loop.remove_reader(self.fd)
            self.reading = False

    def on_readable(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


# Active readers, by the fd they watch; each holds the object(s) it reads
# through strongly and is dropped when its last waiter goes.
_channels: Dict[int, "_ChannelReader"] = {}
_contexts: Dict[int, "_ContextReader"] = {}


def _running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


class _ChannelReader(_FdReader):
    """Reads a completion channel; wakes the waiters of each CQ."""

    def __init__(self, loop: asyncio.AbstractEventLoop, channel: CompChannel) -> None:
        super().__init__(loop, channel.fd)
        self.channel = channel
        self.waiters: Dict[int, List[asyncio.Future[None]]] = {}

    @classmethod
    def of(cls, channel: CompChannel) -> _ChannelReader:
        loop = _running_loop()
        fd = channel.fd
        reader = _channels.get(fd)
        if reader is None or reader.channel.closed:   # closed: fd is another's now
            reader = _channels[fd] = cls(loop, channel)
        elif reader.loop is not loop:
            raise RuntimeError("this completion channel is being waited on by another event loop")
        return reader

    def add(self, cq: CQ) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = self.loop.create_future()
        self.waiters.setdefault(id(cq), []).append(fut)
        self.start()
        return fut

    def discard(self, cq: CQ, fut: asyncio.Future[None]) -> None:
        futs = self.waiters.get(id(cq), [])
        if fut in futs:
            futs.remove(fut)
        if not futs:
            self.waiters.pop(id(cq), None)
        if not self.waiters:
            self.stop()
            if _channels.get(self.fd) is self:
                del _channels[self.fd]

    def on_readable(self) -> None:
        while True:
            try:
                cq = self.channel.get_cq_event()
            except VerbsError as exc:
                if not _drained(exc):
                    self.fail(exc)
                return
            try:
                cq.ack_events(1)   # every event read is acknowledged at once
            except VerbsError:     # closed meanwhile: its events are moot
                continue
            for fut in self.waiters.get(id(cq), ()):
                if not fut.done():
                    fut.set_result(None)

    def fail(self, exc: BaseException) -> None:
        for futs in self.waiters.values():
            for fut in futs:
                if not fut.done():
                    fut.set_exception(exc)


async def wait(cq: CQ, max_entries: int = 16, *, solicited_only: bool = False) -> List[WC]:
    """Wait for completions on ``cq`` and return them (1..max_entries WC).

    ``cq`` needs a completion channel (``ctx.create_cq(n, channel=ch)``).
    The CQ is armed with ``req_notify(solicited_only)`` and polled: what is
    already there is returned at once; otherwise the coroutine sleeps until
    the channel reports an event for this CQ (every event is acknowledged),
    then polls again.  Cancelling it leaves no event unacknowledged.
    """
    channel = cq.channel
    if channel is None:
        raise ValueError("CQ.wait needs a CQ created with a completion channel")
    if max_entries <= 0:
        raise ValueError(f"max_entries must be positive, got {max_entries}")
    while True:
        wcs = cq.poll(max_entries)
        if wcs:
            return wcs
        cq.req_notify(solicited_only)
        # A completion that arrived before req_notify raises no event: poll
        # again now that the CQ is armed.
        wcs = cq.poll(max_entries)
        if wcs:
            return wcs
        reader = _ChannelReader.of(channel)
        fut = reader.add(cq)
        try:
            await fut
        finally:
            reader.discard(cq, fut)


async def completions(cq: CQ, max_entries: int = 16, *,
                      solicited_only: bool = False) -> AsyncIterator[WC]:
    """Every completion of ``cq``, as it arrives (an endless async iterator)."""
    while True:
        for wc in await wait(cq, max_entries, solicited_only=solicited_only):
            yield wc


class _ContextReader(_FdReader):
    """Reads a context's async fd; events go to waiters in order, or are
    kept until someone asks (while a waiter exists, the fd is read)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, ctx: Context) -> None:
        super().__init__(loop, ctx.async_fd)
        self.contexts: List[Context] = [ctx]   # the objects of this fd awaited through
        self.events: Deque[AsyncEvent] = deque()
        self.waiters: Deque[asyncio.Future[AsyncEvent]] = deque()

    @classmethod
    def of(cls, ctx: Context) -> _ContextReader:
        loop = _running_loop()
        fd = ctx.async_fd
        reader = _contexts.get(fd)
        if reader is None or all(c.closed for c in reader.contexts):
            # none open: the fd may be another context's now, its kept events moot
            reader = _contexts[fd] = cls(loop, ctx)
        elif reader.loop is not loop:
            raise RuntimeError("this context's async events are awaited by another event loop")
        elif not any(c is ctx for c in reader.contexts):
            reader.contexts.append(ctx)
        return reader

    @property
    def ctx(self) -> Context:
        """An open object of the fd's context to read through (the first if none is)."""
        return next((c for c in self.contexts if not c.closed), self.contexts[0])

    def on_readable(self) -> None:
        while True:
            try:
                ev = self.ctx.get_async_event()
            except VerbsError as exc:
                if not _drained(exc):
                    for fut in self.waiters:
                        if not fut.done():
                            fut.set_exception(exc)
                return
            self.ctx.ack_async_event(ev)
            self.events.append(ev)
            self.deliver()

    def deliver(self) -> None:
        while self.events and self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(self.events.popleft())

    def done_waiting(self, fut: asyncio.Future[AsyncEvent]) -> None:
        if fut in self.waiters:
            self.waiters.remove(fut)
        if not self.waiters:
            self.stop()
            if not self.events and _contexts.get(self.fd) is self:
                del _contexts[self.fd]


async def async_event(ctx: Context) -> AsyncEvent:
    """The context's next asynchronous event (already acknowledged)."""
    reader = _ContextReader.of(ctx)
    if reader.events:
        ev = reader.events.popleft()
        if not reader.events and not reader.waiters and _contexts.get(reader.fd) is reader:
            del _contexts[reader.fd]
        return ev
    fut: asyncio.Future[AsyncEvent] = reader.loop.create_future()
    reader.waiters.append(fut)
    reader.start()
    try:
        return await fut
    except asyncio.CancelledError:
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            reader.events.appendleft(fut.result())   # delivered, then cancelled: keep it
        raise
    finally:
        reader.done_waiting(fut)


async def async_events(ctx: Context) -> AsyncIterator[AsyncEvent]:
    """Every asynchronous event of the context, as it arrives (endless)."""
    while True:
        yield await async_event(ctx)

