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
(the classes of the data path in ibverbs/src/ and of module.c), ``_rdmacm.pyi.j2``
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
from .pytypes import GID_LIKE, _arg_types, _return_type, _type_of_getter

TEMPLATE = "stubs.pyi.j2"
OUTPUT = "_ibverbs.pyi"


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


def _docstring_body(doc: str) -> List[str]:
    """A method's docstring (without its text signature) as the indented
    body of its stub, so that editors show it on hover."""
    text = doc.split("\n--\n\n", 1)[-1].strip()
    if not text:
        return []
    text = text.replace("\\", "\\\\").replace('"""', "'''")
    lines = text.split("\n")
    body = [f'    """{lines[0]}'] + [f"    {line}" if line else "" for line in lines[1:]]
    if len(lines) > 1:
        body.append('    """')
    else:
        body[0] += '"""'
    return body


def _with_doc(head: str, doc: str) -> str:
    """``head`` (a def line ending in ':') with the docstring as its body."""
    body = _docstring_body(doc)
    return "\n".join([head] + body) if body else f"{head} ..."


def _method_def(m: MethodModel, node, handles: Set[str], is_method: bool) -> str:
    stub = node.get("stub") if node is not None else None
    if m.hand and isinstance(stub, list):
        # several call forms (PD.reg_mr(addr, length, access) / (buffer, access))
        return "\n".join(_with_doc(f"@overload\ndef {m.name}{form}:", m.doc) for form in stub)
    if m.hand and stub:
        return _with_doc(f"def {m.name}{stub}:", m.doc)
    params = _signature_params(m.doc)
    if params is None:
        params = ["self", "*args", "**kwargs"] if is_method else ["*args", "**kwargs"]
    if m.hand:
        types: Dict[str, str] = {}
        result = "Any"
    else:
        types = _arg_types(node, handles) if node is not None else {}
        result = _return_type(m, handles)
    return _with_doc(f"def {m.name}({_typed_params(params, types)}) -> {result}:", m.doc)


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
    c.lines += [_with_doc("def close(self) -> None:",
                          f"Destroy the {h.ctype} ({h.destroy}); harmless when already closed."),
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
    """The lines of a class body grouped per member: decorators with their
    def, the def with its docstring (indented or blank lines)."""
    out: List[List[str]] = []
    current: List[str] = []
    for line in lines:
        starts = bool(line) and not line[0].isspace() and not (current and current[-1].startswith("@"))
        if starts and current:
            out.append(current)
            current = []
        current.append(line)
    return out + ([current] if current else [])


def _derive(cls: StubClass, base: StubClass) -> None:
    """A subclass handle's stub derives from its base's: what the base
    declares the same way is inherited, not repeated (parents, close,
    the context manager, and what the base's template adds)."""
    cls.base = base.name
    base.final = False
    inherited = {tuple(m) for m in _members(base.lines)}
    # close() keeps the base's signature (ImportedPD's unimports: only its
    # docstring differs)
    cls.lines = [line for m in _members(cls.lines)
                 if tuple(m) not in inherited and m[0] != "def close(self) -> None:" for line in m]


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
    # The extension's __all__ (module.c): its public classes and functions,
    # and the names it re-exports from Python modules (`X as X` imports).
    public = set(re.findall(r"^(?:class|def) ([A-Za-z]\w*)", text, re.M))
    public |= set(re.findall(r"\b(\w+) as \1\b", text))
    text += "\n__all__ = [\n" + "".join(f"    {n!r},\n" for n in sorted(public)) + "]\n"
    return {OUTPUT: text}
