"""ibverbs.cuda without a GPU: registration paths with a fake dmabuf_fd and
fake PDs, GpuMR bounds, argument checks, and libcuda handled through fakes
(the real libcuda is never loaded here)."""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import pathlib
import sys
import types

import numpy as np
import pytest
from hypothesis import given, strategies as st

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
try:
    import ibverbs  # noqa: F401  (the real package, once its extension is built)
except ImportError:  # not built here: load the pure-Python modules on their own
    _pkg = types.ModuleType("ibverbs")
    _pkg.__path__ = [str(ROOT / "ibverbs")]
    sys.modules["ibverbs"] = _pkg

import ibverbs.cuda as cuda  # noqa: E402
from ibverbs.errors import VerbsError  # noqa: E402

ORIGINAL_LOADER = cuda._load_libcuda

PAGE = cuda.PAGE_SIZE
BASE = 0x7F00_0000_0000  # a page-aligned "device address"
ACCESS = 0x1 | 0x2


# --- stand-ins and fakes -------------------------------------------------------------

class SGE:
    """Same signature as ibverbs.SGE; records what it was built from."""

    def __init__(self, target, length, lkey=0, offset=0):
        self.target, self.length, self.lkey, self.offset = target, length, lkey, offset
        self.owner = None

    @property
    def addr(self):
        return self.target + self.offset

    def _keepalive(self, owner):
        self.owner = owner
        return self


@pytest.fixture(autouse=True)
def standins(monkeypatch):
    ext = types.ModuleType("ibverbs._ibverbs")
    ext.SGE = SGE
    monkeypatch.setitem(sys.modules, "ibverbs._ibverbs", ext)

    def no_libcuda():
        raise AssertionError("a test loaded the real libcuda")

    monkeypatch.setattr(cuda, "_lib", None)
    monkeypatch.setattr(cuda, "_load_libcuda", no_libcuda)


class FakeMR:
    def __init__(self, kind, lkey=0x100, rkey=0x200):
        self.kind, self._lkey, self._rkey = kind, lkey, rkey
        self.addr = 0  # a dma-buf MR's addr is not the device address
        self.closed = False
        self.close_calls = 0
        self.owner = None

    def _check(self):
        if self.closed:
            raise VerbsError("MR.lkey", errno.EBADF)

    @property
    def lkey(self):
        self._check()
        return self._lkey

    @property
    def rkey(self):
        self._check()
        return self._rkey

    def close(self):
        self.close_calls += 1
        self.closed = True


class FakePD:
    def __init__(self, dmabuf_error=None, reg_mr_error=None):
        self.dmabuf_error, self.reg_mr_error = dmabuf_error, reg_mr_error
        self.dmabuf_calls, self.reg_mr_calls = [], []

    def reg_dmabuf_mr(self, offset, length, iova, fd, access):
        self.dmabuf_calls.append(dict(offset=offset, length=length, iova=iova, fd=fd, access=access))
        os.fstat(fd)  # the fd is open while registering
        if self.dmabuf_error:
            raise self.dmabuf_error
        return FakeMR("dmabuf")

    def reg_mr(self, addr, length, access):
        self.reg_mr_calls.append((addr, length, access))
        if self.reg_mr_error:
            raise self.reg_mr_error
        return FakeMR("reg_mr")


class FakeCudaTensor:
    def __init__(self, ptr=BASE, nbytes=4 * PAGE, contiguous=True, device="cuda"):
        self._ptr, self._nbytes, self._contiguous = ptr, nbytes, contiguous
        self.device = types.SimpleNamespace(type=device, index=0)
        self.is_cuda = device == "cuda"

    def data_ptr(self):
        return self._ptr

    def element_size(self):
        return 1

    def numel(self):
        return self._nbytes

    def is_contiguous(self):
        return self._contiguous


class FakeDmabufFd:
    """Replaces ibverbs.cuda.dmabuf_fd: hands out real fds (a pipe's read
    end) so that closing them can be checked."""

    def __init__(self, error=None):
        self.error = error
        self.calls, self.fds = [], []

    def __call__(self, ptr, length):
        self.calls.append((ptr, length))
        if self.error:
            raise self.error
        r, w = os.pipe()
        os.close(w)
        self.fds.append(r)
        return r


