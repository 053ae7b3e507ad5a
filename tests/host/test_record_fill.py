"""The request a post hands the provider is generated: records.yaml places
every SendWR/RecvWR field at its C member path, those of a union in the
member its rules pick (an AH, the opcode), and generator/records.py emits
the fill from that (SendWR_prepare, SendWR_fill, RecvWR_fill, the
PostList entries' member choice).  A field the spec adds reaches the
request; a field or union member it cannot place is refused, with the
spec file and line."""
from __future__ import annotations

import pathlib
import re

import pytest

pytestmark = pytest.mark.tooling

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC = ROOT / "spec" / "datapath" / "records.yaml"
SRC = ROOT / "ibverbs" / "src"

pytest.importorskip("clang.cindex", reason="libclang is not installed")

# TSO's maximum segment size: a real member of struct ibv_send_wr that the
# spec does not show, in the union only the TSO opcode uses
MSS_FIELD = ("      remote_srqn: {union: {xrc: qp_type.xrc.remote_srqn}}\n",
             "      remote_srqn: {union: {xrc: qp_type.xrc.remote_srqn}}\n"
             "      mss: {union: {tso: tso.mss}}\n")
MSS_ATTRIBUTE = ('      invalidate_rkey: {field: send_wr.invalidate_rkey, doc: "The rkey to invalidate',
                 '      mss: {field: send_wr.mss, doc: "TSO maximum segment size."}\n'
                 '      invalidate_rkey: {field: send_wr.invalidate_rkey, doc: "The rkey to invalidate')


@pytest.fixture(scope="module")
def ir():
    from generator import parse
    return parse.parse(None)


def _spec(tmp_path, *changes):
    """A scratch spec/ whose records.yaml has each (old, new) replaced once;
    with the 1-based line of the last replacement's first line."""
    text = SPEC.read_text(encoding="utf-8")
    line = 0
    for old, new in changes:
        assert text.count(old) >= 1, old
        line = text[:text.index(old)].count("\n") + 1
        text = text.replace(old, new, 1)
    (tmp_path / "datapath").mkdir()
    (tmp_path / "datapath" / "records.yaml").write_text(text, encoding="utf-8")
    return str(tmp_path), line


def _render(ir, spec_root):
    from generator import records, render
    from generator.paths import TEMPLATE_DIR
    from generator.model import Model
    return render.render(Model(records=records.build(ir, spec_root)), TEMPLATE_DIR)


def _function(text: str, name: str) -> str:
    m = re.search(rf"^{name}\(.*?^}}$", text, re.M | re.S)
    assert m, name
    return m.group(0)


def test_a_field_added_to_the_spec_is_written_into_the_posted_request(tmp_path, ir):
    root, _ = _spec(tmp_path, MSS_FIELD, MSS_ATTRIBUTE)
    files = _render(ir, root)
    prepare = _function(files["sendwr.c.h"], "SendWR_prepare")
    assert re.search(r"switch \(ibp_send_wr_ext_member\(w->opcode, w->ah != NULL\)\) \{\n"
                     r"    case IBP_SEND_WR_EXT_TSO:\n"
                     r"        wr->tso\.mss = w->mss;\n", prepare), prepare
    # the object keeps it, and the compiler checks its place and type
    assert re.search(r"^    uint16_t mss;$", files["records.h"], re.M)
    assert "((struct ibv_send_wr *)0)->tso.mss) == 2" in files["records.h"]
    # a TSO request is copied whole, so that the post hands it over
    assert "opcode == IBV_WR_TSO" in _function(files["records.h"], "ibp_send_wr_uses_ext")
    # without the spec's line, nothing writes it
    plain = _function(_render(ir, str(ROOT / "spec"))["sendwr.c.h"], "SendWR_prepare")
    assert "mss" not in plain


def test_the_generated_fill_places_each_field_by_its_union_rule(ir):
    files = _render(ir, str(ROOT / "spec"))
    prepare = _function(files["sendwr.c.h"], "SendWR_prepare")
    cases = dict(re.findall(r"case (IBP_SEND_WR_\w+):\n((?:        wr->.*\n)+)", prepare))
    assert cases["IBP_SEND_WR_WR_UD"].split() == [
        "wr->wr.ud.remote_qpn", "=", "w->remote_qpn;", "wr->wr.ud.remote_qkey", "=", "w->remote_qkey;"]
    assert "wr->wr.atomic.rkey = w->rkey;" in cases["IBP_SEND_WR_WR_ATOMIC"]
    assert "wr->wr.atomic.swap = w->swap;" in cases["IBP_SEND_WR_WR_ATOMIC"]
    assert "wr->wr.rdma.rkey = w->rkey;" in cases["IBP_SEND_WR_WR_RDMA"]
    # the union's only member, filled for every request (a request is
    # prepared once for whatever QP it is posted to; XRC_SEND QPs read it)
    assert cases["IBP_SEND_WR_QP_TYPE_XRC"].strip() == "wr->qp_type.xrc.remote_srqn = w->remote_srqn;"
    assert cases["IBP_SEND_WR_DATA_INV"].strip() == "wr->invalidate_rkey = w->invalidate_rkey;"
    assert cases["IBP_SEND_WR_DATA_IMM"].strip() == "wr->imm_data = w->imm_data;"
    rules = files["records.h"]
    wr_rule = _function(rules, "ibp_send_wr_wr_member")
    # tried in the spec's order: the AH first, then the atomic opcodes
    assert wr_rule.index("if (has_ah)") < wr_rule.index("IBV_WR_ATOMIC_CMP_AND_SWP")
    assert "opcode == IBV_WR_BIND_MW || opcode == IBV_WR_TSO" in _function(
        rules, "ibp_send_wr_uses_ext")
    assert "wr->wr_id = w->prepared.wr_id;" in _function(files["recvwr.c.h"], "RecvWR_fill")
    assert "wr->wr_id = w->wr_id;" in _function(files["sendwr.c.h"], "SendWR_fill")


