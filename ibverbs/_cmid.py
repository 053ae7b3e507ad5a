"""ibverbs.CMID: the rdma_cm identifier, with the blocking API of ibverbs 2026.7.18.

The C class (``ibverbs._ibverbs.CMID``) is event-driven: each call starts
an operation whose outcome arrives as an event on its EventChannel (see
``ibverbs.cm``).  This subclass, which every CMID is once this module is
imported, adds ibverbs 2026.7.18's (and its successors') blocking
way, in which a CMID owns a private event channel and each call waits
for its outcome:

    # client                                   # server
    cm_id = ib.CMID.resolve(host, 7471)        listener = ib.CMID.listen_on(host, 7471)
    pd = cm_id.context.alloc_pd()              conn = listener.get_request()
    cq = cm_id.context.create_cq(16)           pd = conn.context.alloc_pd()
    qp = cm_id.create_qp(pd, attr)             cq = conn.context.create_cq(16)
    reply = cm_id.connect(b"hello")            qp = conn.create_qp(pd, attr)
                                               hello = conn.accept(b"world")

A CMID made otherwise (``EventChannel.create_id``, CONNECT_REQUEST events
of a channel the caller reads) keeps the event-driven methods unchanged.

This module is imported with the package: it imports nothing else at load
time (the enums and ``ibverbs._cmevents`` on first use; never ``ibverbs.cm``,
which imports this one).
"""
from __future__ import annotations

import errno as _errno

from . import _ibverbs
from .errors import VerbsError

# typing costs milliseconds to import: for the type checker only
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable, Optional

    from ._cmevents import CMEvent

__all__ = ["CMID"]

_DEFAULT_TIMEOUT = 10.0


def _text(what: str, value: object, allow_none: bool = False) -> "Optional[str]":
    """The seed's checks of host and source: a non-empty str without NUL."""
    if value is None and allow_none:
        return None
    if not isinstance(value, str) or not value or "\x00" in value:
        raise ValueError(f"{what} must be a non-empty string without NUL bytes")
    return value


def _numeric(host: str, operation: str) -> str:
    """host as the numeric address rdma_cm takes.  A host name is looked up
    (getaddrinfo, IPv4 first), as the seed's rdma_getaddrinfo did: users
    write ``CMID.resolve("node1", port)``.  An unknown name: VerbsError
    (ENOENT) naming it."""
    import socket

    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
            return host
        except OSError:
            pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise VerbsError(operation, _errno.ENOENT,
                         f"{operation} failed: cannot resolve host name {host!r}: {exc.strerror}"
                         ) from None
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    return str(infos[0][4][0])


def _port(port: "Any") -> int:
    try:
        value = int(port)       # the seed took int(port)
    except (TypeError, ValueError):
        raise ValueError(f"port must be between 1 and 65535, not {port!r}") from None
    if not 1 <= value <= 65535:
        raise ValueError("port must be between 1 and 65535")
    return value


def _wait(channel: "_ibverbs.EventChannel", wanted: "Iterable[int]", operation: str,
          timeout: float) -> "CMEvent":
    """The next event of channel if it is one of wanted; VerbsError (the
    operation's, with an errno saying why) for a failure event or when none
    comes within timeout seconds."""
    from ._cmevents import _readable
    from ._generated.rdmacm_enums import CMEventType as E

    if not _readable(channel.fd, timeout):
        raise VerbsError(operation, _errno.ETIMEDOUT,
                         f"{operation} failed: no answer within {timeout:g} s")
    ev = channel.get_cm_event()
    if ev.event in wanted:
        return ev
    name = getattr(ev.event, "name", ev.event)
    if ev.event == E.REJECTED:
        err, why = _errno.ECONNREFUSED, f"the peer rejected the connection (reason {ev.status})"
    elif ev.event in (E.UNREACHABLE, E.ADDR_ERROR, E.ROUTE_ERROR, E.CONNECT_ERROR):
        err = -ev.status if ev.status < 0 else _errno.EHOSTUNREACH
        why = f"{name} ({_errno.errorcode.get(err, err)})"
    else:
        err, why = _errno.EPROTO, f"unexpected rdma_cm event {name} (status {ev.status})"
    raise VerbsError(operation, err, f"{operation} failed: {why}")


