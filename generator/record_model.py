"""The model of the data-path types (spec/datapath/records.yaml, made by
generator/records.py): what to emit, as typed dataclasses (no C text here),
beside generator/model.py for the verbs and rdma_cm."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, NamedTuple, Optional, Tuple

from .converters import RecordFieldConverter
from .model_base import PartModel

# --- the data-path types (spec/datapath/records.yaml, generator/records.py) ---


@dataclass
class UnionMember:
    """One member of a union inside a data-path struct (wr.rdma of struct
    ibv_send_wr's wr) and the rule that picks it for a request: the request
    has an AH (`ah`), its opcode is one of `opcodes` (the C names), or
    neither rule of the members before it held (`otherwise`)."""
    name: str
    path: str               # its C member path in the struct ("wr.rdma", "imm_data")
    user: str               # who uses it, for "<field> is not used by <user>"
    ah: bool = False
    opcodes: List[str] = field(default_factory=list)
    otherwise: bool = False


@dataclass
class UnionModel:
    """A union inside a data-path struct, its members in the order their
    rules are tried: a request uses the first whose rule holds (none: the
    request uses no member of it)."""
    name: str
    members: List[UnionMember]

    @property
    def uses_ah(self) -> bool:
        return any(m.ah for m in self.members)


@dataclass
class RecordModel:
    """A data-path C struct (struct ibv_send_wr) and the fields Python sees."""
    key: str
    ctype: str
    # its unions in order, each with its members and their rules; one enum
    # numbers the members of all of them, so that a type's union function
    # tells them apart in one mask
    unions: List[UnionModel]
    converters: Dict[str, RecordFieldConverter]
    # the field the `opcodes` rules read (its C type too), when one does
    opcode: Optional[RecordFieldConverter] = None
    # the struct's last union when only opcodes pick its members: the top
    # member it starts at (a post copies a prepared request up to there
    # unless its opcode uses a member of it); None when there is no such
    tail: Optional[Tuple[UnionModel, str]] = None

    def union_of(self, member: str) -> str:
        return next(u.name for u in self.unions if member in (m.name for m in u.members))

    def member_enum(self, member: str) -> str:
        return f"IBP_{self.key.upper()}_{self.union_of(member).upper()}_{member.upper()}"

    def union_mask(self, union: UnionModel) -> str:
        return f"IBP_{self.key.upper()}_{union.name.upper()}_MEMBERS"

    def member_function(self, union: UnionModel) -> str:
        return f"ibp_{self.key}_{union.name}_member"

    @property
    def uses_ah(self) -> bool:
        return any(u.uses_ah for u in self.unions)

    @property
    def tail_from(self) -> str:
        """The macro naming the offset the tail union starts at."""
        assert self.tail is not None
        return f"IBP_{self.key.upper()}_{self.tail[0].name.upper()}_FROM"

    @property
    def tail_opcodes(self) -> List[str]:
        """The opcodes that use a member of the tail union."""
        return [o for m in self.tail[0].members for o in m.opcodes] if self.tail else []


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
    # spec `fills: <record>`: the generated <Type>_fill(obj, struct *) writes
    # the fields the type shows into the C request a post hands the provider
    fills: Optional[str] = None
    # spec `lock: <ref>`: whose critical section its entries take (its own: None)
    lock: Optional[str] = None
    # spec `vectorcall: true`: a Py_tp_vectorcall constructor as well, on the
    # targets whose API has the slot (generated/target.h's IBP_TYPE_VECTORCALL)
    vectorcall: bool = False

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

    @property
    def prepared_fields(self) -> List[RecordAttribute]:
        """The field attributes <Type>_prepare writes: the request a post
        keeps (all but `prepared: false` ones)."""
        return [a for a in self.attributes
                if a.kind == "field" and a.conv is not None and a.calls_changed]

    @property
    def posted_fields(self) -> List[RecordAttribute]:
        """The field attributes <Type>_fill writes: those each post stores
        (`prepared: false`: wr_id)."""
        return [a for a in self.attributes
                if a.kind == "field" and a.conv is not None and not a.calls_changed]

    def prepared_in(self, union: "UnionModel") -> List[Tuple["UnionMember", List[Tuple[RecordAttribute, str]]]]:
        """Each member of *union* the prepared fields live in, with (attribute,
        C path) of each of them there."""
        out = []
        for member in union.members:
            fields = [(a, p) for a in self.prepared_fields
                      for m, p in (a.conv.union if a.conv else ()) if m == member.name]
            if fields:
                out.append((member, fields))
        return out


@dataclass
class RecordsModel(PartModel):
    """The data-path types: spec/datapath/records.yaml's spec files are
    the one file (its digest)."""
    helpers: Dict[str, str]     # spec `helpers:`: the hand-written C the converters call
    records: List[RecordModel]
    types: List[RecordTypeModel]
    # the enum classes, in the order of records.h's indexes (generator/enum_fields.py)
    enum_classes: List[str] = field(default_factory=list)
