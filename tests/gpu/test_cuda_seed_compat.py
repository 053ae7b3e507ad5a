"""ibverbs.cuda on a real GPU: what a seed (ibverbs 2026.7.18) user relies on.

Run with ``python -m pytest tests/gpu`` on a machine with an NVIDIA GPU,
its driver and a CUDA build of torch; everything skips elsewhere, saying
which of them is missing.  The registration tests also need an RDMA device
(a real NIC, or Soft-RoCE with nvidia_peermem / dma-buf support).
"""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
if not torch.cuda.is_available():
    pytest.skip("torch.cuda.is_available() is False: no CUDA device, driver or CUDA build of torch",
                allow_module_level=True)

import ibverbs as ib  # noqa: E402
import ibverbs.cuda  # noqa: E402,F401


def test_synchronize_waits_for_the_work_that_produced_a_tensor():
    t = torch.zeros(1 << 20, device="cuda")
    t.add_(3)                        # queued on the stream
    ib.cuda.synchronize()            # cuCtxSynchronize: the kernel is done
    assert float(t[-1]) == 3.0


def test_tensor_ptr_len_of_a_host_tensor_is_its_span_as_in_the_seed():
    t = torch.arange(10, dtype=torch.int32)
    assert ib.cuda.tensor_ptr_len(t) == (t.data_ptr(), 40)


def test_tensor_ptr_len_of_a_cuda_tensor():
    t = torch.zeros(16, dtype=torch.float64, device="cuda")
    assert ib.cuda.tensor_ptr_len(t) == (t.data_ptr(), 128)


@pytest.fixture
def pd():
    devices = ib.get_device_list()
    if not devices:
        pytest.skip("no RDMA device (ibv_get_device_list is empty)")
    with devices[0].open() as ctx, ctx.alloc_pd() as pd:
        yield pd


def test_register_tensor_of_a_host_tensor_points_to_reg_tensor(pd):
    with pytest.raises(ValueError, match="ibverbs.reg_tensor"):
        ib.cuda.register_tensor(pd, torch.zeros(16), ib.AccessFlags.LOCAL_WRITE)


def test_gpumr_sge_bounds_as_in_the_seed(pd):
    t = torch.zeros(4096, dtype=torch.uint8, device="cuda")
    try:
        gmr = ib.cuda.register_tensor(pd, t, ib.AccessFlags.LOCAL_WRITE)
    except RuntimeError as exc:
        assert str(exc).startswith("GPUDirect registration failed. dma-buf path: ")
        assert "; reg_mr path: " in str(exc)
        pytest.skip(f"this NIC cannot register GPU memory here: {exc}")
    with gmr:
        assert (gmr.addr, gmr.length, gmr.tensor) == (t.data_ptr(), 4096, t)
        for offset in (-1, 4097):
            with pytest.raises(ValueError, match="outside"):
                gmr.sge(offset=offset)
        with pytest.raises(ValueError, match="exceeds"):
            gmr.sge(2, offset=4095)
        assert gmr.sge(offset=4096).length == 0
        assert gmr.sge().owner is gmr
    assert gmr.closed and gmr.tensor is None