class CMID(_ibverbs.CMID):
    """An rdma_cm identifier.  ``CMID.resolve`` (client) and
    ``CMID.listen_on`` (server) make blocking ones; see the module."""

    __module__ = "ibverbs"

    # Class defaults: a CMID of the event-driven API has none of these.
    _request_data: "Optional[bytes]" = None
    _channel: "Optional[_ibverbs.EventChannel]" = None   # a blocking CMID's own channel
    _timeout = _DEFAULT_TIMEOUT
    _connected = False
    _host: "Optional[str]" = None
    _port: "Optional[int]" = None
    _source: "Optional[str]" = None

    # Properties rather than class defaults, so that help() shows what each is.
    @property
    def request_data(self) -> "Optional[bytes]":
        """The client's private data, zero-padded (a CMID of get_request(); None otherwise)."""
        return self._request_data

    @request_data.setter
    def request_data(self, value: "Optional[bytes]") -> None:
        self._request_data = value

    @property
    def host(self) -> "Optional[str]":
        """The address resolved (CMID.resolve) or listened on (CMID.listen_on);
        None for an event-driven CMID."""
        return self._host

    @host.setter
    def host(self, value: "Optional[str]") -> None:
        self._host = value

    @property
    def port(self) -> "Optional[int]":
        """The port (rdma_cm's port space, TCP) resolved or listened on; None
        for an event-driven CMID."""
        return self._port

    @port.setter
    def port(self, value: "Optional[int]") -> None:
        self._port = value

    @property
    def source(self) -> "Optional[str]":
        """The local address a CMID.resolve bound to (its ``source=``), None
        when none was given."""
        return self._source

    @source.setter
    def source(self, value: "Optional[str]") -> None:
        self._source = value

    @property
    def connected(self) -> bool:
        """Whether a blocking connect()/accept() established the connection
        and no disconnect() followed."""
        return self._connected

    # --- making blocking CMIDs ---------------------------------------------------

    @classmethod
    def _blocking(cls, timeout: float, setup: "Callable[[CMID], None]") -> "CMID":
        """A CMID on a private channel, made ready by ``setup(cm_id)``; if
        that fails, the CMID and its channel are closed before re-raising."""
        channel = _ibverbs.create_event_channel()
        cm_id = None
        try:
            cm_id = channel.create_id()
            assert isinstance(cm_id, CMID)      # every CMID is (_set_cmid_class below)
            cm_id._channel = channel
            cm_id._timeout = timeout
            setup(cm_id)
        except BaseException:
            if cm_id is not None:
                _ibverbs.CMID.close(cm_id)
            channel.close()
            raise
        return cm_id

    @classmethod
    def resolve(cls, host: str, port: int = 4420, source: "str | None" = None, *,
                timeout: float = _DEFAULT_TIMEOUT) -> "CMID":
        """Resolve the address and route to ``host``:``port`` (through the
        local address ``source`` when given, which also picks the device)
        and return a CMID whose ``context`` is that device's; waits at most
        ``timeout`` seconds for each step (VerbsError ETIMEDOUT).  Failures
        raise VerbsError and leave nothing open."""
        from ._generated.rdmacm_enums import CMEventType as E

        host_text = _text("host", host)
        source = _text("source", source, allow_none=True)
        port = _port(port)

        def setup(cm_id: "CMID") -> None:
            cm_id.host, cm_id.port, cm_id.source = host_text, port, source
            dst = _numeric(str(host_text), "rdma_resolve_addr")
            src = None if source is None else _numeric(source, "rdma_resolve_addr")
            cm_id.resolve_addr((dst, port), src=src, timeout_ms=int(timeout * 1000))
            _wait(cm_id._require_blocking("resolve"), (E.ADDR_RESOLVED,), "rdma_resolve_addr", timeout)
            cm_id.resolve_route(timeout_ms=int(timeout * 1000))
            _wait(cm_id._require_blocking("resolve"), (E.ROUTE_RESOLVED,), "rdma_resolve_route", timeout)

        return cls._blocking(timeout, setup)

    @classmethod
    def listen_on(cls, host: str, port: int = 4420, *, backlog: int = 16,
                  timeout: float = _DEFAULT_TIMEOUT) -> "CMID":
        """A listening CMID bound to the local address ``host``:``port``;
        ``get_request()`` waits for the next connection."""
        host_text = _text("host", host)
        port = _port(port)

        def setup(cm_id: "CMID") -> None:
            cm_id.host, cm_id.port = host_text, port
            cm_id.bind_addr((_numeric(str(host_text), "rdma_bind_addr"), port))
            cm_id.listen(backlog)

        return cls._blocking(timeout, setup)

    def get_request(self, timeout: "float | None" = None) -> "CMID":
        """Wait for the next connection request on a listening CMID and
        return its CMID (blocking, with a channel of its own): create its
        QP, then ``accept()`` (or ``reject()``) it.  Its ``request_data`` is
        the client's private data."""
        from ._generated.rdmacm_enums import CMEventType as E

        listening = self._require_blocking("get_request")
        timeout = self._timeout if timeout is None else timeout
        ev = _wait(listening, (E.CONNECT_REQUEST,), "rdma_get_request", timeout)
        conn = ev.id
        assert isinstance(conn, CMID)
        channel = _ibverbs.create_event_channel()
        try:
            conn.migrate(channel)
        except BaseException:
            channel.close()
            conn.reject()
            _ibverbs.CMID.close(conn)
            raise
        conn._channel, conn._timeout = channel, timeout
        conn.host, conn.port = self.host, self.port
        conn.request_data = ev.private_data or b""
        return conn

    def _require_blocking(self, what: str) -> "_ibverbs.EventChannel":
        if self._channel is None:
            raise ValueError(f"CMID.{what} needs a CMID made by CMID.resolve or CMID.listen_on")
        return self._channel

    # --- connecting -----------------------------------------------------------------

    def connect(self, private_data: "Any" = b"", responder_resources: int = 1,  # type: ignore[override]
                initiator_depth: int = 1, flow_control: int = 1, retry_count: int = 7,
                rnr_retry_count: int = 7) -> "Optional[bytes]":
        """Blocking CMID: connect the QP made by ``create_qp``, wait until
        the connection is ESTABLISHED and return the peer's private data
        (the transport may pad it).  A refusal raises VerbsError
        ECONNREFUSED, no answer ETIMEDOUT.  Other CMIDs: ``rdma_connect``,
        its outcome an event on their channel (see ibverbs.cm).  The
        parameters are the C method's, by position or by name."""
        params = (responder_resources, initiator_depth, flow_control, retry_count, rnr_retry_count)
        channel = self._channel
        if channel is None:
            super().connect(private_data, *params)
            return None
        from ._generated.rdmacm_enums import CMEventType as E

        if self.qp is None:
            raise VerbsError("rdma_connect", _errno.EBADF,
                             "rdma_connect failed: create a QP before connecting")
        super().connect(private_data, *params)     # accept()'s rules: None is none
        ev = _wait(channel, (E.ESTABLISHED,), "rdma_connect", self._timeout)
        self._connected = True
        return ev.private_data or b""

    def accept(self, private_data: "Any" = b"", responder_resources: int = 1,  # type: ignore[override]
               initiator_depth: int = 1, flow_control: int = 1, retry_count: int = 7,
               rnr_retry_count: int = 7) -> "Optional[bytes]":
        """Blocking CMID (from ``get_request``): accept, wait until
        ESTABLISHED and return the client's private data.  Other CMIDs:
        ``rdma_accept``, as in ibverbs.cm.  The parameters are the C
        method's, by position or by name."""
        params = (responder_resources, initiator_depth, flow_control, retry_count, rnr_retry_count)
        channel = self._channel
        if channel is None:
            super().accept(private_data, *params)
            return None
        from ._generated.rdmacm_enums import CMEventType as E

        super().accept(private_data, *params)
        _wait(channel, (E.ESTABLISHED,), "rdma_accept", self._timeout)
        self._connected = True
        return self.request_data

    def disconnect(self) -> None:
        """Blocking CMID: disconnect if connected (else nothing).  Other
        CMIDs: ``rdma_disconnect``."""
        if self._channel is not None and not self._connected:
            return
        super().disconnect()
        self._connected = False

    def close(self) -> None:
        """Destroy the CMID (EBUSY while its QP is open) and, for a
        blocking one, its private channel."""
        super().close()
        self._connected = False
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._channel is None or self.closed:
            return super().__repr__()
        return f"CMID(host={self.host!r}, port={self.port}, connected={self._connected})"


# Every CMID made from now on (events' new ones included) is of this class.
_ibverbs._set_cmid_class(CMID)
