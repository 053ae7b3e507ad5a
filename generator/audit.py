"""Audit what changed in verbs.h between two rdma-core releases, and what
the spec does about each change.

    python -m generator audit OLD NEW [--json] [-o FILE]
    make audit OLD=33.2 NEW=44.0 [JSON=1]

OLD and NEW are each a release known to tools/rdma-core (33.2, 44.0, 56.1,
65.0: fetched once, then cached), an rdma-core prefix (an install prefix or
an unpacked Debian package root), an IR dump (``python -m generator ir
--json -o FILE``), or ``system`` (/usr/include).  Only the IR is compared, so
two JSON dumps are enough input.

Reported, each with the spec's status:

* functions added, removed, or with a changed signature (result, parameter
  types or names), storage (inline <-> exported) or macro <-> function form;
* structs and unions added, removed, resized, or with fields added, removed,
  retyped or moved (offset);
* enums added or removed, and members added, removed or renumbered;
* macros (constants, function-like wrappers) added, removed or redefined.

Statuses:

  bound      the spec binds it (a method, a struct or enum class, a handle,
             a verb's argument, or the hand-written C uses it) and
             regenerating from NEW picks the change up
  excluded   the spec excludes it (spec/exclusions.yaml, with its reason),
             or only excluded functions use it
  unbound    not part of the bindings and nothing to decide: internal
             (leading underscore, kernel ABI headers), or a type no public
             function the spec handles uses
  decide     needs a decision: a public function neither bound nor
             excluded, an exported symbol not under symbols.optional, or a
             layout/enum change to something the bindings use
  error      the spec refers to something NEW no longer has, or the spec no
             longer builds against NEW

The exit status is 1 when any item is ``decide`` or ``error``, else 0.
"""
from __future__ import annotations

import argparse
import fnmatch
import glob
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple, cast

from .ir import IR, Enum, Function, Record, Type
from .members import find_field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASE_RE = re.compile(r"^\d+\.\d+$")

BOUND, EXCLUDED, UNBOUND, DECIDE, ERROR = "bound", "excluded", "unbound", "decide", "error"
STATUSES = (ERROR, DECIDE, BOUND, EXCLUDED, UNBOUND)


# --- input -------------------------------------------------------------------


@dataclass
class Source:
    ref: str                 # as given
    kind: str                # release | prefix | json | system
    path: Optional[str]      # prefix or JSON file
    ir: IR

    @property
    def label(self) -> str:
        if self.kind == "release":
            return self.ref
        return f"{self.ref} (rdma-core {self.ir.rdma_core})" if self.ir.rdma_core else self.ref


