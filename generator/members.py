"""Members of the IR's records, anonymous members looked through."""
from __future__ import annotations

from typing import List, Optional, Tuple

from .ir import IR, Field, Record, Type
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


def member_chain(ir: IR, record: Record, path: str, where: str) -> List[Tuple[Record, Field]]:
    """Each record a member path goes through and the member taken in it,
    anonymous members included: "wr.rdma.rkey" of struct ibv_send_wr is
    (struct ibv_send_wr, wr), (union ...::wr, rdma), (struct ...::wr::rdma,
    rkey); an anonymous member is a Field named ""."""
    member_type(ir, record, path, where)      # refuses a path that is not there
    chain: List[Tuple[Record, Field]] = []
    current = record
    for part in path.split("."):
        steps = _steps_to(ir, current, part)
        assert steps is not None
        chain += steps
        t = find_field(ir, current, part)
        nested = ir.record(t.decl or t.spelling) if t is not None else None
        if nested is not None:
            current = nested
    return chain


def _steps_to(ir: IR, record: Record, name: str) -> Optional[List[Tuple[Record, Field]]]:
    for f in record.fields:
        if f.name == name:
            return [(record, f)]
        if f.name == "":
            nested = ir.record(f.type.decl or f.type.spelling)
            if nested is not None:
                inner = _steps_to(ir, nested, name)
                if inner is not None:
                    return [(record, f)] + inner
    return None
