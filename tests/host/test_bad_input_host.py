"""Bad input without a device: every integer out of range, every wrong type.

The generated C is the source of truth for what each argument accepts: each
integer goes through ibp_conv_unsigned/ibp_conv_signed with the bounds of
its C type, so the tests read generated/*.c.h to find, for every generated
function, method and struct field, its arguments and their bounds, and try
one below and one above (and far beyond 64 bits) for each: ValueError
naming the argument, never a truncated value reaching the verb.  The device
tier (tests/device/test_bad_input.py) does the same for methods of verbs
objects, with this module's parser.
"""
from __future__ import annotations

import pathlib
import re
import struct
from dataclasses import dataclass
from typing import Dict, List, Optional

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
GENERATED = ROOT / "generated"

_CONSTS = {
    "INT8_MIN": -2**7, "INT8_MAX": 2**7 - 1, "UINT8_MAX": 2**8 - 1,
    "INT16_MIN": -2**15, "INT16_MAX": 2**15 - 1, "UINT16_MAX": 2**16 - 1,
    "INT32_MIN": -2**31, "INT32_MAX": 2**31 - 1, "UINT32_MAX": 2**32 - 1,
    "INT64_MIN": -2**63, "INT64_MAX": 2**63 - 1, "UINT64_MAX": 2**64 - 1,
}


def _const(token: str) -> int:
    token = token.strip()
    if token in _CONSTS:
        return _CONSTS[token]
    return int(token, 0)


@dataclass
class Param:
    """One Python argument of a generated function, as its C converts it."""
    name: str
    kind: str                    # int, handle, struct, wc, bytes, gid, other
    lo: Optional[int] = None     # int: accepted range
    hi: Optional[int] = None
    type: Optional[str] = None   # handle / struct class name
    none_ok: bool = False
    size: Optional[int] = None   # bytes: exact length


_FUNC = re.compile(r"^(\w+)\(PyObject \*self, PyObject \*args, PyObject \*kwargs\)\n\{\n(.*?)\n\}\n",
                   re.M | re.S)
_KWLIST = re.compile(r"static char \*kwlist\[\] = \{(.*?)NULL\};")


def _param(name: str, body: str) -> Param:
    m = re.search(r'ibp_conv_unsigned\(%s_obj, "\w+", (\w+), ' % name, body)
    if m:
        return Param(name, "int", 0, _const(m.group(1)))
    m = re.search(r'ibp_conv_signed\(%s_obj, "\w+", (-?\w+), (\w+), ' % name, body)
    if m:
        return Param(name, "int", _const(m.group(1)), _const(m.group(2)))
    m = re.search(r'ibp_conv_handle\(%s_obj, "\w+", (\w+)_Type, ([01]),' % name, body)
    if m:
        return Param(name, "handle", type=m.group(1), none_ok=m.group(2) == "1")
    m = re.search(r"PyObject_TypeCheck\(%s_obj, (\w+)_Type\)" % name, body)
    if m:
        return Param(name, "struct", type=m.group(1))
    if re.search(r"ibp_wc_to_c\(%s_obj," % name, body):
        return Param(name, "wc")
    if re.search(r"ibp_conv_gid\(%s_obj," % name, body):
        return Param(name, "gid")
    m = re.search(r"(\w+) = PyBytes_FromObject\(%s_obj\);.*?PyBytes_Size\(\1\) != (\d+)" % name,
                  body, re.S)
    if m:
        return Param(name, "bytes", size=int(m.group(2)))
    return Param(name, "other")


def generated_functions(filename: str) -> Dict[str, List[Param]]:
    """C function name -> its parameters in order (generated functions with
    arguments only; hand-written ones are tested by hand)."""
    text = (GENERATED / filename).read_text()
    out = {}
    for m in _FUNC.finditer(text):
        cname, body = m.group(1), m.group(2)
        kw = _KWLIST.search(body)
        if kw is not None:
            names = re.findall(r'"(\w+)"', kw.group(1))
        else:   # parsed by hand (**fields): the arguments it converts
            names = list(dict.fromkeys(re.findall(r"ibp_conv_\w+\((\w+)_obj,", body)))
        if not names:
            continue
        out[cname] = [_param(n, body) for n in names]
    return out


