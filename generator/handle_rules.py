"""Lifetime rules a handle class may add to the template's (spec keys of a
handle class, read into its HandleModel; templates/handle.c.h.j2 applies
them).  The rdma_cm classes use them (spec/rdmacm/cm.yaml): a CMID owns
the QP made through it, and neither class can be called.

  detach: f          hand-written void f(struct <Class>Object *), run
                     whenever the object has let go of its C object
                     (destroyed, or forgotten because it is a fork() parent's),
                     and when dealloc leaks one it failed to destroy; never
                     before a destroy that may fail, which changes nothing
  before_close: f    hand-written int f(struct <Class>Object *): -1 with an
                     exception refuses close() (before the EBUSY checks)
  close_doc: text    close()'s docstring instead of the default one
  no_new: message    calling the class raises TypeError(message)
  repr: f            a hand-written tp_repr instead of "<ibverbs.X at %p>"
  subclassed: true   a Python subclass is made by the C code
                     (<Class>_wrap_type, as a `base:` of another class gets)
  docs: {name: text} docstrings of getters (parents, attributes)
"""
from __future__ import annotations

from typing import Any

from .spec import Handle, SpecError

#: Keys copied as they are (strings) onto the HandleModel field of that name.
TEXT_RULES = ("detach", "before_close", "close_doc", "no_new", "repr")


def apply(h: Any, spec: Handle) -> None:
    """Set the rules of the spec's handle class on HandleModel h."""
    for key in TEXT_RULES:
        if spec.has(key):
            setattr(h, key, getattr(spec, key))
    if spec.subclassed:
        h.subclassed = True
    getters = {p[0] for p in h.parents} | {a[0] for a in h.attributes}
    for name, text, at in spec.docs:
        if name not in getters:
            raise SpecError(f"{at}: {h.name}: docs for {name}, which "
                            "is neither a parent nor an attribute")
        h.docs[name] = text
