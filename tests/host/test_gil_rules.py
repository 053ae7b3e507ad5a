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

pytestmark = pytest.mark.tooling


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
                    "if (ibp_hold(init_attr->ref_send_cq, CQ_Type, &init_attr_send_cq_held) < 0)",
                    "if (ibp_hold(init_attr->ref_recv_cq, CQ_Type, &init_attr_recv_cq_held) < 0)",
                    "if (ibp_hold(init_attr->ref_srq, SRQ_Type, &init_attr_srq_held) < 0)"]
    # the struct's handles as held are the new QP's parents; the verb gets a copy
    assert "return_value = QP_wrap(rc, self, init_attr_send_cq_held, init_attr_recv_cq_held, " \
           "init_attr_srq_held);" in body
    assert "rc = ibv_create_qp(self_ptr, &init_attr_c);" in body
    release = body.index("Py_BEGIN_ALLOW_THREADS")
    assert body.index("if (ibp_hold(init_attr->ref_srq, SRQ_Type, &init_attr_srq_held) < 0)") < release
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


def _struct_held_then_prepared(body, arg, var, struct, call):
    """In a wrapper's body: struct argument *arg* (its object in local
    *var*) locked, each handle held (typed), X_prepare once, the handles
    compared with those held, all before *call*."""
    prepares = [i for i, line in enumerate(body) if f"{struct}_prepare(" in line]
    assert len(prepares) == 1, (arg, prepares)
    lock = body.index(f"ibp_lock(&{arg}_lock, {var});")
    holds = [i for i, line in enumerate(body) if line.startswith(f"if (ibp_hold({var}->ref_")]
    same = next(i for i, line in enumerate(body) if f"{var}->ref_" in line and "!=" in line)
    called = next(i for i, line in enumerate(body) if call in line)
    assert holds and lock < min(holds) and max(holds) < prepares[0] < same < called, arg
    assert body[same + 1] == (f'    PyErr_SetString(PyExc_RuntimeError, "{arg} was set by '
                              'another thread during this call");')
    assert all("NULL, &" not in body[i] for i in holds), arg
    unlock = body.index(f"    ibp_unlock(&{arg}_lock);")
    assert called < unlock < min(i for i, line in enumerate(body) if line.startswith(
        f"ibp_unhold({arg}_")), arg


def test_a_structs_handles_are_held_then_checked_open_in_its_lock_and_nowhere_else(built):
    """X_prepare() checks the handles open and writes their pointers into
    the struct: only after each is held (a close() either sees the hold or
    is over, so none is destroyed between the check and the call), only in
    the struct's critical section (another thread may set or prepare it),
    and only when the handles are still those held (a hold that waits for
    its object's lock suspends the struct's).  Only an object of the
    field's class is held: the field stores any object, as the seed's did.
    A hand method's struct argument (CMID.create_qp's init_attr,
    struct_instance:) is held and prepared by its generated wrapper alike,
    before the hand code runs."""
    for cls, name, arg, struct, call in (
            ("PD", "create_qp", "init_attr", "QPInitAttr", "ibv_create_qp("),
            ("QP", "bind_mw", "bind", "MWBind", "ibv_bind_mw("),
            ("QPEx", "wr_bind_mw", "bind_info", "MWBindInfo", "ibv_wr_bind_mw(")):
        _struct_held_then_prepared(emit.method_body(_method(built, cls, name)), arg, arg, struct,
                                   call)
    from generator import rdmacm
    cm = rdmacm.load(os.environ.get("RDMA_CORE") or None, SPEC_DIR)
    create_qp = next(m for h in cm.handles if h.name == "CMID" for m in h.methods
                     if m.name == "create_qp")
    _struct_held_then_prepared(emit.impl_body(create_qp), "init_attr", "init_attr_c", "QPInitAttr",
                               "ibp_hand_CMID_create_qp_impl(")
    # and the hand code holds nothing of it itself
    cm_id = (pathlib.Path(__file__).resolve().parents[2] / "ibverbs" / "src" / "cm_id.c").read_text()
    impl = cm_id[cm_id.index("PyObject *ibp_hand_CMID_create_qp_impl("):]
    impl = impl[:impl.index("\n}\n")]
    assert "ibp_hold" not in impl and "QPInitAttr_prepare" not in impl and "ibp_lock" not in impl


