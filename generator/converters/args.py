"""Parameters converted from one Python argument, by the spec's `convert:`
kind (none: an int, or an address for a `void *`)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from ..rule_data import ArgHandle, ArgValue, uses_self
from ..ctext import UINT32, UINT64, c_default, host_to_be32, if_given, int_convert
from ..enum_fields import c_index as enum_c_index
from ..ir import Type
from .fields import HandleField
from .registry import Context, GID_LIKE, PARAMS, ParamConverter, REQUIRED, describe, optional_type
from .rule_c import c_of, optional_c, self_only


def spec_default(written: bool, value: Any) -> Any:
    """A spec default: not written -> REQUIRED; "None" (YAML has no None) -> None."""
    if not written:
        return REQUIRED
    return None if value in ("None", "null") else value


class ArgParam(ParamConverter):
    """A parameter taken from the Python argument `name` (PyObject *name_obj)."""
    base_pytype = "int"
    keys = frozenset({"arg", "default", "convert"})
    parse_can_fail = True      # a conversion of a Python object

    def __init__(self, ctx: Context, cname: str, t: Type, pspec: Any) -> None:
        self.cname = cname
        self.t = t
        self.name = pspec.arg
        self.default = spec_default(pspec.has("default"), pspec.default)
        self.var = f"{self.name}_obj"
        self.local = self.local_name(cname)
        self.arg = ctx.add_arg(self.name, self.default, optional_type(self.pytype_of(pspec), pspec),
                               describe(pspec.convert))

    @classmethod
    def from_spec(cls, ctx: Context, cname: str, t: Type, pspec: Any) -> "ArgParam":
        return cls(ctx, cname, t, pspec)

    @staticmethod
    def local_name(cname: str) -> str:
        """The C local holding the converted value of parameter *cname*."""
        return f"{cname}_c"

    def pytype_of(self, pspec: Any) -> str:
        return self.base_pytype

    @property
    def optional(self) -> bool:
        return bool(self.default != REQUIRED)

    def declarations(self) -> List[str]:
        return [f"PyObject *{self.var} = NULL;"] + self.own_declarations()

    def declarations_but_argument(self) -> List[str]:
        return self.own_declarations()

    def own_declarations(self) -> List[str]:
        return []

    def when_given(self, lines: List[str]) -> List[str]:
        return if_given(self.var, lines) if self.optional else lines

    @property
    def impl_ctype(self) -> str:
        """The C type a hand-written `_impl` takes the value as (generator/impl.py)."""
        return self.t.spelling


def integer_ref(cls: Any, cname: str, ref: Any) -> Optional[str]:
    """An integer argument's converted value (a rule's ArgValue): its local."""
    if isinstance(ref, ArgValue) and ref.path is None:
        return str(cls.local_name(cname))
    return None


@PARAMS.register("int")
class IntParam(ArgParam):
    """An integer of the parameter's C type, range-checked (spec `min`/`max`
    may be C expressions)."""
    keys = ArgParam.keys | {"min", "max"}

    def __init__(self, ctx: Context, cname: str, t: Type, pspec: Any) -> None:
        # the enum or flag class it takes (AccessFlags, QPAttrMask, ...)
        self.enum_class = ctx.arg_enum(str(pspec.arg))
        super().__init__(ctx, cname, t, pspec)
        # each a number, a C constant or a rule's value (generator/rule_data.py)
        self.lo, self.hi = pspec.min, pspec.max
        ctx.check_refs((self.lo, self.hi))
        self.refs = ctx.refs
        self.uses_self_ptr = uses_self(self.lo) or uses_self(self.hi)

    @classmethod
    def c_ref(cls, cname: str, ref: Any) -> Optional[str]:
        return integer_ref(cls, cname, ref)

    def own_declarations(self) -> List[str]:
        init = c_default(self.default) if self.optional else "0"
        return [f"{self.t.spelling} {self.local} = {init};"]

    def pytype_of(self, pspec: Any) -> str:
        return f"{self.enum_class} | int" if self.enum_class else self.base_pytype

    def parse(self) -> List[str]:
        refuse_other_enums = [] if self.enum_class is None else [
            f"if (!PyLong_CheckExact({self.var})",
            f'        && ibp_enum_check({enum_c_index(self.enum_class)}, {self.var}, "{self.name}") < 0)',
            "    goto exit;"]
        lo, hi = (optional_c(v, self.refs.spell) for v in (self.lo, self.hi))
        return self.when_given(refuse_other_enums + int_convert(self.var, self.local, self.t,
                                                                self.name, lo, hi))

    def call_arg(self) -> str:
        return self.local


class UnsignedParam(ArgParam):
    """An unsigned integer held in a C variable of type `held`, passed to
    the verb as `call_format` makes it (a cast, a byte swap)."""
    held: Type = UINT64
    meaning = ""
    call_format = "{}"

    @classmethod
    def describe(cls, convert: str) -> str:
        return cls.meaning

    @classmethod
    def c_ref(cls, cname: str, ref: Any) -> Optional[str]:
        return integer_ref(cls, cname, ref)

    def own_declarations(self) -> List[str]:
        return [f"{self.held.spelling} {self.local} = 0;"]

    def parse(self) -> List[str]:
        return self.when_given(int_convert(self.var, self.local, self.held, self.name))

    def call_arg(self) -> str:
        return self.call_format.format(self.local)


@PARAMS.register("address")
class AddressParam(UnsignedParam):
    """A `void *` from an int (an address in this process)."""
    held = UINT64
    meaning = "an address (int)"
    call_format = "(void *)(uintptr_t){}"


@PARAMS.register("be32")
class Be32Param(UnsignedParam):
    """Host order in Python, network order in C (imm_data)."""
    held = UINT32
    meaning = "a 32-bit int, in host order"

    def call_arg(self) -> str:
        return host_to_be32(self.local)


class ClassArgParam(ArgParam):
    """An argument whose `convert:` names one of our classes (`kind:Class`):
    that class is its Python type and what its docstring says it takes."""

    def __init__(self, ctx: Context, cname: str, t: Type, pspec: Any) -> None:
        self.cls = pspec.convert.split(":", 1)[1]
        super().__init__(ctx, cname, t, pspec)

    def pytype_of(self, pspec: Any) -> str:
        return str(self.cls)

    @classmethod
    def describe(cls, convert: str) -> Optional[str]:
        return f"a {convert.split(':', 1)[1]}"


@PARAMS.register("handle")
class HandleParam(ClassArgParam):
    """A verbs object from its handle class (`handle:PD`), None allowed when
    the default is None; it must belong to the owner's device context."""

    def __init__(self, ctx: Context, cname: str, t: Type, pspec: Any) -> None:
        super().__init__(ctx, cname, t, pspec)
        self.hctype = ctx.handle_ctype(self.cls)
        self.context_owner = ctx.context_owner(self.hctype)
        self.uses_self_ptr = self.context_owner is not None
        self.label = ctx.label

    @classmethod
    def c_ref(cls, cname: str, ref: Any) -> Optional[str]:
        if isinstance(ref, ArgHandle) and ref.field is None:
            return str(ref.arg)      # its object: the local named after it
        return None

    def own_declarations(self) -> List[str]:
        return [f"PyObject *{self.name} = NULL;", f"{self.hctype} *{self.local} = NULL;"]

    def holds(self) -> List[str]:
        return [f"{self.name}_held"]

    def hold_on_entry(self) -> List[str]:
        return hold_argument(self.var, self.cls, f"{self.name}_held")

    def parse(self) -> List[str]:
        none_ok = 1 if self.default is None else 0
        return [f"if ({self.var} != NULL) {{",
                f'    if (ibp_conv_handle({self.var}, "{self.name}", {self.cls}_Type, {none_ok}, '
                f'&{self.name}) < 0)',
                "        goto exit;",
                f"    if ({self.name} != NULL)",
                f"        {self.local} = ({self.hctype} *)IBP_HANDLE({self.name})->ptr;",
                "}"] + context_check(self.context_owner, self.label, self.name, self.local)

    def call_arg(self) -> str:
        return self.local


