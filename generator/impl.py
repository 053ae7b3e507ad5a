"""A hand-written method with a generated parser (spec `impl:`), after
Argument Clinic's split: the generated wrapper parses its arguments with
the converters of generator/converters/ (the same registry as the verbs')
and calls `ibp_hand_<Class>_<name>_impl(self, <C values>)`, whose body is
written by hand in ibverbs/src/ (the data path's hot loops).

    poll:
      hand: "poll(num_entries)"      # names and defaults, as the docstring shows them
      keywords: true                 # METH_FASTCALL | METH_KEYWORDS
      impl: {num_entries: {convert: positive_int}}

With `short_way: true` the wrapper hands arguments given by position, as
they came (unconverted), to `ibp_hand_<Class>_<name>_short(self, ...)`
first, before it enters the call (ibp_call_enter: the fork check, self in
flight).  That hand function finishes the calls it can finish running no
Python code (post_send of a kept request, poll with the num_entries of the
last poll), which need no in-flight mark: nothing can close self
meanwhile; it makes the fork check its own way.  Everything else it hands
to the generated `ibp_<Class>_<name>_entered(self, ...)`: the call entered,
the arguments converted, the `_impl` called, as keyword calls come there
after their parsing.  Only for required arguments and methods that keep
the GIL and hold nothing (spec `holds:`).

Each `impl:` entry is a verb parameter's spec without `arg:` (the name) or
`default:` (from the signature); `ctype:` gives the C type of a plain int.
A default the signature shows by name, not as a literal (`ps=PortSpace.TCP`),
needs its C value as `c_default:` (RDMA_PS_TCP).
"""
from __future__ import annotations

import ast
from typing import Dict, List, Optional, Tuple

from .converters import REQUIRED
from .converters.registry import ParamConverter
from .ir import IR, Type, UNKNOWN
from .methods import MethodBuilder
from .model import CallingConvention, MethodKind, MethodModel
from .spec import SpecError
from .spec_types import Location, ParamSpec

#: the C types a plain-int `impl:` argument may name
INT_CTYPES = {"int": Type("int", "int", 4, True), "uint32_t": Type("uint32_t", "int", 4, False),
              "uint64_t": Type("uint64_t", "int", 8, False)}


class Named(str):
    """A signature default that is a name (PortSpace.TCP), not a literal."""


def _default(text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return Named(text)


def shown_param(param: str, impl: Optional[Dict[str, Optional[ParamSpec]]], ir: IR) -> str:
    """A `hand:` parameter as the text signature shows it: a default given by
    name (`ps=PortSpace.TCP`) as the number of its `c_default:`, the enum
    constant (RDMA_PS_TCP = 262).  inspect evaluates a text signature's
    defaults where the method's module has no such name: CPython 3.9 raised
    RuntimeError, out of help(ibverbs) too, and later ones drop the
    signature.  The docstring's words name the member."""
    name, eq, text = (part.strip() for part in param.partition("="))
    entry = impl.get(name) if impl is not None else None
    if not eq or entry is None or not isinstance(_default(text), Named):
        return param
    c_value = entry.c_default
    if c_value is None:
        return param
    if isinstance(c_value, int):
        return f"{name}={c_value}"
    value = next((m.value for e in ir.enums for m in e.members if m.name == c_value), None)
    if value is None:
        raise SpecError(f"{entry.where('c_default')}: impl: {name}: c_default {c_value} is no "
                        f"enum constant of {ir.source}")
    return f"{name}={value}"


def signature_params(sig: str) -> List[Tuple[str, object]]:
    """("name", default or REQUIRED) of a `hand:` signature."""
    inner = sig[sig.index("(") + 1:sig.rindex(")")].strip()
    out: List[Tuple[str, object]] = []
    for part in (p.strip() for p in inner.split(",") if p.strip()):
        name, eq, default = part.partition("=")
        out.append((name.strip(), _default(default.strip()) if eq else REQUIRED))
    return out


class ImplBuilder(MethodBuilder):
    """The model of a hand method's generated wrapper; `ctx` of its converters."""

    def build_impl(self, flags: CallingConvention, doc: str, signature: str,
                   verbs: List[str]) -> MethodModel:
        if not self.m.owner:
            self.fail("impl: is for methods (the wrapper marks self in flight)", "impl")
        node = self.m.impl or {}
        params = signature_params(self.m.hand or "")
        names = [n for n, _ in params]
        for key in node:
            if key not in names:
                self.fail(f"impl: {key!r} is not an argument of {self.m.hand}", "impl")
        converters = []
        for name, default in params:
            if name not in node:
                self.fail(f"impl: argument {name!r} needs a converter", "impl")
            where = self.m.impl_where[name]
            entry = node[name] or ParamSpec(name, Location.at(where))
            for key in ("arg", "default"):
                if entry.has(key):
                    raise SpecError(f"{entry.where(key)}: {self.label}: impl: {name}: {key} "
                                    "comes from the signature")
            c_value = entry.c_default
            pspec = entry.without("c_default").with_values(arg=name)
            if isinstance(default, Named) and c_value is None:
                self.fail(f"impl: {name}: the default {default} is a name: give its C "
                          "value as c_default", "impl")
            if c_value is not None and not isinstance(default, Named):
                self.fail(f"impl: {name}: c_default is only for a default shown by name",
                          "impl")
            if default is not REQUIRED:
                pspec = pspec.with_values(default="None" if default is None else
                                          c_value if c_value is not None else default)
            ctype = pspec.ctype
            pspec = pspec.without("ctype")
            if ctype is not None and ctype not in INT_CTYPES:
                self.fail(f"impl: {name}: ctype must be one of {', '.join(INT_CTYPES)}", "impl")
            converters.append(self.param(name, INT_CTYPES.get(str(ctype), UNKNOWN), pspec, where))
        impl = f"ibp_hand_{self.cname}_impl"
        short_way = self._short_way(converters, flags)
        return MethodModel(self.m.name, self.m.owner, self.cname, flags, doc, kind=MethodKind.IMPL,
                           verbs=verbs, signature=signature, args=self.args, params=converters,
                           impl=impl, impl_params=[(p.impl_ctype, p.name)  # type: ignore[attr-defined]
                                                   for p in converters],
                           short_way=short_way and f"ibp_hand_{self.cname}_short",
                           entered=short_way and f"ibp_{self.cname}_entered")

    def _short_way(self, converters: List[ParamConverter], flags: CallingConvention) -> Optional[str]:
        """Whether spec `short_way: true` asks for the hand short way (a
        truthy string then), checked against what it needs."""
        value = self.m.short_way
        if value is False:
            return None
        if value is not True:
            self.fail("short_way: true or false", "short_way")
        if flags not in (CallingConvention.O, CallingConvention.FASTCALL_KW):
            self.fail("short_way: needs its arguments by position: one argument, or "
                      "keywords: true", "short_way")
        for arg in self.args:
            if not arg.required:
                self.fail(f"short_way: argument {arg.name!r} must be required (the short "
                          "way takes the arguments by position)", "short_way")
        return "short_way"
