"""spec/datapath/records.yaml -> typed spec objects, read once: the C
structs the data-path types show (records: their fields, unions and the
rules that pick a union's member) and the Python types (where an object
keeps its values, its attributes, methods and type shell).

Every key is checked here against the keys its entry takes, and every
shape (a mapping, a list, true or false) that needs nothing of the
headers; generator/records.py then reads only these objects, with the
IR, to build the model.  Each object keeps its file:line.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import AbstractSet, Any, Dict, List, Optional, Tuple

from .converters import RECORD_FIELDS
from .spec import Node, SpecError, SpecFiles, check_keys, load_file
from .spec_types import Location

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
UNION_MEMBER_KEYS = {"path", "user", "ah", "opcodes", "otherwise"}
RULES = ("ah", "opcodes", "otherwise")


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


# --- records --------------------------------------------------------------------


@dataclass
class RecordFieldSpec:
    """A field of a record: its union members and paths (none: the member
    of its name), its converter's kind, its check of enum members."""
    name: str
    at: str
    location: Location
    union: List[Tuple[str, str]]
    convert: Optional[str]
    hand: bool
    check: Optional[Tuple[Any, Any]]      # (members, message) as written

    def where(self, key: str) -> str:
        return self.location.where(key)


@dataclass
class UnionMemberSpec:
    name: str
    at: str
    location: Location
    path: str
    user: str
    rule: str                  # ah | opcodes | otherwise
    opcodes: List[str]

    def where(self, key: str) -> str:
        return self.location.where(key)


@dataclass
class UnionSpec:
    name: str
    at: str
    members: List[UnionMemberSpec]


@dataclass
class RecordSpec:
    key: str
    ctype: str
    location: Location
    unions: List[UnionSpec]
    fields: List[RecordFieldSpec]
    small_ints: bool

    def where(self, key: str) -> str:
        return self.location.where(key)


def _field(key: str, name: str, node: Any, at: str) -> RecordFieldSpec:
    node = _keys(node if node is not None else Node(), FIELD_KEYS, f"{key}.{name}")
    union = node.get("union")
    check = node.get("check")
    if check is not None:
        _keys(check, {"members", "message"}, f"{key}.{name}.check")
        check = (check.get("members"), check.get("message"))
    return RecordFieldSpec(name, at, Location.of(node),
                           [(str(m), str(p)) for m, p in union.items()] if union else [],
                           node.get("convert"), bool(node.get("hand")), check)


def _union_member(key: str, union: str, name: str, node: Any, at: str) -> UnionMemberSpec:
    label = f"{key}.unions.{union}.{name}"
    node = _needs(_keys(node, UNION_MEMBER_KEYS, label), {"path", "user"}, label)
    rules = [r for r in RULES if r in node]
    if len(rules) != 1:
        raise SpecError(f"{at}: {label}: needs one rule that picks it (ah: true, "
                        f"opcodes: [...] or otherwise: true), not {len(rules)}")
    if rules[0] in ("ah", "otherwise") and node[rules[0]] is not True:
        raise SpecError(f"{node.where(rules[0])}: {label}: {rules[0]} takes true")
    opcodes = [str(o) for o in node.get("opcodes") or []]
    if rules[0] == "opcodes" and not opcodes:
        raise SpecError(f"{node.where('opcodes')}: {label}: opcodes names one at least")
    return UnionMemberSpec(name, at, Location.of(node), str(node["path"]), str(node["user"]),
                           rules[0], opcodes)


def _unions(key: str, node: Node) -> List[UnionSpec]:
    """`unions: {name: {member: {path, user, rule}}}`, their rules in order,
    `otherwise` last."""
    out = []
    unions = node.get("unions") or Node()
    for uname, unode in unions.items():
        if not isinstance(unode, Node) or not unode:
            raise SpecError(f"{unions.where(uname)}: {key}.unions.{uname}: expected a mapping "
                            f"of members")
        members = [_union_member(key, str(uname), str(m), mnode, unode.where(m))
                   for m, mnode in unode.items()]
        for m in members[:-1]:
            if m.rule == "otherwise":
                raise SpecError(f"{m.at}: {key}.unions.{uname}.{m.name}: "
                                f"otherwise is the last member's rule")
        out.append(UnionSpec(str(uname), unions.where(uname), members))
    every = [m.name for u in out for m in u.members]
    if len(set(every)) != len(every):
        raise SpecError(f"{node.where('unions')}: {key}: a member name in two unions")
    return out


def _record(key: str, node: Any) -> RecordSpec:
    node = _needs(_keys(node, RECORD_KEYS, key), {"ctype", "fields"}, key)
    fields = node["fields"]
    return RecordSpec(str(key), str(node["ctype"]), Location.of(node), _unions(key, node),
                      [_field(key, str(n), fnode, fields.where(n)) for n, fnode in fields.items()],
                      bool(node.get("small_ints")))


