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
from generator.model import Model  # noqa: E402
from generator.cli import SPEC_DIR, TEMPLATE_DIR  # noqa: E402
from generator.enum_fields import EnumFields  # noqa: E402

pytestmark = pytest.mark.tooling

# --- the detector -------------------------------------------------------------

#: C syntax no identifier, type spelling or constant has: member access
#: through a pointer, a statement's end, logical and comparison operators,
#: a call or a cast, a block, an address taken, an OR of constants.
_C_SYNTAX = re.compile(r"->|;|&&|\|\||[=!<>]=|\b\w+\s*\(|\)\s*[\w(&*]|[{}]|&\w"
                       r"|\b[A-Z][A-Z0-9]*_\w*\s*\|\s*[A-Z]|\w\s*[-+]\s*\d|^\s*\(")

#: Fields holding text for Python users (docstrings, text signatures,
#: stubs, exception messages, spec reasons and release labels), not C.
PYTHON_TEXT = frozenset({
    "doc", "docs", "signature", "message", "stub", "stubs", "close_doc", "no_new",
    "summary", "raises", "coverage", "exclusions", "since", "optional",
    "doc_arguments", "doc_methods", "doc_fields", "hand", "meaning", "why",
    "default_doc", "default",
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
def models(irs):
    ir, cm_ir = irs
    model = builder.build(ir, spec.load(SPEC_DIR))
    cm = rdmacm.build(cm_ir, spec.load(rdmacm.spec_dir(SPEC_DIR)), structs=model.structs)
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



# --- the emit stage writes the C: change a writer, only its output changes -------


def _changed_lines(before: Dict[str, str], after: Dict[str, str]) -> List[Tuple[str, str, str]]:
    """(file, old line, new line) of every line that differs (same line
    count), but a file's own checksum in its header."""
    out = []
    for name in sorted(before):
        old, new = before[name].splitlines(), after[name].splitlines()
        assert len(old) == len(new), name
        out += [(name, a, b) for a, b in zip(old, new) if a != b and "sha256 of this file" not in a]
    return out


def _methods(model) -> List[Any]:
    return [m for h in model.handles for m in h.methods] + list(model.functions)


def test_a_rule_writer_changed_after_the_model_is_built_changes_only_its_lines(models, monkeypatch):
    """The model holds `posts_send:` as a SendIdle value; the emit stage
    spells it.  Changing its writer after the model exists changes exactly
    the guard line of each method that has it, nothing else."""
    from generator.converters import rule_c
    from generator.rule_data import SendIdle
    model = models["verbs"]
    before = render.render(Model(verbs=model), TEMPLATE_DIR)
    monkeypatch.setitem(rule_c._WRITERS, SendIdle,
                        lambda r, spell: f'ibp_other_send_idle(self, "{r.method}")')
    changed = _changed_lines(before, render.render(Model(verbs=model), TEMPLATE_DIR))
    guarded = sorted(f"{m.owner}.{m.name}" for m in _methods(model) if isinstance(m.guard, SendIdle))
    assert guarded == ["QP.bind_mw"]
    assert len(changed) == len(guarded)
    assert all(old.replace("ibp_qp_send_idle", "ibp_other_send_idle") == new
               for _, old, new in changed)
    assert {name for name, _, _ in changed} == {"qp.c.h"}


def test_a_converter_changed_after_the_model_is_built_changes_only_its_output(models, monkeypatch):
    """An integer result's line is the IntReturn converter's, written when
    the wrapper is emitted (the model stores the C type, not the line)."""
    from generator.converters.returns import IntReturn
    model = models["verbs"]
    before = render.render(Model(verbs=model), TEMPLATE_DIR)
    monkeypatch.setattr(IntReturn, "lines", lambda self, outputs: ["return_value = ibp_marker(rc);"])
    changed = _changed_lines(before, render.render(Model(verbs=model), TEMPLATE_DIR))
    returning_int = [m for m in _methods(model) if isinstance(m.returns, IntReturn)]
    assert len(returning_int) >= 10
    assert len(changed) == len(returning_int)
    assert all(new.strip() == "return_value = ibp_marker(rc);" for _, _, new in changed)
    assert all(old.strip().startswith("return_value = PyLong_From") for _, old, _ in changed)


def test_a_calling_convention_is_spelled_by_the_emit_stage(models, monkeypatch):
    """METH_* flags live in generator/emit.py: the model holds the convention."""
    from generator.model import CallingConvention
    model = models["verbs"]
    before = render.render(Model(verbs=model), TEMPLATE_DIR)
    monkeypatch.setitem(emit.METH_FLAGS, CallingConvention.O, "METH_O | 0")
    changed = _changed_lines(before, render.render(Model(verbs=model), TEMPLATE_DIR))
    by_o = [m for m in _methods(model) if m.flags is CallingConvention.O]
    assert by_o and len(changed) == len(by_o)
    assert all("METH_O | 0" in new for _, _, new in changed)


# --- the model dumps to stable JSON, without C -------------------------------------


def model_json(root: Any) -> str:
    """The model as JSON: each dataclass, named tuple or converter an object
    of its fields (and its class name), a converter class by its kind."""
    seen: Set[int] = set()

    def data(obj: Any) -> Any:
        if obj is None or isinstance(obj, (bool, int, float, str)):
            return obj
        if isinstance(obj, enum.Enum):
            return f"{type(obj).__name__}.{obj.name}"
        if isinstance(obj, type):        # a converter class (Refs.kinds)
            return f"<{getattr(obj, 'kind', obj.__name__)}>"
        if isinstance(obj, dict):
            return {str(k): data(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple, set, frozenset)) and not hasattr(obj, "_fields"):
            return [data(v) for v in obj]
        if id(obj) in seen:              # shared (a struct model in a converter, a base handle)
            return f"<{type(obj).__name__} above>"
        seen.add(id(obj))
        items = dict(_fields(obj))
        if not items and not type(obj).__module__.startswith("generator."):
            raise TypeError(f"no JSON for {type(obj).__name__}")
        return {"__class__": type(obj).__name__, **{k: data(v) for k, v in items.items()}}

    return json.dumps(data(root), indent=1, sort_keys=True)


def _model_only(m: Any) -> Any:
    """The model without its IR and spec (the stage test walks those)."""
    return {f.name: getattr(m, f.name) for f in dataclasses.fields(m) if f.name not in ("ir", "spec")}


def test_the_model_dumps_to_stable_json_without_c(irs, models):
    ir, cm_ir = irs
    again = builder.build(ir, spec.load(SPEC_DIR))
    first = model_json(_model_only(models["verbs"]))
    assert first == model_json(_model_only(again))
    strings: List[str] = []

    def collect(node: Any, key: str, text: bool) -> None:
        text = text or key in PYTHON_TEXT or key.startswith(("stub", "pytype"))
        if isinstance(node, dict):
            for k, v in node.items():
                collect(v, k, text)
        elif isinstance(node, list):
            for v in node:
                collect(v, key, text)
        elif isinstance(node, str) and not text:
            strings.append(f"{key}: {node}")
    collect(json.loads(first), "", False)
    assert len(strings) > 1000
    assert [s for s in strings if looks_like_c(s.split(": ", 1)[1])] == []
    # the rules' typed data is in it, by name
    assert '"__class__": "SendIdle"' in first and '"__class__": "SameOwner"' in first


# --- the spec stage imports nothing of the emit stage ------------------------------

#: spec.py reads the converters' key sets (what a spec entry may say), no C
SPEC_STAGE = ("generator/rules.py", "generator/rule_data.py")
EMIT_STAGE = ("ctext", "emit", "render", "converters")


def test_the_spec_stage_imports_nothing_that_writes_c():
    import ast
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[2]
    for path in SPEC_STAGE:
        tree = ast.parse((root / path).read_text(encoding="utf-8"))
        imported = {(n.module or "").split(".")[0] for n in ast.walk(tree)
                    if isinstance(n, ast.ImportFrom) and n.level}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level
                     and not n.module for a in n.names}
        assert not imported & set(EMIT_STAGE), (path, imported)


# --- the spec is parsed once into typed objects (issue #38, first section: enums) ---


def test_the_enum_section_is_read_once_into_typed_objects(models):
    """spec `enums:` becomes EnumSpec values at load (no YAML node kept):
    the builders, the rules and the audit read their fields."""
    loaded = models["verbs"].spec.enums
    assert len(loaded) > 20
    for e in loaded:
        assert not any(isinstance(v, spec.Node) for v in vars(e).values()), e.name
        assert (e.c is None) != (e.match is None) and e.kind in ("IntEnum", "IntFlag")
        assert all(isinstance(v, int) for v in e.members.values())
    wc_flags = next(e for e in loaded if e.name == "CreateCQWCFlags")
    assert wc_flags.where("prefix").startswith("spec/") and wc_flags.prefix.endswith("_")


def test_an_enum_member_without_an_integer_is_refused_at_load(tmp_path):
    import shutil
    import textwrap
    d = tmp_path / "spec"
    shutil.copytree(SPEC_DIR, d)
    (d / "zz.yaml").write_text(textwrap.dedent("""\
        enums:
          Shiny:
            c: enum ibv_access_flags
            kind: IntFlag
            prefix: IBV_ACCESS_
            members: {IBV_ACCESS_SHINY: lots}
        """))
    with pytest.raises(spec.SpecError,
                       match=r"spec/zz.yaml:6: Shiny: IBV_ACCESS_SHINY needs an integer"):
        spec.load(str(d))


def test_the_stubs_read_the_model_not_the_spec():
    """generator/stubs.py types slots, hand attributes and hand methods from
    the model (Slot.stub, MethodModel.stub), not by going back to spec nodes."""
    import ast
    import pathlib
    tree = ast.parse((pathlib.Path(__file__).resolve().parents[2] / "generator/stubs.py")
                     .read_text(encoding="utf-8"))
    reads = sorted({n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                    and n.attr in ("node", "handle", "handles_spec")})
    assert reads == []


def test_slot_and_method_stubs_are_in_the_model(models):
    mr = next(h for h in models["verbs"].handles if h.name == "MR")
    assert next(s for s in mr.slots if s.name == "owner").stub == "object"
    sge = next(m for m in mr.methods if m.name == "sge")
    assert sge.stub == "(self, length: int | None = ..., offset: int = ...) -> SGE"


def test_the_structs_section_is_read_once_into_typed_objects(models):
    """spec `structs:` becomes Struct and FieldSpec values at load (no YAML
    node kept): the builder, the rules and the audit read their fields."""
    structs = models["verbs"].spec.structs
    assert len(structs) > 10
    for s in structs:
        assert not any(isinstance(v, spec.Node) for v in vars(s).values()), s.name
        for f in s.fields or []:
            assert not any(isinstance(v, spec.Node) for v in vars(f).values()), (s.name, f.name)
    qp_init = next(s for s in structs if s.name == "QPInitAttr")
    send_cq = qp_init.field("send_cq")
    assert send_cq is not None and send_cq.convert == "handle:CQ" and send_cq.none_ok
    assert qp_init.field("qp_type").members == "QPType"
    assert any(s.fields is None for s in structs)      # fields: all


def test_a_struct_field_key_its_converter_does_not_take_names_its_line(tmp_path):
    import shutil
    import textwrap
    d = tmp_path / "spec"
    shutil.copytree(SPEC_DIR, d)
    (d / "zz.yaml").write_text(textwrap.dedent("""\
        structs:
          Shiny:
            ctype: struct ibv_sge
            writable: true
            fields:
              addr:
                path: addr
                none_ok: true
        """))
    model = None
    with pytest.raises(spec.SpecError,
                       match=r"spec/zz.yaml:8: Shiny.addr \(int\): unknown key 'none_ok'"):
        model = builder.build(parse.parse(os.environ.get("RDMA_CORE") or None), spec.load(str(d)))
    assert model is None


def test_the_stubs_all_comes_from_the_model_not_from_reparsing_the_stub(models):
    """__all__ is the stub classes', functions' and re-exports' names (data),
    and it matches what the rendered stub defines at its top level."""
    import ast
    from generator import stubs
    built = stubs.build(models["verbs"], models["records"], models["rdmacm"])
    text = render.render(Model(verbs=models["verbs"], records=models["records"],
                               rdmacm=models["rdmacm"]), TEMPLATE_DIR)[stubs.OUTPUT]
    tree = ast.parse(text)
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))
               and n.name[:1].isalpha()}
    defined |= {a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names
                if a.asname == a.name}
    assert built.public_names() == sorted(defined)
    assert {"Device", "VerbsError", "QP", "SGE", "EventChannel"} <= set(built.public_names())


def test_every_rule_value_has_a_c_writer_and_nothing_else_is_guessed():
    """Each typed rule value of generator/rule_data.py is written by
    converters/rule_c.py; a value it does not know is an error, never its
    repr in the C."""
    import inspect
    from generator import rule_data
    from generator.converters import rule_c
    values = [cls for _, cls in inspect.getmembers(rule_data, inspect.isclass)
              if cls.__module__ == rule_data.__name__ and dataclasses.is_dataclass(cls)
              and not issubclass(cls, rule_data.Ref)]
    # the ones named inside others (a parameter of an explainer, Given) are spelled there
    inner = {rule_data.Given}
    assert {v for v in values if v not in inner} <= set(rule_c._WRITERS)
    with pytest.raises(TypeError, match="no C is written for a Given"):
        rule_c.c_of(rule_data.Given("IBV_X"), rule_c.self_only)
    assert rule_c.c_of("NULL", rule_c.self_only) == "NULL"       # a C constant of the spec
    assert rule_c.c_of(rule_data.SelfMember("pd"), rule_c.self_only) == "self_ptr->pd"
