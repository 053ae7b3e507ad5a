"""Python types for the stubs and docstrings that come from the spec text
itself (the types of values come from the converters, see
generator/converters/)."""
from __future__ import annotations

from typing import Any, Dict

from .converters.registry import BUFFER_LIKE, GID_LIKE

__all__ = ["BUFFER_LIKE", "GID_LIKE", "arg_specs"]


def arg_specs(node: Any) -> Dict[str, Any]:
    """Python argument name -> its spec node (a str for plain ones), for a
    spec method node; "**" for a keyword struct."""
    out: Dict[str, Any] = {}

    def visit(pspec: Any) -> None:
        if isinstance(pspec, str):
            if pspec not in ("self", "out", "scratch", "mask"):
                out[pspec] = pspec
            return
        if not hasattr(pspec, "get"):
            return
        if "struct" in pspec:
            for sub in (pspec["struct"] or {}).values():
                visit(sub)
        elif "kwargs" in pspec:
            out["**"] = pspec
        elif "arg" in pspec:
            out[pspec["arg"]] = pspec

    for pspec in (node.get("params") or {}).values():
        visit(pspec)
    return out
