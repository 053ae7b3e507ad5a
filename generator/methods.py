"""One generated verb wrapper: spec method + IR function -> MethodModel.

Each C parameter of the verb gets a converter (generator/converters/) by
the kind its spec entry names; the builder is also the context converters
are made in (`ctx`: add_arg, handle_ctype, ...).  What surrounds the call
(symbol checks, `checks`, the error convention, what it returns) is kept
as data; generator/emit.py writes the C.
"""
from __future__ import annotations

from typing import AbstractSet, Any, Dict, List, NoReturn, Optional, Tuple, cast

from . import docstrings, gil
from .converters import PARAMS, REQUIRED, RETURNS, Arg, ParamConverter, ReturnConverter
from .converters.args import ArgParam
from .converters.returns import ParentSource
from .converters.rule_c import Refs
from .ctext import is_int, py_repr_default
from .rule_data import MaskBits, Ref, SelfMember, SelfPtr, refs as rule_refs, uses_self
from .ir import Function, Param, Record, Type
from .members import find_field, member_type
from .model import CallingConvention, Check, Explain, MethodModel, OptionalSymbol, StructModel
from .spec import Method, SpecError, check_keys
from .spec_types import Location, ParamEntry, ParamSpec, ReturnsNew

#: `convert:` kinds the parameter's C type decides (an int, or an address
#: for a `void *`) rather than the kind's own converter
BY_TYPE = ("int", "address")
#: every key a parameter's spec entry may carry, whatever its kind
PARAM_KEYS = frozenset().union(*(c.keys for c in PARAMS.by_kind.values()))
#: parameters written as a plain word in the spec
WORD_KINDS = ("self", "out", "scratch", "mask")


