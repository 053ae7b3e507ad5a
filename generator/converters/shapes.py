"""Parameters the wrapper fills itself, not from a Python argument (spec
`self`, `mask`, `value:`, `scratch`), and a verb's out parameters (spec
`out`, `out: dict|bytes|list`)."""
from __future__ import annotations

from typing import Any, List, Optional

from ..ctext import MASK_BITS, SELF_PTR, int_getter, is_int
from ..ir import Type
from .registry import Context, PARAMS, ParamConverter
from .rule_c import Refs, c_of
from ..rule_data import ArgValue, uses_self


@PARAMS.register("self")
class SelfParam(ParamConverter):
    """The verbs object of the method's own handle."""
    uses_self_ptr = True

    @classmethod
    def from_spec(cls, ctx: Context, cname: str, t: Type, pspec: Any) -> "SelfParam":
        return cls()

    def call_arg(self) -> str:
        return SELF_PTR


@PARAMS.register("mask")
class MaskParam(ParamConverter):
    """The attribute mask the struct members given by keyword add up to."""

    @classmethod
    def from_spec(cls, ctx: Context, cname: str, t: Type, pspec: Any) -> "MaskParam":
        return cls()

    def call_arg(self) -> str:
        return MASK_BITS


@PARAMS.register("value")
class ValueParam(ParamConverter):
    """A constant (spec `value:`)."""
    keys = frozenset({"value"})

    def __init__(self, value: Any, refs: Refs) -> None:
        self.value = value      # a number, a C constant or a rule's value (generator/rule_data.py)
        self.refs = refs
        self.uses_self_ptr = uses_self(value)

    @classmethod
    def from_spec(cls, ctx: Context, cname: str, t: Type, pspec: Any) -> "ValueParam":
        ctx.check_refs(pspec.value)
        return cls(pspec.value, ctx.refs)

    def call_arg(self) -> str:
        return c_of(self.value, self.refs.spell)


class _Local(ParamConverter):
    """A zeroed local of the pointee type, passed by address."""
    suffix = ""

    def __init__(self, cname: str, spelling: str) -> None:
        self.local = f"{cname}_{self.suffix}"
        self.spelling = spelling

    def declarations(self) -> List[str]:
        return [f"{self.spelling} {self.local};"]

    def parse(self) -> List[str]:
        return [f"memset(&{self.local}, 0, sizeof({self.local}));"]

    def call_arg(self) -> str:
        return f"&{self.local}"


@PARAMS.register("scratch")
class ScratchParam(_Local):
    """Room the verb writes to and nobody reads."""
    suffix = "scratch"

    @classmethod
    def from_spec(cls, ctx: Context, cname: str, t: Type, pspec: Any) -> "ScratchParam":
        if t.pointee is None:
            ctx.fail(f"scratch parameter {cname} is not a pointer")
        return cls(cname, t.pointee.spelling)


@PARAMS.register("out")
class OutParam(_Local):
    """What the verb writes, returned as a struct class, a Gid or an int."""
    suffix = "out"
    keys = frozenset({"out"})

    def __init__(self, cname: str, pointee: Type, struct_class: Optional[str], reader: str) -> None:
        super().__init__(cname, pointee.spelling)
        self.pointee = pointee
        self.struct_class = struct_class
        self.reader = reader            # struct | gid | int

    @classmethod
    def from_spec(cls, ctx: Context, cname: str, t: Type, pspec: Any) -> "OutParam":
        pointee = t.pointee
        if pointee is None:
            ctx.fail(f"out parameter {cname} is not a pointer")
        key = pointee.decl or pointee.spelling
        struct_class = ctx.struct_class_of(key)
        if struct_class is not None:
            return cls(cname, pointee, struct_class, "struct")
        if key == "union ibv_gid":
            return cls(cname, pointee, None, "gid")
        if is_int(pointee):
            return cls(cname, pointee, None, "int")
        ctx.fail(f"out parameter {cname}: no class for {pointee.spelling}")

    def output(self) -> List[str]:
        if self.reader == "struct":
            return [f"item = {self.struct_class}_from_c(&{self.local});"]
        if self.reader == "gid":
            return [f"item = ibp_gid_to_py(&{self.local});"]
        return [int_getter(self.local, self.pointee, "item")]

    @property
    def output_pytype(self) -> str:  # type: ignore[override]  # a class attribute in the base
        return {"struct": self.struct_class or "Any", "gid": "Gid"}.get(self.reader, "int")