def test_no_member_list_or_union_rule_is_written_by_hand():
    # the AH pointer (an object's, read at each post) is the only member of
    # the unions the hand-written posts store
    for name in ("wr.c", "post.c", "postlist.c", "postlist_entry.c"):
        code = re.sub(r"/\*.*?\*/", "", (SRC / name).read_text(encoding="utf-8"), flags=re.S)
        found = re.findall(r"\bwr\.(?:rdma|atomic)\b|\bwr\.ud\.remote|->(?:imm_data|invalidate_rkey)\b"
                           r"|IBV_WR_(?:ATOMIC|LOCAL_INV|SEND_WITH_INV|TSO)\w*", code)
        assert found == [], name


# (old, new, the error after "records.yaml:<line>: "): the line is the new text's
REFUSED = {
    "field_path_not_in_the_struct": (
        MSS_FIELD[0], MSS_FIELD[0] + "      mss: {union: {tso: tso.msss}}\n",
        r"struct ibv_send_wr has no member 'tso\.msss'"),
    "field_of_an_unknown_member": (
        MSS_FIELD[0], MSS_FIELD[0] + "      mss: {union: {tcp: tso.mss}}\n",
        r"send_wr\.mss: tcp is not a member of a union of send_wr"),
    "field_in_a_union_without_its_member": (
        "      invalidate_rkey: {union: {inv: invalidate_rkey}}\n", "      invalidate_rkey: {}\n",
        r"send_wr\.invalidate_rkey: it lives in union ibv_send_wr::\(anonymous at field imm_data\): "
        r"say in which member"),
    "field_outside_its_member": (
        "      remote_qpn: {union: {ud: wr.ud.remote_qpn}}\n",
        "      remote_qpn: {union: {ud: wr.rdma.rkey}}\n",
        r"send_wr\.remote_qpn: wr\.rdma\.rkey is not inside member ud \(wr\.ud\)"),
    "member_without_a_rule": (
        "        xrc: {path: qp_type.xrc, otherwise: true, user: a request}\n",
        "        xrc: {path: qp_type.xrc, user: a request}\n",
        r"send_wr\.unions\.qp_type\.xrc: needs one rule that picks it"),
    "member_path_not_in_the_struct": (
        "        ud: {path: wr.ud, ah: true, user: a UD request}\n",
        "        ud: {path: wr.udp, ah: true, user: a UD request}\n",
        r"struct ibv_send_wr has no member 'wr\.udp'"),
    "member_outside_a_union": (
        "        xrc: {path: qp_type.xrc, otherwise: true, user: a request}\n",
        "        xrc: {path: send_flags, otherwise: true, user: a request}\n",
        r"send_wr\.unions\.qp_type\.xrc: send_flags is not a member of a union"),
    "unknown_opcode": (
        "        tso: {path: tso, opcodes: [IBV_WR_TSO], user: a TSO request}\n",
        "        tso: {path: tso, opcodes: [IBV_WR_TS0], user: a TSO request}\n",
        r"send_wr\.unions\.ext\.tso: IBV_WR_TS0 is not a member of enum ibv_wr_opcode"),
    "otherwise_before_another_member": (
        "        ud: {path: wr.ud, ah: true, user: a UD request}\n",
        "        ud: {path: wr.ud, otherwise: true, user: a UD request}\n",
        r"send_wr\.unions\.wr\.ud: otherwise is the last member's rule"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_field_or_member_the_spec_cannot_place_is_refused_with_file_and_line(tmp_path, ir, case):
    from generator import records
    from generator.spec import SpecError
    old, new, message = REFUSED[case]
    root, line = _spec(tmp_path, (old, new))
    if new.startswith(old):         # an added line: the one after
        line += old.count("\n")
    with pytest.raises(SpecError, match=rf"^spec/datapath/records\.yaml:{line}: {message}"):
        records.build(ir, root)
