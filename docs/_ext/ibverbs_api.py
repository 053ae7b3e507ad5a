"""The API reference of ibverbs, grouped the way users think.

``.. ibverbs-api:: <group>`` documents every name of a group with autodoc,
from the built extension: its docstrings are the generated method table's,
the same text the generator writes into the stubs (generator/docstrings.py),
so the reference and the editors' hovers cannot drift apart.

Every public name of ``ibverbs`` must be in a group: a new class or
function that no group lists is a warning (a new enum goes to the enums
page by itself), and ``make docs`` turns warnings
into errors (tests/host/test_docs.py checks the built inventory as well).

``.. ibverbs-cli:: <command>`` prints the help of a command of the
``ibverbs`` console script, from its argparse parser.

Signatures show the generated stubs' types and the extension's defaults,
an enum or flag default by name (spec/docs.yaml ``docs.enums``); an
attribute's docstring is shown as written (napoleon would read the text
before its first colon as a type).
"""
from __future__ import annotations

import ast
import enum
import functools
import inspect
import os
from typing import Dict, List, Optional, Tuple

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.nodes import nested_parse_with_titles

LOG = logging.getLogger(__name__)

# group -> names in the ibverbs namespace, in reading order.  Names the
# running rdma-core does not generate (newer verbs) are skipped.
GROUPS: Dict[str, List[str]] = {
    "discovery": ["get_device_list", "Device", "Context", "DeviceAttr", "DeviceAttrEx",
                  "PortAttr", "Gid", "GidEntry", "AsyncEvent", "import_device"],
    "resources": ["PD", "MR", "CompChannel", "CQ", "QP", "SRQ", "AH", "MW", "XRCD", "TD",
                  "QPInitAttr", "QPCap", "QPAttr", "SRQAttr", "AHAttr", "MWBind", "MWBindInfo",
                  "ECE"],
    "workrequests": ["SGE", "SendWR", "RecvWR", "WC", "PostList", "PostListEntry", "WCBuffer"],
    "extended": ["CQEx", "QPEx", "WCTMInfo", "DM", "Flow", "FlowAttr", "FlowSpecEth",
                 "FlowSpecIPv4", "FlowSpecTCPUDP", "Counters", "WQ", "RWQIndTable",
                 "ImportedPD", "ImportedMR", "CompCntr", "CompCntrCaps"],
    "rdmacm": ["EventChannel", "CMID", "create_event_channel", "cm_event_str"],
    "helpers": ["QPInfo", "RemoteBuffer", "local_qp_info", "connect_rc", "reg_tensor",
                "tensor_addr_len", "fork_init", "is_fork_initialized", "is_qpt_supported",
                "inc_rkey", "rate_to_mult", "mult_to_rate", "rate_to_mbps", "mbps_to_rate",
                "node_type_str", "port_state_str", "event_type_str", "wc_status_str", "wr_opcode_str",
                "flow_label_to_udp_sport"],
    "errors": ["VerbsError", "CompletionError", "WaitTimeoutError"],
    "enums": ["AccessFlags", "AtomicCap", "CounterDescription", "CQInitAttrMask",
              "CreateCQAttrFlags", "CreateCQWCFlags", "DeviceCapFlags", "EventType",
              "FlowAttrType", "FlowFlags", "FlowSpecType", "ForkStatus", "GIDType", "LinkLayer",
              "MigState", "MTU", "MWType", "NodeType", "PortCapFlags", "PortState", "QPAttrMask",
              "QPCreateFlags", "QPCreateSendOps", "QPState", "QPType", "Rate", "ReadCountersFlags",
              "ReregMRFlags", "SendFlags", "CompCntrType", "QPAttachCompCntrOp", "SRQAttrMask", "SRQType", "TransportType", "WCFlags",
              "WCOpcode", "WCStatus", "WQFlags", "WQState", "WQType", "WROpcode"],
}
# Submodules and what the package imports for itself: not API names.
NOT_API = {"annotations", "cm", "errors", "aio", "cuda", "flow", "helpers", "enums", "topology"}


def public_names() -> List[str]:
    """Every public name of the ibverbs package (what `dir(ibverbs)` shows)."""
    import ibverbs

    return sorted(n for n in dir(ibverbs) if not n.startswith("_") and n not in NOT_API)


