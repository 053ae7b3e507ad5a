"""Connection and registration helpers (pure Python).

``QPInfo`` / ``local_qp_info`` / ``connect_rc`` exchange and apply what two
RC (or UC) QPs need to know about each other; ``tensor_addr_len`` /
``reg_tensor`` register host torch tensors and numpy arrays. Neither numpy
nor torch is imported: tensors are recognised by duck typing.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ._qp_transitions import (_MTU_MAX, _MTU_MIN, _U8, _U16, _U24, _check_int, _init_request, _qp_kind,
                              _rtr_request, _rts_request)

__all__ = ["QPInfo", "local_qp_info", "connect_rc", "tensor_addr_len", "reg_tensor"]

_QPINFO = struct.Struct("!IIH16sBB")  # qp_num, psn, lid, gid, port, mtu: 28 bytes


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
    """

    qp_num: int
    psn: int
    lid: int
    gid: bytes
    port: int
    mtu: int

    # The wire layout, under the name the seed exposed it (not a field: no annotation).
    _STRUCT = _QPINFO

    def __setattr__(self, name: str, value: object) -> None:
        check = _QPINFO_CHECKS.get(name)
        object.__setattr__(self, name, value if check is None else check(value))

    def to_bytes(self) -> bytes:
        return _QPINFO.pack(self.qp_num, self.psn, self.lid, self.gid, self.port, self.mtu)

    @classmethod
    def from_bytes(cls, data) -> QPInfo:
        raw = bytes(memoryview(data))  # TypeError for str and other non-buffers
        if len(raw) != _QPINFO.size:
            raise ValueError(f"QPInfo.from_bytes needs exactly {_QPINFO.size} bytes, got {len(raw)}")
        return cls(*_QPINFO.unpack(raw))


def local_qp_info(qp, port_attr, gid, *, port, psn=0) -> QPInfo:
    """This side's QPInfo: ``qp.qp_num``, ``psn``, ``port_attr.lid``,
    ``bytes(gid)``, ``port`` and ``port_attr.active_mtu``."""
    return QPInfo(qp_num=qp.qp_num, psn=psn, lid=port_attr.lid, gid=gid, port=port,
                  mtu=port_attr.active_mtu)


_RTR_KEYWORDS = ("hop_limit", "min_rnr_timer", "max_dest_rd_atomic", "sl", "traffic_class")


def connect_rc(qp, remote, *, port, sgid_index, access, local_psn=0, mtu=None, **rts_kwargs):
    """Bring an RC (or UC) QP from RESET through INIT and RTR to RTS,
    connected to ``remote`` (a QPInfo).

    ``mtu=None`` takes min(``port``'s active MTU, ``remote.mtu``).  The
    keywords of ``to_rtr`` (``hop_limit``, ``min_rnr_timer``,
    ``max_dest_rd_atomic``, ``sl``, ``traffic_class``) go to the RTR step,
    the others to ``to_rts`` (``timeout``, ``retry_cnt``, ``rnr_retry``,
    ``max_rd_atomic``). Every argument is checked before the QP is
    modified, so a bad one leaves the QP in RESET.

    The QP is driven through its own ``to_init``, ``to_rtr`` and ``to_rts``
    (as the seed did), so a subclass or wrapper providing those is used.
    """
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
    qp.to_rtr(remote, sgid_index, mtu=rtr["path_mtu"], **rtr_kwargs)
    qp.to_rts(local_psn, **rts_kwargs)


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
