"""Members of a struct class (spec/structs.yaml): how each kind of member is
read into Python and, in a writable class, written back."""
from __future__ import annotations

from typing import List, Optional, Tuple

from ..ctext import INT_LIMITS, in_runs, int_convert, int_getter, is_int
from ..enum_fields import c_index as enum_c_index, to_py as enum_to_py
from ..ir import Type
from .registry import FIELDS, FieldConverter


@FIELDS.register("handle")
class HandleField(FieldConverter):
    """A member pointing to a verbs object, kept as a Python reference
    (self->ref_<name>) and written into the struct by X_prepare().

    As in the seed, the setter stores any object (a test double's fake CQ
    builds a QPInitAttr); X_prepare(), when the struct reaches a verb,
    checks the type and that the handle is open, with the message the
    setter used to give."""
    keys = FieldConverter.keys | {"none_ok"}

    def __init__(self, pyname: str, path: str, writable: bool, cls: str, none_ok: bool) -> None:
        super().__init__(pyname, path, writable)
        self.cls = cls
        # a required field that may hold None until the struct is used (the
        # seed's QPInitAttr(None, None) filled later)
        self.none_ok = none_ok

    @property
    def pytype(self) -> str:  # type: ignore[override]  # a class attribute in the base
        return f"{self.cls} | None"

    @staticmethod
    def ref_member(pyname: str) -> str:
        """The struct object's member holding the handle (templates/objects.h.j2)."""
        return f"ref_{pyname}"

    def getter(self) -> List[str]:
        ref = self.ref_member(self.pyname)
        return [f"result = self->{ref} ? self->{ref} : Py_None;",
                "Py_INCREF(result);"]

    def setter(self) -> List[str]:
        if not self.writable:
            return []
        # None is "unset" (NULL) where the field may be None; elsewhere it is
        # stored like any other object and refused by X_prepare()
        return ["obj = value == Py_None ? NULL : value;" if self.none_ok else "obj = value;",
                "Py_XINCREF(obj);",
                f"Py_XSETREF(self->{self.ref_member(self.pyname)}, obj);"]

    def prepare(self, struct: str) -> List[str]:
        """X_prepare()'s check of a set member (self->ref_<name> != NULL):
        the real type (an object can claim any class through __class__, and
        its memory is read as a handle) and an open handle."""
        return [f'if (ibp_conv_handle(self->{self.ref_member(self.pyname)}, "{struct}.{self.pyname}", '
                f'{self.cls}_Type, {1 if self.none_ok else 0}, &obj) < 0)',
                "    return -1;"]


@FIELDS.register("bool")
class BoolField(FieldConverter):
    pytype = "bool"

    def getter(self) -> List[str]:
        return [f"result = PyBool_FromLong({self.member} != 0);"]

    def setter(self) -> List[str]:
        return ["int truth = PyObject_IsTrue(value);", "if (truth < 0)", "    return -1;",
                f"{self.member} = truth;"] if self.writable else []


@FIELDS.register("gid")
class GidField(FieldConverter):
    """A union ibv_gid, read as a Gid."""
    pytype = "Gid"

    def getter(self) -> List[str]:
        return [f"result = ibp_gid_to_py(&{self.member});"]

    def setter(self) -> List[str]:
        if not self.writable:
            return []
        member = self.member
        return [f"if (value == Py_None) {{ memset(&{member}, 0, sizeof({member})); return 0; }}",
                f'if (ibp_conv_gid(value, "{self.pyname}", &{member}) < 0)',
                "    return -1;"]


@FIELDS.register("gid_bytes")
class GidBytesField(GidField):
    """A GID read back as 16 bytes (the seed's AHAttr.dgid), not a Gid."""
    pytype = "bytes"

    def getter(self) -> List[str]:
        return [f"result = PyBytes_FromStringAndSize((const char *){self.member}.raw, 16);"]


@FIELDS.register("str")
class StrField(FieldConverter):
    """A char array, read-only."""
    pytype = "str"
    has_setter = False

    def getter(self) -> List[str]:
        return [f"result = ibp_chars_to_py({self.member}, sizeof({self.member}));"]


