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
from ._ibverbs import QP
from ._qp_transitions import to_init as _to_init, to_rtr as _to_rtr, to_rts as _to_rts
from .errors import CompletionError, VerbsError


def _qp_query(self, attr_mask=0x1FFFFF):
    """query(attr_mask=all) -> (dict, QPCap): ibv_query_qp."""
    attr = self._query(attr_mask)
    return attr._asdict(), attr.cap


# Compositions of verbs written in Python, attached to the generated class.
QP.to_init = _to_init
QP.to_rtr = _to_rtr
QP.to_rts = _to_rts
QP.query = _qp_query


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
