"""Typed stubs for the extension: the model -> generated/_ibverbs.pyi.

Everything comes from the model (IR + spec), so a class or verb added to
the spec gets its stub on the next `make generate`, and `check` fails when
the committed stub is stale:

* struct classes: one attribute per field, typed from how the field is read
  (an int, str, Gid, handle or struct class); writable structs get an
  ``__init__`` with their keyword defaults;
* handle classes: ``closed``, the parents, attributes and slots, ``close``
  and the context manager methods, and every method.  Generated methods
  take the signature of their docstring; argument types follow the spec
  (``convert: handle:X`` is X, ``struct:X`` is X, ``address`` and plain
  integers are int, ...) and the return type follows what the generated C
  builds (``X_wrap`` is X, ``X_from_c`` is X, a tuple of outs is a tuple);
* hand-written methods (``hand:`` in the spec) take the spec's ``stub:``
  key when it is there (``"(self, num_entries: int) -> list[WC]"``), else
  ``Any`` arguments from the hand signature and an ``Any`` result.
* subclass handles (spec ``base:``, either form: QPEx, CQEx, ImportedPD,
  ImportedMR) derive from their base (``class QPEx(QP):``, the base loses
  ``@final``) and list only what they add; hand-written attributes (spec
  ``hand_attributes``) are typed by their ``stub:`` key (``stub: int``).

What is written by hand lives in templates/stubs/: ``_datapath.pyi.j2``
(the classes of ibverbs/src/datapath.c and module.c), ``_rdmacm.pyi.j2``
(ibverbs/src/rdmacm.c), and
``<Class>.pyi.j2`` for methods the Python layer attaches to a generated
class (``QP.to_init``, ``PD.reg_mr(buffer, access)``, ``CQ.wait``...); a
method defined there replaces the generated one of the same name.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Set

from .model import HandleModel, MethodModel, Model, StructModel

TEMPLATE = "stubs.pyi.j2"
OUTPUT = "_ibverbs.pyi"
GID_LIKE = "_GidLike"
BUFFER_LIKE = "_BufferLike"


@dataclass
class StubClass:
    name: str
    doc: str
    lines: List[str] = field(default_factory=list)   # the body, unindented
    base: Optional[str] = None        # a subclass handle (spec `base:`) derives from it
    final: bool = True                # a base of another class cannot be @final


@dataclass
class Stubs:
    classes: List[StubClass]
    functions: List[str]                  # one `def` line each


def _first_line(doc: str) -> str:
    """The summary of a docstring (after the text signature)."""
    text = doc.split("\n--\n\n", 1)[-1].strip()
    line = text.split("\n", 1)[0].strip()
    return line.replace("\\", "\\\\").replace('"""', "'''")


# --- types of values, read from the C that builds them --------------------------

_WRAP = re.compile(r"return_value = (\w+)_wrap\(")
_FROM_C = re.compile(r"(\w+)_from_c\(")


def _type_of_getter(stmts: List[str], handles: Set[str]) -> str:
    """The Python type of `result`/`item` built by these C statements."""
    text = " ".join(stmts)
    m = _FROM_C.search(text)
    if m:
        return m.group(1)
    if "ibv_gid_to_py" in text:
        return "Gid"
    if "ibv_chars_to_py" in text:
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


def _return_type(m: MethodModel, handles: Set[str]) -> str:
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

    def visit(pspec) -> None:
        if isinstance(pspec, str):
            if pspec not in ("self", "out", "scratch", "mask"):
                out[pspec] = "int"
            return
        if not hasattr(pspec, "get"):
            return
        if "struct" in pspec:
            for sub in (pspec["struct"] or {}).values():
                visit(sub)
        elif "kwargs" in pspec:
            out["**"] = "Any"
        elif "arg" in pspec:
            out[pspec["arg"]] = _convert_type(pspec, handles)

    for pspec in (node.get("params") or {}).values():
        visit(pspec)
    return out