def test_a_close_whose_destroy_releases_the_gil_never_shows_the_freed_object_again():
    """close() sets ptr NULL before the destroy verb runs without the GIL
    (on a free-threaded target, without the object's critical section:
    another thread may hold it and read ptr).  Only a failed destroy puts
    ptr back; a successful one must not, even for a moment, or that thread
    takes the freed object for an open one (TSan saw the store)."""
    import re
    generated = pathlib.Path(__file__).resolve().parents[2] / "generated"
    closes = 0
    for path in sorted(generated.glob("*.c.h")):
        for body in re.findall(r"^\w+_destroy\(struct \w+ \*self, int from_close\)\n\{\n(.*?)^\}$",
                               path.read_text(), re.M | re.S):
            if "Py_BEGIN_ALLOW_THREADS" not in body:
                continue
            closes += 1
            lines = [line.strip() for line in body.splitlines()]
            restores = [i for i, line in enumerate(lines) if line == "self->head.ptr = ptr;"]
            assert restores and all(lines[i - 1] == "if (rc != 0) {" for i in restores), path.name
    assert closes >= 10


# ---- hand-written methods (generator/hand_gil.py) ---------------------------------

def test_hand_methods_get_their_rule_from_their_verbs_and_hold_what_the_spec_lists(built):
    ctx = next(h for h in built.handles if h.name == "Context")
    table = next(m for m in ctx.methods if m.name == "create_rwq_ind_table")
    # the impl argument wqs, a sequence of handles (its C the emit stage writes)
    assert table.release_gil and table.hand_holds == [(None, "wqs", "wqs_held", True)]
    body = "\n".join(emit.impl_body(table))
    # the WQs are held once converted, before the hand code runs, and let go after
    assert body.index("ibp_hold_each(wqs_c, &wqs_held)") < body.index(
        "ibp_hand_Context_create_rwq_ind_table_impl(self, wqs_c)") < body.index(
        "ibp_unhold_each(wqs_held)")
    assert _method(built, "CompChannel", "get_cq_event").release_gil
    for cls, name in (("QP", "post_send"), ("CQ", "poll"), ("CQ", "req_notify")):
        assert not _method(built, cls, name).release_gil, (cls, name)


def test_the_rdma_cm_calls_hold_the_ids_qp_and_channel(ir):
    from generator import rdmacm
    cm = rdmacm.load(os.environ.get("RDMA_CORE") or None, SPEC_DIR)
    cmid = next(h for h in cm.handles if h.name == "CMID")
    for name in ("connect", "accept", "disconnect", "establish", "migrate"):
        m = next(m for m in cmid.methods if m.name == name)
        assert m.release_gil, name
        body = "\n".join(emit.impl_body(m))
        assert "ibp_hold(((struct CMIDObject *)self)->qp, NULL, &self_qp_held)" in body, name
        assert "ibp_hold(((struct CMIDObject *)self)->channel, NULL, " in body, name
        assert body.index("self_qp_held) < 0") < body.index(f"ibp_hand_CMID_{name}_impl(")
    for name in ("bind_addr", "listen", "create_qp"):
        assert not next(m for m in cmid.methods if m.name == name).release_gil


@pytest.mark.parametrize("old, new, message", [
    ("        holds: [self.qp, self.channel]     # librdmacm reads and moves id->qp\n", "",
     "CMID.connect: it releases the GIL (its verbs' kind, spec/gil.yaml): list what it hands"),
    ("        holds: [self.qp, self.channel]     # librdmacm reads and moves id->qp\n",
     "        holds: [self.route]\n", "holds self.route: CMID has no slot or parent route"),
    ("        verbs: [rdma_reject]\n        holds: [self.channel]\n",
     "        verbs: [rdma_reject]\n        holds: [private_data]\n",
     "holds private_data: not self.<slot or parent> nor a handle argument"),
    ("      - rdma_listen\n", "", "rdma_listen has no GIL rule"),
])
def test_hand_gil_mistakes_are_spec_errors(tmp_path, ir, old, new, message):
    from generator import rdmacm
    d = tmp_path / "spec"
    shutil.copytree(SPEC_DIR, d)
    for name in ("rdmacm/cm.yaml", "rdmacm/gil.yaml"):
        text = (d / name).read_text()
        if old in text:
            (d / name).write_text(text.replace(old, new, 1))
            break
    else:
        raise AssertionError(f"not in the spec: {old!r}")
    with pytest.raises(spec.SpecError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace(".", r"\.")):
        rdmacm.load(os.environ.get("RDMA_CORE") or None, str(d))


