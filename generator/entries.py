"""Provider entry points a handle keeps for its hand short ways (spec
`entries:` of a handle class, read into HandleModel.entries;
templates/_entries.c.j2 renders them, generator/emit.py entry_access
spells the way to each).

    entries:
      post_recv: {verb: ibv_post_recv, path: context.ops.post_recv}

An entry is named for the method whose short way calls it (a method of
the class with `short_way: true`).  `verb` is the inline verb whose body
calls the entry (ibv_post_recv is
`qp->context->ops.post_recv(qp, wr, bad_wr)`); `path` is where the
function pointer is, read from the handle's verbs object through the IR's
records (a pointer member is followed with ->, an embedded struct with .).
The entry must have the verb's signature and return int, and the verb's
first parameter must be the handle's C type; anything else is a SpecError
naming the file and line.

The object keeps entry_<name> and entry_target.  While it is open they are
the provider's function and the verbs object; once closed (and while
close() has the GIL released), a generated <Class>_closed_<name> that
returns IBP_ENTRY_CLOSED, and the object itself, which that function
records in ibp_entry_closed (common.h).  So a short way calls the entry
with no open check of its own, and takes the long way on IBP_ENTRY_CLOSED
without keeping the object in a register across the call.
"""
from __future__ import annotations

from typing import AbstractSet, List, Optional, Tuple

from .ir import IR, Function, Record, Type
from .model import Entry, EntryParam, MemberStep
from .spec import Handle, SpecError
from .spec_types import EntrySpec

ENTRY_KEYS = {"verb", "path"}


def build(ir: IR, h: Handle, subclass: bool, short_ways: AbstractSet[str]) -> List[Entry]:
    """The entries of handle class h (short_ways: its methods with
    `short_way: true`, the only ones that call an entry)."""
    cls = h.name
    if not h.entries:
        return []
    if subclass:
        raise SpecError(f"{h.where('entries')}: {cls}: entries belong to the base class, "
                        "whose layout a subclass shares")
    for e in h.entries:
        if e.name not in short_ways:
            raise SpecError(f"{e.at}: {cls}.entries.{e.name}: an entry is named "
                            f"for the method whose short way calls it, and {cls} has no "
                            f"short_way method {e.name}")
    return [_entry(ir, cls, h.ctype, e) for e in h.entries]


def _entry(ir: IR, cls: str, ctype: str, espec: EntrySpec) -> Entry:
    name, where = espec.name, espec.at
    label = f"{where}: {cls}.entries.{name}"
    if not espec.mapping:
        raise SpecError(f"{label}: needs {{verb: ..., path: ...}}")
    for key in espec.keys:
        if key not in ENTRY_KEYS:
            raise SpecError(f"{espec.where(key)}: {cls}.entries.{name}: unknown key {key!r} "
                            f"(expected one of: {', '.join(sorted(ENTRY_KEYS))})")
    missing = sorted(ENTRY_KEYS - set(espec.keys))
    if missing:
        raise SpecError(f"{label}: needs {', '.join(missing)}")
    verb = ir.function(str(espec.verb))
    if verb is None:
        raise SpecError(f"{label}: no function {espec.verb}")
    _check_verb(label, verb, ctype)
    path, pointer = _resolve(ir, label, ctype, str(espec.path))
    wanted = f"{verb.result.spelling} ({', '.join(p.type.spelling for p in verb.params)})"
    function = pointer.pointee
    if pointer.kind != "pointer" or function is None or function.kind != "function":
        raise SpecError(f"{label}: {espec.path} is {pointer.spelling}, not a function pointer")
    if function.spelling != wanted:
        raise SpecError(f"{label}: {espec.path} is {pointer.spelling}, but {verb.name} "
                        f"is {wanted}")
    params = [EntryParam(p.type.spelling, p.name) for p in verb.params]
    return Entry(name, verb.name, params, path)


def _check_verb(label: str, verb: Function, ctype: str) -> None:
    if verb.result.spelling != "int":
        raise SpecError(f"{label}: {verb.name} returns {verb.result.spelling}: an entry "
                        "returns int (IBP_ENTRY_CLOSED once closed)")
    first = verb.params[0].type if verb.params else None
    if first is None or first.kind != "pointer" or first.pointee is None or \
            (first.pointee.decl or first.pointee.spelling) != ctype:
        raise SpecError(f"{label}: {verb.name}'s first parameter must be {ctype} *")
    if any(not p.name for p in verb.params):
        raise SpecError(f"{label}: {verb.name} has an unnamed parameter")


def _resolve(ir: IR, label: str, ctype: str, path: str) -> Tuple[List[MemberStep], Type]:
    """The members leading along path from a ctype *, and the type of the
    last one."""
    record: Optional[Record] = ir.record(ctype)
    steps: List[MemberStep] = []
    pointer = True
    parts = path.split(".")
    for i, part in enumerate(parts):
        if record is None:
            raise SpecError(f"{label}: {'.'.join(parts[:i])} is no struct to read {part} from")
        member = next((f for f in record.fields if f.name == part), None)
        if member is None:
            raise SpecError(f"{label}: {record.name} has no member {part!r}")
        steps.append(MemberStep(part, pointer))
        t = member.type
        if i == len(parts) - 1:
            return steps, t
        if t.kind == "pointer" and t.pointee is not None and t.pointee.kind == "struct":
            record, pointer = ir.record(t.pointee.decl or t.pointee.spelling), True
        elif t.kind == "struct":
            record, pointer = ir.record(t.decl or t.spelling), False
        else:
            record = None
    raise SpecError(f"{label}: an empty path")
