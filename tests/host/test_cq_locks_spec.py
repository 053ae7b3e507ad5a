"""The spec's provider locks (cq_locks:, generator/cq_locks.py): which verbs
take which CQ's lock is read from the spec, validated (errors name the
file and line), and becomes the model the templates emit."""
from __future__ import annotations

import pathlib
import shutil

import pytest

pytest.importorskip("yaml", reason="PyYAML is not installed")
pytest.importorskip("clang.cindex", reason="libclang is not installed (pip install libclang==18.1.1)")

from generator import builder, emit, parse, spec
from generator.paths import SPEC_DIR

pytestmark = pytest.mark.tooling

QP_LOCKS = """      ibv_destroy_qp: {cqs: [send_cq, recv_cq]}
      ibv_modify_qp: {cqs: [send_cq, recv_cq], when: ibp_qp_modify_to_reset}
"""


@pytest.fixture(scope="module")
def ir():
    return parse.parse(None)


@pytest.fixture
def spec_copy(tmp_path):
    root = tmp_path / "spec"
    shutil.copytree(SPEC_DIR, root)
    return root


def _qp(model):
    return next(h for h in model.handles if h.name == "QP")


def test_the_model_says_which_verbs_take_which_cqs_lock(ir):
    model = builder.build(ir, spec.load(str(SPEC_DIR)))
    qp = _qp(model)
    assert qp.destroy_cq_lock.cqs == ["send_cq", "recv_cq"]
    modify = next(m for m in qp.methods if m.name == "modify")
    assert modify.cq_lock.when == "ibp_qp_modify_to_reset"
    body = "\n".join(emit.method_body(modify))
    assert body.index("ibp_refuse_cq_locked(self, \"ibv_modify_qp\"") < body.index("rc = ibv_modify_qp(")
    wq = next(h for h in model.handles if h.name == "WQ")
    assert wq.destroy_cq_lock.cqs == ["cq"]
    unlocked = [m.name for h in model.handles for m in h.methods if m.cq_lock]
    assert sorted(unlocked) == ["modify", "modify"]        # QP's and WQ's, nothing else


@pytest.mark.parametrize("edit, message", [
    ("      ibv_destroy_qp: {cqs: [pd]}\n", "must name parents of class CQ"),
    ("      ibv_destroy_cq: {cqs: [send_cq]}\n", "neither its destroy verb nor the verb"),
    ("      ibv_destroy_qp: {cqs: [send_cq], when: ibp_x}\n", "'when' is for methods"),
    ("      ibv_modify_qp: {cqs: [send_cq], when: \"a || b\"}\n", "must name a C function"),
    ("      ibv_modify_qp: {cqz: [send_cq]}\n", "must be a mapping with 'cqs'"),
])
def test_a_wrong_cq_lock_is_refused_with_its_file_and_line(ir, spec_copy, edit, message):
    path = spec_copy / "qp.yaml"
    text = path.read_text(encoding="utf-8")
    assert QP_LOCKS in text
    path.write_text(text.replace(QP_LOCKS, edit), encoding="utf-8")
    line = text[:text.index(QP_LOCKS)].count("\n") + 1
    with pytest.raises(spec.SpecError) as exc:
        builder.build(ir, spec.load(str(spec_copy)))
    assert f"spec/qp.yaml:{line}:" in str(exc.value) and message in str(exc.value), str(exc.value)
