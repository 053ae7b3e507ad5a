"""The model: what to emit, as typed dataclasses (no C text here).

generator/builder.py and generator/methods.py make it from the IR and the
spec (every decision is taken there; errors name the spec file and line);
generator/emit.py turns it into the C the templates print, and
generator/stubs.py into the Python stubs.  Each value that crosses the
Python/C boundary is held as a converter (generator/converters/), which
knows its C and its Python type.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from .converters import (Arg, AttributeConverter, FieldConverter, ParamConverter,  # noqa: F401
                         ReturnConverter)
from .converters.rule_c import Refs
from .rule_data import ExplainCall
from .model_base import PartModel
from .record_model import RecordsModel
from .spec import Spec
from .targets import Target


@dataclass
class EnumModel:
    name: str
    kind: str            # IntEnum | IntFlag
    cname: str
    members: List[Tuple[str, int, str]]   # python name, value, C name


@dataclass
class StructField:
    name: str
    path: str            # C member path inside the struct ("grh.dgid")
    converter: FieldConverter        # its getter, setter and Python type
    default: Optional[str] = None    # Python repr of the default (init)
    handle: Optional[str] = None     # class of a handle-valued field
    struct_class: Optional[str] = None
    # A required handle field that may hold None until the struct is used
    # (the seed's QPInitAttr(None, None)): the verb that takes the struct
    # says what is missing, not a generic "is not set".
    none_ok: bool = False
    doc: str = ""        # its docstring (spec/docs.yaml docs.fields)

    @property
    def settable(self) -> bool:
        """It has a setter (a writable class, a member that can be written)."""
        return self.converter.settable

    @property
    def pytype(self) -> str:
        return self.converter.pytype


@dataclass
class StructModel:
    name: str
    ctype: str
    doc: str
    writable: bool
    fields: List[StructField]
    has_handles: bool

    @property
    def handle_fields(self) -> List[StructField]:
        return [f for f in self.fields if f.handle]

    @property
    def text_signature(self) -> str:
        """The constructor's signature, for the class's __text_signature__
        (inspect.signature, help(), the reference): its keyword arguments
        with their defaults; "" for a read-only struct (no constructor)."""
        if not self.writable:
            return ""
        args = [f.name if f.default is None else f"{f.name}={f.default}"
                for f in self.fields if f.settable]
        return f"({', '.join(args)})"


@dataclass
class Check:
    """A precondition of a method (spec `checks:`): when the condition (a
    generator/rule_data.py value) does not hold, raise the exception with
    the message."""
    condition: Any
    error: str
    message: str


@dataclass
class Explain:
    """What a method says after its verb failed (spec `explain:`): for an
    errno (or any, None), the explainers tried in order, each writing the
    cause into the message buffer and returning nonzero when it found one."""
    errno: Optional[str]
    calls: List[ExplainCall]


class CallingConvention(enum.Enum):
    """How Python calls a method's C function (its PyMethodDef flags, which
    generator/emit.py spells): no argument, one, a tuple and a dict, or a
    vector and keyword names."""
    NOARGS = "noargs"
    O = "o"
    VARARGS_KW = "varargs_kw"
    FASTCALL_KW = "fastcall_kw"


class MethodKind(enum.Enum):
    """Who writes a method's C function."""
    GENERATED = "generated"   # a verb wrapper, all generated (generator/emit.py)
    HAND = "hand"             # hand-written C (spec `hand:`), entered through its __call
    IMPL = "impl"             # a generated parser calling a hand-written _impl (spec `impl:`)
    PYTHON = "python"         # written in Python (spec `python:`), called from C


class PythonTarget(NamedTuple):
    """The Python function a `python:` method calls."""
    module: str
    function: str


class HandHold(NamedTuple):
    """What a hand method that releases the GIL holds busy besides self
    (spec `holds:`): a slot or parent of self (`slot`) or one of its impl
    arguments (`arg`), the local that keeps the hold, and whether it is a
    sequence of handles (ibp_hold_each)."""
    slot: Optional[str]
    arg: Optional[str]
    local: str
    each: bool


class OptionalSymbol(NamedTuple):
    """A symbol a wrapper needs that older rdma-core releases lack."""
    name: str
    since: str        # the first release with it


