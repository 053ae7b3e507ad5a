"""Typed stubs for the extension: the model -> generated/_ibverbs.pyi.

Everything comes from the model (IR + spec), so a class or verb added to
the spec gets its stub on the next `make generate`, and `check` fails when
the committed stub is stale:

* struct classes: one attribute per field, typed by the field's converter
  (generator/converters/fields.py: an int, str, Gid, handle or struct
  class); writable structs get an ``__init__`` with their keyword defaults;
* handle classes: ``closed``, the parents, attributes and slots, ``close``
  and the context manager methods, and every method.  Generated methods
  take their text signature; each argument is typed by its converter
  (``convert: handle:X`` is X, ``struct:X`` is X, ``address`` and plain
  integers are int, ...), and the result by the method's return converter
  (a new handle is its class, an out struct its class, a tuple of outs a
  tuple): the model's types, never the C read back;
* hand-written methods (``hand:`` in the spec) take the spec's ``stub:``
  key when it is there (``"(self, num_entries: int) -> list[WC]"``), else
  ``Any`` arguments from the hand signature and an ``Any`` result.
* subclass handles (spec ``base:``, either form: QPEx, CQEx, ImportedPD,
  ImportedMR) derive from their base (``class QPEx(QP):``, the base loses
  ``@final``) and list only what they add; hand-written attributes (spec
  ``hand_attributes``) are typed by their ``stub:`` key (``stub: int``).
* the rdma_cm classes (EventChannel, CMID: spec/rdmacm/cm.yaml) are handle
  classes of the rdmacm model, stubbed the same way (every method is a
  ``hand:`` one with its ``stub:``), and its module functions too;
* the data-path types (SGE, SendWR, WC, PostList, ...) come from
  spec/datapath/records.yaml (generator/record_stubs.py).

Nothing of the extension is stubbed by hand: templates/stubs.pyi.j2 adds
only the imports and the aliases the spec's ``stub:`` strings name
(``_GidLike``, ``_BufferLike``, ``_Addr``).  The three models are built by
generator/builder.py (build_all); generator/render.py renders the stub
(templates/stubs.pyi.j2) with the rest.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Set

from . import record_stubs
from .model import HandleModel, HeaderModel, MethodModel, Model, StructModel
from .record_model import RecordsModel
from .pytypes import GID_LIKE
from .stubtext import (StubClass, docstring_body, first_line as _first_line, read_only,
                       with_doc as _with_doc)

TEMPLATE = "stubs.pyi.j2"
OUTPUT = "_ibverbs.pyi"


@dataclass
class Stubs:
    classes: List[StubClass]
    functions: List[str]                  # one `def` line each
    function_names: List[str]

    def public_names(self) -> List[str]:
        """The extension's __all__ (module.c): its public classes and
        functions, and the names it re-exports from Python modules."""
        public = {c.name for c in self.classes} | set(self.function_names)
        public = {n for n in public if n[:1].isalpha()}
        return sorted(public | {n for _, names in REEXPORTS for n in names})


#: what the extension module re-exports from the Python layer, as the
#: seed's extension module had them (ibverbs/src/module.c): module, names
REEXPORTS = (("ibverbs._device", ("Device", "get_device_list")),
             ("ibverbs.errors", ("CompletionError", "VerbsError")),
             ("ibverbs._gid", ("Gid",)))


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


def _signature_params(m: MethodModel) -> Optional[List[str]]:
    """The parameters of a method's text signature, `$self` as `self`."""
    sig = m.signature.strip()
    if not (sig.startswith(f"{m.name}(") and sig.endswith(")")):
        return None
    inner = sig[len(m.name) + 1:-1]
    return ["self" if p == "$self" else p for p in _split_params(inner)]


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


def _method_def(m: MethodModel, handles: Set[str], is_method: bool) -> str:
    stub = m.stub
    if m.hand and isinstance(stub, list):
        # several call forms (PD.reg_mr(addr, length, access) / (buffer, access))
        return "\n".join(_with_doc(f"@overload\ndef {m.name}{form}:", m.doc) for form in stub)
    if m.hand and stub:
        return _with_doc(f"def {m.name}{stub}:", m.doc)
    params = _signature_params(m)
    if params is None:
        params = ["self", "*args", "**kwargs"] if is_method else ["*args", "**kwargs"]
    if m.hand:
        types: Dict[str, str] = {}
        result = "Any"
    else:
        # each converter's Python type (generator/converters/)
        types = {a.name: a.pytype for a in m.args}
        result = m.result_pytype
    return _with_doc(f"def {m.name}({_typed_params(params, types)}) -> {result}:", m.doc)


# --- classes --------------------------------------------------------------------

