"""IR + spec -> what to emit.

This stage decides everything; the templates only lay it out.  Each verb
bound by the spec becomes a MethodModel holding the C statements of its
wrapper, in the order the wrapper runs them (Argument Clinic style:
declarations, argument parsing, conversion with range checks, the call,
error handling, building the result).  Errors name the spec file and line.
"""
from __future__ import annotations

import fnmatch
import keyword
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from . import docstrings

from .ir import IR, Function, Record, Type
from .spec import Method, Node, Spec, SpecError

# --- models ------------------------------------------------------------------


@dataclass
class EnumModel:
    name: str
    kind: str            # IntEnum | IntFlag
    cname: str
    members: List[Tuple[str, int, str]]   # python name, value, C name


@dataclass
class StructField:
    name: str
    path: str            # C member path inside the struct ("grh.dgid")
    getter: List[str]    # C statements producing `result` from `c` (a pointer)
    setter: List[str]    # C statements consuming `value`; empty = read-only
    default: Optional[str] = None    # Python repr of the default (init)
    handle: Optional[str] = None     # class of a handle-valued field
    struct_class: Optional[str] = None
    # A required handle field that may hold None until the struct is used
    # (the seed's QPInitAttr(None, None)): the verb that takes the struct
    # says what is missing, not a generic "is not set".
    none_ok: bool = False


@dataclass
class StructModel:
    name: str
    ctype: str
    doc: str
    writable: bool
    fields: List[StructField]
    has_handles: bool

    @property
    def handle_fields(self) -> List[StructField]:
        return [f for f in self.fields if f.handle]


@dataclass
class Arg:
    name: str                  # Python name
    required: bool
    default_doc: Optional[str]


@dataclass
class MethodModel:
    name: str                  # Python name
    owner: str                 # class, "" for module functions
    cname: str                 # C function name
    flags: str
    doc: str                   # docstring incl. the signature line
    hand: bool = False
    args: List[Arg] = field(default_factory=list)
    parse_format: str = ""
    body: List[str] = field(default_factory=list)   # C statements
    verbs: List[str] = field(default_factory=list)  # C functions it binds
    # a Python-layer method (spec `python:`): (module, function) it calls
    python: Optional[Tuple[str, str]] = None

    # The C parameters of its function and the names passing them on, by
    # calling convention.
    @property
    def c_params(self) -> str:
        return {"METH_NOARGS": "PyObject *unused", "METH_O": "PyObject *arg",
                FASTCALL_KEYWORDS: "PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames",
                }.get(self.flags, "PyObject *args, PyObject *kwargs")

    @property
    def c_args(self) -> str:
        return {"METH_NOARGS": "unused", "METH_O": "arg", FASTCALL_KEYWORDS: "args, nargs, kwnames",
                }.get(self.flags, "args, kwargs")


# A one-argument hand method that takes its argument by keyword too (spec
# `keywords: true`): no tuple per call, unlike METH_VARARGS (ibverbs/src/common.h).
FASTCALL_KEYWORDS = "METH_FASTCALL | METH_KEYWORDS"


@dataclass
class HandleModel:
    name: str
    ctype: str
    doc: str
    destroy: str
    parents: List[Tuple[str, str, bool]]       # attr, class, optional
    attributes: List[Tuple[str, List[str]]]    # name, C statements -> result
    slots: List[Tuple[str, bool, str]]         # name, writable, doc
    state: List[Tuple[str, str]]               # name, C type
    before_destroy: Optional[str]
    registered: bool
    methods: List[MethodModel]
    # A subclass of another handle class (spec `base:`), in one of two forms:
    # * `base: QP`: the same verbs object (QPEx, ImportedPD): the base's
    #   layout, parents, destroy and close(), plus its own methods and state;
    #   objects are made with <Base>_wrap_type();
    # * `base: {class: CQ, upcast: ibv_cq_ex_to_cq}`: another C type that
    #   converts to the base's; the object stores the upcast pointer, so every
    #   method of the base works unchanged, and its own methods see ex_ptr.
    base: Optional["HandleModel"] = None
    upcast: Optional[str] = None
    subclassed: bool = False           # a base: BASETYPE, and <Name>_wrap_type()
    before_dealloc: Optional[str] = None
    # (state flag, verb): when the flag is set, close() releases the object
    # with that verb instead of destroying it (an imported DM is unimported)
    release: Optional[Tuple[str, str]] = None
    hand_attributes: List[Tuple[str, bool, str]] = field(default_factory=list)
    # A same-object subclass with a destroy of its own (ImportedPD:
    # ibv_unimport_pd) is a whole handle class again, with the base's layout.
    own_destroy: bool = False
    destroy_void: bool = False     # the destroy verb returns nothing
    # Slots dropped as soon as the verbs object is destroyed (spec:
    # `clear_on_close: true`), e.g. a buffer export that pins memory.
    clear_on_close: List[str] = field(default_factory=list)
    # (method, slot): a method setting the slot and returning the object
    # (spec: `keepalive: _keepalive`, the seed's MR._keepalive(owner) -> self)
    keepalive: List[Tuple[str, str]] = field(default_factory=list)

    @property
    def has_gc(self) -> bool:
        return bool(self.slots)


@dataclass
class SymbolModel:
    name: str
    result: str
    params: List[Tuple[str, str]]    # C type spelling, name
    since: Optional[str]             # rdma-core release for optional ones

    @property
    def signature(self) -> str:
        if not self.params:
            return "void"
        return ", ".join(_declare(t, n) for t, n in self.params)

    @property
    def arg_names(self) -> str:
        return ", ".join(n for _, n in self.params)

    @property
    def failure(self) -> Optional[str]:
        """What the trampoline returns when the symbol is missing."""
        t = self.result.strip()
        if t == "void":
            return None
        if t.endswith("*"):
            return "NULL"
        return f"({t})-1"


@dataclass
class Model:
    ir: IR
    spec: Spec
    enums: List[EnumModel]
    structs: List[StructModel]
    handles: List[HandleModel]
    functions: List[MethodModel]
    symbols: List[SymbolModel]
    coverage: List[Tuple[str, str, str]]     # function, status, detail


# --- helpers -----------------------------------------------------------------

INT_LIMITS = {  # (size, signed) -> (min, max) as C expressions
    (1, False): ("0", "UINT8_MAX"), (2, False): ("0", "UINT16_MAX"),
    (4, False): ("0", "UINT32_MAX"), (8, False): ("0", "UINT64_MAX"),
    (1, True): ("INT8_MIN", "INT8_MAX"), (2, True): ("INT16_MIN", "INT16_MAX"),
    (4, True): ("INT32_MIN", "INT32_MAX"), (8, True): ("INT64_MIN", "INT64_MAX"),
}


def _declare(spelling: str, name: str) -> str:
    spelling = spelling.strip()
    m = re.match(r"^(.*?)\s*(\[\d*\])$", spelling)
    if m:
        return f"{m.group(1)} {name}{m.group(2)}"
    if spelling.endswith("*"):
        return f"{spelling}{name}"
    return f"{spelling} {name}"


def _is_int(t: Type) -> bool:
    return t.kind in ("int", "enum", "bool")


def _int_getter(expr: str, t: Type) -> str:
    if t.signed:
        return f"result = PyLong_FromLongLong((long long)({expr}));"
    return f"result = PyLong_FromUnsignedLongLong((unsigned long long)({expr}));"


