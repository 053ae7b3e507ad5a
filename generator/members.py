"""Members of the IR's records, anonymous members looked through."""
from __future__ import annotations

from typing import List, Optional, Tuple

from .ir import IR, Record, Type
from .spec import SpecError


def member_type(ir: IR, record: Record, path: str, where: str) -> Type:
    """The IR type of a member path ("cap.max_send_wr"), anonymous members
    included."""
    current = record
    parts = path.split(".")
    t: Optional[Type] = None
    for i, part in enumerate(parts):
        t = find_field(ir, current, part)
        if t is None:
            raise SpecError(f"{where}: {record.name} has no member {path!r}")
        if i < len(parts) - 1:
            nested = ir.record(t.decl or t.spelling)
            if nested is None:
                raise SpecError(f"{where}: {path!r}: {part} is not a struct")
            current = nested
    assert t is not None
    return t


def find_field(ir: IR, record: Record, name: str) -> Optional[Type]:
    for f in record.fields:
        if f.name == name:
            return f.type
        if f.name == "":
            nested = ir.record(f.type.decl or f.type.spelling)
            if nested is not None:
                found = find_field(ir, nested, name)
                if found is not None:
                    return found
    return None


def has_member(ir: IR, record: Record, path: str) -> bool:
    try:
        member_type(ir, record, path, "")
    except SpecError:
        return False
    return True


def flat_fields(ir: IR, record: Record) -> List[Tuple[str, Type]]:
    out: List[Tuple[str, Type]] = []
    for f in record.fields:
        if f.name == "":
            nested = ir.record(f.type.decl or f.type.spelling)
            if nested is not None:
                out += flat_fields(ir, nested)
        else:
            out.append((f.name, f.type))
    return out