def is_closed(fd):
    try:
        os.fstat(fd)
    except OSError as e:
        return e.errno == errno.EBADF
    os.close(fd)  # clean up, then fail
    return False


@pytest.fixture
def fake_fd(monkeypatch):
    fake = FakeDmabufFd()
    monkeypatch.setattr(cuda, "dmabuf_fd", fake)
    return fake


# --- register_tensor: the dma-buf path -------------------------------------------------

def test_register_tensor_uses_dmabuf_and_closes_the_fd(fake_fd):
    pd = FakePD()
    t = FakeCudaTensor(ptr=BASE, nbytes=2 * PAGE)
    gmr = cuda.register_tensor(pd, t, ACCESS)
    assert fake_fd.calls == [(BASE, 2 * PAGE)]
    (fd,) = fake_fd.fds
    assert pd.dmabuf_calls == [dict(offset=0, length=2 * PAGE, iova=BASE, fd=fd, access=ACCESS)]
    assert pd.reg_mr_calls == []
    assert is_closed(fd)
    assert isinstance(gmr, cuda.GpuMR)
    assert gmr.mr.kind == "dmabuf"
    assert (gmr.addr, gmr.length, gmr.tensor) == (BASE, 2 * PAGE, t)
    assert (gmr.lkey, gmr.rkey, gmr.closed) == (0x100, 0x200, False)


