"""Provider locks in the model (spec key `cq_locks:` of a handle class).

A provider's start_poll() takes its CQ's lock and holds it until
end_poll() (cqex.c).  Some verbs of other objects take that same lock
(mlx5: destroying a QP or WQ, a QP's move to RESET, a WQ's RESET -> RDY
clean the CQ of their completions), so calling one while a CQEx of
theirs is mid-poll deadlocks: the whole process, when it is a garbage
collection with the GIL held.  The spec says which verbs take which CQs'
locks:

  cq_locks:
    <verb>: {cqs: [<parent>, ...], when: <predicate>}

<verb> is the class's destroy verb or the verb of one of its generated
methods; each <parent> a parent of class CQ.  `when` (methods only) names
a hand-written int f(...) taking the verb's own arguments: the lock is
taken only when it returns non-zero (a modify to RESET).  The generated
method refuses the call with VerbsError EBUSY while one of those CQs is
mid-poll; close() likewise, and a garbage collection then takes the
failed-destroy path (reported, the verbs object leaked) instead of
hanging.
"""
from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional

from .spec import Handle, SpecError

KEYS = {"cqs", "when"}


class CqLock(NamedTuple):
    """The CQs whose locks a verb takes, and when."""
    verb: str
    cqs: List[str]             # parent attributes (members of the object struct)
    when: Optional[str]        # hand-written predicate over the verb's arguments


def read(h: Handle, parents: List[Any], destroy: Optional[str],
         method_verbs: List[str]) -> Dict[str, CqLock]:
    """The `cq_locks:` of handle class h, by verb, validated."""
    if h.cq_locks is None:
        return {}
    name = h.name
    cq_parents = {p.attr for p in parents if p.cls == "CQ"}
    locks: Dict[str, CqLock] = {}
    for entry in h.cq_locks:
        verb, where = entry.verb, entry.at
        if verb != destroy and verb not in method_verbs:
            raise SpecError(f"{where}: {name}: cq_locks names {verb}, which is neither its "
                            "destroy verb nor the verb of one of its methods")
        if entry.cqs is None:
            raise SpecError(f"{where}: {name}: cq_locks.{verb} must be a mapping with 'cqs' "
                            f"(and optionally 'when'), got {entry.written}")
        cqs = entry.cqs
        bad = [c for c in cqs if c not in cq_parents]
        if not cqs or bad:
            raise SpecError(f"{where}: {name}: cq_locks.{verb}.cqs must name parents of class "
                            f"CQ ({', '.join(sorted(cq_parents)) or 'it has none'}), got "
                            f"{', '.join(bad) or 'none'}")
        when = entry.when
        if when is not None:
            when = str(when)
            if verb == destroy:
                raise SpecError(f"{where}: {name}: cq_locks.{verb}: a destroy takes the locks "
                                "always ('when' is for methods)")
            if not (when.isascii() and when.isidentifier()):
                raise SpecError(f"{where}: {name}: cq_locks.{verb}.when must name a C "
                                f"function, got {when!r}")
        locks[verb] = CqLock(verb, cqs, when)
    return locks
