"""What ``ibverbs.cm`` and ``ibverbs.CMID`` (``ibverbs/_cmid.py``) share: the
copied rdma_cm event (``CMEvent`` and its parameters), the function
``EventChannel.get_cm_event`` (C) makes it with, and the wait for a
channel's fd.

Both modules import this one and it imports neither, so the dependency
between them runs one way (``cm`` -> ``_cmid``).
"""
from __future__ import annotations

import math
import select
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Union

from . import _ibverbs
from ._generated.rdmacm_enums import CMEventType

if TYPE_CHECKING:
    from ._ibverbs import CMID

__all__ = ["CMEvent", "ConnParam", "UDParam"]


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
        return _ibverbs.cm_event_str(self.event)

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


def _readable(fd: int, timeout: Optional[float]) -> bool:
    """Whether fd becomes readable within timeout seconds (None: waits until
    it does).  poll(), not select(): select() takes no fd of 1024 or more
    (FD_SETSIZE), which a process with a thousand connections has.  Every
    wait of the package on a channel's fd is this one."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    if timeout is None:
        return bool(poller.poll())
    # poll() takes milliseconds: round up, so that a short timeout still waits
    return bool(poller.poll(max(0, math.ceil(timeout * 1000))))
