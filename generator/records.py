"""spec/datapath/records.yaml + the verbs IR -> the data-path types' model.

The data-path types (SGE, SendWR, RecvWR, PostList entries, WC, WCBuffer,
AsyncEvent) show the fields of a few C structs (struct ibv_sge,
ibv_send_wr, ibv_recv_wr, ibv_wc, ibv_async_event).  This stage reads the
spec file, checks every key (errors name spec/datapath/records.yaml and the
line) and builds the model (generator/model.py's Record* classes):

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

generator/render.py (render_records) renders it: templates/records.h.j2
the converters and object layouts (generated/records.h),
templates/record_type.c.h.j2 one type (generated/<type>.c.h).
"""
from __future__ import annotations

import hashlib
import os
from typing import AbstractSet, Any, Dict, List, Optional, Tuple

from .converters import RECORD_FIELDS, RecordFieldConverter
from .ctext import value_runs
from .enum_fields import EnumFields
from .ir import IR, Record
from .members import member_chain, member_type
from .record_model import (EmbeddedStruct, RecordAttribute, RecordFieldMethod, RecordMethod, RecordModel,
                    RecordParser, RecordReach, RecordsModel, RecordTypeModel,
                    SequenceSlots, UnionMember, UnionModel)
from .spec import Node, SpecError, SpecFiles, check_keys, load_file

SPEC_FILE = os.path.join("datapath", "records.yaml")
DISPLAY = "spec/datapath/records.yaml"

TOP_KEYS = {"helpers", "records", "types"}
HELPER_KEYS = {"unsigned", "small_int", "parse", "type_name", "parse_vector", "call_type"}
RECORD_KEYS = {"ctype", "fields", "unions", "small_ints"}
# a field's: those of every converter kind (generator/converters/record_fields.py)
FIELD_KEYS = frozenset().union(*(c.keys for c in RECORD_FIELDS.by_kind.values()))
TYPE_KEYS = {"doc", "storage", "refs", "state", "changed", "init", "repr", "attributes",
             "methods", "guard", "union", "clear", "new", "basetype", "gc", "dealloc",
             "traverse", "getattro", "sequence", "field_methods", "readonly", "stub", "fills",
             "lock",    # the ref whose critical section its entries take (a view of another object)
             "vectorcall"}  # a Py_tp_vectorcall constructor where the target's API has the slot
SEQUENCE_KEYS = {"length", "item", "set_item"}
ATTR_KEYS = {"field", "readonly", "ref", "hand", "slot", "flag", "check", "prepared", "doc",
             "too_big", "stub"}
METHOD_KEYS = {"function", "flags", "doc", "stub"}
FIELD_METHOD_KEYS = {"field", "doc"}
# init: {...} / new: {...}: a generated parser of the constructor's arguments
PARSER_KEYS = {"args", "required", "keyword_only"}
FLAGS = {"METH_O", "METH_NOARGS"}


def _keys(node: Any, allowed: AbstractSet[str], what: str) -> Node:
    """*node*, a mapping of *allowed* keys only (spec.check_keys, as the verbs spec's)."""
    if not isinstance(node, Node):
        raise SpecError(f"{DISPLAY}: {what}: expected a mapping")
    check_keys(node, allowed, what)
    return node


def _needs(node: Node, keys: AbstractSet[str], what: str) -> Node:
    """Refuse *node* without one of *keys*."""
    for key in sorted(keys):
        if key not in node:
            raise SpecError(f"{node.where()}: {what}: needs {key!r}")
    return node


# --- building -----------------------------------------------------------------


