"""The GIL rule of a hand-written method, and what its generated wrapper
holds while the hand code runs without the GIL (spec `holds:`).

A hand method's rule is its verbs' (spec/gil.yaml, spec/rdmacm/gil.yaml:
it releases the GIL when any verb it names is of a `release` kind; its own
`gil:` overrides), so a hand-written call of a verb that enters the kernel
cannot keep the GIL unnoticed, and one that releases it is listed in the
spec, where tests/device/test_gil.py finds it.  A method that releases
must say what it hands the provider or librdmacm besides self (`holds:`,
possibly empty); one that keeps the GIL may say it too, for a free-threaded
target, where other threads run meanwhile all the same.  Each entry is

  self.NAME   a slot or parent of its class, as it is at the call
              (CMID: self.qp, which librdmacm modifies, self.channel)
  NAME        one of its `impl:` arguments, a handle (or each handle of a
              sequence of handles)

The generated wrapper (generator/emit.py, impl_body) holds them busy and
referenced with ibp_hold once its arguments are converted, right before
the hand `_impl` function runs, and releases them when it returns: close()
of any of them meanwhile raises VerbsError EBUSY.  self is held for the
whole call by every wrapper (ibp_call_enter).
"""
from __future__ import annotations

from typing import Any, List, Optional

from . import gil
from .model import HandHold
from .spec import Handle, Method, SpecError


def releases(kinds: List[gil.GilKind], verbs: List[str], where: str,
             override: Optional[str]) -> bool:
    """True when a hand method of these verbs runs any with the GIL released."""
    if override is not None:
        if override not in gil.RULES:
            raise SpecError(f"{where}: 'gil' must be hold or release")
        return override == "release"
    try:
        return any(gil.releases(kinds, v, where) for v in verbs)
    except gil.GilError as exc:
        raise SpecError(str(exc)) from None


def holds(m: Method, label: str, owner: Optional[Handle], released: bool,
          params: List[Any]) -> List[HandHold]:
    """What every `holds:` entry holds, in order (each: a sequence of
    handles, all held)."""
    if not m.has("holds"):
        if released:
            raise SpecError(f"{m.where()}: {label}: it releases the GIL (its verbs' kind, "
                            "spec/gil.yaml): list what it hands the provider besides self "
                            "as 'holds:' ([] for nothing), which its wrapper then holds")
        return []
    entries = m.holds
    where = m.where("holds")
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise SpecError(f"{where}: {label}: 'holds' must be a list of names")
    if entries and m.impl is None:
        raise SpecError(f"{where}: {label}: a method with 'holds' needs 'impl:' "
                        "(its generated wrapper holds them)")
    out: List[HandHold] = []
    for entry in entries:
        if entry.startswith("self."):
            name = entry[len("self."):]
            own = ({s.name for s in owner.slots} | {p.name for p in owner.parents}
                   if owner is not None else set())
            if name not in own:
                raise SpecError(f"{where}: {label}: holds {entry}: {m.owner} has no slot or "
                                f"parent {name}")
            out.append(HandHold(name, None, f"self_{name}_held", False))
            continue
        param = next((p for p in params if getattr(p, "name", None) == entry), None)
        if param is None or not hasattr(param, "cls"):
            raise SpecError(f"{where}: {label}: holds {entry}: not self.<slot or parent> "
                            "nor a handle argument of its impl:")
        out.append(HandHold(None, entry, f"{entry}_held", bool(getattr(param, "sequence", False))))
    return out
