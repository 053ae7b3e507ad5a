"""Fields of the data-path C structs (spec/datapath/records.yaml), by the
field's `convert:` kind (none: an integer of the member's C type)."""
from __future__ import annotations

from typing import List, Optional

from ..ctext import be32_to_host, c_text, host_to_be32, in_runs, int_to_py
from ..enum_fields import c_index as enum_c_index, to_py as enum_to_py
from ..ir import Type
from .registry import RECORD_FIELDS, RecordFieldConverter


@RECORD_FIELDS.register("int")
class IntRecordField(RecordFieldConverter):
    """An integer or enum member, range checked on the way in (an enum's
    members alone with a spec `check:`)."""

    def to_py(self, small_int: str) -> List[str]:
        v = self.to_host("v")
        if self.enum_class is not None:
            return [f"return {enum_to_py(self.enum_class, v, bool(self.signed or self.enum))};"]
        if self.small_int:
            return [f"unsigned long long x = (unsigned long long){v};",
                    f"return x < 256 ? {small_int}((long)x) : {int_to_py('x', False, 64)};"]
        return [f"return {int_to_py(v, bool(self.signed or self.enum), self.bits)};"]

    def from_py(self, unsigned: str) -> List[str]:
        lines = [] if self.enum_class is None else [
            "if (value != NULL && !PyLong_CheckExact(value)",
            f'        && ibp_enum_check({enum_c_index(self.enum_class)}, value, "{self.name}") < 0)',
            "    return -1;"]
        lines += ["uint64_t x;",
                 f'if ({unsigned}(value, "{self.name}", {self.unsigned_max}, &x) < 0)',
                 "    return -1;"]
        if self.check is not None:
            runs, message = self.check
            lines += [f"if (!({in_runs('x', runs, unsigned=True)})) {{",
                      f'    PyErr_Format(PyExc_ValueError, "{c_text(message)}", '
                      "(unsigned long long)x);",
                      "    return -1;", "}"]
        return lines + [f"*out = {self.to_c('x')};", "return 0;"]


@RECORD_FIELDS.register("be32")
class Be32RecordField(IntRecordField):
    """Network order in C (a __be32: imm_data), host order in Python."""

    @classmethod
    def refuses(cls, t: Type) -> Optional[str]:
        return None if t.spelling == "__be32" else f"convert: be32 on a {t.spelling}"

    def to_host(self, expr: str) -> str:
        return be32_to_host(expr)

    def to_c(self, expr: str) -> str:
        return host_to_be32(f"(uint32_t){expr}")
