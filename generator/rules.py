"""Spec rules said by name, expanded into the forms the model stage reads.

The spec says what a rule means ("send_cq must be of this PD's context",
"a QPEx batch operation", "the new CQEx remembers its wc_flags"); this stage
turns each such key into typed data (generator/rule_data.py): what to
check, which guard keeps an order, which value a parameter takes, what runs
before the call (prologue) or after it (epilogue).  Wherever that names a
value of the wrapper (a converted argument, a bytes argument's size, self's
verbs pointer) it is a typed reference, which the converter declaring the
value spells when the wrapper is emitted: no C is written here, and the
emit stage (generator/converters/rule_c.py) alone spells each rule.  It
runs inside ``spec.load`` once the whole spec is read, rewrites the loaded
nodes in place and leaves no rule key behind, so generator/model.py (and
every other reader of the spec) sees only the forms it always knew.  One
class per rule kind: it validates its YAML (a ``RuleError`` naming file and
line; ``spec.load`` raises it as SpecError) and knows what it means.  This
module imports nothing of the generator but the leaf generator/rule_data.py
(``spec`` imports it), so there is no import circle.

The keys (the reference; CONTRIBUTING.md "How to bind a new verb" shows
them in use):

  method keys
    qpex: start|end|operation|setter   a QPEx batch step: the guard that
        keeps the batch order (ibp_qpex_guard) and the verb's `qp`
        parameter, the QPEx's struct ibv_qp_ex
    posts_send: true      the verb posts on the QP's send queue: refused
        while a QPEx batch is open (ibp_qp_send_idle)
    not_polling: true     refused while a CQEx is mid-poll (the provider
        holds the CQ lock; ibp_cq_check_not_polling)
  `checks:` entries (of methods and of attributes), each with an optional
  `error:` (exception class) and `message:` (a default is given where one
  can be derived)
    same_context: ARG     the handle ARG (an argument, or ARG.FIELD of a
        struct argument) is None or of self's device context (ValueError)
    same_pd: ARG          ... is None or of self's PD (ValueError)
    not_none: [ARG, ...]  every one of them is given, not None (TypeError)
    is_none: ARG          ARG is not given / None (ValueError)
    state: FIELD          the object's `state:` flag FIELD is set (RuntimeError)
    provider_op: OP       the provider has the function pointer OP
        (RuntimeError "the provider does not offer OP")
    wc_flag: FLAG         the CQEx was created with CreateCQWCFlags.FLAG in
        wc_flags and the provider has the reader (`provider_op:`, by default
        the method's name) (RuntimeError "... was not requested ...")
    packed_struct: ARG    (with `ctype: C TYPE`) the bytes-like argument ARG
        holds at least a CTYPE whose `size` member is its whole length
        (ValueError; a variable-length struct packed in Python)
    packed_items: ARG     (with `ctype:`, `count: MEMBER`, `item: C TYPE`,
        `header: MEMBER`, `kinds: {C CONSTANT: C TYPE}`, `kind_flags: [C
        CONSTANT, ...]`) after ARG's CTYPE, exactly `count` items fill it,
        each starting with an ITEM `header` whose `type` and `size` say its
        kind and its own length, inside ARG; an item of a kind listed
        (without the kind_flags bits) at least that kind's struct
        (ValueError; what the verb walks by the items' own sizes, unbounded)
  parameter and `struct:` field values
    self.FIELD            a member of self's verbs struct (self_ptr->FIELD)
    self                  (a struct field) self's verbs pointer
    {flags: [NAME, ...]}  the OR of C constants; `mask` is the mask bits of
        the optional fields given (their `mask:`)
    {size_of: ARG}        the size in bytes of the bytes-like argument ARG
    {sge_of: self}        one struct ibv_sge covering the whole MR (self)
    below: self.FIELD     (an argument) at most self_ptr->FIELD - 1
    comp_mask_bit: BIT    (a struct field) when nonzero, BIT is set in the
        struct's comp_mask (the provider reads the field only with it)
  returns
    set: {FIELD: VALUE}   store on the new object: FIELD of its `state:`
        (VALUE an integer, an argument's converted value, or {given: ARG}:
        whether the optional ARG was given) or of its `slots:` (VALUE `self`,
        a new reference)
  attributes
    {path: FIELD, convert: address}   a pointer member as an integer
    {path: FIELD, checks: [...]}      an integer member, after the checks
    {verb: FUNC, of: FIELD, convert: str}   FUNC(self_ptr->FIELD) as a str

A raw C `expr:` in a check stays possible for the odd one-off rule; the
host test tests/host/test_spec_declarative.py counts them (at most 5, each
with a `# raw C: <why>` comment).
"""
from __future__ import annotations