def _int_convert(obj: str, target: str, t: Type, name: str,
                 lo: Optional[str] = None, hi: Optional[str] = None) -> List[str]:
    """Range-checked conversion of PyObject *obj into the C lvalue target."""
    size = t.size or 4
    signed = bool(t.signed)
    tmin, tmax = INT_LIMITS[(size, signed)]
    lines: List[str] = []
    if signed or (lo not in (None, "0")):
        low = lo if lo is not None else tmin
        high = tmax
        lines.append("{")
        lines.append("    int64_t v;")
        hi_c = "INT64_MAX" if high == "UINT64_MAX" else high
        lines.append(f'    if (ibp_conv_signed({obj}, "{name}", {low}, {hi_c}, &v) < 0)')
        lines.append("        goto exit;")
        if hi is not None:
            lines += _runtime_max("v", hi, name, obj, "    ")
        lines.append(f"    {target} = v;")
        lines.append("}")
    else:
        lines.append("{")
        lines.append("    uint64_t v;")
        lines.append(f'    if (ibp_conv_unsigned({obj}, "{name}", {tmax}, &v) < 0)')
        lines.append("        goto exit;")
        if hi is not None:
            lines += _runtime_max("(int64_t)v", hi, name, obj, "    ")
        lines.append(f"    {target} = v;")
        lines.append("}")
    return lines


def _runtime_max(var: str, hi: str, name: str, obj: str, indent: str) -> List[str]:
    return [f"{indent}if ({var} > (int64_t)({hi})) {{",
            f'{indent}    PyErr_Format(PyExc_ValueError, "{name} must be at most %lld, got %S",',
            f"{indent}                 (long long)({hi}), {obj});",
            f"{indent}    goto exit;",
            f"{indent}}}"]


def _spec_default(node, key="default"):
    """A spec default: absent -> REQUIRED; "None" (YAML has no None) -> None."""
    if node is None or key not in node:
        return REQUIRED
    value = node[key]
    return None if value in ("None", "null") else value


REQUIRED = "__required__"


def _py_repr_default(value) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    return repr(value)


def _c_default(value) -> str:
    if value is None:
        return "0"
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _member_type(ir: IR, record: Record, path: str, where: str) -> Type:
    """The IR type of a member path ("cap.max_send_wr"), anonymous members
    included."""
    current = record
    parts = path.split(".")
    t: Optional[Type] = None
    for i, part in enumerate(parts):
        t = _find_field(ir, current, part)
        if t is None:
            raise SpecError(f"{where}: {record.name} has no member {path!r}")
        if i < len(parts) - 1:
            nested = ir.record(t.decl or t.spelling)
            if nested is None:
                raise SpecError(f"{where}: {path!r}: {part} is not a struct")
            current = nested
    assert t is not None
    return t


def _find_field(ir: IR, record: Record, name: str) -> Optional[Type]:
    for f in record.fields:
        if f.name == name:
            return f.type
        if f.name == "":
            nested = ir.record(f.type.decl or f.type.spelling)
            if nested is not None:
                found = _find_field(ir, nested, name)
                if found is not None:
                    return found
    return None


def _has_member(ir: IR, record: Record, path: str) -> bool:
    try:
        _member_type(ir, record, path, "")
    except SpecError:
        return False
    return True


def _flat_fields(ir: IR, record: Record) -> List[Tuple[str, Type]]:
    out: List[Tuple[str, Type]] = []
    for f in record.fields:
        if f.name == "":
            nested = ir.record(f.type.decl or f.type.spelling)
            if nested is not None:
                out += _flat_fields(ir, nested)
        else:
            out.append((f.name, f.type))
    return out


# --- the builder -------------------------------------------------------------