# --- types ------------------------------------------------------------------------


@dataclass
class TypeAttributeSpec:
    """An attribute of a type: a record field (or two: `kinds`), a ref, a
    flag, or hand-written (`hand: {get, set}`, over a `slot`)."""
    name: str
    at: str
    location: Location
    keys: Tuple[str, ...]
    doc: str
    readonly: bool
    fields: Optional[List[str]] = None     # `field:` one ref or two
    ref: Optional[str] = None
    flag: Optional[str] = None
    hand_get: Optional[str] = None
    hand_set: Optional[str] = None
    slot: Optional[str] = None
    check: Optional[str] = None
    prepared: bool = True
    too_big: Optional[str] = None
    stub: Optional[str] = None
    stub_set: Optional[str] = None

    def has(self, key: str) -> bool:
        return key in self.keys


@dataclass
class ReachSpec:
    record: str
    at: str
    function: str
    after: bool
    by_index: bool


@dataclass
class TypeMethodSpec:
    name: str
    at: str
    function: str
    flags: str
    doc: str
    stub: Optional[str]


@dataclass
class FieldMethodSpec:
    name: str
    at: str
    field: str
    doc: str


@dataclass
class ParserSpec:
    """`init:` or `new:` as {args, required, keyword_only}."""
    args: List[str]
    keyword_only: List[str]
    required: int


@dataclass
class TypeSpec:
    """A data-path Python type as the spec writes it."""
    name: str
    location: Location
    keys: Tuple[str, ...]
    doc: str
    storage: str                   # state | members | embedded | reach
    embedded: Optional[str]        # the object's member holding the struct
    reach: List[ReachSpec]
    attributes: List[TypeAttributeSpec]
    methods: List[TypeMethodSpec]
    field_methods: List[FieldMethodSpec]
    refs: List[str]
    state: List[Tuple[str, str]]
    init: Any                      # a hand function, "keywords", or None (or a parser)
    init_parser: Optional[ParserSpec]
    new: Any
    new_parser: Optional[ParserSpec]
    sequence: Optional[Tuple[str, str, Optional[str]]]
    traverse: Optional[str]
    clear_function: Optional[str]
    clear: bool
    gc: Any
    basetype: Any
    stubs: Dict[str, str]
    fills: Optional[str]
    lock: Optional[str]
    vectorcall: bool
    changed: Optional[str] = None
    guard: Optional[str] = None
    union: Optional[str] = None
    repr: Optional[str] = None
    dealloc: Optional[str] = None
    getattro: Optional[str] = None

    def has(self, key: str) -> bool:
        return key in self.keys

    def where(self, key: Optional[str] = None) -> str:
        return self.location.where(key)


def _attribute(name: str, node: Any, at: str, readonly: bool) -> TypeAttributeSpec:
    node = _keys(node, ATTR_KEYS, f"attribute {name}")
    a = TypeAttributeSpec(name, at, Location.of(node), tuple(node), str(node.get("doc", "")),
                          readonly or bool(node.get("readonly")), check=node.get("check"),
                          prepared=node.get("prepared", True), too_big=node.get("too_big"))
    if "field" in node:
        a.fields = [str(r) for r in (node["field"] if isinstance(node["field"], list)
                                     else [node["field"]])]
    elif "ref" in node:
        a.ref = node["ref"]
    elif "flag" in node:
        a.flag = node["flag"]
    elif "hand" in node:
        hand = _keys(node["hand"], {"get", "set"}, f"attribute {name}.hand")
        a.hand_get, a.hand_set, a.slot = hand["get"], hand.get("set"), node.get("slot")
    else:
        raise SpecError(f"{at}: {name}: needs field, ref, flag or hand")
    stub = node.get("stub")          # a type, or {get, set} where the setter takes more
    if isinstance(stub, Node):
        if set(stub) != {"get", "set"}:
            raise SpecError(f"{node.where('stub')}: {name}: stub is a type or {{get, set}}")
        a.stub, a.stub_set = str(stub["get"]), str(stub["set"])
    elif stub is not None:
        a.stub = a.stub_set = str(stub)
    return a


