"""spec/datapath/records.yaml + the verbs IR -> the data-path types' model.

The data-path types (SGE, SendWR, RecvWR, PostList entries, WC, WCBuffer,
AsyncEvent) show the fields of a few C structs (struct ibv_sge,
ibv_send_wr, ibv_recv_wr, ibv_wc, ibv_async_event).  The spec file is read
once into typed objects (generator/records_spec.py: every key checked,
errors name spec/datapath/records.yaml and the line); this stage reads
those with the IR and builds the model (generator/record_model.py):

* a field converter per (C struct, field), of the kind its `convert:` says
  (generator/converters/record_fields.py): the one place a Python value
  becomes that field's C value (range, byte order, validity check) and
  back; every type showing the field calls it;
* a RecordTypeModel per Python class: where its object keeps the C values,
  its attributes and the type shell;
* each union of a struct (UnionModel): its members' C paths and the rules
  that pick one for a request (an AH, the opcode, otherwise), from which
  the fill of the request a post hands the provider is generated (a type's
  `fills:`).  A field inside a union that names no member, a member
  without a rule, a path the IR's struct does not have are refused.

generator/render.py renders it (with the rest of the model): templates/records.h.j2
the converters and object layouts (generated/records.h),
templates/record_type.c.h.j2 one type (generated/<type>.c.h).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from .converters import RECORD_FIELDS, RecordFieldConverter
from .ctext import value_runs
from .enum_fields import EnumFields
from .ir import IR, Record
from .members import member_chain, member_type
from .record_model import (EmbeddedStruct, RecordAttribute, RecordFieldMethod, RecordMethod, RecordModel,
                    RecordParser, RecordReach, RecordsModel, RecordTypeModel,
                    SequenceSlots, UnionMember, UnionModel)
from .records_spec import (RecordFieldSpec, RecordSpec, RecordsSpec, TypeAttributeSpec, TypeSpec,
                           UnionMemberSpec, load)
from .spec import SpecError

# --- building -----------------------------------------------------------------


def _converter(ir: IR, rec: Record, key: str, f: RecordFieldSpec, small: bool) -> RecordFieldConverter:
    name, where = f.name, f.at
    paths = f.union or [("", name)]
    types = {member_type(ir, rec, path, where).spelling for _, path in paths}
    if len(types) != 1:
        raise SpecError(f"{where}: {key}.{name}: the union members differ in type ({types})")
    t = member_type(ir, rec, paths[0][1], where)
    if t.kind not in ("int", "enum") or t.size not in (1, 2, 4, 8):
        raise SpecError(f"{where}: {key}.{name}: {t.spelling} is no integer")
    # the converter of its kind (generator/converters/record_fields.py); a
    # plain integer needs no `convert:`
    cls = RECORD_FIELDS.get(str(f.convert or "int"))
    if cls is None:
        raise SpecError(f"{f.where('convert')}: {key}.{name}: unknown convert")
    refused = cls.refuses(t)
    if refused:
        raise SpecError(f"{where}: {key}.{name}: {refused}")
    check = None
    if f.check is not None:
        enum = ir.enum(t.decl or t.spelling) if t.kind == "enum" else None
        if enum is None or f.check[0] is not True:
            raise SpecError(f"{f.where('check')}: {key}.{name}: check needs "
                            f"`members: true` on an enum field")
        check = (value_runs(sorted({m.value for m in enum.members})), str(f.check[1]))
    conv: RecordFieldConverter = cls(key, name, t, small_int=small, check=check,
                                     union=paths if f.union else (),
                                     written=f.hand,
                                     layout=[(p, t.size) for _, p in paths])
    return conv


def _union_member(ir: IR, rec: Record, key: str, union: str,
                  m: UnionMemberSpec) -> Tuple[UnionMember, Record]:
    """One member of a union and its rule; with the IR union it is a member of."""
    label = f"{key}.unions.{union}.{m.name}"
    container, _ = member_chain(ir, rec, m.path, m.where("path"))[-1]
    if container.kind != "union":
        raise SpecError(f"{m.where('path')}: {label}: {m.path} is not a member of a union "
                        f"of {rec.name}")
    return UnionMember(m.name, m.path, m.user, ah=m.rule == "ah", opcodes=list(m.opcodes),
                       otherwise=m.rule == "otherwise"), container


def _unions(ir: IR, rec: Record, r: RecordSpec) -> List[UnionModel]:
    """The members of one IR union each, their rules tried in order."""
    out = []
    for u in r.unions:
        members, containers = [], set()
        for m in u.members:
            member, container = _union_member(ir, rec, r.key, u.name, m)
            members.append(member)
            containers.add(container.name)
        if len(containers) != 1:
            raise SpecError(f"{u.at}: {r.key}.unions.{u.name}: its members are "
                            f"in different unions ({', '.join(sorted(containers))})")
        out.append(UnionModel(u.name, members))
    return out


def _check_field_paths(ir: IR, rec: Record, key: str, unions: List[UnionModel],
                       c: RecordFieldConverter, where: str) -> None:
    """A field inside a union says which member it lives in (and where), and
    each path it names lies inside that member."""
    members = {m.name: m for u in unions for m in u.members}
    if not c.union:
        through = [r.name for r, _ in member_chain(ir, rec, c.name, where) if r.kind == "union"]
        if through:
            raise SpecError(f"{where}: {key}.{c.name}: it lives in {through[0]}: say in which "
                            f"member, with its path (union: {{member: path}})")
        return
    for m, path in c.union:
        if m not in members:
            raise SpecError(f"{where}: {key}.{c.name}: {m} is not a member of a union of {key}")
        if path != members[m].path and not path.startswith(members[m].path + "."):
            raise SpecError(f"{where}: {key}.{c.name}: {path} is not inside member {m} "
                            f"({members[m].path})")


def _opcode_rules(ir: IR, r: RecordSpec, unions: List[UnionModel],
                  convs: Dict[str, RecordFieldConverter]) -> Optional[RecordFieldConverter]:
    """The `opcode` field the `opcodes` rules read; each opcode a member of its enum."""
    key = r.key
    named = [(u, m) for u in unions for m in u.members if m.opcodes]
    if not named:
        return None
    opcode = convs.get("opcode")
    enum = ir.enum(opcode.ctype) if opcode is not None and opcode.enum else None
    if enum is None:
        raise SpecError(f"{r.where('unions')}: {key}: an opcodes rule needs an enum "
                        f"field `opcode`")
    known = {e.name for e in enum.members}
    at = {(u.name, m.name): m.at for u in r.unions for m in u.members}
    for u, m in named:
        for o in m.opcodes:
            if o not in known:
                raise SpecError(f"{at[(u.name, m.name)]}: {key}.unions."
                                f"{u.name}.{m.name}: {o} is not a member of {enum.name}")
    return opcode


def _tail(ir: IR, rec: Record, unions: List[UnionModel]) -> Optional[Tuple[UnionModel, str]]:
    """The struct's last member when it is a union whose members only
    opcodes pick: the name a post's copy stops at."""
    for u in unions:
        if not all(m.opcodes for m in u.members):
            continue
        first = u.members[0].path
        top = member_chain(ir, rec, first, "")[0][1]
        if top is rec.fields[-1]:
            return u, first.split(".")[0]
    return None


