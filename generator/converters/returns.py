"""What a generated wrapper returns (spec `returns:`): a new handle object,
the verb's result as an int, bool, host-order be32 or str, or None / the
out parameters (one item, or a tuple of them)."""
from __future__ import annotations

from typing import List, NamedTuple, Optional

from ..ctext import be32_to_host, indented, int_getter, int_to_py
from ..ir import Type
from .args import StructObjectParam
from .registry import RETURNS, ReturnConverter


class ParentSource(NamedTuple):
    """Where a new object's parent comes from (spec `returns: {parents:}`):
    self, the handle argument `arg`, or the handle in field `field` of the
    struct argument `arg` as the call was handed it."""
    is_self: bool = False
    arg: Optional[str] = None
    field: Optional[str] = None


def _parent_c(source: Optional[ParentSource]) -> str:
    if source is None:
        return "NULL"
    if source.is_self:
        return "self"
    if source.field is not None:
        return StructObjectParam.held_local(str(source.arg), source.field)
    return str(source.arg)      # its object: the local named after it


@RETURNS.register("new")
class NewHandleReturn(ReturnConverter):
    """A new object of a handle class, with its parents (None: no parent),
    in the order the class declares them."""

    def __init__(self, cls: str, parents: List[Optional[ParentSource]]) -> None:
        self.cls, self.parents = cls, parents

    def lines(self, outputs: List[List[str]]) -> List[str]:
        parents = "".join(", " + _parent_c(p) for p in self.parents)
        return [f"return_value = {self.cls}_wrap(rc{parents});"]

    def pytype(self, output_types: List[str]) -> str:
        return self.cls


class _Simple(ReturnConverter):
    line = ""
    type_name = ""

    def lines(self, outputs: List[List[str]]) -> List[str]:
        return [self.line]

    def pytype(self, output_types: List[str]) -> str:
        return self.type_name


@RETURNS.register("result")
class IntReturn(_Simple):
    """The verb's integer result."""
    type_name = "int"

    def __init__(self, t: Type) -> None:
        self.t = t

    def lines(self, outputs: List[List[str]]) -> List[str]:
        return [int_getter("rc", self.t, "return_value")]


@RETURNS.register("bool")
class BoolReturn(_Simple):
    line = "return_value = PyBool_FromLong(rc != 0);"
    type_name = "bool"


@RETURNS.register("be32")
class Be32Return(_Simple):
    """Network order in C, host order in Python (as WC.imm_data)."""
    line = f"return_value = {int_to_py(be32_to_host('rc'), False, 32)};"
    type_name = "int"


@RETURNS.register("str")
class StrReturn(_Simple):
    line = "return_value = rc ? PyUnicode_FromString(rc) : Py_NewRef(Py_None);"
    type_name = "str | None"


@RETURNS.register("out")
class OutputsReturn(ReturnConverter):
    """None, the one out parameter's item, or a tuple of them; `none`
    returns None even with out parameters."""

    def __init__(self, none: bool = False) -> None:
        self.none = none

    def lines(self, outputs: List[List[str]]) -> List[str]:
        if self.none or not outputs:
            return ["return_value = Py_NewRef(Py_None);"]
        if len(outputs) == 1:
            return ["{", "    PyObject *item;"] + indented(outputs[0]) + ["    return_value = item;", "}"]
        lines = [f"return_value = PyTuple_New({len(outputs)});",
                 "if (return_value == NULL)", "    goto exit;"]
        for i, stmts in enumerate(outputs):
            lines += ["{", "    PyObject *item;"] + indented(stmts) + [
                "    if (item == NULL) {", "        Py_CLEAR(return_value);",
                "        goto exit;", "    }",
                f"    PyTuple_SetItem(return_value, {i}, item);", "}"]
        return lines

    def pytype(self, output_types: List[str]) -> str:
        if self.none or not output_types:
            return "None"
        if len(output_types) == 1:
            return output_types[0]
        return f"tuple[{', '.join(output_types)}]"
