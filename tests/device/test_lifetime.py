"""Close, context managers, parents and children, garbage collection."""
import errno
import gc
import random

import numpy as np
import pytest


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
