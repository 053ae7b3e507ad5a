"""Parse rdma-core's <infiniband/verbs.h> with libclang into the IR.

This is the only generator module that imports ``clang.cindex`` (from the
PyPI ``libclang`` wheel); it is imported lazily so that the rest of the
generator, and the wheel build, never need libclang.

Entry points: :func:`parse` and :func:`main_ir` (``python -m generator ir``).
"""
from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys
from typing import Any, Dict, Iterable, List, Optional, Tuple

from .ir import (IR, Enum, EnumMember, Field, Function, Macro, Param, Record,
                 Type, Typedef, UNKNOWN)

DEFAULT_HEADER = "infiniband/verbs.h"
SYSTEM_INCLUDE = "/usr/include"
#: The rdma-core headers committed with the source: generated/ is made from
#: them and the extension is compiled against them, whatever the machine has.
VENDORED_PREFIX = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "third_party", "rdma-core")
#: Sub-directories of an include root that belong to rdma-core.  ``rdma/`` is
#: where rdma-core's kernel ABI headers live; note that Debian ships those in
#: linux-libc-dev, so with a package root they come from the system.
RDMA_DIRS = ("infiniband/", "rdma/")
MACRO_PREFIXES = ("ibv_", "IBV_", "_ibv", "__ibv", "___ibv", "rdma_", "RDMA_")

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ANON_PATH = re.compile(
    r"\((?:unnamed|anonymous)(?: (?:struct|union|enum))? at [^)]*\)")


class ParseError(RuntimeError):
    """The headers could not be found or did not parse cleanly."""


# --------------------------------------------------------------------------
# environment
# --------------------------------------------------------------------------

def _cindex() -> Any:
    try:
        import clang.cindex as ci
    except ImportError as e:  # pragma: no cover - depends on environment
        raise ParseError(
            "libclang is not available: pip install libclang==18.1.1 "
            f"({e})") from e
    lib = os.environ.get("IBVERBS_LIBCLANG")
    if lib and not ci.Config.loaded:
        ci.Config.set_library_file(lib)
    return ci


def include_dir(prefix: Optional[str] = None) -> str:
    """The include root for *prefix* (``<prefix>/include`` or
    ``<prefix>/usr/include``); the vendored headers' for None."""
    if prefix is None:
        prefix = VENDORED_PREFIX
    prefix = os.path.abspath(prefix)
    if not os.path.isdir(prefix):
        raise ParseError(f"rdma-core prefix {prefix!r} does not exist")
    for cand in (os.path.join(prefix, "include"),
                 os.path.join(prefix, "usr", "include")):
        if os.path.isdir(os.path.join(cand, "infiniband")):
            return cand
    raise ParseError(
        f"rdma-core prefix {prefix!r} has neither include/infiniband nor "
        "usr/include/infiniband (expected an install prefix or an unpacked "
        "libibverbs-dev package root)")


