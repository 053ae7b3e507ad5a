"""The model (model.Model) as JSON: what `python -m generator model` prints,
to diff what a spec or header change does to the model before any C is
written.  The same IR and spec give the same text (object ids, sets and
the IR's own tables stay out: a part names its IR by source and digest).
"""
from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any, Dict, List, Set

from .ir import IR
from .spec import SpecFiles


def _plain(obj: Any, path: Set[int]) -> Any:
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, type):
        return obj.__name__
    if isinstance(obj, IR):
        return {"source": obj.source, "sha256": obj.sha256}
    if isinstance(obj, SpecFiles):        # the spec a part was made from: its files' digest
        return {"files": list(obj.files), "sha256": obj.sha256}
    if id(obj) in path:                   # a value holding its holder (a converter's refs)
        return f"<{type(obj).__name__}>"
    path = path | {id(obj)}
    if isinstance(obj, (set, frozenset)):
        return sorted(_plain(v, path) for v in obj)
    if isinstance(obj, dict):
        return {str(k): _plain(v, path) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return {"__type__": type(obj).__name__,
                **{k: _plain(v, path) for k, v in zip(obj._fields, obj)}}
    if isinstance(obj, (list, tuple)):
        return [_plain(v, path) for v in obj]
    if dataclasses.is_dataclass(obj):
        return {"__type__": type(obj).__name__,
                **{f.name: _plain(getattr(obj, f.name), path) for f in dataclasses.fields(obj)}}
    if callable(obj) and not hasattr(obj, "__dict__"):
        return getattr(obj, "__qualname__", type(obj).__name__)
    if hasattr(obj, "__dict__"):          # a converter: what it was made with
        return {"__type__": type(obj).__name__,
                **{k: _plain(v, path) for k, v in sorted(vars(obj).items())}}
    return repr(obj)


def to_plain(model: Any) -> Dict[str, Any]:
    """The model as JSON-ready values (dicts, lists, strings, numbers)."""
    out = _plain(model, set())
    assert isinstance(out, dict)
    return out


def dump(model: Any) -> str:
    """The model as indented JSON text, ending in a newline."""
    return json.dumps(to_plain(model), indent=1, sort_keys=False) + "\n"


__all__: List[str] = ["dump", "to_plain"]