class Builder:
    def __init__(self, ir: IR, spec: Spec):
        self.ir = ir
        self.spec = spec
        self.struct_by_ctype: Dict[str, str] = {}
        for s in spec.structs:
            self.struct_by_ctype[s.node["ctype"]] = s.name
        self.handle_by_ctype: Dict[str, str] = {
            h.node["ctype"]: h.name for h in spec.handles}
        self.handle_names = {h.name for h in spec.handles}
        self.struct_models: Dict[str, StructModel] = {}

    # -- enums --
    def enums(self) -> List[EnumModel]:
        out = []
        for e in self.spec.enums:
            node = e.node
            prefix = node["prefix"]
            if "c" in node:
                ce = self.ir.enum(node["c"])
                if ce is None and "since" in node:
                    continue    # newer than these headers
                if ce is None:
                    raise SpecError(f"{node.where('c')}: {e.name}: no {node['c']} in "
                                    f"{self.ir.source}")
                members = [(m.name, m.value) for m in ce.members]
                cname = ce.name
            else:
                pattern = node["match"]
                members = [(m.name, m.value) for ce in self.ir.enums
                           for m in ce.members if fnmatch.fnmatchcase(m.name, pattern)]
                if not members:
                    raise SpecError(f"{node.where('match')}: {e.name}: no enum member "
                                    f"matches {pattern!r}")
                cname = pattern
            declared = dict(members)
            for cname_m, value in (node.get("members") or {}).items():
                if cname_m not in declared:
                    members.append((cname_m, int(value)))
                elif declared[cname_m] != int(value):
                    raise SpecError(f"{node.where('members')}: {e.name}: {cname_m} is "
                                    f"{declared[cname_m]} in {self.ir.source}, not {value}")
            result = []
            last_part = prefix.rstrip("_").split("_")[-1] + "_"
            for cname_m, value in members:
                if not cname_m.startswith(prefix):
                    raise SpecError(f"{node.where('prefix')}: {e.name}: member {cname_m} "
                                    f"does not start with {prefix}")
                py = cname_m[len(prefix):]
                if not py.isidentifier() or keyword.iskeyword(py):
                    py = last_part + py
                result.append((py, value, cname_m))
            out.append(EnumModel(e.name, node["kind"], cname, result))
        return out

    # -- structs --
    def structs(self) -> List[StructModel]:
        out = []
        for s in self.spec.structs:
            node = s.node
            record = self.ir.record(node["ctype"])
            if record is None and "since" in node:
                continue        # newer than these headers
            if record is None or not record.complete:
                raise SpecError(f"{node.where('ctype')}: {s.name}: no complete "
                                f"{node['ctype']} in {self.ir.source}")
            writable = bool(node.get("writable", False))
            fields: List[StructField] = []
            spec_fields = node["fields"]
            if spec_fields == "all":
                for name, t in _flat_fields(self.ir, record):
                    f = self._struct_field(s.name, name, name, t, {}, writable,
                                           node.where("fields"), strict=False)
                    if f is not None:
                        fields.append(f)
            elif isinstance(spec_fields, Node):
                for pyname, fspec in spec_fields.items():
                    where = spec_fields.where(pyname)
                    if isinstance(fspec, str):
                        fspec = {"path": fspec}
                    path = fspec.get("path", pyname)
                    if "since" in fspec and not _has_member(self.ir, record, path):
                        continue    # a field newer than these headers
                    t = _member_type(self.ir, record, path, where)
                    f = self._struct_field(s.name, pyname, path, t, fspec, writable,
                                           where, strict=True)
                    fields.append(f)
            else:
                raise SpecError(f"{node.where('fields')}: {s.name}: fields must be "
                                f"'all' or a mapping")
            model = StructModel(s.name, node["ctype"], node.get("doc", ""), writable,
                                fields, any(f.handle for f in fields))
            self.struct_models[s.name] = model
            out.append(model)
        return out

    def _struct_field(self, cls: str, pyname: str, path: str, t: Type, fspec,
                      writable: bool, where: str, strict: bool) -> Optional[StructField]:
        convert = fspec.get("convert") if fspec else None
        default = _spec_default(fspec) if fspec else REQUIRED
        if default == REQUIRED:
            default = None if not strict else REQUIRED
        has_default = default != REQUIRED
        if default == REQUIRED:
            default = None
        member = f"c->{path}"
        getter: List[str]
        setter: List[str] = []
        handle = struct_class = None
        if convert and convert.startswith("handle:"):
            handle = convert.split(":", 1)[1]
            if handle not in self.handle_names:
                raise SpecError(f"{where}: {cls}.{pyname}: unknown handle class {handle}")
            getter = [f"result = self->ref_{pyname} ? self->ref_{pyname} : Py_None;",
                      "Py_INCREF(result);"]
            if writable:
                # none_ok: a required field that may hold None until the
                # struct is used (the seed's QPInitAttr(None, None) filled later)
                none_ok = 1 if has_default or fspec.get("none_ok") else 0
                setter = [f"if (ibp_conv_handle(value, \"{pyname}\", {handle}_Type, {none_ok}, &obj) < 0)",
                          "    return -1;",
                          f"Py_XINCREF(obj);",
                          f"Py_XSETREF(self->ref_{pyname}, obj);"]
            return StructField(pyname, path, getter, setter,
                               _py_repr_default(default) if has_default else None,
                               handle=handle, none_ok=bool(fspec and fspec.get("none_ok")))
        if convert == "bool" and _is_int(t):
            getter = [f"result = PyBool_FromLong({member} != 0);"]
            if writable:
                setter = ["int truth = PyObject_IsTrue(value);",
                          "if (truth < 0)",
                          "    return -1;",
                          f"{member} = truth;"]
        elif convert in ("gid", "gid_bytes") or (t.kind == "union" and (t.decl or t.spelling) == "union ibv_gid"):
            # gid_bytes: read back as 16 bytes (the seed's AHAttr.dgid), not a Gid
            getter = ([f"result = PyBytes_FromStringAndSize((const char *){member}.raw, 16);"]
                      if convert == "gid_bytes" else [f"result = ibp_gid_to_py(&{member});"])
            if writable:
                setter = [f"if (value == Py_None) {{ memset(&{member}, 0, sizeof({member})); return 0; }}",
                          f"if (ibp_conv_gid(value, \"{pyname}\", &{member}) < 0)",
                          "    return -1;"]
        elif convert == "str" or (t.kind == "array" and t.element is not None
                                  and t.element.spelling in ("char", "const char")):
            getter = [f"result = ibp_chars_to_py({member}, sizeof({member}));"]
        elif t.kind == "array" and t.element is not None and t.element.size == 1:
            getter = [f"result = ibp_array_to_py({member}, sizeof({member}));"]
        elif _is_int(t):
            if t.size is None or (t.size, bool(t.signed)) not in INT_LIMITS:
                return None
            getter = [_int_getter(member, t)]
            if writable:
                setter = [l.replace("goto exit;", "return -1;")
                          for l in _int_convert("value", member, t, pyname)]
        elif t.kind == "struct" and (t.decl or t.spelling) in self.struct_by_ctype:
            struct_class = self.struct_by_ctype[t.decl or t.spelling]
            getter = [f"result = {struct_class}_from_c(&{member});"]
            if writable:
                setter = [f"if (!PyObject_TypeCheck(value, {struct_class}_Type)) {{",
                          f"    PyErr_SetString(PyExc_TypeError, \"{pyname} must be a {struct_class}\");",
                          "    return -1;",
                          "}",
                          f"{member} = ((struct {struct_class}Object *)value)->c;"]
        else:
            if strict:
                raise SpecError(f"{where}: {cls}.{pyname}: cannot convert {t.spelling}")
            return None
        if not writable:
            setter = []
        default_doc = _py_repr_default(default) if (writable and has_default) else None
        return StructField(pyname, path, getter, setter, default_doc,
                           struct_class=struct_class)

    # -- handles --
    def handles(self) -> List[HandleModel]:
        out: List[HandleModel] = []
        bases = {(b["class"] if isinstance(b, Node) else b) for b in
                 (h.node.get("base") for h in self.spec.handles) if b is not None}
        for h in self.spec.handles:
            node = h.node
            record = self.ir.record(node["ctype"])
            if record is None and "since" in node:
                continue        # newer than these headers
            if record is None:
                raise SpecError(f"{node.where('ctype')}: {h.name}: no {node['ctype']}")
            destroy = node.get("destroy")
            if destroy and self.ir.function(destroy) is None:
                raise SpecError(f"{node.where('destroy')}: {h.name}: no function {destroy}")
            parents = []
            for pname, pcls in (node.get("parents") or {}).items():
                optional = pcls.endswith("?")
                pcls = pcls.rstrip("?")
                if pcls not in self.handle_names:
                    raise SpecError(f"{node['parents'].where(pname)}: {h.name}: unknown "
                                    f"parent class {pcls}")
                parents.append((pname, pcls, optional))
            base = upcast = None
            if isinstance(node.get("base"), Node):
                bspec = node["base"]
                if not isinstance(bspec, Node) or set(bspec) != {"class", "upcast"}:
                    raise SpecError(f"{node.where('base')}: {h.name}: base needs exactly "
                                    f"'class' and 'upcast'")
                base = next((b for b in out if b.name == bspec["class"]), None)
                if base is None:
                    raise SpecError(f"{bspec.where('class')}: {h.name}: base {bspec['class']} "
                                    f"must be a handle class defined before it")
                if base.has_gc or base.base is not None:
                    raise SpecError(f"{bspec.where('class')}: {h.name}: subhandle.c.h.j2 supports "
                                    f"bases without slots that are no subclass themselves")
                upcast = bspec["upcast"]
                if self.ir.function(upcast) is None:
                    raise SpecError(f"{bspec.where('upcast')}: {h.name}: no function {upcast}")
                if parents or destroy:
                    raise SpecError(f"{node.where()}: {h.name}: a subclass takes its parents "
                                    f"and destroy verb from its base {base.name}")
                parents = list(base.parents)
                destroy = base.destroy
            attributes = []
            for aname, aspec in (node.get("attributes") or {}).items():
                where = node["attributes"].where(aname)
                if isinstance(aspec, Node) and "checks" in aspec:
                    guard = []
                    for chk in aspec["checks"]:
                        exc = chk.get("error", "ValueError")
                        guard += [f"if (!({chk['expr']})) {{",
                                  f'    PyErr_SetString(PyExc_{exc}, "{h.name}.{aname}: {chk["message"]}");',
                                  "    return NULL;", "}"]
                    attributes.append((aname, guard + [
                        f"result = PyLong_FromUnsignedLongLong((unsigned long long)({aspec['expr']}));"]))
                    continue
                if isinstance(aspec, Node) and "path" in aspec:
                    # {path, since}: a member newer than some headers
                    if "since" in aspec and not _has_member(self.ir, record, aspec["path"]):
                        continue
                    aspec = aspec["path"]
                if isinstance(aspec, str):
                    t = _member_type(self.ir, record, aspec, where)
                    if not _is_int(t):
                        raise SpecError(f"{where}: {h.name}.{aname}: {aspec} is not an integer")
                    attributes.append((aname, [_int_getter(f"self_ptr->{aspec}", t)]))
                else:
                    conv = aspec.get("convert", "int")
                    expr = aspec["expr"]
                    if conv == "str":
                        attributes.append((aname, [f"const char *s = {expr};",
                                                   "result = s ? PyUnicode_FromString(s) : Py_NewRef(Py_None);"]))
                    else:
                        attributes.append((aname, [f"result = PyLong_FromUnsignedLongLong((unsigned long long)({expr}));"]))
            slots = [(sname, bool(sspec.get("writable", False)), sspec.get("doc", ""))
                     for sname, sspec in (node.get("slots") or {}).items()]
            state = list((node.get("state") or {}).items())
            methods = [self.method(m) for m in h.methods if not self.absent(m)]
            registered = bool(node.get("registered", False)) or bool(base and base.registered)
            hand_attributes = [(aname, bool(aspec.get("writable", False)), aspec.get("doc", ""))
                               for aname, aspec in (node.get("hand_attributes") or {}).items()]
            own_destroy = False
            if isinstance(node.get("base"), str):
                base, parents, destroy, registered, slots = self.base_of(h.name, node, out)
                own_destroy = "destroy" in node
            dfunc = self.ir.function(destroy) if destroy else None
            out.append(HandleModel(h.name, node["ctype"], node.get("doc", ""), destroy,
                                   parents, attributes, slots, state,
                                   node.get("before_destroy"), registered,
                                   methods, base=base, upcast=upcast,
                                   before_dealloc=node.get("before_dealloc"),
                                   subclassed=h.name in bases,
                                   release=self.release(h),
                                   hand_attributes=hand_attributes,
                                   own_destroy=own_destroy,
                                   destroy_void=dfunc is not None and dfunc.result.kind == "void"))
            out[-1].clear_on_close = (list(base.clear_on_close) if isinstance(node.get("base"), str)
                                      else [sname for sname, sspec in (node.get("slots") or {}).items()
                                            if sspec.get("clear_on_close")])
            out[-1].keepalive = ([] if isinstance(node.get("base"), str)
                                 else [(str(sspec["keepalive"]), sname)
                                       for sname, sspec in (node.get("slots") or {}).items()
                                       if sspec.get("keepalive")])
        return out

    def release(self, h) -> Optional[Tuple[str, str]]:
        rel = h.node.get("release")
        if rel is None:
            return None
        if not isinstance(rel, Node) or set(rel) != {"when", "verb"}:
            raise SpecError(f"{h.node.where('release')}: {h.name}: release needs 'when' "
                            f"(a state flag) and 'verb'")
        if rel["when"] not in (h.node.get("state") or {}):
            raise SpecError(f"{rel.where('when')}: {h.name}: no state {rel['when']!r}")
        if self.ir.function(rel["verb"]) is None and rel["verb"] in self.spec.optional:
            return None     # older headers: nothing can be imported either
        if self.ir.function(rel["verb"]) is None:
            raise SpecError(f"{rel.where('verb')}: {h.name}: no function {rel['verb']}")
        return (rel["when"], rel["verb"])

    def base_of(self, name: str, node, done: List[HandleModel]):
        """A same-object subclass (`base: QP`) takes its base's parents,
        destroy and registration; the base must come first in the spec and
        own the same C type (its methods run on the subclass's objects
        unchanged)."""
        base = next((m for m in done if m.name == node["base"]), None)
        if base is None:
            raise SpecError(f"{node.where('base')}: {name}: base {node['base']} must be a "
                            "handle class declared before it")
        if base.ctype != node["ctype"]:
            raise SpecError(f"{node.where('ctype')}: {name}: a subclass owns the same C "
                            f"type as its base ({base.ctype}); another type needs "
                            "base: {class, upcast}")
        for key in ("parents", "slots", "before_destroy", "registered"):
            if key in node:
                raise SpecError(f"{node.where(key)}: {name}: {key} comes from the base "
                                f"{base.name}")
        if "destroy" in node and ("state" in node or "hand_attributes" in node):
            raise SpecError(f"{node.where('destroy')}: {name}: a subclass with its own "
                            "destroy keeps the base's layout (no state)")
        return base, base.parents, node.get("destroy", base.destroy), base.registered, base.slots

    # -- methods --
    def absent(self, m: Method) -> bool:
        """A method whose verb these (older) headers do not declare, and
        that the spec marks as newer (its verb under symbols.optional, or a
        `since:` key): skipped, so that old releases still generate.  Any
        other missing verb is left to method(), which raises SpecError."""
        verbs = [m.verb] if m.hand is None else list(m.node.get("verbs", []) or [])
        missing = [v for v in verbs if v and self.ir.function(v) is None]
        return bool(missing) and ("since" in m.node or
                                  all(v in self.spec.optional for v in missing))

    def method(self, m: Method) -> MethodModel:
        label = f"{m.owner}.{m.name}" if m.owner else m.name
        prefix = f"{m.owner}_" if m.owner else "module_"
        cname = f"{prefix}{m.name.lstrip('_')}" if not m.name.startswith("_") else f"{prefix}_{m.name.lstrip('_')}"
        if m.python is not None:
            module, func = m.python.split(":")
            sig = str(m.node["signature"])
            if not sig.startswith(f"{m.name}("):
                raise SpecError(f"{m.where('signature')}: {label}: the signature must "
                                f"start with {m.name}(")
            doc = f"{sig}\n--\n\n{str(m.node['doc']).strip()}"
            return MethodModel(m.name, m.owner, f"ibp_py_{cname}", "METH_VARARGS | METH_KEYWORDS",
                               doc, hand=True, python=(module, func))
        if m.hand is not None:
            sig = m.hand
            inner = sig[sig.index("(") + 1:sig.rindex(")")].strip()
            params = [p.strip() for p in inner.split(",") if p.strip()]
            if not params:
                flags = "METH_NOARGS"
            elif len(params) == 1 and "=" not in params[0]:
                # keywords: true keeps the name usable as a keyword (the
                # seed's cq.poll(num_entries=16)) at METH_O's speed.
                flags = FASTCALL_KEYWORDS if m.node.get("keywords") else "METH_O"
            else:
                flags = "METH_VARARGS | METH_KEYWORDS"
            selfpart = "$self, /" if m.owner else ""
            shown = ", ".join(([selfpart] if selfpart else []) + params)
            verbs = list(m.node.get("verbs", []))
            text = m.node.get("doc") or (f"Calls {', '.join(verbs)}." if verbs else "")
            if not text:
                raise SpecError(f"{m.where()}: {label}: a hand-written method needs 'doc' or 'verbs'")
            doc = f"{m.name}({shown})\n--\n\n{text}"
            for v in verbs:
                if self.ir.function(v) is None:
                    raise SpecError(f"{m.where('verbs')}: {label}: no function {v}")
            return MethodModel(m.name, m.owner, f"ibp_hand_{cname}", flags, doc, hand=True,
                               verbs=verbs)
        return MethodBuilder(self, m, label, cname).build()


