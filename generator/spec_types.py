"""The typed spec objects: handle classes, methods and docs entries as the
loader (generator/spec.py) hands them on, read once from the YAML nodes
once every rule key is lowered (generator/rules.py).  The later stages
(builder, methods, impl, docstrings, audit...) read only these: no YAML
mapping crosses the load.  Each object keeps where it and each of its
keys were written (Location), so that an error of a later stage still
names the spec file and line.

A verb parameter's entry (`params:`, an `impl:` argument, a `struct:`
member) is a ParamSpec: the keys its converter takes (generator/converters/
declares them per kind) as attributes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union


class SpecError(Exception):
    """A mistake in the spec, with its location."""


@dataclass(frozen=True)
class Location:
    """Where a spec entry and each of its keys are (file:line), for errors."""
    file: str
    line: int
    key_lines: Dict[str, int]

    @classmethod
    def of(cls, node: Any) -> "Location":
        return cls(getattr(node, "file", "spec"), getattr(node, "line", 0),
                   dict(getattr(node, "key_lines", {})))

    @classmethod
    def at(cls, where: str) -> "Location":
        """The location of a "file:line" text."""
        file, _, line = where.rpartition(":")
        return cls(file, int(line), {}) if line.isdigit() else cls(where, 0, {})

    def where(self, key: Optional[str] = None) -> str:
        line = self.key_lines.get(key, self.line) if key else self.line
        if not self.line and not (key and key in self.key_lines):
            return self.file
        return f"{self.file}:{line}"


def _where_of(mapping: Any, key: Any, fallback: str) -> str:
    """Where *key* of a loaded mapping was written (a mapping a rule made
    has no lines: fallback)."""
    return str(mapping.where(key)) if hasattr(mapping, "where") else fallback


# --- verb parameters ------------------------------------------------------------

#: every key a parameter entry may still hold once the rules are lowered
PARAM_FIELDS = ("arg", "convert", "out", "value", "default", "min", "max", "hint",
                "message", "mask", "count", "size", "kwargs", "unknown", "positional",
                "struct", "c_default", "ctype")


@dataclass
class ParamSpec:
    """One verb parameter (or `struct:` member, or `impl:` argument) as the
    spec writes it: `keys` are those it was written with (its converter
    refuses any it does not take); `has(key)` tells a key written as null
    from one left out."""
    name: str
    location: Location
    keys: Tuple[str, ...] = ()
    arg: Optional[str] = None
    convert: Optional[str] = None
    out: Optional[str] = None
    value: Any = None
    default: Any = None
    min: Any = None
    max: Any = None
    hint: Any = None
    message: Any = None
    mask: Any = None
    count: Any = None
    size: Any = None
    kwargs: Optional[str] = None
    unknown: Optional[str] = None
    positional: Optional[List[str]] = None
    # `struct:` members, by C path, in order (None: no `struct:`)
    struct: Optional[Dict[str, "ParamEntry"]] = None
    c_default: Any = None
    ctype: Optional[str] = None
    struct_where: Dict[str, str] = field(default_factory=dict)   # member -> its file:line

    def has(self, key: str) -> bool:
        return key in self.keys

    def member_where(self, path: str) -> str:
        return self.struct_where.get(path, self.where("struct"))

    def where(self, key: Optional[str] = None) -> str:
        return self.location.where(key)

    def with_values(self, **values: Any) -> "ParamSpec":
        """A copy with *values* set (and counted as written), the rest kept."""
        out = ParamSpec(**{f: getattr(self, f)
                           for f in ("name", "location", "struct_where", *PARAM_FIELDS)})
        for key, value in values.items():
            setattr(out, key, value)
        out.keys = self.keys + tuple(k for k in values if k not in self.keys)
        return out

    def without(self, key: str) -> "ParamSpec":
        out = self.with_values()
        setattr(out, key, None)
        out.keys = tuple(k for k in self.keys if k != key)
        return out


#: a parameter entry: a word (self, scratch, out, mask: WORD_KINDS), an
#: argument's name (a plain int) or a mapping of converter keys
ParamEntry = Union[str, ParamSpec]


def param_entry(name: str, node: Any, where: str) -> ParamEntry:
    """A parameter entry read from its loaded node (a word, or a mapping)."""
    if isinstance(node, str) or not isinstance(node, dict):
        return node
    location = Location.of(node) if hasattr(node, "key_lines") else Location.at(where)
    # a key no converter takes stays in `keys` alone: the converter's key
    # check (generator/methods.py) names it
    p = ParamSpec(name, location, tuple(node))
    for key, value in node.items():
        if key in PARAM_FIELDS:
            setattr(p, key, value)
    if isinstance(node.get("struct"), dict):
        members = node["struct"]
        p.struct_where = {str(path): _where_of(members, path, location.where("struct"))
                          for path in members}
        p.struct = {str(path): param_entry(str(path), fspec, p.struct_where[str(path)])
                    for path, fspec in members.items()}
    if p.positional is not None:
        p.positional = list(p.positional)
    return p


# --- methods ----------------------------------------------------------------------


@dataclass
class CheckSpec:
    """A precondition of a method or attribute (spec `checks:`, lowered by
    generator/rules.py): what must hold (a generator/rule_data.py value),
    the exception and its message."""
    expr: Any
    error: str
    message: str


@dataclass
class ReturnsNew:
    """`returns: {new: Class, parents: {parent: source}}`."""
    cls: str
    parents: Dict[str, str]


@dataclass
class Method:
    """A method or module function of the spec, read at load: a verb
    wrapper (`verb:`), a hand-written method (`hand:`) or a Python-layer
    one (`python:`)."""
    name: str
    owner: str                 # class name, or "" for module functions
    location: Location
    keys: Tuple[str, ...] = ()
    hand: Optional[str] = None  # signature of a hand-written method
    # "ibverbs.module:function" of a method written in Python: the method
    # table calls it (imported on first call) with the object first
    python: Optional[str] = None
    verb: Optional[str] = None
    # C parameter -> its entry, in the spec's order (None: no `params:`)
    params: Optional[Dict[str, ParamEntry]] = None
    param_where: Dict[str, str] = field(default_factory=dict)
    errors: str = "none"
    returns: Union[None, str, ReturnsNew] = None
    gil: Optional[str] = None
    checks: List[CheckSpec] = field(default_factory=list)
    doc: Any = None
    requires: List[str] = field(default_factory=list)
    signature: Optional[str] = None
    verbs: List[str] = field(default_factory=list)
    guard: Any = None
    prologue: Any = None
    epilogue: Any = None
    since: Any = None
    explain: Optional[Dict[str, Any]] = None    # errno or "any" -> ExplainCall list
    keywords: bool = False
    stub: Any = None                 # "(self, ...) -> T", or a list of overloads
    # `impl:`: argument -> its converter entry (None: no `impl:`)
    impl: Optional[Dict[str, Optional[ParamSpec]]] = None
    impl_where: Dict[str, str] = field(default_factory=dict)
    short_way: Any = False
    holds: Optional[Any] = None      # None: no `holds:`

    def has(self, key: str) -> bool:
        return key in self.keys

    def where(self, key: Optional[str] = None) -> str:
        return self.location.where(key)


def method_from(name: str, owner: str, node: Any, hand: Optional[str],
                python: Optional[str]) -> Method:
    """The typed method of a validated, rule-lowered spec node."""
    location = Location.of(node)
    m = Method(name, owner, location, tuple(node), hand=hand, python=python)
    label = f"{owner}.{name}" if owner else name
    m.verb = node.get("verb")
    if node.get("explain") is not None:     # lowered by generator/rules.py
        m.explain = {str(err): list(calls) for err, calls in node["explain"].items()}
    if "params" in node:
        params = node["params"]
        if params is not None and not isinstance(params, dict):
            raise SpecError(f"{location.where('params')}: {label}: params: a mapping")
        m.params = {}
        for cname, pspec in (params or {}).items():
            at = _where_of(params, cname, location.where("params"))
            m.param_where[str(cname)] = at
            m.params[str(cname)] = param_entry(str(cname), pspec, at)
    m.errors = str(node.get("errors", "none"))
    m.returns = _returns(node.get("returns"), label, location)
    m.gil = node.get("gil")
    m.checks = [CheckSpec(chk["expr"], chk.get("error", "ValueError"), chk["message"])
                for chk in node.get("checks", []) or []]
    m.requires = list(node.get("requires", []) or [])
    m.verbs = list(node.get("verbs", []) or [])
    for key in ("doc", "signature", "guard", "prologue", "epilogue", "since", "stub", "holds"):
        setattr(m, key, node.get(key))
    m.keywords = bool(node.get("keywords"))
    m.short_way = node.get("short_way", False)
    if "impl" in node:
        m.impl = _impl_args(node["impl"], label, location, m.impl_where)
    return m


#: the keys of `returns: {new: Class, parents: {...}}` (`set:` is
#: generator/rules.py's, gone by now)
NEW_RETURN_KEYS = ("new", "parents")


def _returns(ret: Any, label: str, location: Location) -> Union[None, str, ReturnsNew]:
    """`returns:` a word (result, out, none, bool, be32, str) or {new, parents}."""
    if not isinstance(ret, dict):
        return ret  # type: ignore[no-any-return]
    for key in ret:
        if key not in NEW_RETURN_KEYS:
            raise SpecError(f"{_where_of(ret, key, location.where('returns'))}: {label}: "
                            f"returns: unknown key {key!r} (expected one of: "
                            f"{', '.join(sorted(NEW_RETURN_KEYS))})")
    if "new" not in ret:
        raise SpecError(f"{location.where('returns')}: {label}: unknown returns {ret!r}")
    return ReturnsNew(str(ret["new"]), {str(k): v for k, v in (ret.get("parents") or {}).items()})


def _impl_args(node: Any, label: str, location: Location,
               wheres: Dict[str, str]) -> Dict[str, Optional[ParamSpec]]:
    """`impl: {argument: {converter keys}}` (a null entry: no keys); each
    argument's file:line into *wheres*."""
    out: Dict[str, Optional[ParamSpec]] = {}
    for name, entry in (node or {}).items():
        at = _where_of(node, name, location.where("impl"))
        wheres[str(name)] = at
        if entry is None:
            out[str(name)] = None
            continue
        if not isinstance(entry, dict):
            raise SpecError(f"{location.where('impl')}: {label}: impl: {name}: a mapping of "
                            "converter keys")
        spec = param_entry(str(name), entry, at)
        assert isinstance(spec, ParamSpec)
        out[str(name)] = spec
    return out


