"""PD.reg_mr(buffer, access): any writable Python buffer as an MR."""
import gc
import mmap
import sys

import numpy as np
import pytest

from conftest import poll_until


def rdma_write(ib, pair, src, dst_mr, length=None, offset=0):
    """RDMA_WRITE src (a registered Buffer) into dst_mr at offset; wait for it."""
    length = src.mr.length if length is None else length
    pair.qp_a.post_send(ib.SendWR(wr_id=5, sg_list=[src.mr.sge(length)], opcode=ib.WROpcode.RDMA_WRITE,
                                  send_flags=ib.SendFlags.SIGNALED,
                                  remote_addr=dst_mr.addr + offset, rkey=dst_mr.rkey))
    (wc,) = poll_until(pair.cq_a, 1)
    wc.raise_for_status()


def test_rdma_write_lands_in_a_registered_bytearray(ib, pd, rc_pair, make_buffer, access):
    buf = bytearray(256)
    src = make_buffer(64, fill=0x5A)
    with pd.reg_mr(buf, access) as mr:
        assert mr.owner is buf and mr.length == 256
        rdma_write(ib, rc_pair, src, mr, offset=100)
        assert buf[100:164] == b"\x5a" * 64
        assert buf[:100] == bytes(100) and buf[164:] == bytes(92)


def test_a_registered_bytearray_cannot_be_resized_until_close(ib, pd, access):
    buf = bytearray(b"x" * 4096)
    refs = sys.getrefcount(buf)
    mr = pd.reg_mr(buf, access)
    with pytest.raises(BufferError):
        buf.extend(b"more")
    with pytest.raises(BufferError):
        del buf[:10]
    assert len(buf) == 4096
    assert sys.getrefcount(buf) == refs + 2      # mr.owner, and the export's view
    mr.close()
    # the export, its view and the owner went with the registration (the
    # seed's rule: mr.owner is None once closed)
    assert sys.getrefcount(buf) == refs and mr.owner is None
    buf.extend(b"more")
    assert len(buf) == 4100
    del mr
    gc.collect()
    assert sys.getrefcount(buf) == refs


def test_garbage_collected_mr_releases_the_export(ib, pd, access):
    buf = bytearray(1024)
    refs = sys.getrefcount(buf)
    mr = pd.reg_mr(buf, access)
    assert sys.getrefcount(buf) > refs
    del mr
    gc.collect()
    assert sys.getrefcount(buf) == refs
    buf.append(1)


def test_rdma_write_lands_in_a_registered_numpy_array(ib, pd, rc_pair, make_buffer, access):
    arr = np.zeros((4, 8), dtype=np.float64)        # 256 bytes, two dimensions
    src = make_buffer(arr.nbytes)
    src.array[:] = np.arange(32, dtype=np.float64).view(np.uint8)
    with pd.reg_mr(arr, access) as mr:
        assert mr.owner is arr and mr.addr == arr.ctypes.data and mr.length == arr.nbytes
        rdma_write(ib, rc_pair, src, mr)
        assert (arr.ravel() == np.arange(32)).all()


def test_rdma_write_lands_in_a_registered_mmap_which_stays_open(ib, pd, rc_pair, make_buffer, access):
    m = mmap.mmap(-1, 8192)
    src = make_buffer(128, fill=0xC3)
    try:
        mr = pd.reg_mr(m, access)
        rdma_write(ib, rc_pair, src, mr, offset=4096)
        assert m[4096:4096 + 128] == b"\xc3" * 128 and m[:4096] == bytes(4096)
        with pytest.raises(BufferError):
            m.close()                   # unmapping registered memory is refused
        mr.close()
    finally:
        m.close()
    assert m.closed


def test_writable_memoryview_slice_registers_just_that_slice(ib, pd, rc_pair, make_buffer, access):
    buf = bytearray(512)
    view = memoryview(buf)[128:256]
    src = make_buffer(128, fill=7)
    with pd.reg_mr(view, access) as mr:
        assert mr.length == 128
        rdma_write(ib, rc_pair, src, mr)
        view.release()              # the registration holds its own export ...
        with pytest.raises(BufferError):
            buf.append(0)           # ... of the bytearray under the view
    assert buf[128:256] == b"\x07" * 128 and buf[:128] == bytes(128) and buf[256:] == bytes(256)
    buf.append(0)


def test_read_only_buffers_raise_type_error(ib, pd, access):
    ro = np.zeros(16, dtype=np.uint8)
    ro.setflags(write=False)
    for obj in (b"read-only bytes", memoryview(bytearray(64)).toreadonly(), ro):
        with pytest.raises(TypeError, match="read-only"):
            pd.reg_mr(obj, access)


def test_bad_buffers_raise_clean_errors(ib, pd, access):
    with pytest.raises(ValueError, match="contiguous"):
        pd.reg_mr(np.zeros(64, dtype=np.uint8)[::2], access)
    with pytest.raises(ValueError, match="empty"):
        pd.reg_mr(bytearray(), access)
    with pytest.raises(TypeError, match="writable buffer"):
        pd.reg_mr("a string", access)
    with pytest.raises(TypeError):
        pd.reg_mr(bytearray(8))                      # access missing
    buf = bytearray(8)
    with pytest.raises(ValueError):
        pd.reg_mr(buf, 1 << 40)                      # access out of range: nothing registered
    buf.append(0)                                    # ... and the export was released


def test_the_address_form_still_works_with_numpy_integers(ib, pd, access):
    arr = np.zeros(4096, dtype=np.uint8)
    with pd.reg_mr(np.uint64(arr.ctypes.data), np.int64(arr.nbytes), access) as mr:
        assert mr.addr == arr.ctypes.data and mr.owner is None
    with pd.reg_mr(buffer=arr, access=access) as mr:
        assert mr.owner is arr