_SETTER = re.compile(r"^(\w+)_set_(\w+)\(PyObject \*op, PyObject \*value, void \*closure\)\n\{\n(.*?)\n\}\n",
                     re.M | re.S)


def struct_fields() -> Dict[str, List[Param]]:
    """Struct class -> its writable fields (as Params)."""
    text = (GENERATED / "structs.c.h").read_text()
    out: Dict[str, List[Param]] = {}
    for m in _SETTER.finditer(text):
        cls, field, body = m.groups()
        body = body.replace("(value,", "(%s_obj," % field)
        body = body.replace("PyObject_TypeCheck(value,", "PyObject_TypeCheck(%s_obj," % field)
        out.setdefault(cls, []).append(_param(field, body))
    return out


def out_of_range(p: Param) -> List[int]:
    """Integers just outside p's range, and far outside 64 bits."""
    return [p.lo - 1, p.hi + 1, -2**64, 2**64, 2**200]


def wrong_types(p: Param) -> list:
    """Values of a wrong type for p (TypeError expected)."""
    class Nothing:
        pass
    common = [Nothing(), 1.5, 1j, [1], {"x": 1}]
    if p.kind == "int":
        return common + ["1", b"\x01"]
    if p.kind in ("handle", "struct", "wc"):
        return common + [1, "x"]
    if p.kind == "gid":
        return [Nothing(), 1.5, 7, ["x"]]
    if p.kind == "bytes":
        return [1.5, Nothing(), None]
    return []


def valid_int(p: Param) -> int:
    """A value inside p's range (its smallest non-negative)."""
    return max(p.lo, 0)


# ---- the parser finds what it should (so the tests below test something) ----

def test_the_parser_sees_every_generated_integer_argument():
    seen = 0
    for f in sorted(GENERATED.glob("*.c.h")):
        text = f.read_text()
        conversions = len(re.findall(r"ibp_conv_(?:un)?signed\(\w+_obj,", text))
        params = [p for ps in generated_functions(f.name).values() for p in ps if p.kind == "int"]
        assert len(params) == conversions, f.name
        seen += conversions
    fields = [p for ps in struct_fields().values() for p in ps if p.kind == "int"]
    assert len(fields) == len(re.findall(r"ibp_conv_(?:un)?signed\(value,",
                                         (GENERATED / "structs.c.h").read_text()))
    assert seen > 50 and len(fields) > 40


# ---- module functions ------------------------------------------------------------

def _module_cases():
    import ibverbs._ibverbs as ext
    for cname, params in sorted(generated_functions("module.c.h").items()):
        name = cname[len("module_"):]
        if not hasattr(ext, name):
            continue
        for i, p in enumerate(params):
            yield name, params, i


MODULE_CASES = list(_module_cases())


@pytest.mark.parametrize("name,params,i", MODULE_CASES,
                         ids=[f"{n}-{ps[i].name}" for n, ps, i in MODULE_CASES])
def test_module_function_rejects_out_of_range_and_wrong_types(name, params, i):
    import ibverbs._ibverbs as ext
    fn = getattr(ext, name)
    p = params[i]
    base = {q.name: valid_int(q) for q in params if q.kind == "int" and q is not p}
    try:
        fn(**base, **{p.name: valid_int(p) if p.kind == "int" else None})
    except RuntimeError as exc:
        # A verb newer than the host's libibverbs refuses every call, before
        # it looks at its arguments (test_baseline.py checks that refusal).
        if "is unavailable" in str(exc):
            pytest.skip(str(exc))
    except Exception:
        pass
    if p.kind == "int":
        for bad in out_of_range(p):
            with pytest.raises(ValueError, match=p.name):
                fn(**base, **{p.name: bad})
        # The bounds themselves are accepted (no off-by-one).
        for good in (p.lo, p.hi):
            try:
                fn(**base, **{p.name: good})
            except ValueError as exc:
                assert p.name not in str(exc), f"{name}({p.name}={good}): {exc}"
            except OSError:   # VerbsError
                pass    # accepted, then refused by the verb (import_device of no device)
    for bad in wrong_types(p):
        with pytest.raises(TypeError):
            fn(**base, **{p.name: bad})


# ---- struct classes (those that need no verbs object) ----------------------------

HOST_STRUCTS = ("AHAttr", "QPAttr", "ECE")


def _field_cases():
    fields = struct_fields()
    for cls in HOST_STRUCTS:
        for p in fields[cls]:
            yield cls, p


