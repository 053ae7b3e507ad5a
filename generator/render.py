"""Render the model (model.Model) through the Jinja2 templates into
generated/: one entry, render(), for every file: verbs.h's classes, the
data-path types' (records), rdma_cma.h's (rdmacm_*), the stub and the
build targets', one environment and one finish for all.

Output is deterministic: the same IR and spec give byte-identical files.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import jinja2

from . import checksum, emit, enum_fields
from .ctext import c_text
from .model import CallingConvention, HeaderModel, MethodKind, Model
from .paths import TEMPLATE_DIR
from .record_model import RecordsModel
from .spec import SpecFiles
from .targets import Target

COMMAND = "python -m generator generate"


@dataclass(frozen=True)
class LockedEntry:
    function: str   # the C function a table names
    kind: str       # its signature (templates/_locked.c.j2, SIGNATURES)


#: a PyMethodDef's flags -> the signature of its function
_METHOD_KINDS = {"METH_NOARGS": "noargs", "METH_O": "o", "METH_VARARGS": "varargs",
                 "METH_VARARGS | METH_KEYWORDS": "varargs_kw",
                 "METH_FASTCALL | METH_KEYWORDS": "fastcall_kw"}


@dataclass(frozen=True)
class LockedFile:
    """The wrappers one file renders (templates/_locked.c.j2): the entries
    its tables name, and whose critical section they take (a view's
    entries lock the object it shows, spec `lock:`: member lock_member of
    self, an object_type; else self)."""
    entries: Tuple[LockedEntry, ...]
    lock_member: Optional[str]
    object_type: str


class LockedEntries:
    """What one file's tables name (methods, attributes, slots), gathered
    while it renders: the templates write `{{ locked(function, kind) }}`
    where a table names a function, which gives IBP_LOCKED(function)
    (common.h: the function itself on a GIL target, its __locked wrapper
    on a free-threaded one), and the wrappers are rendered around the file
    (a LockedFile: templates/_header.j2 their prototypes,
    templates/_locked_file.j2 their definitions).  So no entry of any class
    can be reached without its object's critical section on a
    free-threaded target.  A class method (METH_CLASS) has no object to
    lock: named as it is."""

    def __init__(self, lock_member: Optional[str] = None, object_type: str = "") -> None:
        self.entries: List[LockedEntry] = []
        # a view's entries lock the object it shows (spec `lock:`): member
        # lock_member of self, an object_type
        self.lock_member = lock_member
        self.object_type = object_type

    def __call__(self, function: str, kind: Any) -> str:
        if isinstance(kind, CallingConvention):
            kind = kind.value      # its name is its signature's
        elif kind.startswith("METH_"):
            if "METH_CLASS" in kind:
                return function
            if kind not in _METHOD_KINDS:
                raise ValueError(f"{function}: no locked wrapper for a {kind} method")
            kind = _METHOD_KINDS[kind]
        entry = LockedEntry(function, kind)
        if entry not in self.entries:
            self.entries.append(entry)
        return f"IBP_LOCKED({function})"

    def file(self) -> LockedFile:
        """What was gathered, as the data the templates render."""
        return LockedFile(tuple(self.entries), self.lock_member, self.object_type)


def _init_format(fields: Any) -> str:
    fmt = ""
    optional = False
    for f in fields:
        if f.default is not None and not optional:
            fmt += "|"
            optional = True
        fmt += "O"
    return fmt


def environment(template_dir: str) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(template_dir),
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined, autoescape=False)
    env.filters["cstring"] = c_text
    env.globals["init_format"] = _init_format
    env.globals["MethodKind"] = MethodKind
    env.globals["CallingConvention"] = CallingConvention
    # a method function's flags and C parameters, the loader's trampolines
    env.filters["c_meth_flags"] = emit.meth_flags
    env.filters["c_params"] = emit.c_params
    env.filters["c_args"] = emit.c_args
    env.filters["c_impl_prototype"] = emit.impl_prototype
    env.globals["c_unconverted_prototype"] = emit.unconverted_prototype
    env.filters["c_entry_params"] = emit.entry_params
    env.filters["c_symbol_params"] = emit.symbol_params
    env.filters["c_symbol_args"] = emit.symbol_args
    env.filters["c_symbol_failure"] = emit.symbol_failure
    # the C of the model's converters and wrappers (generator/emit.py)
    env.filters["c_body"] = emit.function_lines
    env.filters["cq_array"] = emit.cq_array
    env.filters["c_entered"] = emit.entered_lines
    env.filters["c_unpack"] = emit.unpack_lines
    env.filters["c_getter"] = emit.getter_lines
    env.filters["c_setter"] = emit.setter_lines
    env.filters["c_prepare"] = emit.prepare_lines
    env.filters["c_entry_access"] = emit.entry_access
    env.filters["record_prototypes"] = emit.record_prototypes
    env.filters["record_state_decls"] = emit.record_state_decls
    # the header's stamp (generator/checksum.py)
    env.globals["output_sha256_mark"] = checksum.OWN_MARK
    env.globals["output_sha256_zeros"] = checksum.ZEROS
    return env


def _handle_template(h: Any) -> str:
    """A plain handle class, a subclass over the same verbs object (QPEx of
    QP), or a subclass holding another C type that converts to its base's
    (CQEx of CQ through ibv_cq_ex_to_cq)."""
    if h.base is not None and h.upcast:
        return "subhandle_upcast.c.h.j2"
    if h.base is not None and not h.own_destroy:
        return "subhandle.c.h.j2"
    return "handle.c.h.j2"


def render(model: Model, template_dir: str = TEMPLATE_DIR) -> Dict[str, str]:
    """Every generated file of the model: file name (relative to
    generated/) -> contents.  The one render entry: verbs.h's files, the
    data-path types', rdma_cma.h's (rdmacm_*), the stub of them all
    (_ibverbs.pyi) and the build targets' (target.h, targets.py)."""
    env = environment(template_dir)
    files: Dict[str, str] = {}
    if model.verbs is not None:
        files.update(_verbs_files(env, model.verbs))
    if model.records is not None:
        files.update(_record_files(env, model.records))
    if model.rdmacm is not None:
        files.update(_rdmacm_files(env, model.rdmacm))
    if model.verbs is not None and model.records is not None and model.rdmacm is not None:
        files.update(_stub_files(env, model))
    if model.targets is not None:
        files.update(_target_files(env, model.targets))
    return {name: finish(text) for name, text in files.items()}