@FIELDS.register("bytes")
class ByteArrayField(FieldConverter):
    """Any other array of 1-byte elements, read-only as bytes."""
    pytype = "Any"
    has_setter = False

    def getter(self) -> List[str]:
        return [f"result = ibp_array_to_py({self.member}, sizeof({self.member}));"]


@FIELDS.register("int")
class IntField(FieldConverter):
    pytype = "int"
    keys = FieldConverter.keys | {"members"}

    def __init__(self, pyname: str, path: str, writable: bool, t: Type,
                 members: Optional[Tuple[str, List[Tuple[int, int]]]] = None,
                 enum_class: Optional[str] = None) -> None:
        super().__init__(pyname, path, writable)
        self.t = t
        # spec `members: QPType`: (the enum's name, its values as (lo, hi)
        # runs); any other value is refused when set, as SendWR.opcode is
        self.members = members
        # the enum or flag class it shows as (generator/enum_fields.py)
        self.enum_class = enum_class
        self.pytype = enum_class or "int"

    def getter(self) -> List[str]:
        if self.enum_class is not None:
            return [f"result = {enum_to_py(self.enum_class, self.member, bool(self.t.signed))};"]
        return [int_getter(self.member, self.t)]

    def setter(self) -> List[str]:
        if not self.writable:
            return []
        lines = int_convert("value", self.member, self.t, self.pyname, fail="return -1;")
        if self.enum_class is not None:     # a member of another enum class: TypeError
            lines = [f'if (value != NULL && !PyLong_CheckExact(value) && ibp_enum_check('
                     f'{enum_c_index(self.enum_class)}, value, "{self.pyname}") < 0)',
                     "    return -1;"] + lines
        if self.members is None:
            return lines
        enum, runs = self.members
        test = in_runs("(long long)v", runs, unsigned=False)
        check = [f"    if (!({test})) {{",
                 f'        PyErr_Format(PyExc_ValueError, "{self.pyname} %lld is not a {enum}", '
                 "(long long)v);",
                 "        return -1;",
                 "    }"]
        return lines[:-2] + check + lines[-2:]


@FIELDS.register("struct")
class NestedStructField(FieldConverter):
    """A nested struct of another struct class, copied in and out."""

    def __init__(self, pyname: str, path: str, writable: bool, cls: str) -> None:
        super().__init__(pyname, path, writable)
        self.cls = cls

    @property
    def pytype(self) -> str:  # type: ignore[override]  # a class attribute in the base
        return self.cls

    def getter(self) -> List[str]:
        return [f"result = {self.cls}_from_c(&{self.member});"]

    def setter(self) -> List[str]:
        if not self.writable:
            return []
        cls = self.cls
        return [f"if (!PyObject_TypeCheck(value, {cls}_Type)) {{",
                f'    PyErr_SetString(PyExc_TypeError, "{self.pyname} must be a {cls}");',
                "    return -1;", "}",
                f"{self.member} = ((struct {cls}Object *)value)->c;"]


def field_kind(convert: Optional[str], t: Type, struct_class: Optional[str]) -> Optional[str]:
    """The FIELDS kind of a member of type *t* (spec `convert:` first), or
    None when no converter reads it."""
    if convert and convert.startswith("handle:"):
        return "handle"
    if convert == "bool" and is_int(t):
        return "bool"
    if convert in ("gid", "gid_bytes"):
        return convert
    if t.kind == "union" and (t.decl or t.spelling) == "union ibv_gid":
        return "gid"
    if convert == "str" or (t.kind == "array" and t.element is not None
                            and t.element.spelling in ("char", "const char")):
        return "str"
    if t.kind == "array" and t.element is not None and t.element.size == 1:
        return "bytes"
    if is_int(t):
        return "int" if t.size is not None and (t.size, bool(t.signed)) in INT_LIMITS else None
    if t.kind == "struct" and struct_class is not None:
        return "struct"
    return None