@pytest.mark.parametrize("lead, nbytes, span_pages", [
    (1, 10, 1),                 # inside one page
    (PAGE - 4, 8, 2),           # straddles a page boundary
    (100, PAGE, 2),
    (PAGE - 1, PAGE + 2, 3),
    (0, PAGE + 1, 2),
    (12345, 3 * PAGE, 4),
])
def test_register_tensor_exports_the_page_aligned_span_around_an_unaligned_tensor(fake_fd, lead, nbytes,
                                                                                    span_pages):
    pd = FakePD()
    ptr = BASE + 5 * PAGE + lead
    start = BASE + 5 * PAGE + (lead // PAGE) * PAGE
    gmr = cuda.register_tensor(pd, FakeCudaTensor(ptr=ptr, nbytes=nbytes), ACCESS)
    assert fake_fd.calls == [(start, span_pages * PAGE)]
    call = pd.dmabuf_calls[0]
    assert (call["offset"], call["length"], call["iova"]) == (ptr - start, nbytes, ptr)
    assert (gmr.addr, gmr.length) == (ptr, nbytes)
    assert is_closed(fake_fd.fds[0])


@given(ptr=st.integers(0, 1 << 48), nbytes=st.integers(1, 1 << 24))
def test_dmabuf_span_is_the_smallest_aligned_cover(ptr, nbytes):
    fake = FakeDmabufFd()
    saved = cuda.dmabuf_fd
    cuda.dmabuf_fd = fake
    try:
        pd = FakePD()
        cuda.register_tensor(pd, FakeCudaTensor(ptr=ptr, nbytes=nbytes), ACCESS)
    finally:
        cuda.dmabuf_fd = saved
    (start, length), = fake.calls
    call = pd.dmabuf_calls[0]
    assert start % PAGE == 0 and length % PAGE == 0 and length > 0
    assert start <= ptr < start + PAGE
    assert ptr + nbytes <= start + length < ptr + nbytes + PAGE
    assert (call["offset"], call["length"], call["iova"]) == (ptr - start, nbytes, ptr)
    assert is_closed(fake.fds[0])


def test_register_tensor_looks_dmabuf_fd_up_at_call_time(monkeypatch):
    first, second = FakeDmabufFd(), FakeDmabufFd()
    monkeypatch.setattr(cuda, "dmabuf_fd", first)
    assert cuda.register_tensor(FakePD(), FakeCudaTensor(), ACCESS).mr.kind == "dmabuf"
    monkeypatch.setattr(cuda, "dmabuf_fd", second)
    assert cuda.register_tensor(FakePD(), FakeCudaTensor(), ACCESS).mr.kind == "dmabuf"
    assert len(first.calls) == len(second.calls) == 1


# --- register_tensor: the fallback to reg_mr -------------------------------------------

@pytest.mark.parametrize("error", [
    RuntimeError("cuMemGetHandleForAddressRange failed: CUDA_ERROR_NOT_SUPPORTED"),
    OSError(errno.ENOSYS, "no dma-buf"),
    VerbsError("cuMemGetHandleForAddressRange", errno.EINVAL),
])
def test_register_tensor_falls_back_to_reg_mr_when_dmabuf_fd_fails(monkeypatch, error):
    monkeypatch.setattr(cuda, "dmabuf_fd", FakeDmabufFd(error))
    pd = FakePD()
    t = FakeCudaTensor(ptr=BASE + 3, nbytes=100)
    gmr = cuda.register_tensor(pd, t, ACCESS)
    assert pd.dmabuf_calls == []
    assert pd.reg_mr_calls == [(BASE + 3, 100, ACCESS)]
    assert gmr.mr.kind == "reg_mr"
    assert (gmr.addr, gmr.length, gmr.tensor) == (BASE + 3, 100, t)


@pytest.mark.parametrize("error", [
    VerbsError("ibv_reg_dmabuf_mr", errno.EOPNOTSUPP),
    RuntimeError("the installed libibverbs has no ibv_reg_dmabuf_mr"),
])
def test_register_tensor_falls_back_when_reg_dmabuf_mr_fails_and_still_closes_the_fd(fake_fd, error):
    pd = FakePD(dmabuf_error=error)
    gmr = cuda.register_tensor(pd, FakeCudaTensor(ptr=BASE, nbytes=PAGE), ACCESS)
    assert len(pd.dmabuf_calls) == 1
    assert pd.reg_mr_calls == [(BASE, PAGE, ACCESS)]
    assert gmr.mr.kind == "reg_mr"
    assert is_closed(fake_fd.fds[0])


def test_register_tensor_says_both_paths_failed_as_the_seed(monkeypatch):
    first = RuntimeError("no dma-buf")
    monkeypatch.setattr(cuda, "dmabuf_fd", FakeDmabufFd(first))
    second = VerbsError("ibv_reg_mr", errno.EFAULT)
    pd = FakePD(reg_mr_error=second)
    with pytest.raises(RuntimeError) as info:
        cuda.register_tensor(pd, FakeCudaTensor(), ACCESS)
    assert str(info.value) == (f"GPUDirect registration failed. dma-buf path: no dma-buf; "
                               f"reg_mr path: {second}")
    assert info.value.__cause__ is second


def test_register_tensor_does_not_hide_programming_errors(fake_fd):
    pd = FakePD(dmabuf_error=ValueError("length out of range"))
    with pytest.raises(ValueError, match="out of range"):
        cuda.register_tensor(pd, FakeCudaTensor(), ACCESS)
    assert pd.reg_mr_calls == []
    assert is_closed(fake_fd.fds[0])


# --- register_tensor: what keeps the tensor alive ---------------------------------------

@pytest.mark.parametrize("path", ["dmabuf", "reg_mr"])
def test_register_tensor_s_mr_owns_the_tensor(monkeypatch, fake_fd, path):
    """Keeping only gmr.mr (the GpuMR dropped) keeps the tensor alive, as
    reg_tensor's MR does; tests/device/test_lifetime.py checks it on a real MR."""
    import gc
    import weakref
    if path == "reg_mr":
        monkeypatch.setattr(cuda, "dmabuf_fd", FakeDmabufFd(RuntimeError("no dma-buf")))
    t = FakeCudaTensor()
    gmr = cuda.register_tensor(FakePD(), t, ACCESS)
    mr = gmr.mr
    assert mr.kind == path
    assert mr.owner is t and gmr.tensor is t
    alive = weakref.ref(t)
    del gmr, t
    gc.collect()
    assert alive() is not None and mr.owner is alive()


# --- register_tensor / tensor_ptr_len: what they accept ------------------------------------

@pytest.mark.parametrize("t", [FakeCudaTensor(device="cpu"), np.zeros(16)])
def test_register_tensor_rejects_host_memory(fake_fd, t):
    pd = FakePD()
    with pytest.raises(ValueError, match="ibverbs.reg_tensor"):
        cuda.register_tensor(pd, t, ACCESS)
    assert fake_fd.calls == [] and pd.reg_mr_calls == []


def test_register_tensor_rejects_an_empty_tensor(fake_fd):
    pd = FakePD()
    with pytest.raises(ValueError, match="empty"):
        cuda.register_tensor(pd, FakeCudaTensor(nbytes=0), ACCESS)
    assert fake_fd.calls == [] and pd.reg_mr_calls == []


def test_register_tensor_rejects_a_non_contiguous_tensor(fake_fd):
    with pytest.raises(ValueError, match="contiguous"):
        cuda.register_tensor(FakePD(), FakeCudaTensor(contiguous=False), ACCESS)
    assert fake_fd.calls == []


@pytest.mark.parametrize("obj", [None, 0x1000, b"\x00" * 16, [1]])
def test_register_tensor_rejects_other_types(fake_fd, obj):
    with pytest.raises(TypeError):
        cuda.register_tensor(FakePD(), obj, ACCESS)


def test_tensor_ptr_len_of_a_cuda_tensor():
    assert cuda.tensor_ptr_len(FakeCudaTensor(ptr=BASE + 8, nbytes=24)) == (BASE + 8, 24)


def test_tensor_ptr_len_recognises_cuda_by_device_type():
    t = FakeCudaTensor()
    del t.is_cuda
    assert cuda.tensor_ptr_len(t) == (BASE, 4 * PAGE)


class CudaArray:
    """An object exposing __cuda_array_interface__ (as CuPy / Numba do)."""

    def __init__(self, ptr, shape, typestr="<f4", strides=None):
        self.__cuda_array_interface__ = dict(data=(ptr, False), shape=shape, typestr=typestr,
                                             strides=strides, version=3)


def test_tensor_ptr_len_of_a_cuda_array_interface_object(fake_fd):
    assert cuda.tensor_ptr_len(CudaArray(BASE, (4, 8))) == (BASE, 128)
    with pytest.raises(ValueError, match="C-contiguous"):
        cuda.tensor_ptr_len(CudaArray(BASE, (4, 8), strides=(4, 16)))
    gmr = cuda.register_tensor(FakePD(), CudaArray(BASE + 4, (3,)), ACCESS)
    assert (gmr.addr, gmr.length) == (BASE + 4, 12)


def test_tensor_ptr_len_of_a_host_tensor_is_its_span_as_in_the_seed():
    assert cuda.tensor_ptr_len(FakeCudaTensor(device="cpu", ptr=BASE + 8, nbytes=24)) == (BASE + 8, 24)


def test_tensor_ptr_len_rejects_host_arrays_and_other_types():
    with pytest.raises(TypeError, match="ibverbs.reg_tensor"):
        cuda.tensor_ptr_len(np.arange(3))
    with pytest.raises(TypeError):
        cuda.tensor_ptr_len("tensor")


def test_register_tensor_names_other_devices():
    with pytest.raises(ValueError, match="not a meta tensor"):
        cuda.register_tensor(FakePD(), FakeCudaTensor(device="meta"), ACCESS)


# --- GpuMR -----------------------------------------------------------------------------------

def make_gpumr(addr=BASE + 0x40, length=1000):
    return cuda.GpuMR(FakeMR("dmabuf", lkey=0x11, rkey=0x22), addr, length, tensor=object())


def test_gpumr_attributes():
    mr = FakeMR("x")
    t = object()
    g = cuda.GpuMR(mr, BASE, 64, t)
    assert (g.mr, g.addr, g.length, g.tensor, g.lkey, g.rkey, g.closed) == (mr, BASE, 64, t, 0x100, 0x200, False)
    assert cuda.GpuMR(mr, BASE, 64).tensor is None


def test_gpumr_sge_covers_the_whole_region_at_the_device_address():
    g = make_gpumr()
    sge = g.sge()
    assert (sge.addr, sge.length, sge.lkey) == (BASE + 0x40, 1000, 0x11)
    assert sge.owner is g


@pytest.mark.parametrize("length, offset, expected", [
    (None, 10, (BASE + 0x40 + 10, 990)), (5, 0, (BASE + 0x40, 5)), (5, 995, (BASE + 0x40 + 995, 5)),
    (None, 999, (BASE + 0x40 + 999, 1)), (0, 3, (BASE + 0x40 + 3, 0)), (1000, 0, (BASE + 0x40, 1000)),
])
def test_gpumr_sge_offset_and_length(length, offset, expected):
    g = make_gpumr()
    sge = g.sge(length, offset)
    assert (sge.addr, sge.length) == expected
    assert g.sge(length=length, offset=offset).owner is g


@pytest.mark.parametrize("offset", [-1, -(1 << 40), 1001, 1 << 40])
def test_gpumr_sge_offset_outside_the_region_negative_included(offset):
    with pytest.raises(ValueError, match="outside"):
        make_gpumr().sge(offset=offset)
    with pytest.raises(ValueError, match="outside"):
        make_gpumr().sge(0, offset)


def test_gpumr_sge_at_the_end_of_the_region_is_empty_as_in_the_seed():
    sge = make_gpumr().sge(offset=1000)
    assert (sge.addr, sge.length) == (BASE + 0x40 + 1000, 0)


@pytest.mark.parametrize("length, offset", [(1001, 0), (2, 999), (1 << 33, 0)])
def test_gpumr_sge_range_beyond_the_region(length, offset):
    with pytest.raises(ValueError, match="exceeds"):
        make_gpumr().sge(length, offset)


def test_gpumr_sge_negative_length():
    with pytest.raises(ValueError, match="non-negative"):
        make_gpumr().sge(-1)


def test_gpumr_sge_rejects_non_integers():
    with pytest.raises(TypeError):
        make_gpumr().sge(offset=1.5)
    with pytest.raises(TypeError):
        make_gpumr().sge("10")


def test_gpumr_close_is_idempotent_and_drops_the_tensor():
    g = make_gpumr()
    g.close()
    assert g.closed and g.tensor is None
    g.close()
    assert g.closed
    assert g.mr.closed


def test_gpumr_after_close_raises_verbs_error():
    g = make_gpumr()
    g.close()
    for use in (lambda: g.lkey, lambda: g.rkey, lambda: g.sge()):
        with pytest.raises(VerbsError) as info:
            use()
        assert info.value.errno == errno.EBADF
    assert "closed" in repr(g)


def test_gpumr_is_a_context_manager():
    g = make_gpumr()
    with g as entered:
        assert entered is g and not g.closed
        assert "lkey=0x11" in repr(g)
    assert g.closed and g.tensor is None


# --- dmabuf_fd argument checks (no libcuda needed) --------------------------------------------

@pytest.mark.parametrize("ptr", [1, PAGE - 1, PAGE + 8, BASE + 1, -PAGE])
def test_dmabuf_fd_rejects_an_unaligned_pointer(ptr):
    with pytest.raises(ValueError, match="page-aligned"):
        cuda.dmabuf_fd(ptr, PAGE)


@pytest.mark.parametrize("length", [0, -PAGE, 1, PAGE - 1, PAGE + 1])
def test_dmabuf_fd_rejects_a_bad_length(length):
    with pytest.raises(ValueError, match="positive and page-aligned"):
        cuda.dmabuf_fd(BASE, length)


@pytest.mark.parametrize("ptr, length", [(1.0, PAGE), (BASE, "4096"), (None, PAGE)])
def test_dmabuf_fd_rejects_non_integers(ptr, length):
    with pytest.raises(TypeError):
        cuda.dmabuf_fd(ptr, length)


# --- libcuda through fakes -----------------------------------------------------------------------

ERRORS = {1: (b"CUDA_ERROR_INVALID_VALUE", b"invalid argument"),
          100: (b"CUDA_ERROR_NO_DEVICE", b"no CUDA-capable device is detected"),
          201: (b"CUDA_ERROR_INVALID_CONTEXT", b"invalid device context")}


_CU_FUNCTIONS = ("cuInit", "cuGetErrorName", "cuGetErrorString", "cuMemGetHandleForAddressRange",
                 "cuFlushGPUDirectRDMAWrites", "cuCtxSynchronize")


class FakeLibcuda:
    """Stands in for the ctypes CDLL of libcuda.so.1."""

    def __init__(self, init_result=0, handle_result=0, flush_result=0, fd=42, missing=(),
                 sync_result=0):
        self.init_result, self.handle_result, self.flush_result, self.fd = (
            init_result, handle_result, flush_result, fd)
        self.sync_result = sync_result
        self.calls = []
        for name in _CU_FUNCTIONS:  # as plain callables, which take .argtypes like ctypes functions
            setattr(self, name, functools.partial(getattr(type(self), name), self))
        for name in missing:
            setattr(self, name, None)

    def cuInit(self, flags):
        self.calls.append(("cuInit", flags))
        return self.init_result

    def cuGetErrorName(self, res, out):
        if res not in ERRORS:
            return 1
        out.contents.value = ERRORS[res][0]
        return 0

    def cuGetErrorString(self, res, out):
        if res not in ERRORS:
            return 1
        out.contents.value = ERRORS[res][1]
        return 0

    def cuMemGetHandleForAddressRange(self, handle, ptr, size, handle_type, flags):
        self.calls.append(("cuMemGetHandleForAddressRange", ptr, size, handle_type, flags))
        if self.handle_result == 0:
            handle.contents.value = self.fd
        return self.handle_result

    def cuFlushGPUDirectRDMAWrites(self, target, scope):
        self.calls.append(("cuFlushGPUDirectRDMAWrites", target, scope))
        return self.flush_result

    def cuCtxSynchronize(self):
        self.calls.append(("cuCtxSynchronize",))
        return self.sync_result


def test_dmabuf_fd_calls_cuMemGetHandleForAddressRange_for_a_dmabuf_fd(monkeypatch):
    lib = FakeLibcuda(fd=37)
    monkeypatch.setattr(cuda, "_lib", lib)
    assert cuda.dmabuf_fd(BASE, 2 * PAGE) == 37
    # CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD == 1, flags 0
    assert lib.calls == [("cuMemGetHandleForAddressRange", BASE, 2 * PAGE, 1, 0)]


def test_dmabuf_fd_reports_the_cuda_error(monkeypatch):
    monkeypatch.setattr(cuda, "_lib", FakeLibcuda(handle_result=1))
    with pytest.raises(RuntimeError) as info:
        cuda.dmabuf_fd(BASE, PAGE)
    msg = str(info.value)
    assert "cuMemGetHandleForAddressRange" in msg
    assert "CUDA_ERROR_INVALID_VALUE" in msg and "invalid argument" in msg


def test_a_cuda_error_without_a_description_still_names_the_code(monkeypatch):
    monkeypatch.setattr(cuda, "_lib", FakeLibcuda(handle_result=999))
    with pytest.raises(RuntimeError, match="CUresult 999"):
        cuda.dmabuf_fd(BASE, PAGE)


@pytest.mark.parametrize("all_devices, scope", [(False, 100), (True, 200)])
def test_flush_gpudirect_writes_scope(monkeypatch, all_devices, scope):
    lib = FakeLibcuda()
    monkeypatch.setattr(cuda, "_lib", lib)
    cuda.flush_gpudirect_writes(all_devices=all_devices)
    # CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX == 0; TO_OWNER 100, TO_ALL_DEVICES 200
    assert lib.calls == [("cuFlushGPUDirectRDMAWrites", 0, scope)]


def test_flush_gpudirect_writes_default_and_keyword_only(monkeypatch):
    lib = FakeLibcuda()
    monkeypatch.setattr(cuda, "_lib", lib)
    cuda.flush_gpudirect_writes()
    assert lib.calls == [("cuFlushGPUDirectRDMAWrites", 0, 100)]
    with pytest.raises(TypeError):
        cuda.flush_gpudirect_writes(True)


def test_flush_gpudirect_writes_without_a_context_says_so(monkeypatch):
    monkeypatch.setattr(cuda, "_lib", FakeLibcuda(flush_result=201))
    with pytest.raises(RuntimeError, match="CUDA_ERROR_INVALID_CONTEXT.*context is current"):
        cuda.flush_gpudirect_writes()


def test_an_old_driver_without_the_function_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(cuda, "_lib", FakeLibcuda(missing=("cuFlushGPUDirectRDMAWrites",
                                                           "cuMemGetHandleForAddressRange")))
    with pytest.raises(RuntimeError, match="too old.*11.3"):
        cuda.flush_gpudirect_writes()
    with pytest.raises(RuntimeError, match="too old.*11.7"):
        cuda.dmabuf_fd(BASE, PAGE)


# --- loading libcuda -------------------------------------------------------------------------------

@pytest.fixture
def real_loader(monkeypatch):
    """Undo the autouse guard: the module's own loader runs, with the library
    name or ctypes.CDLL replaced by the test."""
    monkeypatch.setattr(cuda, "_load_libcuda", ORIGINAL_LOADER)


def test_missing_libcuda_is_a_clear_runtime_error(monkeypatch, real_loader):
    monkeypatch.setattr(cuda, "_LIBCUDA", "libcuda-ibverbs-test-missing.so.1")
    for call in (lambda: cuda.dmabuf_fd(BASE, PAGE), lambda: cuda.flush_gpudirect_writes()):
        with pytest.raises(RuntimeError) as info:
            call()
        msg = str(info.value)
        assert "libcuda-ibverbs-test-missing.so.1" in msg and "NVIDIA driver" in msg
        assert isinstance(info.value.__cause__, OSError)
    assert cuda._lib is None  # a failed load is not cached


def test_synchronize_calls_cuCtxSynchronize(monkeypatch):
    lib = FakeLibcuda()
    monkeypatch.setattr(cuda, "_lib", lib)
    assert cuda.synchronize() is None
    assert lib.calls == [("cuCtxSynchronize",)]


def test_synchronize_reports_the_cuda_error(monkeypatch):
    monkeypatch.setattr(cuda, "_lib", FakeLibcuda(sync_result=201))
    with pytest.raises(RuntimeError, match="cuCtxSynchronize failed: CUDA_ERROR_INVALID_CONTEXT"):
        cuda.synchronize()


def test_synchronize_without_libcuda_is_a_clean_runtime_error(monkeypatch, real_loader):
    monkeypatch.setattr(cuda, "_LIBCUDA", "libcuda-ibverbs-test-missing.so.1")
    with pytest.raises(RuntimeError, match="libcuda-ibverbs-test-missing.so.1"):
        cuda.synchronize()


def test_missing_libcuda_makes_register_tensor_fall_back_to_reg_mr(monkeypatch, real_loader):
    monkeypatch.setattr(cuda, "_LIBCUDA", "libcuda-ibverbs-test-missing.so.1")
    pd = FakePD()
    gmr = cuda.register_tensor(pd, FakeCudaTensor(ptr=BASE, nbytes=PAGE), ACCESS)
    assert pd.reg_mr_calls == [(BASE, PAGE, ACCESS)] and gmr.mr.kind == "reg_mr"


def test_libcuda_is_loaded_once_and_initialised(monkeypatch, real_loader):
    loads = []
    lib = FakeLibcuda()

    def cdll(name):
        loads.append(name)
        return lib

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    cuda.flush_gpudirect_writes()
    cuda.dmabuf_fd(BASE, PAGE)
    assert loads == ["libcuda.so.1"]
    assert lib.calls[0] == ("cuInit", 0)
    assert [c[0] for c in lib.calls].count("cuInit") == 1
    assert lib.cuInit.argtypes == [ctypes.c_uint] and lib.cuInit.restype is ctypes.c_int
    assert lib.cuMemGetHandleForAddressRange.argtypes[0] == ctypes.POINTER(ctypes.c_int)


def test_a_failing_cuInit_is_reported_and_not_cached(monkeypatch, real_loader):
    lib = FakeLibcuda(init_result=100)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: lib)
    with pytest.raises(RuntimeError, match="cuInit failed: CUDA_ERROR_NO_DEVICE"):
        cuda.flush_gpudirect_writes()
    assert cuda._lib is None