from typing import Any, Dict, FrozenSet, List, NoReturn, Optional, Tuple, Union

from . import rule_data
from .rule_data import (AllGiven, ArgBytes, ArgHandle, ArgSize, ArgValue, CompMaskBit, ExplainArg,
                        ExplainCall, Flags, Given,
                        MaskBits, NotGiven, ProviderHas,
                        QPExGuard, QPExOfSelf, SameOwner, SelfMember, SelfMemberBelow, SelfPtr,
                        SendIdle, SetOnNew, SgeOfSelf, SgeOfSelfDeclared, StateSet, StructLocal,
                        WCFlagRequested, MemberAddress, VerbOfMember)

#: what a rule puts before or after the call (generator/rule_data.py)
Step = Union[rule_data.NotPolling, SgeOfSelfDeclared, CompMaskBit, SetOnNew]

# method-level keys of this module (spec.METHOD_KEYS accepts them)
METHOD_KEYS = {"qpex", "posts_send", "not_polling"}
# parameter and `struct:` member keys of this module (lowered to `value:`/`max:`)
PARAM_KEYS = {"flags", "size_of", "sge_of", "below", "comp_mask_bit"}



class RuleError(Exception):
    """A mistake in a rule, with its location (spec.load re-raises it as SpecError)."""



def _is_name(text: str) -> bool:
    """A C/YAML name: ASCII letters, digits and _, not starting with a digit."""
    return text.isascii() and text.isidentifier()

def _where(node: Any, key: Optional[str] = None) -> str:
    if hasattr(node, "where"):
        return str(node.where(key))
    return "spec"


def _copy_node(like: Any, items: List[Tuple[str, Any]], line_of: Dict[str, int]) -> Any:
    """A mapping of the loader's class (file, line, key lines kept)."""
    out = type(like)()
    if hasattr(like, "key_lines"):
        out.file, out.line, out.key_lines = like.file, like.line, {}
        for key, value in items:
            out[key] = value
            out.key_lines[key] = line_of.get(key, like.line)
    else:
        out.update(items)
    return out


def _mapping(like: Any, values: Dict[str, Any]) -> Any:
    """values as a mapping of the loader's class, placed where `like` is."""
    return _copy_node(like, list(values.items()), dict(getattr(like, "key_lines", {})))


def _ident(value: Any, where: str, what: str) -> str:
    if not isinstance(value, str) or not _is_name(value):
        raise RuleError(f"{where}: {what} must be a name, got {value!r}")
    return value


def _self_field(value: Any, where: str, what: str) -> Optional[str]:
    """FIELD of a "self.FIELD" string, else None."""
    if isinstance(value, str) and value.startswith("self."):
        return _ident(value[5:], where, what)
    return None


# --- the scope a rule is expanded in -------------------------------------------