@dataclass
class MethodModel:
    name: str                  # Python name
    owner: str                 # class, "" for module functions
    cname: str                 # C function name
    flags: CallingConvention
    doc: str                   # docstring incl. the signature line
    kind: MethodKind = MethodKind.GENERATED
    signature: str = ""        # the text signature ("name($self, /, a, b=0)")
    args: List[Arg] = field(default_factory=list)
    verbs: List[str] = field(default_factory=list)  # C functions it binds
    # a Python-layer method (kind PYTHON): the function it calls
    python: Optional[PythonTarget] = None
    # --- a generated wrapper (kind GENERATED): what generator/emit.py writes ---
    verb: str = ""
    params: List[ParamConverter] = field(default_factory=list)   # the verb's, in order
    param_names: List[str] = field(default_factory=list)        # their C names, in order
    result_spelling: Optional[str] = None   # the verb's C result type, None for void
    owner_ctype: Optional[str] = None
    owner_is_subclass: bool = False         # its class has a spec `base:`
    symbols: List[OptionalSymbol] = field(default_factory=list)
    checks: List[Check] = field(default_factory=list)
    explain: List[Explain] = field(default_factory=list)   # after a failure
    # what runs around the call (generator/rule_data.py values; the emit
    # stage writes their C): a precondition that raises (< 0), a statement
    # before the call, one once the result exists
    guard: Optional[Any] = None
    prologue: Optional[Any] = None
    epilogue: Optional[Any] = None
    # the values of the wrapper its rules name, by parameter (converters/rule_c.py)
    refs: Optional[Refs] = None
    errors: str = "none"                    # null | errno | negative | code | none
    release_gil: bool = False
    returns: Optional[ReturnConverter] = None
    result_pytype: str = "Any"              # the Python type it returns
    # it reads self's verbs pointer (its converters, checks, guard, prologue
    # or epilogue say so); else emit.py casts it to void
    uses_self_ptr: bool = False
    # --- a hand method with a generated parser (kind IMPL, generator/impl.py) ---
    impl: Optional[str] = None              # the hand-written function it calls
    # that function's parameters after self: (C type spelling, name)
    impl_params: List[Tuple[str, str]] = field(default_factory=list)
    # spec `short_way: true` (generator/impl.py): the hand function its
    # wrapper hands arguments by position to first, and the generated one
    # that hand function falls back to (the call entered, the _impl called)
    short_way: Optional[str] = None
    entered: Optional[str] = None
    # what its wrapper holds while the hand code runs without the GIL (spec
    # `holds:`, generator/hand_gil.py)
    hand_holds: List[HandHold] = field(default_factory=list)
    # the CQs whose provider lock its verb takes (spec cq_locks:, generator/cq_locks.py)
    cq_lock: Optional[Any] = None
    # its stub as the spec writes it (`stub:`, a hand or Python method's
    # "(self, ...) -> T", or a list of overloads), for generator/stubs.py
    stub: Optional[Any] = None

    @property
    def hand(self) -> bool:
        """Its C is not (all) generated: hand-written, an _impl's parser, or Python."""
        return self.kind is not MethodKind.GENERATED

    @property
    def outputs(self) -> List[ParamConverter]:
        """The out parameters, in order."""
        return [p for p in self.params if p.output_pytype is not None]


class Parent(NamedTuple):
    """A handle's parent object (kept alive with it)."""
    attr: str         # the attribute and the object's member
    cls: str          # its handle class
    optional: bool    # may be None


class HandleAttribute(NamedTuple):
    """A generated read-only attribute of a handle class."""
    name: str
    converter: AttributeConverter    # its getter


class Slot(NamedTuple):
    """A Python object a handle keeps (spec `slots:`), or a hand-written
    attribute (spec `hand_attributes:`); `stub`: its type in the stubs
    (spec `stub:`, else Any)."""
    name: str
    writable: bool
    doc: str
    stub: Optional[str] = None


class StateField(NamedTuple):
    """A C member of the object beside the verbs pointer (spec `state:`)."""
    name: str
    ctype: str


class EntryParam(NamedTuple):
    ctype: str
    name: str


class MemberStep(NamedTuple):
    """One member on the way to a provider function: through a pointer, or
    inside an embedded struct."""
    member: str
    through_pointer: bool


class Entry(NamedTuple):
    """A provider entry point the object keeps for a hand short way (spec
    `entries:`, generator/entries.py): the member entry_<name>, the inline
    verb it is the body of, that verb's parameters, and the members leading
    from the handle's verbs object to the provider's function."""
    name: str
    verb: str
    params: List[EntryParam]
    path: List[MemberStep]



class Release(NamedTuple):
    """close() lets go with `verb` instead of destroying when `flag` is set."""
    flag: str
    verb: str


class Keepalive(NamedTuple):
    """A method setting `slot` and returning the object."""
    method: str
    slot: str


