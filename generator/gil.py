"""The GIL rule of each verb, by kind (spec/gil.yaml).

Every verb a generated method calls, and every handle class's destroy verb,
is named by exactly one kind, or else matches the patterns of exactly one; the kind's rule says whether the
call runs with the GIL released.  A method's own `gil:` overrides it.  A
verb that no kind (or two kinds) names is a spec error, so a newly bound
verb cannot go without a rule.
"""
from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, List, Optional

RULES = ("hold", "release")
KIND_KEYS = {"rule", "why", "verbs"}


class GilError(Exception):
    """A mistake in spec/gil.yaml, or a verb without a rule."""


@dataclass
class GilKind:
    name: str
    rule: str            # hold | release
    why: str
    patterns: List[str]
    where: str


def load(node: Any) -> List[GilKind]:
    """The kinds of a spec file's `gil:` mapping, validated."""
    kinds = []
    for name, knode in node.items():
        where = node.where(name)
        if not hasattr(knode, "where"):
            raise GilError(f"{where}: gil kind {name}: expected a mapping")
        for key in knode:
            if key not in KIND_KEYS:
                raise GilError(f"{knode.where(key)}: gil kind {name}: unknown key "
                               f"{key!r} (expected one of: {', '.join(sorted(KIND_KEYS))})")
        if not KIND_KEYS <= set(knode):
            raise GilError(f"{where}: gil kind {name}: needs exactly "
                           f"{', '.join(sorted(KIND_KEYS))}")
        if knode["rule"] not in RULES:
            raise GilError(f"{knode.where('rule')}: gil kind {name}: rule must be hold or release")
        verbs = knode["verbs"]
        if not isinstance(verbs, list) or not verbs or not all(isinstance(v, str) for v in verbs):
            raise GilError(f"{knode.where('verbs')}: gil kind {name}: verbs must be a "
                           "non-empty list of names or patterns")
        kinds.append(GilKind(str(name), knode["rule"], str(knode["why"]).strip(),
                             list(verbs), where))
    return kinds


def kind_of(kinds: List[GilKind], verb: str, where: str) -> GilKind:
    """The one kind that names the verb, else the one whose patterns match it."""
    found = [k for k in kinds if verb in k.patterns] or \
        [k for k in kinds if any(fnmatchcase(verb, p) for p in k.patterns)]
    if not found:
        raise GilError(f"{where}: {verb} has no GIL rule: add it to a kind of spec/gil.yaml")
    if len(found) > 1:
        raise GilError(f"{where}: {verb} matches the GIL kinds "
                       f"{' and '.join(k.name for k in found)} of spec/gil.yaml: one only")
    return found[0]


def releases(kinds: List[GilKind], verb: str, where: str,
             override: Optional[str] = None) -> bool:
    """True when a call of the verb runs with the GIL released."""
    if override is not None:
        return override == "release"
    return kind_of(kinds, verb, where).rule == "release"
