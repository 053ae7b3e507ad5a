"""`python -m generator audit OLD NEW` (make audit): what changed in verbs.h
between two releases and what the spec does about it.

Real releases come from tools/rdma-core's cache (skipped when not fetched);
the synthetic cases edit a copy of one real IR.
"""
from __future__ import annotations

import copy
import json
import os
import pathlib

import pytest

pytest.importorskip("clang.cindex", reason="libclang is not installed (pip install libclang==18.1.1)")

from generator import audit, irjson, parse, spec  # noqa: E402
from generator.cli import SPEC_DIR, main  # noqa: E402
from generator.ir import Enum, EnumMember, Function, Param, Type  # noqa: E402

pytestmark = pytest.mark.tooling

CACHE = pathlib.Path(os.environ.get("IBVERBS_RDMA_CACHE")
                     or pathlib.Path(os.environ.get("XDG_CACHE_HOME")
                                     or pathlib.Path.home() / ".cache") / "ibverbs-rdma-core")
_irs: dict = {}


def ir_of(release: str):
    p = CACHE / release
    if not (p / ".complete").exists():
        pytest.skip(f"rdma-core {release} is not fetched (tools/rdma-core {release})")
    if release not in _irs:
        _irs[release] = parse.parse(str(p))
    return _irs[release]


def run(old, new, the_spec=None) -> audit.Report:
    src = lambda ir: audit.Source(ir.rdma_core or "x", "json", None, ir)
    return audit.audit(src(old), src(new), the_spec or spec.load(SPEC_DIR))


def item(report, kind, name):
    found = [i for i in report.items if i.kind == kind and i.name == name]
    assert found, f"no {kind} {name} in the report"
    return found[0]


def test_33_2_to_44_0_reports_reg_dmabuf_mr_added_in_34_and_bound():
    r = run(ir_of("33.2"), ir_of("44.0"))
    i = item(r, "function", "ibv_reg_dmabuf_mr")
    assert (i.change, i.status) == ("added", "bound")
    assert "PD.reg_dmabuf_mr" in i.spec
    assert i.since.startswith("34")
    assert item(r, "enum", "enum ibv_fork_status").status == "bound"
    atomic_write = item(r, "function", "ibv_wr_atomic_write")   # an inline function
    assert (atomic_write.change, atomic_write.status) == ("added", "bound")
    assert "QPEx.wr_atomic_write" in atomic_write.spec
    assert r.exit_status == 0
    text = audit.render_text(r)
    assert "ibv_reg_dmabuf_mr" in text and "added in rdma-core 34" in text


def test_44_0_to_65_0_reports_what_is_new_and_what_the_spec_does():
    r = run(ir_of("44.0"), ir_of("65.0"))
    assert item(r, "function", "ibv_query_port_speed").status == "bound"
    assert item(r, "function", "ibv_wr_opcode_str").status == "bound"
    for name in ("ibv_create_comp_cntr", "ibv_read_comp_cntr", "ibv_qp_attach_comp_cntr",
                 "ibv_query_comp_cntr_caps"):
        assert item(r, "function", name).status == "bound", name
    assert not [i.name for i in r.items if i.status == "decide"]
    for name in ("ibv_reg_mr_ex", "ibv_alloc_dmah", "ibv_wr_flush"):
        assert item(r, "function", name).status == "excluded", name
    port = item(r, "record", "struct ibv_port_attr")
    assert port.status == "bound" and any("active_speed_ex" in d for d in port.details)
    wr = item(r, "enum", "enum ibv_wr_opcode")
    assert wr.status == "bound" and any("IBV_WR_FLUSH=14" in d for d in wr.details)
    vc = item(r, "record", "struct verbs_context")
    assert any("grew at the front by 48" in d for d in vc.details)
    assert r.exit_status == 0, audit.render_text(r)


def test_a_new_public_function_nobody_decided_on_needs_a_decision():
    old = ir_of("44.0")
    new = copy.deepcopy(old)
    new.functions.append(Function("ibv_frobnicate", Type("int", "int", 4, True),
                                  [Param("qp", Type("struct ibv_qp *", "pointer", 8))],
                                  False, "exported", None, old.source))
    r = run(old, new)
    i = item(r, "function", "ibv_frobnicate")
    assert i.status == "decide"
    assert any("symbols.optional" in d for d in i.details)
    assert r.exit_status == 1