def hold_argument(var: str, cls: str, held: str) -> List[str]:
    """Hold a handle argument (when it is one of cls; anything else fails
    its conversion) for the whole call."""
    return [f"if (ibp_hold({var}, {cls}_Type, &{held}) < 0)", "    goto exit;"]


def context_check(owner_ctx: Optional[Any], label: str, name: str, local: str) -> List[str]:
    """Handles passed to a verb must belong to the same device context
    (owner_ctx: self's, a rule_data value; None: nothing to check)."""
    if owner_ctx is None:
        return []
    return [f"if ({local} != NULL && {local}->context != {c_of(owner_ctx, self_only)}) {{",
            f'    PyErr_SetString(PyExc_ValueError, "{label}: {name} belongs to another context");',
            "    goto exit;", "}"]


class HeldStructHandles:
    """The handles a struct argument names, held for the call, then checked
    and written into its C struct (X_prepare) in its critical section: a
    close() either sees the hold or is over.  Mixed into the converters of
    a struct object, the verbs' (`struct:`) and a hand `_impl`'s
    (`struct_instance:`); `struct_var` is the local its object is in."""

    name: str
    cls: str
    handle_fields: List[str]
    handle_classes: Dict[str, str]

    @property
    def struct_var(self) -> str:
        raise NotImplementedError

    def _held_struct_model(self, ctx: Context) -> Any:
        model = ctx.struct_model(self.cls)
        if model is None:
            ctx.fail(f"unknown struct class {self.cls}")
        self.handle_fields = [f.name for f in model.handle_fields]
        self.handle_classes = {f.name: f.handle for f in model.handle_fields}
        return model

    def lock_declarations(self) -> List[str]:
        if not self.handle_fields:
            return []
        return [f"ibp_lock_t {self.name}_lock;", f"int {self.name}_locked = 0;"]

    def holds(self) -> List[str]:
        return [self.held_local(self.name, f) for f in self.handle_fields]

    @staticmethod
    def held_local(arg: str, field: str) -> str:
        """The local holding the handle in field *field* of struct argument
        *arg* for the call (a new object's parent is that one)."""
        return f"{arg}_{field}_held"

    def hold_handles(self) -> List[str]:
        """Its handles as they are now (a later argument's conversion may
        have set them again), held, then checked and written into its
        struct (X_prepare): a close() either sees the hold or is over.
        From here until the call returns it is in its critical section
        (common.h, "threads"): no other thread sets its handles or its C
        struct while this call reads them."""
        if not self.handle_fields:
            return []
        n, v = self.name, self.struct_var
        lines = [f"/* {n}'s handles held as they are now, then checked open */",
                 f"ibp_lock(&{n}_lock, {v});", f"{n}_locked = 1;"]
        # Only an object of the field's class is held (the field stores any
        # object, as the seed's did; X_prepare refuses another).
        for f in self.handle_fields:
            lines += [f"if (ibp_hold({v}->{HandleField.ref_member(f)}, "
                      f"{self.handle_classes[f]}_Type, &{self.held_local(n, f)}) < 0)",
                      "    goto exit;"]
        # A hold that waits for its object's lock suspends this one: a
        # handle set meanwhile is not the one held.
        same = " || ".join(f"{v}->{HandleField.ref_member(f)} != {self.held_local(n, f)}"
                           for f in self.handle_fields)
        return lines + [f"if ({self.cls}_prepare({v}) < 0)", "    goto exit;",
                        f"if ({same}) {{",
                        f'    PyErr_SetString(PyExc_RuntimeError, "{n} was set by another thread '
                        'during this call");',
                        "    goto exit;", "}"]

    def cleanup(self) -> List[str]:
        if not self.handle_fields:
            return []
        return [f"if ({self.name}_locked)", f"    ibp_unlock(&{self.name}_lock);"]


