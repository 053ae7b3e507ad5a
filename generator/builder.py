"""IR + spec -> the model (generator/model.py): every decision is taken
here, in one pass per kind of spec entry (enums, struct classes, handle
classes; methods in generator/methods.py).  Errors name the spec file and
line.  Nothing here writes C: values crossing the Python/C boundary become
converters (generator/converters/), which generator/emit.py asks for their C.
"""
from __future__ import annotations

import fnmatch
import keyword
from typing import (AbstractSet, Any, Callable, Dict, FrozenSet, List, Optional, Sequence, Set,
                    Tuple, cast)

from . import cq_locks, docstrings, entries as entry_points, gil, hand_gil, handle_rules, pyimpl
from .rule_data import SelfPtr, refs as rule_refs
from .enum_fields import EnumFields
from .converters import ATTRIBUTES, FIELDS, REQUIRED, AttributeConverter
from .converters.args import spec_default
from .converters.attributes import AttributeCheck
from .converters.fields import field_kind
from .ctext import is_int, py_repr_default, value_runs
from .ir import IR, Function, Type
from .members import flat_fields, has_member, member_type
from .impl import ImplBuilder, shown_param
from .pyimpl import PyImplError
from .methods import MethodBuilder
from .model import (CallingConvention, EnumModel, HandleAttribute, HandleModel, Keepalive,
                    MethodKind, MethodModel,
                    HeaderModel, Parent, PythonTarget, Release, Slot, StateField, StructField,
                    StructModel, SymbolModel)
from .spec import FieldSpec, Handle, Method, Spec, SpecError
from .spec_types import AttributeSpec
from .targets import Target

#: every key a struct class's field may carry, whatever its kind
FIELD_KEYS = frozenset().union(*(c.keys for c in FIELDS.by_kind.values()))
#: the keys of a handle class's `slots:` and `hand_attributes:` entries
SLOT_KEYS = frozenset({"writable", "doc", "clear_on_close", "keepalive", "stub"})
HAND_ATTRIBUTE_KEYS = frozenset({"writable", "doc", "stub"})


