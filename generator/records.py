"""spec/datapath/records.yaml + the verbs IR -> the data-path types' C.

The data-path types (SGE, SendWR, RecvWR, PostList entries, WC, WCBuffer,
AsyncEvent) show the fields of a few C structs (struct ibv_sge,
ibv_send_wr, ibv_recv_wr, ibv_wc, ibv_async_event).  This stage builds a
typed model of them:

* a Converter per (C struct, field): the one place a Python value becomes
  that field's C value (range, byte order, validity check) and back; every
  type showing the field calls it (SendWR and PostList send entries share
  struct ibv_send_wr's);
* a TypeModel per Python class: where its object keeps the C values
  (a whole struct, one member per field, or a hand-written function that
  reaches the struct), its attributes and the type shell (GC slots,
  tables, PyType_Spec).

templates/records.h.j2 lays out the converters and object layouts
(generated/records.h), templates/record_type.c.h.j2 one type
(generated/<type>.c.h).  Errors name spec/datapath/records.yaml and the line.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import AbstractSet, Any, Dict, List, Optional, Tuple

from .ir import IR, Record, Type
from .spec import Node, SpecError, load_file

SPEC_FILE = os.path.join("datapath", "records.yaml")
DISPLAY = "spec/datapath/records.yaml"

TOP_KEYS = {"helpers", "records", "types"}
HELPER_KEYS = {"unsigned", "small_int", "parse", "type_name"}
RECORD_KEYS = {"ctype", "fields", "unions", "small_ints"}
FIELD_KEYS = {"convert", "check", "union", "hand"}
TYPE_KEYS = {"doc", "storage", "refs", "state", "changed", "init", "repr", "attributes",
             "methods", "guard", "union", "clear", "new", "basetype", "gc", "dealloc",
             "traverse", "getattro", "sequence", "field_methods", "readonly", "stub"}
SEQUENCE_KEYS = {"length", "item", "set_item"}
ATTR_KEYS = {"field", "readonly", "ref", "hand", "slot", "flag", "check", "prepared", "doc",
             "too_big", "stub"}
METHOD_KEYS = {"function", "flags", "doc", "stub"}
FIELD_METHOD_KEYS = {"field", "doc"}
# init: {...} / new: {...}: a generated parser of the constructor's arguments
PARSER_KEYS = {"args", "required", "keyword_only"}
FLAGS = {"METH_O", "METH_NOARGS"}
UNSIGNED_MAX = {1: "UINT8_MAX", 2: "UINT16_MAX", 4: "UINT32_MAX", 8: "UINT64_MAX"}


def _keys(node: Any, allowed: AbstractSet[str], what: str) -> Node:
    if not isinstance(node, Node):
        raise SpecError(f"{DISPLAY}: {what}: expected a mapping")
    for key in node:
        if key not in allowed:
            raise SpecError(f"{node.where(key)}: {what}: unknown key {key!r}")
    return node


def _needs(node: Node, keys: AbstractSet[str], what: str) -> Node:
    """Refuse *node* without one of *keys*."""
    for key in sorted(keys):
        if key not in node:
            raise SpecError(f"{node.where()}: {what}: needs {key!r}")
    return node


# --- the model ---------------------------------------------------------------


@dataclass
class Converter:
    """One field of one C struct, both ways."""
    record: str            # the record's key ("send_wr")
    name: str              # the C member's name, also the attribute's
    ctype: str             # the value's C type, as the IR spells it
    unsigned_max: Optional[str]   # "UINT32_MAX" (None: signed, read only)
    to_py: str             # ulonglong | ulong | long (PyLong_From...)
    be32: bool = False
    small_int: bool = False
    bits: int = 64
    # check: (valid ranges, message): only values in one of the (lo, hi)
    # ranges pass (the members of the field's enum)
    check: Optional[Tuple[List[Tuple[int, int]], str]] = None
    path: Optional[str] = None                  # the member's C path
    union: List[Tuple[str, str]] = field(default_factory=list)  # (member, path)
    written: bool = False  # some type converts a Python value into it
    # (C path, size in bytes) of each place it lives, from the IR: records.h
    # asserts the member's type and width against the compiler's view of the
    # same headers, for whatever target it compiles for.  No offset: the IR's
    # are those of the machine that generated the file (x86_64 and aarch64
    # differ from struct ibv_qp_ex's wr_id on), the code reaches each member
    # by name, and tests/host/test_layout.py checks them against gcc there.
    layout: List[Tuple[str, int]] = field(default_factory=list)

    @property
    def prefix(self) -> str:
        return f"ibp_{self.record}_{self.name}"


@dataclass
class RecordModel:
    key: str
    ctype: str
    # its unions in order, each with its members: ("wr", ["rdma", ...]); one
    # enum numbers the members of all of them, so that a type's union
    # function tells them apart in one mask
    unions: List[Tuple[str, List[str]]]
    converters: Dict[str, Converter]

    def union_of(self, member: str) -> str:
        return next(name for name, members in self.unions if member in members)

    def member_enum(self, member: str) -> str:
        return f"IBP_{self.key.upper()}_{self.union_of(member).upper()}_{member.upper()}"


@dataclass
class Attribute:
    name: str
    doc: str
    kind: str                      # field | kinds | ref | hand | slot | flag
    conv: Optional[Converter] = None
    alt: Optional[Converter] = None     # kinds: the other record's
    readonly: bool = False
    calls_changed: bool = True
    check: Optional[str] = None
    ref_type: Optional[str] = None
    get: Optional[str] = None
    set: Optional[str] = None
    member: Optional[str] = None        # slot/flag: the object's member
    # ValueError text for an int of 2**bits or more, however large, before
    # the field's converter (SGE.length says why: split it)
    too_big: Optional[str] = None
    # its Python type in the stub (spec `stub:`), read and written; a field
    # is an int and a flag a bool without one
    stub: Optional[str] = None
    stub_set: Optional[str] = None      # what the setter accepts, when wider

    @property
    def writable(self) -> bool:
        if self.kind in ("hand", "slot"):
            return self.set is not None
        return not self.readonly


@dataclass
class Reach:
    record: str
    ctype: str             # the struct it gives a pointer to
    function: str
    after: bool = False    # reached after the value's conversion (an entry's SGE)
    by_index: bool = False # takes a method's index argument, not a name (WCBuffer)


@dataclass
class MethodDef:
    name: str
    function: str
    flags: str
    doc: str
    stub: Optional[str] = None          # "(self, opcode: int, /) -> int"


@dataclass
class FieldMethod:
    name: str
    conv: Converter
    doc: str


@dataclass
class ArgParser:
    """A generated constructor parser (spec `init:` or `new:` as a mapping):
    the arguments, all objects (NULL where not given), by position or
    keyword but the last keyword_only ones, by keyword only; the
    hand-written ibp_hand_<Type>_<init|new>_impl converts them."""
    args: List[str]
    required: int = 0
    keyword_only: int = 0


@dataclass
class TypeModel:
    name: str
    doc: str
    storage: str                          # embedded | members | reach | state
    embedded: Optional[Tuple[str, str]]   # (member, C struct)
    reach: Dict[str, Reach]
    refs: List[str]
    state: List[Tuple[str, str]]          # (member, C type)
    attributes: List[Attribute]
    methods: List[MethodDef]
    field_methods: List[FieldMethod]
    changed: Optional[str] = None
    guard: Optional[str] = None
    union: Optional[str] = None
    init: Optional[str] = None            # a hand function, "keywords", "impl" or None
    # init "impl": a generated parser hands the arguments to ibp_hand_<Type>_init_impl
    init_parser: Optional[ArgParser] = None
    new: Optional[str] = None             # a hand function, "impl" or None
    # new "impl": a generated parser hands the arguments to ibp_hand_<Type>_new_impl
    new_parser: Optional[ArgParser] = None
    repr: Optional[str] = None
    dealloc: Optional[str] = None
    getattro: Optional[str] = None
    # (len, [i], [i] = v): the sequence slots' hand-written functions (the last may be None)
    sequence: Optional[Tuple[str, str, Optional[str]]] = None
    gc: bool = True
    basetype: bool = True
    clear: bool = True
    # hand-written GC slots of a type whose references are no `refs`
    # (PostList's are in its entries): traverse and clear name functions
    traverse: Optional[str] = None
    clear_function: Optional[str] = None
    # stub signatures of hand-written special methods ("__init__": "(self, ...)")
    stubs: Dict[str, str] = field(default_factory=dict)

    @property
    def members(self) -> List[Tuple[str, str]]:
        """(member, C type) of the values a `members` object keeps."""
        return [(a.name, a.conv.ctype) for a in self.attributes
                if self.storage == "members" and a.kind == "field" and a.conv is not None]

    @property
    def state_decls(self) -> List[str]:
        return [f"{ctype}{name}" if ctype.endswith("*") else f"{ctype} {name}"
                for name, ctype in self.state]

    @property
    def traverse_slot(self) -> Optional[str]:
        """The tp_traverse function: the hand-written one, or the generated one over refs."""
        return self.traverse or (f"{self.name}_traverse" if self.refs else None)

    @property
    def clear_slot(self) -> Optional[str]:
        """The tp_clear function (None: the type has none)."""
        if self.clear_function:
            return self.clear_function
        return f"{self.name}_clear" if self.clear and self.refs else None

    @property
    def init_args(self) -> List[Attribute]:
        return [a for a in self.attributes if a.writable]

    @property
    def hand_prototypes(self) -> List[str]:
        """What the generated code calls that the type's own file writes."""
        protos = []
        if self.init_parser:
            protos.append(f"int ibp_hand_{self.name}_init_impl({self.name}Object *self"
                          + "".join(f", PyObject *{a}" for a in self.init_parser.args) + ")")
        if self.new_parser:
            protos.append(f"PyObject *ibp_hand_{self.name}_new_impl(PyTypeObject *type"
                          + "".join(f", PyObject *{a}" for a in self.new_parser.args) + ")")
        for fn, sig in ((self.init if self.init not in ("keywords", "impl") else None,
                         "int {}(PyObject *op, PyObject *args, PyObject *kwargs)"),
                        (self.new if self.new != "impl" else None,
                         "PyObject *{}(PyTypeObject *type, PyObject *args, PyObject *kwargs)"),
                        (self.repr, "PyObject *{}(PyObject *op)"),
                        (self.dealloc, "void {}(PyObject *op)"),
                        (self.traverse, "int {}(PyObject *op, visitproc visit, void *arg)"),
                        (self.clear_function, "int {}(PyObject *op)"),
                        (self.getattro, "PyObject *{}(PyObject *op, PyObject *name)"),
                        (self.guard, "int {}(PyObject *op)"),
                        (self.changed, "void {}(" + self.name + "Object *self)"),
                        (self.union, "int {}(PyObject *op, int members, const char *name)")):
            if fn:
                protos.append(sig.format(fn))
        for r in self.reach.values():
            arg = "PyObject *arg" if r.by_index else "const char *name"
            const = "const " if r.by_index else ""
            protos.append(f"{const}{r.ctype} *{r.function}(PyObject *op, {arg})")
        if self.sequence:
            protos.append(f"Py_ssize_t {self.sequence[0]}(PyObject *op)")
            protos.append(f"PyObject *{self.sequence[1]}(PyObject *op, Py_ssize_t i)")
            if self.sequence[2]:
                protos.append(f"int {self.sequence[2]}(PyObject *op, Py_ssize_t i, "
                              f"PyObject *value)")
        for a in self.attributes:
            protos += _attribute_prototypes(self, a)
        for m in self.methods:
            protos.append(f"PyObject *{m.function}(PyObject *op, PyObject *arg)")
        return list(dict.fromkeys(protos))


