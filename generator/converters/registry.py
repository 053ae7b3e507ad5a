"""The converter registries and the base classes of the converters, after
CPython's Argument Clinic: one class per kind of spec value, each knowing its
C declarations, its parse code, what it hands the verb, its cleanup and its
Python type (for the stubs and docstrings).

Five registries, each keyed by the spec's kind:

* PARAMS: a verb parameter (``convert: be32``, ``handle:PD``, ``out``, ...);
* FIELDS: a member of a struct class (getter and setter);
* ATTRIBUTES: a read-only attribute of a handle class;
* RETURNS: what a wrapper returns (spec ``returns:``);
* RECORD_FIELDS: a field of a data-path C struct (spec/datapath/records.yaml
  ``convert:``), its converter pair in generated/records.h.

The model builders (generator/builder.py, generator/methods.py,
generator/records.py) make them
(parameter converters through ``from_spec``) and the model holds them;
generator/emit.py asks them for their C.  A new ``convert:`` kind is one
ArgParam subclass registered with ``@PARAMS.register("kind")`` in a module
that converters/__init__.py imports: nothing else dispatches on kinds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import (TYPE_CHECKING, AbstractSet, Any, Callable, Dict, FrozenSet, List, NoReturn,
                    Optional, Protocol, Sequence, Tuple, TypeVar)

if TYPE_CHECKING:
    from ..ir import IR, Record, Type

GID_LIKE = "_GidLike"
BUFFER_LIKE = "_BufferLike"

#: A spec argument without `default:` (required).
REQUIRED = "__required__"

T = TypeVar("T")


class Registry:
    """Converter classes by kind."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.by_kind: Dict[str, Any] = {}

    def register(self, kind: str) -> Callable[[T], T]:
        def add(cls: T) -> T:
            assert kind not in self.by_kind, f"two {self.what} converters for {kind!r}"
            self.by_kind[kind] = cls
            cls.kind = kind      # type: ignore[attr-defined]
            return cls
        return add

    def get(self, kind: str) -> Optional[Any]:
        return self.by_kind.get(kind)

    def __getitem__(self, kind: str) -> Any:
        return self.by_kind[kind]

    def __contains__(self, kind: str) -> bool:
        return kind in self.by_kind


class Context(Protocol):
    """What a converter asks the method it is made for (generator/methods.py's
    MethodBuilder)."""
    ir: "IR"
    label: str

    def fail(self, msg: str, key: Optional[str] = None) -> NoReturn: ...
    def add_arg(self, name: str, default: Any, pytype: str,
                meaning: Optional[str] = None) -> "Arg": ...
    def claim_mask(self) -> bool: ...
    def check_keys(self, node: Any, keys: AbstractSet[str], what: str, where: str) -> None: ...
    def handle_ctype(self, cls: str, where: Optional[str] = None) -> str: ...
    def struct_model(self, cls: str) -> Any: ...   # a model.StructModel (model imports us)
    def struct_class_of(self, ctype: str) -> Optional[str]: ...
    def member_type(self, record: "Record", path: str, where: str) -> "Type": ...
    def context_owner(self, hctype: str) -> Optional[Any]: ...   # a rule_data value
    #: the wrapper's values a rule names, spelled at emit time (converters/rule_c.py)
    refs: Any
    def check_refs(self, value: Any) -> None: ...   # a rule's value names only declared ones
    def arg_enum(self, arg: str) -> Optional[str]: ...   # the enum class an argument takes
    #: the build targets (generator/targets.py's Target) the generated files
    #: serve, every one from the same C: a converter whose C would depend on
    #: them decides here, at model time, for the whole set ("" of them: the
    #: model was built without spec/targets/, assume nothing)
    targets: Tuple[Any, ...]


PARAMS = Registry("parameter")
FIELDS = Registry("struct field")
ATTRIBUTES = Registry("handle attribute")
RETURNS = Registry("return")
RECORD_FIELDS = Registry("record field")


@dataclass
class Arg:
    """A Python argument of a generated wrapper."""
    name: str
    required: bool
    default_doc: Optional[str]     # the default as Python shows it
    pytype: str = "Any"            # its type in the stubs
    meaning: Optional[str] = None  # what it takes, for the docstring ("an address (int)")


