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
open raises EBUSY.  Events are copied and acknowledged as they are read.

Without librdmacm.so.1, `import ibverbs` and `import ibverbs.cm` work;
create_event_channel() raises RuntimeError saying the library is missing
(`available()` tells in advance).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Union

from . import _ibverbs
from ._generated.rdmacm_enums import CMEventType, CMIDOption, CMOptionLevel, PortSpace
from ._cmid import CMID
from ._ibverbs import EventChannel, cm_event_str, create_event_channel

__all__ = ["CMEvent", "CMEventType", "CMID", "CMIDOption", "CMOptionLevel", "ConnParam",
           "EventChannel", "PortSpace", "UDParam", "available", "cm_event_str",
           "create_event_channel", "wait_event"]


def available() -> bool:
    """Whether librdmacm.so.1 loads (it is loaded by this call if so)."""
    return _ibverbs._rdmacm_available()


@dataclass(frozen=True)
class ConnParam:
    """rdma_conn_param of a connection event, as the peer sent it.

    Attributes:
        responder_resources: RDMA reads and atomics the peer serves at once
            (its max_dest_rd_atomic, 0-255).
        initiator_depth: RDMA reads and atomics the peer issues at once
            (its max_rd_atomic, 0-255).
        flow_control: 1 when the peer's hardware does end-to-end flow control.
        retry_count: the peer's transport retry count (0-7, QPAttr.retry_cnt).
        rnr_retry_count: the peer's RNR retry count (0-7, 7 forever).
        srq: 1 when the peer's QP takes receives from an SRQ.
        qp_num: the peer's QP number (24 bits).
    """
    responder_resources: int
    initiator_depth: int
    flow_control: int
    retry_count: int
    rnr_retry_count: int
    srq: int
    qp_num: int


@dataclass(frozen=True)
class UDParam:
    """rdma_ud_param of a datagram (PortSpace.UDP) event: how to reach the peer.

    Attributes:
        ah_attr: the address vector to reach it (an AHAttr: create_ah).
        qp_num: its QP number (24 bits: SendWR.remote_qpn).
        qkey: its Q_Key (32 bits: SendWR.remote_qkey).
    """
    ah_attr: Any
    qp_num: int
    qkey: int


@dataclass(frozen=True)
class CMEvent:
    """One rdma_cm_event, copied (the C event is already acknowledged).

    Attributes:
        event: CMEventType
        status: 0, or the event's error (a negative errno for
            ADDR_ERROR/ROUTE_ERROR/UNREACHABLE, the CM reject reason
            for REJECTED)
        id: the CMID it concerns; for CONNECT_REQUEST a new CMID to
            accept() or reject()
        listen_id: the listening CMID of a CONNECT_REQUEST, else None
        private_data: the peer's private data (bytes; the transport pads it,
            so it can be longer than what was sent), or None
        param: ConnParam (connection events), UDParam (datagram events)
            or None
    """
    event: Union[CMEventType, int]      # an int: an event newer than CMEventType
    status: int
    id: Optional[CMID]
    listen_id: Optional[CMID]
    private_data: Optional[bytes]
    param: Any

    @property
    def event_str(self) -> str:
        """The event's name ("ESTABLISHED", ...: rdma_event_str)."""
        return cm_event_str(self.event)

    def __repr__(self) -> str:
        return (f"CMEvent({getattr(self.event, 'name', self.event)}, status={self.status}, "
                f"private_data={self.private_data!r})")


def _make_event(event: int, status: int, cm_id: Optional[CMID], listen_id: Optional[CMID],
                private_data: Optional[bytes], param: Any) -> CMEvent:
    """Called by EventChannel.get_cm_event (C) with the copied fields."""
    kind: Union[CMEventType, int]
    try:
        kind = CMEventType(event)
    except ValueError:      # a newer librdmacm's event: keep the number
        kind = event
    if isinstance(param, dict):
        param = UDParam(**param) if "qkey" in param else ConnParam(**param)
    return CMEvent(kind, status, cm_id, listen_id, private_data, param)


def wait_event(channel: EventChannel, expected: Optional[CMEventType] = None,
               timeout: Optional[float] = None) -> CMEvent:
    """The next event of channel, waiting at most timeout seconds (select on
    its fd; TimeoutError after that).  With expected (a CMEventType), any
    other event raises RuntimeError naming both."""
    import select
    if timeout is not None:
        ready, _, _ = select.select([channel.fd], [], [], timeout)
        if not ready:
            raise TimeoutError(f"no rdma_cm event within {timeout} s"
                               + (f" (waiting for {expected.name})" if expected else ""))
    ev = channel.get_cm_event()
    if expected is not None and ev.event != expected:
        raise RuntimeError(f"expected rdma_cm event {CMEventType(expected).name}, got "
                           f"{getattr(ev.event, 'name', ev.event)} (status {ev.status})")
    return ev
