"""Low-level Pythonic bindings for libibverbs (RDMA), with GPUDirect support.

The C extension ibverbs._ibverbs is generated from rdma-core's verbs.h (see
spec/ and generator/ in the source tree) and dlopens libibverbs.so.1 at
import.  Enums and helpers are re-exported here lazily, so that
``import ibverbs`` stays cheap.
"""
from __future__ import annotations

try:
    from . import _ibverbs
except ImportError as _exc:          # libibverbs.so.1 missing or too old, or no extension
    from ._no_library import EXIT_NOT_BUILT, exit_if_command, not_built_error
    _not_built = not_built_error(_exc)
    if _not_built is not None:       # a checkout before `make build`: say so, not "circular import"
        exit_if_command(_not_built, EXIT_NOT_BUILT)     # the command: one line, exit status 5
        raise _not_built from None
    exit_if_command(_exc)            # the `ibverbs` command: one line, exit status 3
    raise
from ._device import Device, get_device_list
from ._gid import Gid
# Every public class and function of the extension.  Which verbs exist
# depends on the rdma-core headers it was generated from (spec/symbols.yaml),
# hence no fixed list here.
from ._ibverbs import *  # noqa: F401,F403
from ._cmid import CMID  # the C CMID with the seed's blocking API
from .errors import CompletionError, VerbsError, WaitTimeoutError

# Methods written in Python (QP.to_rtr, PD.reg_mr(buffer, access), CQ.wait,
# Context.find_gid, ...) are declared in the spec (`python:`): the extension
# imports their module on first call, nothing is attached here.


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


_ENUMS = ("AccessFlags", "AtomicCap", "DeviceCapFlags", "EventType", "ForkStatus",
          "GIDType", "LinkLayer", "MigState", "MTU", "MWType", "NodeType",
          "PortCapFlags", "PortState", "QPAttrMask", "QPCreateFlags", "QPCreateSendOps", "QPState",
          "QPType", "Rate", "ReregMRFlags", "SendFlags", "SRQAttrMask", "SRQType",
          "TransportType", "WCFlags", "WCOpcode", "WCStatus", "WROpcode",
          "CreateCQWCFlags", "CreateCQAttrFlags", "CQInitAttrMask",
          "WQType", "WQState", "WQFlags", "FlowAttrType", "FlowSpecType", "FlowFlags",
          "CounterDescription", "ReadCountersFlags", "CompCntrType", "QPAttachCompCntrOp")
_HELPERS = ("QPInfo", "RemoteBuffer", "local_qp_info", "connect_rc", "tensor_addr_len",
            "reg_tensor")
_FLOW = ("FlowAttr", "FlowSpecEth", "FlowSpecIPv4", "FlowSpecTCPUDP")
_LAZY = frozenset(_ENUMS + _HELPERS + _FLOW + ("__version__",))


def __getattr__(name: str):
    # Enums and helpers cost a few milliseconds to build: only on first use.
    if name not in _LAZY:
        raise AttributeError(f"module 'ibverbs' has no attribute {name!r}")
    _bind_lazy_names()
    return globals()[name]


def _bind_lazy_names() -> None:
    """Bind every lazy name at once and drop the module's __getattr__: while
    a module has one, CPython (3.11+) specialises no `ibverbs.X` lookup, which
    costs about 300 instructions per `ib.SendWR` in a loop (bench/host_micro.py)."""
    from . import enums, flow, helpers
    from ._version import __version__
    names = globals()
    for module, group in ((enums, _ENUMS), (helpers, _HELPERS), (flow, _FLOW)):
        for name in group:
            names[name] = getattr(module, name)
    names["__version__"] = __version__
    names.pop("__getattr__", None)


# Everything public, the seed's names (enums, helpers, __version__) among
# them: `from ibverbs import *` resolves the lazy ones through __getattr__.
__all__ = sorted(set(_ibverbs.__all__) | set(_ENUMS) | set(_HELPERS) | set(_FLOW)
                 | {"fork_init", "__version__", "WaitTimeoutError"})


def __dir__():
    return sorted(set(globals()) | set(_ENUMS) | set(_HELPERS) | set(_FLOW) | {"__version__"})