class MethodBuilder:
    """The C body of one generated verb wrapper."""

    def __init__(self, b: Builder, m: Method, label: str, cname: str):
        self.b = b
        self.ir = b.ir
        self.m = m
        self.label = label
        self.cname = cname
        self.decls: List[str] = []
        self.convert: List[str] = []
        self.post_convert: List[str] = []
        self.args: List[Arg] = []
        self.call_args: List[str] = []
        self.outs: List[Tuple[str, List[str]]] = []   # (var, statements -> item)
        self.cleanup: List[str] = []
        self.kwargs_struct: Optional[Tuple[str, str, str, List[str]]] = None
        self.mask_used = False

    def where(self, key=None):
        return self.m.where(key)

    def fail(self, msg: str, key=None):
        raise SpecError(f"{self.where(key)}: {self.label}: {msg}")

    def verb_function(self) -> Tuple[Function, List]:
        verb = self.m.verb
        f = self.ir.function(verb)
        if f is None:
            self.fail(f"no function {verb} in {self.ir.source}", "verb")
        params = f.params
        if f.macro_target:
            target = self.ir.function(f.macro_target)
            if target is not None and len(target.params) == len(f.params):
                params = target.params
        return f, params

    def build(self) -> MethodModel:
        m = self.m
        f, params = self.verb_function()
        spec_params = m.node["params"] or Node()
        names = [p.name for p in params]
        for key in spec_params:
            if key not in names:
                self.fail(f"{f.name} has no parameter {key!r} (it has: {', '.join(names)})",
                          "params")
        for p in params:
            if p.name not in spec_params:
                self.fail(f"parameter {p.name!r} of {f.name} is not mapped", "params")
            self.param(p.name, p.type, spec_params[p.name], spec_params.where(p.name))
        body: List[str] = []
        owner = m.owner
        if owner:
            ctype = self.b.spec.handle(owner).node["ctype"]
            body += [f"{ctype} *self_ptr;"]
        body += self.decls
        body += ["PyObject *return_value = NULL;"]
        result_t = f.result
        has_result = result_t.kind != "void"
        if has_result:
            body.append(_declare(result_t.spelling, "rc") + ";")
        body.append("")
        # argument parsing
        if self.kwargs_struct:
            body += self.kwargs_parse()
        elif self.args:
            kw = ", ".join(f'"{a.name}"' for a in self.args)
            body.append(f"static char *kwlist[] = {{{kw}, NULL}};")
            fmt = ""
            seen_optional = False
            for a in self.args:
                if not a.required and not seen_optional:
                    fmt += "|"
                    seen_optional = True
                fmt += "O"
            body.append(f'if (!PyArg_ParseTupleAndKeywords(args, kwargs, "{fmt}:{m.name}", kwlist,')
            body.append("        " + ", ".join(f"&{a.name}_obj" for a in self.args) + "))")
            body.append("    goto exit;")
        if owner and "base" in self.b.spec.handle(owner).node:
            # a subclass stores its base's pointer; its own is kept beside it
            body += ["if (ibp_check_open(self) < 0)", "    goto exit;",
                     f"self_ptr = {owner}_PTR(self);"]
        elif owner:
            body += ["if (ibp_check_open(self) < 0)", "    goto exit;",
                     f"self_ptr = ({self.b.spec.handle(owner).node['ctype']} *)IBP_HANDLE(self)->ptr;"]
        # availability of optional symbols
        for sym in self.required_symbols(f):
            since = self.b.spec.optional[sym]
            body += [f"if (!IBP_SYMBOL_AVAILABLE({sym})) {{",
                     f'    ibp_raise_unavailable("{sym}", "{since}");',
                     "    goto exit;", "}"]
        body += self.convert + self.post_convert
        for chk in m.node.get("checks", []) or []:
            exc = chk.get("error", "ValueError")
            body += [f"if (!({chk['expr']})) {{",
                     f'    PyErr_SetString(PyExc_{exc}, "{self.label}: {chk["message"]}");',
                     "    goto exit;", "}"]
        if m.node.get("guard"):
            # hand-written precondition: < 0 with an exception set
            body += [f"if (({m.node['guard']}) < 0)", "    goto exit;"]
        if m.node.get("prologue"):
            body.append(m.node["prologue"])
        call = f"{f.name}({', '.join(self.call_args)})"
        errors = m.node["errors"]
        release = m.node.get("gil", "hold") == "release"
        stmt = f"rc = {call};" if has_result else f"{call};"
        if errors != "none" and has_result:
            body.append("errno = 0;")
        if release:
            body += ["ibp_busy_enter(self);"] if owner else []
            body += ["Py_BEGIN_ALLOW_THREADS", stmt, "Py_END_ALLOW_THREADS"]
            body += ["ibp_busy_leave(self);"] if owner else []
        else:
            body.append(stmt)
        # errors
        if errors == "null":
            body += ["if (rc == NULL) {", f'    ibp_raise("{f.name}", ibp_error_code(0));',
                     "    goto exit;", "}"]
        elif errors == "errno":
            body += ["if (rc != 0) {", f'    ibp_raise("{f.name}", ibp_error_code(rc));',
                     "    goto exit;", "}"]
        elif errors == "negative":
            body += ["if (rc < 0) {", f'    ibp_raise("{f.name}", ibp_error_code(rc));',
                     "    goto exit;", "}"]
        body += self.result(f, result_t)
        if m.node.get("epilogue"):
            # runs once the result exists (e.g. records how a new object was made)
            body += ["if (return_value != NULL) {", "    " + m.node["epilogue"], "}"]
        if owner and sum("self_ptr" in line for line in body) == 2:
            # only declared and set: the verb takes something else of self
            # (a QPEx's struct ibv_qp_ex)
            at = next(i for i, line in enumerate(body) if line.startswith("self_ptr = "))
            body.insert(at + 1, "(void)self_ptr;")
        body.append("")
        body.append("exit:")
        body += self.cleanup
        body.append("return return_value;")
        # signature / doc
        parts = []
        if owner:
            parts.append("$self")
            parts.append("/")
        for a in self.args:
            parts.append(a.name if a.required else f"{a.name}={a.default_doc}")
        sig = m.node.get("signature") or f"{m.name}({', '.join(parts)})"
        flags = "METH_VARARGS | METH_KEYWORDS" if (self.args or self.kwargs_struct) else "METH_NOARGS"
        verbs = [f.name] + list(m.node.get("verbs", []) or [])
        mm = MethodModel(m.name, owner, self.cname, flags, "", args=self.args,
                         body=body, verbs=verbs)
        try:
            text = docstrings.compose(mm, self.label, m.node, f.name, f.storage, self.b.spec,
                                      self.b.handle_names)
        except docstrings.DocError as exc:
            self.fail(str(exc).split(": ", 1)[1], "doc")
        mm.doc = f"{sig}\n--\n\n{text}"
        return mm

    def required_symbols(self, f: Function) -> List[str]:
        syms = []
        if f.storage == "exported" and f.name in self.b.spec.optional:
            syms.append(f.name)
        if f.macro_target and f.macro_target in self.b.spec.optional:
            syms.append(f.macro_target)
        for sym in self.m.node.get("requires", []) or []:
            if sym not in self.b.spec.optional:
                self.fail(f"requires {sym}, which is not listed under symbols.optional",
                          "requires")
            syms.append(sym)
        return syms

    # -- parameters --
    def add_arg(self, name: str, default) -> str:
        required = default == "__required__"
        if required and any(not a.required for a in self.args):
            self.fail(f"required argument {name!r} follows an argument with a default "
                      "(reorder the spec)")
        var = f"{name}_obj"
        self.decls.append(f"PyObject *{var} = NULL;")
        self.args.append(Arg(name, required, None if required else _py_repr_default(default)))
        return var

    def param(self, cname: str, t: Type, pspec, where: str):
        if pspec == "self":
            self.call_args.append("self_ptr")
            return
        if pspec == "out":
            self.out_param(cname, t, where)
            return
        if pspec == "scratch":
            pointee = t.pointee
            self.decls.append(f"{pointee.spelling} {cname}_scratch;")
            self.convert.append(f"memset(&{cname}_scratch, 0, sizeof({cname}_scratch));")
            self.call_args.append(f"&{cname}_scratch")
            return
        if pspec == "mask":
            self.call_args.append("mask_bits")
            return
        if isinstance(pspec, str):
            pspec = {"arg": pspec}
        if "value" in pspec:
            self.call_args.append(str(pspec["value"]))
            return
        if "struct" in pspec:
            self.struct_param(cname, t, pspec["struct"], where)
            return
        if "kwargs" in pspec:
            cls = pspec["kwargs"]
            sm = self.b.struct_models.get(cls)
            if sm is None or not sm.writable:
                self.fail(f"kwargs needs a writable struct class, got {cls}")
            self.decls.append(f"{sm.ctype} {cname}_c;")
            # positional: fields also taken by position after the arguments,
            # where None means not given (the seed's modify(mask, ah_attr=None))
            self.kwargs_struct = (cname, cls, pspec.get("unknown", "unknown attribute"),
                                  list(pspec.get("positional") or []))
            self.call_args.append(f"&{cname}_c")
            return
        if "out" in pspec:
            kind = pspec["out"]
            if kind == "dict":
                # the struct's fields as a plain dict (the seed's SRQ.query)
                self.out_param(cname, t, where)
                var, stmts = self.outs[-1]
                if not stmts[0].endswith("_from_c(&" + cname + "_out);"):
                    self.fail(f"out: dict needs a struct class for {cname}")
                cls = stmts[0].split("=", 1)[1].strip().split("_from_c", 1)[0]
                self.outs[-1] = (var, [f"{{ PyObject *obj = {cls}_from_c(&{cname}_out);",
                                       f"  item = obj ? {cls}_asdict(obj, NULL) : NULL;",
                                       "  Py_XDECREF(obj); }"])
                return
            if kind == "bytes":
                size = int(pspec["size"])
                self.decls.append(f"uint8_t {cname}_buf[{size}];")
                self.convert.append(f"memset({cname}_buf, 0, sizeof({cname}_buf));")
                self.call_args.append(f"{cname}_buf")
                self.outs.append((cname, [f"item = PyBytes_FromStringAndSize((const char *){cname}_buf, {size});"]))
                return
            if kind == "list":
                pointee = t.pointee
                cls = self.b.struct_by_ctype.get(pointee.decl or pointee.spelling) if pointee else None
                if cls is None and pointee is not None and _is_int(pointee):
                    # a list of integers (ibv_read_counters): `count` entries,
                    # all filled by the verb
                    self.int_out_list(cname, pointee, f"{pspec['count']}_c")
                    return
                if cls is None:
                    self.fail(f"out list {cname}: no struct class for {t.spelling}")
                count = f"{pspec['count']}_c"
                self.decls.append(f"{pointee.spelling} *{cname}_list = NULL;")
                self.post_convert += [f"{cname}_list = PyMem_Calloc({count} ? {count} : 1, sizeof(*{cname}_list));",
                                      f"if ({cname}_list == NULL) {{", "    PyErr_NoMemory();",
                                      "    goto exit;", "}"]
                self.cleanup.append(f"PyMem_Free({cname}_list);")
                self.call_args.append(f"{cname}_list")
                self.outs.append((cname, [
                    "item = PyList_New(0);",
                    "for (ssize_t i = 0; item != NULL && i < (ssize_t)rc; i++) {",
                    f"    PyObject *entry = {cls}_from_c(&{cname}_list[i]);",
                    "    if (entry == NULL || PyList_Append(item, entry) < 0)",
                    "        Py_CLEAR(item);",
                    "    Py_XDECREF(entry);",
                    "}"]))
                return
            self.fail(f"unknown out kind {kind!r}")
        name = pspec.get("arg")
        if name is None:
            self.fail(f"parameter {cname}: needs arg, value, struct, out, self or scratch")
        default = _spec_default(pspec)
        var = self.add_arg(name, default)
        convert = pspec.get("convert")
        local = f"{cname}_c"
        lines: List[str] = []
        if convert and convert.startswith("handle:"):
            cls = convert.split(":", 1)[1]
            if cls not in self.b.handle_names:
                self.fail(f"unknown handle class {cls}")
            hctype = self.b.spec.handle(cls).node["ctype"]
            self.decls.append(f"PyObject *{name} = NULL;")
            self.decls.append(f"{hctype} *{local} = NULL;")
            none_ok = 1 if default is None else 0
            lines.append(f"if ({var} != NULL) {{")
            lines.append(f'    if (ibp_conv_handle({var}, "{name}", {cls}_Type, {none_ok}, &{name}) < 0)')
            lines.append("        goto exit;")
            lines.append(f"    if ({name} != NULL)")
            lines.append(f"        {local} = ({hctype} *)IBP_HANDLE({name})->ptr;")
            lines.append("}")
            lines += self.context_check(name, local, hctype)
            self.call_args.append(local)
        elif convert and convert.startswith("struct:"):
            cls = convert.split(":", 1)[1]
            sm = self.b.struct_models.get(cls)
            if sm is None:
                self.fail(f"unknown struct class {cls}")
            self.decls.append(f"struct {cls}Object *{name} = NULL;")
            lines.append(f"if (!PyObject_TypeCheck({var}, {cls}_Type)) {{")
            lines.append(f'    PyErr_Format(PyExc_TypeError, "{name} must be a {cls}, not %s", ibp_type_name({var}));')
            lines.append("    goto exit;")
            lines.append("}")
            lines.append(f"{name} = (struct {cls}Object *){var};")
            if sm.has_handles:
                lines.append(f"if ({cls}_prepare({name}) < 0)")
                lines.append("    goto exit;")
            self.call_args.append(f"&{name}->c")
        elif convert == "gid":
            self.decls.append(f"union ibv_gid {local};")
            lines.append(f'if (ibp_conv_gid({var}, "{name}", &{local}) < 0)')
            lines.append("    goto exit;")
            self.call_args.append(f"&{local}" if t.kind == "pointer" else local)
        elif convert == "be32":
            # host order in Python, network order in C (imm_data)
            self.decls.append(f"uint32_t {local} = 0;")
            lines += self.optional_wrap(var, default, _int_convert(
                var, local, Type("uint32_t", "int", 4, False), name))
            self.call_args.append(f"htobe32({local})")
        elif convert == "bytes":
            # any bytes-like object, copied; other parameters and `checks`
            # may use it as {cname}_c_bytes and its size as {cname}_c_size
            # (QP._create_flow: struct ibv_flow_attr and its specs)
            self.decls.append(f"PyObject *{local}_bytes = NULL;")
            self.decls.append(f"Py_ssize_t {local}_size = 0;")
            lines.append(f"{local}_bytes = PyBytes_FromObject({var});")
            lines.append(f"if ({local}_bytes == NULL)")
            lines.append("    goto exit;")
            lines.append(f"{local}_size = PyBytes_Size({local}_bytes);")
            lines.append(f"(void){local}_size;   /* for the parameters and checks that want it */")
            if pspec.get("max") is not None:
                lines.append(f"if ({local}_size > (Py_ssize_t)({pspec['max']})) {{")
                lines.append(f'    PyErr_Format(PyExc_ValueError, "{name} must be at most %lld bytes, got %zd", (long long)({pspec["max"]}), {local}_size);')
                lines.append("    goto exit;")
                lines.append("}")
            self.cleanup.append(f"Py_XDECREF({local}_bytes);")
            cast = "(void *)" if t.spelling.replace(" ", "") == "void*" else f"({t.spelling})(void *)"
            self.call_args.append(f"{cast}PyBytes_AsString({local}_bytes)")
        elif convert == "wc":
            self.decls.append(f"struct ibv_wc {local};")
            lines.append(f"if (ibp_wc_to_c({var}, &{local}) < 0)")
            lines.append("    goto exit;")
            self.call_args.append(f"&{local}")
        elif convert and convert.startswith("buffer:"):
            size = int(convert.split(":", 1)[1])
            self.decls.append(f"PyObject *{local}_bytes = NULL;")
            lines.append(f"{local}_bytes = PyBytes_FromObject({var});")
            lines.append(f"if ({local}_bytes == NULL)")
            lines.append("    goto exit;")
            lines.append(f"if (PyBytes_Size({local}_bytes) != {size}) {{")
            lines.append(f'    PyErr_Format(PyExc_ValueError, "{name} must be exactly {size} bytes, got %zd", PyBytes_Size({local}_bytes));')
            lines.append("    goto exit;")
            lines.append("}")
            self.cleanup.append(f"Py_XDECREF({local}_bytes);")
            self.call_args.append(f"({t.spelling})(void *)PyBytes_AsString({local}_bytes)")
        elif convert == "address" or (t.kind == "pointer" and t.pointee is not None
                                      and t.pointee.kind == "void"):
            self.decls.append(f"uint64_t {local} = 0;")
            lines += self.optional_wrap(var, default, _int_convert(
                var, local, Type("uint64_t", "int", 8, False), name))
            self.call_args.append(f"(void *)(uintptr_t){local}")
        elif _is_int(t):
            self.decls.append(f"{t.spelling} {local} = {_c_default(default) if default != '__required__' else '0'};")
            lo = pspec.get("min")
            hi = pspec.get("max")
            conv = _int_convert(var, local, t, name,
                                None if lo is None else str(lo),
                                None if hi is None else str(hi))
            lines += self.optional_wrap(var, default, conv)
            self.call_args.append(local)
        else:
            self.fail(f"parameter {cname}: cannot convert {t.spelling}")
        self.convert += lines

    def int_out_list(self, cname: str, pointee: Type, count: str) -> None:
        self.decls.append(f"{pointee.spelling} *{cname}_list = NULL;")
        self.post_convert += [f"{cname}_list = PyMem_Calloc({count} ? {count} : 1, sizeof(*{cname}_list));",
                              f"if ({cname}_list == NULL) {{", "    PyErr_NoMemory();",
                              "    goto exit;", "}"]
        self.cleanup.append(f"PyMem_Free({cname}_list);")
        self.call_args.append(f"{cname}_list")
        getter = _int_getter(f"{cname}_list[i]", pointee).replace("result =", "PyObject *entry =")
        self.outs.append((cname, [
            f"item = PyList_New(0);",
            f"for (size_t i = 0; item != NULL && i < (size_t){count}; i++) {{",
            f"    {getter}",
            "    if (entry == NULL || PyList_Append(item, entry) < 0)",
            "        Py_CLEAR(item);",
            "    Py_XDECREF(entry);",
            "}"]))

    def optional_wrap(self, var: str, default, lines: List[str]) -> List[str]:
        if default == "__required__":
            return lines
        return [f"if ({var} != NULL) {{"] + ["    " + l for l in lines] + ["}"]

    def context_check(self, name: str, local: str, hctype: str) -> List[str]:
        """Handles passed to a verb must belong to the same device context."""
        if not self.m.owner:
            return []
        record = self.ir.record(hctype)
        if record is None or _find_field(self.ir, record, "context") is None:
            return []
        owner_ctype = self.b.spec.handle(self.m.owner).node["ctype"]
        owner_ctx = "self_ptr" if owner_ctype == "struct ibv_context" else "self_ptr->context"
        return [f"if ({local} != NULL && {local}->context != {owner_ctx}) {{",
                f'    PyErr_SetString(PyExc_ValueError, "{self.label}: {name} belongs to another context");',
                "    goto exit;", "}"]

    def struct_param(self, cname: str, t: Type, fields, where: str):
        pointee = t.pointee
        if pointee is None:
            self.fail(f"parameter {cname}: struct needs a pointer parameter")
        record = self.ir.record(pointee.decl or pointee.spelling)
        if record is None:
            self.fail(f"parameter {cname}: {pointee.spelling} is not a known struct")
        local = f"{cname}_c"
        self.decls.append(f"{record.name} {local};")
        self.convert.append(f"memset(&{local}, 0, sizeof({local}));")
        for path, fspec in fields.items():
            ft = _member_type(self.ir, record, path, fields.where(path))
            target = f"{local}.{path}"
            if isinstance(fspec, str):
                fspec = {"arg": fspec}
            if "value" in fspec:
                self.convert.append(f"{target} = {fspec['value']};")
                continue
            name = fspec["arg"]
            default = _spec_default(fspec)
            var = self.add_arg(name, default)
            convert = fspec.get("convert")
            if convert and convert.startswith("handle:"):
                self.convert += self.struct_handle_field(name, var, target, convert,
                                                         default, fspec, fields.where(path))
                continue
            conv = _int_convert(var, target, ft, name,
                                None if fspec.get("min") is None else str(fspec["min"]),
                                None if fspec.get("max") is None else str(fspec["max"]))
            if "mask" in fspec:
                if not self.mask_used:
                    self.decls.append("int mask_bits = 0;")
                    self.mask_used = True
                conv = conv + [f"mask_bits |= {fspec['mask']};"]
                self.convert += [f"if ({var} != NULL && {var} != Py_None) {{"] + \
                    ["    " + l for l in conv] + ["}"]
            elif default != "__required__":
                self.convert.append(f"{target} = {_c_default(default)};")
                self.convert += self.optional_wrap(var, default, conv)
            else:
                self.convert += conv
        self.call_args.append(f"&{local}")

    def struct_handle_field(self, name: str, var: str, target: str, convert: str,
                            default, fspec, where: str) -> List[str]:
        """A struct member pointing to a verbs object, from a handle argument
        (its Python object is `name`, usable as a parent in `returns`)."""
        cls = convert.split(":", 1)[1]
        if cls not in self.b.handle_names:
            raise SpecError(f"{where}: {self.label}: unknown handle class {cls}")
        hctype = self.b.spec.handle(cls).node["ctype"]
        none_ok = 1 if default is None else 0
        self.decls.append(f"PyObject *{name} = NULL;")
        lines = [f"if ({var} != NULL) {{",
                 f'    if (ibp_conv_handle({var}, "{name}", {cls}_Type, {none_ok}, &{name}) < 0)',
                 "        goto exit;",
                 "}",
                 f"if ({name} != NULL) {{",
                 f"    {target} = ({hctype} *)IBP_HANDLE({name})->ptr;"]
        if "mask" in fspec:
            if not self.mask_used:
                self.decls.append("int mask_bits = 0;")
                self.mask_used = True
            lines.append(f"    mask_bits |= {fspec['mask']};")
        lines.append("}")
        lines += self.context_check(name, target, hctype)
        return lines

    def out_param(self, cname: str, t: Type, where: str):
        pointee = t.pointee
        if pointee is None:
            self.fail(f"out parameter {cname} is not a pointer")
        key = pointee.decl or pointee.spelling
        local = f"{cname}_out"
        self.decls.append(f"{pointee.spelling} {local};")
        self.convert.append(f"memset(&{local}, 0, sizeof({local}));")
        self.call_args.append(f"&{local}")
        if key in self.b.struct_by_ctype:
            cls = self.b.struct_by_ctype[key]
            self.outs.append((cname, [f"item = {cls}_from_c(&{local});"]))
        elif key == "union ibv_gid":
            self.outs.append((cname, [f"item = ibp_gid_to_py(&{local});"]))
        elif _is_int(pointee):
            getter = _int_getter(local, pointee).replace("result =", "item =")
            self.outs.append((cname, [getter]))
        else:
            self.fail(f"out parameter {cname}: no class for {pointee.spelling}")

    def kwargs_parse(self) -> List[str]:
        cname, cls, unknown, positional = self.kwargs_struct
        local = f"{cname}_c"
        lines = [f"memset(&{local}, 0, sizeof({local}));"]
        # positional: the non-struct args (attr_mask), the positional fields, then keywords
        others = self.args
        most = len(others) + len(positional)
        lines.append("{")
        lines.append("    Py_ssize_t nargs = PyTuple_Size(args);")
        lines.append(f"    if (nargs > {most}) {{")
        lines.append(f'        PyErr_Format(PyExc_TypeError, "{self.m.name}() takes at most {most} positional argument(s) (%zd given)", nargs);')
        lines.append("        goto exit;")
        lines.append("    }")
        for j, field in enumerate(positional):
            i = len(others) + j
            lines.append(f"    if (nargs > {i} && PyTuple_GetItem(args, {i}) != Py_None) {{")
            lines.append(f'        if (kwargs && PyDict_GetItemString(kwargs, "{field}") != NULL) {{')
            lines.append(f'            PyErr_SetString(PyExc_TypeError, "{self.m.name}() got {field} by position and by keyword");')
            lines.append("            goto exit;")
            lines.append("        }")
            lines.append(f'        PyObject *key = PyUnicode_FromString("{field}");')
            lines.append(f"        int rc_set = key ? {cls}_set_field(&{local}, key, PyTuple_GetItem(args, {i})) : -1;")
            lines.append("        Py_XDECREF(key);")
            lines.append("        if (rc_set < 0)")
            lines.append("            goto exit;")
            lines.append("    }")
        for i, a in enumerate(others):
            lines.append(f"    if (nargs > {i}) {a.name}_obj = PyTuple_GetItem(args, {i});")
            lines.append(f'    else if (kwargs) {a.name}_obj = PyDict_GetItemString(kwargs, "{a.name}");')
            if a.required:
                lines.append(f"    if ({a.name}_obj == NULL) {{")
                lines.append(f'        PyErr_SetString(PyExc_TypeError, "{self.m.name}() missing required argument \'{a.name}\'");')
                lines.append("        goto exit;")
                lines.append("    }")
        lines.append("    if (kwargs) {")
        lines.append("        PyObject *key, *value;")
        lines.append("        Py_ssize_t pos = 0;")
        lines.append("        while (PyDict_Next(kwargs, &pos, &key, &value)) {")
        conds = " || ".join([f'PyUnicode_CompareWithASCIIString(key, "{a.name}") == 0' for a in others] +
                            [f'(value == Py_None && PyUnicode_CompareWithASCIIString(key, "{f}") == 0)'
                             for f in positional])
        if conds:
            lines.append(f"            if ({conds})")
            lines.append("                continue;")
        lines.append(f"            int rc_set = {cls}_set_field(&{local}, key, value);")
        lines.append("            if (rc_set == -2)")
        lines.append(f'                PyErr_Format(PyExc_TypeError, "{unknown}: %R", key);')
        lines.append("            if (rc_set < 0)")
        lines.append("                goto exit;")
        lines.append("        }")
        lines.append("    }")
        lines.append("}")
        return lines

    def result(self, f: Function, result_t: Type) -> List[str]:
        ret = self.m.node.get("returns")
        lines: List[str] = []
        if isinstance(ret, Node) and "new" in ret:
            cls = ret["new"]
            hspec = self.b.spec.handle(cls)
            if hspec is None:
                self.fail(f"returns a new {cls}, which is not a handle class", "returns")
            parents = []
            pnode = hspec.node
            while "base" in pnode:          # a subclass has its base's parents
                b = pnode["base"]
                pnode = self.b.spec.handle(b["class"] if isinstance(b, Node) else b).node
            declared = list((pnode.get("parents") or {}).keys())
            given = ret.get("parents") or {}
            for pname in declared:
                src = given.get(pname)
                if src is None:
                    parents.append("NULL")
                elif src == "self":
                    parents.append("self")
                elif "." in src:
                    obj, fld = src.split(".", 1)
                    parents.append(f"{obj}->ref_{fld}")
                else:
                    parents.append(src)
            for pname in given:
                if pname not in declared:
                    self.fail(f"{cls} has no parent {pname!r}", "returns")
            lines.append(f"return_value = {cls}_wrap(rc{''.join(', ' + p for p in parents)});")
            return lines
        if ret == "result":
            return [_int_getter("rc", result_t).replace("result =", "return_value =")]
        if ret == "bool":
            return ["return_value = PyBool_FromLong(rc != 0);"]
        if ret == "be32":
            # network order in C, host order in Python (as WC.imm_data)
            return ["return_value = PyLong_FromUnsignedLong(be32toh(rc));"]
        if ret == "str":
            return ["return_value = rc ? PyUnicode_FromString(rc) : Py_NewRef(Py_None);"]
        if ret not in (None, "out", "none"):
            self.fail(f"unknown returns {ret!r}", "returns")
        if ret == "none" or not self.outs:
            return ["return_value = Py_NewRef(Py_None);"]
        if len(self.outs) == 1:
            _, stmts = self.outs[0]
            return ["{", "    PyObject *item;"] + ["    " + s for s in stmts] + \
                ["    return_value = item;", "}"]
        lines = [f"return_value = PyTuple_New({len(self.outs)});",
                 "if (return_value == NULL)", "    goto exit;"]
        for i, (_, stmts) in enumerate(self.outs):
            lines += ["{", "    PyObject *item;"] + ["    " + s for s in stmts] + [
                "    if (item == NULL) {", "        Py_CLEAR(return_value);",
                "        goto exit;", "    }",
                f"    PyTuple_SetItem(return_value, {i}, item);", "}"]
        return lines