def _attribute_prototypes(t: TypeModel, a: Attribute) -> List[str]:
    if a.kind == "hand":
        return ([f"PyObject *{a.get}(PyObject *op, void *closure)"]
                + ([f"int {a.set}(PyObject *op, PyObject *value, void *closure)"] if a.set else []))
    if a.kind == "slot":
        return ([f"PyObject *{a.get}(PyObject **slot)"]
                + ([f"int {a.set}(PyObject **slot, PyObject *value, int copy)"] if a.set else []))
    if a.check:
        return [f"int {a.check}(PyObject *op)"]
    return []


@dataclass
class RecordsModel:
    ir: IR
    spec: "RecordsSpec"
    helpers: Dict[str, str]
    records: List[RecordModel]
    types: List[TypeModel]


@dataclass
class RecordsSpec:
    """What the generated files' headers name: this spec file's digest."""
    sha256: str
    files: List[str]


# --- building -----------------------------------------------------------------


def _member(ir: IR, record: Record, path: str, where: str) -> Type:
    """The type of a dotted member path, through named and anonymous members."""
    rec: Optional[Record] = record
    t: Optional[Type] = None
    for part in path.split("."):
        t = _find(ir, rec, part)
        if t is None:
            raise SpecError(f"{where}: {record.name} has no member {path!r}")
        if t.kind in ("struct", "union"):
            rec = ir.record(t.decl or t.spelling)
    assert t is not None     # a path has one part at least
    return t


