"""Intermediate representation of the rdma-core verbs API.

Plain dataclasses, produced by :mod:`generator.parse` (the only module that
talks to libclang) and consumed by the later generator stages.  The IR holds
no absolute paths and no line numbers so that dumps (see
:mod:`generator.irjson`) can be diffed across rdma-core releases.

Conventions
-----------
* ``Type.spelling`` is clang's spelling of the type as written (typedef names
  are kept: ``uint32_t``, ``__be32``); ``Type.kind`` is the kind of the
  *canonical* type (``uint32_t`` -> ``"int"``).
* Anonymous records get synthetic names (see :data:`ANON_RULES`); a Type whose
  spelling would mention one uses the synthetic name instead of clang's
  ``(unnamed at /path:line:col)``.
* ``Field.offset`` is in bytes.  For bit-fields ``bit_offset`` is the offset in
  bits from the start of the record and ``offset == bit_offset // 8``; both
  ``bit_offset`` and ``bit_width`` are ``None`` for ordinary fields.
* An anonymous struct/union member is a ``Field`` with ``name == ""`` whose
  type is the anonymous record (which is also listed in ``IR.records``).  The
  offsets of the anonymous record's fields are relative to that record.
* A Type that is not known (parameters of a function-like macro whose target
  is not in the IR) is :data:`UNKNOWN` (``kind == "other"``, spelling ``""``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

TYPE_KINDS = ("void", "int", "bool", "float", "pointer", "array", "struct",
              "union", "enum", "function", "other")
STORAGES = ("exported", "inline", "macro")

#: How anonymous records/enums are named (documentation; parse.py implements it).
ANON_RULES = """\
record that is the type of a named field F of record P: "<kw> <P without kw>::F"
    e.g. "union ibv_send_wr::wr", "struct ibv_send_wr::wr::rdma"
anonymous member (no field name) of record P:      "<kw> <P without kw>::(anonymous at field X)"
    where X is the first named field of the anonymous record (searching
    depth-first through nested anonymous members); "#N" (N = index among the
    parent's fields) is used when it has no named field at all
    e.g. "union ibv_wc::(anonymous at field imm_data)"
typedef'd anonymous record or enum:                 the typedef name
other anonymous enum:                               "enum (anonymous at member M)", M its first member
other anonymous top-level record:                   "<kw> (anonymous at field X)"
"""


@dataclass(frozen=True)
class Type:
    spelling: str
    kind: str
    size: Optional[int] = None
    signed: Optional[bool] = None
    pointee: Optional["Type"] = None
    element: Optional["Type"] = None
    count: Optional[int] = None
    decl: Optional[str] = None
    const: bool = False


UNKNOWN = Type(spelling="", kind="other")


@dataclass
class Field:
    name: str
    type: Type
    offset: int
    bit_offset: Optional[int] = None
    bit_width: Optional[int] = None


@dataclass
class Record:
    name: str
    kind: str
    size: Optional[int]
    align: Optional[int]
    fields: List[Field]
    header: str
    complete: bool


@dataclass
class Param:
    name: str
    type: Type


@dataclass
class Function:
    name: str
    result: Type
    params: List[Param]
    variadic: bool
    storage: str
    macro_target: Optional[str]
    header: str
    deprecated: bool = False


@dataclass
class EnumMember:
    name: str
    value: int


@dataclass
class Enum:
    name: str
    members: List[EnumMember]
    header: str
    signed: bool
    size: int


@dataclass
class Typedef:
    name: str
    target: Type
    header: str


@dataclass
class Macro:
    name: str
    params: Optional[List[str]]
    tokens: str
    header: str


@dataclass
class IR:
    source: str
    sha256: str
    rdma_core: Optional[str]
    functions: List[Function] = field(default_factory=list)
    records: List[Record] = field(default_factory=list)
    enums: List[Enum] = field(default_factory=list)
    typedefs: List[Typedef] = field(default_factory=list)
    macros: List[Macro] = field(default_factory=list)

    # -- convenience lookups (not serialised) --------------------------------
    def function(self, name: str) -> Optional[Function]:
        return next((f for f in self.functions if f.name == name), None)

    def record(self, name: str) -> Optional[Record]:
        return next((r for r in self.records if r.name == name), None)

    def enum(self, name: str) -> Optional[Enum]:
        return next((e for e in self.enums if e.name == name), None)

    def typedef(self, name: str) -> Optional[Typedef]:
        return next((t for t in self.typedefs if t.name == name), None)

    def macro(self, name: str) -> Optional[Macro]:
        return next((m for m in self.macros if m.name == name), None)