def _is_enum(name: str) -> bool:
    import enum

    import ibverbs

    obj = getattr(ibverbs, name)
    return isinstance(obj, type) and issubclass(obj, enum.Enum)


def group_names(group: str) -> List[str]:
    """The names a page documents; an enum that no group lists (a new one
    of spec/enums.yaml) joins the enums page by itself."""
    names = list(GROUPS[group])
    if group == "enums":
        grouped = {n for names_ in GROUPS.values() for n in names_}
        names += [n for n in public_names() if n not in grouped and _is_enum(n)]
    return names


def _ungrouped() -> List[str]:
    grouped = {n for names in GROUPS.values() for n in names}
    return [n for n in public_names() if n not in grouped and not _is_enum(n)]


def _autodoc(name: str) -> List[str]:
    import enum

    import ibverbs

    obj = getattr(ibverbs, name)
    if isinstance(obj, type) and issubclass(obj, enum.Enum):
        return [f".. autoclass:: ibverbs.{name}", "   :members:", "   :undoc-members:",
                "   :member-order: bysource", ""]
    if isinstance(obj, type):
        return [f".. autoclass:: ibverbs.{name}", "   :members:", "   :undoc-members:", ""]
    return [f".. autofunction:: ibverbs.{name}", ""]


class ApiGroup(Directive):
    required_arguments = 1

    def run(self) -> List[nodes.Node]:
        import ibverbs

        group = self.arguments[0]
        if group not in GROUPS:
            raise self.error(f"unknown ibverbs-api group {group!r} (have: {', '.join(GROUPS)})")
        lines: List[str] = [".. currentmodule:: ibverbs", ""]
        for name in group_names(group):
            if hasattr(ibverbs, name):
                lines += _autodoc(name)
        node = nodes.section()
        node.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, source="ibverbs-api"), node)
        return node.children


def _command_help(command: str) -> str:
    from ibverbs._cli import build_parser

    parser = build_parser()
    if command == "ibverbs":
        return parser.format_help()
    for action in parser._subparsers._group_actions:      # argparse keeps them here
        if command in getattr(action, "choices", {}):
            return action.choices[command].format_help()
    raise KeyError(command)


class CliHelp(Directive):
    required_arguments = 1

    def run(self) -> List[nodes.Node]:
        command = self.arguments[0]
        try:
            text = _command_help(command)
        except KeyError:
            raise self.error(f"the ibverbs command has no subcommand {command!r}") from None
        return [nodes.literal_block(text, text, language="text")]


def _check_groups(app, env) -> None:     # noqa: ARG001 - Sphinx's signature
    for name in _ungrouped():
        LOG.warning(f"ibverbs.{name} is public but in no group of docs/_ext/ibverbs_api.py "
                    "(the reference would miss it)")


# --- signatures: the stubs' types, defaults by name ----------------------------
#
# A C method's text signature has names and defaults only (qp_type=2); the
# generated stubs have the types.  The reference shows the stub's parameters
# and return type with the extension's defaults, and an integer default of
# an enum or flag argument by its name (qp_type=QPType.RC).

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STUBS = {"ibverbs": ["ibverbs/_ibverbs.pyi", "ibverbs/helpers.pyi"],
         "ibverbs.cuda": ["ibverbs/cuda.pyi"]}


def _arg_enums() -> Dict[str, str]:
    """argument ("Class.argument" first) -> the enum or flag class it takes:
    spec/docs.yaml's docs.enums, the table the generator's docstrings use
    (PyYAML comes with myst-parser)."""
    import yaml

    with open(os.path.join(ROOT, "spec", "docs.yaml"), encoding="utf-8") as f:
        return dict(yaml.safe_load(f)["docs"].get("enums") or {})


ARG_ENUMS: Dict[str, str] = _arg_enums()
# Integer defaults that are named constants of other modules.
NAMED_CONSTANTS = {("oflags", os.O_CREAT): "os.O_CREAT"}


_ALIASES: Dict[str, str] = {}     # a stub's private type alias -> what it stands for