# ---- short_way: a hand function before the call is entered (generator/impl.py) -------

def test_short_way_methods_hand_positional_calls_over_before_entering(built):
    post = _method(built, "QP", "post_send")
    assert post.short_way == "ibp_hand_QP_post_send_short"
    assert post.entered == "ibp_QP_post_send_entered"
    body = "\n".join(emit.impl_body(post))
    # the wrapper enters nothing itself: the short way, or the keywords' parser
    assert "ibp_call_enter" not in body
    assert body.index("return ibp_hand_QP_post_send_short(self, args[0]);") < body.index(
        "return QP_post_send_unpack(self, args, nargs, kwnames);")
    entered = "\n".join(emit.entered_lines(post))
    assert entered.index("ibp_call_enter(self)") < entered.index(
        "ibp_hand_QP_post_send_impl(self, wrs_obj)") < entered.index("ibp_call_leave(self)")
    assert "return ibp_QP_post_send_entered(self, argv[0]);" in emit.unpack_lines(post)[-1]
    for cls in ("QP", "SRQ", "WQ"):
        assert _method(built, cls, "post_recv").short_way, cls
    # a converted argument: the short way gets it as it came, the fallback converts it
    poll = _method(built, "CQ", "poll")
    assert poll.short_way == "ibp_hand_CQ_poll_short"
    entered = "\n".join(emit.entered_lines(poll))
    assert entered.index("ibp_call_enter(self)") < entered.index(
        "ibp_conv_positive_int(num_entries_obj") < entered.index(
        "ibp_hand_CQ_poll_impl(self, num_entries_c)")
    assert not _method(built, "CQ", "req_notify").short_way


@pytest.mark.parametrize("where, old, new, message", [
    # an optional argument: the short way takes them all by position
    ("mr.yaml", "        keywords: true\n        impl: {length: {convert: object}",
     "        keywords: true\n        short_way: true\n        impl: {length: {convert: object}",
     "MR.sge: short_way: argument 'length' must be required"),
    ("qp.yaml", "        short_way: true    # a kept request is posted before the call is entered (post.c)\n"
     "        impl: {wrs: {convert: object}}\n        stub: \"(self, wrs: SendWR",
     "        short_way: yes please\n        impl: {wrs: {convert: object}}\n        stub: \"(self, wrs: SendWR",
     "QP.post_send: short_way: true or false"),
    # not in flight: only for a method that keeps the GIL
    ("qp.yaml", "        short_way: true    # a kept request is posted before the call is entered (post.c)\n"
     "        impl: {wrs: {convert: object}}\n        stub: \"(self, wrs: SendWR",
     "        short_way: true\n        gil: release\n        holds: [self.pd]\n"
     "        impl: {wrs: {convert: object}}\n"
     "        stub: \"(self, wrs: SendWR",
     "QP.post_send: short_way is for a method that keeps the GIL and holds nothing"),
])
def test_short_way_mistakes_are_spec_errors(tmp_path, ir, where, old, new, message):
    d = tmp_path / "spec"
    shutil.copytree(SPEC_DIR, d)
    text = (d / where).read_text()
    assert old in text, old
    (d / where).write_text(text.replace(old, new, 1))
    with pytest.raises(spec.SpecError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace(".", r"\.")) as exc:
        builder.build(ir, spec.load(str(d)))
    assert f"{where}:" in str(exc.value)       # the file and line of the mistake
