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

from . import ctext
from .converters import (Arg, AttributeConverter, FieldConverter, ParamConverter,  # noqa: F401
                         RecordFieldConverter, ReturnConverter)
from .ctext import FASTCALL_KEYWORDS  # noqa: F401 (the model's flag names)
from .ir import IR
from .spec import Spec


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
    """A precondition of a method (spec `checks:`): when the C condition does
    not hold, raise the exception with the message."""
    expr: str
    error: str
    message: str


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


class OptionalSymbol(NamedTuple):
    """A symbol a wrapper needs that older rdma-core releases lack."""
    name: str
    since: str        # the first release with it


@dataclass
class MethodModel:
    name: str                  # Python name
    owner: str                 # class, "" for module functions
    cname: str                 # C function name
    flags: str
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
    result_spelling: Optional[str] = None   # the verb's C result type, None for void
    owner_ctype: Optional[str] = None
    owner_is_subclass: bool = False         # its class has a spec `base:`
    symbols: List[OptionalSymbol] = field(default_factory=list)
    checks: List[Check] = field(default_factory=list)
    guard: Optional[str] = None             # hand-written C precondition (< 0: raised)
    prologue: Optional[str] = None          # C statement before the call
    epilogue: Optional[str] = None          # C statement once the result exists
    errors: str = "none"                    # null | errno | negative | none
    release_gil: bool = False
    returns: Optional[ReturnConverter] = None
    result_pytype: str = "Any"              # the Python type it returns
    # it reads self's verbs pointer (its converters, checks, guard, prologue
    # or epilogue say so); else emit.py casts it to void
    uses_self_ptr: bool = False
    # --- a hand method with a generated parser (kind IMPL, generator/impl.py) ---
    impl: Optional[str] = None              # the hand-written function it calls
    impl_params: List[str] = field(default_factory=list)   # that function's C parameters

    @property
    def hand(self) -> bool:
        """Its C is not (all) generated: hand-written, an _impl's parser, or Python."""
        return self.kind is not MethodKind.GENERATED

    # The C parameters of its function and the names passing them on, by
    # calling convention.
    @property
    def c_params(self) -> str:
        return ctext.C_PARAMS.get(self.flags, "PyObject *args, PyObject *kwargs")

    @property
    def c_args(self) -> str:
        return ctext.C_ARGS.get(self.flags, "args, kwargs")

    @property
    def impl_prototype(self) -> str:
        return f"PyObject *{self.impl}({', '.join(['PyObject *self'] + self.impl_params)})"

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
    attribute (spec `hand_attributes:`)."""
    name: str
    writable: bool
    doc: str


class StateField(NamedTuple):
    """A C member of the object beside the verbs pointer (spec `state:`)."""
    name: str
    ctype: str


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
    destroy: str
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

    @property
    def signature(self) -> str:
        if not self.params:
            return "void"
        return ", ".join(ctext.declare(t, n) for t, n in self.params)

    @property
    def arg_names(self) -> str:
        return ", ".join(n for _, n in self.params)

    @property
    def failure(self) -> Optional[str]:
        """What the trampoline returns when the symbol is missing."""
        t = self.result.strip()
        if t == "void":
            return None
        if t.endswith("*"):
            return "NULL"
        return f"({t})-1"


@dataclass
class Model:
    ir: IR
    spec: Spec
    enums: List[EnumModel]
    structs: List[StructModel]
    handles: List[HandleModel]
    functions: List[MethodModel]
    symbols: List[SymbolModel]
    coverage: List[Tuple[str, str, str]]     # function, status, detail


# --- the data-path types (spec/datapath/records.yaml, generator/records.py) ---


@dataclass
class RecordModel:
    """A data-path C struct (struct ibv_send_wr) and the fields Python sees."""
    key: str
    ctype: str
    # its unions in order, each with its members: ("wr", ["rdma", ...]); one
    # enum numbers the members of all of them, so that a type's union
    # function tells them apart in one mask
    unions: List[Tuple[str, List[str]]]
    converters: Dict[str, RecordFieldConverter]

    def union_of(self, member: str) -> str:
        return next(name for name, members in self.unions if member in members)

    def member_enum(self, member: str) -> str:
        return f"IBP_{self.key.upper()}_{self.union_of(member).upper()}_{member.upper()}"


@dataclass
class RecordAttribute:
    name: str
    doc: str
    kind: str                      # field | kinds | ref | hand | slot | flag
    conv: Optional[RecordFieldConverter] = None
    alt: Optional[RecordFieldConverter] = None     # kinds: the other record's
    readonly: bool = False
    calls_changed: bool = True
    check: Optional[str] = None
    ref_type: Optional[str] = None
    get: Optional[str] = None
    set: Optional[str] = None
    member: Optional[str] = None        # slot/flag: the object's member
    # ValueError text for an int of 2**bits or more, however large, before
    # the field's converter (SGE.length says why: split it)
    too_big: Optional[str] = None
    # its Python type in the stub (spec `stub:`), read and written; a field
    # is its converter's and a flag a bool without one
    stub: Optional[str] = None
    stub_set: Optional[str] = None      # what the setter accepts, when wider

    @property
    def writable(self) -> bool:
        if self.kind in ("hand", "slot"):
            return self.set is not None
        return not self.readonly


@dataclass
class RecordReach:
    """A hand-written function giving a type's object's C struct of a record."""
    record: str
    ctype: str             # the struct it gives a pointer to
    function: str
    after: bool = False    # reached after the value's conversion (an entry's SGE)
    by_index: bool = False # takes a method's index argument, not a name (WCBuffer)


@dataclass
class RecordMethod:
    name: str
    function: str
    flags: str
    doc: str
    stub: Optional[str] = None          # "(self, opcode: int, /) -> int"


@dataclass
class RecordFieldMethod:
    name: str
    conv: RecordFieldConverter
    doc: str


@dataclass
class RecordParser:
    """A generated constructor parser (spec `init:` or `new:` as a mapping):
    the arguments, all objects (NULL where not given), by position or
    keyword but the last keyword_only ones, by keyword only; the
    hand-written ibp_hand_<Type>_<init|new>_impl converts them."""
    args: List[str]
    required: int = 0
    keyword_only: int = 0


class EmbeddedStruct(NamedTuple):
    """The C struct a record object holds whole, and the object's member for it."""
    member: str
    ctype: str


