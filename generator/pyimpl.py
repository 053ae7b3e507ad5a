"""The signature of a method written in Python (spec `python:
module:function`), read from the function's own `def` (with ast: nothing of
the package is imported), so that it is written once.  The spec entry keeps
what the def cannot say: the typed `stub:` (whose parameter names must be
the def's) and the public docstring `doc:`; a function that exists only to
implement the method has no docstring of its own (one source).
"""
from __future__ import annotations

import ast
import os
from typing import List, Optional, Union

from .paths import ROOT

FunctionNode = Union[ast.FunctionDef, ast.AsyncFunctionDef]


class PyImplError(Exception):
    """The function is missing or its def cannot be a text signature."""


def _source(module: str) -> str:
    base = os.path.join(ROOT, *module.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.exists(path):
            return path
    raise PyImplError(f"no module {module} under {ROOT}")


def function(module: str, name: str) -> "tuple[FunctionNode, str]":
    """The module-level def of *name* in *module*, and the module's text."""
    path = _source(module)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for node in ast.parse(text, path).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node, text
    raise PyImplError(f"{os.path.relpath(path, ROOT)} has no function {name}")


def _param(arg: ast.arg, default: Optional[ast.expr], text: str) -> str:
    if default is None:
        return arg.arg
    if isinstance(default, ast.Constant) and isinstance(default.value, str):
        return f"{arg.arg}={default.value!r}"     # one spelling of a str
    return f"{arg.arg}={ast.get_source_segment(text, default)}"


def parameters(node: FunctionNode, text: str) -> List[str]:
    """The def's parameters as a text signature writes them, the first
    (the object) left out."""
    a = node.args
    positional = a.posonlyargs + a.args
    defaults: List[Optional[ast.expr]] = [None] * (len(positional) - len(a.defaults))
    defaults += a.defaults
    out = [_param(arg, d, text) for arg, d in zip(positional, defaults)]
    if a.vararg is not None:
        out.append(f"*{a.vararg.arg}")
    elif a.kwonlyargs:
        out.append("*")
    out += [_param(arg, d, text) for arg, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg is not None:
        out.append(f"**{a.kwarg.arg}")
    if not out or out[0].startswith("*"):
        raise PyImplError(f"{node.name} takes no object first")
    return out[1:]


def names(params: List[str]) -> List[str]:
    """The bare names of signature parameters ("*" and "/" left out)."""
    out = []
    for p in params:
        name = p.split("=", 1)[0].split(":", 1)[0].strip().lstrip("*")
        if name and name not in ("/", "self", "$self"):
            out.append(name)
    return out


def signature(method: str, module: str, func: str) -> str:
    """`method($self, /, ...)` from the def of module:func."""
    node, text = function(module, func)
    params = parameters(node, text)
    return f"{method}({', '.join(['$self', '/'] + params)})"


def stub_names(stub: str) -> List[str]:
    """The parameter names of a typed stub "(self, a: int, *, b: str = ...) -> T"."""
    inner = stub[stub.index("(") + 1:stub.rindex(")")]
    depth, part, parts = 0, "", []
    for ch in inner:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(part)
            part = ""
        else:
            part += ch
    parts.append(part)
    return names([p for p in parts if p.strip()])
