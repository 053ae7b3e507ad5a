"""Host-side regression tests of issue 12 (no device needed)."""
import gc
import re

import pytest

import ibverbs as ib


def test_unreadable_inline_message_shows_the_range():
    wr = ib.SendWR(opcode=ib.WROpcode.SEND, send_flags=ib.SendFlags.INLINE,
                   sg_list=[ib.SGE(0x10, 8)])
    with pytest.raises(ValueError) as e:
        ib.PostList([wr])
    assert "%" not in str(e.value)
    assert re.search(r"\[0x10, \+8\) is not readable", str(e.value)), str(e.value)


class _Failing:
    def __init__(self, exc):
        self.exc = exc

    def __iter__(self):
        raise self.exc


def test_sg_list_passes_errors_that_are_not_about_its_type():
    with pytest.raises(MemoryError):
        ib.SendWR(sg_list=_Failing(MemoryError()))
    with pytest.raises(KeyError):
        ib.RecvWR(sg_list=_Failing(KeyError("x")))
    with pytest.raises(TypeError, match="sg_list must be a list of SGE"):
        ib.SendWR(sg_list=5)


def test_postlist_union_setter_writes_the_member_of_the_entry_it_finds():
    W = ib.WROpcode
    rdma = ib.SendWR(opcode=W.RDMA_WRITE, sg_list=[ib.SGE(0x1000, 8)], remote_addr=0x2000, rkey=1)
    atomic = ib.SendWR(opcode=W.ATOMIC_FETCH_AND_ADD, sg_list=[ib.SGE(0x1000, 8)],
                       remote_addr=0x3000, rkey=2, compare_add=11)
    pl = ib.PostList([rdma])

    class SwapsTheEntry:
        def __index__(self):
            pl[0] = atomic
            return 5

    pl[0].rkey = SwapsTheEntry()
    assert pl[0].opcode == W.ATOMIC_FETCH_AND_ADD
    assert pl[0].rkey == 5 and pl[0].compare_add == 11 and pl[0].remote_addr == 0x3000


def test_a_cycle_through_a_postlist_entry_is_collected():
    gc.collect()
    before = sum(type(o) is ib.PostList for o in gc.get_objects())
    for _ in range(200):
        s = ib.SGE(0x1000, 8)
        pl = ib.PostList([ib.SendWR(sg_list=[ib.SGE(0x1000, 8)])])
        s._keepalive(pl[0])
        pl[0] = ib.SendWR(sg_list=[s])
    del s, pl
    gc.collect()
    assert sum(type(o) is ib.PostList for o in gc.get_objects()) == before


class _FakeMR:
    owner = None


class _FakePD:
    def reg_mr(self, addr, length, access):
        return _FakeMR()


def test_reg_tensor_holds_a_numpy_array_and_its_base_in_place():
    np = pytest.importorskip("numpy")
    from ibverbs.helpers import reg_tensor
    base = np.zeros(8192, dtype=np.uint8)
    view = base[:4096]
    mr = reg_tensor(_FakePD(), view, ib.AccessFlags.LOCAL_WRITE)
    for array in (view, base):
        with pytest.raises(ValueError):
            array.resize(1 << 20, refcheck=False)
    del mr._buffer_export           # what MR.close() does
    base.resize(1 << 20, refcheck=False)
    ro = np.zeros(16, dtype=np.uint8)
    ro.flags.writeable = False
    mr = reg_tensor(_FakePD(), ro, 0)
    with pytest.raises(ValueError):
        ro.resize(32, refcheck=False)


def test_handle_types_past_the_first_32_are_still_held():
    # Every handle class (subclasses too) is registered the first time an
    # object of it is made; the table once stopped at 32 types, and objects of
    # later types were then not held busy by the calls they were passed to.
    # The 8-object limit of one call shows whether they are held.
    classes = [type(f"PD{i}", (ib.PD,), {}) for i in range(40)]
    objects = [cls() for cls in classes]        # closed handles, one per new type
    with pytest.raises(TypeError, match="more than 7 verbs objects"):
        ib.PD().reg_mr_iova(*objects[-8:])
