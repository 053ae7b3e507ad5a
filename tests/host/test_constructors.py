"""The constructors of the types users build per message (SGE, SendWR,
RecvWR: spec/datapath/records.yaml `vectorcall: true`).  On a target with
3.14's Py_tp_vectorcall (cp314-abi3: spec/targets `slots:`) `SendWR(...)` runs through
the generated vectorcall function; `type.__call__(SendWR, ...)` always
runs through tp_new and tp_init, as every call does on the other targets.
Both ways must make the same objects and raise the same exceptions with
the same messages, and subclasses keep what type.__call__ gives them: their
own __init__ runs, and without one the base's checks do."""
from __future__ import annotations

import ctypes
import sys
import types

import pytest

import ibverbs as ib
from ibverbs import _ibverbs

#: the targets whose SGE, SendWR and RecvWR are called through
#: Py_tp_vectorcall (generator/targets.py: Target.type_vectorcall)
VECTORCALL_TARGETS = {"cp314-abi3", "cp314t", "cp315-abi3t"}
VECTORCALL = _ibverbs._target in VECTORCALL_TARGETS
PY_TP_VECTORCALL = 82       # CPython's typeslots.h (3.14)


def through_tp_init(cls, *args, **kwargs):
    """cls(*args, **kwargs) the way type.__call__ does it (tp_new, then
    tp_init), whatever the type's vectorcall slot holds."""
    return type.__call__(cls, *args, **kwargs)


def fields(obj):
    """Every attribute the object's type shows (its getset descriptors), SGE
    lists as their entries' fields: what two objects must agree on."""
    cls = type(obj).__mro__[[c.__module__ for c in type(obj).__mro__].index("ibverbs")]
    out = {}
    for name in dir(cls):
        if isinstance(getattr(cls, name), types.GetSetDescriptorType):
            value = getattr(obj, name)
            if name == "sg_list":
                value = [fields(s) for s in value]
            out[name] = value
    return out


def outcome(make, cls, args, kwargs):
    """('ok', fields) or (exception type, message) of make(cls, ...)."""
    try:
        obj = make(cls, *args, **kwargs)
    except Exception as e:      # noqa: BLE001 - the exception is what is compared
        return type(e), str(e)
    assert type(obj) is cls
    return "ok", fields(obj)


def direct(cls, *args, **kwargs):
    return cls(*args, **kwargs)


SGE0 = ib.SGE(0x1000, 64, 0x11)
RUNTIME_KEY = "".join(["wr", "_id"])    # a keyword str not interned by the compiler

GOOD = [
    (ib.SGE, (0x1000, 8, 5), {}),
    (ib.SGE, (0x1000, 8), {}),
    (ib.SGE, (0x1000, 8, 5, 16), {}),
    (ib.SGE, (), {"target": 0x2000, "length": 1, "lkey": 2, "offset": 3}),
    (ib.SGE, (0x2000,), {"offset": 4, "length": 2**32 - 1}),
    (ib.SendWR, (), {}),
    (ib.SendWR, (), {"wr_id": 1, "sg_list": [SGE0], "opcode": ib.WROpcode.RDMA_WRITE,
                     "send_flags": 2, "remote_addr": 0x3000, "rkey": 7}),
    (ib.SendWR, (9, [SGE0, SGE0], 0), {"imm_data": 0x01020304, "remote_qpn": 5,
                                       "remote_qkey": 6, "invalidate_rkey": 8}),
    (ib.SendWR, (), {"remote_srqn": 3, "compare_add": 2**64 - 1, "swap": 1, "ah": None,
                     "mw": None, "bind_info": None}),
    (ib.SendWR, (), {RUNTIME_KEY: 4, "sg_list": (SGE0,)}),
    (ib.SendWR, (), {"sg_list": None}),
    (ib.RecvWR, (), {}),
    (ib.RecvWR, (1, [SGE0]), {}),
    (ib.RecvWR, (), {"sg_list": [SGE0], "wr_id": 2**64 - 1}),
    (ib.RecvWR, (), {RUNTIME_KEY: 5}),
]