def _run(cmd: List[str]) -> Optional[str]:
    if not shutil.which(cmd[0]):
        return None
    try:
        out = subprocess.run(cmd, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True,
                             timeout=30, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out or None


def builtin_include_dir() -> str:
    """The compiler's builtin header dir (stddef.h, stdarg.h, ...), which the
    libclang wheel lacks.  ``$IBVERBS_BUILTIN_INCLUDE`` overrides."""
    env = os.environ.get("IBVERBS_BUILTIN_INCLUDE")
    cands = [env] if env else []
    for cc in ("gcc", "cc"):
        out = _run([cc, "-print-file-name=include"])
        if out:
            cands.append(out)
    out = _run(["clang", "-print-resource-dir"])
    if out:
        cands.append(os.path.join(out, "include"))
    for c in cands:
        if c and os.path.isfile(os.path.join(c, "stddef.h")):
            return c
    raise ParseError(
        "cannot find the compiler's builtin include directory (stddef.h): "
        "tried `gcc -print-file-name=include`, `cc -print-file-name=include` "
        "and `clang -print-resource-dir`; install gcc or set "
        "IBVERBS_BUILTIN_INCLUDE")


def clang_args(prefix: Optional[str] = None) -> List[str]:
    args = ["-x", "c", "-std=gnu11", "-isystem", builtin_include_dir()]
    inc = include_dir(prefix)
    if inc != SYSTEM_INCLUDE:
        args += ["-I", inc]
    return args


def detect_release(inc: str) -> Optional[str]:
    """rdma-core release ("44.0") for the install whose include root is
    *inc*, from libibverbs.pc (Version 1.<abi>.<release>) or, for Debian
    package roots, the libibverbs-dev changelog, or for the vendored
    headers their VERSION file."""
    root = os.path.dirname(inc)  # <prefix> or <prefix>/usr
    try:
        with open(os.path.join(root, "VERSION"), encoding="utf-8") as f:
            return f.readline().split()[0]
    except (OSError, IndexError):
        pass
    pcs = sorted(glob.glob(os.path.join(root, "lib*", "pkgconfig",
                                        "libibverbs.pc"))
                 + glob.glob(os.path.join(root, "lib", "*", "pkgconfig",
                                          "libibverbs.pc")))
    for pc in pcs:
        try:
            with open(pc, encoding="utf-8", errors="replace") as f:
                for line in f:
                    m = re.match(r"Version:\s*(\S+)", line)
                    if m:
                        v = m.group(1)
                        m2 = re.match(r"^\d+\.\d+\.(\d+\.\d+(?:\.\d+)?)$", v)
                        return m2.group(1) if m2 else v
        except OSError:
            pass
    for pkg in ("libibverbs-dev", "libibverbs1"):
        ch = os.path.join(root, "share", "doc", pkg, "changelog.Debian.gz")
        try:
            with gzip.open(ch, "rt", encoding="utf-8", errors="replace") as f:
                m = re.match(r"\S+ \(([^)]+)\)", f.readline())
        except OSError:
            continue
        if m:
            v = m.group(1).split(":", 1)[-1]
            return v.rsplit("-", 1)[0] if "-" in v else v
    return None


# --------------------------------------------------------------------------
# the parser proper
# --------------------------------------------------------------------------

class _Parser:
    def __init__(self, ci: Any, tu: Any, roots: List[str]) -> None:
        self.ci = ci
        self.tu = tu
        self.roots = roots
        K = ci.TypeKind
        self.K = K
        self.C = ci.CursorKind
        self.signed_kinds = {K.CHAR_S, K.SCHAR, K.SHORT, K.INT, K.LONG,
                             K.LONGLONG, K.INT128, K.WCHAR}
        self.unsigned_kinds = {K.CHAR_U, K.UCHAR, K.CHAR16, K.CHAR32,
                               K.USHORT, K.UINT, K.ULONG, K.ULONGLONG,
                               K.UINT128}
        self.float_kinds = {K.FLOAT, K.DOUBLE, K.LONGDOUBLE, K.HALF}
        for extra in ("FLOAT128", "IBM128", "BFLOAT16"):
            if hasattr(K, extra):
                self.float_kinds.add(getattr(K, extra))
        self.array_kinds = {K.CONSTANTARRAY, K.INCOMPLETEARRAY,
                            K.VARIABLEARRAY, K.DEPENDENTSIZEDARRAY}
        self.record_decls = {self.C.STRUCT_DECL, self.C.UNION_DECL}
        self._hdr_cache: Dict[str, Optional[str]] = {}
        # location key -> synthetic / resolved name of records and enums
        self.names: Dict[Tuple[str, int], str] = {}
        self.used_names: Dict[str, Tuple[str, int]] = {}
        # records and enums to emit, in discovery order
        self.rec_cursors: List[Tuple[object, str]] = []
        self.enum_cursors: List[Tuple[object, str]] = []
        # incomplete records referenced anywhere: name -> header
        self.referenced: Dict[str, Optional[str]] = {}

    # -- locations ---------------------------------------------------------
    def header_of(self, cursor: Any) -> Optional[str]:
        f = cursor.location.file
        if f is None:
            return None
        name = f.name
        if name not in self._hdr_cache:
            self._hdr_cache[name] = self._rel(name)
        return self._hdr_cache[name]

    def _rel(self, path: str) -> Optional[str]:
        path = os.path.normpath(os.path.abspath(path))
        for root in self.roots:
            rel = os.path.relpath(path, root)
            if rel.startswith(".."):
                continue
            rel = rel.replace(os.sep, "/")
            if rel.startswith(RDMA_DIRS):
                return rel
            return None
        return None

    @staticmethod
    def key(cursor: Any) -> Tuple[str, int]:
        loc = cursor.location
        return (loc.file.name if loc.file else "", loc.offset)

    # -- naming ------------------------------------------------------------
    def _kw(self, cursor: Any) -> str:
        C = self.C
        return {C.STRUCT_DECL: "struct", C.UNION_DECL: "union",
                C.ENUM_DECL: "enum"}.get(cursor.kind, "struct")

    def _assign(self, cursor: Any, name: str) -> str:
        k = self.key(cursor)
        if k in self.names:
            return self.names[k]
        base, n = name, 2
        while name in self.used_names and self.used_names[name] != k:
            name = f"{base} #{n}"
            n += 1
        self.names[k] = name
        self.used_names[name] = k
        return name

    def _first_named(self, rec: Any) -> Optional[str]:
        for f in rec.type.get_fields():
            if _IDENT.match(f.spelling):
                return str(f.spelling)
            d = f.type.get_canonical().get_declaration()
            if d.kind in self.record_decls:
                n = self._first_named(d)
                if n:
                    return n
        return None

    def decl_name(self, d: Any) -> str:
        """Name of a struct/union/enum declaration cursor."""
        k = self.key(d)
        if k in self.names:
            return self.names[k]
        kw = self._kw(d)
        if d.is_anonymous():
            # not reached through a named parent (e.g. outside the rdma
            # headers): a path-free fallback
            if d.kind == self.C.ENUM_DECL:
                first = next((c.spelling for c in d.get_children()
                              if c.kind == self.C.ENUM_CONSTANT_DECL), None)
                return self._assign(d, f"enum (anonymous at member {first})")
            first = self._first_named(d)
            return self._assign(d, f"{kw} (anonymous at field {first})")
        canon = d.type.get_canonical().spelling
        if canon.startswith(kw + " "):
            return f"{kw} {d.spelling}"
        return str(d.spelling)  # typedef name of an anonymous record/enum

    def _strip_arrays(self, t: Any) -> Any:
        while True:
            u = self._desugar(t)
            if u.kind in self.array_kinds:
                t = u.element_type
            else:
                return t

    def collect_record(self, cur: Any, name: str) -> None:
        """Register record definition *cur* named *name* and its nested
        record/enum definitions."""
        self._assign(cur, name)
        self.rec_cursors.append((cur, name))
        kw_strip = name.split(" ", 1)[1] if name.startswith(
            ("struct ", "union ")) else name
        C = self.C
        nested_named = {}
        for i, f in enumerate(cur.type.get_fields()):
            d = self._strip_arrays(f.type).get_canonical().get_declaration()
            if d.kind not in self.record_decls and d.kind != C.ENUM_DECL:
                continue
            if not d.is_anonymous() or d.semantic_parent != cur:
                continue
            kw = self._kw(d)
            if _IDENT.match(f.spelling):
                sub = f"{kw} {kw_strip}::{f.spelling}"
            else:
                first = self._first_named(d)
                sub = (f"{kw} {kw_strip}::(anonymous at field {first})"
                       if first else f"{kw} {kw_strip}::(anonymous #{i})")
            nested_named[self.key(d)] = self._assign(d, sub)
        for ch in cur.get_children():
            if ch.kind in self.record_decls:
                if not ch.is_definition():
                    self.note_declaration(ch)
                    continue
                k = self.key(ch)
                if k in nested_named:
                    self.collect_record(ch, nested_named[k])
                elif ch.is_anonymous():
                    # anonymous record neither a member nor a field's type
                    # (e.g. "struct { int x; };" in a struct -> nothing)
                    continue
                else:
                    self.collect_record(ch, self.decl_name(ch))
            elif ch.kind == C.ENUM_DECL and ch.is_definition():
                k = self.key(ch)
                if k in nested_named:
                    self.enum_cursors.append((ch, nested_named[k]))
                else:
                    self.enum_cursors.append((ch, self.decl_name(ch)))

    def note_declaration(self, cur: Any) -> None:
        """A record declaration that is not a definition."""
        if cur.get_definition() is None and not cur.is_anonymous():
            self.referenced.setdefault(self.decl_name(cur),
                                       self.header_of(cur))

    # -- types -------------------------------------------------------------
    def _desugar(self, t: Any) -> Any:
        K = self.K
        for _ in range(64):
            if t.kind == K.TYPEDEF:
                t = t.get_declaration().underlying_typedef_type
            elif t.kind == K.ELABORATED:
                t = t.get_named_type()
            elif t.kind in (K.UNEXPOSED, ) or t.kind.name in (
                    "ATTRIBUTED", "BTFTAGATTRIBUTED", "DECAYED", "ADJUSTED",
                    "PAREN"):
                c = t.get_canonical()
                if c == t:
                    return t
                t = c
            else:
                return t
        return t

    def spell(self, t: Any) -> str:
        s: str = t.spelling
        if "(unnamed" not in s and "(anonymous" not in s:
            return s
        K = self.K
        const = "const " if t.is_const_qualified() else ""
        if t.kind == K.TYPEDEF:
            return s
        u = self._desugar(t)
        if u.kind in (K.RECORD, K.ENUM):
            name = self.decl_name(u.get_declaration())
            return const + name
        if u.kind == K.POINTER:
            p = self.spell(u.get_pointee())
            return p + (" *const" if t.is_const_qualified() else " *")
        if u.kind == K.CONSTANTARRAY:
            return f"{self.spell(u.element_type)}[{u.element_count}]"
        if u.kind in self.array_kinds:
            return f"{self.spell(u.element_type)}[]"
        return _ANON_PATH.sub("(anonymous)", s)

    def conv(self, t: Any) -> Type:
        K = self.K
        can = t.get_canonical()
        k = can.kind
        const = bool(t.is_const_qualified())
        spelling = self.spell(t)
        size = t.get_size()
        size = size if size is not None and size >= 0 else None
        if k == K.VOID:
            return Type(spelling, "void", None, const=const)
        if k == K.BOOL:
            return Type(spelling, "bool", size, signed=False, const=const)
        if k in self.signed_kinds or k in self.unsigned_kinds:
            return Type(spelling, "int", size, signed=k in self.signed_kinds,
                        const=const)
        if k in self.float_kinds:
            return Type(spelling, "float", size, const=const)
        if k == K.POINTER:
            u = self._desugar(t)
            pointee = u.get_pointee() if u.kind == K.POINTER \
                else can.get_pointee()
            return Type(spelling, "pointer", size, pointee=self.conv(pointee),
                        const=const)
        if k in self.array_kinds:
            u = self._desugar(t)
            if u.kind not in self.array_kinds:
                u = can
            count = u.element_count if k == K.CONSTANTARRAY else None
            return Type(spelling, "array", size,
                        element=self.conv(u.element_type), count=count,
                        const=const)
        if k == K.RECORD:
            d = can.get_declaration()
            kind = "union" if d.kind == self.C.UNION_DECL else "struct"
            name = self.decl_name(d)
            if d.get_definition() is None:
                self.referenced.setdefault(name, self.header_of(d))
            return Type(spelling, kind, size, decl=name, const=const)
        if k == K.ENUM:
            d = can.get_declaration()
            signed = d.enum_type.get_canonical().kind in self.signed_kinds
            return Type(spelling, "enum", size, signed=signed,
                        decl=self.decl_name(d), const=const)
        if k in (K.FUNCTIONPROTO, K.FUNCTIONNOPROTO):
            return Type(spelling, "function", None, const=const)
        return Type(spelling, "other", size, const=const)

    # -- declarations ------------------------------------------------------
    def record(self, cur: Any, name: str) -> Record:
        fields = []
        for f in cur.type.get_fields():
            fname = f.spelling if _IDENT.match(f.spelling) else ""
            bits = f.get_field_offsetof()
            if f.is_bitfield():
                fld = Field(fname, self.conv(f.type), bits // 8, bits,
                            f.get_bitfield_width())
            else:
                fld = Field(fname, self.conv(f.type), bits // 8)
            fields.append(fld)
        size, align = cur.type.get_size(), cur.type.get_align()
        return Record(name=name,
                      kind="union" if cur.kind == self.C.UNION_DECL
                      else "struct",
                      size=size if size >= 0 else None,
                      align=align if align >= 0 else None,
                      fields=fields, header=self.header_of(cur) or "",
                      complete=True)

    def enum(self, cur: Any, name: str) -> Enum:
        members = [EnumMember(c.spelling, c.enum_value)
                   for c in cur.get_children()
                   if c.kind == self.C.ENUM_CONSTANT_DECL]
        signed = cur.enum_type.get_canonical().kind in self.signed_kinds
        return Enum(name=name, members=members,
                    header=self.header_of(cur) or "", signed=signed,
                    size=cur.type.get_size())

    def deprecated(self, cur: Any) -> bool:
        AK = self.ci.AvailabilityKind
        try:
            if cur.availability == AK.DEPRECATED:
                return True
        except Exception:  # pragma: no cover - very old bindings
            pass
        for ch in cur.get_children():
            if ch.kind == self.C.UNEXPOSED_ATTR and any(
                    "deprecated" in tk.spelling for tk in ch.get_tokens()):
                return True
        return False

    def function(self, cur: Any) -> Function:
        t = cur.type
        variadic = (t.kind == self.K.FUNCTIONPROTO
                    and t.is_function_variadic())
        params = [Param(a.spelling, self.conv(a.type))
                  for a in cur.get_arguments()]
        return Function(name=cur.spelling, result=self.conv(cur.result_type),
                        params=params, variadic=variadic,
                        storage="inline" if cur.is_definition()
                        else "exported",
                        macro_target=None, header=self.header_of(cur) or "",
                        deprecated=self.deprecated(cur))

    def macro(self, cur: Any) -> Macro:
        toks = list(cur.get_tokens())
        end = cur.extent.end.offset
        toks = [t for t in toks if t.extent.start.offset < end] or toks
        params: Optional[List[str]] = None
        body = toks[1:]
        if (len(toks) > 1 and toks[1].spelling == "("
                and toks[1].extent.start.offset == toks[0].extent.end.offset):
            params = []
            i = 2
            while i < len(toks) and toks[i].spelling != ")":
                if toks[i].spelling != ",":
                    params.append(toks[i].spelling)
                i += 1
            body = toks[i + 1:]
        return Macro(name=cur.spelling, params=params,
                     tokens=" ".join(t.spelling for t in body),
                     header=self.header_of(cur) or "")

    # -- driver ------------------------------------------------------------
    def run(self) -> Tuple[List[Function], List[Record], List[Enum], List[Typedef], List[Macro]]:
        C = self.C
        top = [c for c in self.tu.cursor.get_children()
               if self.header_of(c) is not None]
        # pass 1: names of all records / enums (typedef'd anonymous ones
        # take the typedef's name)
        for c in top:
            if c.kind == C.TYPEDEF_DECL:
                d = self._strip_arrays(
                    c.underlying_typedef_type).get_canonical().get_declaration()
                if (d.kind in self.record_decls or d.kind == C.ENUM_DECL) \
                        and d.is_anonymous():
                    self._assign(d, c.spelling)
        for c in top:
            if c.kind in self.record_decls:
                if c.is_definition():
                    self.collect_record(c, self.decl_name(c))
                else:
                    self.note_declaration(c)
            elif c.kind == C.ENUM_DECL and c.is_definition():
                self.enum_cursors.append((c, self.decl_name(c)))

        records: Dict[str, Record] = {}
        for cur, name in self.rec_cursors:
            records.setdefault(name, self.record(cur, name))
        enums: Dict[str, Enum] = {}
        for cur, name in self.enum_cursors:
            enums.setdefault(name, self.enum(cur, name))

        funcs: Dict[str, Any] = {}
        typedefs: Dict[str, Typedef] = {}
        macros: Dict[str, Macro] = {}
        for c in top:
            if c.kind == C.FUNCTION_DECL:
                prev = funcs.get(c.spelling)
                if prev is None or (c.is_definition()
                                    and not prev.is_definition()):
                    funcs[c.spelling] = c
            elif c.kind == C.TYPEDEF_DECL:
                typedefs[c.spelling] = Typedef(
                    c.spelling, self.conv(c.underlying_typedef_type),
                    self.header_of(c) or "")
            elif c.kind == C.MACRO_DEFINITION and \
                    c.spelling.startswith(MACRO_PREFIXES):
                macros[c.spelling] = self.macro(c)  # last definition wins
        functions = {n: self.function(c) for n, c in funcs.items()}

        self._macro_functions(functions, macros)

        for name, hdr in self.referenced.items():
            if name not in records and hdr is not None:
                records[name] = Record(
                    name=name, kind="union" if name.startswith("union ")
                    else "struct", size=None, align=None, fields=[],
                    header=hdr, complete=False)

        def srt(d: Any) -> Any:
            return [d[k] for k in sorted(d)]
        return (srt(functions), srt(records), srt(enums), srt(typedefs),
                srt(macros))

    def _macro_functions(self, functions: Dict[str, Function],
                         macros: Dict[str, Macro]) -> None:
        """Function-like ibv_* macros whose expansion starts with a call
        become functions (storage "macro"), typed through their targets."""
        for m in list(macros.values()):
            if m.params is None or not m.name.startswith("ibv_"):
                continue
            body = m.tokens.split(" ")
            if len(body) < 2 or body[1] != "(" or not _IDENT.match(body[0]):
                continue
            target = body[0]
            existing = functions.get(m.name)
            if existing is not None:
                existing.macro_target = target
                continue
            functions[m.name] = Function(
                name=m.name, result=UNKNOWN, params=[], variadic="..." in
                m.params, storage="macro", macro_target=target,
                header=m.header, deprecated=False)
        # resolve macro parameter / result types through their targets
        for f in functions.values():
            if f.storage != "macro":
                continue
            tgt, seen = functions.get(f.macro_target or ""), {f.name}
            while (tgt is not None and tgt.storage == "macro"
                   and tgt.name not in seen):
                seen.add(tgt.name)
                tgt = functions.get(tgt.macro_target or "")
            names = [p for p in macros[f.name].params or [] if p != "..."]
            tparams = tgt.params if tgt is not None and tgt.storage != \
                "macro" else []
            f.params = [Param(n, tparams[i].type if i < len(tparams)
                              else UNKNOWN) for i, n in enumerate(names)]
            if tgt is not None and tgt.storage != "macro":
                f.result = tgt.result


def parse(prefix: Optional[str] = None, header: str = DEFAULT_HEADER) -> IR:
    """Parse *header* of the rdma-core install at *prefix* (None: the
    vendored headers, third_party/rdma-core) into an :class:`~generator.ir.IR`."""
    ci = _cindex()
    inc = include_dir(prefix)
    path = os.path.join(inc, header)
    if not os.path.isfile(path):
        where = f"prefix {prefix!r}" if prefix else "the system"
        raise ParseError(
            f"header <{header}> not found: {path} does not exist ({where}; "
            "install libibverbs-dev or pass --rdma-core PREFIX)")
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    args = clang_args(prefix)
    idx = ci.Index.create()
    opts = ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD
    try:
        tu = idx.parse(path, args=args, options=opts)
    except ci.TranslationUnitLoadError as e:
        raise ParseError(f"libclang could not parse {path}: {e}") from e
    errors = [d for d in tu.diagnostics
              if d.severity >= ci.Diagnostic.Error]
    if errors:
        lines = []
        for d in errors[:20]:
            loc = d.location
            fn = loc.file.name if loc.file else "<unknown>"
            lines.append(f"{fn}:{loc.line}:{loc.column}: {d.spelling}")
        raise ParseError(f"clang reported {len(errors)} error(s) parsing "
                         f"{path} with {' '.join(args)}:\n  "
                         + "\n  ".join(lines))
    roots = [os.path.normpath(inc)]
    if os.path.normpath(inc) != SYSTEM_INCLUDE:
        roots.append(SYSTEM_INCLUDE)
    p = _Parser(ci, tu, roots)
    functions, records, enums, typedefs, macros = p.run()
    return IR(source=header, sha256=sha, rdma_core=detect_release(inc),
              functions=functions, records=records, enums=enums,
              typedefs=typedefs, macros=macros)


# --------------------------------------------------------------------------
# CLI: python -m generator ir [--json] [--rdma-core PREFIX]
# --------------------------------------------------------------------------

def summary(ir: IR) -> str:
    by: Dict[str, int] = {}
    for f in ir.functions:
        by[f.storage] = by.get(f.storage, 0) + 1
    comp = sum(1 for r in ir.records if r.complete)
    return (f"{ir.source} rdma-core {ir.rdma_core or '?'} "
            f"sha256 {ir.sha256[:12]}\n"
            f"functions {len(ir.functions)} "
            f"(exported {by.get('exported', 0)}, inline "
            f"{by.get('inline', 0)}, macro {by.get('macro', 0)})\n"
            f"records {len(ir.records)} ({comp} complete), "
            f"enums {len(ir.enums)}, typedefs {len(ir.typedefs)}, "
            f"macros {len(ir.macros)}")


def main_ir(argv: Optional[Iterable[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m generator ir",
        description="Parse the rdma-core headers and print the IR.")
    ap.add_argument("--json", action="store_true",
                    help="print the full IR as JSON (default: a summary)")
    ap.add_argument("--rdma-core", metavar="PREFIX", default=None,
                    help="rdma-core install prefix or unpacked Debian "
                    "package root (default: the system headers)")
    ap.add_argument("--header", default=DEFAULT_HEADER,
                    help=f"top header (default {DEFAULT_HEADER})")
    ap.add_argument("-o", "--output", metavar="FILE",
                    help="write to FILE instead of stdout")
    a = ap.parse_args(list(argv) if argv is not None else None)
    try:
        ir = parse(a.rdma_core, a.header)
    except ParseError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.json:
        from .irjson import dump
        text = dump(ir)
    else:
        text = summary(ir) + "\n"
    if a.output:
        with open(a.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0
