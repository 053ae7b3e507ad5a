"""The build targets (spec/targets/targets.yaml): load and validate them into
Target objects, for generated/target.h (the macros the C reads) and
generated/targets.py (what setup.py needs to build and tag a wheel).

A target is an ABI the one set of sources is compiled for: the stable ABI
at a floor (Limited API), or a free-threaded interpreter's own ABI.  What
a target changes in the C is said here and in the macros target.h defines
from it; the sources test those macros, never an interpreter's.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from .spec import SpecError, load_file

TARGET_KEYS = {"doc", "python_tag", "abi_tag", "requires_python", "limited_api",
               "free_threaded", "abi3t", "slots"}
OPTIONAL_KEYS = {"limited_api", "abi3t", "slots"}

#: The type slots a target may take from a stable ABI newer than its
#: Limited API (`slots:`), and the CPython that added each to the stable
#: ABI.  templates/target.h.j2 defines what the headers at the older
#: Limited API hide (their values are the stable ABI's, fixed once added).
#: cp314-abi3 is compiled against 3.9's Limited API, where Py_INCREF,
#: Py_DECREF and Py_TYPE are inline (from 3.12's on they are function
#: calls), and loads only where its wheel tag says, 3.14+.
SLOTS: Dict[str, str] = {"tp_vectorcall": "3.14"}


def _minor(version: str) -> Optional[int]:
    """N of a "3.N" version, or None for anything else."""
    major, _, minor = version.partition(".")
    return int(minor) if major == "3" and minor.isdigit() else None


@dataclass(frozen=True)
class Target:
    name: str
    doc: str
    python_tag: str            # the wheel's python tag (cp39)
    abi_tag: str               # the wheel's ABI tag (abi3, cp314t)
    requires_python: str       # the oldest CPython it runs on ("3.9")
    limited_api: Optional[str]  # the Limited API level, or None for the full API
    free_threaded: bool        # for a free-threaded interpreter (GIL off)
    abi3t: bool = False        # PEP 803's stable ABI: for GIL builds too
    slots: Tuple[str, ...] = ()  # type slots of the stable ABI at requires_python (SLOTS)

    @property
    def builds(self) -> Tuple[str, ...]:
        """The kinds of CPython build it loads on: "gil", "free-threaded"
        (abi3t: both)."""
        if self.abi3t:
            return ("gil", "free-threaded")
        return ("free-threaded",) if self.free_threaded else ("gil",)

    @property
    def macro(self) -> str:
        """IBP_TARGET_<NAME>: what setup.py defines to build this target."""
        return "IBP_TARGET_" + "".join(c if c.isalnum() else "_" for c in self.name).upper()

    @property
    def limited_api_hex(self) -> Optional[str]:
        if self.limited_api is None:
            return None
        return f"0x03{_minor(self.limited_api) or 0:02X}0000"

    @property
    def wheel_tag(self) -> str:
        return f"{self.python_tag}-{self.abi_tag}"

    @property
    def requires_hex(self) -> str:
        """PY_VERSION_HEX of the oldest CPython it runs on."""
        return f"0x03{_minor(self.requires_python) or 0:02X}0000"

    @property
    def gil_build(self) -> bool:
        """Whether it loads on a GIL build of CPython."""
        return "gil" in self.builds

    @property
    def type_vectorcall(self) -> bool:
        """Whether the generated constructors of the types users build per
        message (spec `vectorcall: true`) are emitted: CPython has
        Py_tp_vectorcall from 3.14, in its Limited API (and abi3t) too; a
        target whose Limited API is older takes the slot from 3.14's stable
        ABI (`slots:`).  On a free-threaded target they run outside the new
        object's critical section, which no other thread can reach before
        they return it."""
        api = self.limited_api if self.limited_api is not None else self.requires_python
        return (_minor(api) or 0) >= 14 or "tp_vectorcall" in self.slots

    @property
    def object_head_size(self) -> Optional[int]:
        """abi3t: the bytes the objects' padded head reserves for PyObject,
        which that ABI leaves opaque: 3.15's free-threaded PyObject is 32
        bytes on a 64-bit machine (ob_tid, ob_flags, ob_mutex, ob_gc_bits,
        ob_ref_local, ob_ref_shared, ob_type), the GIL build's 16.  The
        module refuses to import where object.__basicsize__ is more."""
        return 32 if self.abi3t else None


def load(path: str, display: str = "spec/targets/targets.yaml") -> List[Target]:
    data = load_file(path, display)
    if set(data) != {"targets"}:
        raise SpecError(f"{data.where()}: the top level has one key, 'targets'")
    targets: List[Target] = []
    for name, node in data["targets"].items():
        where = data["targets"].where(name)
        unknown = set(node) - TARGET_KEYS
        if unknown:
            raise SpecError(f"{node.where(sorted(unknown)[0])}: target {name}: "
                            f"unknown key {sorted(unknown)[0]!r}")
        missing = TARGET_KEYS - OPTIONAL_KEYS - set(node)
        if missing:
            raise SpecError(f"{where}: target {name}: needs {', '.join(sorted(missing))}")
        for key in ("requires_python", "limited_api"):
            value = node.get(key)
            if value is not None and _minor(str(value)) is None:
                raise SpecError(f"{node.where(key)}: target {name}: {key} must be '3.N', "
                                f"not {value!r}")
        free = node["free_threaded"]
        if not isinstance(free, bool):
            raise SpecError(f"{node.where('free_threaded')}: target {name}: free_threaded "
                            f"is true or false")
        abi3t = node.get("abi3t", False)
        if not isinstance(abi3t, bool):
            raise SpecError(f"{node.where('abi3t')}: target {name}: abi3t is true or false")
        limited_minor = _minor(str(node.get("limited_api", "")))
        if abi3t and (not free or limited_minor is None or limited_minor < 15):
            raise SpecError(f"{node.where('abi3t')}: target {name}: abi3t (PEP 803) is "
                            f"free-threaded, with a limited_api of 3.15 or later")
        if free and not abi3t and node.get("limited_api") is not None:
            raise SpecError(f"{node.where('limited_api')}: target {name}: CPython 3.14's "
                            f"free-threaded build has no Limited API")
        slots = _slots(name, node, limited_minor, _minor(str(node["requires_python"])), free)
        targets.append(Target(name, " ".join(str(node["doc"]).split()), str(node["python_tag"]),
                              str(node["abi_tag"]), str(node["requires_python"]),
                              None if node.get("limited_api") is None else str(node["limited_api"]),
                              free, abi3t, slots))
    if not targets:
        raise SpecError(f"{data.where()}: no targets")
    # setup.py and target.h pick, of one kind of build, the newest target an
    # interpreter meets: two of one kind and one requires_python are ambiguous
    seen: Dict[Tuple[str, str], Target] = {}
    for t in targets:
        for build in t.builds:
            other = seen.setdefault((build, t.requires_python), t)
            if other is not t:
                raise SpecError(f"{data['targets'].where(t.name)}: target {t.name}: "
                                f"{other.name} is for the same build and requires_python")
    return targets


def _slots(name: str, node: Any, limited_minor: Optional[int], requires_minor: Optional[int],
           free: bool) -> Tuple[str, ...]:
    """A target's `slots:`: type slots of the stable ABI at its
    requires_python (SLOTS) that its Limited API's headers hide, for a GIL
    target of the stable ABI (the free-threaded ones have no such mix)."""
    slots = node.get("slots")
    if slots is None:
        return ()
    where = node.where("slots")
    if not isinstance(slots, list) or not all(isinstance(s, str) for s in slots) or not slots:
        raise SpecError(f"{where}: target {name}: slots is a list of slot names "
                        f"({', '.join(sorted(SLOTS))})")
    if free or limited_minor is None:
        raise SpecError(f"{where}: target {name}: slots are for a GIL target of the stable "
                        f"ABI (limited_api), compiled below its requires_python")
    for slot in slots:
        if slot not in SLOTS:
            raise SpecError(f"{where}: target {name}: unknown slot {slot!r} "
                            f"(known: {', '.join(sorted(SLOTS))})")
        added = _minor(SLOTS[slot]) or 0
        if added > (requires_minor or 0):
            raise SpecError(f"{where}: target {name}: slot {slot} is in the stable ABI from "
                            f"{SLOTS[slot]}, after its requires_python")
        if added <= limited_minor:
            raise SpecError(f"{where}: target {name}: slot {slot} is in the Limited API at "
                            f"3.{limited_minor} already")
    if len(set(slots)) != len(slots):
        raise SpecError(f"{where}: target {name}: a slot named twice")
    return tuple(slots)


def by_newest(targets: List[Target]) -> List[Target]:
    """*targets* from the newest requires_python to the oldest: the order
    in which setup.py and target.h try them."""
    return sorted(targets, key=lambda t: _minor(t.requires_python) or 0, reverse=True)


def setup_view(targets: List[Target]) -> str:
    """The TARGETS list of generated/targets.py (setup.py's view of the
    targets, in spec order), as Python source."""
    return json.dumps([{"name": t.name, "macro": t.macro, "python_tag": t.python_tag,
                        "abi_tag": t.abi_tag, "requires_python": t.requires_python,
                        "limited_api": t.limited_api_hex, "free_threaded": t.free_threaded,
                        "builds": list(t.builds)}
                       for t in targets], indent=4).replace("true", "True").replace(
                           "false", "False").replace("null", "None")


def default_path(spec_dir: str) -> str:
    return os.path.join(spec_dir, "targets", "targets.yaml")