class Builder:
    def __init__(self, ir: IR, spec: Spec, targets: Sequence[Target] = ()) -> None:
        self.ir = ir
        self.spec = spec
        # the build targets the generated files serve (spec/targets/targets.yaml):
        # the converters' context (generator/converters/registry.py, Context.targets)
        self.targets: Tuple[Target, ...] = tuple(targets)
        self.struct_by_ctype: Dict[str, str] = {}
        for s in spec.structs:
            self.struct_by_ctype[s.ctype] = s.name
        self.handle_by_ctype: Dict[str, str] = {
            h.ctype: h.name for h in spec.handles}
        self.handle_names = {h.name for h in spec.handles}
        self.struct_models: Dict[str, StructModel] = {}
        self.enum_models: Dict[str, EnumModel] = {}
        self.struct_ctype = {s.name: s.ctype for s in spec.structs}
        # which fields show as enum members: set once the enums are built
        self.enum_fields = EnumFields([], {})

    def enums(self) -> List[EnumModel]:
        out = []
        for e in self.spec.enums:
            prefix = e.prefix
            if e.c is not None:
                ce = self.ir.enum(e.c)
                if ce is None and e.since is not None:
                    continue    # newer than these headers
                if ce is None:
                    raise SpecError(f"{e.where('c')}: {e.name}: no {e.c} in "
                                    f"{self.ir.source}")
                members = [(m.name, m.value) for m in ce.members]
                cname = ce.name
            else:
                pattern = str(e.match)
                members = [(m.name, m.value) for ce in self.ir.enums
                           for m in ce.members if fnmatch.fnmatchcase(m.name, pattern)]
                if not members:
                    raise SpecError(f"{e.where('match')}: {e.name}: no enum member "
                                    f"matches {pattern!r}")
                cname = pattern
            declared = dict(members)
            for cname_m, value in e.members.items():
                if cname_m not in declared:
                    members.append((cname_m, value))
                elif declared[cname_m] != value:
                    raise SpecError(f"{e.where('members')}: {e.name}: {cname_m} is "
                                    f"{declared[cname_m]} in {self.ir.source}, not {value}")
            result = []
            last_part = prefix.rstrip("_").split("_")[-1] + "_"
            for cname_m, value in members:
                if not cname_m.startswith(prefix):
                    raise SpecError(f"{e.where('prefix')}: {e.name}: member {cname_m} "
                                    f"does not start with {prefix}")
                py = cname_m[len(prefix):]
                if not py.isidentifier() or keyword.iskeyword(py):
                    py = last_part + py
                result.append((py, value, cname_m))
            out.append(EnumModel(e.name, e.kind, cname, result))
        self.enum_models = {e.name: e for e in out}
        return out

    def enum_field_names(self) -> Dict[str, str]:
        """spec `enum_fields:` ("struct ibv_wc.wc_flags": WCFlags), each
        member found in the headers and each class built."""
        out = {}
        for key, cls in self.spec.enum_fields.items():
            where = f"{self.spec.enum_field_where.get(key, 'spec')}: enum_fields: {key}"
            record, dot, path = key.partition(".")
            rec = self.ir.record(record)
            if not dot or rec is None:
                raise SpecError(f"{where}: no {record} in {self.ir.source}")
            t = member_type(self.ir, rec, path, where)
            if not is_int(t):
                raise SpecError(f"{where}: {t.spelling} is no integer")
            if cls not in self.enum_models:
                raise SpecError(f"{where}: no enum class {cls}")
            out[key] = cls
        return out

    def named_default(self, owner: str, arg: str, default: Optional[str]) -> Optional[str]:
        """An integer default of an enum or flag argument (spec/docs.yaml
        docs.enums) by its name, as docstrings show it: "QPType.RC",
        "SendFlags.SIGNALED", the OR of a flag value's members; None to
        keep it as it is (a text signature keeps the number: inspect must
        evaluate it)."""
        cls = self.spec.doc_enums.get(f"{owner}.{arg}") or self.spec.doc_enums.get(arg)
        enum = self.enum_models.get(cls or "")
        try:
            value = int(default or "", 0)
        except ValueError:
            return None
        if enum is None:
            return None
        if enum.kind == "IntEnum":
            return next((f"{cls}.{py}" for py, v, _ in enum.members if v == value), None)
        bits = [py for py, v, _ in enum.members if v and v & (v - 1) == 0 and value & v == v]
        if not value or sum(v for py, v, _ in enum.members if py in bits) != value:
            return None
        return " | ".join(f"{cls}.{py}" for py in bits)

    # -- structs --
    def structs(self) -> List[StructModel]:
        out = []
        for s in self.spec.structs:
            record = self.ir.record(s.ctype)
            if record is None and s.since is not None:
                continue        # newer than these headers
            if record is None or not record.complete:
                raise SpecError(f"{s.where('ctype')}: {s.name}: no complete "
                                f"{s.ctype} in {self.ir.source}")
            writable = s.writable
            fields: List[StructField] = []
            if s.fields is None:        # fields: all
                for name, t in flat_fields(self.ir, record):
                    f = self._struct_field(s.name, name, name, t, None, writable,
                                           s.where("fields"), strict=False)
                    if f is not None:
                        fields.append(f)
            for fspec in s.fields or []:
                where = fspec.where()
                # every kind's keys first: a field skipped on older headers is checked too
                _check_field_keys(fspec, FIELD_KEYS, f"{s.name}.{fspec.name}")
                if fspec.since is not None and not has_member(self.ir, record, fspec.path):
                    continue    # a field newer than these headers
                t = member_type(self.ir, record, fspec.path, where)
                f = self._struct_field(s.name, fspec.name, fspec.path, t, fspec, writable,
                                       where, strict=True)
                assert f is not None     # strict: None raised instead
                fields.append(f)
            for f in fields:
                f.doc = self._field_doc(s.name, f.name)
            model = StructModel(s.name, s.ctype, s.doc, writable,
                                fields, any(f.handle for f in fields))
            self.struct_models[s.name] = model
            out.append(model)
        return out

    def _struct_field(self, cls: str, pyname: str, path: str, t: Type, fspec: Optional[FieldSpec],
                      writable: bool, where: str, strict: bool) -> Optional[StructField]:
        convert = fspec.convert if fspec else None
        default = spec_default(bool(fspec and fspec.has_default), fspec.default if fspec else None)
        if default == REQUIRED and not strict:
            default = None
        has_default = default != REQUIRED
        struct_class = self.struct_by_ctype.get(t.decl or t.spelling) if t.kind == "struct" else None
        kind = field_kind(convert, t, struct_class)
        if kind is None:
            if strict:
                raise SpecError(f"{where}: {cls}.{pyname}: cannot convert {t.spelling}")
            return None
        if fspec:
            _check_field_keys(fspec, FIELDS[kind].keys, f"{cls}.{pyname} ({kind})")
        if kind == "handle":
            assert convert is not None       # field_kind: "handle" from `convert: handle:X`
            handle = convert.split(":", 1)[1]
            if handle not in self.handle_names:
                raise SpecError(f"{where}: {cls}.{pyname}: unknown handle class {handle}")
            none_ok = has_default or bool(fspec and fspec.none_ok)
            converter = FIELDS[kind](pyname, path, writable, handle, none_ok)
            return StructField(pyname, path, converter,
                               py_repr_default(default) if has_default else None,
                               handle=handle, none_ok=bool(fspec and fspec.none_ok))
        if kind == "int":
            converter = FIELDS[kind](pyname, path, writable, t,
                                     self._field_members(cls, pyname, fspec, t, where),
                                     self.enum_fields.of(self.struct_ctype[cls], path, t))
        elif kind == "struct":
            converter = FIELDS[kind](pyname, path, writable, struct_class)
        else:
            converter = FIELDS[kind](pyname, path, writable)
        default_doc = py_repr_default(default) if (writable and has_default) else None
        return StructField(pyname, path, converter, default_doc,
                           struct_class=struct_class if kind == "struct" else None)

    def _field_members(self, cls: str, pyname: str, fspec: Optional[FieldSpec], t: Type,
                       where: str) -> Optional[Tuple[str, List[Tuple[int, int]]]]:
        """A struct field's `members: <IntEnum>`: (the enum's name, its values
        as runs), so that only its members are accepted; None without it."""
        name = fspec.members if fspec else None
        if name is None:
            return None
        espec = next((e for e in self.spec.enums if e.name == name), None)
        ce = self.ir.enum(espec.c) if espec is not None and espec.c is not None else None
        if espec is None or ce is None or t.kind != "enum" or (t.decl or t.spelling) != ce.name:
            raise SpecError(f"{where}: {cls}.{pyname}: members: {name!r} must name the spec "
                            f"enum of this field's C enum ({t.decl or t.spelling})")
        values = {m.value for m in ce.members} | set(espec.members.values())
        return name, value_runs(sorted(values))

    # -- handles --
    def handles(self) -> List[HandleModel]:
        out: List[HandleModel] = []
        bases = {h.base.cls for h in self.spec.handles if h.base is not None}
        for h in self.spec.handles:
            model = self._handle(h, out, bases)
            if model is not None:
                out.append(model)
        return out

    def _handle(self, h: Handle, out: List[HandleModel], bases: Set[str]) -> Optional[HandleModel]:
        record = self.ir.record(h.ctype)
        if record is None and h.has("since"):
            return None         # newer than these headers
        if record is None:
            raise SpecError(f"{h.where('ctype')}: {h.name}: no {h.ctype}")
        destroy = h.destroy
        if destroy and self.ir.function(destroy) is None:
            raise SpecError(f"{h.where('destroy')}: {h.name}: no function {destroy}")
        parents = self._parents(h)
        base = upcast = None
        if h.base is not None and h.base.upcast is not None:
            base, upcast = self._upcast_base(h, out, bool(parents or destroy))
            parents = list(base.parents)
            destroy = base.destroy
        attributes = self._attributes(h, record)
        for group, keys in ((h.slots, SLOT_KEYS), (h.hand_attributes, HAND_ATTRIBUTE_KEYS)):
            for sspec in group:
                _check_keys_written(sspec.keys, sspec.where, keys, f"{h.name}.{sspec.name}")
        slots = [Slot(s.name, s.writable, s.doc, s.stub) for s in h.slots]
        state = [StateField(sname, ctype) for sname, ctype in h.state]
        methods = [self.method(m) for m in h.methods if not self.absent(m)]
        registered = h.registered or bool(base and base.registered)
        hand_attributes = [Slot(a.name, a.writable, a.doc, a.stub) for a in h.hand_attributes]
        same_object = h.base is not None and h.base.upcast is None
        if same_object:
            base, parents, destroy, registered, slots = self.base_of(h, out)
        dfunc = self.ir.function(destroy) if destroy else None
        model = HandleModel(h.name, h.ctype, h.doc, destroy,
                            parents, attributes, slots, state,
                            h.before_destroy, registered,
                            methods, base=base, upcast=upcast,
                            before_dealloc=h.before_dealloc,
                            subclassed=h.name in bases,
                            release=self.release(h),
                            hand_attributes=hand_attributes,
                            own_destroy=same_object and h.has("destroy"),
                            destroy_void=dfunc is not None and dfunc.result.kind == "void",
                            destroy_releases_gil=self.destroy_releases_gil(h, destroy))
        model.clear_on_close = (list(base.clear_on_close) if same_object and base is not None
                                else [s.name for s in h.slots if s.clear_on_close])
        model.keepalive = ([] if same_object
                           else [Keepalive(s.keepalive, s.name) for s in h.slots if s.keepalive])
        handle_rules.apply(model, h)
        locks = cq_locks.read(h, parents, destroy, [m.verb for m in methods if m.verb])
        model.destroy_cq_lock = locks.get(destroy) if destroy else None
        for m in methods:
            m.cq_lock = locks.get(m.verb) if m.verb else None
        model.entries = entry_points.build(self.ir, h, base is not None,
                                           {m.name for m in methods if m.short_way})
        for aname, _ in model.attributes:
            if aname not in model.docs:
                model.docs[aname] = self._field_doc(h.name, aname)
        return model

    def destroy_releases_gil(self, h: Handle, destroy: Optional[str]) -> bool:
        """close()'s GIL rule: its destroy verb's kind (spec/gil.yaml)."""
        if not destroy:
            return False
        try:
            return gil.releases(self.spec.gil_kinds, destroy, h.where("destroy"))
        except gil.GilError as exc:
            raise SpecError(str(exc)) from None

    def _field_doc(self, cls: str, name: str) -> str:
        """The docstring of a struct field or handle attribute
        (spec/docs.yaml docs.fields): what it is, its unit and range, the
        verb that fills it. None is a SpecError: every public member is
        documented."""
        text = self.spec.doc_fields.get(cls, {}).get(name)
        if not text:
            raise SpecError(f"{cls}.{name}: no docstring: add `{name}:` under "
                            f"docs.fields.{cls} in spec/docs.yaml")
        return text

    def _parents(self, h: Handle) -> List[Parent]:
        parents = []
        for p in h.parents:
            if p.cls not in self.handle_names:
                raise SpecError(f"{p.at}: {h.name}: unknown parent class {p.cls}")
            parents.append(Parent(p.name, p.cls, p.optional))
        return parents

    def _upcast_base(self, h: Handle, out: List[HandleModel], own_parents_or_destroy: bool) -> Tuple[HandleModel, str]:
        """`base: {class, upcast}`: the base class (defined before) and the
        function converting this class's C type to the base's."""
        bspec = h.base
        assert bspec is not None and bspec.upcast is not None
        base = next((b for b in out if b.name == bspec.cls), None)
        if base is None:
            raise SpecError(f"{bspec.where('class')}: {h.name}: base {bspec.cls} "
                            f"must be a handle class defined before it")
        if base.has_gc or base.base is not None:
            raise SpecError(f"{bspec.where('class')}: {h.name}: subhandle.c.h.j2 supports "
                            f"bases without slots that are no subclass themselves")
        upcast = bspec.upcast
        if self.ir.function(upcast) is None:
            raise SpecError(f"{bspec.where('upcast')}: {h.name}: no function {upcast}")
        if own_parents_or_destroy:
            raise SpecError(f"{h.where()}: {h.name}: a subclass takes its parents "
                            f"and destroy verb from its base {base.name}")
        return base, upcast

    def _attributes(self, h: Handle, record: Any) -> List[HandleAttribute]:
        attributes = []
        for a in h.attributes:
            aname, where = a.name, a.at
            if not a.plain:
                kind = ("int" if a.has_checks else "member" if a.has("path")
                        and not a.has("convert") else str(a.convert)
                        if a.has("path") else "str" if a.convert == "str"
                        else "int")
                converter = ATTRIBUTES.get(kind)
                _check_keys_written(a.keys, a.where,
                                    converter.keys if converter else {"path", "convert"},
                                    f"{h.name}.{aname}")
                if not a.has("path") and not a.has("expr"):
                    raise SpecError(f"{where}: {h.name}.{aname}: needs 'path' or 'expr'")
            if a.checks is not None:
                checks = [AttributeCheck(_attribute_value(chk.expr, where), chk.error, chk.message)
                          for chk in a.checks]
                attributes.append(HandleAttribute(aname, ATTRIBUTES["int"](
                    _attribute_value(a.expr, where), f"{h.name}.{aname}", checks)))
                continue
            if not a.plain and a.has("path") and a.has("convert"):
                attributes.append(HandleAttribute(aname, self._member_attribute(h, record, a)))
                continue
            path = a.path
            if not a.plain and a.has("path"):
                # {path, since}: a member newer than some headers
                if a.has("since") and not has_member(self.ir, record, str(a.path)):
                    continue
            if a.plain or a.has("path"):
                t = member_type(self.ir, record, str(path), where)
                if not is_int(t):
                    raise SpecError(f"{where}: {h.name}.{aname}: {path} is not an integer")
                attributes.append(HandleAttribute(aname, ATTRIBUTES["member"](
                    path, t, self.enum_fields.of(h.ctype, str(path), t))))
            elif (a.convert or "int") == "str":
                attributes.append(HandleAttribute(
                    aname, ATTRIBUTES["str"](_attribute_value(a.expr, where))))
            else:
                attributes.append(HandleAttribute(
                    aname, ATTRIBUTES["int"](_attribute_value(a.expr, where))))
        return attributes

    def _member_attribute(self, h: Handle, record: Any, a: AttributeSpec) -> AttributeConverter:
        """{path, convert: kind}: a member read by a hand-written C converter."""
        kind, where = a.convert, a.at
        converter = ATTRIBUTES.get(str(kind)) if kind not in ("int", "member", "str") else None
        if converter is None or not hasattr(converter, "ctype"):
            raise SpecError(f"{where}: {h.name}.{a.name}: unknown member converter {kind!r}")
        t = member_type(self.ir, record, str(a.path), where)
        if t.spelling != converter.ctype:
            raise SpecError(f"{where}: {h.name}.{a.name}: {a.path} is a {t.spelling}, "
                            f"not a {converter.ctype}")
        return cast(AttributeConverter, converter(a.path))

    def release(self, h: Handle) -> Optional[Release]:
        rel = h.release
        if rel is None and h.release_written is None:
            return None
        if rel is None:
            raise SpecError(f"{h.where('release')}: {h.name}: release needs 'when' "
                            f"(a state flag) and 'verb'")
        if rel.when not in {name for name, _ in h.state}:
            raise SpecError(f"{rel.where('when')}: {h.name}: no state {rel.when!r}")
        if self.ir.function(rel.verb) is None and rel.verb in self.spec.optional:
            return None     # older headers: nothing can be imported either
        if self.ir.function(rel.verb) is None:
            raise SpecError(f"{rel.where('verb')}: {h.name}: no function {rel.verb}")
        return Release(rel.when, rel.verb)

    def base_of(self, h: Handle, done: List[HandleModel]) -> Tuple[Any, ...]:
        """A same-object subclass (`base: QP`) takes its base's parents,
        destroy and registration; the base must come first in the spec and
        own the same C type (its methods run on the subclass's objects
        unchanged)."""
        name = h.name
        assert h.base is not None
        base = next((m for m in done if m.name == h.base.cls), None)
        if base is None:
            raise SpecError(f"{h.where('base')}: {name}: base {h.base.cls} must be a "
                            "handle class declared before it")
        if base.ctype != h.ctype:
            raise SpecError(f"{h.where('ctype')}: {name}: a subclass owns the same C "
                            f"type as its base ({base.ctype}); another type needs "
                            "base: {class, upcast}")
        for key in ("parents", "slots", "before_destroy", "registered"):
            if h.has(key):
                raise SpecError(f"{h.where(key)}: {name}: {key} comes from the base "
                                f"{base.name}")
        if h.has("destroy") and (h.has("state") or h.has("hand_attributes")):
            raise SpecError(f"{h.where('destroy')}: {name}: a subclass with its own "
                            "destroy keeps the base's layout (no state)")
        destroy = h.destroy if h.has("destroy") else base.destroy
        return base, base.parents, destroy, base.registered, base.slots

    # -- methods --
    def absent(self, m: Method) -> bool:
        """A method whose verb these (older) headers do not declare, and
        that the spec marks as newer (its verb under symbols.optional, or a
        `since:` key): skipped, so that old releases still generate.  Any
        other missing verb is left to method(), which raises SpecError."""
        verbs = [m.verb] if m.hand is None else list(m.verbs)
        missing = [v for v in verbs if v and self.ir.function(v) is None]
        return bool(missing) and (m.has("since") or
                                  all(v in self.spec.optional for v in missing))

    def method(self, m: Method) -> MethodModel:
        model = self._method(m)
        model.stub = m.stub
        return model

    def _method(self, m: Method) -> MethodModel:
        label = f"{m.owner}.{m.name}" if m.owner else m.name
        prefix = f"{m.owner}_" if m.owner else "module_"
        cname = f"{prefix}{m.name.lstrip('_')}" if not m.name.startswith("_") else f"{prefix}_{m.name.lstrip('_')}"
        if m.python is not None:
            module, func = m.python.split(":")
            try:
                sig = pyimpl.signature(m.name, module, func)
            except PyImplError as exc:
                raise SpecError(f"{m.where('python')}: {label}: {exc}") from None
            stub = m.stub
            # overloads (a list) of a def taking *args: nothing to compare
            stub_names = pyimpl.stub_names(str(stub)) if isinstance(stub, str) else None
            if stub_names is not None and stub_names != pyimpl.names(
                    sig[sig.index("(") + 1:-1].split(", ")):
                raise SpecError(f"{m.where('stub')}: {label}: the stub's parameters "
                                f"({', '.join(stub_names)}) are not those of {m.python}: {sig}")
            doc = f"{sig}\n--\n\n{str(m.doc).strip()}"
            return MethodModel(m.name, m.owner, f"ibp_py_{cname}", CallingConvention.VARARGS_KW,
                               doc, kind=MethodKind.PYTHON, python=PythonTarget(module, func),
                               signature=sig)
        if m.hand is not None:
            sig = m.hand
            inner = sig[sig.index("(") + 1:sig.rindex(")")].strip()
            params = [p.strip() for p in inner.split(",") if p.strip()]
            if not params:
                flags = CallingConvention.NOARGS
            elif len(params) == 1 and "=" not in params[0]:
                # keywords: true keeps the name usable as a keyword (the
                # seed's cq.poll(num_entries=16)) at METH_O's speed.
                flags = CallingConvention.FASTCALL_KW if m.keywords else CallingConvention.O
            elif m.keywords and m.impl is not None:
                flags = CallingConvention.FASTCALL_KW    # the generated parser: no tuple, no dict
            else:
                flags = CallingConvention.VARARGS_KW
            selfpart = "$self, /" if m.owner else ""
            shown = ", ".join(([selfpart] if selfpart else [])
                              + [shown_param(p, m.impl, self.ir) for p in params])
            verbs = list(m.verbs)
            text = m.doc or (f"Calls {', '.join(verbs)}." if verbs else "")
            if not text:
                raise SpecError(f"{m.where()}: {label}: a hand-written method needs 'doc' or 'verbs'")
            raises = docstrings.raises_of(label, self.spec.doc_methods)
            if raises:       # the errors of its verbs, from spec/docs.yaml
                text = f"{text}\n\nRaises:\n" + "\n".join(raises)
            sig = f"{m.name}({shown})"
            doc = f"{sig}\n--\n\n{text}"
            for v in verbs:
                if self.ir.function(v) is None:
                    raise SpecError(f"{m.where('verbs')}: {label}: no function {v}")
            if m.impl is not None:     # a generated parser calls the hand-written _impl
                model = ImplBuilder(self, m, label, cname).build_impl(flags, doc, sig, verbs)
            else:
                model = MethodModel(m.name, m.owner, f"ibp_hand_{cname}", flags, doc, kind=MethodKind.HAND,
                                    verbs=verbs, signature=sig)
            return self.hand_gil(m, label, model)
        return MethodBuilder(self, m, label, cname).build()

    def hand_gil(self, m: Method, label: str, model: MethodModel) -> MethodModel:
        """A hand method's GIL rule, from its verbs' kinds, and what its
        wrapper holds while it runs (generator/hand_gil.py)."""
        model.release_gil = hand_gil.releases(self.spec.gil_kinds, model.verbs,
                                              m.where("verbs"), m.gil)
        owner = self.spec.handle(m.owner) if m.owner else None
        model.hand_holds = hand_gil.holds(m, label, owner, model.release_gil, model.params)
        if model.short_way and (model.release_gil or model.hand_holds):
            # the short way is not in flight: only a call that keeps the
            # GIL and runs no Python code may go without
            raise SpecError(f"{m.where('short_way')}: {label}: short_way is for a method "
                            "that keeps the GIL and holds nothing")
        return model



