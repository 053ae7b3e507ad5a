"""What the spec's rules mean, as typed data: no C text here.

generator/rules.py expands a spec rule ("same_context: cq", "size_of:
data", "qpex: setter") while the spec loads, long before any converter
exists.  It writes one of these values: what to check, which value of the
wrapper a parameter takes, which guard keeps an order, what to store on a
new object.  Each names the wrapper's values by what they are (a Ref: the
converted value of parameter `attr`, the size of the bytes argument
`data`, self's verbs pointer), and the names it holds are C identifiers
(a verb, a struct type, a constant, a member): data, never an expression.

The model holds them as they are; the emit stage writes their C
(generator/converters/rule_c.py), spelling each Ref through the converter
that declares it, so renaming a converter's local changes every
expression that uses it and nothing else spells it.

This module imports nothing of the generator (rules imports it; no circle).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from typing import Any, NamedTuple, Optional, Tuple, Union


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
    """The bytes object a bytes-like argument of parameter `param` is copied into."""
    param: str


@dataclass(frozen=True)
class ArgHandle(Ref):
    """The Python object of the handle argument `arg` of parameter `param`,
    or (`field`) of the handle a struct argument's field holds."""
    param: str
    arg: str
    field: Optional[str] = None


@dataclass(frozen=True)
class StructLocal(Ref):
    """The C struct verb parameter `param` fills member by member."""
    param: str


# --- values (a parameter's or a struct member's `value:`, an argument's `max:`) ---

@dataclass(frozen=True)
class SelfMember:
    """A member of self's verbs object (spec `self.FIELD`)."""
    member: str


@dataclass(frozen=True)
class SelfMemberBelow:
    """At most a member of self's verbs object, less one (spec `below: self.FIELD`)."""
    member: str


@dataclass(frozen=True)
class Flags:
    """The OR of C constants, and of the mask bits (MaskBits) where listed."""
    names: Tuple[Union[str, MaskBits], ...]


@dataclass(frozen=True)
class SgeOfSelf:
    """One SGE covering the whole MR (self): the value is its address, and
    the prologue (SgeOfSelfDeclared) declares it."""


@dataclass(frozen=True)
class QPExOfSelf:
    """The QPEx's struct ibv_qp_ex (spec `qpex:`)."""


# --- checks (spec `checks:`): each holds when the wrapper may go on ---

@dataclass(frozen=True)
class SameOwner:
    """The handle `handle` (of C type `ctype`) is None or its verbs object's
    `member` (context, pd) is self's (self itself when `self_is_it`)."""
    handle: ArgHandle
    ctype: str
    member: str
    self_is_it: bool


@dataclass(frozen=True)
class AllGiven:
    """Every one of the handles is given (not None)."""
    handles: Tuple[ArgHandle, ...]


@dataclass(frozen=True)
class NotGiven:
    """The handle is not given (None)."""
    handle: ArgHandle


@dataclass(frozen=True)
class StateSet:
    """The object's `state:` flag `field` is set (class `cls`)."""
    cls: str
    field: str


@dataclass(frozen=True)
class ProviderHas:
    """The provider has the function pointer `op` in self's verbs object."""
    op: str


@dataclass(frozen=True)
class WCFlagRequested:
    """The CQEx (class `cls`) was created with `flag` in its wc_flags, and
    the provider has the reader `op`."""
    cls: str
    flag: str
    op: str


@dataclass(frozen=True)
class PackedStruct:
    """The bytes-like argument (`data`) holds at least a `ctype` whose
    `size` member is its whole length."""
    data: ArgBytes
    ctype: str


@dataclass(frozen=True)
class PackedItems:
    """After a `ctype` in the bytes-like argument (`data`), exactly its
    `count` items, each an `item` whose `header` says its kind and length;
    a known kind (`kinds`: constant, C struct) at least its struct."""
    data: ArgBytes
    ctype: str
    count: str
    item: str
    header: str
    kinds: Tuple[Tuple[str, str], ...]
    kind_flags: Tuple[str, ...]


# --- what runs around the call ---

@dataclass(frozen=True)
class QPExGuard:
    """A QPEx batch step (`phase`: start, end, operation, setter) of method `method`."""
    method: str
    phase: str


@dataclass(frozen=True)
class SendIdle:
    """Refused while a QPEx batch is open on the QP (spec `posts_send:`)."""
    method: str


@dataclass(frozen=True)
class NotPolling:
    """Refused while a CQEx is mid-poll (spec `not_polling:`)."""


@dataclass(frozen=True)
class SgeOfSelfDeclared:
    """The prologue declaring the SGE that SgeOfSelf names."""


@dataclass(frozen=True)
class CompMaskBit:
    """When member `member` of the struct being filled (`target`) is
    nonzero, `bit` is set in its comp_mask."""
    target: StructLocal
    member: str
    bit: str


@dataclass(frozen=True)
class Given:
    """Whether the optional struct member with mask bit `mask` was given."""
    mask: str


@dataclass(frozen=True)
class SetOnNew:
    """Stored on the new object (of class `cls`) once it exists: its state
    `field` takes `value` (an integer, an ArgValue, a Given), or its slot
    `field` a new reference to self (`value` None)."""
    cls: str
    field: str
    value: Union[int, ArgValue, Given, None]


# --- handle attributes ---

@dataclass(frozen=True)
class MemberAddress:
    """A pointer member of self's verbs object, as an integer."""
    member: str


@dataclass(frozen=True)
class VerbOfMember:
    """`verb` called on a member of self's verbs object."""
    verb: str
    member: str


class ExplainArg(NamedTuple):
    """A verb parameter handed to an explainer as the verb got it, or
    (`member`) a member of what it points to."""
    param: str
    member: Optional[str]


class ExplainCall(NamedTuple):
    """One hand-written explainer (ibverbs/src/explain.c, ibp_explain_<name>)
    and what it is handed after the message buffer."""
    explainer: str
    args: Tuple[ExplainArg, ...]



def uses_self(value: Any) -> bool:
    """A rule's value reads self's verbs pointer (C text written in the spec
    itself, a constant, does not)."""
    if isinstance(value, (SelfPtr, SelfMember, SelfMemberBelow, SgeOfSelfDeclared,
                          SameOwner, ProviderHas, WCFlagRequested, MemberAddress, VerbOfMember)):
        return True
    if isinstance(value, (tuple, list)):
        return any(uses_self(v) for v in value)
    if is_dataclass(value) and not isinstance(value, type):
        return any(uses_self(getattr(value, f.name)) for f in fields(value))
    # C written in the spec itself (a raw `expr:`, `guard:`, `value:`)
    return isinstance(value, str) and "self_ptr" in value


def refs(value: Any) -> Tuple[Ref, ...]:
    """The wrapper's values a rule's value names (each must be declared)."""
    if isinstance(value, Ref):
        return (value,)
    if isinstance(value, (tuple, list)):
        return tuple(r for v in value for r in refs(v))
    if isinstance(value, dict):
        return tuple(r for v in value.values() for r in refs(v))
    if is_dataclass(value) and not isinstance(value, type):
        return tuple(r for f in fields(value) for r in refs(getattr(value, f.name)))
    return ()