class Scope:
    """A method (or attribute) of a class: what rules may refer to."""

    def __init__(self, spec: Any, owner: str, name: str, node: Any) -> None:
        self.spec, self.owner, self.name, self.node = spec, owner, name, node
        self.label = f"{owner}.{name}" if owner else name
        self.prologue: List[Step] = []
        self.epilogue: List[Step] = []

    def fail(self, where: str, message: str) -> NoReturn:
        raise RuleError(f"{where}: {self.label}: {message}")

    # -- classes
    def handle_node(self, cls: str) -> Any:
        h = self.spec.handle(cls)
        return h.node if h is not None else None

    def chain(self, cls: str) -> List[Any]:
        """The handle node of cls and of its bases."""
        out: List[Any] = []
        while cls and self.handle_node(cls) is not None and len(out) < 8:
            node = self.handle_node(cls)
            out.append(node)
            base = node.get("base")
            cls = base.get("class") if hasattr(base, "get") else base
        return out

    def is_a(self, cls: str, wanted: str) -> bool:
        return any(n is self.handle_node(wanted) for n in self.chain(cls))

    def owner_ctype(self, where: str) -> str:
        if not self.owner:
            self.fail(where, "this rule needs a method of a class")
        return str(self.handle_node(self.owner)["ctype"])

    def has_state(self, cls: str, field: str) -> bool:
        return any(field in (n.get("state") or {}) for n in self.chain(cls))

    def has_slot(self, cls: str, field: str) -> bool:
        return any(field in (n.get("slots") or {}) for n in self.chain(cls))

    # -- arguments
    def args(self) -> Dict[str, Tuple[str, Optional[str], Any]]:
        """Python argument -> (C parameter, struct field path or None, its spec)."""
        out: Dict[str, Tuple[str, Optional[str], Any]] = {}
        for cname, pspec in (self.node.get("params") or {}).items():
            if isinstance(pspec, str):
                if _is_name(pspec) and pspec not in ("self", "out", "scratch", "mask"):
                    out[pspec] = (cname, None, {"arg": pspec})
            elif hasattr(pspec, "get") and "struct" in pspec:
                for path, fspec in (pspec["struct"] or {}).items():
                    if isinstance(fspec, str) and _is_name(fspec) and fspec != "self":
                        out[fspec] = (cname, path, {"arg": fspec})
                    elif hasattr(fspec, "get") and "arg" in fspec:
                        out[fspec["arg"]] = (cname, path, fspec)
            elif hasattr(pspec, "get") and "arg" in pspec:
                out[pspec["arg"]] = (cname, None, pspec)
        return out

    def arg(self, name: Any, where: str) -> Tuple[str, Optional[str], Any]:
        name = _ident(name, where, "an argument")
        found = self.args().get(name)
        if found is None:
            self.fail(where, f"no argument {name!r} (it has: {', '.join(self.args()) or 'none'})")
        return found

    def handle_ref(self, ref: Any, where: str) -> Tuple[ArgHandle, str, str]:
        """(the PyObject * of a handle argument or ARG.FIELD of a struct
        argument, the handle's C type, the last name) for a check."""
        if not isinstance(ref, str):
            self.fail(where, f"expected an argument name, got {ref!r}")
        arg, _, field = ref.partition(".")
        cname, _, pspec = self.arg(arg, where)
        convert = str(pspec.get("convert", ""))
        if field:
            if not convert.startswith("struct:"):
                self.fail(where, f"{arg} is no struct argument (convert: struct:...)")
            sname = convert.split(":", 1)[1]
            struct = self.spec.struct(sname)
            fspec = struct.field(field) if struct is not None else None
            fconv = str(fspec.convert or "") if fspec is not None else ""
            if not fconv.startswith("handle:"):
                self.fail(where, f"{sname} has no handle field {field!r}")
            return ArgHandle(cname, arg, field), self.handle_ctype(fconv, where), field
        if not convert.startswith("handle:"):
            self.fail(where, f"{arg} is no handle argument (convert: handle:...)")
        return ArgHandle(cname, arg), self.handle_ctype(convert, where), arg

    def handle_ctype(self, convert: str, where: str) -> str:
        node = self.handle_node(convert.split(":", 1)[1])
        if node is None:
            self.fail(where, f"unknown handle class in {convert!r}")
        return str(node["ctype"])

    def mask_of(self, name: Any, where: str) -> str:
        _, path, pspec = self.arg(name, where)
        if path is None or "mask" not in pspec:
            self.fail(where, f"{name} is no optional struct field with a `mask:`")
        return str(pspec["mask"])

    def location(self, name: Any, where: str) -> ArgValue:
        """The C lvalue holding an integer argument once converted."""
        cname, path, pspec = self.arg(name, where)
        if pspec.get("convert") not in (None, "int"):
            self.fail(where, f"{name} is not an integer argument")
        return ArgValue(cname, path)


# --- checks ------------------------------------------------------------------------