class MethodBuilder:
    """The model of one generated verb wrapper."""

    def __init__(self, b: Any, m: Method, label: str, cname: str) -> None:
        self.b = b              # the generator.builder.Builder
        self.ir = b.ir
        self.m = m
        self.label = label
        self.cname = cname
        self.args: List[Arg] = []
        self.targets = b.targets    # Context.targets
        self.mask_claimed = False
        self.param_types: Dict[str, Type] = {}    # the verb's parameters
        # the wrapper's values its rules name, spelled when it is emitted
        self.refs = Refs()

    def where(self, key: Optional[str]=None) -> str:
        return self.m.where(key)

    def fail(self, msg: str, key: Optional[str]=None) -> NoReturn:
        raise SpecError(f"{self.where(key)}: {self.label}: {msg}")

    def fail_at(self, where: str, msg: str) -> NoReturn:
        raise SpecError(f"{where}: {self.label}: {msg}")

    # -- what converters ask for (ctx) --
    def add_arg(self, name: str, default: Any, pytype: str, meaning: Optional[str] = None) -> Arg:
        required = default == REQUIRED
        if required and any(not a.required for a in self.args):
            self.fail(f"required argument {name!r} follows an argument with a default "
                      "(reorder the spec)")
        arg = Arg(name, required, None if required else py_repr_default(default), pytype, meaning)
        self.args.append(arg)
        return arg

    def check_keys(self, node: Any, keys: AbstractSet[str], what: str, where: str) -> None:
        """Refuse a key of the spec entry *node* that its converter does not
        declare (generator/converters/: `keys`)."""
        if not isinstance(node, ParamSpec):
            check_keys(node, keys, f"{self.label}: {what}", where)
            return
        for key in node.keys:
            if key not in keys:
                at = node.where(key) if key in node.location.key_lines else where
                raise SpecError(f"{at}: {self.label}: {what}: unknown key {key!r} "
                                f"(expected one of: {', '.join(sorted(keys))})")

    def claim_mask(self) -> bool:
        """True for the first member that adds to the mask (it declares it)."""
        first = not self.mask_claimed
        self.mask_claimed = True
        return first

    def handle_ctype(self, cls: str, where: Optional[str] = None) -> str:
        if cls not in self.b.handle_names:
            if where is not None:
                raise SpecError(f"{where}: {self.label}: unknown handle class {cls}")
            self.fail(f"unknown handle class {cls}")
        return str(self.b.spec.handle(cls).ctype)

    def struct_model(self, cls: str) -> Optional[StructModel]:
        return cast(Optional[StructModel], self.b.struct_models.get(cls))

    def struct_class_of(self, ctype: str) -> Optional[str]:
        return cast(Optional[str], self.b.struct_by_ctype.get(ctype))

    def member_type(self, record: Record, path: str, where: str) -> Type:
        return member_type(self.ir, record, path, where)

    def context_owner(self, hctype: str) -> Optional[Any]:
        """The owner's device context (self's verbs pointer, or its member),
        when a handle of C type *hctype* passed to the verb must belong to
        it (None: nothing to check)."""
        if not self.m.owner:
            return None
        record = self.ir.record(hctype)
        if record is None or find_field(self.ir, record, "context") is None:
            return None
        owner_ctype = self.b.spec.handle(self.m.owner).ctype
        return SelfPtr() if owner_ctype == "struct ibv_context" else SelfMember("context")

    def check_refs(self, value: Any) -> None:
        """Every value of the wrapper a rule's value (generator/rule_data.py)
        names is one its converters declare."""
        for ref in rule_refs(value):
            self.check_ref(ref)

    def check_ref(self, ref: Ref) -> None:
        """self's pointer and the mask are the wrapper's; a parameter's value
        must be one its kind's converter declares."""
        if isinstance(ref, (SelfPtr, MaskBits)):
            return
        cname = str(getattr(ref, "param", ""))
        spec_params = self.m.params or {}
        if cname not in spec_params or cname not in self.param_types:
            self.fail(f"a rule refers to parameter {cname!r}, which the verb does not have")
        pspec = _entry(cname, spec_params[cname], self.where("params"))
        kind = self.param_kind(cname, self.param_types[cname], pspec, self.where("params"))
        if PARAMS[kind].c_ref(cname, ref) is None:
            self.fail(f"parameter {cname} ({kind}) has no {type(ref).__name__} a rule can use")
    # -- the model --
    def verb_function(self) -> Tuple[Function, List[Param]]:
        verb = self.m.verb
        f = self.ir.function(verb)
        if f is None:
            self.fail(f"no function {verb} in {self.ir.source}", "verb")
        params = f.params
        if f.macro_target:
            target = self.ir.function(f.macro_target)
            if target is not None and len(target.params) == len(f.params):
                params = target.params
        return f, params

    def converters(self, f: Function, params: Any) -> List[ParamConverter]:
        spec_params = self.m.params or {}
        names = [p.name for p in params]
        self.param_types = {p.name: p.type for p in params}
        for key in spec_params:
            if key not in names:
                self.fail(f"{f.name} has no parameter {key!r} (it has: {', '.join(names)})",
                          "params")
        out = []
        for p in params:
            if p.name not in spec_params:
                self.fail(f"parameter {p.name!r} of {f.name} is not mapped", "params")
            out.append(self.param(p.name, p.type, spec_params[p.name], self.m.param_where[p.name]))
        return out

    def build(self) -> MethodModel:
        m = self.m
        f, params = self.verb_function()
        converters = self.converters(f, params)
        owner = self.b.spec.handle(m.owner) if m.owner else None
        symbols = [OptionalSymbol(sym, self.b.spec.optional[sym]) for sym in self.required_symbols(f)]
        self.check_refs([chk.expr for chk in m.checks])
        for value in (m.guard, m.prologue, m.epilogue):
            self.check_refs(value)
        returns = self.returns(f.result)
        has_kwargs = any(p.kind == "kwargs" for p in converters)
        mm = MethodModel(
            m.name, m.owner, self.cname,
            CallingConvention.VARARGS_KW if (self.args or has_kwargs) else CallingConvention.NOARGS,
            "", args=self.args, verbs=[f.name] + list(m.verbs),
            verb=f.name, params=converters, param_names=[p.name for p in params],
            result_spelling=None if f.result.kind == "void" else f.result.spelling,
            owner_ctype=owner.ctype if owner else None,
            owner_is_subclass=bool(owner and owner.has("base")),
            symbols=symbols,
            checks=[Check(chk.expr, chk.error, chk.message) for chk in m.checks],
            explain=self.explain(params, converters),
            guard=m.guard, prologue=m.prologue,
            epilogue=m.epilogue, errors=m.errors, refs=self.refs,
            release_gil=self.releases_gil(f.name), returns=returns,
            uses_self_ptr=bool(m.owner) and (
                any(p.uses_self_ptr for p in converters)
                or any(uses_self(chk.expr) for chk in m.checks)
                or any(uses_self(value) for value in (m.guard, m.prologue, m.epilogue))))
        mm.result_pytype = returns.pytype([p.output_pytype or "Any" for p in mm.outputs])
        mm.signature = m.signature or self.signature()
        try:
            text = docstrings.compose(mm, self.label, m, f.name, f.storage, self.b.spec,
                                      self.b.handle_names, self.b.named_default)
        except docstrings.DocError as exc:
            self.fail(str(exc).split(": ", 1)[1], "doc")
        mm.doc = f"{mm.signature}\n--\n\n{text}"
        return mm

    def explain(self, params: Any, converters: List[ParamConverter]) -> List[Explain]:
        """`explain:` errno (or `any`) -> the explainers tried (read at spec
        load, generator/rules.py), each handed verb parameters as the verb
        got them."""
        node = self.m.explain
        if node is None:
            return []
        passed = {p.name for p in params}
        out = []
        for err, calls in node.items():
            for call in calls:
                for arg in call.args:
                    if arg.param not in passed:
                        self.fail(f"explain: {call.explainer}: {arg.param!r} is not a parameter "
                                  f"of {self.m.verb}", "explain")
            out.append(Explain(None if err == "any" else str(err), list(calls)))
        return out

    def arg_enum(self, arg: str) -> Optional[str]:
        """The enum or flag class argument `arg` takes (spec/docs.yaml's
        docs.enums, "Class.arg" first), when the enums hold it: its stub
        names it, a member of another enum class is a TypeError."""
        docs = self.b.spec.doc_enums
        cls = docs.get(f"{self.m.owner}.{arg}") or docs.get(arg)
        return cls if cls in getattr(self.b, "enum_models", {}) else None

    def releases_gil(self, verb: str) -> bool:
        """The verb's GIL rule: the method's own `gil:`, else its kind's
        (spec/gil.yaml)."""
        try:
            return gil.releases(self.b.spec.gil_kinds, verb, self.where("verb"),
                                self.m.gil)
        except gil.GilError as exc:
            raise SpecError(f"{exc}") from None

    def signature(self) -> str:
        parts = ["$self", "/"] if self.m.owner else []
        parts += [a.name if a.required else f"{a.name}={a.default_doc}" for a in self.args]
        return f"{self.m.name}({', '.join(parts)})"

    def required_symbols(self, f: Function) -> List[str]:
        syms = []
        if f.storage == "exported" and f.name in self.b.spec.optional:
            syms.append(f.name)
        if f.macro_target and f.macro_target in self.b.spec.optional:
            syms.append(f.macro_target)
        for sym in self.m.requires:
            if sym not in self.b.spec.optional:
                self.fail(f"requires {sym}, which is not listed under symbols.optional",
                          "requires")
            syms.append(sym)
        return syms

    # -- parameters --
    def param_kind(self, cname: str, t: Type, pspec: Any, where: str) -> str:
        """The PARAMS kind of a spec parameter entry (a word or a mapping)."""
        if isinstance(pspec, str):
            return pspec
        for key, kind in (("value", "value"), ("struct", "fields"), ("kwargs", "kwargs")):
            if pspec.has(key):
                return kind
        if pspec.has("out"):
            if f"out:{pspec.out}" not in PARAMS:
                self.fail_at(where, f"unknown out kind {pspec.out!r}")
            return f"out:{pspec.out}"
        if pspec.arg is None:
            self.fail_at(where, f"parameter {cname}: needs arg, value, struct, out, self or scratch")
        convert = pspec.convert or ""
        kind = convert.split(":", 1)[0]
        if kind in PARAMS and kind not in BY_TYPE and issubclass(PARAMS[kind], ArgParam):
            return kind
        if convert == "address" or (t.kind == "pointer" and t.pointee is not None
                                    and t.pointee.kind == "void"):
            return "address"
        if is_int(t):
            return "int"
        self.fail_at(where, f"parameter {cname}: cannot convert {t.spelling}")

    def param(self, cname: str, t: Type, pspec: Any, where: str) -> ParamConverter:
        pspec = _entry(cname, pspec, where)
        if not isinstance(pspec, str):
            # every kind's keys first, so that a typo is named as one (not as
            # the kind it no longer selects)
            self.check_keys(pspec, PARAM_KEYS, f"parameter {cname}", where)
        kind = self.param_kind(cname, t, pspec, where)
        if not isinstance(pspec, str):
            self.check_keys(pspec, PARAMS[kind].keys, f"parameter {cname} ({kind})", where)
        self.refs.kinds[cname] = PARAMS[kind]
        return cast(ParamConverter, PARAMS[kind].from_spec(self, cname, t, pspec))

    # -- the result --
    def returns(self, result_t: Type) -> ReturnConverter:
        ret = self.m.returns
        if isinstance(ret, ReturnsNew):
            return self.new_handle(ret)
        if ret == "result":
            return cast(ReturnConverter, RETURNS["result"](result_t))
        if ret in ("bool", "be32", "str"):
            return cast(ReturnConverter, RETURNS[ret]())
        if ret not in (None, "out", "none"):
            self.fail(f"unknown returns {ret!r}", "returns")
        return cast(ReturnConverter, RETURNS["out"](none=ret == "none"))

    def new_handle(self, ret: ReturnsNew) -> ReturnConverter:
        """`returns: {new: Class, parents: {...}}`: where each parent comes
        from, in the order the class (or its base) declares them."""
        cls = ret.cls
        hspec = self.b.spec.handle(cls)
        if hspec is None:
            self.fail(f"returns a new {cls}, which is not a handle class", "returns")
        while hspec.base is not None:          # a subclass has its base's parents
            hspec = self.b.spec.handle(hspec.base.cls)
        declared = [p.name for p in hspec.parents]
        given = ret.parents
        parents: List[Optional[ParentSource]] = []
        for pname in declared:
            src = given.get(pname)
            if src is None:
                parents.append(None)
            elif src == "self":
                parents.append(ParentSource(is_self=True))
            elif "." in src:
                obj, fld = src.split(".", 1)
                # as the call was handed it
                parents.append(ParentSource(arg=obj, field=fld))
            else:
                parents.append(ParentSource(arg=src))
        for pname in given:
            if pname not in declared:
                self.fail(f"{cls} has no parent {pname!r}", "returns")
        return cast(ReturnConverter, RETURNS["new"](cls, parents))


def _entry(cname: str, pspec: ParamEntry, where: str) -> ParamEntry:
    """A parameter entry as its converter takes it: a word (WORD_KINDS), or
    a ParamSpec (an argument's name alone is {arg: name})."""
    if isinstance(pspec, str) and pspec not in WORD_KINDS:
        return ParamSpec(cname, Location.at(where), ("arg",), arg=pspec)
    return pspec
