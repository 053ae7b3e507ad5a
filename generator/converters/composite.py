"""Parameters built from several Python arguments: a C struct filled member
by member (spec `struct: {member: arg}`), and a struct class's fields by
keyword (spec `kwargs: Class`)."""
from __future__ import annotations

from typing import Any, FrozenSet, List, Optional

from ..ctext import MASK_BITS, c_default, if_given, indented, int_convert
from ..rule_data import ArgHandle, ArgValue, StructLocal, uses_self
from ..ir import Type
from ..spec_types import Location, ParamSpec
from .args import ArgParam, context_check, hold_argument, spec_default
from .registry import Arg, Context, PARAMS, ParamConverter, REQUIRED, describe, optional_type
from .rule_c import c_of, optional_c

__all__ = ["MASK_BITS", "KwargsParam", "StructFieldsParam"]


class _Member:
    """One member of the struct: a constant, or a Python argument."""
    arg: Optional[Arg] = None
    #: the keys of its spec entry (checked by StructFieldsParam.from_spec)
    keys: FrozenSet[str] = frozenset()
    uses_self_ptr = False

    def declarations(self) -> List[str]:
        return []

    def parse(self) -> List[str]:
        raise NotImplementedError


class _ConstantMember(_Member):
    keys = frozenset({"value"})

    def __init__(self, ctx: Context, target: str, value: Any) -> None:
        # a number, a C constant or a rule's value (generator/rule_data.py)
        self.target, self.value, self.refs = target, value, ctx.refs
        ctx.check_refs(value)
        self.uses_self_ptr = uses_self(value)

    def parse(self) -> List[str]:
        return [f"{self.target} = {c_of(self.value, self.refs.spell)};"]


class _ArgMember(_Member):
    def __init__(self, ctx: Context, target: str, fspec: Any, pytype: str) -> None:
        self.target = target
        self.name = fspec.arg
        self.default = spec_default(fspec.has("default"), fspec.default)
        self.var = f"{self.name}_obj"
        self.arg = ctx.add_arg(self.name, self.default, optional_type(pytype, fspec),
                               describe(fspec.convert))
        self.mask = fspec.mask
        # the first member with a mask declares the mask (spec `mask` param)
        self.declares_mask = self.mask is not None and ctx.claim_mask()

    def declarations(self) -> List[str]:
        return [f"PyObject *{self.var} = NULL;"] + self.own_declarations() + (
            [f"int {MASK_BITS} = 0;"] if self.declares_mask else [])

    def own_declarations(self) -> List[str]:
        return []


class _IntMember(_ArgMember):
    keys = frozenset({"arg", "default", "convert", "min", "max", "mask"})

    def __init__(self, ctx: Context, target: str, t: Type, fspec: Any) -> None:
        super().__init__(ctx, target, fspec, "int")
        self.t, self.refs = t, ctx.refs
        self.lo, self.hi = fspec.min, fspec.max
        ctx.check_refs((self.lo, self.hi))
        self.uses_self_ptr = uses_self(self.lo) or uses_self(self.hi)

    def conversion(self) -> List[str]:
        return int_convert(self.var, self.target, self.t, self.name,
                           optional_c(self.lo, self.refs.spell), optional_c(self.hi, self.refs.spell))

    def parse(self) -> List[str]:
        if self.mask is not None:
            return ([f"if ({self.var} != NULL && {self.var} != Py_None) {{"]
                    + indented(self.conversion() + [f"{MASK_BITS} |= {self.mask};"]) + ["}"])
        if self.default != REQUIRED:
            return [f"{self.target} = {c_default(self.default)};"] + if_given(self.var,
                                                                                self.conversion())
        return self.conversion()


class _HandleMember(_ArgMember):
    """A member pointing to a verbs object, from a handle argument (its
    Python object is `name`, usable as a parent in `returns`)."""
    keys = frozenset({"arg", "default", "convert", "mask"})

    def __init__(self, ctx: Context, target: str, fspec: Any, where: str) -> None:
        self.cls = fspec.convert.split(":", 1)[1]
        super().__init__(ctx, target, fspec, self.cls)
        self.hctype = ctx.handle_ctype(self.cls, where)
        self.context_owner = ctx.context_owner(self.hctype)
        self.uses_self_ptr = self.context_owner is not None
        self.label = ctx.label

    def own_declarations(self) -> List[str]:
        return [f"PyObject *{self.name} = NULL;"]

    def holds(self) -> List[str]:
        return [f"{self.name}_held"]

    def hold_on_entry(self) -> List[str]:
        return hold_argument(self.var, self.cls, f"{self.name}_held")

    def parse(self) -> List[str]:
        none_ok = 1 if self.default is None else 0
        name = self.name
        lines = [f"if ({self.var} != NULL) {{",
                 f'    if (ibp_conv_handle({self.var}, "{name}", {self.cls}_Type, {none_ok}, '
                 f'&{name}) < 0)',
                 "        goto exit;", "}", f"if ({name} != NULL) {{",
                 f"    {self.target} = ({self.hctype} *)IBP_HANDLE({name})->ptr;"]
        if self.mask is not None:
            lines.append(f"    {MASK_BITS} |= {self.mask};")
        lines.append("}")
        return lines + context_check(self.context_owner, self.label, name, self.target)