def _records(ir: IR, spec: RecordsSpec) -> List[RecordModel]:
    # the records a type fills (`fills:`): the requests handed to the
    # provider, whose every field must say which union member it is in
    filled = {str(t.fills) for t in spec.types if t.fills is not None}
    out = []
    for r in spec.records:
        key = r.key
        rec = ir.record(r.ctype)
        if rec is None or not rec.complete:
            raise SpecError(f"{r.where('ctype')}: {key}: no complete {r.ctype} "
                            f"in {ir.source}")
        unions = _unions(ir, rec, r)
        convs = {f.name: _converter(ir, rec, key, f, r.small_ints) for f in r.fields}
        at = {f.name: f.at for f in r.fields}
        for c in convs.values():
            if key in filled or c.union:
                _check_field_paths(ir, rec, key, unions, c, at[c.name])
            owners = {next(u.name for u in unions if m in (x.name for x in u.members))
                      for m, _ in c.union}
            if len(owners) > 1:
                raise SpecError(f"{at[c.name]}: {key}.{c.name}: members of "
                                f"two unions ({', '.join(sorted(owners))})")
        out.append(RecordModel(key, r.ctype, unions, convs,
                               opcode=_opcode_rules(ir, r, unions, convs),
                               tail=_tail(ir, rec, unions)))
    return out


def _field_ref(records: Dict[str, RecordModel], ref: str, where: str) -> RecordFieldConverter:
    key, _, name = str(ref).partition(".")
    if key not in records or name not in records[key].converters:
        raise SpecError(f"{where}: no field {ref!r} in the records")
    return records[key].converters[name]


def _attribute(records: Any, a: TypeAttributeSpec) -> RecordAttribute:
    name, where, doc, readonly = a.name, a.at, a.doc, a.readonly
    if a.fields is not None:
        refs = a.fields
        convs = [_field_ref(records, r, where) for r in refs]
        if len(convs) == 2 and convs[0].ctype != convs[1].ctype:
            raise SpecError(f"{where}: {name}: {refs[0]} and {refs[1]} differ in type")
        if not readonly:
            for c in convs:
                if c.unsigned_max is None:
                    raise SpecError(f"{where}: {name}: a signed field cannot be written")
                c.written = True
        too_big = a.too_big
        if too_big and (convs[0].bits >= 64 or convs[0].unsigned_max is None):
            raise SpecError(f"{where}: {name}: too_big needs an unsigned field under 64 bits")
        out = RecordAttribute(name, doc, "kinds" if len(convs) == 2 else "field", convs[0],
                              convs[1] if len(convs) == 2 else None, readonly,
                              a.prepared, a.check, too_big=too_big)
    elif a.has("ref"):
        out = RecordAttribute(name, doc, "ref", readonly=readonly, ref_type=a.ref)
    elif a.has("flag"):
        out = RecordAttribute(name, doc, "flag", readonly=readonly, member=a.flag)
    else:
        out = RecordAttribute(name, doc, "slot" if a.has("slot") else "hand", get=a.hand_get,
                              set=a.hand_set, member=a.slot)
    out.stub, out.stub_set = a.stub, a.stub_set
    return out


