"""Host-side regression tests of issue 12 (no device needed)."""
import gc
import re
import sys

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


class _NoTruth:
    def __bool__(self):
        raise ZeroDivisionError("bool")


# The constructors' generated parsers (keyword-only arguments) say what
# PyArg_ParseTupleAndKeywords said for "|O$p:WCBuffer" and "O|$p:PostList".
@pytest.mark.parametrize("call, exc, message", [
    (lambda: ib.WCBuffer(4, True), TypeError,
     "WCBuffer() takes at most 1 positional argument (2 given)"),
    (lambda: ib.WCBuffer(4, 5, 6), TypeError, "WCBuffer() takes at most 2 arguments (3 given)"),
    (lambda: ib.WCBuffer(raise_on_error=1, capacity=2, x=3), TypeError,
     "WCBuffer() takes at most 2 keyword arguments (3 given)"),
    (lambda: ib.WCBuffer(4, capacity=4), TypeError,
     "argument for WCBuffer() given by name ('capacity') and position (1)"),
    (lambda: ib.WCBuffer(foo=1), TypeError, "'foo' is an invalid keyword argument for WCBuffer()"),
    (lambda: ib.WCBuffer(0), ValueError, "capacity must be in 1..1048576, got 0"),
    (lambda: ib.WCBuffer(None), TypeError, "capacity must be an int, not NoneType"),
    (lambda: ib.WCBuffer("x", raise_on_error=_NoTruth()), ZeroDivisionError, "bool"),
    (lambda: ib.PostList(), TypeError, "PostList() missing required argument 'wrs' (pos 1)"),
    (lambda: ib.PostList(foo=1), TypeError, "PostList() missing required argument 'wrs' (pos 1)"),
    (lambda: ib.PostList(release_gil=True), TypeError,
     "PostList() missing required argument 'wrs' (pos 1)"),
    (lambda: ib.PostList(ib.SendWR(), True), TypeError,
     "PostList() takes at most 1 positional argument (2 given)"),
    (lambda: ib.PostList(ib.SendWR(), 1, 2), TypeError,
     "PostList() takes at most 2 arguments (3 given)"),
    (lambda: ib.PostList(ib.SendWR(), foo=1), TypeError,
     "'foo' is an invalid keyword argument for PostList()"),
    (lambda: ib.PostList(ib.SendWR(), release_gil=_NoTruth()), ZeroDivisionError, "bool"),
    (lambda: ib.PostList([]), ValueError, "a PostList needs at least one work request"),
])
def test_constructor_arguments_are_refused_as_before(call, exc, message):
    with pytest.raises(exc) as e:
        call()
    assert str(e.value) == message


def test_constructor_arguments_by_keyword_and_defaults():
    assert ib.WCBuffer().capacity == 16 and ib.WCBuffer().raise_on_error is False
    b = ib.WCBuffer(capacity=3, raise_on_error=[1])
    assert (b.capacity, b.raise_on_error) == (3, True)
    p = ib.PostList(wrs=[ib.SendWR(wr_id=1)], release_gil=2)
    assert (len(p), p.release_gil, p.kind) == (1, True, ib.SendWR)
    assert ib.PostList(ib.RecvWR()).release_gil is False
    if sys.version_info < (3, 10):
        # CPython 3.9's PyType_FromSpec drops the signature from a class's
        # doc (3.10 keeps it): inspect finds none there
        assert ib.WCBuffer.__text_signature__ is None
        return
    assert ib.WCBuffer.__text_signature__ == "(capacity=16, *, raise_on_error=False)"
    assert ib.PostList.__text_signature__ == "(wrs, *, release_gil=False)"


# ---- issue 23 ---------------------------------------------------------------------------

class _IteratesNothing(list):
    __iter__ = lambda self: iter(())        # noqa: E731


class _TupleIteratesNothing(tuple):
    __iter__ = lambda self: iter(())        # noqa: E731


class _LongLen(list):
    __len__ = lambda self: 1000             # noqa: E731


class _ShortLen(list):
    __len__ = lambda self: 0                # noqa: E731


def test_postlist_counts_the_requests_it_read_not_the_storage():
    """23.1: a list or tuple subclass whose __iter__ gives nothing made a
    PostList of 0 entries (then posted 128 bytes read from a 16-byte block);
    what __len__ says does not count either: what was read does."""
    for seq in (_IteratesNothing([ib.SendWR()]), _TupleIteratesNothing([ib.RecvWR()])):
        with pytest.raises(ValueError, match="at least one work request"):
            ib.PostList(seq)
    assert len(ib.PostList(_LongLen([ib.SendWR(), ib.SendWR()]))) == 2
    assert len(ib.PostList(_ShortLen([ib.RecvWR(wr_id=5)]))) == 1

    class Gives(list):          # storage of one SendWR, iteration of three RecvWR
        def __iter__(self):
            return iter([ib.RecvWR(wr_id=i) for i in (7, 8, 9)])

    pl = ib.PostList(Gives([ib.SendWR()]))
    assert pl.kind is ib.RecvWR and [e.wr_id for e in pl] == [7, 8, 9]


def test_postlist_entry_imm_data_and_invalidate_rkey_share_their_place():
    """23.6: imm_data of a SEND_WITH_INV or LOCAL_INV entry read and wrote
    its invalidate_rkey, which entries did not show."""
    W = ib.WROpcode
    pl = ib.PostList([ib.SendWR(opcode=W.SEND_WITH_INV, invalidate_rkey=0x1234, imm_data=7),
                      ib.SendWR(opcode=W.LOCAL_INV, invalidate_rkey=0x99),
                      ib.SendWR(opcode=W.SEND_WITH_IMM, imm_data=0x55, invalidate_rkey=3),
                      ib.SendWR(opcode=W.RDMA_WRITE, imm_data=0x66)])
    send_inv, local_inv, with_imm, write = pl
    assert (send_inv.invalidate_rkey, local_inv.invalidate_rkey) == (0x1234, 0x99)
    assert (with_imm.imm_data, write.imm_data) == (0x55, 0x66)
    for entry in (send_inv, local_inv):
        with pytest.raises(AttributeError, match="imm_data is not used by a LOCAL_INV or "
                                                 "SEND_WITH_INV request"):
            entry.imm_data
        with pytest.raises(AttributeError, match="imm_data is not used"):
            entry.imm_data = 1
    for entry in (with_imm, write):
        with pytest.raises(AttributeError, match="invalidate_rkey is not used by a request "
                                                 "other than LOCAL_INV and SEND_WITH_INV"):
            entry.invalidate_rkey
        with pytest.raises(AttributeError, match="invalidate_rkey is not used"):
            entry.invalidate_rkey = 1
    send_inv.invalidate_rkey = 0xABC
    with_imm.imm_data = 0xDEADBEEF
    assert (send_inv.invalidate_rkey, with_imm.imm_data) == (0xABC, 0xDEADBEEF)
    assert local_inv.invalidate_rkey == 0x99            # its own entry only
    with pytest.raises(AttributeError, match="a RecvWR has no invalidate_rkey"):
        ib.PostList([ib.RecvWR()])[0].invalidate_rkey