def _annotation(node: ast.expr) -> str:
    text = ast.unparse(node)
    for alias, value in _ALIASES.items():
        text = text.replace(alias, value)
    return text


@functools.lru_cache(maxsize=None)
def _stub_index(module: str) -> Dict[Tuple[str, str], ast.FunctionDef]:
    """(class or "", function) -> its stub definition ("__init__" of a class)."""
    index: Dict[Tuple[str, str], ast.FunctionDef] = {}
    for path in STUBS.get(module, []):
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in tree.body:
            target = (node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1
                      else node.target if isinstance(node, ast.AnnAssign) else None)
            if isinstance(target, ast.Name) and target.id.startswith("_") and node.value:
                value = node.value
                if (isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name)
                        and value.value.id == "Union"):     # Union[a, b] -> a | b
                    elts = value.slice.elts if isinstance(value.slice, ast.Tuple) else [value.slice]
                    _ALIASES[target.id] = " | ".join(ast.unparse(e) for e in elts)
                else:
                    _ALIASES[target.id] = ast.unparse(value)
            if isinstance(node, ast.FunctionDef):
                index.setdefault(("", node.name), node)
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef):
                        index.setdefault((node.name, item.name), item)
    return index


def _flag_text(cls, value: int) -> str:
    """An IntFlag value as the OR of its members' names (each bit once)."""
    inside = [m for m in cls if m.value and (m.value & (m.value - 1)) == 0
              and value & m.value == m.value]
    if sum(m.value for m in inside) != value:
        return f"{cls.__name__}({value:#x})"        # bits without a member
    return " | ".join(f"{cls.__name__}.{m.name}" for m in inside)


def named_default(owner: str, arg: str, value: object) -> Optional[str]:
    """The text of an integer default by name, or None to keep it as it is."""
    import ibverbs

    if isinstance(value, bool) or not isinstance(value, int):
        return None
    if (arg, value) in NAMED_CONSTANTS:
        return NAMED_CONSTANTS[(arg, value)]
    cls = getattr(ibverbs, ARG_ENUMS.get(f"{owner}.{arg}") or ARG_ENUMS.get(arg, ""), None)
    if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
        return None
    if issubclass(cls, enum.Flag):
        return None if value == 0 else _flag_text(cls, value)
    try:
        return f"{cls.__name__}.{cls(value).name}"
    except ValueError:
        return None


def _default_text(owner: str, param: inspect.Parameter) -> str:
    named = named_default(owner, param.name, param.default)
    return named if named is not None else repr(param.default)


def _locate(name: str) -> Tuple[str, str, str]:
    """(stub module, owner class or "", function or "__init__") of a full name."""
    module = "ibverbs.cuda" if name.startswith("ibverbs.cuda.") else "ibverbs"
    parts = name[len(module) + 1:].split(".")
    return (module, "", parts[0]) if len(parts) == 1 else (module, parts[0], parts[1])


def _runtime_signature(obj) -> Optional[inspect.Signature]:
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        return None


