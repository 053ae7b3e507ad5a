"""Which Python enum class a C field shows as (spec/enums.yaml): a member of
a C enum type that the spec makes a class of, or an integer member that
`enum_fields:` names (flag sets held in plain ints: wc_flags,
device_cap_flags, ...).  Its getter returns a prebuilt member of that class
(ibp_enum_member, ibverbs/src/convert.c); its setter refuses a member of
another enum class (TypeError), and its stub names the class."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from .ir import Type


class EnumFields:
    def __init__(self, enums: Sequence[Any], fields: Dict[str, str]) -> None:
        """enums: the model's EnumModels (not imported: the converters
        import this module, and generator.model imports them)."""
        self.enums = enums
        self.index = {e.name: i for i, e in enumerate(enums)}
        self.by_ctype = {e.cname: e.name for e in enums if e.cname.startswith("enum ")}
        self.fields = fields      # checked against the IR by generator/builder.py

    def of(self, record_ctype: str, path: str, t: Type) -> Optional[str]:
        """The class of member `path` (a C path, "grh.sgid_index") of the
        struct `record_ctype`, None for a plain integer."""
        return self.of_spelling(record_ctype, path, t.decl or t.spelling, t.kind == "enum")

    def of_spelling(self, record_ctype: str, path: str, spelling: str,
                    is_enum: bool) -> Optional[str]:
        named = self.fields.get(f"{record_ctype}.{path}")
        if named is not None:
            return named
        return self.by_ctype.get(spelling) if is_enum else None

    def class_names(self) -> List[str]:
        """The classes, in the order of their indexes."""
        return [e.name for e in self.enums]


def c_declarations(classes: Sequence[str]) -> List[str]:
    """records.h's: the classes' indexes and names (convert.c's table)."""
    return (["enum ibp_enum_class {"]
            + [f"    {c_index(name)}," for name in classes]
            + ["    IBP_ENUM_COUNT", "};",
               "#define IBP_ENUM_NAMES " + ", ".join(f'"{name}"' for name in classes)])


def c_index(cls: str) -> str:
    """The C constant that indexes a class's table (records.h)."""
    return f"IBP_ENUM_{cls}"


def to_py(cls: str, value: str, signed: bool) -> str:
    """The C expression of the member of `cls` for the C integer `value`:
    the table's prebuilt one, else made (ibp_enum_make); a value that is no
    member of an IntEnum comes back as a plain int."""
    return (f"ibp_enum_member({c_index(cls)}, (unsigned long long)({value}), "
            f"{1 if signed else 0})")