_C_COMMENT = dict(comment_open="/*", comment_mid=" *", comment_close="*/")
_PY_COMMENT = dict(comment_open="#", comment_mid="#", comment_close="")


def _verbs_files(env: jinja2.Environment, model: HeaderModel) -> Dict[str, str]:
    """verbs.h's files: the loader, declarations, struct and handle classes,
    the module, the enums and the package."""
    common = dict(ir=model.ir, spec=model.spec, command=COMMAND,
                  enums=model.enums, structs=model.structs,
                  handles=model.handles, functions=model.functions,
                  symbols=model.symbols)
    files: Dict[str, str] = {}

    def emit(name: str, template: str, comment: Dict[str, str] = _C_COMMENT,
             **extra: Any) -> None:
        files[name] = _render_locked(env, template, LockedEntries(),
                                     **common, **comment, **extra)

    from .loader import VERBS
    emit("loader.c.h", "loader.c.h.j2", lib=VERBS)
    emit("objects.h", "objects.h.j2")
    emit("structs.c.h", "structs.c.h.j2")
    for h in model.handles:
        emit(f"{h.name.lower()}.c.h", _handle_template(h), h=h)
    emit("module.c.h", "module.c.h.j2")
    emit("handles.c.h", "includes.c.h.j2",
         includes=[f"{h.name.lower()}.c.h" for h in model.handles])
    emit("enums.py", "enums.py.j2", comment=_PY_COMMENT)
    emit("__init__.py", "package.py.j2", comment=_PY_COMMENT)
    return files


def _record_files(env: jinja2.Environment, m: RecordsModel) -> Dict[str, str]:
    """The data-path types' files: records.h (the field converters and
    object layouts) and one <type>.c.h per type."""
    common = dict(ir=m.ir, spec=m.spec, command=COMMAND, helpers=m.helpers,
                  records=m.records, types=m.types,
                  enum_declarations=enum_fields.c_declarations(m.enum_classes),
                  **_C_COMMENT)
    files = {"records.h": env.get_template("records.h.j2").render(**common)}
    by_key = {r.key: r for r in m.records}
    for t in m.types:
        files[f"{t.name.lower()}.c.h"] = _render_locked(
            env, "record_type.c.h.j2", LockedEntries(t.lock, f"{t.name}Object"),
            **common, t=t, by_key=by_key)
    return files