class CheckRule:
    """One kind of `checks:` entry: its key, default exception and message."""

    key = ""
    error = "ValueError"
    #: keys of its entry besides its own, `error:` and `message:`
    extra: FrozenSet[str] = frozenset()

    def expr(self, scope: Scope, entry: Any, where: str) -> Any:
        """What must hold (generator/rule_data.py)."""
        raise NotImplementedError

    def message(self, scope: Scope, entry: Any, where: str) -> Optional[str]:
        return None


class SameContext(CheckRule):
    key = "same_context"

    def expr(self, scope: Scope, entry: Any, where: str) -> SameOwner:
        obj, ctype, _ = scope.handle_ref(entry[self.key], where)
        return SameOwner(obj, ctype, "context", scope.owner_ctype(where) == "struct ibv_context")

    def message(self, scope: Scope, entry: Any, where: str) -> Optional[str]:
        return f"{scope.handle_ref(entry[self.key], where)[2]} belongs to another context"


class SamePD(CheckRule):
    key = "same_pd"

    def expr(self, scope: Scope, entry: Any, where: str) -> SameOwner:
        obj, ctype, _ = scope.handle_ref(entry[self.key], where)
        return SameOwner(obj, ctype, "pd", scope.owner_ctype(where) == "struct ibv_pd")

    def message(self, scope: Scope, entry: Any, where: str) -> Optional[str]:
        return f"{scope.handle_ref(entry[self.key], where)[2]} belongs to another PD"


class NotNone(CheckRule):
    key = "not_none"
    error = "TypeError"

    def expr(self, scope: Scope, entry: Any, where: str) -> AllGiven:
        refs = entry[self.key]
        if not isinstance(refs, list) or not refs:
            scope.fail(where, "not_none: a list of arguments")
        return AllGiven(tuple(scope.handle_ref(r, where)[0] for r in refs))


class IsNone(CheckRule):
    key = "is_none"

    def expr(self, scope: Scope, entry: Any, where: str) -> NotGiven:
        return NotGiven(scope.handle_ref(entry[self.key], where)[0])


class State(CheckRule):
    key = "state"
    error = "RuntimeError"

    def expr(self, scope: Scope, entry: Any, where: str) -> StateSet:
        field = _ident(entry[self.key], where, "state")
        if not scope.has_state(scope.owner, field):
            scope.fail(where, f"{scope.owner} has no state {field!r}")
        return StateSet(scope.owner, field)


class ProviderOp(CheckRule):
    key = "provider_op"
    error = "RuntimeError"

    def expr(self, scope: Scope, entry: Any, where: str) -> ProviderHas:
        op = _ident(entry[self.key], where, "provider_op")
        scope.owner_ctype(where)
        return ProviderHas(op)

    def message(self, scope: Scope, entry: Any, where: str) -> Optional[str]:
        return f"the provider does not offer {entry[self.key]}"


class WCFlag(CheckRule):
    """A CQEx reader: its field requested at creation, its reader present."""

    key = "wc_flag"
    error = "RuntimeError"
    enum = "CreateCQWCFlags"
    extra = frozenset({"provider_op"})

    def prefix(self, scope: Scope, where: str) -> str:
        e: Any = next((e for e in scope.spec.enums if e.name == self.enum), None)
        if e is None:
            scope.fail(where, f"wc_flag needs the enum {self.enum}")
        return str(e.prefix)

    def expr(self, scope: Scope, entry: Any, where: str) -> WCFlagRequested:
        flag = _ident(entry[self.key], where, "wc_flag")
        if not scope.has_state(scope.owner, "wc_flags"):
            scope.fail(where, f"wc_flag: {scope.owner} has no state 'wc_flags'")
        op = _ident(entry.get("provider_op", scope.name), where, "provider_op")
        return WCFlagRequested(scope.owner, f"{self.prefix(scope, where)}{flag}", op)

    def message(self, scope: Scope, entry: Any, where: str) -> Optional[str]:
        field = scope.name[len("read_"):] if scope.name.startswith("read_") else scope.name
        return (f"{field} was not requested: create the {scope.owner} with wc_flags "
                f"including {self.enum}.{entry[self.key]}")