@dataclass
class HandleModel:
    name: str
    ctype: str
    doc: str
    destroy: Optional[str]      # None: a class with no destroy verb of its own
    parents: List[Parent]
    attributes: List[HandleAttribute]
    slots: List[Slot]
    state: List[StateField]
    before_destroy: Optional[str]
    registered: bool
    methods: List[MethodModel]
    # A subclass of another handle class (spec `base:`), in one of two forms:
    # * `base: QP`: the same verbs object (QPEx, ImportedPD): the base's
    #   layout, parents, destroy and close(), plus its own methods and state;
    #   objects are made with <Base>_wrap_type();
    # * `base: {class: CQ, upcast: ibv_cq_ex_to_cq}`: another C type that
    #   converts to the base's; the object stores the upcast pointer, so every
    #   method of the base works unchanged, and its own methods see ex_ptr.
    base: Optional["HandleModel"] = None
    upcast: Optional[str] = None
    subclassed: bool = False           # a base: BASETYPE, and <Name>_wrap_type()
    before_dealloc: Optional[str] = None
    # (state flag, verb): when the flag is set, close() releases the object
    # with that verb instead of destroying it (an imported DM is unimported)
    release: Optional[Release] = None
    hand_attributes: List[Slot] = field(default_factory=list)
    # A same-object subclass with a destroy of its own (ImportedPD:
    # ibv_unimport_pd) is a whole handle class again, with the base's layout.
    own_destroy: bool = False
    destroy_void: bool = False     # the destroy verb returns nothing
    # close() runs the destroy verb with the GIL released (spec/gil.yaml)
    destroy_releases_gil: bool = False
    # Slots dropped as soon as the verbs object is destroyed (spec:
    # `clear_on_close: true`), e.g. a buffer export that pins memory.
    clear_on_close: List[str] = field(default_factory=list)
    # (method, slot): a method setting the slot and returning the object
    # (spec: `keepalive: _keepalive`, the seed's MR._keepalive(owner) -> self)
    keepalive: List[Keepalive] = field(default_factory=list)
    # -- lifetime rules beyond the template's (generator/handle_rules.py;
    # the rdma_cm classes use them) --
    # hand-written, runs first whenever the object lets go of its verbs
    # object (destroyed, or forgotten after fork)
    detach: Optional[str] = None
    # hand-written, may refuse close() (-1 with an exception set)
    before_close: Optional[str] = None
    close_doc: Optional[str] = None     # close()'s docstring, instead of the default
    no_new: Optional[str] = None        # calling the class raises TypeError(no_new)
    repr: Optional[str] = None          # a hand-written tp_repr
    docs: Dict[str, str] = field(default_factory=dict)   # getter name -> docstring
    # provider entry points kept for the hand short ways (generator/entries.py)
    entries: List[Entry] = field(default_factory=list)
    # the CQs whose provider lock its destroy verb takes (generator/cq_locks.py)
    destroy_cq_lock: Optional[Any] = None

    @property
    def has_gc(self) -> bool:
        return bool(self.slots)

    @property
    def hand_attribute_names(self) -> List[str]:
        """A slot shadowed by a hand-written attribute of the same name gets
        no generated getter (the hand one reads it)."""
        return [a.name for a in self.hand_attributes]


@dataclass
class SymbolModel:
    """A libibverbs function the loader resolves at run time."""
    name: str
    result: str
    params: List[Tuple[str, str]]    # C type spelling, name
    since: Optional[str]             # rdma-core release for optional ones



@dataclass
class HeaderModel(PartModel):
    """One header's classes: verbs.h's (generator/builder.py) or
    rdma_cma.h's (generator/rdmacm.py), the same shapes."""
    spec: Spec
    enums: List[EnumModel]
    structs: List[StructModel]
    handles: List[HandleModel]
    functions: List[MethodModel]
    symbols: List[SymbolModel]
    coverage: List[Tuple[str, str, str]]     # function, status, detail


@dataclass
class Model:
    """The whole model, what generator/render.py renders (render.render):
    verbs.h's classes, the data-path types (spec/datapath/records.yaml),
    rdma_cma.h's classes and the build targets.  A part left None renders
    no files (a test renders one part); the stub of the extension needs
    the first three."""
    verbs: Optional[HeaderModel] = None
    records: Optional[RecordsModel] = None
    rdmacm: Optional[HeaderModel] = None
    targets: Optional[List[Target]] = None

    @property
    def parts(self) -> List[PartModel]:
        return [p for p in (self.verbs, self.records, self.rdmacm) if p is not None]
