"""ibverbs.cuda against the real CUDA driver: dma-buf export, flushes, contexts.

These need an NVIDIA GPU, its driver and a CUDA build of torch, and no RDMA
device: they check what ibverbs.cuda asks of libcuda.so.1. Everything skips
elsewhere, saying what is missing. Run with ``python -m pytest tests/gpu``.
"""
from __future__ import annotations

import os
import threading

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
if not torch.cuda.is_available():
    pytest.skip("torch.cuda.is_available() is False: no CUDA device, driver or CUDA build of torch",
                allow_module_level=True)

import ibverbs.cuda as ibc  # noqa: E402

PAGE = ibc.PAGE_SIZE


def _page_span(ptr: int, nbytes: int) -> tuple[int, int]:
    start = ptr - ptr % PAGE
    end = -(-(ptr + nbytes) // PAGE) * PAGE
    return start, end - start


def test_dmabuf_fd_exports_the_page_span_of_a_tensor_as_a_dmabuf():
    t = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    start, length = _page_span(*ibc.tensor_ptr_len(t))
    fd = ibc.dmabuf_fd(start, length)
    try:
        assert fd >= 0
        assert os.fstat(fd).st_size == length
        assert "dmabuf" in os.readlink(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def test_dmabuf_fd_of_a_slice_exports_the_pages_around_it():
    t = torch.zeros(3 * PAGE, dtype=torch.uint8, device="cuda")
    ptr, nbytes = ibc.tensor_ptr_len(t[PAGE + 7: 2 * PAGE + 9])
    assert (ptr % PAGE, nbytes) == (7, PAGE + 2)
    start, length = _page_span(ptr, nbytes)
    fd = ibc.dmabuf_fd(start, length)
    try:
        assert os.fstat(fd).st_size == length == 2 * PAGE
    finally:
        os.close(fd)


def test_dmabuf_fd_of_host_memory_names_the_cuda_error():
    host = torch.zeros(3 * PAGE, dtype=torch.uint8)
    inside = -(-host.data_ptr() // PAGE) * PAGE  # a whole page of the host tensor
    with pytest.raises(RuntimeError, match="cuMemGetHandleForAddressRange failed: CUDA_ERROR"):
        ibc.dmabuf_fd(inside, PAGE)


def test_dmabuf_fd_checks_alignment_before_calling_cuda():
    t = torch.zeros(2 * PAGE, dtype=torch.uint8, device="cuda")
    ptr, _ = ibc.tensor_ptr_len(t)
    with pytest.raises(ValueError, match="page-aligned"):
        ibc.dmabuf_fd(ptr + 1, PAGE)
    with pytest.raises(ValueError, match="positive and page-aligned"):
        ibc.dmabuf_fd(ptr - ptr % PAGE, PAGE + 1)


def test_flush_gpudirect_writes_in_the_current_context_and_to_all_devices():
    torch.zeros(1, device="cuda")  # makes torch's primary context current here
    ibc.flush_gpudirect_writes()
    ibc.flush_gpudirect_writes(all_devices=True)


def test_flush_in_a_thread_without_a_context_says_how_to_get_one():
    torch.zeros(1, device="cuda")
    errors: list[BaseException] = []

    def flush() -> None:
        try:
            ibc.flush_gpudirect_writes()
        except BaseException as exc:  # noqa: BLE001 - collected for the main thread
            errors.append(exc)

    worker = threading.Thread(target=flush)
    worker.start()
    worker.join()
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
    assert "CUDA_ERROR_INVALID_CONTEXT" in str(errors[0])
    assert "no CUDA context is current" in str(errors[0])


def test_tensor_ptr_len_refuses_a_non_contiguous_cuda_tensor():
    t = torch.zeros(8, 8, device="cuda")
    with pytest.raises(ValueError, match="contiguous"):
        ibc.tensor_ptr_len(t.t())


def test_tensor_ptr_len_of_a_cuda_array_interface_object():
    cupy = pytest.importorskip("cupy", reason="cupy is not installed")
    a = cupy.zeros(1 << 16, dtype=cupy.uint8)
    assert ibc.tensor_ptr_len(a) == (a.data.ptr, 1 << 16)
    start, length = _page_span(a.data.ptr, 1 << 16)
    os.close(ibc.dmabuf_fd(start, length))