BAD = [
    # positional
    (ib.SGE, (1, 2, 3, 4, 5), {}),
    (ib.SGE, (0x1000,), {}),
    (ib.SGE, (), {}),
    (ib.SendWR, tuple(range(17)), {}),
    (ib.RecvWR, (1, [], 3), {}),
    # unknown keyword
    (ib.SGE, (0x1000, 8), {"lkye": 1}),
    (ib.SendWR, (), {"wr_id": 1, "opcod": 0}),
    (ib.RecvWR, (), {"sge": []}),
    (ib.SendWR, (), {"".join(["op", "codes"]): 0}),
    # duplicate: by position and by name
    (ib.SGE, (0x1000, 8), {"length": 8}),
    (ib.SendWR, (1,), {"wr_id": 2}),
    (ib.RecvWR, (1, []), {"sg_list": []}),
    # missing required, with an unknown keyword too
    (ib.SGE, (), {"length": 8, "bogus": 1}),
    # wrong types and values
    (ib.SGE, ("0x1000", 8), {}),
    (ib.SGE, (object(), 8), {}),
    (ib.SGE, (0x1000, 2**32), {}),
    (ib.SGE, (0x1000, -1), {}),
    (ib.SGE, (0x1000, 8, 2**32), {}),
    (ib.SGE, (0x1000, 8), {"offset": -1}),
    (ib.SendWR, (), {"wr_id": -1}),
    (ib.SendWR, (), {"wr_id": 2**64}),
    (ib.SendWR, (), {"opcode": "write"}),
    (ib.SendWR, (), {"sg_list": 5}),
    (ib.SendWR, (), {"ah": 1}),
    (ib.SendWR, (), {"mw": SGE0}),
    (ib.SendWR, (), {"wr_id": 1, "rkey": 2**32}),
    (ib.RecvWR, (), {"wr_id": 1.5}),
]


def _id(case):
    cls, args, kwargs = case
    return f"{cls.__name__}{args!r:.40}{sorted(kwargs)!r:.60}"


@pytest.mark.parametrize("cls, args, kwargs", GOOD, ids=[_id(c) for c in GOOD])
def test_good_arguments_make_the_same_object_both_ways(cls, args, kwargs):
    made = outcome(direct, cls, args, kwargs)
    assert made[0] == "ok", made
    assert made == outcome(through_tp_init, cls, args, kwargs)


@pytest.mark.parametrize("cls, args, kwargs", BAD, ids=[_id(c) for c in BAD])
def test_bad_arguments_raise_the_same_exception_both_ways(cls, args, kwargs):
    raised = outcome(direct, cls, args, kwargs)
    assert raised[0] != "ok" and issubclass(raised[0], (TypeError, ValueError, OverflowError)), \
        raised
    assert raised == outcome(through_tp_init, cls, args, kwargs)


def test_the_messages_are_the_parsers():
    """The exact words (ibp_unpack_tuple's, which ibp_unpack_vector keeps)."""
    cases = [
        ((ib.SGE, 1, 2, 3, 4, 5), {}, "SGE() takes at most 4 arguments (5 given)"),
        ((ib.SGE, 0x1000), {}, "SGE() missing required argument 'length' (pos 2)"),
        ((ib.SendWR,), {"opcod": 0}, "'opcod' is an invalid keyword argument for SendWR()"),
        ((ib.SendWR, 1), {"wr_id": 2},
         "argument for SendWR() given by name ('wr_id') and position (1)"),
        ((ib.RecvWR, 1, [], 3), {}, "RecvWR() takes at most 2 arguments (3 given)"),
    ]
    for (cls, *args), kwargs, message in cases:
        for make in (direct, through_tp_init):
            with pytest.raises(TypeError) as e:
                make(cls, *args, **kwargs)
            assert str(e.value) == message, (make.__name__, cls.__name__)


def _sendwr_site(first, wr_id, opcode):
    """Two call sites of one code object, which share one kwnames tuple."""
    if first is None:
        return ib.SendWR(wr_id=wr_id, opcode=opcode)
    return ib.SendWR(first, wr_id=wr_id, opcode=opcode)


def _sge_site(addr, length, lkey):
    if addr is None:
        return ib.SGE(length=length, lkey=lkey)
    return ib.SGE(addr, length=length, lkey=lkey)


@pytest.mark.parametrize("site, cls, calls", [
    (_sendwr_site, ib.SendWR, [(None, 1, 0), (None, 2, 4), (5, 1, 0), (None, 3, 4),
                               (None, -1, 0), (None, 3, "write"), (None, 4, 99), (None, 6, 1)]),
    (_sge_site, ib.SGE, [(0x1000, 8, 5), (None, 8, 5), (0x1000, 8, 5), (0x1000, -1, 5),
                         (0x2000, 16, 6)]),
])
def test_a_call_site_called_again_is_checked_as_the_first_call(site, cls, calls):
    """A call site hands the same kwnames tuple at every call, and the
    vectorcall constructors remember where its keywords go: a later call
    through it, or through another site with the same keywords, still gets
    every check (a keyword given by position too, a required argument
    missing, each value's)."""
    for first, *rest in calls:
        args = (first, *rest)
        try:
            made = ("ok", fields(site(*args)))
        except Exception as e:      # noqa: BLE001 - the exception is what is compared
            made = (type(e), str(e))
        names = ("wr_id", "opcode") if cls is ib.SendWR else ("length", "lkey")
        expected = outcome(through_tp_init, cls, () if first is None else (first,),
                           dict(zip(names, rest)))
        assert made == expected, args