def _split_params(text: str) -> List[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def _signature_params(doc: str) -> Optional[List[str]]:
    """The parameters of a docstring's text signature, `$self` as `self`."""
    head = doc.split("\n--\n\n", 1)[0]
    m = re.match(r"\w+\((.*)\)$", head.strip(), re.S)
    if not m:
        return None
    return ["self" if p == "$self" else p for p in _split_params(m.group(1))]


def _typed_params(params: List[str], types: Dict[str, str]) -> str:
    out = []
    for p in params:
        if p in ("self", "/", "*"):
            out.append(p)
        elif p.startswith("**"):
            out.append(f"{p}: {types.get('**', 'Any')}")
        elif p.startswith("*"):
            out.append(f"{p}: Any")
        elif "=" in p:
            name = p.split("=", 1)[0]
            t = types.get(name, "Any")
            if p.endswith("=None") and "None" not in t and t != "Any":
                t += " | None"
            out.append(f"{name}: {t} = ...")
        else:
            out.append(f"{p}: {types.get(p, 'Any')}")
    # a leading "self, /" alone says nothing a stub needs
    if out[:2] == ["self", "/"]:
        out = ["self"] + out[2:]
    if out and out[0] == "/":
        out = out[1:]
    return ", ".join(out)


def _method_def(m: MethodModel, node, handles: Set[str], is_method: bool) -> str:
    stub = node.get("stub") if node is not None else None
    if m.hand and isinstance(stub, list):
        # several call forms (PD.reg_mr(addr, length, access) / (buffer, access))
        return "\n".join(f"@overload\ndef {m.name}{form}: ..." for form in stub)
    if m.hand and stub:
        return f"def {m.name}{stub}: ..."
    params = _signature_params(m.doc)
    if params is None:
        params = ["self", "*args", "**kwargs"] if is_method else ["*args", "**kwargs"]
    if m.hand:
        types: Dict[str, str] = {}
        result = "Any"
    else:
        types = _arg_types(node, handles) if node is not None else {}
        result = _return_type(m, handles)
    return f"def {m.name}({_typed_params(params, types)}) -> {result}: ..."


# --- classes --------------------------------------------------------------------

def _struct_class(s: StructModel, handles: Set[str]) -> StubClass:
    c = StubClass(s.name, s.doc)
    init = []
    for f in s.fields:
        if f.handle:
            t = f"{f.handle} | None"
        elif f.struct_class:
            t = f.struct_class
        else:
            t = _type_of_getter(f.getter, handles)
        if f.setter:
            accepts = GID_LIKE if t == "Gid" else t
            if accepts != t:
                c.lines += ["@property", f"def {f.name}(self) -> {t}: ...",
                            f"@{f.name}.setter", f"def {f.name}(self, value: {accepts}) -> None: ..."]
            else:
                c.lines.append(f"{f.name}: {t}")
            param = f"{f.name}: {accepts}" + (" | None" if f.default == "None" and "None" not in accepts else "")
            init.append(param if f.default is None else param + " = ...")
        else:
            c.lines += ["@property", f"def {f.name}(self) -> {t}: ..."]
    if init:
        c.lines.append(f"def __init__(self, {', '.join(init)}) -> None: ...")
    c.lines.append("def _asdict(self) -> dict[str, Any]: ...")
    return c


def _handle_class(h: HandleModel, spec, handles: Set[str],
                  replaced: Callable[[str], Set[str]]) -> StubClass:
    c = StubClass(h.name, h.doc)
    skip = replaced(h.name)
    c.lines += ["@property", "def closed(self) -> bool: ..."]
    for pname, pcls, optional in h.parents:
        c.lines += ["@property", f"def {pname}(self) -> {pcls}{' | None' if optional else ''}: ..."]
    for aname, stmts in h.attributes:
        c.lines += ["@property", f"def {aname}(self) -> {_type_of_getter(stmts, handles)}: ..."]
    for sname, writable, _doc in h.slots:
        c.lines.append(f"{sname}: Any" if writable else f"@property\ndef {sname}(self) -> Any: ...")
    c.lines += _hand_attribute_lines(h, spec)
    c.lines += ["def close(self) -> None: ...",
                "def __enter__(self) -> Self: ...",
                "def __exit__(self, *exc: object) -> None: ...",
                "@classmethod", "def _open_count(cls) -> int: ..."]
    hspec = spec.handle(h.name)
    nodes = {m.name: m.node for m in (hspec.methods if hspec else [])}
    for m in h.methods:
        if m.name in skip:
            continue
        c.lines.append(_method_def(m, nodes.get(m.name), handles, True))
    return c


def _hand_attribute_lines(h: HandleModel, spec) -> List[str]:
    """Attributes of hand-written getters/setters (spec ``hand_attributes``),
    typed by their ``stub:`` key (``stub: int``), else Any."""
    hspec = spec.handle(h.name)
    nodes = (hspec.node.get("hand_attributes") or {}) if hspec else {}
    lines = []
    for aname, writable, _doc in h.hand_attributes:
        anode = nodes.get(aname)
        t = (anode.get("stub") if hasattr(anode, "get") else None) or "Any"
        lines.append(f"{aname}: {t}" if writable else f"@property\ndef {aname}(self) -> {t}: ...")
    return lines


def _members(lines: List[str]) -> List[List[str]]:
    """The lines of a class body grouped per member (decorators with their def)."""
    out: List[List[str]] = []
    pending: List[str] = []
    for line in lines:
        pending.append(line)
        if not line.startswith("@"):
            out.append(pending)
            pending = []
    return out + ([pending] if pending else [])


def _derive(cls: StubClass, base: StubClass) -> None:
    """A subclass handle's stub derives from its base's: what the base
    declares the same way is inherited, not repeated (parents, close,
    the context manager, and what the base's template adds)."""
    cls.base = base.name
    base.final = False
    inherited = {tuple(m) for m in _members(base.lines)}
    cls.lines = [line for m in _members(cls.lines) if tuple(m) not in inherited for line in m]


def build(model: Model, replaced: Callable[[str], Set[str]]) -> Stubs:
    """``replaced(cls)``: the method names templates/stubs/<cls>.pyi.j2 defines."""
    handles = {h.name for h in model.handles}
    classes = [_struct_class(s, handles) for s in model.structs]
    classes += [_handle_class(h, model.spec, handles, replaced) for h in model.handles]
    for cls in classes:
        # a slot written as "@property\ndef ..." spans lines
        cls.lines = [part for line in cls.lines for part in line.split("\n")]
        cls.doc = _first_line(cls.doc)
    by_name = {c.name: c for c in classes}
    for h in model.handles:
        if h.base is not None:
            _derive(by_name[h.name], by_name[h.base.name])
    nodes = {m.name: m.node for m in model.spec.functions}
    functions = [_method_def(m, nodes.get(m.name), handles, False) for m in model.functions]
    return Stubs(classes, functions)


_DEF = re.compile(r"^\s*def (\w+)\(", re.M)


def render(model: Model, env, common: dict) -> Dict[str, str]:
    """{OUTPUT: text}: called by render.render with its environment."""
    def replaced(cls: str) -> Set[str]:
        try:
            source, _, _ = env.loader.get_source(env, f"stubs/{cls}.pyi.j2")
        except Exception:  # jinja2.TemplateNotFound: nothing replaced
            return set()
        return set(_DEF.findall(source))

    stubs = build(model, replaced)
    text = env.get_template(TEMPLATE).render(
        **common, comment_open="#", comment_mid="#", comment_close="",
        classes=stubs.classes, stub_functions=stubs.functions)
    return {OUTPUT: text}
