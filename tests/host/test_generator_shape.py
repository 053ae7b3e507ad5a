"""The generator's own shape, read with `ast` (no libclang needed): no import
circle between its modules."""
from __future__ import annotations

import ast
import pathlib
from typing import Dict, List, Set

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
