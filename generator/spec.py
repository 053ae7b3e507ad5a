"""Load and validate the YAML spec (spec/*.yaml).

The spec is the table of what Python sees: handle classes, struct classes,
enums, verbs bound as methods, optional symbols and exclusions.  It is
read once: the YAML mappings (Node) live only while load() runs (and
generator/rules.py lowers the rule keys in them); what load() returns holds
typed objects alone (Struct, EnumSpec here; Handle, Method, ParamSpec,
DocEntry in generator/spec_types.py).  Every value keeps the file and line
it came from, so that an error (here or in the model stage) names them:
``spec/qp.yaml:12: QP.modify: unknown key 'parms'``.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from typing import AbstractSet, Any, Dict, List, Optional, Tuple

import yaml

from . import gil, rules
from .spec_types import (DocEntry, Handle, Location, Method, ReturnsNew, SpecError, doc_entry,
                         handle_from, method_from)

__all__ = ["DocEntry", "Handle", "Location", "Method", "ReturnsNew", "SpecError"]   # the typed spec objects


class Node(Dict[str, Any]):
    """A YAML mapping that remembers where it (and each key) came from."""

    file: str = "?"
    line: int = 0
    key_lines: Dict[str, int]

    def where(self, key: Optional[str] = None) -> str:
        line = self.key_lines.get(key, self.line) if key else self.line
        return f"{self.file}:{line}"


# libyaml's parser when PyYAML has it (about 9x faster, the same nodes and marks)
class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    name: str


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> Node:
    result = Node()
    result.file = loader.name
    result.line = node.start_mark.line + 1
    result.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in result:
            raise SpecError(f"{loader.name}:{key_node.start_mark.line + 1}: "
                            f"duplicate key {key!r}")
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = key_node.start_mark.line + 1
    return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                        _construct_mapping)


def load_file(path: str, display: str) -> Node:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    loader = _Loader(text)
    loader.name = display
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        raise SpecError(f"{display}: {exc}") from None
    finally:
        loader.dispose()
    if data is None:
        data = Node()
        data.file, data.line, data.key_lines = display, 1, {}
    if not isinstance(data, Node):
        raise SpecError(f"{display}:1: the top level must be a mapping")
    return data


# --- the validated spec ------------------------------------------------------

TOP_KEYS = {"handles", "structs", "enums", "functions", "symbols", "exclusions",
            "methods", "docs",
            "gil",
            "enum_fields"}   # integer fields that hold an enum or flag set (generator/enum_fields.py)    # spec/gil.yaml: the GIL rule of each verb, by kind (generator/gil.py)
HANDLE_KEYS = {"ctype", "doc", "destroy", "parents", "attributes", "methods",
               "slots", "state", "before_destroy", "registered",
               "base", "before_dealloc", "release", "hand_attributes", "since",
               # generator/handle_rules.py
               "detach", "before_close", "close_doc", "no_new", "repr", "docs",
               "subclassed",
               "entries",    # provider entry points of the short ways (generator/entries.py)
               "cq_locks"}   # verbs that take a CQ's provider lock (generator/cq_locks.py)
STRUCT_KEYS = {"ctype", "doc", "fields", "writable", "since"}
ENUM_KEYS = {"c", "match", "kind", "prefix", "since", "members"}
#: The keys of a method, by its kind (one declaration each: a new key is
#: added to the set of the kind that reads it).
VERB_METHOD_KEYS = {"verb", "params", "errors", "returns", "gil", "checks", "doc",
                    "requires", "signature", "verbs", "prologue", "epilogue", "guard",
                    "since",
                    "explain",  # errno -> explainer(arg, ...) calls after a failure (generator/methods.py)
                    } | rules.METHOD_KEYS   # declarative rules, expanded by generator/rules.py
HAND_METHOD_KEYS = {"hand", "doc", "verbs", "keywords", "since",
                    "stub",    # the typed signature (generator/stubs.py)
                    "impl",    # a generated parser of the arguments (generator/impl.py)
                    "short_way",   # a hand function tried before the call is entered (generator/impl.py)
                    "gil", "holds"}    # its GIL rule and what it holds (generator/hand_gil.py)
PYTHON_METHOD_KEYS = {"python",     # "module:function" of a Python-layer method
                      "stub", "doc"}  # (the signature: the function's def, generator/pyimpl.py)
METHOD_KEYS = VERB_METHOD_KEYS | HAND_METHOD_KEYS | PYTHON_METHOD_KEYS
SYMBOLS_KEYS = {"optional", "versions"}
BASE_KEYS = {"class", "upcast"}    # base: {class, upcast} (a base: Class is a name)
DOCS_KEYS = {"arguments", "methods", "fields", "enums"}
DOC_ENTRY_KEYS = {"summary", "args", "returns", "raises"}
ERROR_CONVENTIONS = {"null", "errno", "negative", "code", "none"}
ENUM_KINDS = {"IntEnum", "IntFlag"}


@dataclass
class _RawMethod:
    """A method as read, before generator/rules.py lowers its rule keys
    (in place); load() then makes the typed Method of it."""
    name: str
    owner: str                 # class name, or "" for module functions
    node: Node
    hand: Optional[str] = None
    python: Optional[str] = None

    @property
    def verb(self) -> Optional[str]:
        return self.node.get("verb")

    def where(self, key: Optional[str] = None) -> str:
        return self.node.where(key)

    def typed(self) -> Method:
        return method_from(self.name, self.owner, self.node, self.hand, self.python)


@dataclass
class _RawHandle:
    name: str
    node: Node
    methods: List[_RawMethod]

    def typed(self) -> Handle:
        return handle_from(self.name, self.node, [m.typed() for m in self.methods])


@dataclass
class _RawSet:
    """What generator/rules.py reads while it lowers the rule keys: the
    handle classes and functions as read, the typed structs and enums."""
    handles: List[_RawHandle]
    functions: List[_RawMethod]
    structs: List["Struct"]
    enums: List["EnumSpec"]

    def handle(self, name: str) -> Optional[_RawHandle]:
        return next((h for h in self.handles if h.name == name), None)

    def struct(self, name: str) -> Optional["Struct"]:
        return next((s for s in self.structs if s.name == name), None)

    def all_methods(self) -> List[_RawMethod]:
        return [m for h in self.handles for m in h.methods] + self.functions


@dataclass(frozen=True)
class FieldSpec:
    """A field of a struct class as the spec writes it (`name: C path`, or
    {path, convert, default, members, none_ok, since}), read once at load;
    `keys`: the keys it was written with (its converter refuses those it
    does not take, generator/builder.py)."""
    name: str
    path: str
    convert: Optional[str]
    has_default: bool
    default: Any              # as written (None: the string "None")
    members: Optional[str]    # the IntEnum whose members alone it takes
    none_ok: bool
    since: Optional[str]
    keys: Tuple[str, ...]
    location: "Location"

    def where(self, key: Optional[str] = None) -> str:
        return self.location.where(key)


@dataclass
class Struct:
    """A struct class (spec `structs:`), read once at load: its C type, its
    fields (None: `fields: all`, every member whose type converts)."""
    name: str
    ctype: str
    doc: str
    writable: bool
    since: Optional[str]
    fields: Optional[List[FieldSpec]]
    location: "Location"

    def where(self, key: Optional[str] = None) -> str:
        return self.location.where(key)

    def field(self, name: str) -> Optional[FieldSpec]:
        return next((f for f in self.fields or [] if f.name == name), None)


@dataclass
class EnumSpec:
    """An enum class (spec `enums:`), read once at load: the C enum it
    mirrors (`c`) or the pattern its C constants match (`match`), the
    prefix its members drop, the constants the spec adds (older headers
    lack them) and the release that added it, if newer than the floor."""
    name: str
    kind: str                     # IntEnum | IntFlag
    prefix: str
    c: Optional[str]
    match: Optional[str]
    members: Dict[str, int]
    since: Optional[str]
    location: Location

    def where(self, key: Optional[str] = None) -> str:
        return self.location.where(key)


@dataclass
class SpecFiles:
    """What a generated file's header names of its spec: the files read
    and their digest (every spec set has them: verbs', rdma_cm's, the
    data-path types')."""
    files: List[str]
    sha256: str


@dataclass
class Spec(SpecFiles):
    handles: List[Handle] = field(default_factory=list)
    structs: List[Struct] = field(default_factory=list)
    enums: List[EnumSpec] = field(default_factory=list)
    # "struct ibv_wc.wc_flags" -> the class of an integer field holding one
    enum_fields: Dict[str, str] = field(default_factory=dict)
    enum_field_where: Dict[str, str] = field(default_factory=dict)   # its file:line
    functions: List[Method] = field(default_factory=list)
    optional: Dict[str, str] = field(default_factory=dict)     # symbol -> "36 (IBVERBS_1.14)"
    # symbols.versions: ELF symbol version -> the rdma-core release that added it
    symbol_versions: Dict[str, int] = field(default_factory=dict)
    optional_where: Dict[str, str] = field(default_factory=dict)
    exclusions: Dict[str, str] = field(default_factory=dict)   # function -> reason
    # spec/docs.yaml: docstring text of generated methods (generator/docstrings.py)
    doc_arguments: Dict[str, str] = field(default_factory=dict)  # argument name -> meaning
    doc_methods: Dict[str, DocEntry] = field(default_factory=dict)    # "Class.method" -> its text
    # Class -> {field or attribute: docstring}: struct fields, handle attributes
    doc_fields: Dict[str, Dict[str, str]] = field(default_factory=dict)
    # argument ("Class.argument" first) -> the enum or flag class it takes
    doc_enums: Dict[str, str] = field(default_factory=dict)
    exclusion_where: Dict[str, str] = field(default_factory=dict)
    # spec/gil.yaml: which verbs run with the GIL released (generator/gil.py)
    gil_kinds: List[gil.GilKind] = field(default_factory=list)

    def handle(self, name: str) -> Optional[Handle]:
        return next((h for h in self.handles if h.name == name), None)

    def struct(self, name: str) -> Optional[Struct]:
        return next((s for s in self.structs if s.name == name), None)

    def all_methods(self) -> List[Method]:
        return [m for h in self.handles for m in h.methods] + self.functions


def check_keys(node: Any, allowed: AbstractSet[str], what: str, where: str = "spec") -> None:
    """Refuse a key of *node* that is not in *allowed*, naming its file and
    line (*where* for a mapping that is no loaded Node: one a rule made)."""
    if not isinstance(node, dict):
        raise SpecError(f"{where}: {what}: expected a mapping, got {node!r}")
    for key in node:
        if key not in allowed:
            at = node.where(key) if isinstance(node, Node) else where
            raise SpecError(f"{at}: {what}: unknown key {key!r} "
                            f"(expected one of: {', '.join(sorted(allowed))})")


def _check_keys(node: Any, allowed: AbstractSet[str], what: str) -> None:
    if not isinstance(node, Node):
        raise SpecError(f"{what}: expected a mapping, got {node!r}")
    check_keys(node, allowed, what)


def _method(name: str, owner: str, node: Any, where: str) -> _RawMethod:
    label = f"{owner}.{name}" if owner else name
    if not isinstance(node, Node):
        raise SpecError(f"{where}: {label}: expected a mapping")
    if "hand" in node:
        _check_keys(node, HAND_METHOD_KEYS, f"{label} (a hand-written method)")
        return _RawMethod(name, owner, node, hand=str(node["hand"]))
    if "python" in node:
        _check_keys(node, PYTHON_METHOD_KEYS, f"{label} (a Python-layer method)")
        target = str(node["python"])
        if not re.fullmatch(r"[\w.]+:\w+", target):
            raise SpecError(f"{node.where('python')}: {label}: 'python' must be "
                            f"'module:function', got {target!r}")
        for key in ("stub", "doc"):
            if key not in node:
                raise SpecError(f"{node.where()}: {label}: a Python-layer method needs {key!r}")
        return _RawMethod(name, owner, node, python=target)
    _check_keys(node, VERB_METHOD_KEYS, label)
    if "verb" not in node:
        raise SpecError(f"{node.where()}: {label}: needs 'verb' (or 'hand')")
    if "params" not in node:
        raise SpecError(f"{node.where()}: {label}: needs 'params'")
    errors = node.get("errors")
    if errors not in ERROR_CONVENTIONS:
        raise SpecError(f"{node.where('errors') if 'errors' in node else node.where()}: "
                        f"{label}: 'errors' must be one of "
                        f"{', '.join(sorted(ERROR_CONVENTIONS))}, got {errors!r}")
    _check_param_keys(node, label)
    if node.get("gil", "hold") not in ("hold", "release"):
        raise SpecError(f"{node.where('gil')}: {label}: 'gil' must be hold or release")
    return _RawMethod(name, owner, node)


def _handle(cls: str, node: Any) -> _RawHandle:
    _check_keys(node, HANDLE_KEYS, cls)
    if "ctype" not in node:
        raise SpecError(f"{node.where()}: {cls}: needs 'ctype'")
    if isinstance(node.get("base"), Node):
        _check_keys(node["base"], BASE_KEYS, f"{cls}: base")
        if set(node["base"]) != BASE_KEYS:
            raise SpecError(f"{node.where('base')}: {cls}: base needs exactly "
                            "'class' and 'upcast'")
    methods = [_method(m, cls, mnode, node.where("methods"))
               for m, mnode in (node.get("methods") or {}).items()]
    return _RawHandle(cls, node, methods)


def _param_keys() -> AbstractSet[str]:
    """Every key a verb parameter's (or a `struct:` member's) entry may carry
    before generator/rules.py lowers it: the converters' and the rules'."""
    # the converters import nothing of the spec: no circle
    from .converters import PARAMS
    from .converters.composite import MEMBER_KEYS
    return (frozenset().union(*(c.keys for c in PARAMS.by_kind.values())) | MEMBER_KEYS
            | rules.PARAM_KEYS)


def _check_field_keys(cls: str, fields: Any) -> None:
    """Refuse an unknown key of a struct class's field before the rules read
    the fields (`same_context: attr.pd`); generator/builder.py checks each
    against its converter's own keys."""
    from .converters import FIELDS
    allowed = frozenset().union(*(c.keys for c in FIELDS.by_kind.values()))
    for name, fspec in (fields.items() if isinstance(fields, Node) else ()):
        if isinstance(fspec, Node):
            _check_keys(fspec, allowed, f"{cls}.{name}")


def _check_param_keys(node: Node, label: str) -> None:
    """Refuse an unknown key of a parameter or `struct:` member before the
    rules read the arguments (a renamed `arg:` is named as such, not as the
    argument a check no longer finds); generator/methods.py checks each
    against its converter's own keys."""
    params = node.get("params")
    if not isinstance(params, Node):
        return
    allowed = _param_keys()
    for cname, pspec in params.items():
        if not isinstance(pspec, Node):
            continue
        _check_keys(pspec, allowed, f"{label}: parameter {cname}")
        members = pspec.get("struct")
        for path, fspec in (members.items() if isinstance(members, Node) else ()):
            if isinstance(fspec, Node):
                _check_keys(fspec, allowed, f"{label}: {cname}.{path}")


def _load_symbols(spec: Spec, symbols: Node) -> None:
    """symbols.versions (IBVERBS_1.N -> release) and symbols.optional
    (symbol -> its version), resolved once every file is read."""
    for version, release in (symbols.get("versions") or {}).items():
        if not isinstance(release, int) or isinstance(release, bool):
            raise SpecError(f"{symbols['versions'].where(version)}: symbols.versions: "
                            f"{version} must map to a release number, got {release!r}")
        spec.symbol_versions[version] = release
    for sym, version in (symbols.get("optional") or {}).items():
        spec.optional[sym] = version        # resolved by load(), with every file's versions
        spec.optional_where[sym] = symbols["optional"].where(sym)


def _release_of(sym: str, version: Any, versions: Dict[str, int], where: str) -> str:
    """The release text of an optional symbol ("36 (IBVERBS_1.14)"): its ELF
    symbol version, dated by symbols.versions; a private symbol (whose
    version IBVERBS_PRIVATE_<n> dates nothing) as {private: release}."""
    if isinstance(version, dict) and set(version) == {"private"} \
            and isinstance(version["private"], int):
        return f"{version['private']} (IBVERBS_PRIVATE)"
    if not isinstance(version, str) or version not in versions:
        raise SpecError(f"{where}: symbols.optional: {sym}: {version!r} is not a symbol "
                        f"version of symbols.versions ({', '.join(versions)}) nor "
                        "{private: RELEASE}")
    return f"{versions[version]} ({version})"


def load(spec_dir: str) -> Spec:
    """Read every spec/*.yaml (sorted) into one validated Spec."""
    names = sorted(n for n in os.listdir(spec_dir) if n.endswith(".yaml"))
    if not names:
        raise SpecError(f"{spec_dir}: no *.yaml files")
    digest = hashlib.sha256()
    # spec/x.yaml, or spec/rdmacm/x.yaml for a set of its own
    sub = os.path.basename(os.path.normpath(spec_dir))
    prefix = "spec" if sub == "spec" else f"spec/{sub}"
    spec = Spec(files=[], sha256="")
    raw = _RawSet([], [], spec.structs, spec.enums)
    # `methods: {Class: {...}}` adds methods to a class of another file
    # (Context.create_cq_ex lives in spec/cqex.yaml with the rest of CQEx).
    extra_methods: List[Tuple[str, _RawMethod, str]] = []
    for name in names:
        path = os.path.join(spec_dir, name)
        display = f"{prefix}/{name}"
        with open(path, "rb") as f:
            digest.update(name.encode() + b"\0" + f.read() + b"\0")
        spec.files.append(display)
        data = load_file(path, display)
        _check_keys(data, TOP_KEYS, display)
        for cls, node in (data.get("handles") or {}).items():
            raw.handles.append(_handle(cls, node))
        for cls, node in (data.get("structs") or {}).items():
            _check_keys(node, STRUCT_KEYS, cls)
            if "ctype" not in node or "fields" not in node:
                raise SpecError(f"{node.where()}: {cls}: needs 'ctype' and 'fields'")
            _check_field_keys(cls, node["fields"])
            spec.structs.append(_struct(cls, node))
        for cls, node in (data.get("enums") or {}).items():
            spec.enums.append(_enum(cls, node))
        for key, cls in (data.get("enum_fields") or {}).items():
            spec.enum_fields[str(key)] = str(cls)
            spec.enum_field_where[str(key)] = data["enum_fields"].where(key)
        for cls, mnodes in (data.get("methods") or {}).items():
            if not isinstance(mnodes, Node):
                raise SpecError(f"{data['methods'].where(cls)}: methods of {cls}: expected a mapping")
            for m, mnode in mnodes.items():
                extra_methods.append((cls, _method(m, cls, mnode, mnodes.where(m)),
                                      data["methods"].where(cls)))
        functions = data.get("functions") or Node()
        for fname, node in functions.items():
            raw.functions.append(_method(fname, "", node, functions.where(fname)))
        symbols = data.get("symbols") or Node()
        _check_keys(symbols, SYMBOLS_KEYS, f"{display}: symbols")
        _load_symbols(spec, symbols)
        _load_docs(spec, data.get("docs") or Node(), display)
        _load_gil(spec, data)
        exclusions = data.get("exclusions") or Node()
        for fname, reason in exclusions.items():
            if not isinstance(reason, str) or len(reason.strip()) < 8:
                raise SpecError(f"{exclusions.where(fname)}: exclusion of {fname} "
                                f"needs a real reason")
            spec.exclusions[fname] = reason.strip()
            spec.exclusion_where[fname] = exclusions.where(fname)
    for sym, version in list(spec.optional.items()):
        spec.optional[sym] = _release_of(sym, version, spec.symbol_versions,
                                         spec.optional_where[sym])
    for cls, method, where in extra_methods:
        handle = raw.handle(cls)
        if handle is None:
            raise SpecError(f"{where}: methods of {cls}: no handle class {cls}")
        if any(m.name == method.name for m in handle.methods):
            raise SpecError(f"{method.where()}: {cls}.{method.name} is already defined")
        handle.methods.append(method)
    _check_unique(raw)
    try:
        rules.expand(raw)   # rule keys -> the checks/values/guards the model reads
    except rules.RuleError as exc:
        raise SpecError(str(exc)) from None
    # read once: the later stages see the typed objects alone
    spec.handles = [h.typed() for h in raw.handles]
    spec.functions = [m.typed() for m in raw.functions]
    spec.sha256 = digest.hexdigest()
    return spec


def _load_gil(spec: Spec, data: Node) -> None:
    """A file's `gil:` (spec/gil.yaml): which verbs release the GIL."""
    if "gil" in data:
        try:
            spec.gil_kinds += gil.load(data["gil"])
        except gil.GilError as exc:
            raise SpecError(str(exc)) from None


#: The exceptions a docs.yaml ``raises:`` may name besides an errno
#: (VerbsError's): the ones the extension raises itself.
DOC_EXCEPTIONS = {"TypeError", "ValueError", "RuntimeError", "LookupError", "TimeoutError"}


def _check_raises(raises: Any, label: str) -> None:
    """``raises:`` maps an errno name (EINVAL) or an exception class to a text."""
    if raises is None:
        return
    if not isinstance(raises, Node):
        raise SpecError(f"docs of {label}: raises: a mapping {{ERRNO: when}}")
    import errno

    for name in raises:
        if str(name) not in DOC_EXCEPTIONS and not (str(name).isupper()
                                                    and hasattr(errno, str(name))):
            raise SpecError(f"{raises.where(name)}: docs of {label}: raises: {name!r} is "
                            f"neither an errno name nor one of {sorted(DOC_EXCEPTIONS)}")


def _load_docs(spec: Spec, docs: Node, display: str) -> None:
    """A file's `docs:` (spec/docs.yaml): argument glossary, method texts,
    field and attribute texts."""
    _check_keys(docs, DOCS_KEYS, f"{display}: docs")
    for arg, cls in (docs.get("enums") or {}).items():
        spec.doc_enums[str(arg)] = str(cls)
    for cls, entries in (docs.get("fields") or {}).items():
        if not isinstance(entries, Node):
            raise SpecError(f"{docs['fields'].where(cls)}: docs of {cls}'s fields: "
                            "a mapping {field: text}")
        spec.doc_fields.setdefault(str(cls), {}).update(
            {str(name): " ".join(str(text).split()) for name, text in entries.items()})
    for arg, text in (docs.get("arguments") or {}).items():
        spec.doc_arguments[str(arg)] = str(text).strip()
    for label, entry in (docs.get("methods") or {}).items():
        if isinstance(entry, Node):
            _check_keys(entry, DOC_ENTRY_KEYS, f"docs of {label}")
            _check_raises(entry.get("raises"), str(label))
        elif not isinstance(entry, str):
            raise SpecError(f"{docs['methods'].where(label)}: docs of {label}: "
                            "a summary or {summary:, args:}")
        spec.doc_methods[str(label)] = doc_entry(entry)


def _struct(cls: str, node: Node) -> Struct:
    fields = node["fields"]
    if fields != "all" and not isinstance(fields, Node):
        raise SpecError(f"{node.where('fields')}: {cls}: fields must be 'all' or a mapping")
    return Struct(cls, str(node["ctype"]), str(node.get("doc", "")), bool(node.get("writable", False)),
                  None if "since" not in node else str(node["since"]),
                  None if fields == "all" else [_field(cls, name, fspec, fields.where(name))
                                                for name, fspec in fields.items()],
                  Location.of(node))


def _field(cls: str, name: str, fspec: Any, where: str) -> FieldSpec:
    file, _, line = where.rpartition(":")
    if isinstance(fspec, str):
        return FieldSpec(name, fspec, None, False, None, None, False, None, ("path",),
                         Location(file, int(line), {}))
    if not isinstance(fspec, Node):
        raise SpecError(f"{where}: {cls}.{name}: expected a mapping, got {fspec!r}")
    return FieldSpec(name, str(fspec.get("path", name)),
                     None if fspec.get("convert") is None else str(fspec["convert"]),
                     "default" in fspec, fspec.get("default"),
                     None if fspec.get("members") is None else str(fspec["members"]),
                     bool(fspec.get("none_ok")), None if "since" not in fspec else str(fspec["since"]),
                     tuple(fspec), Location.of(fspec))


def _enum(cls: str, node: Node) -> EnumSpec:
    _check_keys(node, ENUM_KEYS, cls)
    if ("c" in node) == ("match" in node):
        raise SpecError(f"{node.where()}: {cls}: needs exactly one of 'c', 'match'")
    if node.get("kind") not in ENUM_KINDS:
        raise SpecError(f"{node.where('kind') if 'kind' in node else node.where()}: "
                        f"{cls}: 'kind' must be IntEnum or IntFlag")
    if "prefix" not in node:
        raise SpecError(f"{node.where()}: {cls}: needs 'prefix'")
    members = node.get("members") or Node()
    if not isinstance(members, dict):
        raise SpecError(f"{node.where('members')}: {cls}: members: C constant -> value")
    values: Dict[str, int] = {}
    for name, value in members.items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise SpecError(f"{node.where('members')}: {cls}: {name} needs an integer value")
        values[str(name)] = value
    return EnumSpec(cls, str(node["kind"]), str(node["prefix"]),
                    None if "c" not in node else str(node["c"]),
                    None if "match" not in node else str(node["match"]), values,
                    None if "since" not in node else str(node["since"]), Location.of(node))


def _check_unique(spec: _RawSet) -> None:
    seen: Dict[str, str] = {}
    items: List[Tuple[str, Any]] = [("handle", h) for h in spec.handles]
    items += [("struct", s) for s in spec.structs] + [("enum", e) for e in spec.enums]
    for kind, item in items:
        where = item.node.where() if isinstance(item, _RawHandle) else item.where()
        if item.name in seen:
            raise SpecError(f"{where}: {kind} {item.name} already defined at "
                            f"{seen[item.name]}")
        seen[item.name] = where
