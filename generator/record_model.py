"""The model of the data-path types (spec/datapath/records.yaml, made by
generator/records.py) and of rdma_cm (spec/rdmacm/, generator/rdmacm.py):
what to emit, as typed dataclasses (no C text here), beside generator/model.py
for the verbs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, NamedTuple, Optional, Tuple

from .converters import RecordFieldConverter
from .ir import IR
from .model import EnumModel, HandleModel, MethodModel, SymbolModel
from .spec import Spec

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
    # records.h's enum class indexes and names (generator/enum_fields.py)
    enum_declarations: List[str] = field(default_factory=list)


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
