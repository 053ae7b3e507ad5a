"""Low-level Pythonic bindings for libibverbs (RDMA), with GPUDirect support.

The C extension ibverbs._ibverbs is generated from rdma-core's verbs.h (see
spec/ and generator/ in the source tree) and dlopens libibverbs.so.1 at
import.  Enums and helpers are re-exported here lazily, so that
``import ibverbs`` stays cheap.
"""
from __future__ import annotations

from . import _ibverbs
from ._device import Device, get_device_list
from ._gid import Gid
# Every public class and function of the extension.  Which verbs exist
# depends on the rdma-core headers it was generated from (spec/symbols.yaml),
# hence no fixed list here.
from ._ibverbs import *  # noqa: F401,F403
from ._ibverbs import CQ, PD, QP, Context
from ._qp_transitions import reset as _reset, to_init as _to_init, to_rtr as _to_rtr, to_rts as _to_rts
from .errors import CompletionError, VerbsError


def _qp_query(self, attr_mask=0x1FFFFF):
    """query(attr_mask=all) -> (dict, QPCap): ibv_query_qp."""
    attr = self._query(attr_mask)
    return attr._asdict(), attr.cap


_reg_mr_addr = PD.reg_mr


def _pd_reg_mr(self, *args, **kwargs):
    """reg_mr(addr, length, access) -> MR: ibv_reg_mr of [addr, addr+length).
    reg_mr(buffer, access) -> MR: the whole of a writable, C-contiguous Python
    buffer (bytearray, numpy array, mmap, memoryview...); ``mr.owner`` is the
    buffer, kept alive and locked (not resizable, mmap not closable) until
    the MR is closed.  A read-only buffer: TypeError."""
    first = args[0] if args else kwargs.get("buffer", kwargs.get("addr"))
    if "buffer" in kwargs or (args and not isinstance(first, int) and not _is_index(first)):
        from ._buffers import reg_mr
        if "buffer" in kwargs:
            args = (kwargs.pop("buffer"),) + args
        return reg_mr(self, *args, **kwargs, _reg_mr_addr=_reg_mr_addr)
    return _reg_mr_addr(self, *args, **kwargs)


def _is_index(value) -> bool:
    """True for integer-likes (numpy integers): an address, not a buffer."""
    try:
        type(value).__index__(value)
    except (AttributeError, TypeError):
        return False
    return True


# asyncio (ibverbs.aio, imported with asyncio on first use only).
def _cq_wait(self, max_entries=16, *, solicited_only=False):
    """Coroutine: wait for completions (needs a completion channel) and
    return them, 1..max_entries WC; see ibverbs.aio.wait."""
    from .aio import wait
    return wait(self, max_entries, solicited_only=solicited_only)


def _cq_completions(self, max_entries=16, *, solicited_only=False):
    """Async iterator over every completion of the CQ as it arrives
    (``async for wc in cq.completions()``); see ibverbs.aio.completions."""
    from .aio import completions
    return completions(self, max_entries, solicited_only=solicited_only)


def _ctx_async_event(self):
    """Coroutine: the next asynchronous event; see ibverbs.aio.async_event."""
    from .aio import async_event
    return async_event(self)


def _ctx_async_events(self):
    """Async iterator over the asynchronous events; see ibverbs.aio.async_events."""
    from .aio import async_events
    return async_events(self)


CQ.wait = _cq_wait
CQ.completions = _cq_completions
Context.async_event = _ctx_async_event
Context.async_events = _ctx_async_events


# Compositions of verbs written in Python, attached to the generated class.
QP.to_init = _to_init
QP.to_rtr = _to_rtr
QP.to_rts = _to_rts
QP.reset = _reset
QP.query = _qp_query
PD.reg_mr = _pd_reg_mr

# help() and tracebacks show them as the methods they are.
for _cls, _name in ((PD, "reg_mr"), (CQ, "wait"), (CQ, "completions"),
                    (Context, "async_event"), (Context, "async_events")):
    _func = getattr(_cls, _name)
    _func.__name__, _func.__qualname__ = _name, f"{_cls.__name__}.{_name}"
del _cls, _name, _func


def fork_init() -> None:
    """ibv_fork_init(), unless the kernel makes it unneeded.

    Call it before any other verb if the process fork()s while RDMA
    transfers may be in flight.  Where ``is_fork_initialized()`` says
    ``ForkStatus.UNNEEDED`` (Linux >= 5.13 copies pinned DMA pages on
    fork), nothing is done: ibv_fork_init would still mark every registered
    range MADV_DONTFORK, and since Python objects share the heap pages
    around small registered buffers, children would lose those objects and
    crash touching them.  Registered memory should own whole pages anyway
    (numpy arrays, mmap) when fork support is really on (older kernels).
    Raises VerbsError when libibverbs refuses (EINVAL: called too late).
    """
    try:
        if _ibverbs.is_fork_initialized() == 2:      # IBV_FORK_UNNEEDED
            return
    except RuntimeError:                             # rdma-core < 35: unknown
        pass
    _ibverbs.fork_init()


def _create_flow(self, attr):
    from .flow import create_flow
    return create_flow(self, attr)


_create_flow.__doc__ = """create_flow(attr: FlowAttr) -> Flow: attach a steering rule to this QP
(ibv_create_flow; see ibverbs.flow).  Soft-RoCE: VerbsError EOPNOTSUPP."""
QP.create_flow = _create_flow


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("ibverbs")
    except Exception:  # not installed (running from a source tree)
        return "0+unknown"


_ENUMS = ("AccessFlags", "AtomicCap", "DeviceCapFlags", "EventType", "ForkStatus",
          "GIDType", "LinkLayer", "MigState", "MTU", "MWType", "NodeType",
          "PortCapFlags", "PortState", "QPAttrMask", "QPCreateFlags", "QPCreateSendOps", "QPState",
          "QPType", "Rate", "ReregMRFlags", "SendFlags", "SRQAttrMask", "SRQType",
          "TransportType", "WCFlags", "WCOpcode", "WCStatus", "WROpcode",
          "CreateCQWCFlags", "CreateCQAttrFlags", "CQInitAttrMask",
          "WQType", "WQState", "WQFlags", "FlowAttrType", "FlowSpecType", "FlowFlags",
          "CounterDescription", "ReadCountersFlags")
_HELPERS = ("QPInfo", "local_qp_info", "connect_rc", "tensor_addr_len", "reg_tensor")
_FLOW = ("FlowAttr", "FlowSpecEth", "FlowSpecIPv4", "FlowSpecTCPUDP")


def __getattr__(name: str):
    # Enums and helpers cost a few milliseconds to build: only on first use.
    if name in _ENUMS:
        from . import enums
        value = getattr(enums, name)
    elif name in _HELPERS:
        from . import helpers
        value = getattr(helpers, name)
    elif name in _FLOW:
        from . import flow
        value = getattr(flow, name)
    elif name == "__version__":
        value = _version()
    else:
        raise AttributeError(f"module 'ibverbs' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_ENUMS) | set(_HELPERS) | set(_FLOW) | {"__version__"})