@PARAMS.register("fields")
class StructFieldsParam(ParamConverter):
    """A C struct on the stack, zeroed, its members from constants (`value:`)
    and Python arguments; passed by address."""
    keys = frozenset({"struct"})

    def __init__(self, local: str, ctype: str, members: List[_Member]) -> None:
        self.local, self.ctype, self.members = local, ctype, members
        self.uses_self_ptr = any(m.uses_self_ptr for m in members)

    @staticmethod
    def local_name(cname: str) -> str:
        """The C struct filled for parameter *cname*."""
        return ArgParam.local_name(cname)

    @classmethod
    def c_ref(cls, cname: str, ref: Any) -> Optional[str]:
        if isinstance(ref, ArgValue) and ref.path is not None:
            return f"{cls.local_name(cname)}.{ref.path}"
        if isinstance(ref, StructLocal):
            return cls.local_name(cname)
        if isinstance(ref, ArgHandle) and ref.field is None:
            return str(ref.arg)      # a handle member's object: the local named after it
        return None

    @classmethod
    def from_spec(cls, ctx: Context, cname: str, t: Type, pspec: Any) -> "StructFieldsParam":
        fields = pspec.struct or {}
        pointee = t.pointee
        if pointee is None:
            ctx.fail(f"parameter {cname}: struct needs a pointer parameter")
        record = ctx.ir.record(pointee.decl or pointee.spelling)
        if record is None:
            ctx.fail(f"parameter {cname}: {pointee.spelling} is not a known struct")
        local = cls.local_name(cname)
        members: List[_Member] = []
        for path, fspec in fields.items():
            where = pspec.member_where(path)
            ft = ctx.member_type(record, path, where)
            target = f"{local}.{path}"
            if isinstance(fspec, str):
                fspec = ParamSpec(path, Location.at(where), ("arg",), arg=fspec)
            convert = fspec.convert or ""
            kind = (_ConstantMember if fspec.has("value") else
                    _HandleMember if convert.startswith("handle:") else _IntMember)
            ctx.check_keys(fspec, kind.keys, f"{cname}.{path}", where)
            if kind is _ConstantMember:
                members.append(_ConstantMember(ctx, target, fspec.value))
            elif kind is _HandleMember:
                members.append(_HandleMember(ctx, target, fspec, where))
            else:
                members.append(_IntMember(ctx, target, ft, fspec))
        return cls(local, record.name, members)

    def declarations(self) -> List[str]:
        return [f"{self.ctype} {self.local};"] + [d for m in self.members for d in m.declarations()]

    def parse(self) -> List[str]:
        return ([f"memset(&{self.local}, 0, sizeof({self.local}));"]
                + [line for m in self.members for line in m.parse()])

    def call_arg(self) -> str:
        return f"&{self.local}"

    def holds(self) -> List[str]:
        return [h for m in self.members if isinstance(m, _HandleMember) for h in m.holds()]

    def hold_on_entry(self) -> List[str]:
        return [line for m in self.members if isinstance(m, _HandleMember)
                for line in m.hold_on_entry()]


@PARAMS.register("kwargs")
class KwargsParam(ParamConverter):
    """A writable struct class's fields by keyword (`**fields`); generator/
    emit.py parses them together with the method's other arguments.
    `positional`: fields also taken by position after the arguments, where
    None means not given (the seed's modify(mask, ah_attr=None))."""
    keys = frozenset({"kwargs", "unknown", "positional"})

    def __init__(self, local: str, ctype: str, cls: str, unknown: str, positional: List[str]) -> None:
        self.local, self.ctype, self.cls = local, ctype, cls
        self.unknown, self.positional = unknown, positional

    @classmethod
    def from_spec(cls, ctx: Context, cname: str, t: Type, pspec: Any) -> "KwargsParam":
        struct_class = pspec.kwargs
        model = ctx.struct_model(struct_class)
        if model is None or not model.writable:
            ctx.fail(f"kwargs needs a writable struct class, got {struct_class}")
        return cls(f"{cname}_c", model.ctype, struct_class,
                   pspec.unknown if pspec.has("unknown") else "unknown attribute",
                   list(pspec.positional or []))

    def declarations(self) -> List[str]:
        return [f"{self.ctype} {self.local};"]

    def call_arg(self) -> str:
        return f"&{self.local}"



#: every key a `struct:` member's entry may carry, whatever its kind
MEMBER_KEYS = _ConstantMember.keys | _IntMember.keys | _HandleMember.keys