def _find(ir: IR, rec: Optional[Record], name: str) -> Optional[Type]:
    """The type of member `name` of rec, through anonymous members."""
    if rec is None:
        return None
    for f in rec.fields:
        if f.name == name:
            return f.type
        if f.name == "" and f.type.kind in ("struct", "union"):
            found = _find(ir, ir.record(f.type.decl or f.type.spelling), name)
            if found is not None:
                return found
    return None


def _converter(ir: IR, rec: Record, key: str, name: str, node: Node, small: bool,
               where: str) -> Converter:
    node = _keys(node if node is not None else Node(), FIELD_KEYS, f"{key}.{name}")
    union = node.get("union")
    paths = list(union.items()) if union else [("", name)]
    types = {_member(ir, rec, path, where).spelling for _, path in paths}
    if len(types) != 1:
        raise SpecError(f"{where}: {key}.{name}: the union members differ in type ({types})")
    t = _member(ir, rec, paths[0][1], where)
    if t.kind not in ("int", "enum") or t.size not in UNSIGNED_MAX:
        raise SpecError(f"{where}: {key}.{name}: {t.spelling} is no integer")
    be32 = node.get("convert") == "be32"
    if be32 and t.spelling != "__be32":
        raise SpecError(f"{where}: {key}.{name}: convert: be32 on a {t.spelling}")
    if node.get("convert") not in (None, "be32"):
        raise SpecError(f"{node.where('convert')}: {key}.{name}: unknown convert")
    signed = bool(t.signed) and t.kind == "int"
    to_py = ("long" if signed or t.kind == "enum" else
             "ulonglong" if t.size == 8 else "ulong")
    check = node.get("check")
    if check is not None:
        _keys(check, {"members", "message"}, f"{key}.{name}.check")
        enum = ir.enum(t.decl or t.spelling) if t.kind == "enum" else None
        if enum is None or check.get("members") is not True:
            raise SpecError(f"{node.where('check')}: {key}.{name}: check needs "
                            f"`members: true` on an enum field")
        check = (_ranges(sorted({m.value for m in enum.members})), str(check["message"]))
    return Converter(key, name, t.spelling, None if signed else UNSIGNED_MAX[t.size], to_py,
                     be32=be32, small_int=small, bits=t.size * 8, check=check,
                     path=None if union else name,
                     union=[(m, p) for m, p in paths] if union else [],
                     written=bool(node.get("hand")),
                     layout=[(p, t.size) for _, p in paths])