# --- handle classes ------------------------------------------------------------------


@dataclass
class SlotSpec:
    """A Python object a handle keeps (`slots:`), or a hand-written
    attribute (`hand_attributes:`)."""
    name: str
    writable: bool
    doc: str
    stub: Optional[str]
    clear_on_close: bool
    keepalive: Optional[str]
    keys: Tuple[str, ...]
    at: str
    location: Location

    def where(self, key: Optional[str] = None) -> str:
        """Where a key of the entry is (the entry's own line for no key)."""
        return self.location.where(key) if key else self.at


@dataclass
class ParentSpec:
    name: str
    cls: str
    optional: bool
    at: str


@dataclass
class AttributeSpec:
    """A generated read-only attribute (`attributes:`): a member's path
    (the plain form), or a mapping ({path, convert, since} or {expr,
    checks, convert}, the rules lowered)."""
    name: str
    at: str
    plain: bool                     # written as the member's path alone
    keys: Tuple[str, ...]
    path: Optional[str] = None
    convert: Optional[str] = None
    since: Any = None
    expr: Any = None
    checks: Optional[List[CheckSpec]] = None
    location: Optional[Location] = None

    def has(self, key: str) -> bool:
        return key in self.keys

    @property
    def has_checks(self) -> bool:
        return self.checks is not None

    def where(self, key: Optional[str] = None) -> str:
        """Where a key of the entry is (the entry's own line for no key)."""
        return self.location.where(key) if key and self.location else self.at


