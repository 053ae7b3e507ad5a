"""The C of the spec's rules (generator/rule_data.py): checks, guards,
what runs before and after the call, values a parameter takes.

The spec stage and the model hold each rule as typed data; this is the one
place that writes its C, when the emit stage asks (generator/emit.py, the
converters).  A rule names the wrapper's values by what they are (a
generator.rule_data.Ref); `Refs` spells each through the converter of the
parameter that declares it (its `c_ref`), so no local is spelled here.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

from ..ctext import MASK_BITS, SELF_PTR
from ..rule_data import (AllGiven, ArgValue, CompMaskBit, Flags, Given, MaskBits, MemberAddress,
                         NotGiven, NotPolling, PackedItems, PackedStruct, ProviderHas, QPExGuard,
                         QPExOfSelf, Ref, SameOwner, SelfMember, SelfMemberBelow, SelfPtr, SendIdle,
                         SetOnNew, SgeOfSelf, SgeOfSelfDeclared, StateSet, VerbOfMember,
                         WCFlagRequested)

Spell = Callable[[Ref], str]


class RefError(Exception):
    """A rule names a value the wrapper does not declare."""


class Refs:
    """The values of one generated wrapper a rule may name: self's verbs
    pointer, the mask bits, and each verb parameter's, spelled by the
    converter class of that parameter (set as the model stage makes them)."""

    def __init__(self) -> None:
        self.kinds: Dict[str, Any] = {}      # verb parameter -> its converter class

    def spell(self, ref: Ref) -> str:
        if isinstance(ref, SelfPtr):
            return SELF_PTR
        if isinstance(ref, MaskBits):
            return MASK_BITS
        param = str(getattr(ref, "param", ""))
        kind = self.kinds.get(param)
        spelled = None if kind is None else kind.c_ref(param, ref)
        if spelled is None:
            raise RefError(f"parameter {param} has no {type(ref).__name__} a rule can use")
        return str(spelled)


def self_only(ref: Ref) -> str:
    """A getter's spelling: it has self's verbs pointer and nothing else."""
    if isinstance(ref, SelfPtr):
        return SELF_PTR
    raise RefError(f"an attribute cannot use {ref!r}")


_QPEX_PHASES = {"start": "IBP_QPEX_START", "end": "IBP_QPEX_END",
                "operation": "IBP_QPEX_OP_NEW", "setter": "IBP_QPEX_SETTER"}


def _same_owner(r: SameOwner, spell: Spell) -> str:
    obj = spell(r.handle)
    own = spell(SelfPtr()) + ("" if r.self_is_it else f"->{r.member}")
    return f"{obj} == NULL || (({r.ctype} *)IBP_HANDLE({obj})->ptr)->{r.member} == {own}"


def _packed_struct(r: PackedStruct, spell: Spell) -> str:
    data = spell(r.data)
    return (f"PyBytes_Size({data}) >= (Py_ssize_t)sizeof({r.ctype}) && "
            f"(({r.ctype} *)PyBytes_AsString({data}))->size == PyBytes_Size({data})")


def _packed_items(r: PackedItems, spell: Spell) -> str:
    data = spell(r.data)
    table = ", ".join(f"{{{k}, sizeof({v})}}" for k, v in r.kinds)
    return (f"ibp_packed_items_ok(PyBytes_AsString({data}), PyBytes_Size({data}), "
            f"sizeof({r.ctype}), (({r.ctype} *)PyBytes_AsString({data}))->{r.count}, "
            f"offsetof({r.item}, {r.header}.type), offsetof({r.item}, {r.header}.size), "
            f"(const struct ibp_packed_kind[]){{{table or '{0, 0}'}}}, {len(r.kinds)}, "
            f"{' | '.join(r.kind_flags) or '0'})")


def _set_on_new(r: SetOnNew, spell: Spell) -> str:
    if r.value is None:
        value = "Py_NewRef(self)"
    elif isinstance(r.value, Given):
        value = f"({spell(MaskBits())} & {r.value.mask}) != 0"
    elif isinstance(r.value, ArgValue):
        value = spell(r.value)
    else:
        value = str(r.value)
    return f"((struct {r.cls}Object *)return_value)->{r.field} = {value};"


def _sge_of_self(spell: Spell) -> str:
    me = spell(SelfPtr())
    return (f"struct ibv_sge sge = {{.addr = (uintptr_t){me}->addr, "
            f".length = (uint32_t){me}->length, .lkey = {me}->lkey}};")


_WRITERS: Dict[type, Callable[[Any, Spell], str]] = {
    SameOwner: _same_owner,
    AllGiven: lambda r, spell: " && ".join(f"{spell(h)} != NULL" for h in r.handles),
    NotGiven: lambda r, spell: f"{spell(r.handle)} == NULL",
    StateSet: lambda r, spell: f"((struct {r.cls}Object *)self)->{r.field}",
    ProviderHas: lambda r, spell: f"{spell(SelfPtr())}->{r.op} != NULL",
    WCFlagRequested: lambda r, spell: (f"(((struct {r.cls}Object *)self)->wc_flags & {r.flag})"
                                       f" && {spell(SelfPtr())}->{r.op} != NULL"),
    PackedStruct: _packed_struct,
    PackedItems: _packed_items,
    QPExGuard: lambda r, spell: (f'ibp_qpex_guard(self, IBP_QPEX_OP({r.method}), "{r.method}", '
                                 f"{_QPEX_PHASES[r.phase]})"),
    SendIdle: lambda r, spell: f'ibp_qp_send_idle(self, "{r.method}")',
    NotPolling: lambda r, spell: ("if (ibp_cq_check_not_polling(self) < 0) goto exit;"
                                  "  /* CQEx mid-poll: the provider holds the CQ lock */"),
    SgeOfSelfDeclared: lambda r, spell: _sge_of_self(spell),
    CompMaskBit: lambda r, spell: (f"if ({spell(r.target)}.{r.member} != 0) "
                                   f"{spell(r.target)}.comp_mask |= {r.bit};"
                                   "  /* flags need their mask bit */"),
    SetOnNew: _set_on_new,
    SelfMember: lambda r, spell: f"{spell(SelfPtr())}->{r.member}",
    SelfMemberBelow: lambda r, spell: f"{spell(SelfPtr())}->{r.member} - 1",
    Flags: lambda r, spell: " | ".join(n if isinstance(n, str) else spell(n) for n in r.names),
    SgeOfSelf: lambda r, spell: "&sge",
    QPExOfSelf: lambda r, spell: "IBP_QPEX(self)",
    MemberAddress: lambda r, spell: f"(uintptr_t){spell(SelfPtr())}->{r.member}",
    VerbOfMember: lambda r, spell: f"{r.verb}({spell(SelfPtr())}->{r.member})",
}


def c_of(value: Any, spell: Spell) -> str:
    """The C of a rule's value (a C constant or number written in the spec
    is its own spelling)."""
    if isinstance(value, Ref):
        return spell(value)
    writer = _WRITERS.get(type(value))
    if writer is not None:
        return writer(value, spell)
    if not isinstance(value, (str, int, float)):
        raise TypeError(f"no C is written for a {type(value).__name__}")
    return str(value)


def optional_c(value: Optional[Any], spell: Spell) -> Optional[str]:
    return None if value is None else c_of(value, spell)