def release_prefix(version: str) -> str:
    """tools/rdma-core VERSION: the unpacked packages' prefix (cached)."""
    tool = os.path.join(ROOT, "tools", "rdma-core")
    r = subprocess.run([tool, version], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if r.returncode != 0:
        raise AuditError(f"tools/rdma-core {version} failed: {r.stderr.strip()}")
    return r.stdout.strip().splitlines()[-1]


def load_source(ref: str) -> Source:
    from . import irjson
    if os.path.isfile(ref):
        with open(ref, encoding="utf-8") as f:
            try:
                return Source(ref, "json", ref, irjson.load(f.read()))
            except (ValueError, KeyError) as exc:
                raise AuditError(f"{ref}: not an IR dump ({exc})") from None
    from . import parse
    if ref == "system":
        return Source(ref, "system", None, parse.parse(None))
    if os.path.isdir(ref):
        return Source(ref, "prefix", ref, parse.parse(ref))
    if RELEASE_RE.match(ref):
        prefix = release_prefix(ref)
        return Source(ref, "release", prefix, parse.parse(prefix))
    raise AuditError(f"{ref!r} is neither a release (33.2), a prefix, an IR JSON file "
                     "nor 'system'")


class AuditError(Exception):
    pass


# --- comparison helpers ------------------------------------------------------


def tsig(t: Optional[Type]) -> str:
    """A type as the API sees it: spelling and shape, not the sizes of the
    records it points to (those are compared as records)."""
    if t is None:
        return ""
    if t.kind == "pointer":
        return f"{t.spelling}"
    if t.kind in ("struct", "union"):
        return t.decl or t.spelling
    return f"{t.spelling}:{t.kind}:{t.size}:{t.signed}"


def declaration(f: Function) -> str:
    params = ", ".join(f"{p.type.spelling}{'' if p.type.spelling.endswith('*') else ' '}{p.name}"
                       .strip() for p in f.params)
    if f.variadic:
        params = f"{params}, ..." if params else "..."
    res = f.result.spelling
    sep = "" if res.endswith("*") else " "
    return f"{res}{sep}{f.name}({params or 'void'})"


def form(f: Function) -> str:
    if f.storage == "macro":
        return f"macro (-> {f.macro_target})" if f.macro_target else "macro"
    if f.macro_target:
        return f"{f.storage} function, wrapped by a macro (-> {f.macro_target})"
    return f"{f.storage} function"


def is_public_function(ir: IR, f: Function) -> bool:
    return f.header == ir.source and not f.name.startswith("_")


def record_decls(t: Optional[Type]) -> Iterable[str]:
    """Record and enum names a type mentions (through pointers and arrays)."""
    while t is not None:
        if t.kind in ("struct", "union", "enum"):
            yield t.decl or t.spelling
            return
        t = t.pointee or t.element


# --- what the spec refers to -------------------------------------------------


@dataclass
class SpecRefs:
    bound: Dict[str, List[str]] = field(default_factory=dict)       # function -> labels
    excluded: Dict[str, str] = field(default_factory=dict)          # function -> reason
    optional: Dict[str, str] = field(default_factory=dict)          # symbol -> release
    records: Dict[str, List[str]] = field(default_factory=dict)     # record -> how
    record_fields: Dict[str, List[Tuple[str, str, bool]]] = field(default_factory=dict)
    enums: Dict[str, List[str]] = field(default_factory=dict)       # enum -> class
    enum_since: Dict[str, str] = field(default_factory=dict)
    matches: List[Tuple[str, str]] = field(default_factory=list)    # (pattern, class)
    where: Dict[str, str] = field(default_factory=dict)             # name -> file:line
    since: Set[str] = field(default_factory=set)                    # marked newer
    hand_c: Dict[str, List[str]] = field(default_factory=dict)      # record -> files


def spec_refs(spec: Any, ir_new: IR, ir_old: IR) -> SpecRefs:
    refs = SpecRefs()
    refs.excluded = dict(spec.exclusions)
    refs.optional = dict(spec.optional)
    refs.where.update(spec.exclusion_where)
    refs.where.update(spec.optional_where)

    def bind(fn: str, label: str, where: str) -> None:
        refs.bound.setdefault(fn, []).append(label)
        refs.where.setdefault(fn, where)

    for h in spec.handles:
        refs.records.setdefault(h.ctype, []).append(f"handle class {h.name}")
        refs.where.setdefault(h.ctype, h.where("ctype"))
        if h.destroy:
            bind(h.destroy, f"{h.name}.close", h.where("destroy"))
        if h.release is not None and h.release.verb:
            bind(h.release.verb, f"{h.name}.close", h.where("release"))
        if h.base is not None and h.base.upcast:
            bind(h.base.upcast, h.name, h.where("base"))
        for a in h.attributes:
            if a.plain and isinstance(a.path, str):
                refs.record_fields.setdefault(h.ctype, []).append(
                    (a.path, f"{h.name}.{a.name}", False))
    for m in spec.all_methods():
        label = f"{m.owner}.{m.name}" if m.owner else m.name
        verbs = ([m.verb] if m.verb else []) + list(m.verbs)
        for v in verbs:
            bind(v, label, m.where("verb" if m.verb == v else "verbs"))
            if m.has("since"):
                refs.since.add(v)
    for s in spec.structs:
        how = f"struct class {s.name}"
        if s.fields is None:
            how += " (fields: all)"
        refs.records.setdefault(s.ctype, []).append(how)
        refs.where.setdefault(s.ctype, s.where("ctype"))
        if s.since is not None:
            refs.since.add(s.ctype)
        for f in s.fields or []:
            refs.record_fields.setdefault(s.ctype, []).append(
                (f.path, f"{s.name}.{f.name}", f.since is not None))
    for e in spec.enums:
        if e.c is not None:
            refs.enums.setdefault(e.c, []).append(e.name)
            refs.where.setdefault(e.c, e.where("c"))
            if e.since is not None:
                refs.enum_since[e.c] = e.since
                refs.since.add(e.c)
        else:
            refs.matches.append((str(e.match), e.name))
    # records reached through explicit field paths (grh.dgid -> ibv_global_route)
    for ir in (ir_old, ir_new):
        for ctype, paths in refs.record_fields.items():
            rec = ir.record(ctype)
            for path, label, _ in paths:
                cur = rec
                for part in path.split(".")[:-1]:
                    if cur is None:
                        break
                    t = find_field(ir, cur, part)
                    cur = ir.record(t.decl or t.spelling) if t is not None else None
                    if cur is not None:
                        how = f"{label} (via {path})"
                        if how not in refs.records.setdefault(cur.name, []):
                            refs.records[cur.name].append(how)
    _hand_c_records(refs)
    return refs


def _hand_c_records(refs: SpecRefs) -> None:
    """The records the hand-written C names (`struct ibv_wc`, ...)."""
    for path in sorted(glob.glob(os.path.join(ROOT, "ibverbs", "src", "*.[ch]"))):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for record in sorted(_records_named(text)):
            refs.hand_c.setdefault(record, []).append(os.path.relpath(path, ROOT))


def _ident_chars(c: str) -> bool:
    return c.isalnum() or c == "_"


def _records_named(text: str) -> Set[str]:
    """Every `struct ibv_x` / `union ibv_x` in C text: a keyword ending one
    word and a name starting the next (words split at white space)."""
    found = set()
    words = text.split()
    for before, word in zip(words, words[1:]):
        at = len(before)
        while at > 0 and _ident_chars(before[at - 1]):
            at -= 1
        end = 0
        while end < len(word) and _ident_chars(word[end]):
            end += 1
        kw, name = before[at:], word[:end]
        if kw in ("struct", "union") and name.startswith("ibv_") and len(name) > 4:
            found.add(f"{kw} {name}")
    return found


def _has_path(ir: IR, record: Optional[Record], path: str) -> bool:
    cur = record
    for i, part in enumerate(path.split(".")):
        if cur is None:
            return False
        t = find_field(ir, cur, part)
        if t is None:
            return False
        if i < len(path.split(".")) - 1:
            cur = ir.record(t.decl or t.spelling)
    return True


# --- report ------------------------------------------------------------------


@dataclass
class Item:
    kind: str                # function | record | enum | macro | spec
    name: str
    change: str              # added | removed | changed
    details: List[str]
    status: str
    spec: str                # what the spec does (or should do)
    since: Optional[str] = None

    @property
    def needs_attention(self) -> bool:
        return self.status in (DECIDE, ERROR)


@dataclass
class Report:
    old: Source
    new: Source
    items: List[Item]
    spec_sha256: str
    newer: List[str] = field(default_factory=list)   # spec items newer than NEW

    @property
    def exit_status(self) -> int:
        return 1 if any(i.needs_attention for i in self.items) else 0

    def counts(self) -> Dict[str, int]:
        out = {s: 0 for s in STATUSES}
        for i in self.items:
            out[i.status] += 1
        return out

    def to_dict(self) -> Dict[str, Any]:
        def src(s: Source) -> Dict[str, Any]:
            return {"ref": s.ref, "kind": s.kind, "path": s.path, "rdma_core": s.ir.rdma_core,
                    "sha256": s.ir.sha256, "source": s.ir.source}
        return {"old": src(self.old), "new": src(self.new), "spec_sha256": self.spec_sha256,
                "items": [asdict(i) for i in self.items], "summary": self.counts(),
                "spec_items_newer_than_new": self.newer, "exit_status": self.exit_status}


class Auditor:
    def __init__(self, old: IR, new: IR, spec: Any) -> None:
        self.old, self.new, self.spec = old, new, spec
        self.refs = spec_refs(spec, new, old)
        self.items: List[Item] = []
        self.method_errors: Dict[str, str] = {}
        self.spec_error: Optional[str] = None
        self._fn_users_old = self._type_users(old)
        self._fn_users_new = self._type_users(new)

    # which public functions mention a record/enum in their signature
    def _type_users(self, ir: IR) -> Dict[str, Set[str]]:
        users: Dict[str, Set[str]] = {}
        for f in ir.functions:
            for t in [f.result] + [p.type for p in f.params]:
                for d in record_decls(t):
                    users.setdefault(d, set()).add(f.name)
        # one level through records: a record whose field types are records
        for r in ir.records:
            for fld in r.fields:
                for d in record_decls(fld.type):
                    if d != r.name:
                        users.setdefault(d, set()).update(users.get(r.name, set()))
        return users

    def run(self) -> List[Item]:
        self.check_spec_builds()
        self.functions()
        self.records()
        self.enums()
        self.macros()
        order = {"function": 0, "record": 1, "enum": 2, "macro": 3, "spec": 4}
        change_order = {"removed": 0, "added": 1, "changed": 2}
        self.items.sort(key=lambda i: (order[i.kind], change_order.get(i.change, 3), i.name))
        return self.items

    # -- does the spec still build? --
    def check_spec_builds(self) -> None:
        from . import builder
        from .spec import SpecError
        try:
            builder.build(self.new, self.spec)
        except SpecError as exc:
            self.spec_error = str(exc)
            self.items.append(Item("spec", "spec/*.yaml", "fails",
                                   [str(exc)], ERROR,
                                   "the spec does not build against NEW; fix the spec"))
        b = builder.Builder(self.new, self.spec)
        try:
            b.structs()
        except SpecError:
            return
        for m in self.spec.all_methods():
            label = f"{m.owner}.{m.name}" if m.owner else m.name
            if b.absent(m):
                self.method_errors[label] = ""
                continue
            try:
                b.method(m)
            except SpecError as exc:
                self.method_errors[label] = str(exc)

    # -- functions --
    def fn_spec(self, name: str, f: Function, ir: IR) -> Tuple[str, str]:
        if name in self.refs.bound:
            return BOUND, ", ".join(sorted(set(self.refs.bound[name])))
        if name in self.refs.excluded:
            return EXCLUDED, self.refs.excluded[name]
        if not is_public_function(ir, f):
            why = "leading underscore" if f.name.startswith("_") else f"declared in {f.header}"
            return UNBOUND, f"internal ({why})"
        return DECIDE, ("public function neither bound nor excluded: bind it in spec/ "
                        "or add it to spec/exclusions.yaml with a reason")

    def optional_note(self, name: str) -> Optional[str]:
        rel = self.refs.optional.get(name)
        return rel or None

    def functions(self) -> None:
        old = {f.name: f for f in self.old.functions}
        new = {f.name: f for f in self.new.functions}
        for name in sorted(set(new) - set(old)):
            f = new[name]
            status, how = self.fn_spec(name, f, self.new)
            details = [declaration(f), form(f)]
            if f.deprecated:
                details.append("deprecated")
            if status == BOUND:
                errs = [self.method_errors.get(l) for l in self.refs.bound[name]]
                errs = [e for e in errs if e]
                if errs:
                    status, how = DECIDE, f"{how}: the spec's mapping fails against NEW: {errs[0]}"
            if f.storage == "exported" and name not in self.refs.optional:
                details.append("exported, but not under symbols.optional: an extension "
                               "generated from NEW would refuse to import with an older "
                               "libibverbs.so.1")
                status = DECIDE if status != ERROR else status
                how += ("; add it to symbols.optional in spec/symbols.yaml with its "
                        "symbol version (IBVERBS_1.N; a new one dated under symbols.versions)")
            self.items.append(Item("function", name, "added", details, status, how,
                                   since=self.optional_note(name)))
        for name in sorted(set(old) - set(new)):
            f = old[name]
            status, how = self.fn_spec(name, f, self.old)
            details = [declaration(f), form(f)]
            where = self.refs.where.get(name)
            refers = []
            if name in self.refs.bound:
                refers.append(f"binds it ({how})")
            if name in self.refs.excluded:
                refers.append("excludes it")
            if name in self.refs.optional:
                refers.append("lists it under symbols.optional")
            if refers:
                status = ERROR
                how = (f"the spec {' and '.join(refers)} at {where}, but NEW no longer "
                       f"has it")
            elif status == DECIDE:
                status, how = UNBOUND, "was neither bound nor excluded; nothing to do"
            self.items.append(Item("function", name, "removed", details, status, how))
        for name in sorted(set(old) & set(new)):
            a, b = old[name], new[name]
            details = []
            if (tsig(a.result) != tsig(b.result) or a.variadic != b.variadic
                    or [tsig(p.type) for p in a.params] != [tsig(p.type) for p in b.params]):
                details.append(f"signature: {declaration(a)}")
                details.append(f"        -> {declaration(b)}")
            elif [p.name for p in a.params] != [p.name for p in b.params]:
                details.append("parameter names: "
                               f"({', '.join(p.name for p in a.params)}) -> "
                               f"({', '.join(p.name for p in b.params)})")
            if form(a) != form(b):
                macroish = (a.storage == "macro") != (b.storage == "macro") or \
                    bool(a.macro_target) != bool(b.macro_target)
                details.append(f"{'macro <-> function' if macroish else 'storage'}: "
                               f"{form(a)} -> {form(b)}")
            if a.deprecated != b.deprecated:
                details.append("now deprecated" if b.deprecated else "no longer deprecated")
            if a.header != b.header:
                details.append(f"header: {a.header} -> {b.header}")
            if not details:
                continue
            status, how = self.fn_spec(name, b, self.new)
            if status == BOUND:
                errs = [self.method_errors.get(l) for l in self.refs.bound[name]]
                errs = [e for e in errs if e]
                if errs:
                    status, how = DECIDE, f"{how}: the spec's mapping fails against NEW: {errs[0]}"
                else:
                    how += " (the spec's mapping still builds against NEW)"
            elif status == DECIDE:
                how = "public function neither bound nor excluded (already in OLD)"
            if b.storage == "exported" and a.storage != "exported" \
                    and name not in self.refs.optional:
                details.append("newly exported, but not under symbols.optional")
                status = DECIDE
            self.items.append(Item("function", name, "changed", details, status, how,
                                   since=self.optional_note(name)))

    # -- records --
    def record_use(self, name: str, ir: IR, users: Dict[str, Set[str]]) -> Tuple[str, str]:
        how = list(self.refs.records.get(name, []))
        if name in self.refs.hand_c:
            how.append("hand-written C (" + ", ".join(sorted(set(self.refs.hand_c[name]))) + ")")
        fns = users.get(name, set())
        bound = sorted(f for f in fns if f in self.refs.bound)
        if bound:
            how.append("argument of bound " + ", ".join(bound[:4]) +
                       (" ..." if len(bound) > 4 else ""))
        if how:
            return BOUND, "; ".join(how)
        rec = ir.record(name)
        if rec is not None and rec.header != ir.source:
            return UNBOUND, f"internal ({rec.header})"
        excluded = sorted(f for f in fns if f in self.refs.excluded)
        if excluded:
            return EXCLUDED, "used by excluded " + ", ".join(excluded[:4]) + \
                (" ..." if len(excluded) > 4 else "")
        if fns:
            return UNBOUND, "used only by " + ", ".join(sorted(fns)[:4]) + \
                (" ..." if len(fns) > 4 else "") + " (see those functions)"
        return UNBOUND, "no function the spec handles uses it"

    def records(self) -> None:
        old = {r.name: r for r in self.old.records}
        new = {r.name: r for r in self.new.records}
        for name in sorted(set(new) - set(old)):
            r = new[name]
            status, how = self.record_use(name, self.new, self._fn_users_new)
            nf = len([f for f in r.fields if f.name])
            details = [f"size {r.size}, {nf} field(s)" if r.complete else "incomplete"]
            self.items.append(Item("record", name, "added", details, status, how))
        for name in sorted(set(old) - set(new)):
            status, how = self.record_use(name, self.old, self._fn_users_old)
            if name in self.refs.records or name in self.refs.record_fields:
                status = ERROR
                how = f"the spec uses it ({how}) at {self.refs.where.get(name, 'spec/')}, " \
                      "but NEW no longer has it"
            elif status == BOUND:
                status = DECIDE
                how = f"{how}: NEW no longer has it"
            self.items.append(Item("record", name, "removed", [], status, how))
        for name in sorted(set(old) & set(new)):
            a, b = old[name], new[name]
            details, incompatible = self.record_diff(a, b)
            if not details:
                continue
            status, how = self.record_use(name, self.new, self._fn_users_new)
            missing = [(p, label) for p, label, marked in self.refs.record_fields.get(name, [])
                       if not marked and _has_path(self.old, a, p) and not _has_path(self.new, b, p)]
            if missing:
                status = ERROR
                how = "the spec reads " + ", ".join(f"{p} ({l})" for p, l in missing) + \
                      ", which NEW no longer has"
            elif status == BOUND and incompatible:
                status = DECIDE
                how = (f"{how}: existing fields changed place or type: an extension "
                       "built from OLD's headers would misread NEW's library; review")
            elif status == BOUND:
                if any("fields: all" in h for h in self.refs.records.get(name, [])):
                    how += ": regenerating from NEW picks up the new fields"
                elif name in self.refs.records:
                    how += ": the spec lists fields explicitly; new fields stay unexposed"
            self.items.append(Item("record", name, "changed", details, status, how))

    def record_diff(self, a: Record, b: Record) -> Tuple[List[str], bool]:
        out: List[str] = []
        incompatible = False
        if a.complete != b.complete:
            out.append(f"{'now complete' if b.complete else 'now incomplete'}")
        if a.size != b.size:
            out.append(f"resized: {a.size} -> {b.size} bytes")
        if a.align != b.align:
            out.append(f"alignment: {a.align} -> {b.align}")
        fa = {f.name or f"#anon{i}": f for i, f in enumerate(a.fields)}
        fb = {f.name or f"#anon{i}": f for i, f in enumerate(b.fields)}
        added = [n for n in fb if n not in fa]
        removed = [n for n in fa if n not in fb]
        if added:
            out.append("fields added: " + ", ".join(
                f"{n} ({fb[n].type.spelling} @{fb[n].offset})" for n in added))
        if removed:
            out.append("fields removed: " + ", ".join(removed))
            incompatible = True
        common = [n for n in fa if n in fb]
        retyped = [n for n in common if tsig(fa[n].type) != tsig(fb[n].type)
                   or fa[n].bit_width != fb[n].bit_width]
        if retyped:
            out.append("fields retyped: " + ", ".join(
                f"{n} ({fa[n].type.spelling} -> {fb[n].type.spelling})" for n in retyped))
            incompatible = True
        moved = [n for n in common if fa[n].offset != fb[n].offset
                 or fa[n].bit_offset != fb[n].bit_offset]
        if moved:
            deltas = {fb[n].offset - fa[n].offset for n in moved}
            grow = (b.size or 0) - (a.size or 0)
            if len(moved) == len(common) and deltas == {grow}:
                out.append(f"grew at the front by {grow} bytes: all {len(moved)} fields "
                           "moved together (offsets from the end unchanged, "
                           "rdma-core's scheme for this struct)")
            else:
                out.append("fields moved: " + ", ".join(
                    f"{n} (@{fa[n].offset} -> @{fb[n].offset})" for n in moved))
                incompatible = True
        return out, incompatible

    # -- enums --
    def enum_classes(self, e: Enum) -> List[str]:
        classes = list(self.refs.enums.get(e.name, []))
        for pattern, cls in self.refs.matches:
            if any(fnmatch.fnmatchcase(m.name, pattern) for m in e.members):
                classes.append(f"{cls} (members {pattern})")
        return classes

    def enum_use(self, e: Enum, ir: IR, users: Dict[str, Set[str]]) -> Tuple[str, str]:
        classes = self.enum_classes(e)
        if classes:
            since = self.refs.enum_since.get(e.name)
            return BOUND, "enum class " + ", ".join(classes) + \
                (f" (since: {since})" if since else "")
        if e.header != ir.source:
            return UNBOUND, f"internal ({e.header})"
        fns = users.get(e.name, set())
        if fns and all(f in self.refs.excluded for f in fns):
            return EXCLUDED, "used by excluded " + ", ".join(sorted(fns)[:4])
        return UNBOUND, "no Python enum class (the values are plain ints where used)"

    def enums(self) -> None:
        old = {e.name: e for e in self.old.enums}
        new = {e.name: e for e in self.new.enums}
        for name in sorted(set(new) - set(old)):
            e = new[name]
            status, how = self.enum_use(e, self.new, self._fn_users_new)
            details = [", ".join(f"{m.name}={m.value}" for m in e.members[:8]) +
                       (f" ... ({len(e.members)} members)" if len(e.members) > 8 else "")]
            self.items.append(Item("enum", name, "added", details, status, how))
        for name in sorted(set(old) - set(new)):
            e = old[name]
            status, how = self.enum_use(e, self.old, self._fn_users_old)
            if name in self.refs.enums:
                status = ERROR
                how = f"the spec binds it ({how}) at {self.refs.where.get(name)}, but NEW " \
                      "no longer has it"
            self.items.append(Item("enum", name, "removed", [], status, how))
        for name in sorted(set(old) & set(new)):
            a, b = old[name], new[name]
            ma = {m.name: m.value for m in a.members}
            mb = {m.name: m.value for m in b.members}
            added = [m for m in mb if m not in ma]
            removed = [m for m in ma if m not in mb]
            renumbered = [m for m in ma if m in mb and ma[m] != mb[m]]
            details = []
            if added:
                details.append("members added: " + ", ".join(f"{m}={mb[m]}" for m in added))
            if removed:
                details.append("members removed: " + ", ".join(removed))
            if renumbered:
                details.append("members renumbered: " + ", ".join(
                    f"{m} {ma[m]} -> {mb[m]}" for m in renumbered))
            if (a.size, a.signed) != (b.size, b.signed):
                details.append(f"underlying type: {a.size} bytes signed={a.signed} -> "
                               f"{b.size} bytes signed={b.signed}")
            if not details:
                continue
            status, how = self.enum_use(b, self.new, self._fn_users_new)
            if status == BOUND and (removed or renumbered):
                status = DECIDE
                how += ": members the Python class had are gone or have new values (an API change)"
            elif status == BOUND:
                how += ": the new members appear on regeneration"
            self.items.append(Item("enum", name, "changed", details, status, how))

    # -- macros --
    def macros(self) -> None:
        old = {m.name: m for m in self.old.macros}
        new = {m.name: m for m in self.new.macros}
        spec_text = self._spec_text()

        def status_of(name: str, ir: IR) -> Tuple[str, str]:
            f = ir.function(name)
            if f is not None:
                st, how = self.fn_spec(name, f, ir)
                if st == DECIDE:
                    st, how = UNBOUND, "see the function"
                return st, f"function-like wrapper of {f.name}: {how}"
            hits = [where for where, text in spec_text if re.search(rf"\b{re.escape(name)}\b", text)]
            if hits:
                return BOUND, "used by the spec at " + ", ".join(hits[:3])
            if name.startswith("_"):
                return UNBOUND, "internal"
            return UNBOUND, "a macro the bindings do not use"

        for name in sorted(set(new) - set(old)):
            m = new[name]
            st, how = status_of(name, self.new)
            self.items.append(Item("macro", name, "added", [self._macro(m)], st, how))
        for name in sorted(set(old) - set(new)):
            m = old[name]
            st, how = status_of(name, self.old)
            if st == BOUND and self.new.function(name) is None:
                st, how = ERROR, f"{how}, but NEW no longer has it"
            self.items.append(Item("macro", name, "removed", [self._macro(m)], st, how))
        for name in sorted(set(old) & set(new)):
            a, b = old[name], new[name]
            if (a.params, a.tokens) == (b.params, b.tokens):
                continue
            st, how = status_of(name, self.new)
            self.items.append(Item("macro", name, "changed",
                                   [self._macro(a), "-> " + self._macro(b)], st, how))

    @staticmethod
    def _macro(m: Any) -> str:
        params = f"({', '.join(m.params)})" if m.params is not None else ""
        return f"#define {m.name}{params} {m.tokens}"

    def _spec_text(self) -> List[Tuple[str, str]]:
        out = []
        for path in sorted(glob.glob(os.path.join(ROOT, "spec", "*.yaml"))):
            with open(path, encoding="utf-8") as f:
                for i, line in enumerate(f, 1):
                    line = line.split("#", 1)[0]
                    if line.strip():
                        out.append((f"spec/{os.path.basename(path)}:{i}", line))
        return out

    # spec items that neither release has (marked newer: skipped on generation)
    def newer_spec_items(self) -> List[str]:
        out = []
        for fn, labels in sorted(self.refs.bound.items()):
            if self.new.function(fn) is None and self.old.function(fn) is None:
                rel = self.refs.optional.get(fn)
                out.append(f"{', '.join(sorted(set(labels)))} binds {fn}"
                           + (f" (rdma-core {rel})" if rel else "")
                           + ": not generated from these headers")
        gone = [fn for fn in sorted(self.refs.excluded)
                if self.new.function(fn) is None and self.old.function(fn) is None]
        if gone:
            out.append(f"exclusions of {len(gone)} function(s) not in these headers: "
                       + ", ".join(gone))
        for name in sorted(self.refs.enums):
            if self.new.enum(name) is None and self.old.enum(name) is None:
                out.append(f"enum class {', '.join(self.refs.enums[name])} ({name}): "
                           "not generated from these headers")
        return out


def audit(old: Source, new: Source, spec: Any) -> Report:
    a = Auditor(old.ir, new.ir, spec)
    items = a.run()
    return Report(old, new, items, spec.sha256, newer=a.newer_spec_items())


# --- output ------------------------------------------------------------------


def render_text(report: Report, verbose: bool = False) -> str:
    lines: List[str] = []
    o, n = report.old, report.new
    lines.append(f"rdma-core audit: {o.label} -> {n.label}")
    lines.append(f"  verbs.h sha256 {o.ir.sha256[:12]} -> {n.ir.sha256[:12]}; "
                 f"spec sha256 {report.spec_sha256[:12]}")
    sections = (("function", "Functions"), ("record", "Structs and unions"),
                ("enum", "Enums"), ("macro", "Macros"), ("spec", "Spec"))
    for kind, title in sections:
        items = [i for i in report.items if i.kind == kind]
        if not items:
            continue
        hidden = [i for i in items if i.status == UNBOUND and not verbose]
        shown = [i for i in items if i not in hidden]
        lines.append("")
        lines.append(f"{title} ({len(items)} changed"
                     + (f"; {len(hidden)} unbound not shown, --verbose lists them" if hidden else "")
                     + ")")
        width = max([len(i.name) for i in shown] + [10])
        for i in shown:
            mark = {ERROR: "!!", DECIDE: "??"}.get(i.status, "  ")
            since = f" [added in rdma-core {i.since}]" if i.since and i.change == "added" else ""
            lines.append(f"{mark} {i.change:<7} {i.name:<{width}}  {i.status.upper():<8} "
                         f"{i.spec}{since}")
            for d in i.details:
                lines.append(f"{'':{13 + width}}{d}")
    if report.newer:
        lines.append("")
        lines.append(f"Spec items newer than both ({len(report.newer)}; skipped when generating "
                     "from these headers)")
        for s in report.newer:
            lines.append(f"   {s}")
    c = report.counts()
    lines.append("")
    lines.append(f"summary: {len(report.items)} changes: " +
                 ", ".join(f"{c[s]} {s}" for s in STATUSES))
    if report.exit_status:
        lines.append(f"exit status 1: {c[ERROR]} error(s) (the spec refers to something "
                     f"NEW no longer has), {c[DECIDE]} item(s) need a decision (marked ?? / !!)")
    else:
        lines.append("exit status 0: the spec handles every change")
    return "\n".join(lines) + "\n"


# --- command line ------------------------------------------------------------


def cmd_audit(args: Any) -> int:
    from . import spec as spec_mod
    from .paths import SPEC_DIR
    try:
        old = load_source(args.old)
        new = load_source(args.new)
    except AuditError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = audit(old, new, spec_mod.load(args.spec or SPEC_DIR))
    text = (json.dumps(report.to_dict(), indent=1, sort_keys=True) + "\n") if args.json \
        else render_text(report, args.verbose)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return report.exit_status


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("audit", help="what changed in verbs.h between two releases, "
                       "and what the spec does about it",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("old", help="release (33.2), prefix, IR JSON file or 'system'")
    p.add_argument("new", help="release (65.0), prefix, IR JSON file or 'system'")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also list the unbound (internal, unused) changes")
    p.add_argument("-o", "--output", help="write the report there")
    p.add_argument("--spec", help="another spec directory (default: spec/)")
    p.set_defaults(func=cmd_audit)
    return cast(argparse.ArgumentParser, p)