def _runtime_defaults(owner: str, obj, runtime: Optional[inspect.Signature]) -> Dict[str, str]:
    """argument -> the text of its default, from the object itself."""
    if runtime is not None:
        return {p.name: _default_text(owner, p) for p in runtime.parameters.values()
                if p.default is not p.empty}
    text = getattr(obj, "__text_signature__", None)    # one inspect cannot evaluate
    if not text:
        return {}
    try:
        tree = ast.parse(f"def f{text.replace('$', '')}: pass")
    except SyntaxError:
        return {}
    a = tree.body[0].args
    positional = a.posonlyargs + a.args
    pairs = list(zip(positional[len(positional) - len(a.defaults):], a.defaults))
    pairs += [(k, d) for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
    return {k.arg: ast.unparse(d) for k, d in pairs}


def _signature(app, what, name, obj, options, signature, return_annotation):  # noqa: ARG001
    if what not in ("class", "method", "function") or not name.startswith("ibverbs."):
        return None
    if signature is None and what != "class":
        return None     # autodoc found none it could read, and cannot take one (Sphinx 9)
    module, owner, func = _locate(name)
    if what == "class":
        owner, func = func, "__init__"
    elif not owner and what == "method":
        return None
    stub = _stub_index(module).get((owner, func))
    runtime = _runtime_signature(obj)
    if stub is None:     # a Python function: Sphinx's own signature, defaults by name
        if runtime is None or signature is None or not any(
                named_default(owner, p.name, p.default) for p in runtime.parameters.values()):
            return None
        params = [p.replace(annotation=_annotation_text(p.annotation, owner, p.name),
                            default=p.default if p.default is p.empty
                            else _Text(_default_text(owner, p)))
                  for p in runtime.parameters.values()]
        return str(runtime.replace(parameters=params, return_annotation=inspect.Signature.empty)), \
            return_annotation
    rt = _runtime_defaults(owner, obj, runtime)
    a = stub.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    parts: List[str] = []

    def one(arg: ast.arg, default: Optional[ast.expr]) -> str:
        text = arg.arg
        if arg.annotation is not None:
            text += f": {enum_typed(owner, arg.arg, _annotation(arg.annotation))}"
        if default is None:
            return text
        if arg.arg in rt:
            value = rt[arg.arg]
        elif isinstance(default, ast.Constant) and default.value is Ellipsis:
            return text + " = ..."       # unknown: as the stub says
        else:
            value = ast.unparse(default)
        return f"{text} = {value}"

    for i, (arg, default) in enumerate(zip(positional, defaults)):
        if i == 0 and owner and arg.arg in ("self", "cls"):
            continue
        parts.append(one(arg, default))
    if a.vararg is not None:
        parts.append("*" + one(a.vararg, None))
    elif a.kwonlyargs:
        parts.append("*")
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        parts.append(one(arg, default))
    if a.kwarg is not None:
        parts.append("**" + one(a.kwarg, None))
    returns = None if what == "class" or stub.returns is None else _annotation(stub.returns)
    return f"({', '.join(parts)})", returns


def _annotation_text(annotation, owner: str = "", name: str = ""):
    """An annotation as its source text (a string one, under ``from
    __future__ import annotations``, without its quotes)."""
    if annotation is inspect.Parameter.empty:
        return annotation
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    return _Text(enum_typed(owner, name, text))


def enum_typed(owner: str, arg: str, annotation: str) -> str:
    """An ``int`` argument that takes an enum or flag class (spec/docs.yaml
    docs.enums) shown as that class: ``qp_type: QPType``, not ``int``.  A
    plain int is still accepted (the reference's introduction says so)."""
    import ibverbs

    name = ARG_ENUMS.get(f"{owner}.{arg}") or ARG_ENUMS.get(arg)
    cls = getattr(ibverbs, name, None) if name else None
    if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
        return annotation
    parts = [p.strip() for p in annotation.split("|")]
    if "int" not in parts or name in parts:
        return annotation
    return " | ".join(name if p == "int" else p for p in parts)


class _Text:
    """A default rendered as given (inspect.Signature prints its repr)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


# --- attribute docstrings: no "type: description" guess ------------------------
#
# napoleon reads the first line of an attribute's docstring as "type:
# description" ("Remote key (32 bits): ..." would become the type "Remote
# key (32 bits)"). The types are in the stubs and the signatures, never in
# these texts, so an attribute keeps its docstring as written.

_ATTRIBUTE_DOCS: Dict[str, List[str]] = {}


def _keep_attribute_doc(app, what, name, obj, options, lines) -> None:  # noqa: ARG001
    if what in ("attribute", "property", "data"):
        _ATTRIBUTE_DOCS[name] = list(lines)


def _restore_attribute_doc(app, what, name, obj, options, lines) -> None:  # noqa: ARG001
    if what in ("attribute", "property", "data") and name in _ATTRIBUTE_DOCS:
        lines[:] = _ATTRIBUTE_DOCS.pop(name)


def setup(app) -> Dict[str, object]:
    app.add_directive("ibverbs-api", ApiGroup)
    app.add_directive("ibverbs-cli", CliHelp)
    app.connect("env-check-consistency", _check_groups)
    app.connect("autodoc-process-signature", _signature)
    # around napoleon's listener (priority 500)
    app.connect("autodoc-process-docstring", _keep_attribute_doc, priority=100)
    app.connect("autodoc-process-docstring", _restore_attribute_doc, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