def _struct_class(s: StructModel, handles: Set[str]) -> StubClass:
    c = StubClass(s.name, s.doc)
    init = []
    for f in s.fields:
        t = f.pytype
        if f.settable:
            accepts = (GID_LIKE if t == "Gid" else f"{t} | int"
                       if getattr(f.converter, "enum_class", None) else t)
            if accepts != t:
                c.lines += ["@property", _with_doc(f"def {f.name}(self) -> {t}:", f.doc),
                            f"@{f.name}.setter", f"def {f.name}(self, value: {accepts}) -> None: ..."]
            else:
                # an attribute docstring (PEP 257): what editors show on hover
                c.lines += [f"{f.name}: {t}"] + [docstring_body(f.doc)[0].strip()] * bool(f.doc)
            param = f"{f.name}: {accepts}" + (" | None" if f.default == "None" and "None" not in accepts else "")
            init.append(param if f.default is None else param + " = ...")
        else:
            c.lines.append(read_only(f.name, t, f.doc))
    if init:
        c.lines.append(f"def __init__(self, {', '.join(init)}) -> None: ...")
    c.lines.append("def _asdict(self) -> dict[str, Any]: ...")
    return c


def _handle_class(h: HandleModel, handles: Set[str]) -> StubClass:
    # a class the Python layer subclasses (ibverbs.CMID) is not @final
    c = StubClass(h.name, h.doc, final=not h.subclassed)
    c.lines.append(read_only("closed", "bool", "True once close() has run."))
    for pname, pcls, optional in h.parents:
        c.lines.append(read_only(pname, pcls + (" | None" if optional else ""), h.docs.get(pname, "")))
    for aname, getter in h.attributes:
        c.lines.append(read_only(aname, getter.pytype, h.docs.get(aname, "")))
    shadowed = set(h.hand_attribute_names)
    for slot in h.slots:     # a subclass (ImportedMR) has its base's slots
        if slot.name not in shadowed:
            t = slot.stub or "Any"     # spec `stub:` (MR.owner: object)
            c.lines.append(f"{slot.name}: {t}" if slot.writable else read_only(slot.name, t))
    c.lines += _hand_attribute_lines(h)
    c.lines += [_with_doc("def close(self) -> None:", h.close_doc or
                          f"Destroy the {h.ctype} ({h.destroy}); harmless when already closed."),
                "def __enter__(self) -> Self: ...",
                "def __exit__(self, *exc: object) -> None: ...",
                "@classmethod", _with_doc("def _open_count(cls) -> int:", _OPEN_COUNT_DOC.format(h.name))]
    for m in h.methods:
        c.lines.append(_method_def(m, handles, True))
    return c


_OPEN_COUNT_DOC = "How many {} objects of this process are open (leak checks)."


def _hand_attribute_lines(h: HandleModel) -> List[str]:
    """Attributes of hand-written getters/setters (spec ``hand_attributes``),
    typed by their ``stub:`` key (``stub: int``), else Any."""
    return [f"{a.name}: {a.stub or 'Any'}" if a.writable else read_only(a.name, a.stub or "Any", a.doc)
            for a in h.hand_attributes]


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
    # docstring differs); _open_count is the base's classmethod
    own = [m for m in _members(cls.lines) if tuple(m) not in inherited
           and m[0] != "def close(self) -> None:" and m[1:2] != ["def _open_count(cls) -> int:"]]
    cls.lines = [line for m in own for line in m]


def build(model: HeaderModel, records: RecordsModel, cm: HeaderModel) -> Stubs:
    """The classes and functions of the extension: the data-path types',
    the verbs model's, rdma_cm's (whose classes are handle classes too)."""
    handles = {h.name for h in model.handles}
    classes = record_stubs.classes(records)
    classes += [_struct_class(s, handles) for s in model.structs]
    classes += [_handle_class(h, handles) for h in model.handles]
    classes += [_handle_class(h, handles) for h in cm.handles]
    for cls in classes:
        # a slot written as "@property\ndef ..." spans lines
        cls.lines = [part for line in cls.lines for part in line.split("\n")]
        cls.doc = _first_line(cls.doc)
    by_name = {c.name: c for c in classes}
    for h in model.handles:
        if h.base is not None:
            _derive(by_name[h.name], by_name[h.base.name])
    functions = model.functions + cm.functions
    return Stubs(classes, [_method_def(m, handles, False) for m in functions],
                 [m.name for m in functions])


def spec_digest(model: Model) -> str:
    """What the stub's header names as its spec: the three spec sets' digests together."""
    assert model.verbs and model.records and model.rdmacm
    return hashlib.sha256(" ".join((model.verbs.spec.sha256, model.records.spec.sha256,
                                    model.rdmacm.spec.sha256)).encode()).hexdigest()
