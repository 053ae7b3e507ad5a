"""rdma_cm, the RDMA connection manager (librdmacm), event-driven.

A server, in outline::

    import ibverbs as ib
    from ibverbs import cm

    channel = cm.create_event_channel()          # loads librdmacm.so.1
    server = channel.create_id(cm.PortSpace.TCP)
    server.bind_addr(("10.0.0.1", 7471))
    server.listen()
    ...
    ev = channel.get_cm_event()                  # blocks, GIL released
    if ev.event == cm.CMEventType.CONNECT_REQUEST:
        conn = ev.id                              # a new CMID
        pd = conn.context.alloc_pd()
        cq = conn.context.create_cq(16)
        qp = conn.create_qp(pd, ib.QPInitAttr(cq, cq))
        qp.post_recv(...)
        conn.accept(private_data=b"hello")

`EventChannel` and `CMID` (also at top level) are C classes with the usual
lifetime rules: close() and context managers, use after close raises
VerbsError EBADF, closing a channel with open CMIDs or a CMID whose QP is
open raises EBUSY.  So does closing a CMID's QP while librdmacm may move
it in another thread: during a call on that CMID (connect, accept,
disconnect, establish, migrate) or any call on its channel
(get_cm_event waiting); retry once it returned.  Events are copied and
acknowledged as they are read, and name their CMID by identity, never by
an address a new CMID may have reused.

Without librdmacm.so.1, `import ibverbs` and `import ibverbs.cm` work;
create_event_channel() raises RuntimeError saying the library is missing
(`available()` tells in advance).
"""
from __future__ import annotations

from typing import Optional

from . import _ibverbs
from ._cmevents import CMEvent, ConnParam, UDParam, _make_event, _readable  # noqa: F401
from ._cmid import CMID
from ._generated.rdmacm_enums import CMEventType, CMIDOption, CMOptionLevel, PortSpace
from ._ibverbs import EventChannel, cm_event_str, create_event_channel

__all__ = ["CMEvent", "CMEventType", "CMID", "CMIDOption", "CMOptionLevel", "ConnParam",
           "EventChannel", "PortSpace", "UDParam", "available", "cm_event_str",
           "create_event_channel", "wait_event"]

# _make_event: imported here too, the name the host tests (and older code) use


def available() -> bool:
    """Whether librdmacm.so.1 loads (it is loaded by this call if so)."""
    return _ibverbs._rdmacm_available()


def wait_event(channel: EventChannel, expected: Optional[CMEventType] = None,
               timeout: Optional[float] = None) -> CMEvent:
    """The next event of channel, waiting at most timeout seconds (poll on
    its fd, any fd number; TimeoutError after that).  With expected (a
    CMEventType), any other event raises RuntimeError naming both."""
    if timeout is not None:
        if not _readable(channel.fd, timeout):
            raise TimeoutError(f"no rdma_cm event within {timeout} s"
                               + (f" (waiting for {expected.name})" if expected else ""))
    ev = channel.get_cm_event()
    if expected is not None and ev.event != expected:
        raise RuntimeError(f"expected rdma_cm event {CMEventType(expected).name}, got "
                           f"{getattr(ev.event, 'name', ev.event)} (status {ev.status})")
    return ev