class PackedStruct(CheckRule):
    """A variable-length C struct packed in Python (QP.create_flow's struct
    ibv_flow_attr and its specs): long enough for the struct, and its
    `size` member is the whole length."""

    key = "packed_struct"
    extra = frozenset({"ctype"})

    def expr(self, scope: Scope, entry: Any, where: str) -> rule_data.PackedStruct:
        cname, path, pspec = scope.arg(entry[self.key], where)
        if pspec.get("convert") != "bytes" or path is not None:
            scope.fail(where, f"packed_struct: {entry[self.key]} is no `convert: bytes` argument")
        ctype = entry.get("ctype")
        if not isinstance(ctype, str) or not all(_is_name(w) for w in ctype.split()):
            scope.fail(where, "packed_struct: needs `ctype:` (a C struct type)")
        return rule_data.PackedStruct(ArgBytes(cname), ctype)


class PackedItems(CheckRule):
    """The items after a packed variable-length struct (struct
    ibv_flow_attr's specs): libibverbs walks `count` of them by each one's
    own header size, and reads each known kind's whole struct, so a header
    that lies reads past the buffer.  The walk is checked here first
    (ibp_packed_items_ok, ibverbs/src/convert.c)."""

    key = "packed_items"
    extra = frozenset({"ctype", "count", "item", "header", "kinds", "kind_flags"})

    def expr(self, scope: Scope, entry: Any, where: str) -> rule_data.PackedItems:
        cname, path, pspec = scope.arg(entry[self.key], where)
        if pspec.get("convert") != "bytes" or path is not None:
            scope.fail(where, f"packed_items: {entry[self.key]} is no `convert: bytes` argument")
        ctypes = {}
        for key in ("ctype", "item"):
            value = entry.get(key)
            if not isinstance(value, str) or not all(_is_name(w) for w in value.split()):
                scope.fail(where, f"packed_items: needs `{key}:` (a C struct type)")
            ctypes[key] = value
        for key in ("count", "header"):
            if not isinstance(entry.get(key), str) or not _is_name(entry[key]):
                scope.fail(where, f"packed_items: needs `{key}:` (a member name)")
        kinds = entry.get("kinds") or {}
        flags = entry.get("kind_flags") or []
        if not hasattr(kinds, "items") or not all(
                _is_name(k) and isinstance(v, str) and all(_is_name(w) for w in v.split())
                for k, v in kinds.items()):
            scope.fail(where, "packed_items: `kinds:` maps C constants to C struct types")
        if not isinstance(flags, list) or not all(isinstance(f, str) and _is_name(f) for f in flags):
            scope.fail(where, "packed_items: `kind_flags:` is a list of C constants")
        return rule_data.PackedItems(ArgBytes(cname), ctypes["ctype"], entry["count"], ctypes["item"],
                           entry["header"], tuple(kinds.items()), tuple(flags))


CHECKS: Dict[str, CheckRule] = {r.key: r for r in (SameContext(), SamePD(), NotNone(), IsNone(), State(),
                             ProviderOp(), WCFlag(), PackedStruct(), PackedItems())}
CHECK_EXTRA = {"error", "message"}


def expand_checks(scope: Scope, checks: Any, where: str) -> List[Any]:
    """`checks:` with every rule entry turned into {expr, error, message}
    (expr: what must hold, generator/rule_data.py)."""
    if not isinstance(checks, list):
        scope.fail(where, "checks: a list")
    out = []
    for entry in checks:
        if not hasattr(entry, "get"):
            scope.fail(where, f"a check is a mapping, got {entry!r}")
        if "expr" in entry:
            unknown = [k for k in entry if k not in {"expr"} | CHECK_EXTRA]
            if unknown:
                scope.fail(_where(entry, unknown[0]), f"a raw C check: unknown key {unknown[0]!r}")
            out.append(entry)
            continue
        here = _where(entry)
        kinds = ["wc_flag"] if "wc_flag" in entry else [k for k in entry if k in CHECKS]
        if len(kinds) != 1:
            scope.fail(here, f"a check needs exactly one of expr, {', '.join(CHECKS)}")
        rule = CHECKS[kinds[0]]
        allowed = {rule.key} | CHECK_EXTRA | rule.extra
        unknown = [k for k in entry if k not in allowed]
        if unknown:
            scope.fail(_where(entry, unknown[0]), f"{rule.key}: unknown key {unknown[0]!r}")
        message = entry.get("message") or rule.message(scope, entry, here)
        if not message:
            scope.fail(here, f"{rule.key}: needs a `message:`")
        out.append({"expr": rule.expr(scope, entry, here),
                    "error": entry.get("error", rule.error), "message": message})
    return out


