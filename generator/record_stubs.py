"""The stubs of the data-path types: spec/datapath/records.yaml's model
(generator/records.py builds it) -> stub classes for generated/_ibverbs.pyi.

Each attribute's type comes from what the model knows of it: a C struct
field (its converter's Python type, an int), a flag (bool), a reference
kept by the type (``ref: AH`` is ``AH | None``); hand-written accessors and references to "any object"
(``ref: null``) say theirs with a spec ``stub:`` key.  A read-only attribute
is a property with its docstring, a writable one a plain annotation.  The
constructor of a ``init: keywords`` type takes its writable attributes as
keywords, in spec order; hand-written special methods (``SGE.__init__``,
``WCBuffer.__new__``, ``__getitem__``) and methods take the ``stub:``
signatures of the spec, and field methods (``WCBuffer.wr_id(i)``) read an
int.
"""
from __future__ import annotations

from typing import Dict, List

from .record_model import RecordAttribute, RecordMethod, RecordsModel, RecordTypeModel
from .stubtext import StubClass, read_only, with_doc

#: a method without a ``stub:`` takes and returns anything
UNTYPED = "(self, *args: Any, **kwargs: Any) -> Any"


def classes(m: RecordsModel) -> List[StubClass]:
    return [_type_class(t) for t in m.types]


def _type_class(t: RecordTypeModel) -> StubClass:
    c = StubClass(t.name, t.doc)
    stubs = dict(t.stubs)
    if t.init == "keywords":
        params = ", ".join(f"{a.name}: {_set_type(a)} = ..." for a in t.init_args)
        stubs.setdefault("__init__", f"(self, {params}) -> None")
    if t.sequence:
        stubs.setdefault("__len__", "(self) -> int")
    _members(c, t.attributes, stubs)
    for fm in t.field_methods:
        c.lines.append(with_doc(f"def {fm.name}(self, index: int, /) -> int:",
                                f"{fm.doc} of valid entry i (IndexError outside)."))
    c.lines += [_method(m) for m in t.methods]
    return c


def _members(c: StubClass, attributes: List[RecordAttribute],
             stubs: Dict[str, str]) -> StubClass:
    """Special methods first (their signatures from the spec), then the
    attributes."""
    for name, sig in stubs.items():
        c.lines.append(f"def {name}{sig}: ...")
    for a in attributes:
        t = _get_type(a)
        if not a.writable:
            c.lines.append(read_only(a.name, t, a.doc))
        elif _set_type(a) != t:
            c.lines += [read_only(a.name, t, a.doc), f"@{a.name}.setter",
                        f"def {a.name}(self, value: {_set_type(a)}) -> None: ..."]
        else:
            c.lines.append(f"{a.name}: {t}")
    return c


def _get_type(a: RecordAttribute) -> str:
    if a.stub is not None:
        return a.stub
    if a.kind in ("field", "kinds") and a.conv is not None:
        return getattr(a.conv, "enum_class", None) or a.conv.pytype
    if a.kind == "flag":
        return "bool"
    if a.kind == "ref" and a.ref_type:
        return f"{a.ref_type} | None"
    return "Any"


def _set_type(a: RecordAttribute) -> str:
    if a.stub_set is not None:
        return a.stub_set
    enum_class = getattr(a.conv, "enum_class", None) if a.kind == "field" else None
    return f"{enum_class} | int" if enum_class else _get_type(a)


def _method(m: RecordMethod) -> str:
    return with_doc(f"def {m.name}{m.stub or UNTYPED}:", m.doc)