#: rdma_cma.h's generated files are all named rdmacm_*
RDMACM_PREFIX = "rdmacm_"


def _rdmacm_files(env: jinja2.Environment, m: HeaderModel) -> Dict[str, str]:
    """rdma_cma.h's files: the librdmacm loader, its declarations, the
    EventChannel and CMID classes and the CM enums."""
    from .loader import RDMACM
    common = dict(ir=m.ir, spec=m.spec, command=COMMAND, enums=m.enums,
                  handles=m.handles, functions=m.functions, symbols=m.symbols)
    p = RDMACM_PREFIX
    return {
        f"{p}loader.c.h": env.get_template("loader.c.h.j2").render(**common, **_C_COMMENT,
                                                                  lib=RDMACM),
        f"{p}objects.h": env.get_template("rdmacm_objects.h.j2").render(**common, **_C_COMMENT),
        f"{p}methods.c.h": _render_locked(env, "rdmacm_methods.c.h.j2", LockedEntries(),
                                          **common, **_C_COMMENT),
        f"{p}enums.py": env.get_template("enums.py.j2").render(**common, **_PY_COMMENT),
    }


def _stub_files(env: jinja2.Environment, model: Model) -> Dict[str, str]:
    """_ibverbs.pyi: the stub of the whole extension (generator/stubs.py),
    from verbs.h's model, the data-path types' and rdma_cm's."""
    from . import stubs
    assert model.verbs is not None and model.records is not None and model.rdmacm is not None
    built = stubs.build(model.verbs, model.records, model.rdmacm)
    text = env.get_template(stubs.TEMPLATE).render(
        ir=model.verbs.ir, spec=SpecFiles([], stubs.spec_digest(model)), command=COMMAND,
        **_PY_COMMENT, classes=built.classes, stub_functions=built.functions,
        enum_names=[e.name for e in model.verbs.enums], reexports=stubs.REEXPORTS,
        public_names=built.public_names())
    return {stubs.OUTPUT: text}


def _target_files(env: jinja2.Environment, targets: List[Target]) -> Dict[str, str]:
    """generated/target.h and generated/targets.py from the build targets
    (generator/targets.py)."""
    from .targets import by_newest, setup_view
    common = dict(ir=_NoIR(), command=COMMAND, targets=targets, newest_first=by_newest(targets))
    return {"target.h": env.get_template("target.h.j2").render(**common, **_C_COMMENT),
            "targets.py": env.get_template("targets.py.j2").render(
                **common, **_PY_COMMENT, targets_view=setup_view(targets))}


class _NoIR:
    """The header's `from ...` for files made from the spec alone."""
    source = "spec/targets/targets.yaml"


def _render_locked(env: jinja2.Environment, template: str, locked: LockedEntries,
                   **context: Any) -> str:
    """A file whose tables name functions through `locked()`: rendered once
    to learn which (the entries are the tables'), then, when any, again
    through templates/_locked_file.j2 with their wrappers (a LockedFile)."""
    text = env.get_template(template).render(**context, locked=locked)
    wrappers = locked.file()
    if not wrappers.entries:
        return text
    again = LockedEntries(locked.lock_member, locked.object_type)
    text = env.get_template("_locked_file.j2").render(**context, locked=again,
                                                      locked_file=wrappers,
                                                      body_template=template)
    assert again.file() == wrappers, f"{template}: another pass named other functions"
    return text


def finish(text: str) -> str:
    """A rendered file as written: tidied, then its own checksum filled in."""
    return checksum.stamp(_tidy(text))


def _tidy(text: str) -> str:
    lines = [line.rstrip() for line in text.split("\n")]
    out: List[str] = []
    for line in lines:
        if line == "" and out and out[-1] == "" :
            continue
        out.append(line)
    return "\n".join(out).rstrip("\n") + "\n"


def write(files: Dict[str, str], out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    for name in os.listdir(out_dir):
        if name not in files and (name.endswith((".c.h", ".h", ".py"))):
            os.remove(os.path.join(out_dir, name))
    for name, text in sorted(files.items()):
        path = os.path.join(out_dir, name)
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
