"""The model -> the C the templates print (Jinja2 filters, see render.py).

A generated verb wrapper runs, in this order (Argument Clinic style):
declarations, argument parsing, the closed-object check, optional-symbol
checks, conversion with range checks (each converter's parse code), the
spec's checks, guard and prologue, the call, error handling, building the
result, the epilogue, and the cleanup every path goes through (`exit:`).

The model holds no C (tests/host/test_generator_stages.py): a method's
calling convention, its spec rules (generator/rule_data.py, spelled by
generator/converters/rule_c.py), the provider entries' member paths and
the loader's symbols are data, and their C is written here, when a
template asks.
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

from .cq_locks import CqLock
from .converters.args import ClassArgParam
from .converters.composite import KwargsParam
from .converters.rule_c import c_of
from .ctext import SELF_PTR, declare, indented
from .model import CallingConvention, Entry, EntryParam, MethodKind, MethodModel, SymbolModel
from .rule_data import ExplainCall
from .record_model import RecordAttribute, RecordTypeModel


# --- a method's function: its flags and C parameters, by calling convention ---

METH_FLAGS = {CallingConvention.NOARGS: "METH_NOARGS", CallingConvention.O: "METH_O",
              CallingConvention.VARARGS_KW: "METH_VARARGS | METH_KEYWORDS",
              CallingConvention.FASTCALL_KW: "METH_FASTCALL | METH_KEYWORDS"}
#: the C parameters of a method function and the names passing them on
C_PARAMS = {CallingConvention.NOARGS: "PyObject *unused", CallingConvention.O: "PyObject *arg",
            CallingConvention.VARARGS_KW: "PyObject *args, PyObject *kwargs",
            CallingConvention.FASTCALL_KW: "PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames"}
C_ARGS = {CallingConvention.NOARGS: "unused", CallingConvention.O: "arg",
          CallingConvention.VARARGS_KW: "args, kwargs",
          CallingConvention.FASTCALL_KW: "args, nargs, kwnames"}


def meth_flags(m: MethodModel) -> str:
    """Its PyMethodDef flags."""
    return METH_FLAGS[m.flags]


def c_params(m: MethodModel) -> str:
    return C_PARAMS[m.flags]


def c_args(m: MethodModel) -> str:
    return C_ARGS[m.flags]


def impl_prototype(m: MethodModel) -> str:
    """The hand-written `_impl` function its generated parser calls."""
    params = ["PyObject *self"] + [declare(ctype, name) for ctype, name in m.impl_params]
    return f"PyObject *{m.impl}({', '.join(params)})"


def unconverted_prototype(m: MethodModel, function: str) -> str:
    """A function taking the arguments as they came (short_way's pair)."""
    objs = [f"PyObject *{a.name}_obj" for a in m.args]
    return f"PyObject *{function}({', '.join(['PyObject *self'] + objs)})"


def entry_params(params: List[EntryParam]) -> str:
    """A provider entry's parameters, declared."""
    return ", ".join(declare(p.ctype, p.name) for p in params)


# --- the loader's trampolines (templates/loader.c.h.j2) ---

def symbol_params(s: SymbolModel) -> str:
    if not s.params:
        return "void"
    return ", ".join(declare(t, n) for t, n in s.params)


def symbol_args(s: SymbolModel) -> str:
    return ", ".join(n for _, n in s.params)


def symbol_failure(s: SymbolModel) -> Optional[str]:
    """What the trampoline returns when the symbol is missing."""
    t = s.result.strip()
    if t == "void":
        return None
    if t.endswith("*"):
        return "NULL"
    return f"({t})-1"


def getter_lines(item: Any) -> List[str]:
    """A struct field's or a handle attribute's getter statements."""
    lines: List[str] = getattr(item, "converter", item).getter()
    return lines


def setter_lines(item: Any) -> List[str]:
    """A struct field's setter statements."""
    lines: List[str] = item.converter.setter()
    return lines


def prepare_lines(item: Any, struct: str) -> List[str]:
    """A struct's handle field checked in X_prepare() (set, so not NULL)."""
    lines: List[str] = item.converter.prepare(struct)
    return lines


class Label(str):
    """A label of the function (`exit:`), where the cleanup starts: printed
    at column 0, every other line indented one level."""


EXIT = Label("exit:")


def function_lines(m: MethodModel) -> List[str]:
    """A generated wrapper's body as printed inside its braces."""
    return [line if isinstance(line, Label) or line == "" else "    " + line
            for line in method_body(m)]


def method_body(m: MethodModel) -> List[str]:
    """The statements of a generated wrapper's C function."""
    if m.kind is MethodKind.IMPL:
        return impl_body(m)
    body = _declarations(m) + [""] + _hold_self(m)
    body += _argument_parsing(m) + _hold_on_entry(m) + _open_check(m) + _symbol_checks(m)
    body += [line for p in m.params for line in p.parse()]
    body += [line for p in m.params for line in p.post_parse()]
    body += [line for p in m.params for line in p.hold_handles()]
    body += _checks(m)
    if m.guard:
        # a precondition: < 0 with an exception set
        body += [f"if (({_c(m, m.guard)}) < 0)", "    goto exit;"]
    if m.prologue:
        body.append(_c(m, m.prologue))
    body += [line for p in m.params for line in p.hold_for_call(m.release_gil)]
    body += _cq_lock_check(m)
    body += _call(m) + [line for p in m.params for line in p.after_call(m.release_gil)]
    body += _error_check(m)
    assert m.returns is not None
    body += m.returns.lines([p.output() or [] for p in m.outputs])
    if m.epilogue:
        # runs once the result exists (e.g. records how a new object was made)
        body += ["if (return_value != NULL) {", "    " + _c(m, m.epilogue), "}"]
    body += ["", EXIT] + [line for p in m.params for line in p.cleanup()]
    body += [f"ibp_unhold({held});" for held in reversed(_holds(m))]
    return body + ["return return_value;"]


def _c(m: MethodModel, value: Any) -> str:
    """A rule's value (generator/rule_data.py) as C in m's wrapper."""
    assert m.refs is not None
    return c_of(value, m.refs.spell)


def _holds(m: MethodModel) -> List[str]:
    """What a call holds in flight, generated from its parameters: self,
    each handle argument, each handle a struct argument names."""
    return (["self_held"] if m.owner else []) + [h for p in m.params for h in p.holds()]


def _hold_self(m: MethodModel) -> List[str]:
    """self, held first: from here to its return, close() of it raises
    EBUSY (a conversion may run Python code, a **fields verb's already
    while its arguments are parsed; with the GIL released, so may any
    other thread)."""
    return ["if (ibp_hold(self, NULL, &self_held) < 0)", "    goto exit;"] if m.owner else []


def _hold_on_entry(m: MethodModel) -> List[str]:
    """The handle arguments, held as soon as they are unpacked, before any
    of them is converted."""
    lines = [line for p in m.params for line in p.hold_on_entry()]
    if lines and any(isinstance(p, KwargsParam) for p in m.params):
        # its fields are converted (Python code) while the arguments are parsed
        raise ValueError(f"{_label(m)}: a **fields verb cannot take handle arguments "
                         "(they would be held only after its fields ran Python code)")
    return lines


def _label(m: MethodModel) -> str:
    return f"{m.owner}.{m.name}" if m.owner else m.name


def _declarations(m: MethodModel) -> List[str]:
    lines = [f"{m.owner_ctype} *{SELF_PTR};"] if m.owner else []
    lines += [line for p in m.params for line in p.declarations()]
    lines += [f"PyObject *{held} = NULL;" for held in _holds(m)]
    if m.release_gil:
        lines += [line for p in m.params for line in p.released_declarations()]
    lines.append("PyObject *return_value = NULL;")
    if m.result_spelling is not None:
        lines.append(declare(m.result_spelling, "rc") + ";")
    return lines


def _argument_parsing(m: MethodModel) -> List[str]:
    kwargs = next((p for p in m.params if isinstance(p, KwargsParam)), None)
    if kwargs is not None:
        return kwargs_parse(m, kwargs)
    if not m.args:
        return []
    kw = ", ".join(f'"{a.name}"' for a in m.args)
    fmt = ""
    seen_optional = False
    for a in m.args:
        if not a.required and not seen_optional:
            fmt += "|"
            seen_optional = True
        fmt += "O"
    return [f"static char *kwlist[] = {{{kw}, NULL}};",
            f'if (!PyArg_ParseTupleAndKeywords(args, kwargs, "{fmt}:{m.name}", kwlist,',
            "        " + ", ".join(f"&{a.name}_obj" for a in m.args) + "))",
            "    goto exit;"]


def _open_check(m: MethodModel) -> List[str]:
    if not m.owner:
        return []
    # a subclass stores its base's pointer; its own is kept beside it
    ptr = f"{m.owner}_PTR(self)" if m.owner_is_subclass else \
        f"({m.owner_ctype} *)IBP_HANDLE(self)->ptr"
    lines = ["if (ibp_check_open(self) < 0)", "    goto exit;", f"{SELF_PTR} = {ptr};"]
    if not m.uses_self_ptr:
        # only declared and set: the verb takes something else of self
        # (a QPEx's struct ibv_qp_ex)
        lines.append(f"(void){SELF_PTR};")
    return lines


def _symbol_checks(m: MethodModel) -> List[str]:
    lines: List[str] = []
    for sym, since in m.symbols:
        lines += [f"if (!IBP_SYMBOL_AVAILABLE({sym})) {{",
                  f'    ibp_raise_unavailable("{sym}", "{since}");',
                  "    goto exit;", "}"]
    return lines


def _checks(m: MethodModel) -> List[str]:
    lines: List[str] = []
    for chk in m.checks:
        lines += [f"if (!({_c(m, chk.condition)})) {{",
                  f'    PyErr_SetString(PyExc_{chk.error}, "{_label(m)}: {chk.message}");',
                  "    goto exit;", "}"]
    return lines


def _call(m: MethodModel) -> List[str]:
    """The call; with the GIL released when its rule says so (spec/gil.yaml):
    everything it is handed is held (_holds) and no Python object is read
    from the time the GIL is given up until it is taken back."""
    args = [p.released_call_arg() if m.release_gil else p.call_arg() for p in m.params]
    call = f"{m.verb}({', '.join(args)})"
    has_result = m.result_spelling is not None
    stmt = f"rc = {call};" if has_result else f"{call};"
    lines = ["errno = 0;"] if m.errors != "none" and has_result else []
    if not m.release_gil:
        return lines + [stmt]
    return (["Py_BEGIN_ALLOW_THREADS", "ibp_test_pause_point();   /* IBVERBS_TEST_HOOKS */"]
            + lines + [stmt, "Py_END_ALLOW_THREADS"])


def cq_array(lock: CqLock, owner: str, obj: str) -> str:
    """The C array of a provider lock's CQ objects (a compound literal;
    generator/cq_locks.py), members of the object *obj* of class *owner*."""
    members = ", ".join(f"((struct {owner}Object *){obj})->{c}" for c in lock.cqs)
    return f"(PyObject *const[]){{ {members} }}, {len(lock.cqs)}"


def _cq_lock_check(m: MethodModel) -> List[str]:
    """Refused (EBUSY) while a CQEx whose lock the verb takes is mid-poll
    (spec cq_locks:, generator/cq_locks.py): it would deadlock on it."""
    lock = m.cq_lock
    if lock is None:
        return []
    args = [p.released_call_arg() if m.release_gil else p.call_arg() for p in m.params]
    when = f"{lock.when}({', '.join(args)}) && " if lock.when else ""
    return [f'if ({when}ibp_refuse_cq_locked(self, "{m.verb}", '
            f"{cq_array(lock, m.owner, 'self')}) < 0)",
            "    goto exit;"]


# code: a nonzero result is the verb's own code (ibv_rereg_mr's
# IBV_REREG_MR_ERR_*, -4 being no -EINTR), the error is in errno
_FAILED = {"null": "rc == NULL", "errno": "rc != 0", "negative": "rc < 0", "code": "rc != 0"}
_CODE = {"null": "0", "errno": "rc", "negative": "rc", "code": "0"}


def _error_check(m: MethodModel) -> List[str]:
    if m.errors not in _FAILED:
        return []
    if not m.explain:
        return [f"if ({_FAILED[m.errors]}) {{",
                f'    ibp_raise("{m.verb}", ibp_error_code({_CODE[m.errors]}));',
                "    goto exit;", "}"]
    # spec `explain:` the cause, found only now that the verb has failed
    lines = [f"if ({_FAILED[m.errors]}) {{",
             f"    int err = ibp_error_code({_CODE[m.errors]});",
             "    char why[IBP_WHY_LEN] = \"\";"]
    for e in m.explain:
        tried = " || ".join(explain_call(m, call) for call in e.calls)
        lines.append(f"    if (!why[0]{f' && err == {e.errno}' if e.errno else ''})")
        lines.append(f"        (void)({tried});")
    return lines + [f'    ibp_raise_explained("{m.verb}", err, why);', "    goto exit;", "}"]


def kwargs_parse(m: MethodModel, kw: KwargsParam) -> List[str]:
    """Arguments, then a struct class's fields by keyword (and the
    `positional` ones by position too, None meaning not given)."""
    most = len(m.args) + len(kw.positional)
    lines = [f"memset(&{kw.local}, 0, sizeof({kw.local}));", "{",
             "    Py_ssize_t nargs = PyTuple_Size(args);",
             f"    if (nargs > {most}) {{",
             f'        PyErr_Format(PyExc_TypeError, "{m.name}() takes at most {most} '
             f'positional argument(s) (%zd given)", nargs);',
             "        goto exit;", "    }"]
    lines += indented(_positional_fields(m, kw))
    for i, a in enumerate(m.args):
        lines.append(f"    if (nargs > {i}) {a.name}_obj = PyTuple_GetItem(args, {i});")
        lines.append(f'    else if (kwargs) {a.name}_obj = PyDict_GetItemString(kwargs, "{a.name}");')
        if a.required:
            lines += [f"    if ({a.name}_obj == NULL) {{",
                      f'        PyErr_SetString(PyExc_TypeError, "{m.name}() missing required '
                      f'argument \'{a.name}\'");',
                      "        goto exit;", "    }"]
    return lines + indented(_keyword_fields(m, kw)) + ["}"]


def _positional_fields(m: MethodModel, kw: KwargsParam) -> List[str]:
    lines: List[str] = []
    for j, name in enumerate(kw.positional):
        i = len(m.args) + j
        lines += [f"if (nargs > {i} && PyTuple_GetItem(args, {i}) != Py_None) {{",
                  f'    if (kwargs && PyDict_GetItemString(kwargs, "{name}") != NULL) {{',
                  f'        PyErr_SetString(PyExc_TypeError, "{m.name}() got {name} by position '
                  f'and by keyword");',
                  "        goto exit;", "    }",
                  f'    PyObject *key = PyUnicode_FromString("{name}");',
                  f"    int rc_set = key ? {kw.cls}_set_field(&{kw.local}, key, "
                  f"PyTuple_GetItem(args, {i})) : -1;",
                  "    Py_XDECREF(key);", "    if (rc_set < 0)", "        goto exit;", "}"]
    return lines


def _keyword_fields(m: MethodModel, kw: KwargsParam) -> List[str]:
    conds = " || ".join(
        [f'PyUnicode_CompareWithASCIIString(key, "{a.name}") == 0' for a in m.args]
        + [f'(value == Py_None && PyUnicode_CompareWithASCIIString(key, "{f}") == 0)'
           for f in kw.positional])
    lines = ["if (kwargs) {", "    PyObject *key, *value;", "    Py_ssize_t pos = 0;",
             "    while (PyDict_Next(kwargs, &pos, &key, &value)) {"]
    if conds:
        lines += [f"        if ({conds})", "            continue;"]
    return lines + [f"        int rc_set = {kw.cls}_set_field(&{kw.local}, key, value);",
                    "        if (rc_set == -2)",
                    f'            PyErr_Format(PyExc_TypeError, "{kw.unknown}: %R", key);',
                    "        if (rc_set < 0)", "            goto exit;", "    }", "}"]


# --- a hand method's generated parser (spec `impl:`, generator/impl.py) ---

def impl_body(m: MethodModel) -> List[str]:
    """Unpack the arguments (no Python code runs), mark the object in flight
    (an argument's __index__ closing it gets EBUSY), convert them, call the
    hand-written `_impl` with the C values.  One C function per method, no
    `__call` wrapper: a hot loop's call does no more than it must."""
    if m.short_way:
        return _short_way_body(m)
    if not m.params and not m.hand_holds:
        return _ENTER + [f"PyObject *return_value = {_impl_call(m)};", "ibp_call_leave(self);",
                         "return return_value;"]
    body = [line for p in m.params for line in p.declarations()]
    body += [f"PyObject *{h.local} = NULL;" for h in m.hand_holds]
    body += [f"PyObject *{held} = NULL;" for p in m.params for held in p.holds()]
    body += ["PyObject *return_value = NULL;", ""]
    body += (_impl_arguments(m) if m.params else [])
    return body + _entered_call(m)


_ENTER = ["if (ibp_call_enter(self) < 0)", "    return NULL;"]


def _impl_call(m: MethodModel) -> str:
    return f"{m.impl}({', '.join(['self'] + [p.call_arg() for p in m.params])})"


def _entered_call(m: MethodModel) -> List[str]:
    """From the call's entry on (impl_body's, and a short way's fallback):
    the arguments converted, what the hand code hands the provider held,
    the `_impl` called, then everything undone and the call left."""
    early, hold, unhold = _hand_holds(m)
    body = _ENTER + early + [line for p in m.params for line in p.parse()] + hold
    # a struct argument's handles (struct_instance:): held, then checked
    # open and written into its C struct, which the `_impl` reads in its
    # critical section, as a verb's struct argument
    body += [line for p in m.params for line in p.hold_handles()]
    body += [f"return_value = {_impl_call(m)};", ""]
    if any(p.parse_can_fail or p.holds() for p in m.params) or m.hand_holds:
        body.append(EXIT)
    body += [line for p in m.params for line in p.cleanup()] + unhold
    body += [f"ibp_unhold({held});" for p in reversed(m.params) for held in reversed(p.holds())]
    return body + ["ibp_call_leave(self);", "return return_value;"]


def _short_way_body(m: MethodModel) -> List[str]:
    """spec `short_way:` (generator/impl.py): arguments by position to the
    hand short way as they came, the rest unpacked out of line."""
    if m.flags is CallingConvention.O:
        return [f"return {m.short_way}(self, arg);"]
    n = len(m.args)
    given = ", ".join(["self"] + [f"args[{i}]" for i in range(n)])
    # No keywords and n by position, in one comparison (an instruction
    # fewer on every call of the data path's methods, bench/host_micro.py):
    # kwnames is NULL or a tuple's address, never below the first page.
    return [f"if ((uintptr_t)kwnames + (size_t)nargs == {n})  /* kwnames == NULL && nargs == {n} */",
            f"    return {m.short_way}({given});",
            f"return {m.cname}_unpack(self, args, nargs, kwnames);"]


def entered_lines(m: MethodModel) -> List[str]:
    """The body of a short way's fallback: the call entered, the arguments
    (its parameters, as they came) converted, the `_impl` called."""
    body = [line for p in m.params for line in p.declarations_but_argument()]
    body += ["PyObject *return_value = NULL;", ""] + _entered_call(m)
    return [line if isinstance(line, Label) or line == "" else "    " + line for line in body]


def unpack_lines(m: MethodModel) -> List[str]:
    """The body of a short way method's keyword parsing, out of its wrapper."""
    n = len(m.args)
    names = ", ".join(f'"{a.name}"' for a in m.args)
    call = f"{m.entered}({', '.join(['self'] + [f'argv[{i}]' for i in range(n)])})"
    return [f"    static const char *const kwlist[] = {{{names}, NULL}};",
            f'    static struct ibp_parser parser = {{"{m.name}", kwlist, {n}, 0, 0, NULL}};',
            f"    PyObject *argv[{n}];",
            "    if (ibp_unpack_fastcall(&parser, args, nargs, kwnames, argv) < 0)",
            "        return NULL;",
            f"    return {call};"]


def _hand_holds(m: MethodModel) -> Tuple[List[str], List[str], List[str]]:
    """What a hand method hands the provider besides self (spec `holds:`,
    generator/hand_gil.py), held so that close() of any of it raises EBUSY
    until the hand code returns; and their release.  A handle argument is
    held before it is converted, as a verb's are (only an object of its
    class): the conversion's open check then follows the hold, and a
    close() either sees the hold or is over.  A sequence of handles and
    self's slots are held as they are once the arguments are converted."""
    if not m.hand_holds:
        return [], [], []
    comment = "/* what the hand code hands the provider while other threads run (spec holds:) */"
    early: List[str] = []
    hold: List[str] = []
    unhold = []
    for h in m.hand_holds:
        fn = "ibp_hold_each" if h.each else "ibp_hold"
        if h.arg is not None and not h.each:
            p = next(p for p in m.params if getattr(p, "name", None) == h.arg)
            assert isinstance(p, ClassArgParam)     # hand_gil.holds: a handle argument
            early += [f"if (ibp_hold({p.var}, {p.cls}_Type, &{h.local}) < 0)", "    goto exit;"]
        else:
            held = (f"((struct {m.owner}Object *)self)->{h.slot}" if h.slot is not None else
                    next(p for p in m.params if getattr(p, "name", None) == h.arg).call_arg())
            hold += [f"if ({fn}({held}, {'' if h.each else 'NULL, '}&{h.local}) < 0)",
                     "    goto exit;"]
        unhold.append(f"{'ibp_unhold_each' if h.each else 'ibp_unhold'}({h.local});")
    return ([comment] + early if early else []), ([comment] + hold if hold else []), \
        list(reversed(unhold))


def _impl_arguments(m: MethodModel) -> List[str]:
    if m.flags is CallingConvention.O:
        return [f"{m.args[0].name}_obj = arg;"]
    if m.flags is not CallingConvention.FASTCALL_KW:     # PyArg_ParseTupleAndKeywords: not in flight yet
        return _argument_parsing(m)[:-1] + ["    return NULL;"]
    # Arguments by position only: the call a hot loop makes, with neither a
    # tuple nor a dict; anything else goes through ibp_unpack_fastcall.
    n = len(m.args)
    names = ", ".join(f'"{a.name}"' for a in m.args)
    required = sum(a.required for a in m.args)
    fast = (f"nargs == {n}" if required == n else f"nargs <= {n}" if required == 0
            else f"nargs >= {required} && nargs <= {n}")
    return ([f"static const char *const kwlist[] = {{{names}, NULL}};",
             f'static struct ibp_parser parser = {{"{m.name}", kwlist, {required}, 0, 0, NULL}};',
             f"PyObject *argv[{n}];",
             f"if (kwnames == NULL && {fast}) {{"]
            + [f"    {a.name}_obj = args[{i}];" if i < required else
               f"    {a.name}_obj = nargs > {i} ? args[{i}] : NULL;"
               for i, a in enumerate(m.args)]
            + ["} else {",
               "    if (ibp_unpack_fastcall(&parser, args, nargs, kwnames, argv) < 0)",
               "        return NULL;"]
            + [f"    {a.name}_obj = argv[{i}];" for i, a in enumerate(m.args)] + ["}"])


def entry_access(e: Entry) -> str:
    """Where a provider entry's function is, read from the handle's verbs
    object `ptr` (templates/_entries.c.j2)."""
    return "ptr" + "".join(("->" if s.through_pointer else ".") + s.member for s in e.path)


def explain_call(m: MethodModel, call: ExplainCall) -> str:
    """An explainer's call: the message buffer, then each argument as the
    verb was handed it."""
    passed = {name: p.call_arg() for name, p in zip(m.param_names, m.params)}
    args = ["why", "sizeof(why)"] + [f"({passed[a.param]})->{a.member}" if a.member else passed[a.param]
                                     for a in call.args]
    return f"ibp_explain_{call.explainer}({', '.join(args)})"


# --- the data-path types (templates/records.h.j2, templates/record_type.c.h.j2) ---


def record_state_decls(t: RecordTypeModel) -> List[str]:
    """The declarations of a data-path object's `state` members."""
    return [declare(ctype, name) for name, ctype in t.state]


def record_prototypes(t: RecordTypeModel) -> List[str]:
    """What a data-path type's generated code calls that its hand-written
    file writes."""
    protos = []
    if t.init_parser:
        protos.append(f"int ibp_hand_{t.name}_init_impl({t.name}Object *self"
                      + "".join(f", PyObject *{a}" for a in t.init_parser.args) + ")")
    if t.new_parser:
        protos.append(f"PyObject *ibp_hand_{t.name}_new_impl(PyTypeObject *type"
                      + "".join(f", PyObject *{a}" for a in t.new_parser.args) + ")")
    for fn, sig in ((t.init if t.init not in ("keywords", "impl") else None,
                     "int {}(PyObject *op, PyObject *args, PyObject *kwargs)"),
                    (t.new if t.new != "impl" else None,
                     "PyObject *{}(PyTypeObject *type, PyObject *args, PyObject *kwargs)"),
                    (t.repr, "PyObject *{}(PyObject *op)"),
                    (t.dealloc, "void {}(PyObject *op)"),
                    (t.traverse, "int {}(PyObject *op, visitproc visit, void *arg)"),
                    (t.clear_function, "int {}(PyObject *op)"),
                    (t.getattro, "PyObject *{}(PyObject *op, PyObject *name)"),
                    (t.guard, "int {}(PyObject *op)"),
                    (t.changed, "void {}(" + t.name + "Object *self)"),
                    (t.union, "int {}(PyObject *op, int members, const char *name)")):
        if fn:
            protos.append(sig.format(fn))
    for r in t.reach.values():
        arg = "PyObject *arg" if r.by_index else "const char *name"
        const = "const " if r.by_index else ""
        protos.append(f"{const}{r.ctype} *{r.function}(PyObject *op, {arg})")
    if t.sequence:
        protos.append(f"Py_ssize_t {t.sequence.length}(PyObject *op)")
        protos.append(f"PyObject *{t.sequence.item}(PyObject *op, Py_ssize_t i)")
        if t.sequence.set_item:
            protos.append(f"int {t.sequence.set_item}(PyObject *op, Py_ssize_t i, PyObject *value)")
    for a in t.attributes:
        protos += _record_attribute_prototypes(a)
    for m in t.methods:
        protos.append(f"PyObject *{m.function}(PyObject *op, PyObject *arg)")
    return list(dict.fromkeys(protos))


def _record_attribute_prototypes(a: RecordAttribute) -> List[str]:
    if a.kind == "hand":
        return ([f"PyObject *{a.get}(PyObject *op, void *closure)"]
                + ([f"int {a.set}(PyObject *op, PyObject *value, void *closure)"] if a.set else []))
    if a.kind == "slot":
        return ([f"PyObject *{a.get}(PyObject **slot)"]
                + ([f"int {a.set}(PyObject **slot, PyObject *value, int copy)"] if a.set else []))
    if a.check:
        return [f"int {a.check}(PyObject *op)"]
    return []