class SequenceSlots(NamedTuple):
    """The hand-written functions of a record type's sequence slots."""
    length: str
    item: str
    set_item: Optional[str]


@dataclass
class RecordTypeModel:
    """A data-path Python class: where its object keeps the C values (a
    whole struct, one member per field, or a hand-written function that
    reaches the struct), its attributes and its type shell (GC slots,
    tables, PyType_Spec)."""
    name: str
    doc: str
    storage: str                          # embedded | members | reach | state
    embedded: Optional[EmbeddedStruct]
    reach: Dict[str, RecordReach]
    refs: List[str]
    state: List[Tuple[str, str]]          # (member, C type)
    attributes: List[RecordAttribute]
    methods: List[RecordMethod]
    field_methods: List[RecordFieldMethod]
    changed: Optional[str] = None
    guard: Optional[str] = None
    union: Optional[str] = None
    init: Optional[str] = None            # a hand function, "keywords", "impl" or None
    # init "impl": a generated parser hands the arguments to ibp_hand_<Type>_init_impl
    init_parser: Optional[RecordParser] = None
    new: Optional[str] = None             # a hand function, "impl" or None
    # new "impl": a generated parser hands the arguments to ibp_hand_<Type>_new_impl
    new_parser: Optional[RecordParser] = None
    repr: Optional[str] = None
    dealloc: Optional[str] = None
    getattro: Optional[str] = None
    sequence: Optional[SequenceSlots] = None
    gc: bool = True
    basetype: bool = True
    clear: bool = True
    # hand-written GC slots of a type whose references are no `refs`
    # (PostList's are in its entries): traverse and clear name functions
    traverse: Optional[str] = None
    clear_function: Optional[str] = None
    # stub signatures of hand-written special methods ("__init__": "(self, ...)")
    stubs: Dict[str, str] = field(default_factory=dict)

    @property
    def members(self) -> List[Tuple[str, str]]:
        """(member, C type) of the values a `members` object keeps."""
        return [(a.name, a.conv.ctype) for a in self.attributes
                if self.storage == "members" and a.kind == "field" and a.conv is not None]

    @property
    def traverse_slot(self) -> Optional[str]:
        """The tp_traverse function: the hand-written one, or the generated one over refs."""
        return self.traverse or (f"{self.name}_traverse" if self.refs else None)

    @property
    def clear_slot(self) -> Optional[str]:
        """The tp_clear function (None: the type has none)."""
        if self.clear_function:
            return self.clear_function
        return f"{self.name}_clear" if self.clear and self.refs else None

    @property
    def init_args(self) -> List[RecordAttribute]:
        return [a for a in self.attributes if a.writable]


@dataclass
class RecordsSpec:
    """What the generated files' headers name: this spec file's digest."""
    sha256: str
    files: List[str]


@dataclass
class RecordsModel:
    ir: IR
    spec: RecordsSpec
    helpers: Dict[str, str]     # spec `helpers:`: the hand-written C the converters call
    records: List[RecordModel]
    types: List[RecordTypeModel]


# --- rdma/rdma_cma.h (spec/rdmacm/, generator/rdmacm.py) ---


@dataclass
class CMModel:
    ir: IR
    spec: Spec
    enums: List[EnumModel]
    handles: List[HandleModel]
    functions: List[MethodModel]
    symbols: List[SymbolModel]
    coverage: List[Tuple[str, str, str]]