# --- symbols and coverage ----------------------------------------------------


def public_functions(ir: IR) -> List[Function]:
    """The functions a user of verbs.h can call: declared in verbs.h itself,
    not rdma-core internals (leading underscore)."""
    return [f for f in ir.functions
            if f.header == ir.source and not f.name.startswith("_")]


def symbols(ir: IR, spec: Spec) -> List[SymbolModel]:
    out = []
    for f in ir.functions:
        if f.storage != "exported" or f.variadic:
            continue
        params = [(p.type.spelling, p.name or f"arg{i}") for i, p in enumerate(f.params)]
        out.append(SymbolModel(f.name, f.result.spelling, params, spec.optional.get(f.name)))
    return out


def coverage(ir: IR, spec: Spec, methods: List[MethodModel]) -> List[Tuple[str, str, str]]:
    bound: Dict[str, List[str]] = {}
    for m in methods:
        label = f"{m.owner}.{m.name}" if m.owner else m.name
        for v in m.verbs:
            bound.setdefault(v, []).append(label)
    for h in spec.handles:
        destroy = h.node.get("destroy")
        if destroy:
            bound.setdefault(destroy, []).append(f"{h.name}.close")
        rel = h.node.get("release")
        if isinstance(rel, Node) and rel.get("verb"):
            bound.setdefault(rel["verb"], []).append(f"{h.name}.close (when {rel.get('when')})")
        base = h.node.get("base")
        if isinstance(base, Node) and base.get("upcast"):
            bound.setdefault(base["upcast"], []).append(f"{h.name} (is a {base.get('class')})")
    rows = []
    for f in public_functions(ir):
        if f.name in bound:
            rows.append((f.name, "bound", ", ".join(sorted(set(bound[f.name])))))
        elif f.name in spec.exclusions:
            rows.append((f.name, "excluded", spec.exclusions[f.name]))
        else:
            rows.append((f.name, "unhandled", ""))
    return sorted(rows)


def build(ir: IR, spec: Spec) -> Model:
    b = Builder(ir, spec)
    enums = b.enums()
    structs = b.structs()
    handles = b.handles()
    functions = [b.method(m) for m in spec.functions if not b.absent(m)]
    all_methods = [m for h in handles for m in h.methods] + functions
    return Model(ir, spec, enums, structs, handles, functions, symbols(ir, spec),
                 coverage(ir, spec, all_methods))
