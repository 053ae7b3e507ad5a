"""The spec says its rules by name, not in C (issue #16, point 5).

Parent and context checks, QPEx guards, CQEx reader checks, values taken
from self and the like are spec keys that generator/rules.py expands; at
most five raw C expressions remain in spec/, each with a comment saying
why.

What counts as a raw C expression: a string value under one of the keys
expr, value, prologue, epilogue, guard, max, min, default, check (and the
`expr` of every `checks:` entry) anywhere in spec/*.yaml or
spec/rdmacm/*.yaml, unless it is
  - a number literal (decimal or hex, optionally signed): "0", "0x40";
  - a single name: a C constant (NULL, UINT16_MAX, IBV_CQ_ATTR_MODERATE)
    or a spec-level name (`out`, `mask`, an argument name).
A YAML integer, boolean, null or list is no string and never counts.  An
alias (*name) counts once, at its anchor.  Each raw C expression that
remains must carry a comment `# raw C: <why>` on its line or on the line
above.
"""
from __future__ import annotations

import pathlib
import re
import textwrap

import pytest

# the generator's PyYAML (absent from the arm64 root make test-aarch64-host uses)
yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (make venv-gen)")

from generator import spec  # noqa: E402

pytestmark = pytest.mark.tooling

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC_DIR = ROOT / "spec"
C_KEYS = {"expr", "value", "prologue", "epilogue", "guard", "max", "min", "default", "check"}
LIMIT = 5
_NUMBER = re.compile(r"[+-]?(0[xX][0-9a-fA-F]+|\d+)")
_NAME = re.compile(r"[A-Za-z_]\w*")
_WHY = re.compile(r"#\s*raw C:\s*\S")


def is_raw_c(text: str) -> bool:
    text = text.strip()
    return not (_NUMBER.fullmatch(text) or _NAME.fullmatch(text))


def raw_c_expressions(path: pathlib.Path):
    """(line, key, text) of every raw C expression of one spec file."""
    root = yaml.compose(path.read_text(encoding="utf-8"))
    seen = set()
    out = []

    def walk(node):
        if id(node) in seen:       # an alias: counted at its anchor
            return
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if (isinstance(key, yaml.ScalarNode) and key.value in C_KEYS
                        and isinstance(value, yaml.ScalarNode) and id(value) not in seen
                        and value.tag == "tag:yaml.org,2002:str" and is_raw_c(value.value)):
                    seen.add(id(value))
                    out.append((value.start_mark.line + 1, key.value, value.value))
                walk(value)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                walk(item)

    if root is not None:
        walk(root)
    return out


def spec_files():
    return sorted(SPEC_DIR.glob("*.yaml")) + sorted((SPEC_DIR / "rdmacm").glob("*.yaml"))


def all_raw_c():
    return [(path, line, key, text) for path in spec_files()
            for line, key, text in raw_c_expressions(path)]