class ParamConverter:
    """One C parameter of a verb: the base says "nothing to do"."""
    kind = ""
    #: The keys a spec entry of this kind may carry, as Argument Clinic's
    #: converters declare their keyword-only parameters: generator/methods.py
    #: refuses any other key, naming its file and line.  A new option is one
    #: name added here (and read in __init__).
    keys: FrozenSet[str] = frozenset()

    @classmethod
    def describe(cls, convert: str) -> Optional[str]:
        """What an argument with this `convert:` takes, for its docstring."""
        return None

    #: It reads self's verbs pointer (emit.py casts it to void when nothing
    #: of the wrapper does).
    uses_self_ptr = False
    #: Its parse() may fail (and jump to the wrapper's cleanup, `exit:`).
    parse_can_fail = False

    @classmethod
    def c_ref(cls, cname: str, ref: Any) -> Optional[str]:
        """The C spelling of a value this kind declares for parameter
        *cname* that a rule's value refers to (a generator.rule_data.Ref),
        None when it declares no such value."""
        return None

    def declarations(self) -> List[str]:
        return []

    def declarations_but_argument(self) -> List[str]:
        """declarations() without the Python argument's own variable, which
        a short way's fallback takes as a parameter (generator/impl.py)."""
        return self.declarations()

    def parse(self) -> List[str]:
        """Statements converting the Python argument(s), in parameter order."""
        return []

    def post_parse(self) -> List[str]:
        """Statements that need every argument converted (allocations sized
        by another argument)."""
        return []

    def call_arg(self) -> str:
        raise NotImplementedError

    # -- calls in flight: what the call holds busy (ibverbs/src/handles.c) --
    def holds(self) -> List[str]:
        """The locals holding (busy and referenced) the handles this
        parameter hands the verb; declared NULL, released at exit."""
        return []

    def hold_on_entry(self) -> List[str]:
        """Statements holding the handle arguments as given, before any of
        them is converted (no Python code has run yet)."""
        return []

    def hold_handles(self) -> List[str]:
        """Statements holding what the verb is handed through other objects
        (a struct's handles, as they are now), before any check reads
        them: once held, no other thread can close them."""
        return []

    def hold_for_call(self, released: bool) -> List[str]:
        """Statements just before the call: for a call with the GIL
        released, take a private copy of what another thread could change
        meanwhile."""
        return []

    def after_call(self, released: bool) -> List[str]:
        """Statements right after the call (the GIL held again)."""
        return []

    def released_declarations(self) -> List[str]:
        """Declarations of a call with the GIL released (its copies)."""
        return []

    def released_call_arg(self) -> str:
        """call_arg() of a call with the GIL released."""
        return self.call_arg()

    def cleanup(self) -> List[str]:
        return []

    def output(self) -> Optional[List[str]]:
        """Statements setting `item` to what the verb wrote (out parameters)."""
        return None

    #: the Python type of output(), for the stubs
    output_pytype: Optional[str] = None


class FieldConverter:
    """A member of a struct class: its getter (sets `result` from `c`) and,
    when writable, its setter (consumes `value`)."""
    kind = ""
    pytype = "Any"
    has_setter = True
    #: The keys a spec/structs.yaml field of this kind may carry
    #: (generator/builder.py refuses any other).
    keys: FrozenSet[str] = frozenset({"path", "convert", "default", "since"})

    def __init__(self, pyname: str, path: str, writable: bool) -> None:
        self.pyname = pyname
        self.path = path                # the member inside the C struct, "grh.dgid"
        self.writable = writable

    @property
    def member(self) -> str:
        """The C lvalue of the member in the getter and setter (`c` is the struct)."""
        return f"c->{self.path}"

    @property
    def settable(self) -> bool:
        return self.writable and self.has_setter

    def getter(self) -> List[str]:
        raise NotImplementedError

    def setter(self) -> List[str]:
        return []


class AttributeConverter:
    """A read-only attribute of a handle class: statements setting `result`
    from `self_ptr`."""
    kind = ""
    pytype = "Any"
    #: The keys of its spec mapping, once generator/rules.py expanded it
    #: (generator/builder.py refuses any other).
    keys: FrozenSet[str] = frozenset()

    def getter(self) -> List[str]:
        raise NotImplementedError