def _storage(node: Node, name: str) -> Tuple[str, Optional[str], List[ReachSpec]]:
    storage = node.get("storage")
    if storage is None:        # the object keeps its `state` (and refs) only
        return "state", None, []
    if storage == "members":
        return "members", None, []
    storage = _keys(storage, {"embedded", "reach"}, f"{name}.storage")
    if "embedded" in storage:
        return "embedded", storage["embedded"], []
    reach = []
    for record, rnode in storage["reach"].items():
        if isinstance(rnode, str):
            rnode = {"function": rnode}
        _keys(rnode if isinstance(rnode, Node) else Node(rnode), {"function", "after", "by"},
              f"{name}.storage.reach.{record}")
        reach.append(ReachSpec(str(record), storage["reach"].where(record), rnode["function"],
                               bool(rnode.get("after")), rnode.get("by") == "index"))
    return "reach", None, reach


def _methods(node: Node, name: str) -> List[TypeMethodSpec]:
    out = []
    methods = node.get("methods") or Node()
    for m, mn in methods.items():
        _keys(mn, METHOD_KEYS, f"{name}.{m}")
        out.append(TypeMethodSpec(str(m), methods.where(m), mn["function"], mn["flags"],
                                  mn["doc"], _signature(mn.where("stub"), f"{name}.{m}",
                                                        mn["stub"]) if "stub" in mn else None))
    for tm in out:
        if tm.flags not in FLAGS:
            raise SpecError(f"{tm.at}: {name}.{tm.name}: flags must be one of {sorted(FLAGS)}")
    return out


def _field_methods(node: Node, name: str) -> List[FieldMethodSpec]:
    fms = node.get("field_methods") or Node()
    out = []
    for f, fn in fms.items():
        fn = _needs(_keys(fn, FIELD_METHOD_KEYS, f"{name}.{f}"), FIELD_METHOD_KEYS, f"{name}.{f}")
        out.append(FieldMethodSpec(str(f), fms.where(f), str(fn["field"]), fn["doc"]))
    return out


def _type(name: str, node: Any) -> TypeSpec:
    node = _keys(node, TYPE_KEYS, name)
    kind, member, reach = _storage(node, name)
    attrs = node.get("attributes") or Node()
    init, new = node.get("init"), node.get("new")
    traverse, clear = _gc_functions(node, name)
    return TypeSpec(
        name, Location.of(node), tuple(node), node["doc"], kind, member, reach,
        [_attribute(str(a), anode, attrs.where(a), bool(node.get("readonly")))
         for a, anode in attrs.items()],
        _methods(node, name), _field_methods(node, name),
        list(node.get("refs") or []), [(k, str(v)) for k, v in (node.get("state") or {}).items()],
        None if isinstance(init, Node) else init,
        _arg_parser(node, "init", name) if isinstance(init, Node) else None,
        None if isinstance(new, Node) else new,
        _arg_parser(node, "new", name) if isinstance(new, Node) else None,
        _sequence(node, name), traverse, clear, bool(node.get("clear", True)),
        node.get("gc", True), node.get("basetype", True), _special_stubs(node, name),
        node.get("fills"), _lock(node, name), _vectorcall(node, name),
        changed=node.get("changed"), guard=node.get("guard"), union=node.get("union"),
        repr=node.get("repr"), dealloc=node.get("dealloc"), getattro=node.get("getattro"))


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


def _arg_parser(node: Node, key: str, name: str) -> ParserSpec:
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
    return ParserSpec(args, kwonly, required)


def _sequence(node: Node, name: str) -> Optional[Tuple[str, str, Optional[str]]]:
    """`sequence: {length: f, item: f, set_item: f}` (set_item optional)."""
    seq = node.get("sequence")
    if seq is None:
        return None
    seq = _keys(seq, SEQUENCE_KEYS, f"{name}.sequence")
    if "length" not in seq or "item" not in seq:
        raise SpecError(f"{node.where('sequence')}: {name}.sequence: needs length and item")
    return str(seq["length"]), str(seq["item"]), seq.get("set_item")


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


# --- the file ------------------------------------------------------------------------


@dataclass
class RecordsSpec(SpecFiles):
    """spec/datapath/records.yaml, read: the hand-written C helpers the
    field converters call, the records and the types."""
    helpers: Dict[str, str] = field(default_factory=dict)
    records: List[RecordSpec] = field(default_factory=list)
    types: List[TypeSpec] = field(default_factory=list)


def load(spec_root: str) -> RecordsSpec:
    path = os.path.join(spec_root, SPEC_FILE)
    data = _keys(load_file(path, DISPLAY), TOP_KEYS, DISPLAY)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    helpers = dict(_keys(data["helpers"], HELPER_KEYS, "helpers"))
    _needs(data["helpers"], HELPER_KEYS, "helpers")
    return RecordsSpec([DISPLAY], digest, {str(k): str(v) for k, v in helpers.items()},
                       [_record(str(key), node) for key, node in (data.get("records") or {}).items()],
                       [_type(str(name), node) for name, node in (data.get("types") or {}).items()])