def test_the_counter_sees_c_and_only_c(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text(textwrap.dedent("""\
        m:
          params: {a: {value: "self_ptr->context"}, b: {value: "0"}, c: {value: NULL},
                   d: {arg: d, max: UINT16_MAX, min: 1, default: 0x40}, e: {value: mask_bits}}
          checks:
            - &c {expr: "x != NULL", message: m}
            - *c
          guard: "f(self)"
          prologue: "int x = 0;"
          params2: {value: out}
        """))
    found = raw_c_expressions(p)
    assert [(line, key) for line, key, _ in found] == [(2, "value"), (5, "expr"), (7, "guard"),
                                                        (8, "prologue")]


def test_at_most_five_raw_c_expressions_remain_in_the_spec():
    found = all_raw_c()
    listing = "\n".join(f"  {p.relative_to(ROOT)}:{line}: {key}: {text}"
                        for p, line, key, text in found)
    assert len(found) <= LIMIT, f"{len(found)} raw C expressions in spec/ (at most {LIMIT}):\n{listing}"


def test_each_raw_c_expression_says_why():
    missing = []
    for path, line, key, text in all_raw_c():
        lines = path.read_text(encoding="utf-8").splitlines()
        here = lines[line - 1]
        above = lines[line - 2] if line >= 2 else ""
        if not (_WHY.search(here) or (above.lstrip().startswith("#") and _WHY.search(above))):
            missing.append(f"{path.relative_to(ROOT)}:{line}: {key}: {text}")
    assert not missing, "raw C without a `# raw C: <why>` comment:\n" + "\n".join(missing)


def test_no_rule_key_survives_loading():
    """The model stage only ever sees the expanded forms."""
    from generator import rules
    loaded = spec.load(str(SPEC_DIR))
    for m in loaded.all_methods():
        assert not (rules.METHOD_KEYS & set(m.keys)), m.where()
        # `returns: {set: ...}` is lowered: a word or {new, parents} is left
        assert m.returns is None or isinstance(m.returns, (str, spec.ReturnsNew)), m.where()


# --- rule errors name the file and line --------------------------------------------

def write_spec(tmp_path, text):
    import shutil
    d = tmp_path / "spec"
    shutil.copytree(SPEC_DIR, d)
    (d / "zz.yaml").write_text(textwrap.dedent(text))
    return str(d)


@pytest.mark.parametrize("text,message", [
    ("methods:\n  QPEx:\n    wr_x:\n      verb: ibv_wr_send\n      params: {}\n"
     "      errors: none\n      qpex: sideways\n",
     "spec/zz.yaml:7: QPEx.wr_x: qpex: one of start, end, operation, setter"),
    ("methods:\n  PD:\n    wr_x:\n      verb: ibv_wr_send\n      params: {}\n"
     "      errors: none\n      qpex: operation\n",
     "spec/zz.yaml:7: PD.wr_x: qpex: only for methods of QPEx"),
    ("methods:\n  PD:\n    f:\n      verb: ibv_create_qp\n      params: {pd: self, qp_init_attr: {arg: init_attr, convert: \"struct:QPInitAttr\"}}\n"
     "      errors: \"null\"\n      checks:\n        - {same_context: init_attr.nope}\n",
     "spec/zz.yaml:8: PD.f: QPInitAttr has no handle field 'nope'"),
    ("methods:\n  PD:\n    f:\n      verb: ibv_create_qp\n      params: {pd: self, qp_init_attr: {arg: init_attr, convert: \"struct:QPInitAttr\"}}\n"
     "      errors: \"null\"\n      checks:\n        - {same_pd: srq}\n",
     "spec/zz.yaml:8: PD.f: no argument 'srq'"),
    ("methods:\n  PD:\n    f:\n      verb: ibv_create_qp\n      params: {pd: self, qp_init_attr: {arg: init_attr, convert: \"struct:QPInitAttr\"}}\n"
     "      errors: \"null\"\n      checks:\n        - {not_none: [init_attr.send_cq]}\n",
     "spec/zz.yaml:8: PD.f: not_none: needs a `message:`"),
    ("methods:\n  CQ:\n    f:\n      verb: ibv_resize_cq\n      params: {cq: self, cqe: cqe}\n"
     "      errors: errno\n      checks:\n        - {state: polling, message: m}\n",
     "spec/zz.yaml:8: CQ.f: CQ has no state 'polling'"),
    ("methods:\n  PD:\n    f:\n      verb: ibv_alloc_mw\n      params: {pd: self, type: type}\n"
     "      errors: \"null\"\n      returns: {new: MW, set: {nope: 1}}\n",
     "spec/zz.yaml:7: PD.f: set: MW has no state or slot 'nope'"),
    ("methods:\n  Context:\n    f:\n      verb: ibv_create_cq\n      params: {context: self, cqe: cqe, cq_context: {value: \"NULL\"},\n"
     "               channel: {value: \"NULL\"}, comp_vector: {arg: v, below: num_comp_vectors}}\n"
     "      errors: \"null\"\n",
     "spec/zz.yaml:6: Context.f: below: self.FIELD"),
    ("methods:\n  CQ:\n    f:\n      verb: ibv_wc_read_opcode\n      params: {cq: self}\n"
     "      errors: none\n      checks:\n        - {wc_flag: WITH_IMM}\n",
     "spec/zz.yaml:8: CQ.f: wc_flag: CQ has no state 'wc_flags'"),
    ("methods:\n  QPEx:\n    f:\n      verb: ibv_wr_set_inline_data\n      qpex: setter\n"
     "      params: {addr: {arg: data, convert: address}, length: {size_of: data}}\n      errors: none\n",
     "spec/zz.yaml:6: QPEx.f: size_of: data is no `convert: bytes` argument"),
    ("methods:\n  PD:\n    f:\n      verb: ibv_alloc_null_mr\n      params: {pd: self}\n"
     "      errors: \"null\"\n      returns: {new: MR, set: {owner: 1}}\n",
     "spec/zz.yaml:7: PD.f: set: slot owner takes `self`"),
    ("methods:\n  QP:\n    f:\n      verb: ibv_create_flow\n      params: {qp: self, flow: {arg: attr, convert: address}}\n"
     "      errors: \"null\"\n      checks:\n        - {packed_struct: attr, ctype: struct ibv_flow_attr, message: m}\n",
     "spec/zz.yaml:8: QP.f: packed_struct: attr is no `convert: bytes` argument"),
    ("methods:\n  QP:\n    f:\n      verb: ibv_create_flow\n      params: {qp: self, flow: {arg: attr, convert: bytes}}\n"
     "      errors: \"null\"\n      checks:\n        - {packed_struct: attr, message: m}\n",
     "spec/zz.yaml:8: QP.f: packed_struct: needs `ctype:` (a C struct type)"),
    ("methods:\n  QP:\n    f:\n      verb: ibv_create_flow\n      params: {qp: self, flow: {arg: attr, convert: bytes}}\n"
     "      errors: \"null\"\n      checks:\n        - {packed_struct: attr, ctype: struct ibv_flow_attr, size: 8, message: m}\n",
     "spec/zz.yaml:8: QP.f: packed_struct: unknown key 'size'"),
    ("methods:\n  QP:\n    f:\n      verb: ibv_create_flow\n      params: {qp: self, flow: {arg: attr, convert: bytes}}\n"
     "      errors: \"null\"\n      checks:\n        - {packed_items: attr, ctype: struct ibv_flow_attr, count: num_of_specs, header: hdr, message: m}\n",
     "spec/zz.yaml:8: QP.f: packed_items: needs `item:` (a C struct type)"),
    ("methods:\n  QP:\n    f:\n      verb: ibv_create_flow\n      params: {qp: self, flow: {arg: attr, convert: bytes}}\n"
     "      errors: \"null\"\n      checks:\n        - {packed_items: attr, ctype: struct ibv_flow_attr, item: struct ibv_flow_spec, header: hdr, message: m}\n",
     "spec/zz.yaml:8: QP.f: packed_items: needs `count:` (a member name)"),
    ("methods:\n  QP:\n    f:\n      verb: ibv_create_flow\n      params: {qp: self, flow: {arg: attr, convert: bytes}}\n"
     "      errors: \"null\"\n      checks:\n        - {packed_items: attr, ctype: struct ibv_flow_attr, count: num_of_specs, item: struct ibv_flow_spec,\n"
     "           header: hdr, kinds: [IBV_FLOW_SPEC_ETH], message: m}\n",
     "spec/zz.yaml:8: QP.f: packed_items: `kinds:` maps C constants to C struct types"),
])
def test_rule_errors_name_the_file_and_line(tmp_path, text, message):
    d = write_spec(tmp_path, text)
    with pytest.raises(spec.SpecError) as exc:
        spec.load(d)
    assert message in str(exc.value)