FIELD_CASES = list(_field_cases())


@pytest.mark.parametrize("cls,p", FIELD_CASES, ids=[f"{c}.{p.name}" for c, p in FIELD_CASES])
def test_struct_field_rejects_out_of_range_and_wrong_types(cls, p):
    import ibverbs._ibverbs as ext
    obj = getattr(ext, cls)()
    if p.kind == "int":
        for bad in out_of_range(p):
            with pytest.raises(ValueError, match=p.name):
                setattr(obj, p.name, bad)
            with pytest.raises(ValueError, match=p.name):
                getattr(ext, cls)(**{p.name: bad})
        for good in (p.lo, p.hi):
            setattr(obj, p.name, good)
            assert getattr(obj, p.name) == good          # stored exactly, not truncated
    for bad in wrong_types(p):
        with pytest.raises(TypeError):
            setattr(obj, p.name, bad)
    with pytest.raises((AttributeError, TypeError)):
        delattr(obj, p.name)


def test_struct_fields_read_back_after_a_failed_assignment_unchanged():
    import ibverbs as ib
    a = ib.AHAttr(sl=5, dlid=7)
    with pytest.raises(ValueError):
        a.sl = 256
    with pytest.raises(ValueError):
        a.dlid = -1
    assert (a.sl, a.dlid) == (5, 7)


# ---- work requests and SGEs (hand-written data path types) ---------------------

U32, U64 = 2**32 - 1, 2**64 - 1
# opcode: the largest WROpcode value it takes (IBV_WR_ATOMIC_WRITE).
SENDWR_INT_FIELDS = {"wr_id": U64, "opcode": 15, "send_flags": U32, "remote_addr": U64,
                     "rkey": U32, "imm_data": U32, "compare_add": U64, "swap": U64,
                     "remote_qpn": U32, "remote_qkey": U32}


@pytest.mark.parametrize("field,hi", sorted(SENDWR_INT_FIELDS.items()))
def test_send_wr_integer_fields_are_range_checked(field, hi):
    import ibverbs as ib
    wr = ib.SendWR()
    for bad in (-1, hi + 1, 2**64, 2**200, -2**64):
        with pytest.raises(ValueError, match=field):
            setattr(wr, field, bad)
        with pytest.raises(ValueError, match=field):
            ib.SendWR(**{field: bad})
    setattr(wr, field, hi)
    assert getattr(wr, field) == hi
    for bad in ("1", 1.5, None, object(), [1]):
        with pytest.raises(TypeError):
            setattr(wr, field, bad)
    with pytest.raises((AttributeError, TypeError)):
        delattr(wr, field)


def test_recv_wr_and_sge_fields_are_range_checked():
    import ibverbs as ib
    for bad in (-1, 2**64, 2**200):
        with pytest.raises(ValueError, match="wr_id"):
            ib.RecvWR(wr_id=bad)
    sge = ib.SGE(0x1000, 16)
    for field, hi in (("addr", U64), ("length", U32), ("lkey", U32)):
        for bad in (-1, hi + 1, 2**200):
            with pytest.raises(ValueError):
                setattr(sge, field, bad)
        setattr(sge, field, hi)
        assert getattr(sge, field) == hi
        for bad in ("1", 1.5, object()):
            with pytest.raises(TypeError):
                setattr(sge, field, bad)


@pytest.mark.parametrize("length", [2**32, 2**32 + 1, 2**40, 2**63 - 1, 2**63, 2**64, 2**100])
def test_sge_length_of_2_to_the_32_or_more_is_refused(length):
    import ibverbs as ib
    with pytest.raises(ValueError, match=r"2\*\*32"):
        ib.SGE(0x1000, length)
    sge = ib.SGE(0x1000, 1)
    with pytest.raises(ValueError, match=r"2\*\*32"):
        sge.length = length
    assert sge.length == 1


def test_sge_address_plus_offset_beyond_64_bits_is_refused():
    import ibverbs as ib
    with pytest.raises(ValueError):
        ib.SGE(2**64 - 16, 8, offset=32)
    with pytest.raises(ValueError):
        ib.SGE(-1, 8)
    with pytest.raises(TypeError):
        ib.SGE("0x1000", 8)
    with pytest.raises(TypeError):
        ib.SGE(0x1000, 8.0)