@dataclass
class BaseSpec:
    """`base: Class` (the same verbs object) or `base: {class, upcast}`."""
    cls: str
    upcast: Optional[str]
    location: Location

    def where(self, key: Optional[str] = None) -> str:
        return self.location.where(key)


@dataclass
class ReleaseSpec:
    when: Any
    verb: Any
    location: Location

    def where(self, key: Optional[str] = None) -> str:
        return self.location.where(key)


@dataclass
class EntrySpec:
    """A provider entry point (`entries:`, generator/entries.py)."""
    name: str
    verb: Any
    path: Any
    keys: Tuple[str, ...]
    at: str
    mapping: bool
    location: Location

    def where(self, key: Optional[str] = None) -> str:
        """Where a key of the entry is (the entry's own line for no key)."""
        return self.location.where(key) if key else self.at


@dataclass
class CqLockSpec:
    """`cq_locks: {verb: {cqs, when}}` (generator/cq_locks.py)."""
    verb: str
    at: str
    cqs: Optional[List[str]]       # None: the entry is no mapping with 'cqs'
    when: Any
    written: str                   # a wrong entry as written, for the error ("": none)


@dataclass
class Handle:
    """A handle class of the spec, read at load."""
    name: str
    location: Location
    keys: Tuple[str, ...]
    ctype: str
    methods: List[Method] = field(default_factory=list)
    doc: str = ""
    destroy: Optional[str] = None
    parents: List[ParentSpec] = field(default_factory=list)
    attributes: List[AttributeSpec] = field(default_factory=list)
    slots: List[SlotSpec] = field(default_factory=list)
    state: List[Tuple[str, str]] = field(default_factory=list)
    before_destroy: Optional[str] = None
    registered: bool = False
    base: Optional[BaseSpec] = None
    before_dealloc: Optional[str] = None
    release: Optional[ReleaseSpec] = None
    release_written: Any = None       # `release:` that is no {when, verb}
    hand_attributes: List[SlotSpec] = field(default_factory=list)
    since: Any = None
    # generator/handle_rules.py
    detach: Optional[str] = None
    before_close: Optional[str] = None
    close_doc: Optional[str] = None
    no_new: Optional[str] = None
    repr: Optional[str] = None
    docs: List[Tuple[str, str, str]] = field(default_factory=list)   # (getter, text, at)
    subclassed: bool = False
    entries: List[EntrySpec] = field(default_factory=list)
    cq_locks: Optional[List[CqLockSpec]] = None

    def has(self, key: str) -> bool:
        return key in self.keys

    def where(self, key: Optional[str] = None) -> str:
        return self.location.where(key)