class ReturnConverter:
    """What a wrapper returns: statements setting `return_value` from `rc`
    and the out parameters' items."""
    kind = ""

    def lines(self, outputs: List[List[str]]) -> List[str]:
        raise NotImplementedError

    def pytype(self, output_types: List[str]) -> str:
        raise NotImplementedError


class RecordFieldConverter:
    """One integer field of one data-path C struct (spec/datapath/records.yaml),
    both ways: generated/records.h's <record>_<field>_to_py(v) and, when some
    type writes it, <record>_<field>_from_py(value, &out).  Every type showing
    the field calls them (SendWR and PostList send entries share struct
    ibv_send_wr's); the kind (spec `convert:`) says what the C value is."""
    kind = ""
    pytype = "int"
    #: The keys a spec/datapath/records.yaml field of this kind may carry
    #: (generator/records.py refuses any other).
    keys: FrozenSet[str] = frozenset({"convert", "check", "union", "hand"})

    def __init__(self, record: str, name: str, t: "Type", small_int: bool = False,
                 check: Optional[Tuple[List[Tuple[int, int]], str]] = None,
                 union: Sequence[Tuple[str, str]] = (), written: bool = False,
                 layout: Sequence[Tuple[str, int]] = ()) -> None:
        self.record = record       # the record's key ("send_wr")
        self.name = name           # the C member's name, also the attribute's
        self.ctype = t.spelling    # the value's C type, as the IR spells it
        self.bits = (t.size or 8) * 8
        self.signed = bool(t.signed) and t.kind == "int"
        self.enum = t.kind == "enum"
        # cached Python ints below 256 (completions: polled by the thousand)
        self.small_int = small_int
        # check: (valid ranges, message): only values in one of the (lo, hi)
        # ranges pass (the members of the field's enum)
        self.check = check
        # (union member, C path) where it lives in each member that has it;
        # a field outside any union lives at its name
        self.union = list(union)
        self.path: Optional[str] = None if self.union else name
        self.written = written     # some type converts a Python value into it
        # (C path, size in bytes) of each place it lives, from the IR:
        # records.h asserts the member's type and width against the
        # compiler's view of the same headers, for whatever target it
        # compiles for.  No offset: the IR's are those of the machine that
        # generated the file (x86_64 and aarch64 differ from struct
        # ibv_qp_ex's wr_id on), the code reaches each member by name, and
        # tests/host/test_layout.py checks them against gcc there.
        self.layout = list(layout)
        # the Python enum class it shows as (generator/enum_fields.py), set
        # by generator/records.py; None: a plain int
        self.enum_class: Optional[str] = None

    @classmethod
    def refuses(cls, t: "Type") -> Optional[str]:
        """Why a member of type *t* cannot be of this kind (None: it can)."""
        return None

    @property
    def prefix(self) -> str:
        return f"ibp_{self.record}_{self.name}"

    @property
    def unsigned_max(self) -> Optional[str]:
        """Its C maximum ("UINT32_MAX"); None for a signed field (read only)."""
        return None if self.signed else f"UINT{self.bits}_MAX"

    def to_host(self, expr: str) -> str:
        """The C value *expr* as an integer in host order."""
        return expr

    def to_c(self, expr: str) -> str:
        """The host-order uint64_t *expr*, checked in range, as the member's value."""
        return f"({self.ctype}){expr}"

    def to_py(self, small_int: str) -> List[str]:
        """The body of <prefix>_to_py(v); *small_int* names the cached-int helper."""
        raise NotImplementedError

    def from_py(self, unsigned: str) -> List[str]:
        """The body of <prefix>_from_py(value, out); *unsigned* names the
        hand-written range-checked conversion."""
        raise NotImplementedError


def describe(convert: Optional[str]) -> Optional[str]:
    """What an argument with this spec `convert:` takes (None: say nothing)."""
    cls = PARAMS.get(convert.split(":", 1)[0]) if convert else None
    return cls.describe(convert) if cls is not None else None


def optional_type(t: str, pspec: Any) -> str:
    """*t*, or None too for a spec argument whose default is YAML null."""
    optional = pspec.has("default") and pspec.default is None
    return f"{t} | None" if optional and t != "Any" else t