@PARAMS.register("out:dict")
class OutDictParam(OutParam):
    """A struct's fields as a plain dict (the seed's SRQ.query)."""

    @classmethod
    def from_spec(cls, ctx: Context, cname: str, t: Type, pspec: Any) -> "OutDictParam":
        out = OutParam.from_spec(ctx, cname, t, pspec)
        if out.reader != "struct":
            ctx.fail(f"out: dict needs a struct class for {cname}")
        return cls(cname, out.pointee, out.struct_class, "struct")

    def output(self) -> List[str]:
        cls = self.struct_class
        return [f"{{ PyObject *obj = {cls}_from_c(&{self.local});",
                f"  item = obj ? {cls}_asdict(obj, NULL) : NULL;",
                "  Py_XDECREF(obj); }"]

    output_pytype = "Any"


@PARAMS.register("out:bytes")
class OutBytesParam(ParamConverter):
    """A fixed-size byte buffer the verb fills, returned as bytes."""
    keys = frozenset({"out", "size"})

    def __init__(self, cname: str, size: int) -> None:
        self.buf = f"{cname}_buf"
        self.size = size

    @classmethod
    def from_spec(cls, ctx: Context, cname: str, t: Type, pspec: Any) -> "OutBytesParam":
        return cls(cname, int(pspec.size))

    def declarations(self) -> List[str]:
        return [f"uint8_t {self.buf}[{self.size}];"]

    def parse(self) -> List[str]:
        return [f"memset({self.buf}, 0, sizeof({self.buf}));"]

    def call_arg(self) -> str:
        return self.buf

    def output(self) -> List[str]:
        return [f"item = PyBytes_FromStringAndSize((const char *){self.buf}, {self.size});"]

    output_pytype = "bytes"


@PARAMS.register("out:list")
class OutListParam(ParamConverter):
    """An array the verb fills: `count` entries allocated, the first `rc`
    (struct entries) or all of them (integers) returned as a list."""
    keys = frozenset({"out", "count"})

    def __init__(self, cname: str, pointee: Type, count: ArgValue, struct_class: Optional[str],
                 refs: Refs) -> None:
        self.list = f"{cname}_list"
        self.pointee = pointee
        self.count_ref, self.refs = count, refs     # the parameter giving the count
        self.struct_class = struct_class

    @property
    def count(self) -> str:
        return c_of(self.count_ref, self.refs.spell)

    @classmethod
    def from_spec(cls, ctx: Context, cname: str, t: Type, pspec: Any) -> "OutListParam":
        pointee = t.pointee
        struct_class = ctx.struct_class_of(pointee.decl or pointee.spelling) if pointee else None
        if pointee is None or (struct_class is None and not is_int(pointee)):
            ctx.fail(f"out list {cname}: no struct class for {t.spelling}")
        count = ArgValue(str(pspec.count))
        ctx.check_refs(count)
        return cls(cname, pointee, count, struct_class, ctx.refs)

    def declarations(self) -> List[str]:
        return [f"{self.pointee.spelling} *{self.list} = NULL;"]

    def post_parse(self) -> List[str]:
        count = self.count
        return [f"{self.list} = PyMem_Calloc({count} ? {count} : 1, sizeof(*{self.list}));",
                f"if ({self.list} == NULL) {{", "    PyErr_NoMemory();", "    goto exit;", "}"]

    def call_arg(self) -> str:
        return self.list

    def cleanup(self) -> List[str]:
        return [f"PyMem_Free({self.list});"]

    def output(self) -> List[str]:
        if self.struct_class is None:
            # a list of integers (ibv_read_counters): all `count` entries
            loop = f"for (size_t i = 0; item != NULL && i < (size_t){self.count}; i++) {{"
            entry = int_getter(f"{self.list}[i]", self.pointee, "PyObject *entry")
        else:
            loop = "for (ssize_t i = 0; item != NULL && i < (ssize_t)rc; i++) {"
            entry = f"PyObject *entry = {self.struct_class}_from_c(&{self.list}[i]);"
        return ["item = PyList_New(0);", loop, f"    {entry}",
                "    if (entry == NULL || PyList_Append(item, entry) < 0)",
                "        Py_CLEAR(item);", "    Py_XDECREF(entry);", "}"]

    @property
    def output_pytype(self) -> str:  # type: ignore[override]  # a class attribute in the base
        return f"list[{self.struct_class or 'Any'}]"