def _converter(ir: IR, rec: Record, key: str, name: str, node: Node, small: bool,
               where: str) -> RecordFieldConverter:
    node = _keys(node if node is not None else Node(), FIELD_KEYS, f"{key}.{name}")
    union = node.get("union")
    paths = list(union.items()) if union else [("", name)]
    types = {member_type(ir, rec, path, where).spelling for _, path in paths}
    if len(types) != 1:
        raise SpecError(f"{where}: {key}.{name}: the union members differ in type ({types})")
    t = member_type(ir, rec, paths[0][1], where)
    if t.kind not in ("int", "enum") or t.size not in (1, 2, 4, 8):
        raise SpecError(f"{where}: {key}.{name}: {t.spelling} is no integer")
    convert = node.get("convert")
    # the converter of its kind (generator/converters/record_fields.py); a
    # plain integer needs no `convert:`
    cls = RECORD_FIELDS.get(str(convert or "int"))
    if cls is None:
        raise SpecError(f"{node.where('convert')}: {key}.{name}: unknown convert")
    refused = cls.refuses(t)
    if refused:
        raise SpecError(f"{where}: {key}.{name}: {refused}")
    check = node.get("check")
    if check is not None:
        _keys(check, {"members", "message"}, f"{key}.{name}.check")
        enum = ir.enum(t.decl or t.spelling) if t.kind == "enum" else None
        if enum is None or check.get("members") is not True:
            raise SpecError(f"{node.where('check')}: {key}.{name}: check needs "
                            f"`members: true` on an enum field")
        check = (value_runs(sorted({m.value for m in enum.members})), str(check["message"]))
    conv: RecordFieldConverter = cls(key, name, t, small_int=small, check=check,
                                     union=paths if union else (),
                                     written=bool(node.get("hand")),
                                     layout=[(p, t.size) for _, p in paths])
    return conv


UNION_MEMBER_KEYS = {"path", "user", "ah", "opcodes", "otherwise"}
RULES = ("ah", "opcodes", "otherwise")


def _union_member(ir: IR, rec: Record, key: str, union: str, name: str, node: Any,
                  where: str) -> Tuple[UnionMember, Record]:
    """One member of a union and its rule; with the IR union it is a member of."""
    label = f"{key}.unions.{union}.{name}"
    node = _needs(_keys(node, UNION_MEMBER_KEYS, label), {"path", "user"}, label)
    rules = [r for r in RULES if r in node]
    if len(rules) != 1:
        raise SpecError(f"{where}: {label}: needs one rule that picks it (ah: true, "
                        f"opcodes: [...] or otherwise: true), not {len(rules)}")
    if rules[0] in ("ah", "otherwise") and node[rules[0]] is not True:
        raise SpecError(f"{node.where(rules[0])}: {label}: {rules[0]} takes true")
    path = str(node["path"])
    container, _ = member_chain(ir, rec, path, node.where("path"))[-1]
    if container.kind != "union":
        raise SpecError(f"{node.where('path')}: {label}: {path} is not a member of a union "
                        f"of {rec.name}")
    opcodes = [str(o) for o in node.get("opcodes") or []]
    if rules[0] == "opcodes" and not opcodes:
        raise SpecError(f"{node.where('opcodes')}: {label}: opcodes names one at least")
    return UnionMember(name, path, str(node["user"]), ah=rules[0] == "ah", opcodes=opcodes,
                       otherwise=rules[0] == "otherwise"), container


def _unions(ir: IR, rec: Record, key: str, node: Node) -> List[UnionModel]:
    """`unions: {name: {member: {path, user, rule}}}`: the members of one
    IR union each, their rules tried in order, `otherwise` last."""
    out = []
    unions = node.get("unions") or Node()
    for uname, unode in unions.items():
        if not isinstance(unode, Node) or not unode:
            raise SpecError(f"{unions.where(uname)}: {key}.unions.{uname}: expected a mapping "
                            f"of members")
        members, containers = [], set()
        for mname, mnode in unode.items():
            member, container = _union_member(ir, rec, key, uname, mname, mnode,
                                               unode.where(mname))
            members.append(member)
            containers.add(container.name)
        if len(containers) != 1:
            raise SpecError(f"{unions.where(uname)}: {key}.unions.{uname}: its members are "
                            f"in different unions ({', '.join(sorted(containers))})")
        for m in members[:-1]:
            if m.otherwise:
                raise SpecError(f"{unode.where(m.name)}: {key}.unions.{uname}.{m.name}: "
                                f"otherwise is the last member's rule")
        out.append(UnionModel(str(uname), members))
    every = [m.name for u in out for m in u.members]
    if len(set(every)) != len(every):
        raise SpecError(f"{node.where('unions')}: {key}: a member name in two unions")
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


