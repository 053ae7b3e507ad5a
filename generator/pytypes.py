"""Python types for the stubs and docstrings that come from the spec text
itself (the types of values come from the converters, see
generator/converters/)."""
from __future__ import annotations

from typing import Any, Dict

from .converters.registry import BUFFER_LIKE, GID_LIKE
from .spec_types import Method, ParamSpec

__all__ = ["BUFFER_LIKE", "GID_LIKE", "arg_specs"]


def arg_specs(m: Method) -> Dict[str, Any]:
    """Python argument name -> its parameter entry (a str for plain ones),
    for a spec method; "**" for a keyword struct."""
    out: Dict[str, Any] = {}

    def visit(pspec: Any) -> None:
        if isinstance(pspec, str):
            if pspec not in ("self", "out", "scratch", "mask"):
                out[pspec] = pspec
            return
        if not isinstance(pspec, ParamSpec):
            return
        if pspec.has("struct"):
            for sub in (pspec.struct or {}).values():
                visit(sub)
        elif pspec.has("kwargs"):
            out["**"] = pspec
        elif pspec.has("arg"):
            out[str(pspec.arg)] = pspec

    for pspec in (m.params or {}).values():
        visit(pspec)
    return out
