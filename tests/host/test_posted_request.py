"""What the provider receives is what the SendWR says: each SendWR field
reaches the member of struct ibv_send_wr that verbs.h gives it for the
request's opcode family, by every post path (one request, the same request
again (kept), a chain, a PostList).  Checked through the recording
provider (tests/recording/recverbs.c), which reads every union through
every member; once against the values a verbs user expects, once against
spec/datapath/records.yaml's own placement of every field."""
from __future__ import annotations

import socket

import pytest

# every field set, to values that tell them apart
FIELDS = dict(remote_addr=0x1111222233334444, rkey=0x55, imm_data=0x01020304,
              compare_add=0x6666, swap=0x7777, remote_qpn=0x88, remote_qkey=0x99999999,
              invalidate_rkey=0xAABB, remote_srqn=0xCC)

# name: (opcode, UD with an AH), one per opcode family
FAMILIES = {
    "rdma_write": ("RDMA_WRITE", False),
    "rdma_write_with_imm": ("RDMA_WRITE_WITH_IMM", False),
    "rdma_read": ("RDMA_READ", False),
    "send_with_imm": ("SEND_WITH_IMM", False),
    "atomic_cmp_and_swp": ("ATOMIC_CMP_AND_SWP", False),
    "atomic_fetch_and_add": ("ATOMIC_FETCH_AND_ADD", False),
    "send_with_inv": ("SEND_WITH_INV", False),
    "local_inv": ("LOCAL_INV", False),
    "ud_send_with_ah": ("SEND", True),
}


def _post_every_family(rec):
    """Each family's request posted four ways; the records per family and
    way, and what Python shows of each request."""
    ib = rec.ib
    mr, _ = rec.mr()
    rc = rec.qp()
    ud = rec.qp(ib.QPType.UD)
    ah = rec.pd.create_ah(ib.AHAttr(dlid=3, is_global=0))
    out = {}
    for name, (opcode, with_ah) in FAMILIES.items():
        qp = ud if with_ah else rc
        wr = ib.SendWR(wr_id=len(out) + 1, sg_list=[mr.sge(8)], opcode=ib.WROpcode[opcode],
                       ah=ah if with_ah else None, **FIELDS)
        shown = {f: getattr(wr, f) for f in ("wr_id", "opcode", "send_flags", *FIELDS)}
        ways = {}
        for way, post in (("single", lambda: qp.post_send(wr)),
                          ("kept", lambda: qp.post_send(wr)),
                          ("chain", lambda: qp.post_send([wr, wr])),
                          ("postlist", lambda: qp.post_send(ib.PostList([wr])))):
            rec.clear()
            post()
            ways[way] = rec.requests()[0]
        out[name] = dict(shown=shown, ways=ways, ah=ah.handle if with_ah else None,
                         sge=(mr.addr, 8, mr.lkey))
    return out


@pytest.fixture(scope="module")
def posted(recording_library):
    import recording
    return recording.run(_post_every_family, lib=recording_library)


def _raw_be32(value: int) -> int:
    """A __be32 as the recorder reads it (a plain uint32_t in host order)."""
    return int.from_bytes(socket.htonl(value).to_bytes(4, "little"), "little")


# what verbs.h says each family's request carries (the recorder's names:
# union wr's members rdma_*, atomic_*, ud_*; imm_data the anonymous union,
# invalidate_rkey's place too)
RDMA = {"rdma_remote_addr": FIELDS["remote_addr"], "rdma_rkey": FIELDS["rkey"]}
ATOMIC = {"atomic_remote_addr": FIELDS["remote_addr"], "atomic_rkey": FIELDS["rkey"],
          "atomic_compare_add": FIELDS["compare_add"], "atomic_swap": FIELDS["swap"]}
IMM = {"imm_data": _raw_be32(FIELDS["imm_data"])}
INV = {"imm_data": FIELDS["invalidate_rkey"]}
EXPECTED = {
    "rdma_write": {**RDMA, **IMM},
    "rdma_write_with_imm": {**RDMA, **IMM},
    "rdma_read": {**RDMA, **IMM},
    "send_with_imm": {**RDMA, **IMM},
    "atomic_cmp_and_swp": {**ATOMIC, **IMM},
    "atomic_fetch_and_add": {**ATOMIC, **IMM},
    "send_with_inv": {**RDMA, **INV},
    "local_inv": {**RDMA, **INV},
    "ud_send_with_ah": {"ud_remote_qpn": FIELDS["remote_qpn"],
                        "ud_remote_qkey": FIELDS["remote_qkey"], **IMM},
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("way", ["single", "kept", "chain", "postlist"])
def test_each_field_reaches_its_member(posted, family, way):
    got = posted[family]
    req = got["ways"][way]
    shown = got["shown"]
    assert req["kind"] == "send"
    assert (req["wr_id"], req["opcode"], req["send_flags"]) == (
        shown["wr_id"], shown["opcode"], shown["send_flags"])
    assert req["sges"] == [got["sge"]] and req["num_sge"] == 1
    assert {k: req[k] for k in EXPECTED[family]} == EXPECTED[family]
    # XRC's remote SRQ number: the only member of its union, in every request
    assert req["xrc_remote_srqn"] == FIELDS["remote_srqn"]
    if got["ah"] is not None:
        assert req["ud_ah_handle"] == got["ah"]
    # (the last union, bind_mw/tso, is left as it is: no other opcode reads it)


def _recorder_name(path: str) -> str:
    """The recorder's name for a member path of struct ibv_send_wr."""
    if path == "invalidate_rkey":
        return "imm_data"                     # one place, read as imm_data
    for union in ("wr.", "qp_type."):
        if path.startswith(union):
            path = path[len(union):]
    return path.replace(".", "_")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_request_is_the_spec_s_placement_of_the_python_state(posted, family):
    """Every field of SendWR, placed by records.yaml's rules, is in the
    posted request: a field the spec adds is covered without a change here."""
    pytest.importorskip("clang.cindex", reason="libclang is not installed")
    from generator import parse, records
    from generator.paths import SPEC_DIR
    model = records.build(parse.parse(None), SPEC_DIR)
    record = next(r for r in model.records if r.key == "send_wr")
    sendwr = next(t for t in model.types if t.name == "SendWR")
    got = posted[family]
    shown = got["shown"]
    opcode_names = {e.value: e.name for e in model.ir.enum(record.opcode.ctype).members}
    checked = []
    for a in sendwr.attributes:
        if a.kind != "field":
            continue
        value = shown[a.name]
        if a.conv.kind == "be32":
            value = _raw_be32(value)
        places = dict(a.conv.union) if a.conv.union else {None: a.conv.path}
        if a.conv.union:
            union = next(u for u in record.unions if a.conv.union[0][0] in
                         [m.name for m in u.members])
            picked = next((m.name for m in union.members
                           if (m.ah and got["ah"] is not None)
                           or opcode_names[shown["opcode"]] in m.opcodes or m.otherwise), None)
            if picked not in places:
                continue                      # not a field of this request
            path = places[picked]
        else:
            path = places[None]
        for way, req in got["ways"].items():
            assert req[_recorder_name(path)] == value, (a.name, path, way)
        checked.append(a.name)
    assert "wr_id" in checked and "remote_srqn" in checked