def test_a_bound_verb_that_disappears_is_an_error():
    old = ir_of("44.0")
    new = copy.deepcopy(old)
    new.functions = [f for f in new.functions if f.name != "ibv_alloc_mw"]
    r = run(old, new)
    i = item(r, "function", "ibv_alloc_mw")
    assert (i.change, i.status) == ("removed", "error")
    assert "PD.alloc_mw" in i.spec and "no longer has it" in i.spec
    assert r.exit_status == 1


def test_a_changed_signature_of_a_bound_verb_is_checked_against_the_spec():
    old = ir_of("44.0")
    new = copy.deepcopy(old)
    f = new.function("ibv_inc_rkey")
    f.params[0].name = "key"     # the spec maps `rkey`
    r = run(old, new)
    i = item(r, "function", "ibv_inc_rkey")
    assert i.status in ("decide", "error")
    assert "rkey" in " ".join(i.details) + i.spec
    assert r.exit_status == 1


def test_renumbered_members_of_a_bound_enum_need_a_decision():
    old = ir_of("44.0")
    new = copy.deepcopy(old)
    e = new.enum("enum ibv_qp_type")
    e.members = [EnumMember(m.name, m.value + 100 if m.name == "IBV_QPT_RC" else m.value)
                 for m in e.members]
    r = run(old, new)
    i = item(r, "enum", "enum ibv_qp_type")
    assert i.status == "decide" and "IBV_QPT_RC 2 -> 102" in " ".join(i.details)


def test_a_moved_field_of_a_bound_struct_needs_a_decision():
    old = ir_of("44.0")
    new = copy.deepcopy(old)
    rec = new.record("struct ibv_port_attr")
    rec.fields[0], rec.fields[1] = rec.fields[1], rec.fields[0]
    rec.fields[0].offset, rec.fields[1].offset = rec.fields[1].offset, rec.fields[0].offset
    r = run(old, new)
    i = item(r, "record", "struct ibv_port_attr")
    assert i.status == "decide" and any("fields moved" in d for d in i.details)


def test_a_field_the_spec_names_that_disappears_is_an_error():
    old = ir_of("44.0")
    new = copy.deepcopy(old)
    rec = new.record("struct ibv_ah_attr")
    rec.fields = [f for f in rec.fields if f.name != "sl"]
    r = run(old, new)
    i = item(r, "record", "struct ibv_ah_attr")
    assert i.status == "error" and "AHAttr.sl" in i.spec


def test_a_new_unbound_enum_needs_nothing():
    old = ir_of("44.0")
    new = copy.deepcopy(old)
    new.enums.append(Enum("enum ibv_shiny", [EnumMember("IBV_SHINY_A", 1)], old.source, False, 4))
    r = run(old, new)
    assert item(r, "enum", "enum ibv_shiny").status == "unbound"
    assert r.exit_status == 0


def test_cli_reads_ir_dumps_prints_json_and_sets_the_exit_status(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(irjson.dump(ir_of("33.2")))
    b.write_text(irjson.dump(ir_of("44.0")))
    assert main(["audit", str(a), str(b), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["old"]["rdma_core"] == "33.2" and data["new"]["rdma_core"] == "44.0"
    names = {(i["kind"], i["name"]): i for i in data["items"]}
    assert names[("function", "ibv_reg_dmabuf_mr")]["status"] == "bound"
    assert data["exit_status"] == 0 and set(data["summary"]) == set(audit.STATUSES)
    # the reverse direction: the spec binds what 33.2 "no longer has"
    assert main(["audit", str(b), str(a)]) == 1
    out = capsys.readouterr().out
    assert "!! removed ibv_reg_dmabuf_mr" in out and "exit status 1" in out


def test_cli_rejects_what_it_cannot_read(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["audit", str(bad), "nonsense-release"]) == 2
    assert "error:" in capsys.readouterr().err
