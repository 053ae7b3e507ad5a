"""Python types of generated values and arguments, read from the model:
what the stubs declare (generator/stubs.py) and the docstrings say
(generator/docstrings.py).  Duck-typed on MethodModel (no import of
generator.model: the model imports generator.docstrings, which uses this)."""
from __future__ import annotations

import re
from typing import Any, Dict, List, Set

GID_LIKE = "_GidLike"
BUFFER_LIKE = "_BufferLike"


# --- types of values, read from the C that builds them --------------------------

_WRAP = re.compile(r"return_value = (\w+)_wrap\(")
_FROM_C = re.compile(r"(\w+)_from_c\(")


def _type_of_getter(stmts: List[str], handles: Set[str]) -> str:
    """The Python type of `result`/`item` built by these C statements."""
    text = " ".join(stmts)
    m = _FROM_C.search(text)
    if m:
        return m.group(1)
    if "ibp_gid_to_py" in text:
        return "Gid"
    if "ibp_chars_to_py" in text:
        return "str"
    if "PyUnicode_FromString" in text:
        return "str | None"
    if "PyBytes_" in text:
        return "bytes"
    if "PyBool_" in text:
        return "bool"
    if "PyLong_" in text:
        return "int"
    return "Any"


def _return_type(m: Any, handles: Set[str]) -> str:
    """What a generated wrapper returns, from its C statements."""
    body = [line.strip() for line in m.body]
    items: List[str] = []
    for i, line in enumerate(body):
        if line.startswith("item = PyList_New(0)"):
            entry = next((b for b in body[i:] if "PyObject *entry =" in b), "")
            cls = _FROM_C.search(entry)
            items.append(f"list[{cls.group(1)}]" if cls else "list[Any]")
        elif line.startswith("item = "):
            items.append(_type_of_getter([line], handles))
    for line in body:
        wrap = _WRAP.search(line)
        if wrap:
            return wrap.group(1)
        if line.startswith("return_value = PyTuple_New("):
            return f"tuple[{', '.join(items)}]"
        if line.startswith("return_value = item;"):
            return items[0] if items else "Any"
        if line.startswith("return_value = Py_NewRef(Py_None)"):
            return "None"
        if line.startswith("return_value = "):
            return _type_of_getter([line], handles)
    return "Any"


# --- argument types, from the spec -------------------------------------------------

def _convert_type(pspec: dict, handles: Set[str]) -> str:
    convert = pspec.get("convert")
    optional = "default" in pspec and pspec.get("default") is None
    if convert is None or convert in ("address", "int"):
        t = "int"
    elif convert.startswith("handle:") or convert.startswith("struct:"):
        t = convert.split(":", 1)[1]
    elif convert == "be32":       # an int, in host order
        t = "int"
    elif convert == "bytes":      # any bytes-like object
        t = BUFFER_LIKE
    elif convert == "wc":
        t = "WC"
    elif convert.startswith("buffer:"):
        t = BUFFER_LIKE
    elif convert == "gid":
        t = GID_LIKE
    elif convert == "str":
        t = "str"
    else:
        t = "Any"
    return f"{t} | None" if optional and t != "Any" else t


def _arg_types(node, handles: Set[str]) -> Dict[str, str]:
    """Python argument name -> type, for a spec method node."""
    out: Dict[str, str] = {}
    for name, pspec in arg_specs(node).items():
        if name == "**":
            out[name] = "Any"
        elif isinstance(pspec, str):
            out[name] = "int"
        else:
            out[name] = _convert_type(pspec, handles)
    return out


def arg_specs(node) -> Dict[str, Any]:
    """Python argument name -> its spec node (a str for plain ones), for a
    spec method node; "**" for a keyword struct."""
    out: Dict[str, Any] = {}

    def visit(pspec) -> None:
        if isinstance(pspec, str):
            if pspec not in ("self", "out", "scratch", "mask"):
                out[pspec] = pspec
            return
        if not hasattr(pspec, "get"):
            return
        if "struct" in pspec:
            for sub in (pspec["struct"] or {}).values():
                visit(sub)
        elif "kwargs" in pspec:
            out["**"] = pspec
        elif "arg" in pspec:
            out[pspec["arg"]] = pspec

    for pspec in (node.get("params") or {}).values():
        visit(pspec)
    return out