# --- method keys --------------------------------------------------------------------

class MethodRule:
    """A method-level key: it sets the method's guard, params or prologue."""

    key = ""

    def apply(self, scope: Scope, node: Any) -> None:
        raise NotImplementedError


class QPExStep(MethodRule):
    """`qpex:` a wr_* method of the QPEx batch API (ibverbs/src/qpex.c)."""

    key = "qpex"
    phases = ("start", "end", "operation", "setter")

    def apply(self, scope: Scope, node: Any) -> None:
        where = node.where(self.key)
        phase = node[self.key]
        if phase not in self.phases:
            scope.fail(where, f"qpex: one of {', '.join(self.phases)}, got {phase!r}")
        if not scope.owner or not scope.is_a(scope.owner, "QPEx"):
            scope.fail(where, "qpex: only for methods of QPEx")
        if "guard" in node:
            scope.fail(where, "qpex: the step is the guard; drop `guard:`")
        params = node.get("params")
        if params is None or "qp" in params:
            scope.fail(where, "qpex: the QPEx passes `qp` itself; leave it out of params")
        node["guard"] = QPExGuard(scope.name, phase)
        node["params"] = _copy_node(params, [("qp", {"value": QPExOfSelf()})] + list(params.items()),
                                    dict(params.key_lines, qp=node.key_lines[self.key])
                                    if hasattr(params, "key_lines") else {})


class PostsSend(MethodRule):
    """`posts_send: true` the verb posts on the send queue: not inside a QPEx batch."""

    key = "posts_send"

    def apply(self, scope: Scope, node: Any) -> None:
        where = node.where(self.key)
        if node[self.key] is not True:
            scope.fail(where, "posts_send: true or absent")
        if not scope.owner or not scope.is_a(scope.owner, "QP") or "guard" in node:
            scope.fail(where, "posts_send: for QP methods without a `guard:`")
        node["guard"] = SendIdle(scope.name)


class NotPolling(MethodRule):
    """`not_polling: true` refused while a CQEx is mid-poll."""

    key = "not_polling"

    def apply(self, scope: Scope, node: Any) -> None:
        where = node.where(self.key)
        if node[self.key] is not True:
            scope.fail(where, "not_polling: true or absent")
        if not scope.owner or not scope.is_a(scope.owner, "CQ"):
            scope.fail(where, "not_polling: for CQ methods")
        scope.prologue.append(rule_data.NotPolling())


METHOD_RULES: List[MethodRule] = [QPExStep(), PostsSend(), NotPolling()]
assert {r.key for r in METHOD_RULES} == METHOD_KEYS


class Explainers:
    """`explain:` errno (or `any`) -> "explainer(arg, ...)" or a list of
    them, each arg a verb parameter or `param->member`: read into
    ExplainCall values (generator/methods.py checks the parameters)."""

    def apply(self, scope: Scope, node: Any) -> None:
        explain = node.get("explain")
        if explain is None:
            return
        where = node.where("explain")
        if not hasattr(explain, "items"):
            scope.fail(where, "explain: a mapping errno -> explainer call(s)")
        out: Dict[str, List[ExplainCall]] = {}
        for err, calls in explain.items():
            if err != "any" and not (str(err)[:1] == "E" and str(err).isupper()
                                     and str(err).isalnum()):
                scope.fail(where, f"explain: {err!r} is not an errno name (EINVAL ...) or any")
            out[err] = [self.call(scope, call, where)
                        for call in (calls if isinstance(calls, list) else [calls])]
        node["explain"] = _mapping(explain, out)

    def call(self, scope: Scope, call: Any, where: str) -> ExplainCall:
        name, paren, rest = str(call).strip().partition("(")
        if not (paren and rest.endswith(")") and name.isidentifier()):
            scope.fail(where, f"explain: {call!r} is not explainer(arg, ...)")
        args = []
        for arg in filter(None, (a.strip() for a in rest[:-1].split(","))):
            head, _, member = arg.partition("->")
            members_ok = not member or all(_is_name(m) for m in member.split("."))
            if not _is_name(head.strip()) or not members_ok:
                scope.fail(where, f"explain: {call!r}: {arg!r} is not a parameter or param->member")
            args.append(ExplainArg(head.strip(), member.strip() or None))
        return ExplainCall(name, tuple(args))


