"""Memory registration: MRs, SGEs over them, memory windows."""
import ctypes
import errno
import mmap

import numpy as np
import pytest


def test_reg_mr_exposes_keys_and_range(ib, pd, access):
    buf = np.zeros(8192, dtype=np.uint8)
    with pd.reg_mr(buf.ctypes.data, buf.nbytes, access) as mr:
        assert mr.addr == buf.ctypes.data and mr.length == 8192
        assert mr.lkey != 0 and mr.rkey != 0
        assert mr.pd is pd and mr.owner is None
    with pytest.raises(ib.VerbsError) as exc:
        mr.lkey
    assert exc.value.errno == errno.EBADF


@pytest.mark.parametrize("addr,length", [(0x1000, 0), (0x1000, -1), (1 << 64, 4096), (-1, 4096)])
def test_reg_mr_checks_ranges(pd, access, addr, length):
    with pytest.raises(ValueError):
        pd.reg_mr(addr, length, access)


def test_reg_mr_of_unmapped_memory_raises_efault(ib, pd, access):
    m = mmap.mmap(-1, 4096)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    del m  # unmapped now (the address stays a plain int)
    import gc
    gc.collect()
    with pytest.raises(ib.VerbsError) as exc:
        pd.reg_mr(addr, 4096, access)
    assert exc.value.errno in (errno.EFAULT, errno.ENOMEM)


def test_reg_dmabuf_mr_with_a_bad_fd_raises(ib, pd, access):
    if "ibv_reg_dmabuf_mr" in ib._ibverbs._missing_symbols():   # rdma-core < 34
        with pytest.raises(RuntimeError, match="ibv_reg_dmabuf_mr is unavailable"):
            pd.reg_dmabuf_mr(0, 4096, 0, -1, access)
        assert not ib._ibverbs._has_dmabuf()
        return
    with pytest.raises(ib.VerbsError):
        pd.reg_dmabuf_mr(0, 4096, 0, -1, access)


def test_sge_from_mr_takes_address_and_key_and_checks_the_range(ib, make_buffer):
    b = make_buffer(4096)
    sge = b.mr.sge()
    assert (sge.addr, sge.length, sge.lkey) == (b.addr, 4096, b.mr.lkey)
    assert sge.owner is b.mr
    part = b.mr.sge(100, offset=10)
    assert (part.addr, part.length) == (b.addr + 10, 100)
    with pytest.raises(ValueError, match="exceeds"):
        ib.SGE(b.mr, 4000, offset=100)
    with pytest.raises(ValueError, match="non-negative"):
        ib.SGE(b.mr, 10, offset=-1)
    with pytest.raises(ValueError, match=r"2\*\*32"):
        ib.SGE(0x1000, 2**32)


def test_reg_tensor_keeps_the_array_alive(ib, pd, access):
    arr = np.arange(1024, dtype=np.int32)
    mr = ib.reg_tensor(pd, arr, access)
    assert mr.owner is arr and mr.length == arr.nbytes and mr.addr == arr.ctypes.data
    mr.close()


def test_alloc_null_mr_is_unsupported_or_usable(ib, pd):
    try:
        mr = pd.alloc_null_mr()
    except ib.VerbsError as exc:
        assert exc.errno in (errno.EOPNOTSUPP, errno.ENOSYS)
    else:
        mr.close()


def test_memory_windows_allocate_and_close(ib, pd):
    try:
        mw = pd.alloc_mw(ib.MWType.TYPE_2)
    except ib.VerbsError as exc:     # rxe of rdma-core < 35 has no memory windows
        assert exc.errno == errno.EOPNOTSUPP
        pytest.skip("this provider has no memory windows")
    with mw:
        assert mw.rkey != 0 and mw.pd is pd


def test_rereg_mr_changes_access_or_reports_it_unsupported(ib, pd, make_buffer):
    import errno
    b = make_buffer(4096)
    try:
        b.mr.rereg_mr(ib.ReregMRFlags.CHANGE_ACCESS, access=ib.AccessFlags.LOCAL_WRITE)
    except ib.VerbsError as exc:   # rxe has no rereg_mr
        assert exc.errno == errno.EOPNOTSUPP
    assert b.mr.lkey != 0
    with pytest.raises(ValueError, match="another PD"):
        b.mr.rereg_mr(ib.ReregMRFlags.CHANGE_PD, pd=pd)