def _slots(node: Any, label: str) -> List[SlotSpec]:
    out = []
    for sname, sspec in (node or {}).items():
        at = _where_of(node, sname, label)
        s = sspec if isinstance(sspec, dict) else {}
        stub = s.get("stub")
        out.append(SlotSpec(str(sname), bool(s.get("writable", False)), s.get("doc", ""),
                            str(stub) if stub else None, bool(s.get("clear_on_close")),
                            None if not s.get("keepalive") else str(s["keepalive"]),
                            tuple(sspec) if isinstance(sspec, dict) else ("<not a mapping>",),
                            at, Location.of(sspec) if hasattr(sspec, "key_lines")
                            else Location.at(at)))
        if not isinstance(sspec, dict):
            raise SpecError(f"{at}: {label}.{sname}: expected a mapping, got {sspec!r}")
    return out


def _attribute(name: str, aspec: Any, at: str) -> AttributeSpec:
    if not isinstance(aspec, dict):
        return AttributeSpec(name, at, True, (), path=aspec)
    checks = None
    if "checks" in aspec:
        checks = [CheckSpec(chk["expr"], chk.get("error", "ValueError"), chk["message"])
                  for chk in aspec["checks"]]
    return AttributeSpec(name, at, False, tuple(aspec), path=aspec.get("path"),
                         convert=aspec.get("convert"), since=aspec.get("since"),
                         expr=aspec.get("expr"), checks=checks,
                         location=Location.of(aspec) if hasattr(aspec, "key_lines") else None)