# --- parameter and struct field values -----------------------------------------------

class Values:
    """Parameter and `struct:` field specs: self.FIELD, self, flags, size_of,
    sge_of, below, comp_mask_bit."""

    def param(self, scope: Scope, cname: str, pspec: Any, where: str, in_struct: str = "") -> Any:
        field = _self_field(pspec, where, "self.FIELD")
        if field is not None:
            return {"value": SelfMember(field)}
        if in_struct and pspec == "self":
            return {"value": SelfPtr()}
        if not hasattr(pspec, "get"):
            return pspec
        if "flags" in pspec:
            return {"value": self.flags(scope, pspec, where)}
        for key in ("size_of", "sge_of"):
            if key in pspec and set(pspec) != {key}:
                extra = sorted(set(pspec) - {key})[0]
                scope.fail(_where(pspec, extra), f"{key}: alone, got also {extra!r}")
        if "size_of" in pspec:
            ccname, path, arg = scope.arg(pspec["size_of"], where)
            if arg.get("convert") != "bytes" or path is not None:
                scope.fail(where, f"size_of: {pspec['size_of']} is no `convert: bytes` argument")
            return {"value": ArgSize(ccname)}
        if "sge_of" in pspec:
            if pspec["sge_of"] != "self" or not scope.is_a(scope.owner, "MR"):
                scope.fail(where, "sge_of: self, in a method of MR")
            scope.prologue.append(SgeOfSelfDeclared())
            return {"value": SgeOfSelf()}
        if "below" in pspec or "comp_mask_bit" in pspec:
            pspec = _mapping(pspec, dict(pspec))
        if "below" in pspec:
            if "max" in pspec:
                scope.fail(where, "below: and max: together")
            below = _self_field(pspec.pop("below"), where, "below: self.FIELD")
            if below is None:
                scope.fail(where, "below: self.FIELD")
            pspec["max"] = SelfMemberBelow(below)
        if "comp_mask_bit" in pspec:
            if not in_struct:
                scope.fail(where, "comp_mask_bit: only for struct fields")
            bit = _ident(pspec.pop("comp_mask_bit"), where, "comp_mask_bit")
            scope.prologue.append(CompMaskBit(StructLocal(in_struct), cname, bit))
        return pspec

    def flags(self, scope: Scope, pspec: Any, where: str) -> Flags:
        names = pspec["flags"]
        if set(pspec) != {"flags"} or not isinstance(names, list) or not names:
            scope.fail(where, "flags: a list of C constants (and `mask`)")
        out: List[Union[str, MaskBits]] = []
        for name in names:
            name = _ident(name, where, "a flag")
            if name == "mask":
                masked = [a for a, (_, path, s) in scope.args().items() if path and "mask" in s]
                if not masked:
                    scope.fail(where, "flags: mask, but no struct field has a `mask:`")
                out.append(MaskBits())
            else:
                out.append(name)
        return Flags(tuple(out))

    def apply(self, scope: Scope, node: Any) -> None:
        params = node.get("params")
        if not hasattr(params, "items"):
            return
        for cname, pspec in list(params.items()):
            where = params.where(cname) if hasattr(params, "where") else _where(node)
            if hasattr(pspec, "get") and "struct" in pspec and hasattr(pspec["struct"], "items"):
                fields = pspec["struct"]
                for path, fspec in list(fields.items()):
                    fields[path] = self.param(scope, path, fspec, fields.where(path), in_struct=cname)
            else:
                params[cname] = self.param(scope, cname, pspec, where)


# --- returns: set ----------------------------------------------------------------------

#: the keys of `returns: {new: Class, parents: {...}, set: {...}}`
RETURN_KEYS = {"new", "parents", "set"}