@PARAMS.register("struct")
class StructObjectParam(HeldStructHandles, ClassArgParam):
    """A struct class object (`struct:QPAttr`), passed as a pointer to its C
    struct; its handle members are written in just before the call."""

    def __init__(self, ctx: Context, cname: str, t: Type, pspec: Any) -> None:
        super().__init__(ctx, cname, t, pspec)
        self.ctype = self._held_struct_model(ctx).ctype

    @property
    def struct_var(self) -> str:
        return self.name

    @classmethod
    def c_ref(cls, cname: str, ref: Any) -> Optional[str]:
        if isinstance(ref, ArgHandle) and ref.field is not None:
            return f"{ref.arg}->{HandleField.ref_member(ref.field)}"
        return None

    def own_declarations(self) -> List[str]:
        return [f"struct {self.cls}Object *{self.name} = NULL;"] + self.lock_declarations()

    def released_declarations(self) -> List[str]:
        return [f"{self.ctype} {self.name}_c;"]

    def hold_for_call(self, released: bool) -> List[str]:
        lines: List[str] = []
        if released:
            # another thread may set its fields (or prepare it for a call
            # of its own) while this one runs
            lines.append(f"{self.name}_c = {self.name}->c;")
        return lines

    def after_call(self, released: bool) -> List[str]:
        # what the verb wrote back (ibv_create_qp's actual capabilities)
        return [f"{self.name}->c = {self.name}_c;"] if released else []

    def released_call_arg(self) -> str:
        return f"&{self.name}_c"

    def parse(self) -> List[str]:
        cls, name, var = self.cls, self.name, self.var
        lines = [f"if (!PyObject_TypeCheck({var}, {cls}_Type)) {{",
                 f'    PyErr_Format(PyExc_TypeError, "{name} must be a {cls}, not %s", '
                 f'ibp_type_name({var}));',
                 "    goto exit;", "}", f"{name} = (struct {cls}Object *){var};"]
        # Its handles are checked and written in by hold_handles() alone, in
        # its critical section: X_prepare() writes the C struct, which
        # another thread may be reading or setting.
        return lines

    def call_arg(self) -> str:
        return f"&{self.name}->c"


@PARAMS.register("gid")
class GidParam(ArgParam):
    """A 16-byte GID (a Gid or bytes)."""
    base_pytype = GID_LIKE

    @classmethod
    def describe(cls, convert: str) -> str:
        return "a 16-byte GID (Gid or bytes)"

    def own_declarations(self) -> List[str]:
        return [f"union ibv_gid {self.local};"]

    def parse(self) -> List[str]:
        return [f'if (ibp_conv_gid({self.var}, "{self.name}", &{self.local}) < 0)', "    goto exit;"]

    def call_arg(self) -> str:
        return f"&{self.local}" if self.t.kind == "pointer" else self.local


@PARAMS.register("wc")
class WcParam(ArgParam):
    """A work completion (WC) copied into a struct ibv_wc."""
    base_pytype = "WC"

    @classmethod
    def describe(cls, convert: str) -> str:
        return "a WC (work completion)"

    def own_declarations(self) -> List[str]:
        return [f"struct ibv_wc {self.local};"]

    def parse(self) -> List[str]:
        return [f"if (ibp_wc_to_c({self.var}, &{self.local}) < 0)", "    goto exit;"]

    def call_arg(self) -> str:
        return f"&{self.local}"