def _opcode_rules(ir: IR, key: str, node: Node, unions: List[UnionModel],
                  convs: Dict[str, RecordFieldConverter]) -> Optional[RecordFieldConverter]:
    """The `opcode` field the `opcodes` rules read; each opcode a member of its enum."""
    named = [(u, m) for u in unions for m in u.members if m.opcodes]
    if not named:
        return None
    opcode = convs.get("opcode")
    enum = ir.enum(opcode.ctype) if opcode is not None and opcode.enum else None
    if enum is None:
        raise SpecError(f"{node.where('unions')}: {key}: an opcodes rule needs an enum "
                        f"field `opcode`")
    known = {e.name for e in enum.members}
    for u, m in named:
        for o in m.opcodes:
            if o not in known:
                raise SpecError(f"{node['unions'][u.name].where(m.name)}: {key}.unions."
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


def _records(ir: IR, data: Node) -> List[RecordModel]:
    # the records a type fills (`fills:`): the requests handed to the
    # provider, whose every field must say which union member it is in
    filled = {str(t.get("fills")) for t in (data.get("types") or {}).values()
              if isinstance(t, Node) and t.get("fills") is not None}
    out = []
    for key, node in (data.get("records") or {}).items():
        node = _keys(node, RECORD_KEYS, key)
        rec = ir.record(node["ctype"])
        if rec is None or not rec.complete:
            raise SpecError(f"{node.where('ctype')}: {key}: no complete {node['ctype']} "
                            f"in {ir.source}")
        unions = _unions(ir, rec, key, node)
        fields = node["fields"]
        convs = {name: _converter(ir, rec, key, name, fnode, bool(node.get("small_ints")),
                                  fields.where(name))
                 for name, fnode in fields.items()}
        for c in convs.values():
            if key in filled or c.union:
                _check_field_paths(ir, rec, key, unions, c, fields.where(c.name))
            owners = {next(u.name for u in unions if m in (x.name for x in u.members))
                      for m, _ in c.union}
            if len(owners) > 1:
                raise SpecError(f"{fields.where(c.name)}: {key}.{c.name}: members of "
                                f"two unions ({', '.join(sorted(owners))})")
        out.append(RecordModel(key, node["ctype"], unions, convs,
                               opcode=_opcode_rules(ir, key, node, unions, convs),
                               tail=_tail(ir, rec, unions)))
    return out


def _field_ref(records: Dict[str, RecordModel], ref: str, where: str) -> RecordFieldConverter:
    key, _, name = str(ref).partition(".")
    if key not in records or name not in records[key].converters:
        raise SpecError(f"{where}: no field {ref!r} in the records")
    return records[key].converters[name]


def _attribute(records: Any, name: str, node: Node, where: str, readonly: bool) -> RecordAttribute:
    node = _keys(node, ATTR_KEYS, f"attribute {name}")
    doc = str(node.get("doc", ""))
    readonly = readonly or bool(node.get("readonly"))
    if "field" in node:
        refs = node["field"] if isinstance(node["field"], list) else [node["field"]]
        convs = [_field_ref(records, r, where) for r in refs]
        if len(convs) == 2 and convs[0].ctype != convs[1].ctype:
            raise SpecError(f"{where}: {name}: {refs[0]} and {refs[1]} differ in type")
        if not readonly:
            for c in convs:
                if c.unsigned_max is None:
                    raise SpecError(f"{where}: {name}: a signed field cannot be written")
                c.written = True
        too_big = node.get("too_big")
        if too_big and (convs[0].bits >= 64 or convs[0].unsigned_max is None):
            raise SpecError(f"{where}: {name}: too_big needs an unsigned field under 64 bits")
        return RecordAttribute(name, doc, "kinds" if len(convs) == 2 else "field", convs[0],
                         convs[1] if len(convs) == 2 else None, readonly,
                         node.get("prepared", True), node.get("check"), too_big=too_big)
    if "ref" in node:
        return RecordAttribute(name, doc, "ref", readonly=readonly, ref_type=node["ref"])
    if "flag" in node:
        return RecordAttribute(name, doc, "flag", readonly=readonly, member=node["flag"])
    if "hand" in node:
        hand = _keys(node["hand"], {"get", "set"}, f"attribute {name}.hand")
        return RecordAttribute(name, doc, "slot" if "slot" in node else "hand", get=hand["get"],
                         set=hand.get("set"), member=node.get("slot"))
    raise SpecError(f"{where}: {name}: needs field, ref, flag or hand")


def _storage(records: Any, node: Node, name: str) -> Tuple[str, Any, Dict[str, Any]]:
    storage = node.get("storage")
    if storage is None:        # the object keeps its `state` (and refs) only
        return "state", None, {}
    if storage == "members":
        return "members", None, {}
    storage = _keys(storage, {"embedded", "reach"}, f"{name}.storage")
    if "embedded" in storage:
        return "embedded", storage["embedded"], {}
    reach = {}
    for record, rnode in storage["reach"].items():
        if record not in records:
            raise SpecError(f"{storage['reach'].where(record)}: {name}: no record {record}")
        if isinstance(rnode, str):
            rnode = {"function": rnode}
        _keys(rnode if isinstance(rnode, Node) else Node(rnode), {"function", "after", "by"},
              f"{name}.storage.reach.{record}")
        reach[record] = RecordReach(record, records[record].ctype, rnode["function"],
                              after=bool(rnode.get("after")),
                              by_index=rnode.get("by") == "index")
    return "reach", None, reach


def _type(records: Any, name: str, node: Node) -> RecordTypeModel:
    node = _keys(node, TYPE_KEYS, name)
    kind, member, reach = _storage(records, node, name)
    attrs = node.get("attributes") or Node()
    attributes = [_attribute(records, a, anode, attrs.where(a), bool(node.get("readonly")))
                  for a, anode in attrs.items()]
    embedded = None
    if kind == "state" and any(a.conv for a in attributes):
        raise SpecError(f"{attrs.where(next(a.name for a in attributes if a.conv))}: "
                        f"{name}: a field attribute needs a storage")
    if kind == "embedded":
        ctypes = {a.conv.record for a in attributes if a.conv}
        if len(ctypes) != 1:
            raise SpecError(f"{node.where('storage')}: {name}: an embedded struct shows one record")
        embedded = EmbeddedStruct(member, records[ctypes.pop()].ctype)
    for a in attributes:
        _attribute_stub(a, attrs[a.name])
    methods = [RecordMethod(m, _keys(mn, METHOD_KEYS, f"{name}.{m}")["function"], mn["flags"],
                         mn["doc"], _signature(mn.where("stub"), f"{name}.{m}", mn["stub"])
                         if "stub" in mn else None)
               for m, mn in (node.get("methods") or {}).items()]
    for m in methods:
        if m.flags not in FLAGS:
            raise SpecError(f"{node['methods'].where(m.name)}: {name}.{m.name}: flags "
                            f"must be one of {sorted(FLAGS)}")
    fms = node.get("field_methods") or Node()
    field_methods = [RecordFieldMethod(f, _field_ref(records, fn["field"], fms.where(f)), fn["doc"])
                     for f, fn in ((f, _needs(_keys(fn, FIELD_METHOD_KEYS, f"{name}.{f}"),
                                              FIELD_METHOD_KEYS, f"{name}.{f}"))
                                   for f, fn in fms.items())]
    state = [(k, str(v)) for k, v in (node.get("state") or {}).items()]
    seq = _sequence(node, name)
    traverse, clear = _gc_functions(node, name)
    init, new = node.get("init"), node.get("new")
    init_parser = _arg_parser(node, "init", name) if isinstance(init, Node) else None
    new_parser = _arg_parser(node, "new", name) if isinstance(new, Node) else None
    return RecordTypeModel(
        name, node["doc"], kind, embedded, reach, list(node.get("refs") or []), state,
        attributes, methods, field_methods, changed=node.get("changed"),
        guard=node.get("guard"), union=node.get("union"),
        init="impl" if init_parser else init, init_parser=init_parser,
        new="impl" if new_parser else new, new_parser=new_parser,
        repr=node.get("repr"), dealloc=node.get("dealloc"),
        getattro=node.get("getattro"),
        sequence=seq, gc=node.get("gc", True), basetype=node.get("basetype", True),
        clear=bool(node.get("clear", True)), traverse=traverse, clear_function=clear,
        stubs=_special_stubs(node, name), fills=_fills(records, node, name, kind, attributes),
        lock=_lock(node, name), vectorcall=_vectorcall(node, name))


def _vectorcall(node: Node, name: str) -> bool:
    """`vectorcall: true`: the type's constructor is also reached through
    Py_tp_vectorcall (on targets whose API has it), made of the same
    generated parser and stores as its tp_init: that needs a generated
    tp_init (`init: keywords` or an argument mapping) and the generic
    tp_new, which the vectorcall function stands in for."""
    value = node.get("vectorcall", False)
    if not isinstance(value, bool):
        raise SpecError(f"{node.where('vectorcall')}: {name}.vectorcall: true or false")
    if value and (node.get("new") is not None
                  or not (node.get("init") == "keywords" or isinstance(node.get("init"), Node))):
        raise SpecError(f"{node.where('vectorcall')}: {name}.vectorcall: needs `init: keywords` "
                        f"or an init argument mapping, and no `new`")
    return value


def _lock(node: Node, name: str) -> Optional[str]:
    """`lock: <ref>`: a view of another object (PostListEntry of its
    PostList) is that object's state: its entries take that object's
    critical section, which the object's own methods take too."""
    ref = node.get("lock")
    if ref is not None and ref not in (node.get("refs") or []):
        raise SpecError(f"{node.where('lock')}: {name}: lock names {ref!r}, which is not one "
                        f"of its refs")
    return ref


def _fills(records: Dict[str, RecordModel], node: Node, name: str, kind: str,
           attributes: List[RecordAttribute]) -> Optional[str]:
    """`fills: <record>`: the type's fields, all of that record, make the C
    request; the rules' inputs (opcode, the AH) are the type's own."""
    key = node.get("fills")
    if key is None:
        return None
    where = node.where("fills")
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


def _arg_parser(node: Node, key: str, name: str) -> RecordParser:
    """`{args: [names], required: n, keyword_only: [names]}`: the first n
    args are required; keyword_only ones follow the args, optional."""
    p = _keys(node[key], PARSER_KEYS, f"{name}.{key}")
    args = [str(a) for a in p.get("args") or []]
    kwonly = [str(a) for a in p.get("keyword_only") or []]
    required = int(p.get("required", 0))
    if not 0 <= required <= len(args):
        raise SpecError(f"{p.where('required')}: {name}.{key}: required must be 0..{len(args)} "
                        f"(the number of args; keyword_only ones are optional)")
    if len(set(args + kwonly)) != len(args + kwonly) or not args + kwonly:
        raise SpecError(f"{node.where(key)}: {name}.{key}: the argument names must be "
                        f"distinct, and one at least")
    return RecordParser(args + kwonly, required, len(kwonly))


def _sequence(node: Node, name: str) -> Optional[SequenceSlots]:
    """`sequence: {length: f, item: f, set_item: f}` (set_item optional)."""
    seq = node.get("sequence")
    if seq is None:
        return None
    seq = _keys(seq, SEQUENCE_KEYS, f"{name}.sequence")
    if "length" not in seq or "item" not in seq:
        raise SpecError(f"{node.where('sequence')}: {name}.sequence: needs length and item")
    return SequenceSlots(str(seq["length"]), str(seq["item"]), seq.get("set_item"))


def _gc_functions(node: Node, name: str) -> Tuple[Optional[str], Optional[str]]:
    """`traverse: f` and `clear: f`: hand-written GC slots, for a collected
    type that keeps its references elsewhere than in `refs`."""
    traverse = node.get("traverse")
    clear = node.get("clear")
    clear = clear if isinstance(clear, str) else None
    for key, fn in (("traverse", traverse), ("clear", clear)):
        if fn is None:
            continue
        if node.get("refs") or not node.get("gc", True):
            raise SpecError(f"{node.where(key)}: {name}: a hand-written {key} is for a "
                            f"collected type without refs (the generated one visits refs)")
    if clear and not traverse:
        raise SpecError(f"{node.where('clear')}: {name}: a hand-written clear needs a "
                        f"hand-written traverse")
    return traverse, clear


def _attribute_stub(a: RecordAttribute, node: Node) -> None:
    """`stub: T`, or `stub: {get: T, set: U}` where the setter takes more."""
    stub = node.get("stub")
    if isinstance(stub, Node):
        if set(stub) != {"get", "set"}:
            raise SpecError(f"{node.where('stub')}: {a.name}: stub is a type or {{get, set}}")
        a.stub, a.stub_set = str(stub["get"]), str(stub["set"])
    elif stub is not None:
        a.stub = a.stub_set = str(stub)


def _signature(where: str, label: str, sig: Any) -> str:
    text = str(sig)
    if not (text.startswith("(") and ") -> " in text):
        raise SpecError(f"{where}: {label}: stub must be a typed signature, "
                        f"\"(self, ...) -> T\", not {text!r}")
    return text


def _special_stubs(node: Node, name: str) -> Dict[str, str]:
    """A type's `stub:`: its hand-written special methods' signatures."""
    stubs = node.get("stub") or Node()
    if not isinstance(stubs, Node):
        raise SpecError(f"{node.where('stub')}: {name}: stub maps special methods "
                        f"(__init__, ...) to their signatures")
    out = {}
    for member, sig in stubs.items():
        if not (member.startswith("__") and member.endswith("__")):
            raise SpecError(f"{stubs.where(member)}: {name}.{member}: only special methods "
                            f"go here (a method's stub is in its entry)")
        out[member] = _signature(stubs.where(member), f"{name}.{member}", sig)
    return out


def build(ir: IR, spec_root: str, enum_fields: Optional[EnumFields] = None) -> RecordsModel:
    path = os.path.join(spec_root, SPEC_FILE)
    data = _keys(load_file(path, DISPLAY), TOP_KEYS, DISPLAY)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    helpers = dict(_keys(data["helpers"], HELPER_KEYS, "helpers"))
    _needs(data["helpers"], HELPER_KEYS, "helpers")
    records = _records(ir, data)
    if enum_fields is not None:     # the fields that show as enum members
        for r in records:
            for c in r.converters.values():
                c.enum_class = enum_fields.of_spelling(r.ctype, c.layout[0][0], c.ctype, c.enum)
    by_key = {r.key: r for r in records}
    types = [_type(by_key, name, node) for name, node in (data.get("types") or {}).items()]
    return RecordsModel(ir, SpecFiles([DISPLAY], digest), helpers, records, types,
                        enum_fields.class_names() if enum_fields else [])