def handle_from(name: str, node: Any, methods: List[Method]) -> Handle:
    """The typed handle class of a validated, rule-lowered spec node."""
    location = Location.of(node)
    h = Handle(name, location, tuple(node), str(node["ctype"]), methods,
               doc=node.get("doc", ""), destroy=node.get("destroy"),
               before_destroy=node.get("before_destroy"),
               registered=bool(node.get("registered", False)),
               before_dealloc=node.get("before_dealloc"), since=node.get("since"),
               subclassed=bool(node.get("subclassed")))
    parents = node.get("parents") or {}
    h.parents = [ParentSpec(str(p), str(c).rstrip("?"), str(c).endswith("?"),
                            _where_of(parents, p, location.where("parents")))
                 for p, c in parents.items()]
    attributes = node.get("attributes") or {}
    h.attributes = [_attribute(str(a), aspec,
                               _where_of(attributes, a, location.where("attributes")))
                    for a, aspec in attributes.items()]
    h.slots = _slots(node.get("slots"), name)
    h.hand_attributes = _slots(node.get("hand_attributes"), name)
    h.state = [(str(s), str(c)) for s, c in (node.get("state") or {}).items()]
    base = node.get("base")
    if isinstance(base, dict):
        h.base = BaseSpec(str(base.get("class")), base.get("upcast"), Location.of(base))
    elif base is not None:
        h.base = BaseSpec(str(base), None, Location.at(location.where("base")))
    release = node.get("release")
    if isinstance(release, dict) and set(release) == {"when", "verb"}:
        h.release = ReleaseSpec(release["when"], release["verb"], Location.of(release))
    else:
        h.release_written = release
    for key in ("detach", "before_close", "close_doc", "no_new", "repr"):
        if key in node:
            setattr(h, key, str(node[key]))
    docs = node.get("docs") or {}
    h.docs = [(str(g), str(t), _where_of(docs, g, location.where("docs")))
              for g, t in docs.items()]
    entries = node.get("entries") or {}
    h.entries = [EntrySpec(str(e), espec.get("verb") if isinstance(espec, dict) else None,
                           espec.get("path") if isinstance(espec, dict) else None,
                           tuple(espec) if isinstance(espec, dict) else (),
                           _where_of(entries, e, location.where("entries")),
                           isinstance(espec, dict), Location.of(espec))
                 for e, espec in entries.items()]
    if node.get("cq_locks") is not None:
        locks = node["cq_locks"]
        h.cq_locks = [_cq_lock(str(v), entry, _where_of(locks, v, location.where("cq_locks")))
                      for v, entry in locks.items()]
    return h


_CQ_LOCK_KEYS = {"cqs", "when"}


def _cq_lock(verb: str, entry: Any, at: str) -> CqLockSpec:
    ok = isinstance(entry, dict) and set(entry) <= _CQ_LOCK_KEYS and "cqs" in entry
    return CqLockSpec(verb, at, [str(c) for c in entry["cqs"] or []] if ok else None,
                      entry.get("when") if ok else None, "" if ok else repr(entry))


# --- docs entries --------------------------------------------------------------------


@dataclass
class DocEntry:
    """A method's text in spec/docs.yaml (docs.methods): a summary, or
    {summary, args, returns, raises}."""
    summary: Optional[str] = None
    args: Dict[str, str] = field(default_factory=dict)
    returns: Optional[str] = None
    raises: Dict[str, str] = field(default_factory=dict)


def doc_entry(entry: Any) -> DocEntry:
    if isinstance(entry, str):
        return DocEntry(summary=entry)
    return DocEntry(None if entry.get("summary") is None else str(entry["summary"]),
                    {str(k): v for k, v in (entry.get("args") or {}).items()},
                    entry.get("returns"),
                    {str(k): v for k, v in (entry.get("raises") or {}).items()})
