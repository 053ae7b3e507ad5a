"""GPUDirect RDMA for CUDA tensors (imported explicitly: ``import ibverbs.cuda``).

Imports no torch and links no CUDA: ``libcuda.so.1`` (the driver API, part
of the NVIDIA driver) is loaded with ctypes on the first call that needs it
(``dmabuf_fd``, ``flush_gpudirect_writes``, and so ``register_tensor``).

``register_tensor`` registers a CUDA tensor's memory with the NIC in one of
two ways, tried in this order:

1. dma-buf: ``cuMemGetHandleForAddressRange`` exports the memory as a dma-buf
   fd and ``pd.reg_dmabuf_mr`` registers it (no kernel module needed).
   CUDA exports only ranges aligned to the *host* page size
   (``mmap.PAGESIZE``), so the page-aligned span around the tensor is
   exported and the MR covers the tensor's bytes within it, with the
   tensor's device address as iova.
2. ``pd.reg_mr(device_ptr, nbytes, access)`` when step 1 raises
   (RuntimeError, OSError or VerbsError: an old driver or libibverbs, memory
   that cannot be exported, ...); this needs the ``nvidia_peermem`` module.

``dmabuf_fd`` and ``flush_gpudirect_writes`` act in the calling thread's
current CUDA context; torch makes one current once it has used the device
in that thread (``with torch.cuda.device(d):`` selects one).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading

from ._qp_transitions import _index
from .helpers import _array_interface_span, _is_cuda, _is_torch_like, _torch_span

__all__ = ["GpuMR", "register_tensor", "dmabuf_fd", "tensor_ptr_len", "flush_gpudirect_writes",
           "synchronize", "PAGE_SIZE"]

#: The alignment CUDA requires of an exported dma-buf range (host page size).
PAGE_SIZE = mmap.PAGESIZE

_LIBCUDA = "libcuda.so.1"

# cuda.h values.
_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 0x1
_CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX = 0
_CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER = 100
_CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES = 200
_CUDA_ERROR_INVALID_CONTEXT = 201

# Every function used returns CUresult (an int).
_PROTOTYPES = {
    "cuInit": [ctypes.c_uint],
    "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
    "cuGetErrorString": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
    # (void *handle, CUdeviceptr dptr, size_t size, CUmemRangeHandleType, unsigned long long flags)
    "cuMemGetHandleForAddressRange": [ctypes.POINTER(ctypes.c_int), ctypes.c_ulonglong, ctypes.c_size_t,
                                      ctypes.c_int, ctypes.c_ulonglong],
    # (CUflushGPUDirectRDMAWritesTarget, CUflushGPUDirectRDMAWritesScope)
    "cuFlushGPUDirectRDMAWrites": [ctypes.c_int, ctypes.c_int],
    "cuCtxSynchronize": [],
}
# The CUDA release whose driver first has the function, for error messages.
_SINCE = {"cuMemGetHandleForAddressRange": "11.7", "cuFlushGPUDirectRDMAWrites": "11.3"}

_lib = None  # the loaded libcuda (cuInit done), or None before the first use
_lib_lock = threading.Lock()


def _load_libcuda():
    try:
        lib = ctypes.CDLL(_LIBCUDA)
    except OSError as exc:
        raise RuntimeError(
            f"ibverbs.cuda needs {_LIBCUDA}, the CUDA driver library installed with the NVIDIA "
            f"driver, and could not load it ({exc}); install the NVIDIA driver or put "
            f"{_LIBCUDA} on the library path") from exc
    for name, argtypes in _PROTOTYPES.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
    _check(lib.cuInit(0), "cuInit", lib)
    return lib


def _libcuda():
    """libcuda, loaded and initialised once, on first use."""
    global _lib
    if _lib is None:
        with _lib_lock:
            if _lib is None:
                _lib = _load_libcuda()
    return _lib


def _fn(name: str):
    fn = getattr(_libcuda(), name, None)
    if fn is None:
        raise RuntimeError(f"{_LIBCUDA} has no {name}: the NVIDIA driver is too old "
                           f"(it needs a CUDA {_SINCE.get(name, '')} driver or newer)")
    return fn


def _error_text(res: int, lib) -> str:
    parts = []
    for getter in ("cuGetErrorName", "cuGetErrorString"):
        out = ctypes.c_char_p()
        fn = getattr(lib, getter, None)
        if fn is not None and fn(res, ctypes.pointer(out)) == 0 and out.value:
            parts.append(out.value.decode(errors="replace"))
    parts.append(f"(CUresult {res})")
    return " ".join(parts)


def _check(res: int, what: str, lib=None) -> None:
    if res == 0:
        return
    message = f"{what} failed: {_error_text(res, lib or _lib)}"
    if res == _CUDA_ERROR_INVALID_CONTEXT:
        message += ("; no CUDA context is current in this thread (use the device first, e.g. "
                    "inside `with torch.cuda.device(...)`)")
    raise RuntimeError(message)


def dmabuf_fd(ptr: int, length: int) -> int:
    """Export the device memory ``[ptr, ptr + length)`` as a dma-buf and
    return its fd (the caller closes it with ``os.close``).

    ``ptr`` and ``length`` must be aligned to the host page size
    (``PAGE_SIZE``), else ValueError; a CUDA failure is a RuntimeError
    naming the CUDA error.
    """
    ptr = _index("ptr", ptr)
    length = _index("length", length)
    if ptr < 0 or ptr % PAGE_SIZE:
        raise ValueError(f"dmabuf_fd: ptr {ptr:#x} must be a page-aligned device address "
                         f"(page size {PAGE_SIZE})")
    if length <= 0 or length % PAGE_SIZE:
        raise ValueError(f"dmabuf_fd: length {length} must be positive and page-aligned "
                         f"(a multiple of {PAGE_SIZE})")
    fd = ctypes.c_int(-1)
    res = _fn("cuMemGetHandleForAddressRange")(
        ctypes.pointer(fd), ptr, length, _CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0)
    _check(res, "cuMemGetHandleForAddressRange")
    return fd.value


def flush_gpudirect_writes(*, all_devices: bool = False) -> None:
    """Make the NIC's completed GPUDirect RDMA writes visible to CUDA work
    (``cuFlushGPUDirectRDMAWrites``) in the current CUDA context: to the
    context owning the memory, or to every device with ``all_devices``.

    Call it after the completion or notification of an inbound transfer and
    before launching the CUDA work that reads the data.
    """
    scope = (_CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES if all_devices
             else _CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER)
    res = _fn("cuFlushGPUDirectRDMAWrites")(_CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX, scope)
    _check(res, "cuFlushGPUDirectRDMAWrites")


def synchronize() -> None:
    """Wait for all work of the current CUDA context (``cuCtxSynchronize``),
    e.g. the kernels that produced a tensor before the NIC reads it.

    RuntimeError when libcuda cannot be loaded, or naming the CUDA error
    (no context current in this thread, ...).
    """
    _check(_fn("cuCtxSynchronize")(), "cuCtxSynchronize")


def tensor_ptr_len(t) -> tuple[int, int]:
    """``(data_ptr, nbytes)`` of a contiguous torch tensor, wherever it lives
    (a host tensor too, as in ibverbs 2026.7.18), or of an object with
    ``__cuda_array_interface__``.

    ValueError for a non-contiguous one; TypeError for other types (a numpy
    array among them: register host arrays with ``ibverbs.reg_tensor``).
    """
    if _is_torch_like(t):
        return _torch_span(t)
    cai = getattr(t, "__cuda_array_interface__", None)
    if isinstance(cai, dict):
        ptr, nbytes, _ = _array_interface_span(cai, "CUDA array")
        return ptr, nbytes
    if isinstance(getattr(t, "__array_interface__", None), dict):
        raise TypeError("expected a tensor exposing data_ptr(), not a host array; "
                        "register it with ibverbs.reg_tensor")
    raise TypeError(f"expected a CUDA tensor, not {type(t).__name__}")


def _require_device_memory(t) -> None:
    """register_tensor takes device memory only (ValueError naming reg_tensor)."""
    if _is_torch_like(t) and not _is_cuda(t):
        device = getattr(getattr(t, "device", None), "type", "cpu")
        if device == "cpu":
            raise ValueError("the tensor is in host memory; register it with ibverbs.reg_tensor")
        raise ValueError(f"register_tensor needs a CUDA tensor, not a {device} tensor")
    if (not _is_torch_like(t) and not isinstance(getattr(t, "__cuda_array_interface__", None), dict)
            and isinstance(getattr(t, "__array_interface__", None), dict)):
        raise ValueError("the array is in host memory; register it with ibverbs.reg_tensor")


def _reg_dmabuf_mr(pd, ptr: int, nbytes: int, access):
    start = ptr - ptr % PAGE_SIZE
    end = -(-(ptr + nbytes) // PAGE_SIZE) * PAGE_SIZE
    # dmabuf_fd is looked up in the module's globals at each call, so a
    # replacement (ibverbs.cuda.dmabuf_fd = ...) is used.
    fd = dmabuf_fd(start, end - start)
    try:
        return pd.reg_dmabuf_mr(ptr - start, nbytes, iova=ptr, fd=fd, access=access)
    finally:
        os.close(fd)  # the MR holds its own reference to the dma-buf


def register_tensor(pd, tensor, access) -> GpuMR:
    """Register a contiguous, non-empty CUDA tensor with ``pd``; the returned
    GpuMR retains the tensor until ``close()``, and so does its MR
    (``gmr.mr.owner`` is the tensor, as ``ibverbs.reg_tensor`` does): keeping
    only ``gmr.mr``, or an SGE of it, keeps the device memory alive.

    dma-buf first; when that raises (RuntimeError, OSError, VerbsError) the
    raw device pointer is registered with ``pd.reg_mr(ptr, nbytes, access)``.
    When that fails too: ``RuntimeError("GPUDirect registration failed.
    dma-buf path: ...; reg_mr path: ...")`` (ibverbs 2026.7.18's words) from the
    reg_mr error. A host tensor: ValueError (use ``ibverbs.reg_tensor``).
    """
    _require_device_memory(tensor)
    ptr, nbytes = tensor_ptr_len(tensor)
    if nbytes == 0:
        raise ValueError("cannot register an empty tensor")
    try:
        mr = _reg_dmabuf_mr(pd, ptr, nbytes, access)
    except (RuntimeError, OSError) as dmabuf_error:
        try:
            mr = pd.reg_mr(ptr, nbytes, access)
        except Exception as reg_mr_error:
            raise RuntimeError(f"GPUDirect registration failed. dma-buf path: {dmabuf_error}; "
                               f"reg_mr path: {reg_mr_error}") from reg_mr_error
    # The MR, not only the GpuMR, keeps the memory it covers alive: a caller
    # may keep gmr.mr (or an SGE or RemoteBuffer of it) and drop the GpuMR.
    mr.owner = tensor
    return GpuMR(mr, ptr, nbytes, tensor)


class GpuMR:
    """An MR over device memory, with the device address it covers.

    ``.addr`` is the device virtual address (``mr.addr`` is not meaningful for
    a dma-buf MR), ``.length`` its size, ``.lkey``/``.rkey`` the MR's keys,
    ``.tensor`` the retained tensor (None after ``close()``). ``close()`` is
    idempotent; a context manager closes it on exit. After ``close()``,
    ``.lkey``, ``.rkey`` and ``sge()`` raise the MR's VerbsError (EBADF).
    """

    # A dict: each entry's text is the attribute's docstring (help(), the reference).
    __slots__ = {
        "mr": "The MR (an ibverbs.MR, from reg_dmabuf_mr or reg_mr).",
        "addr": "The tensor's device virtual address (what SGEs and peers use).",
        "length": "The tensor's size in bytes.",
        "tensor": "The retained tensor (None after close()).",
        "__weakref__": None,
    }

    def __init__(self, mr, addr: int, length: int, tensor=None) -> None:
        self.mr = mr
        self.addr = addr
        self.length = length
        self.tensor = tensor

    @property
    def lkey(self) -> int:
        """The MR's local key (32 bits; VerbsError EBADF once closed)."""
        return self.mr.lkey

    @property
    def rkey(self) -> int:
        """The MR's remote key (32 bits): a peer writes or reads the tensor with it and addr."""
        return self.mr.rkey

    @property
    def closed(self) -> bool:
        """True once close() has run."""
        return self.mr.closed

    def sge(self, length=None, offset=0):
        """An SGE over ``length`` bytes (default: to the end) at ``offset``;
        its ``.owner`` is this GpuMR."""
        lkey = self.mr.lkey
        offset = _index("offset", offset)
        # as the seed: a negative offset is outside too; the end is not
        if offset < 0 or offset > self.length:
            raise ValueError(f"offset {offset} is outside the region of {self.length} bytes")
        if length is None:
            length = self.length - offset
        else:
            length = _index("length", length)
            if length < 0:
                raise ValueError(f"length must be non-negative, got {length}")
            if offset + length > self.length:
                raise ValueError(f"offset {offset} + length {length} exceeds the region of "
                                 f"{self.length} bytes")
        from ._ibverbs import SGE

        return SGE(self.addr + offset, length, lkey=lkey)._keepalive(self)

    def remote(self, offset=0, length=None):
        """What a peer needs to RDMA-read or write ``[offset, offset +
        length)`` of the tensor (all of it by default): a
        ``ibverbs.RemoteBuffer`` (addr, rkey, length), like ``MR.remote``."""
        from .helpers import RemoteBuffer

        return RemoteBuffer(self.addr, self.mr.rkey, self.length).slice(offset, length)

    def close(self) -> None:
        """Deregister the MR and let the tensor go (idempotent)."""
        self.mr.close()
        self.tensor = None

    def __enter__(self) -> GpuMR:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return f"<GpuMR addr={self.addr:#x} length={self.length} closed>"
        return f"<GpuMR addr={self.addr:#x} length={self.length} lkey={self.lkey:#x} rkey={self.rkey:#x}>"