# --- symbols and coverage ----------------------------------------------------


def public_functions(ir: IR) -> List[Function]:
    """The functions a user of verbs.h can call: declared in verbs.h itself,
    not rdma-core internals (leading underscore)."""
    return [f for f in ir.functions
            if f.header == ir.source and not f.name.startswith("_")]


def symbols(ir: IR, spec: Spec) -> List[SymbolModel]:
    out = []
    for f in ir.functions:
        if f.storage != "exported" or f.variadic:
            continue
        params = [(p.type.spelling, p.name or f"arg{i}") for i, p in enumerate(f.params)]
        out.append(SymbolModel(f.name, f.result.spelling, params, spec.optional.get(f.name)))
    return out


def coverage(ir: IR, spec: Spec, methods: List[MethodModel]) -> List[Tuple[str, str, str]]:
    bound: Dict[str, List[str]] = {}
    for m in methods:
        label = f"{m.owner}.{m.name}" if m.owner else m.name
        for v in m.verbs:
            bound.setdefault(v, []).append(label)
    for h in spec.handles:
        if h.destroy:
            bound.setdefault(h.destroy, []).append(f"{h.name}.close")
        rel = h.release
        if rel is not None and rel.verb:
            bound.setdefault(rel.verb, []).append(f"{h.name}.close (when {rel.when})")
        if h.base is not None and h.base.upcast:
            bound.setdefault(h.base.upcast, []).append(f"{h.name} (is a {h.base.cls})")
    rows = []
    for f in public_functions(ir):
        if f.name in bound:
            rows.append((f.name, "bound", ", ".join(sorted(set(bound[f.name])))))
        elif f.name in spec.exclusions:
            rows.append((f.name, "excluded", spec.exclusions[f.name]))
        else:
            rows.append((f.name, "unhandled", ""))
    return sorted(rows)