def test_work_request_lists_must_hold_sges_and_handles_of_the_right_type():
    import ibverbs as ib
    for bad in (1, object()):
        with pytest.raises(TypeError):
            ib.SendWR(sg_list=bad)
        with pytest.raises(TypeError):
            ib.RecvWR(sg_list=bad)
    # items that are no SGE are stored, as the seed does (test doubles), and
    # refused at post (tests/host/test_wr_doubles.py)
    for items in ("x", [1], [ib.SGE(0x1000, 1), "x"], [ib.RecvWR()]):
        assert ib.SendWR(sg_list=items).sg_list == list(items)
        assert ib.RecvWR(sg_list=items).sg_list == list(items)
    for bad in (1, "x", ib.SGE(0x1000, 1), object()):
        with pytest.raises(TypeError):
            ib.SendWR(ah=bad)
    wr = ib.SendWR(sg_list=(ib.SGE(0x1000, 1),))     # any sequence, stored as a list
    assert isinstance(wr.sg_list, list) and len(wr.sg_list) == 1
    wr.sg_list = None
    assert wr.sg_list == []


def test_sge_keepalive_and_objects_claiming_a_handle_class_are_not_handles():
    """isinstance() can be fooled through __class__; the C side checks the
    real type, since it reads the object's memory as a handle."""
    import ibverbs as ib

    class Impostor:
        __class__ = ib.MR          # isinstance(Impostor(), ib.MR) is True

    assert isinstance(Impostor(), ib.MR)
    with pytest.raises(TypeError):
        ib.SGE(Impostor(), 8)
    with pytest.raises(TypeError):
        ib.SendWR(ah=Impostor())


# ---- QPInfo ----------------------------------------------------------------------

def _qpinfo_bytes(qp_num=0x123456, psn=0x654321, lid=7, gid=bytes(range(16)), port=1, mtu=3):
    return struct.pack("!IIH16sBB", qp_num, psn, lid, gid, port, mtu)


@pytest.mark.parametrize("length", [n for n in range(0, 80) if n != 28] + [127, 4096])
def test_qpinfo_from_bytes_of_every_wrong_length_is_refused(length):
    import ibverbs as ib
    data = (_qpinfo_bytes() * 200)[:length]
    for form in (data, bytearray(data), memoryview(data)):
        with pytest.raises(ValueError, match="exactly 28 bytes"):
            ib.QPInfo.from_bytes(form)


@pytest.mark.parametrize("bad", ["x" * 28, 28, None, 1.5, object(), [0] * 28])
def test_qpinfo_from_bytes_of_a_non_buffer_is_a_type_error(bad):
    import ibverbs as ib
    with pytest.raises(TypeError):
        ib.QPInfo.from_bytes(bad)


def test_qpinfo_round_trips_and_checks_every_field():
    import ibverbs as ib
    info = ib.QPInfo.from_bytes(_qpinfo_bytes())
    assert info.to_bytes() == _qpinfo_bytes()
    for kwargs in ({"qp_num": 1 << 24}, {"psn": 1 << 24}, {"port": 0}, {"mtu": 0}, {"mtu": 6}):
        with pytest.raises(ValueError):
            ib.QPInfo.from_bytes(_qpinfo_bytes(**kwargs))


def test_qpinfo_from_random_bytes_is_a_qpinfo_or_a_value_error():
    """Any 28 bytes: a valid QPInfo that round-trips, or ValueError."""
    import ibverbs as ib
    from hypothesis import given, settings, strategies as st

    @settings(max_examples=500, deadline=None, derandomize=True)
    @given(st.binary(min_size=28, max_size=28))
    def check(data):
        try:
            info = ib.QPInfo.from_bytes(data)
        except ValueError:
            qp_num, psn, _, _, port, mtu = struct.unpack("!IIH16sBB", data)
            assert qp_num >> 24 or psn >> 24 or port == 0 or not 1 <= mtu <= 5
        else:
            assert info.to_bytes() == data

    check()


def test_qpinfo_from_random_bytes_of_random_length():
    import ibverbs as ib
    from hypothesis import given, settings, strategies as st

    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(st.binary(max_size=200))
    def check(data):
        try:
            ib.QPInfo.from_bytes(data)
        except ValueError:
            pass
        else:
            assert len(data) == 28

    check()
