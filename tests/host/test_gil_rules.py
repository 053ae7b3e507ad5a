"""The GIL rule of every verb comes from spec/gil.yaml (generator/gil.py),
and a call's holds are generated from its parameters (generator/emit.py).
The device tier proves the behaviour: tests/device/test_gil.py."""
from __future__ import annotations

import os
import pathlib
import shutil

import pytest

pytest.importorskip("clang.cindex", reason="libclang is not installed (pip install libclang==18.1.1)")

from generator import builder, emit, parse, spec  # noqa: E402
from generator.cli import SPEC_DIR  # noqa: E402


@pytest.fixture(scope="module")
def ir():
    return parse.parse(os.environ.get("RDMA_CORE") or None)


@pytest.fixture(scope="module")
def built(ir):
    return builder.build(ir, spec.load(SPEC_DIR))


def _method(built, cls, name):
    return next(m for h in built.handles if h.name == cls for m in h.methods if m.name == name)


def _spec_with(tmp_path, name, text):
    d = tmp_path / "spec"
    shutil.copytree(SPEC_DIR, d)
    (d / name).write_text(text)
    return str(d)


def test_every_generated_verb_and_destroy_has_a_rule_by_kind(built):
    released = {f"{h.name}.{m.name}" for h in built.handles for m in h.methods if m.release_gil}
    # what the seed released, and the verbs that enter the kernel
    assert {"PD._reg_mr", "PD.reg_dmabuf_mr", "PD.create_qp", "QP.modify", "Context.create_cq",
            "Context.alloc_pd", "Context.query_port", "CQ.resize"} <= released
    # the data path keeps it
    for h in built.handles:
        if h.name in ("QPEx", "CQEx"):
            assert not any(m.release_gil for m in h.methods if not m.hand), h.name
    assert not _method(built, "QP", "bind_mw").release_gil
    closes = {h.name: h.destroy_releases_gil for h in built.handles}
    assert closes["QP"] and closes["MR"] and closes["Context"] and closes["CQ"]


def test_a_verb_without_a_rule_is_a_spec_error(tmp_path, ir):
    text = pathlib.Path(SPEC_DIR, "gil.yaml").read_text()
    assert "      - ibv_inc_rkey\n" in text
    d = _spec_with(tmp_path, "gil.yaml", text.replace("      - ibv_inc_rkey\n", ""))
    with pytest.raises(spec.SpecError) as exc:
        builder.build(ir, spec.load(d))
    assert "ibv_inc_rkey has no GIL rule: add it to a kind of spec/gil.yaml" in str(exc.value)
    assert "spec/module.yaml:" in str(exc.value)


def test_a_verb_of_two_kinds_is_a_spec_error(tmp_path, ir):
    d = _spec_with(tmp_path, "zz.yaml",
                   "gil:\n  extra: {rule: release, why: none, verbs: [ibv_inc_rkey]}\n")
    with pytest.raises(spec.SpecError) as exc:
        builder.build(ir, spec.load(d))
    assert "ibv_inc_rkey matches the GIL kinds local and extra" in str(exc.value)


@pytest.mark.parametrize("text,message", [
    ("gil:\n  k: {rule: maybe, why: x, verbs: [a]}\n", "spec/zz.yaml:2: gil kind k: rule must be"),
    ("gil:\n  k: {rule: hold, verbs: [a]}\n", "gil kind k: needs exactly rule, verbs, why"),
    ("gil:\n  k: {rule: hold, why: x, verbs: []}\n", "gil kind k: verbs must be a non-empty list"),
])
def test_gil_kind_mistakes_name_the_line(tmp_path, text, message):
    with pytest.raises(spec.SpecError) as exc:
        spec.load(_spec_with(tmp_path, "zz.yaml", text))
    assert message in str(exc.value)


def test_a_call_holds_self_its_handle_arguments_and_its_structs_handles(built):
    body = emit.method_body(_method(built, "PD", "create_qp"))
    held = [line for line in body if line.startswith("if (ibp_hold(")]
    assert held == ["if (ibp_hold(self, NULL, &self_held) < 0)",
                    "if (ibp_hold(init_attr->ref_send_cq, NULL, &init_attr_send_cq_held) < 0)",
                    "if (ibp_hold(init_attr->ref_recv_cq, NULL, &init_attr_recv_cq_held) < 0)",
                    "if (ibp_hold(init_attr->ref_srq, NULL, &init_attr_srq_held) < 0)"]
    # the struct's handles as held are the new QP's parents; the verb gets a copy
    assert "return_value = QP_wrap(rc, self, init_attr_send_cq_held, init_attr_recv_cq_held, " \
           "init_attr_srq_held);" in body
    assert "rc = ibv_create_qp(self_ptr, &init_attr_c);" in body
    release = body.index("Py_BEGIN_ALLOW_THREADS")
    assert body.index("if (ibp_hold(init_attr->ref_srq, NULL, &init_attr_srq_held) < 0)") < release
    assert body[-5:] == ["ibp_unhold(init_attr_srq_held);", "ibp_unhold(init_attr_recv_cq_held);",
                         "ibp_unhold(init_attr_send_cq_held);", "ibp_unhold(self_held);",
                         "return return_value;"]


def test_handle_arguments_are_held_before_anything_is_converted(built):
    body = emit.method_body(_method(built, "Context", "create_cq"))
    hold = body.index("if (ibp_hold(channel_obj, CompChannel_Type, &channel_held) < 0)")
    assert body.index("if (ibp_hold(self, NULL, &self_held) < 0)") < hold
    first_conversion = next(i for i, line in enumerate(body) if "ibp_conv_" in line)
    assert hold < first_conversion
    assert hold < body.index("if (ibp_check_open(self) < 0)")
