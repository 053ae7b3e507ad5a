"""Read-only attributes of a handle class (spec `attributes:`): a member of
the verbs object, or an expression over `self_ptr`."""
from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Sequence

from ..ctext import int_getter, wide_int_to_py
from ..enum_fields import to_py as enum_to_py
from ..ir import Type
from .registry import ATTRIBUTES, AttributeConverter
from .rule_c import c_of, self_only


@ATTRIBUTES.register("member")
class MemberAttribute(AttributeConverter):
    """An integer member of the verbs object ("cap.max_send_wr"); a mapping
    {path, since} for a member newer than some headers."""
    pytype = "int"
    keys = frozenset({"path", "since"})

    def __init__(self, path: str, t: Type, enum_class: Optional[str] = None) -> None:
        self.path, self.t = path, t
        # the enum or flag class it shows as (generator/enum_fields.py)
        self.enum_class = enum_class
        self.pytype = enum_class or "int"

    def getter(self) -> List[str]:
        if self.enum_class is not None:
            value = f"self_ptr->{self.path}"
            return [f"result = {enum_to_py(self.enum_class, value, bool(self.t.signed))};"]
        return [int_getter(f"self_ptr->{self.path}", self.t)]


class AttributeCheck(NamedTuple):
    """What must hold before a getter reads (a generator/rule_data.py
    value), and the exception and message when it does not."""
    condition: Any
    error: str
    message: str


@ATTRIBUTES.register("int")
class IntExprAttribute(AttributeConverter):
    """An unsigned integer expression over self's verbs object, after
    optional checks (each: a condition, the exception and message when it
    does not hold); generator/rule_data.py values."""
    pytype = "int"
    keys = frozenset({"expr", "checks", "convert"})

    def __init__(self, expr: Any, label: str = "", checks: Sequence[AttributeCheck] = ()) -> None:
        self.expr, self.label, self.checks = expr, label, list(checks)

    def getter(self) -> List[str]:
        guard: List[str] = []
        for cond, exc, message in self.checks:
            guard += [f"if (!({c_of(cond, self_only)})) {{",
                      f'    PyErr_SetString(PyExc_{exc}, "{self.label}: {message}");',
                      "    return NULL;", "}"]
        return guard + [f"result = {wide_int_to_py(c_of(self.expr, self_only), signed=False)};"]


@ATTRIBUTES.register("str")
class StrExprAttribute(AttributeConverter):
    """A `const char *` expression; NULL is None."""
    pytype = "str | None"
    keys = frozenset({"expr", "convert"})

    def __init__(self, expr: Any) -> None:
        self.expr = expr        # a generator/rule_data.py value

    def getter(self) -> List[str]:
        return [f"const char *s = {c_of(self.expr, self_only)};",
                "result = s ? PyUnicode_FromString(s) : Py_NewRef(Py_None);"]


@ATTRIBUTES.register("sockaddr")
class SockaddrMemberAttribute(AttributeConverter):
    """A struct sockaddr member (spec `{path, convert: sockaddr}`), read by
    the hand-written ibp_sockaddr_to_py (ibverbs/src/cm.c): (host, port), or
    None when unset."""
    pytype = "tuple[str, int] | None"
    ctype = "struct sockaddr"
    keys = frozenset({"path", "convert"})

    def __init__(self, path: str) -> None:
        self.path = path

    def getter(self) -> List[str]:
        return [f"result = ibp_sockaddr_to_py(&self_ptr->{self.path});"]