def _ranges(values: List[int]) -> List[Tuple[int, int]]:
    """Sorted values as runs of consecutive ones."""
    runs: List[Tuple[int, int]] = []
    for v in values:
        if runs and runs[-1][1] == v - 1:
            runs[-1] = (runs[-1][0], v)
        else:
            runs.append((v, v))
    return runs


def _records(ir: IR, data: Node) -> List[RecordModel]:
    out = []
    for key, node in (data.get("records") or {}).items():
        node = _keys(node, RECORD_KEYS, key)
        rec = ir.record(node["ctype"])
        if rec is None or not rec.complete:
            raise SpecError(f"{node.where('ctype')}: {key}: no complete {node['ctype']} "
                            f"in {ir.source}")
        unions = [(str(u), [str(m) for m in ms]) for u, ms in (node.get("unions") or {}).items()]
        every = [m for _, ms in unions for m in ms]
        if len(set(every)) != len(every):
            raise SpecError(f"{node.where('unions')}: {key}: a member name in two unions")
        fields = node["fields"]
        convs = {name: _converter(ir, rec, key, name, fnode, bool(node.get("small_ints")),
                                  fields.where(name))
                 for name, fnode in fields.items()}
        for c in convs.values():
            owners = set()
            for m, _ in c.union:
                found = [u for u, ms in unions if m in ms]
                if not found:
                    raise SpecError(f"{fields.where(c.name)}: {key}.{c.name}: {m} is not "
                                    f"a member of a union of {key}")
                owners.add(found[0])
            if len(owners) > 1:
                raise SpecError(f"{fields.where(c.name)}: {key}.{c.name}: members of "
                                f"two unions ({', '.join(sorted(owners))})")
        out.append(RecordModel(key, node["ctype"], unions, convs))
    return out


def _field_ref(records: Dict[str, RecordModel], ref: str, where: str) -> Converter:
    key, _, name = str(ref).partition(".")
    if key not in records or name not in records[key].converters:
        raise SpecError(f"{where}: no field {ref!r} in the records")
    return records[key].converters[name]


