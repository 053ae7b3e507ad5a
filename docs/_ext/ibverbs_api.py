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
"""
from __future__ import annotations

from typing import Dict, List

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
NOT_API = {"annotations", "cm", "errors", "aio", "cuda", "flow", "helpers", "enums"}


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


def setup(app) -> Dict[str, object]:
    app.add_directive("ibverbs-api", ApiGroup)
    app.add_directive("ibverbs-cli", CliHelp)
    app.connect("env-check-consistency", _check_groups)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

