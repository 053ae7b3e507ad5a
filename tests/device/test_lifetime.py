"""Close, context managers, parents and children, garbage collection."""
import errno
import gc
import random

import numpy as np
import pytest

from conftest import in_thread, paused_call, poll_until, resume


def test_closing_a_parent_with_children_raises_and_keeps_everything_usable(ib, ctx, access):
    pd = ctx.alloc_pd()
    buf = np.zeros(4096, dtype=np.uint8)
    mr = pd.reg_mr(buf.ctypes.data, 4096, access)
    for parent in (pd, ctx):
        with pytest.raises(ib.VerbsError) as exc:
            parent.close()
        assert exc.value.errno == errno.EBUSY
    assert mr.lkey and not pd.closed and not ctx.closed
    mr.close()
    pd.close()
    assert pd.closed


def test_closed_objects_raise_ebadf_and_close_twice_is_harmless(ib, ctx):
    pd = ctx.alloc_pd()
    pd.close()
    pd.close()
    with pytest.raises(ib.VerbsError) as exc:
        pd.reg_mr(0x1000, 4096, 0)
    assert exc.value.errno == errno.EBADF
    with pytest.raises(ib.VerbsError):
        pd.handle
    with pytest.raises(ib.VerbsError):
        with pd:
            pass


def test_a_close_during_another_threads_close_waits_for_its_outcome(ib, ctx, pd):
    """The first close() destroys with the GIL released; until it returns
    the object is not closed (its parents still count it), so a second
    close() in another thread must not return early."""
    cq = ctx.create_cq(8)
    qp = pd.create_qp(ib.QPInitAttr(cq, cq))
    first, first_box, paused = paused_call(qp.close)
    try:
        assert paused
        second, second_box = in_thread(qp.close)
        second.join(0.5)
        assert second.is_alive(), f"the second close() returned early: {second_box}"
        with pytest.raises(ib.VerbsError) as exc:
            cq.close()                      # the QP is not closed yet
        assert exc.value.errno == errno.EBUSY
    finally:
        assert resume(first, first_box) == {"result": None}
    second.join(10)
    assert not second.is_alive() and second_box == {"result": None}
    assert qp.closed
    cq.close()                              # the QP is gone from its parents


def test_a_cq_in_use_by_a_qp_cannot_be_closed(ib, pd, cq):
    qp = pd.create_qp(ib.QPInitAttr(cq, cq))
    with pytest.raises(ib.VerbsError) as exc:
        cq.close()
    assert exc.value.errno == errno.EBUSY
    qp.close()
    cq.close()


def test_children_keep_parents_alive(ib, device_names, access):
    from conftest import open_device
    ctx = open_device(ib, device_names[0])
    pd = ctx.alloc_pd()
    cq = ctx.create_cq(8)
    qp = pd.create_qp(ib.QPInitAttr(cq, cq))
    del ctx, pd, cq
    gc.collect()
    assert qp.pd.context.query_port(1).state == ib.PortState.ACTIVE
    assert qp.state == ib.QPState.RESET


@pytest.mark.parametrize("seed", range(5))
def test_dropping_an_object_graph_in_any_order_frees_it(ib, device_names, access, gid_index, port, seed):
    from conftest import open_device
    rng = random.Random(seed)
    ctx = open_device(ib, device_names[0])
    pd = ctx.alloc_pd()
    ch = ctx.create_comp_channel()
    cq = ctx.create_cq(8, channel=ch)
    srq = pd.create_srq()
    qp = pd.create_qp(ib.QPInitAttr(cq, cq, srq=srq))
    buf = np.zeros(4096, dtype=np.uint8)
    mr = ib.reg_tensor(pd, buf, access)
    ah = pd.create_ah(ib.AHAttr(dgid=ctx.query_gid(port, gid_index), sgid_index=gid_index,
                                port_num=port, is_global=1))
    objs = [ctx, pd, ch, cq, srq, qp, mr, ah]
    del ctx, pd, ch, cq, srq, qp, mr, ah
    rng.shuffle(objs)
    while objs:
        objs.pop()
        gc.collect()


def test_mr_owner_is_released_with_the_mr(ib, pd, access):
    import weakref

    class Holder:
        pass
    h = Holder()
    h.buf = np.zeros(4096, dtype=np.uint8)
    mr = pd.reg_mr(h.buf.ctypes.data, 4096, access)
    mr.owner = h
    h.mr = mr           # a cycle through the owner
    ref = weakref.ref(h)
    del h, mr
    gc.collect()
    assert ref() is None


def test_register_tensor_s_mr_keeps_the_tensor_alive_without_the_gpumr(ib, pd, access, rc_pair,
                                                                       make_buffer, monkeypatch):
    """ibverbs.cuda.register_tensor's MR owns the tensor (as reg_tensor's):
    a caller that keeps gmr.mr and drops the GpuMR and the tensor still has
    the memory registered alive, and an RDMA write through that MR lands in
    it.  No GPU here: the "tensor" is host pages shown through
    __cuda_array_interface__ (as CuPy shows device memory), and the dma-buf
    export is refused, so register_tensor takes its pd.reg_mr path on a real MR."""
    import weakref

    import ibverbs.cuda as cuda

    def no_dmabuf(ptr, length):
        raise RuntimeError("no dma-buf export without a GPU")
    monkeypatch.setattr(cuda, "dmabuf_fd", no_dmabuf)

    class DeviceArray:
        def __init__(self, n):
            self.mem = np.zeros(n, dtype=np.uint8)
            self.__cuda_array_interface__ = dict(data=(self.mem.ctypes.data, False), shape=(n,),
                                                 typestr="|u1", version=3)
    t = DeviceArray(4096)
    alive = weakref.ref(t)
    gmr = cuda.register_tensor(pd, t, access)
    mr, addr = gmr.mr, gmr.addr
    try:
        del gmr, t
        gc.collect()
        assert alive() is not None, "the tensor was freed while its MR is registered"
        assert mr.owner is alive()
        src = make_buffer(4096, fill=0xC3)
        rc_pair.qp_a.post_send(ib.SendWR(sg_list=[src.mr.sge()], opcode=ib.WROpcode.RDMA_WRITE,
                                         send_flags=ib.SendFlags.SIGNALED, remote_addr=addr,
                                         rkey=mr.rkey))
        (wc,) = poll_until(rc_pair.cq_a, 1)
        assert wc.status == ib.WCStatus.SUCCESS
        assert bytes(alive().mem) == b"\xc3" * 4096
    finally:
        mr.close()
    gc.collect()
    assert alive() is None, "closing the MR releases the tensor"
