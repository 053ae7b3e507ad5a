"""Every method says what it does, in our own words (issue #15, point 2):
the generated ones with Args / Returns / Raises and the rdma-core release
of their verb, the same text in the extension and in its stubs."""
from __future__ import annotations

import ast
import inspect
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

ib = pytest.importorskip("ibverbs")
ext = ib._ibverbs

ONLY_CALLS = re.compile(r"^\s*Calls [\w, ]+\.\s*$")


def _methods():
    for cname in sorted(dir(ext)):
        cls = getattr(ext, cname)
        if not isinstance(cls, type):
            continue
        for name, member in sorted(vars(cls).items()):
            if callable(member) and not name.startswith("__") and name != "_open_count":
                yield f"{cname}.{name}", member
    for name in sorted(dir(ext)):
        member = getattr(ext, name)
        if callable(member) and not isinstance(member, type) and not name.startswith("_"):
            yield name, member


METHODS = list(_methods())


def _body(doc: str) -> str:
    return doc.split("\n--\n\n", 1)[-1] if doc else ""


@pytest.mark.parametrize("label,member", METHODS, ids=[m[0] for m in METHODS])
def test_no_docstring_is_only_calls_ibv_xxx(label, member):
    body = _body(member.__doc__ or "")
    assert body.strip(), f"{label} has no docstring"
    assert not ONLY_CALLS.match(body), f"{label}: {body!r}"


def _generated():
    from generator import builder, parse, spec
    from generator.cli import SPEC_DIR

    built = builder.build(parse.parse(None), spec.load(SPEC_DIR))
    methods = [m for h in built.handles for m in h.methods] + built.functions
    return [m for m in methods if not m.hand]


@pytest.fixture(scope="module")
def generated():
    try:
        return _generated()
    except Exception as exc:      # no rdma-core headers here
        pytest.skip(f"cannot parse verbs.h: {exc}")


def test_generated_docstrings_say_args_returns_raises_and_release(generated):
    assert len(generated) > 100
    for m in generated:
        body = _body(m.doc)
        label = f"{m.owner}.{m.name}" if m.owner else m.name
        if m.args:
            assert "\nArgs:\n" in body, label
            for a in m.args:
                assert re.search(rf"^    {a.name}: \S", body, re.M), (label, a.name)
        assert re.search(r"rdma-core (release|\d)", body) or "supported rdma-core" in body, label
        assert not ONLY_CALLS.match(body.split("\n\n", 1)[0]), label
        if m.owner:
            assert "Raises:" in body and "EBADF" in body, label


def test_an_optional_verb_says_so(generated):
    by_name = {(m.owner, m.name): m for m in generated}
    dmabuf = by_name[("PD", "reg_dmabuf_mr")]
    assert "Optional: ibv_reg_dmabuf_mr is in rdma-core 34 and later" in dmabuf.doc
    assert "RuntimeError" in dmabuf.doc
    assert "in every supported rdma-core release" in by_name[("Context", "alloc_pd")].doc


def test_the_stubs_carry_the_same_docstrings():
    """Every method of the extension has its docstring in the stub, the
    same text: both come from the spec (for the data path's classes,
    spec/datapath/records.yaml; for rdma_cm's, spec/rdmacm/cm.yaml)."""
    tree = ast.parse((ROOT / "generated" / "_ibverbs.pyi").read_text())
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    checked = 0
    for label, member in METHODS:
        if "." not in label:
            continue
        cname, name = label.split(".", 1)
        defs = [n for n in classes[cname].body
                if isinstance(n, ast.FunctionDef) and n.name == name] if cname in classes else []
        if not defs or name.startswith("_"):
            continue
        stub_doc = ast.get_docstring(defs[0])
        assert stub_doc == inspect.cleandoc(_body(member.__doc__)), label
        checked += 1
    assert checked > 160
