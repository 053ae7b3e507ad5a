"""The generator's own shape, read with `ast` (no libclang needed): no import
circle between its modules, short functions, a model of dataclasses (no C
text), no regular expression over C, a converter for every spec kind, rules
that spell no converter's local, templates that repeat no block."""
from __future__ import annotations

import ast
import pathlib
from typing import Dict, List, Set

import pytest

pytestmark = pytest.mark.tooling

GENERATOR = pathlib.Path(__file__).resolve().parents[2] / "generator"


def _modules() -> Dict[str, pathlib.Path]:
    """Dotted module name -> file, for every module of the generator package."""
    out = {}
    for path in sorted(GENERATOR.rglob("*.py")):
        parts = list(path.relative_to(GENERATOR.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: pathlib.Path, known: Set[str]) -> Set[str]:
    """The generator modules *name* imports, anywhere in the file (function
    level included: a lazy import is still a circle)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            subs = {f"{source}.{a.name}" for a in node.names} & known
            out |= subs or ({source} & known)
    out.discard(name)
    return out


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    cycles: List[List[str]] = []
    state: Dict[str, int] = {}      # 1 on the stack, 2 done
    stack: List[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def test_no_import_circle_in_the_generator():
    modules = _modules()
    graph = {name: _imports(name, path, set(modules)) for name, path in modules.items()}
    assert graph["generator.cli"], "the import walk found nothing: the test is broken"
    assert _cycles(graph) == []


def test_the_cycle_finder_sees_a_circle():
    assert _cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]


#: Modules that may use regular expressions, none of them over C: the
#: libclang front end (identifiers, clang's anonymous-record spellings,
#: Debian package metadata), the spec loader (a `python:` target) and the
#: audit (release numbers, names in the spec's YAML text).
RE_ALLOWED = {"generator.parse", "generator.spec", "generator.audit"}
MAX_FUNCTION_LINES = 80
MAX_MODEL_LINES = 500


def _trees():
    return {name: ast.parse(path.read_text(encoding="utf-8"))
            for name, path in _modules().items()}


def test_no_generator_function_is_longer_than_80_lines():
    long = [f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
            for name, tree in _trees().items() for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == []


@pytest.mark.parametrize("module", ["model.py", "record_model.py"])
def test_the_model_is_dataclasses_without_c_text(module):
    path = GENERATOR / module
    assert len(path.read_text(encoding="utf-8").splitlines()) < MAX_MODEL_LINES
    tree = ast.parse(path.read_text(encoding="utf-8"))
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    # dataclasses, named tuples (fields by name) and enums (kinds by name)
    assert classes and all(
        any("dataclass" in ast.unparse(d) for d in c.decorator_list)
        or {ast.unparse(b) for b in c.bases} & {"NamedTuple", "enum.Enum"} for c in classes)
    if module == "model.py":
        assert any(ast.unparse(b) == "enum.Enum" for c in classes for b in c.bases)
    statements = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
                  and isinstance(n.value, str) and n.value.rstrip().endswith(";")]
    assert statements == []


def _imports_re(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "re" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "re" and not node.level:
            return True
    return False


def test_no_regular_expression_over_c():
    users = {name for name, tree in _trees().items() if _imports_re(tree)}
    assert users <= RE_ALLOWED, sorted(users - RE_ALLOWED)


def test_every_spec_kind_has_a_converter():
    from generator.converters import ATTRIBUTES, FIELDS, PARAMS, RETURNS
    assert set(PARAMS.by_kind) >= {
        "int", "address", "be32", "handle", "struct", "gid", "wc", "bytes", "buffer",
        "self", "mask", "value", "scratch", "out", "out:dict", "out:bytes", "out:list",
        "fields", "kwargs"}
    assert set(FIELDS.by_kind) >= {"handle", "bool", "gid", "gid_bytes", "str", "bytes",
                                   "int", "struct"}
    assert set(ATTRIBUTES.by_kind) >= {"member", "int", "str"}
    assert set(RETURNS.by_kind) >= {"new", "result", "bool", "be32", "str", "out"}
    for registry in (PARAMS, FIELDS, ATTRIBUTES, RETURNS):
        for kind, cls in registry.by_kind.items():
            assert cls.kind == kind
    assert all(hasattr(cls, "from_spec") for cls in PARAMS.by_kind.values())


# --- rules name values by what they are (generator/rule_data.py) ---

#: how converters spell their locals (generator/converters/): a rule that
#: wrote one of these would break when the converter renames its local
CONVERTER_SPELLINGS = ("_c_size", "_c.", "ref_", "mask_bits", "self_ptr")


def test_rules_spell_no_converter_local():
    tree = ast.parse((GENERATOR / "rules.py").read_text(encoding="utf-8"))
    texts = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
             and isinstance(n.value, str)]
    texts += [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr)]
    docstring = ast.get_docstring(tree, clean=False)
    spelled = sorted({t for t in texts if t != docstring
                      and (any(c in t for c in CONVERTER_SPELLINGS) or t.endswith("_c"))})
    assert spelled == []


# --- templates repeat no block ------------------------------------------------

TEMPLATES = GENERATOR.parent / "templates"
#: a run of this many non-blank lines found twice is a copy: it belongs in
#: one include (templates/_*.j2) or macro
REPEAT_LINES = 8


def _repeated_blocks(texts: Dict[str, str], n: int = REPEAT_LINES) -> List[str]:
    """Each run of n identical non-blank lines (stripped of trailing space)
    that appears at two places, in one template or two: "a:L1 b:L2"."""
    seen: Dict[tuple, List[str]] = {}
    for name, text in sorted(texts.items()):
        lines = [(i + 1, line.rstrip()) for i, line in enumerate(text.splitlines()) if line.strip()]
        for k in range(len(lines) - n + 1):
            run = tuple(line for _, line in lines[k:k + n])
            seen.setdefault(run, []).append(f"{name}:{lines[k][0]}")
    return [" ".join(places) for places in seen.values() if len(places) > 1]


def test_no_template_repeats_a_block():
    texts = {p.name: p.read_text(encoding="utf-8") for p in sorted(TEMPLATES.glob("*.j2"))}
    assert len(texts) > 10
    assert _repeated_blocks(texts) == []


def test_the_repeat_finder_sees_a_copied_block():
    block = "\n".join(f"line {i};" for i in range(REPEAT_LINES))
    texts = {"a.j2": f"head\n{block}\ntail\n", "b.j2": f"other\n\n{block}\n"}
    assert _repeated_blocks(texts) == ["a.j2:2 b.j2:3"]
    # blank lines inside a copy do not hide it; a shorter run is no copy
    assert _repeated_blocks({"a.j2": block, "b.j2": block.replace(";\n", ";\n\n")}) != []
    assert _repeated_blocks({"a.j2": block, "b.j2": block.split("\n", 1)[1]}) == []
    # a copy inside one template counts too
    assert _repeated_blocks({"a.j2": f"{block}\nx\n{block}\n"}) == ["a.j2:1 a.j2:10"]