def test_a_constructor_error_leaves_nothing_behind():
    """The vectorcall function parses before it allocates, and frees what
    it made when a store fails: no object of the type survives either way."""
    import gc
    for make in (direct, through_tp_init):
        gc.collect()
        before = sum(type(o) is ib.SendWR for o in gc.get_objects())
        for _ in range(50):
            with pytest.raises(TypeError):
                make(ib.SendWR, wr_id=1, sg_list=[SGE0], ah=1)
            with pytest.raises(TypeError):
                make(ib.SendWR, bogus=1)
        gc.collect()
        assert sum(type(o) is ib.SendWR for o in gc.get_objects()) == before


@pytest.mark.skipif(sys.version_info < (3, 14), reason="Py_tp_vectorcall is CPython 3.14's")
def test_the_vectorcall_slot_is_set_on_the_vectorcall_target_only():
    get_slot = ctypes.pythonapi.PyType_GetSlot
    get_slot.restype, get_slot.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_int]
    for cls in (ib.SGE, ib.SendWR, ib.RecvWR):
        assert bool(get_slot(cls, PY_TP_VECTORCALL)) == VECTORCALL, cls.__name__
    assert not get_slot(ib.WC, PY_TP_VECTORCALL)    # no `vectorcall: true`


# --- subclasses ---------------------------------------------------------------

class OwnInit(ib.SendWR):
    def __init__(self, tag, **kwargs):
        super().__init__(**kwargs)
        self.tag = tag


class NoInit(ib.SendWR):
    pass


class SGEWithLength(ib.SGE):
    def __init__(self, addr):
        self.ran = True
        super().__init__(addr, 4096)


def test_a_subclass_with_its_own_init_runs_it():
    wr = OwnInit("t", wr_id=3, opcode=ib.WROpcode.SEND)
    assert (wr.tag, wr.wr_id, wr.opcode) == ("t", 3, ib.WROpcode.SEND)
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'tag'"):
        OwnInit(wr_id=3)
    with pytest.raises(TypeError, match="'bogus' is an invalid keyword argument for SendWR()"):
        OwnInit("t", bogus=1)
    sge = SGEWithLength(0x1000)
    assert (sge.ran, sge.addr, sge.length) == (True, 0x1000, 4096)


@pytest.mark.parametrize("cls, args, kwargs", [c for c in GOOD + BAD if c[0] is ib.SendWR],
                         ids=[_id(c) for c in GOOD + BAD if c[0] is ib.SendWR])
def test_a_subclass_without_init_goes_through_the_same_checks(cls, args, kwargs):
    base = outcome(direct, ib.SendWR, args, kwargs)
    sub = outcome(direct, NoInit, args, kwargs)
    assert sub == base


def test_init_replaced_on_the_class_itself_is_called(monkeypatch):
    """CPython keeps a type's vectorcall slot when __init__ is assigned on
    the class: the generated function sees it and goes through type.__call__."""
    calls = []

    def init(self, *args, **kwargs):
        calls.append((args, kwargs))

    monkeypatch.setattr(ib.SendWR, "__init__", init)
    wr = ib.SendWR(1, opcode=2, anything="goes")
    assert calls == [((1,), {"opcode": 2, "anything": "goes"})]
    assert wr.wr_id == 0 and type(wr) is ib.SendWR
    monkeypatch.undo()
    assert ib.SendWR(wr_id=5).wr_id == 5
    with pytest.raises(TypeError, match="invalid keyword argument for SendWR"):
        ib.SendWR(anything="goes")


# --- what is generated ---------------------------------------------------------

def test_the_vectorcall_constructors_are_generated_under_the_target_macro_only():
    """Emitted for the types the spec marks, inside #if IBP_TYPE_VECTORCALL
    (generated/target.h: 1 on cp314-abi3 only), so the other targets' C is
    what it was; the slot names the generated function."""
    import pathlib
    import re
    generated = pathlib.Path(__file__).resolve().parents[2] / "generated"
    with_slot = set()
    for path in sorted(generated.glob("*.c.h")):
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"\{Py_tp_vectorcall, \(void \*\)(\w+)_vectorcall\}", text):
            with_slot.add(m.group(1))
            assert text.rfind("#if IBP_TYPE_VECTORCALL", 0, m.start()) > \
                text.rfind("#endif", 0, m.start()), path.name
            assert f"\n{m.group(1)}_vectorcall(PyObject *type," in text, path.name
    assert with_slot == {"SGE", "SendWR", "RecvWR"}
    target = (generated / "target.h").read_text(encoding="utf-8")
    target = target[target.index("#if defined(IBP_TARGET_"):]    # the targets' blocks
    blocks = re.findall(r"defined\((IBP_TARGET_\w+)\)\n/\*.*?\*/\n(.*?)(?=#elif|#else)", target,
                        re.S)
    on = {name for name, body in blocks if "#define IBP_TYPE_VECTORCALL 1" in body}
    assert on == {"IBP_TARGET_CP314_ABI3", "IBP_TARGET_CP314T", "IBP_TARGET_CP315_ABI3T"}
    assert len(blocks) == 4
