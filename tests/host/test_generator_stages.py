"""Which stage of the generator writes what (issue #38): the spec objects,
the IR and the model hold typed data, and only the emit stage (the
converters of generator/converters/, generator/emit.py and the Jinja2
templates) writes C.

The detector walks every object the three builders make (the verbs model,
the data-path records' and rdma_cm's), with the spec objects and the IR
they hold, and fails on a string that reads as C: an expression or a
statement.  Identifiers are data (a verb's name, a struct's type, a C
constant), and so is the IR's spelling of the header's own types (the
input, as bindgen's IR holds C types and no Rust).  Text for Python users
(docstrings, signatures, stubs, messages) is allowed by field name, each
listed below.
"""
from __future__ import annotations

import dataclasses
import enum
import json
import os
import re
from typing import Any, Dict, Iterator, List, Set, Tuple

import pytest

pytest.importorskip("clang.cindex", reason="libclang is not installed (pip install libclang==18.1.1)")

from generator import builder, emit, parse, rdmacm, records, render, spec  # noqa: E402
from generator.cli import SPEC_DIR, TEMPLATE_DIR  # noqa: E402
from generator.enum_fields import EnumFields  # noqa: E402

# --- the detector -------------------------------------------------------------

#: C syntax no identifier, type spelling or constant has: member access
#: through a pointer, a statement's end, logical and comparison operators,
#: a call or a cast, a block, an address taken, an OR of constants.
_C_SYNTAX = re.compile(r"->|;|&&|\|\||[=!<>]=|\b\w+\s*\(|\)\s*[\w(&*]|[{}]|&\w|\b[A-Z][A-Z0-9]*_\w*\s*\|\s*[A-Z]"
                       r"|\w\s*[-+]\s*\d|^\s*\(")

#: Fields holding text for Python users (docstrings, text signatures,
#: stubs, exception messages, spec reasons and release labels), not C.
PYTHON_TEXT = frozenset({
    "doc", "docs", "signature", "message", "stub", "stubs", "close_doc", "no_new",
    "summary", "raises", "returns_doc", "args", "coverage", "exclusions", "since",
    "optional", "doc_arguments", "doc_methods", "doc_fields", "hand", "hand_attributes",
    "slots", "symbols", "meaning", "why",
})

#: The IR's spelling of the header's own C (its input): a type as clang
#: spells it, a macro's tokens.
IR_INPUT = frozenset({("Type", "spelling"), ("Macro", "tokens"), ("Enum", "name"),
                      ("Record", "name")})


def looks_like_c(text: str) -> bool:
    """An expression or a statement of C (not a name nor a type spelling)."""
    return bool(_C_SYNTAX.search(text))


def _fields(obj: Any) -> Iterator[Tuple[str, Any]]:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield f.name, getattr(obj, f.name)
    elif isinstance(obj, tuple) and hasattr(obj, "_fields"):
        yield from zip(obj._fields, obj)
    elif type(obj).__module__.startswith("generator.") and hasattr(obj, "__dict__"):
        # a converter (the model holds them): what it was made with
        yield from vars(obj).items()


def c_text_in(root: Any, name: str) -> List[str]:
    """`path: text` of every string under root that reads as C, outside
    the fields allowed above."""
    found: List[str] = []
    seen: Set[int] = set()

    def walk(obj: Any, path: str, field: str, owner: str, text: bool) -> None:
        # text: under a field of PYTHON_TEXT (a docstring's mapping, ...)
        text = text or field in PYTHON_TEXT or field.startswith(("stub", "pytype"))
        if obj is None or isinstance(obj, (bool, int, float, enum.Enum)):
            return
        if isinstance(obj, str):
            if not text and (owner, field) not in IR_INPUT and looks_like_c(obj):
                found.append(f"{owner}.{field} at {path}: {obj[:80]!r}")
            return
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, dict):
            # a spec node's keys are its fields
            for key, value in obj.items():
                walk(value, f"{path}[{key!r}]", str(key), owner, text)
            return
        if isinstance(obj, (list, tuple, set, frozenset)) and not hasattr(obj, "_fields"):
            for i, value in enumerate(obj):
                walk(value, f"{path}[{i}]", field, owner, text)
            return
        items = list(_fields(obj))
        if not items and hasattr(obj, "parts"):      # C text with references in it (a CExpr)
            found.append(f"{type(obj).__name__} at {path}: {obj!r:.80}")
        for key, value in items:
            walk(value, f"{path}.{key}", key, type(obj).__name__, text)

    walk(root, name, "", "", False)
    return found


def offending_fields(found: List[str]) -> Dict[str, int]:
    """Class.field -> how many strings of C it holds."""
    out: Dict[str, int] = {}
    for line in found:
        key = line.split(" at ", 1)[0]
        out[key] = out.get(key, 0) + 1
    return out


# --- the models -----------------------------------------------------------------


@pytest.fixture(scope="module")
def irs():
    prefix = os.environ.get("RDMA_CORE") or None
    return parse.parse(prefix), parse.parse(prefix, rdmacm.HEADER)


@pytest.fixture(scope="module")
def models(irs):
    ir, cm_ir = irs
    model = builder.build(ir, spec.load(SPEC_DIR))
    cm = rdmacm.build(cm_ir, spec.load(rdmacm.spec_dir(SPEC_DIR)))
    recs = records.build(model.ir, SPEC_DIR, EnumFields(model.enums, model.spec.enum_fields))
    return {"verbs": model, "rdmacm": cm, "records": recs}


def test_the_detector_tells_c_from_data():
    for c in ("self_ptr->context", "ibp_qp_send_idle(self, \"x\")", "IBP_QPEX(self)",
              "if (x) y = 1;", "a == NULL || b", "&sge", "(uintptr_t)x", "c->mr",
              "METH_VARARGS | METH_KEYWORDS", "x - 1", "enum ibp_enum_class {",
              "((struct CQExObject *)self)->current"):
        assert looks_like_c(c), c
    for data in ("ibv_post_send", "struct ibv_qp", "uint8_t [16]", "const char *",
                 "IBV_QP_STATE", "NULL", "0", "0x40", "wc_flags", "grh.dgid",
                 "context.ops.post_recv", "struct ibv_flow_attr", "Optional[PD]",
                 "int | None", "List[int]"):
        assert not looks_like_c(data), data


def test_the_detector_walks_into_dataclasses_tuples_and_converters():
    @dataclasses.dataclass
    class Inner:
        expr: str
        doc: str

    class Converter:
        pass

    conv = Converter()
    conv.member = "c->x"
    conv.__class__.__module__ = "generator.converters.fake"
    found = c_text_in({"a": [Inner("x == 1", "f(x) -> y")], "b": (conv,)}, "root")
    assert offending_fields(found) == {"Inner.expr": 1, "Converter.member": 1}


@pytest.mark.parametrize("which", ["verbs", "rdmacm", "records"])
def test_spec_ir_and_model_hold_no_c_text(models, which):
    found = c_text_in(models[which], which)
    assert offending_fields(found) == {}, "\n".join(found[:40])


def _report(models):  # pragma: no cover - a helper for a person
    for which, m in models.items():
        found = c_text_in(m, which)
        for key, n in sorted(offending_fields(found).items()):
            print(which, n, key, next(f for f in found if f.startswith(key + " at")))
