"""C expressions that name the wrapper's values by what they are, not by
their C spelling.

generator/rules.py expands a spec rule ("same_context: cq", "size_of:
spec_bytes") while the spec loads, long before any converter exists, so it
cannot know what C local holds a converted argument.  It writes a CExpr:
C text with typed references (the converted value of parameter `attr`, the
size of the bytes argument `data`, the handle object a struct argument's
field holds, self's verbs pointer).  The model stage renders it once the
converters are known (generator/methods.py): each reference is spelled by
the converter that declares the local (`c_ref`), so renaming a converter's
local changes every expression that uses it, and nothing else spells it.

This module imports nothing of the generator (rules imports it; no circle).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Tuple, Union


class Ref:
    """A value of the wrapper, spelled by whoever declares it."""


@dataclass(frozen=True)
class SelfPtr(Ref):
    """The owner's verbs object pointer (emit.py declares it)."""


@dataclass(frozen=True)
class MaskBits(Ref):
    """The mask bits of the optional struct members given (the struct
    member converter that claims the mask declares it)."""


@dataclass(frozen=True)
class ArgValue(Ref):
    """The converted integer of verb parameter `param` (`path`: of its
    struct member)."""
    param: str
    path: Optional[str] = None


@dataclass(frozen=True)
class ArgSize(Ref):
    """The size in bytes of the bytes-like argument of parameter `param`."""
    param: str


@dataclass(frozen=True)
class ArgBytes(Ref):
    """The bytes object (PyObject *) a bytes-like argument of parameter
    `param` is copied into."""
    param: str


@dataclass(frozen=True)
class ArgHandle(Ref):
    """The PyObject * of the handle argument `arg` of parameter `param`, or
    (`field`) of the handle a struct argument's field holds."""
    param: str
    arg: str
    field: Optional[str] = None


@dataclass(frozen=True)
class StructLocal(Ref):
    """The C struct verb parameter `param` fills member by member."""
    param: str


Part = Union[str, Ref]


class CExpr:
    """C text with references in it; render() spells them."""

    def __init__(self, *parts: "Union[Part, CExpr]") -> None:
        flat: list[Part] = []
        for p in parts:
            flat.extend(p.parts if isinstance(p, CExpr) else [p] if p != "" else [])
        self.parts: Tuple[Part, ...] = tuple(flat)

    def __add__(self, other: "Union[CExpr, str]") -> "CExpr":
        return CExpr(self, other)

    def __radd__(self, other: str) -> "CExpr":
        return CExpr(other, *self.parts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CExpr) and self.parts == other.parts

    def __hash__(self) -> int:
        return hash(self.parts)

    def __repr__(self) -> str:
        return f"CExpr{self.parts!r}"

    @property
    def uses_self(self) -> bool:
        """It reads self's verbs pointer."""
        return any(isinstance(p, SelfPtr) for p in self.parts)

    def render(self, spell: Callable[[Ref], str]) -> str:
        return "".join(p if isinstance(p, str) else spell(p) for p in self.parts)

    @staticmethod
    def join(sep: str, exprs: "list[CExpr]") -> "CExpr":
        out = CExpr()
        for i, e in enumerate(exprs):
            out = out + (sep if i else "") + e
        return out


def uses_self(value: object) -> bool:
    """A spec value (a CExpr a rule made, or C text written in the spec)
    reads self's verbs pointer."""
    if isinstance(value, CExpr):
        return value.uses_self
    # C written in the spec itself (a raw `expr:`, `guard:`, `value:`)
    return isinstance(value, str) and "self_ptr" in value