def build(ir: IR, spec: Spec, targets: Sequence[Target] = ()) -> HeaderModel:
    """verbs.h's model; *targets*: the build targets its files serve (none
    given: a converter can assume nothing of them)."""
    b = Builder(ir, spec, targets)
    enums = b.enums()
    b.enum_fields = EnumFields(enums, b.enum_field_names())
    structs = b.structs()
    handles = b.handles()
    functions = [b.method(m) for m in spec.functions if not b.absent(m)]
    all_methods = [m for h in handles for m in h.methods] + functions
    return HeaderModel(ir, spec, enums, structs, handles, functions, symbols(ir, spec),
                 coverage(ir, spec, all_methods))


def _check_field_keys(fspec: FieldSpec, allowed: FrozenSet[str], what: str) -> None:
    """Refuse a key a struct field was written with that is not allowed,
    naming its line."""
    for key in fspec.keys:
        if key not in allowed:
            raise SpecError(f"{fspec.where(key)}: {what}: unknown key {key!r} "
                            f"(expected one of: {', '.join(sorted(allowed))})")


def _check_keys_written(keys: Tuple[str, ...], where: Callable[[str], str],
                        allowed: AbstractSet[str], what: str) -> None:
    """Refuse a key an entry was written with that is not allowed, naming its line."""
    for key in keys:
        if key not in allowed:
            raise SpecError(f"{where(key)}: {what}: unknown key {key!r} "
                            f"(expected one of: {', '.join(sorted(allowed))})")


def _attribute_value(value: Any, where: str) -> Any:
    """An attribute's expression (a generator/rule_data.py value): a getter
    has self's verbs pointer (the templates declare it) and nothing of a
    method's arguments."""
    for ref in rule_refs(value):
        if not isinstance(ref, SelfPtr):
            raise SpecError(f"{where}: an attribute cannot use {ref!r}")
    return value