def _attribute(records: Any, name: str, node: Node, where: str, readonly: bool) -> Attribute:
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
        return Attribute(name, doc, "kinds" if len(convs) == 2 else "field", convs[0],
                         convs[1] if len(convs) == 2 else None, readonly,
                         node.get("prepared", True), node.get("check"), too_big=too_big)
    if "ref" in node:
        return Attribute(name, doc, "ref", readonly=readonly, ref_type=node["ref"])
    if "flag" in node:
        return Attribute(name, doc, "flag", readonly=readonly, member=node["flag"])
    if "hand" in node:
        hand = _keys(node["hand"], {"get", "set"}, f"attribute {name}.hand")
        return Attribute(name, doc, "slot" if "slot" in node else "hand", get=hand["get"],
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
        reach[record] = Reach(record, records[record].ctype, rnode["function"],
                              after=bool(rnode.get("after")),
                              by_index=rnode.get("by") == "index")
    return "reach", None, reach


def _type(records: Any, name: str, node: Node) -> TypeModel:
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
        embedded = (member, records[ctypes.pop()].ctype)
    for a in attributes:
        _attribute_stub(a, attrs[a.name])
    methods = [MethodDef(m, _keys(mn, METHOD_KEYS, f"{name}.{m}")["function"], mn["flags"],
                         mn["doc"], _signature(mn.where("stub"), f"{name}.{m}", mn["stub"])
                         if "stub" in mn else None)
               for m, mn in (node.get("methods") or {}).items()]
    for m in methods:
        if m.flags not in FLAGS:
            raise SpecError(f"{node['methods'].where(m.name)}: {name}.{m.name}: flags "
                            f"must be one of {sorted(FLAGS)}")
    fms = node.get("field_methods") or Node()
    field_methods = [FieldMethod(f, _field_ref(records, fn["field"], fms.where(f)), fn["doc"])
                     for f, fn in ((f, _needs(_keys(fn, FIELD_METHOD_KEYS, f"{name}.{f}"),
                                              FIELD_METHOD_KEYS, f"{name}.{f}"))
                                   for f, fn in fms.items())]
    state = [(k, str(v)) for k, v in (node.get("state") or {}).items()]
    seq = _sequence(node, name)
    traverse, clear = _gc_functions(node, name)
    init, new = node.get("init"), node.get("new")
    init_parser = _arg_parser(node, "init", name) if isinstance(init, Node) else None
    new_parser = _arg_parser(node, "new", name) if isinstance(new, Node) else None
    return TypeModel(
        name, node["doc"], kind, embedded, reach, list(node.get("refs") or []), state,
        attributes, methods, field_methods, changed=node.get("changed"),
        guard=node.get("guard"), union=node.get("union"),
        init="impl" if init_parser else init, init_parser=init_parser,
        new="impl" if new_parser else new, new_parser=new_parser,
        repr=node.get("repr"), dealloc=node.get("dealloc"),
        getattro=node.get("getattro"),
        sequence=seq, gc=node.get("gc", True), basetype=node.get("basetype", True),
        clear=bool(node.get("clear", True)), traverse=traverse, clear_function=clear,
        stubs=_special_stubs(node, name))


def _arg_parser(node: Node, key: str, name: str) -> ArgParser:
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
    return ArgParser(args + kwonly, required, len(kwonly))


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


def _attribute_stub(a: Attribute, node: Node) -> None:
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


def build(ir: IR, spec_root: str) -> RecordsModel:
    path = os.path.join(spec_root, SPEC_FILE)
    data = _keys(load_file(path, DISPLAY), TOP_KEYS, DISPLAY)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    helpers = dict(_keys(data["helpers"], HELPER_KEYS, "helpers"))
    records = _records(ir, data)
    by_key = {r.key: r for r in records}
    types = [_type(by_key, name, node) for name, node in (data.get("types") or {}).items()]
    return RecordsModel(ir, RecordsSpec(digest, [DISPLAY]), helpers, records, types)


def render(m: RecordsModel, template_dir: str) -> Dict[str, str]:
    """File name (relative to generated/) -> contents."""
    from . import render as vrender
    env = vrender.environment(template_dir)
    common = dict(ir=m.ir, spec=m.spec, command=vrender.COMMAND, helpers=m.helpers,
                  records=m.records, types=m.types, comment_open="/*", comment_mid=" *",
                  comment_close="*/")
    files = {"records.h": env.get_template("records.h.j2").render(**common)}
    for t in m.types:
        files[f"{t.name.lower()}.c.h"] = env.get_template("record_type.c.h.j2").render(
            **common, t=t, by_key={r.key: r for r in m.records})
    return {name: vrender.finish(text) for name, text in files.items()}
