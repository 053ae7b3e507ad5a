"""Connection and registration helpers (pure Python).

``QPInfo`` / ``local_qp_info`` / ``connect_rc`` exchange and apply what two
RC (or UC) QPs need to know about each other; ``RemoteBuffer`` is the wire
format of a memory region a peer reads or writes; ``tensor_addr_len`` /
``reg_tensor`` register host torch tensors and numpy arrays. Neither numpy
nor torch is imported: tensors are recognised by duck typing.

``find_gid``, ``cq_wait`` and ``mr_remote`` are the Python side of the
methods ``Context.find_gid``, ``CQ.wait`` and ``MR.remote`` (spec key
``python:``); call them as methods.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ._qp_transitions import (_MTU_MAX, _MTU_MIN, _U8, _U16, _U24, _check_int, _init_request, _qp_kind,
                              _rtr_request, _rts_request)
from .errors import VerbsError

__all__ = ["QPInfo", "RemoteBuffer", "local_qp_info", "connect_rc", "tensor_addr_len",
           "reg_tensor"]

_QPINFO = struct.Struct("!IIH16sBB")  # qp_num, psn, lid, gid, port, mtu: 28 bytes
_REMOTE = struct.Struct("!QIQ")       # addr, rkey, length: 20 bytes
_U32 = (1 << 32) - 1
_U64 = (1 << 64) - 1


def _wire_bytes(data: object, what: str) -> bytes:
    """The bytes of a received message: any bytes-like object (bytes,
    bytearray, memoryview, numpy array) or a contiguous CPU tensor (a uint8
    tensor filled by a collective such as all_gather)."""
    try:
        return bytes(memoryview(data))  # type: ignore[arg-type]
    except TypeError:
        pass
    if _is_torch_like(data):
        if _is_cuda(data):
            raise ValueError(f"{what} reads host memory; move the tensor with .cpu() first")
        import ctypes

        addr, nbytes = _torch_span(data)
        return ctypes.string_at(addr, nbytes) if nbytes else b""
    raise TypeError(f"{what} needs a bytes-like object or a CPU tensor, "
                    f"not {type(data).__name__}")


def _gid_bytes(gid: object) -> bytes:
    # bytes-likes and ibverbs.Gid (__bytes__) only: bytes(16) would silently
    # make 16 zero bytes.
    if not isinstance(gid, (bytes, bytearray, memoryview)) and not hasattr(type(gid), "__bytes__"):
        raise TypeError(f"gid must be bytes or a Gid, not {type(gid).__name__}")
    raw = bytes(gid)
    if len(raw) != 16:
        raise ValueError(f"gid must be exactly 16 bytes, got {len(raw)}")
    return raw


_QPINFO_CHECKS = {
    "qp_num": lambda v: _check_int("qp_num", v, 0, _U24),
    "psn": lambda v: _check_int("psn", v, 0, _U24),
    "lid": lambda v: _check_int("lid", v, 0, _U16),
    "gid": _gid_bytes,
    "port": lambda v: _check_int("port", v, 1, _U8),
    "mtu": lambda v: _check_int("mtu", v, _MTU_MIN, _MTU_MAX),
}


@dataclass
class QPInfo:
    """What a peer needs to connect to a QP; validated on construction and on
    every assignment (ValueError out of range, TypeError for a wrong type).

    ``qp_num`` and ``psn`` are 24-bit, ``lid`` 16-bit, ``gid`` exactly 16
    bytes (bytes, bytearray or Gid; stored as bytes), ``port`` 1..255,
    ``mtu`` an MTU value 1..5 (stored as int). On the wire it is the 28-byte
    network-order layout ``!IIH16sBB`` (``to_bytes`` / ``from_bytes``).

    Attributes:
        qp_num: The QP number (24 bits, QP.qp_num): the peer's dest_qp_num.
        psn: The first packet sequence number this QP sends (24 bits): the
            peer's rq_psn.
        lid: The port's LID (16 bits; 0 on RoCE).
        gid: The port's GID the peer addresses (16 bytes, network order).
        port: The port number (1..255).
        mtu: The path MTU to use, an MTU code (1..5; the port's active_mtu).
    """

    #: The QP number (24 bits, QP.qp_num): the peer's dest_qp_num.
    qp_num: int
    #: The first packet sequence number this QP sends (24 bits): the peer's rq_psn.
    psn: int
    #: The port's LID (16 bits; 0 on RoCE).
    lid: int
    #: The port's GID the peer addresses (16 bytes, network order).
    gid: bytes
    #: The port number (1..255).
    port: int
    #: The path MTU to use, an MTU code (1..5; the port's active_mtu).
    mtu: int

    # The wire layout, under the name the seed exposed it (not a field: no annotation).
    _STRUCT = _QPINFO

    def __setattr__(self, name: str, value: object) -> None:
        check = _QPINFO_CHECKS.get(name)
        object.__setattr__(self, name, value if check is None else check(value))

    def to_bytes(self) -> bytes:
        """The 28-byte network-order record (``!IIH16sBB``) to send to the peer."""
        return _QPINFO.pack(self.qp_num, self.psn, self.lid, self.gid, self.port, self.mtu)

    @classmethod
    def from_bytes(cls, data) -> QPInfo:
        """Parse ``to_bytes()``'s 28 bytes from any bytes-like object
        (bytes, bytearray, memoryview, numpy array) or a contiguous CPU
        tensor; ValueError for another size, TypeError for a str."""
        raw = _wire_bytes(data, "QPInfo.from_bytes")
        if len(raw) != _QPINFO.size:
            raise ValueError(f"QPInfo.from_bytes needs exactly {_QPINFO.size} bytes, got {len(raw)}")
        return cls(*_QPINFO.unpack(raw))


_REMOTE_CHECKS = {
    "addr": lambda v: _check_int("addr", v, 0, _U64),
    "rkey": lambda v: _check_int("rkey", v, 0, _U32),
    "length": lambda v: _check_int("length", v, 0, _U64),
}


@dataclass
class RemoteBuffer:
    """Where a peer may read or write: the address, remote key and length of
    a memory region, as the target of RDMA_WRITE / RDMA_READ / atomics.

    ``mr.remote()`` (or ``GpuMR.remote()``) makes one; ``to_bytes()`` is
    its 20-byte network-order layout ``!QIQ`` (addr, rkey, length) to send
    over any channel, and ``from_bytes()`` reads it back from bytes, a
    memoryview or a uint8 tensor. ``addr`` and ``length`` are 64-bit,
    ``rkey`` 32-bit (ValueError outside, TypeError for a non-int).

    Attributes:
        addr: The start address in the peer's memory (the MR's addr, or a
            GpuMR's device address).
        rkey: The remote key of the peer's MR (32 bits).
        length: How many bytes from addr the peer may access.
    """

    #: The start address in the peer's memory (the MR's addr, or a GpuMR's device address).
    addr: int
    #: The remote key of the peer's MR (32 bits).
    rkey: int
    #: How many bytes from addr the peer may access.
    length: int

    def __setattr__(self, name: str, value: object) -> None:
        check = _REMOTE_CHECKS.get(name)
        object.__setattr__(self, name, value if check is None else check(value))

    def to_bytes(self) -> bytes:
        """The 20-byte wire format (``!QIQ``: addr, rkey, length)."""
        return _REMOTE.pack(self.addr, self.rkey, self.length)

    @classmethod
    def from_bytes(cls, data) -> RemoteBuffer:
        """Parse ``to_bytes()``'s 20 bytes from a bytes-like object or a
        contiguous CPU tensor; ValueError for another size."""
        raw = _wire_bytes(data, "RemoteBuffer.from_bytes")
        if len(raw) != _REMOTE.size:
            raise ValueError(f"RemoteBuffer.from_bytes needs exactly {_REMOTE.size} bytes, "
                             f"got {len(raw)}")
        return cls(*_REMOTE.unpack(raw))

    def slice(self, offset: int, length: int | None = None) -> RemoteBuffer:
        """The part ``[offset, offset + length)`` (to the end by default);
        ValueError when it is not inside this buffer."""
        offset = _check_int("offset", offset, 0, self.length)
        length = self.length - offset if length is None else _check_int("length", length, 0, _U64)
        if offset + length > self.length:
            raise ValueError(f"[{offset}, {offset + length}) exceeds the {self.length}-byte "
                             "remote buffer")
        return RemoteBuffer(self.addr + offset, self.rkey, length)


def mr_remote(mr, offset: int = 0, length: int | None = None) -> RemoteBuffer:
    # MR.remote: its docstring is the spec's (spec/mr.yaml), its signature this def.
    # ``MR.remote(offset=0, length=None)``: the RemoteBuffer a peer needs to
    # reach ``[offset, offset + length)`` of the MR (all of it by default).
    return RemoteBuffer(mr.addr, mr.rkey, mr.length).slice(offset, length)


def local_qp_info(qp, port_attr, gid, *, port, psn=0) -> QPInfo:
    """This side's QPInfo: ``qp.qp_num``, ``psn``, ``port_attr.lid``,
    ``bytes(gid)``, ``port`` and ``port_attr.active_mtu``."""
    _need(qp, "local_qp_info", "qp", ("qp_num",), "a QP")
    _need(port_attr, "local_qp_info", "port_attr", ("lid", "active_mtu"),
          "a PortAttr (ctx.query_port(port))")
    return QPInfo(qp_num=qp.qp_num, psn=psn, lid=port_attr.lid, gid=gid, port=port,
                  mtu=port_attr.active_mtu)


def _need(obj: object, func: str, name: str, attrs: tuple, what: str) -> None:
    """TypeError naming the argument when ``obj`` lacks what ``func`` uses
    (None, or another object): not an AttributeError from deep inside."""
    missing = [a for a in attrs if not hasattr(obj, a)]
    if missing:
        raise TypeError(f"{func}() argument {name!r} must be {what}, not {type(obj).__name__} "
                        f"(it has no {', '.join(missing)})")


_RTR_KEYWORDS = ("hop_limit", "min_rnr_timer", "max_dest_rd_atomic", "sl", "traffic_class")


def connect_rc(qp, remote, *, port, sgid_index, access, local_psn=0, mtu=None, **rts_kwargs):
    """Bring an RC (or UC) QP from RESET through INIT and RTR to RTS,
    connected to ``remote`` (a QPInfo).

    ``mtu=None`` takes min(``port``'s active MTU, ``remote.mtu``).  The
    keywords of ``to_rtr`` (``hop_limit``, ``min_rnr_timer``,
    ``max_dest_rd_atomic``, ``sl``, ``traffic_class``) go to the RTR step,
    the others to ``to_rts`` (``timeout``, ``retry_cnt``, ``rnr_retry``,
    ``max_rd_atomic``). Every argument is checked before the QP is
    modified, so a bad one leaves the QP in RESET; when the provider
    refuses the RTR or RTS step (a GID index not in the port's table, ...),
    the QP is moved back to RESET before the VerbsError is raised.

    The QP is driven through its own ``to_init``, ``to_rtr`` and ``to_rts``
    (as ibverbs 2026.7.18 did), so a subclass or wrapper providing those is used.
    """
    _need(qp, "connect_rc", "qp", ("to_init", "to_rtr", "to_rts"), "a QP")
    _need(remote, "connect_rc", "remote", ("qp_num", "psn", "lid", "gid", "mtu"), "a QPInfo")
    rtr_kwargs = {k: rts_kwargs.pop(k) for k in _RTR_KEYWORDS if k in rts_kwargs}
    try:
        kind = _qp_kind(qp, "connect_rc")
    except AttributeError:      # a wrapper without qp_type: its methods decide
        kind = "RC"
    if kind not in ("RC", "UC"):
        raise ValueError(f"connect_rc connects RC or UC QPs, not {kind}")
    _init_request(kind, port, access)
    active_mtu = qp.pd.context.query_port(port).active_mtu if mtu is None else None
    _, rtr = _rtr_request(kind, remote, sgid_index, port=port, active_mtu=active_mtu, mtu=mtu,
                          **rtr_kwargs)
    try:
        _rts_request(kind, local_psn, **rts_kwargs)
    except TypeError as exc:
        raise TypeError(str(exc).replace("_rts_request()", "connect_rc()")) from None
    qp.to_init(port, access)
    try:
        # the seed's calling convention, keywords after ``remote``: wrappers and
        # test doubles written as ``to_rtr(self, remote, **kw)`` work
        qp.to_rtr(remote, sgid_index=sgid_index, mtu=rtr["path_mtu"], **rtr_kwargs)
        qp.to_rts(local_psn, **rts_kwargs)
    except VerbsError:
        # all or nothing: the QP as it was (RESET), ready for another try
        reset = getattr(qp, "reset", None)
        if reset is not None:
            reset()
        raise


# --- tensors -----------------------------------------------------------------

# IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC:
# the access bits that let the NIC write into the memory.
_WRITE_ACCESS = 0x1 | 0x2 | 0x8


def _is_torch_like(t: object) -> bool:
    return all(callable(getattr(t, m, None)) for m in ("data_ptr", "element_size", "numel", "is_contiguous"))


def _is_cuda(t: object) -> bool:
    """True for a tensor on a CUDA device (``t.is_cuda`` or ``t.device.type``)."""
    is_cuda = getattr(t, "is_cuda", None)
    if isinstance(is_cuda, bool):
        return is_cuda
    return getattr(getattr(t, "device", None), "type", None) == "cuda"


def _torch_span(t) -> tuple[int, int]:
    if not t.is_contiguous():
        raise ValueError("tensor must be contiguous (use tensor.contiguous())")
    return t.data_ptr(), t.element_size() * t.numel()


def _itemsize(typestr: str) -> int:
    # "<f8", "|u1", "<M8[ns]", "|V12": byte order, kind, then the size in
    # bytes, except for numpy's "<U3", which counts 4-byte characters.
    digits = typestr[2:].split("[", 1)[0]
    if not digits.isdigit():
        raise TypeError(f"unsupported array typestr {typestr!r}")
    return int(digits) * (4 if typestr[1:2] == "U" else 1)


def _array_interface_span(ai: dict, what: str) -> tuple[int, int, bool]:
    """(addr, nbytes, readonly) of an ``__array_interface__`` (or
    ``__cuda_array_interface__``) dict; ValueError unless C-contiguous."""
    data = ai.get("data")
    if not isinstance(data, tuple):
        raise TypeError(f"{what} does not expose a data pointer")
    addr, readonly = data
    shape = tuple(ai["shape"])
    itemsize = _itemsize(ai["typestr"])
    count = 1
    for n in shape:
        count *= n
    strides = ai.get("strides")
    if strides is not None and count:
        expected = itemsize
        for n, stride in zip(reversed(shape), reversed(strides)):
            if n != 1 and stride != expected:
                raise ValueError(f"{what} must be C-contiguous (copy it with ascontiguousarray)")
            expected *= n
    return addr or 0, count * itemsize, bool(readonly)


def _host_span(t) -> tuple[int, int, bool]:
    """(addr, nbytes, readonly) of a torch tensor or numpy-like array."""
    if _is_torch_like(t):
        addr, nbytes = _torch_span(t)
        return addr, nbytes, False
    ai = getattr(t, "__array_interface__", None)
    if isinstance(ai, dict):
        return _array_interface_span(ai, "array")
    raise TypeError(f"expected a torch tensor or a numpy array, not {type(t).__name__}")


def tensor_addr_len(t) -> tuple[int, int]:
    """``(address, nbytes)`` of a contiguous torch tensor or C-contiguous
    numpy array (anything with ``__array_interface__``).

    The address is the tensor's ``data_ptr()`` (a device address for a CUDA
    tensor). ValueError when not contiguous, TypeError for other types; an
    empty tensor gives ``nbytes == 0``.
    """
    addr, nbytes, _ = _host_span(t)
    return addr, nbytes


def _hold_array(array) -> tuple:
    """What keeps a numpy array's memory in place while its MR is open.

    A weak reference to the array and to each array it is a view of: numpy
    refuses ``resize()`` of an array that has one, even with
    ``refcheck=False`` (which skips the reference count, and numpy does not
    count buffer exports).  And, for a writable array, a buffer export (as
    ``pd.reg_mr(buffer)`` holds) for other exporters' rules."""
    import weakref
    held = []
    node = array
    while node is not None:
        try:
            held.append(weakref.ref(node))
        except TypeError:
            break                       # not weak-referenceable: nothing to hold
        node = getattr(node, "base", None)
    try:
        import ctypes
        held.append((ctypes.c_char * memoryview(array).nbytes).from_buffer(array))
    except (TypeError, ValueError, BufferError):
        pass                            # read-only or no buffer protocol
    return tuple(held)


def reg_tensor(pd, tensor, access):
    """Register a host torch tensor or numpy array: ``pd.reg_mr`` over its
    bytes, with ``mr.owner = tensor`` keeping the memory alive.

    A numpy array (and the arrays it is a view of) cannot be resized while
    the MR is open, ``refcheck=False`` included (ValueError).  A torch
    tensor offers no such hold: ``tensor.resize_()`` or ``tensor.set_()``
    can still move its storage away from the registered memory, which the
    device would then read and write after it was freed; do neither until
    ``mr.close()``.

    ValueError for a CUDA tensor (use ``ibverbs.cuda.register_tensor``) or
    one on another non-CPU device, an empty or non-contiguous tensor, and for a read-only numpy array
    registered with a write access flag (LOCAL_WRITE, REMOTE_WRITE,
    REMOTE_ATOMIC): the NIC would write into memory Python treats as
    immutable. A read-only array with read-only access is fine.
    """
    if _is_cuda(tensor):
        raise ValueError("reg_tensor registers host memory; register a CUDA tensor with "
                         "ibverbs.cuda.register_tensor")
    device = getattr(getattr(tensor, "device", None), "type", "cpu")
    if device != "cpu":
        raise ValueError(f"reg_tensor registers host (CPU) memory, not a {device} tensor")
    addr, nbytes, readonly = _host_span(tensor)
    if nbytes == 0:
        raise ValueError("cannot register an empty tensor")
    if readonly and int(access) & _WRITE_ACCESS:
        raise ValueError("the array is read-only; register it without LOCAL_WRITE, REMOTE_WRITE "
                         "and REMOTE_ATOMIC access")
    mr = pd.reg_mr(addr, nbytes, access)
    mr.owner = tensor
    if not _is_torch_like(tensor):
        mr._buffer_export = _hold_array(tensor)
    return mr


# --- choosing a GID ----------------------------------------------------------

_IPV4_MAPPED = bytes(10) + b"\xff\xff"


def _family(family: object) -> int | None:
    """socket.AF_INET / AF_INET6 (or "ipv4" / "ipv6") as 4 / 6; None: any."""
    import socket

    if family is None:
        return None
    if isinstance(family, str):
        key = family.lower().replace("_", "").replace("-", "")
        if key in ("ipv4", "inet", "4"):
            return 4
        if key in ("ipv6", "inet6", "6"):
            return 6
    elif family == socket.AF_INET:
        return 4
    elif family == socket.AF_INET6:
        return 6
    raise ValueError(f"family must be socket.AF_INET, socket.AF_INET6, 'ipv4', 'ipv6' "
                     f"or None, not {family!r}")


def _gid_family(raw: bytes) -> int:
    return 4 if raw[:12] == _IPV4_MAPPED else 6


def find_gid(ctx, port: int, *, gid_type=2, family="ipv4", netdev=None):
    # Context.find_gid: its docstring is the spec's (spec/context.yaml), its signature this def.
    # ``Context.find_gid(port, *, gid_type=GIDType.ROCE_V2, family="ipv4",
    # netdev=None) -> (index, Gid)``: the GID table index to connect with
    # (``sgid_index``) and its GID.
    from ._gid import Gid
    from ._gid_table import GID_TYPE_NAMES, sysfs_gid_iter, verbs_gid_entries

    want_family = _family(family)
    link_layer = ctx.query_port(port).link_layer
    ethernet = int(link_layer) == 2                 # IBV_LINK_LAYER_ETHERNET
    rows = sysfs_gid_iter(ctx.name, port, ethernet)
    entries = []                                    # all of them, once none matched
    for entry in rows if rows is not None else verbs_gid_entries(ctx, port):
        entries.append(entry)
        index, raw, kind, dev = entry
        if gid_type is not None and kind != int(gid_type):
            continue
        if want_family is not None and _gid_family(raw) != want_family:
            continue
        if netdev is not None and dev != netdev:
            continue
        return index, Gid(raw)
    wanted = " ".join(part for part in (
        GID_TYPE_NAMES.get(int(gid_type), str(gid_type)) if gid_type is not None else "",
        f"IPv{want_family}" if want_family else "", "GID",
        f"on {netdev}" if netdev else "") if part)
    have = "; ".join(f"{index}: {Gid(raw)} {GID_TYPE_NAMES.get(kind, kind)}"
                     f"{' ' + dev if dev else ''}" for index, raw, kind, dev in entries)
    raise LookupError(f"{ctx.name} port {port} has no {wanted} "
                      f"(it has: {have or 'no GIDs'})")


# --- waiting for completions ---------------------------------------------------

def cq_wait(cq, n: int = 1, timeout: float | None = None, *, raise_on_error: bool = True,
            sleep: bool = False):
    # CQ.wait: its docstring is the spec's (spec/cq.yaml), its signature this def.
    # ``CQ.wait(n=1, timeout=None, *, raise_on_error=True, sleep=False)``:
    # the next ``n`` completions of the CQ, as a list of WC.
    import time

    n = _check_int("n", n, 1, 1 << 31)
    if timeout is not None:
        import numbers

        if not isinstance(timeout, numbers.Real) or isinstance(timeout, bool):
            raise TypeError(f"CQ.wait: timeout must be None or a number of seconds, "
                            f"not {type(timeout).__name__}")
        if not timeout >= 0:        # nan too
            raise ValueError(f"CQ.wait: timeout must be None or >= 0 seconds, got {timeout}")
    channel = cq.channel if sleep else None
    if sleep and channel is None:
        raise ValueError("CQ.wait(sleep=True) needs a CQ created with a completion channel")
    deadline = None if timeout is None else time.monotonic() + timeout
    got: list = []
    armed = False
    while True:
        # never more than is still wanted: the rest stays queued for the
        # caller's next wait or poll (and a huge n allocates nothing huge)
        for wc in cq.poll(min(n - len(got), 64)):
            if raise_on_error and wc.status != 0:
                wc.raise_for_status()
            got.append(wc)
        if len(got) >= n:
            return got
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            from .errors import WaitTimeoutError

            # what did arrive is not lost: err.completions
            raise WaitTimeoutError(f"CQ.wait: {len(got)} of {n} completions arrived within "
                                   f"{timeout} s", got)
        if channel is None:
            # a busy poller that never yields starves a peer process on the
            # same core (Soft-RoCE does its work in the kernel of that core)
            time.sleep(0)
            continue
        if not armed:
            # arm, then poll once more: a completion between the empty poll
            # and req_notify raises no event
            cq.req_notify()
            armed = True
            continue
        from ._cmevents import _readable

        if _readable(channel.fd, remaining):
            event_cq = channel.get_cq_event()
            event_cq.ack_events(1)
            armed = False