class SetOnResult:
    """`returns: {new: Class, ..., set: {FIELD: VALUE}}`: stored on the new object."""

    def apply(self, scope: Scope, node: Any) -> None:
        ret = node.get("returns")
        if hasattr(ret, "get"):
            unknown = [k for k in ret if k not in RETURN_KEYS]
            if unknown:
                scope.fail(_where(ret, unknown[0]), f"returns: unknown key {unknown[0]!r} "
                           f"(expected one of: {', '.join(sorted(RETURN_KEYS))})")
        if not hasattr(ret, "get") or "set" not in ret:
            return
        where = ret.where("set")
        cls = ret.get("new")
        sets = ret["set"]
        if cls is None or not hasattr(sets, "items") or not sets:
            scope.fail(where, "set: a mapping, for `returns: {new: Class}`")
        for field, value in sets.items():
            field = _ident(field, where, "set: a field")
            if scope.has_slot(cls, field):
                if value != "self":
                    scope.fail(where, f"set: slot {field} takes `self`")
                stored: Union[int, ArgValue, Given, None] = None
            elif scope.has_state(cls, field):
                stored = self.state_value(scope, value, where)
            else:
                scope.fail(where, f"set: {cls} has no state or slot {field!r}")
            scope.epilogue.append(SetOnNew(cls, field, stored))
        del ret["set"]

    def state_value(self, scope: Scope, value: Any, where: str) -> Union[int, ArgValue, Given]:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if hasattr(value, "get") and set(value) == {"given"}:
            return Given(scope.mask_of(value['given'], where))
        return scope.location(value, where)


# --- attributes ---------------------------------------------------------------------------

class Attribute:
    """Handle attributes: pointer members, checked members, a function of a member."""

    def apply(self, spec: Any, cls: str, name: str, aspec: Any) -> Any:
        if not hasattr(aspec, "get"):
            return aspec
        scope = Scope(spec, cls, name, {})
        where = _where(aspec)
        if "verb" in aspec:
            if set(aspec) - {"verb", "of", "convert"} or "of" not in aspec:
                scope.fail(where, "an attribute from a function: {verb, of, convert}")
            func = _ident(aspec["verb"], where, "verb")
            member = _ident(aspec["of"], where, "of")
            return _mapping(aspec, {"expr": VerbOfMember(func, member),
                                    "convert": aspec.get("convert", "int")})
        if "path" in aspec and aspec.get("convert") == "address":
            if set(aspec) != {"path", "convert"}:
                scope.fail(where, "a pointer attribute: {path, convert: address}")
            return _mapping(aspec, {"expr": MemberAddress(_ident(aspec['path'], where, 'path')),
                                    "convert": "int"})
        if "checks" in aspec:
            out = dict(aspec)
            if "path" in out:
                out["expr"] = SelfMember(_ident(out.pop('path'), where, 'path'))
            out["checks"] = expand_checks(scope, aspec["checks"], aspec.where("checks"))
            return _mapping(aspec, out)
        return aspec


# --- the stage ------------------------------------------------------------------------------

def _expand_method(spec: Any, method: Any) -> None:
    node = method.node
    if method.hand or method.python:
        for key in METHOD_KEYS | {"checks"}:
            if key in node:
                raise RuleError(f"{node.where(key)}: {method.owner}.{method.name}: "
                                f"{key} is for generated verbs")
        return
    scope = Scope(spec, method.owner, method.name, node)
    for rule in METHOD_RULES:
        if rule.key in node:
            rule.apply(scope, node)
            del node[rule.key]
    Values().apply(scope, node)
    SetOnResult().apply(scope, node)
    Explainers().apply(scope, node)
    if "checks" in node:
        node["checks"] = expand_checks(scope, node["checks"], node.where("checks"))
    for key, lines in (("prologue", scope.prologue), ("epilogue", scope.epilogue)):
        if lines and key in node:
            scope.fail(node.where(key), f"{key}: and a rule that makes one")
        if len(lines) > 1:
            scope.fail(node.where(), f"two rules make a {key}; one method takes one")
        if lines:
            node[key] = lines[0]


def expand(spec: Any) -> None:
    """Turn every rule key of a loaded spec into the model's forms, in place."""
    for h in spec.handles:
        attrs = h.node.get("attributes")
        if hasattr(attrs, "items"):
            for name, aspec in list(attrs.items()):
                attrs[name] = Attribute().apply(spec, h.name, name, aspec)
    for method in spec.all_methods():
        _expand_method(spec, method)