def _reach(records: Any, t: TypeSpec) -> Dict[str, RecordReach]:
    reach = {}
    for r in t.reach:
        if r.record not in records:
            raise SpecError(f"{r.at}: {t.name}: no record {r.record}")
        reach[r.record] = RecordReach(r.record, records[r.record].ctype, r.function,
                                      after=r.after, by_index=r.by_index)
    return reach


def _type(records: Any, t: TypeSpec) -> RecordTypeModel:
    name, kind = t.name, t.storage
    reach = _reach(records, t)
    attributes = [_attribute(records, a) for a in t.attributes]
    embedded = None
    if kind == "state" and any(a.conv for a in attributes):
        conv = next(a.name for a in attributes if a.conv)
        raise SpecError(f"{next(a.at for a in t.attributes if a.name == conv)}: "
                        f"{name}: a field attribute needs a storage")
    if kind == "embedded":
        ctypes = {a.conv.record for a in attributes if a.conv}
        if len(ctypes) != 1:
            raise SpecError(f"{t.where('storage')}: {name}: an embedded struct shows one record")
        embedded = EmbeddedStruct(str(t.embedded), records[ctypes.pop()].ctype)
    methods = [RecordMethod(m.name, m.function, m.flags, m.doc, m.stub) for m in t.methods]
    field_methods = [RecordFieldMethod(f.name, _field_ref(records, f.field, f.at), f.doc)
                     for f in t.field_methods]
    init_parser = _parser(t.init_parser)
    new_parser = _parser(t.new_parser)
    return RecordTypeModel(
        name, t.doc, kind, embedded, reach, list(t.refs), list(t.state),
        attributes, methods, field_methods, changed=t.changed,
        guard=t.guard, union=t.union,
        init="impl" if init_parser else t.init, init_parser=init_parser,
        new="impl" if new_parser else t.new, new_parser=new_parser,
        repr=t.repr, dealloc=t.dealloc, getattro=t.getattro,
        sequence=SequenceSlots(*t.sequence) if t.sequence else None,
        gc=t.gc, basetype=t.basetype,
        clear=t.clear, traverse=t.traverse, clear_function=t.clear_function,
        stubs=dict(t.stubs), fills=_fills(records, t, attributes),
        lock=t.lock, vectorcall=t.vectorcall)


def _parser(p: Any) -> Optional[RecordParser]:
    return None if p is None else RecordParser(p.args + p.keyword_only, p.required,
                                               len(p.keyword_only))


def _fills(records: Dict[str, RecordModel], t: TypeSpec,
           attributes: List[RecordAttribute]) -> Optional[str]:
    """`fills: <record>`: the type's fields, all of that record, make the C
    request; the rules' inputs (opcode, the AH) are the type's own."""
    name, kind, key = t.name, t.storage, t.fills
    if key is None:
        return None
    where = t.where("fills")
    if key not in records or kind not in ("members", "embedded"):
        raise SpecError(f"{where}: {name}: fills names a record the type keeps "
                        f"(storage members or embedded)")
    rec = records[key]
    for a in attributes:
        if a.kind == "field" and a.conv is not None and a.conv.record != key:
            raise SpecError(f"{where}: {name}: {a.name} is a field of {a.conv.record}, "
                            f"not of {key}")
    for a in attributes:
        if a.kind == "field" and a.conv is not None and a.conv.union and (
                kind == "embedded" or not a.calls_changed):
            raise SpecError(f"{where}: {name}: {a.name} is in a union: only a prepared "
                            f"field of a `members` type is placed by the union rules")
    shown = {a.name: a for a in attributes}
    if rec.uses_ah and getattr(shown.get("ah"), "kind", None) != "ref":
        raise SpecError(f"{where}: {name}: an `ah` rule of {key} needs the type's `ah` ref")
    if rec.opcode is not None and getattr(shown.get("opcode"), "conv", None) is not rec.opcode:
        raise SpecError(f"{where}: {name}: an `opcodes` rule of {key} needs the type's "
                        f"opcode field")
    return str(key)


def build(ir: IR, spec_root: str, enum_fields: Optional[EnumFields] = None) -> RecordsModel:
    """The data-path types' model from the spec file (read once,
    generator/records_spec.py) and the verbs IR."""
    spec = load(spec_root)
    records = _records(ir, spec)
    if enum_fields is not None:     # the fields that show as enum members
        for r in records:
            for c in r.converters.values():
                c.enum_class = enum_fields.of_spelling(r.ctype, c.layout[0][0], c.ctype, c.enum)
    by_key = {r.key: r for r in records}
    types = [_type(by_key, t) for t in spec.types]
    return RecordsModel(ir, spec, dict(spec.helpers), records,
                        types, enum_fields.class_names() if enum_fields else [])
