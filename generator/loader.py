"""The dlopen'ed libraries: what templates/loader.c.h.j2 needs to know to
emit one library's slots, trampolines and symbol table.

Both libraries go through the same template and the same hand-written
loop (ibp_load_symbols in ibverbs/src/loader.c); what differs is said here:
libibverbs is loaded at import, so only a symbol newer than the oldest
supported rdma-core can have an empty slot; librdmacm is loaded on first
use, so every slot can be empty until then.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple


@dataclass(frozen=True)
class Library:
    #: Prefix of each function-pointer slot (slot_ibv_post_send).
    slot_prefix: str
    #: Name of the generated table of struct ibp_symbol.
    table: str
    #: Whether every trampoline checks its slot, or only those of newer symbols.
    check_every_slot: bool
    #: errno of a call whose slot is empty, and the comment saying why.
    missing_errno: str
    missing_why: str
    since_joiner: str
    #: A macro telling whether a symbol was found ("" for none).
    availability_macro: str
    #: The file's opening comment, one line each.
    intro: Tuple[str, ...]


VERBS = Library(
    slot_prefix="slot_",
    table="verbs_symbols",
    check_every_slot=False,
    missing_errno="EOPNOTSUPP",
    missing_why="",
    since_joiner="",
    availability_macro="IBP_SYMBOL_AVAILABLE",
    intro=(
        "libibverbs is dlopen'ed, never linked.  Each exported verb gets a slot,",
        "filled by dlsym at import, and a hidden trampoline that carries the",
        "exported name, so the static inline functions and macros of verbs.h",
        "compile unchanged and land here.  The parentheses around a name keep",
        "verbs.h's function-like macros (ibv_reg_mr, ibv_query_port) from",
        "expanding the definition.",
    ),
)

RDMACM = Library(
    slot_prefix="cm_slot_",
    table="rdmacm_symbols",
    check_every_slot=True,
    missing_errno="ENOSYS",
    missing_why="librdmacm not loaded",
    since_joiner=", or ",
    availability_macro="",
    intro=(
        "librdmacm is dlopen'ed on first use (ibverbs/src/rdmacm.c), never linked",
        "and never loaded at import: without it, only the rdma_cm classes fail.",
        "Each function the spec binds gets a slot, filled by dlsym, and a hidden",
        "trampoline carrying the exported name (as for libibverbs, see",
        "loader.c.h).  A trampoline whose slot is empty (library not loaded, or a",
        "release without the symbol) fails with ENOSYS instead of crashing.",
    ),
)
