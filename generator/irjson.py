"""Deterministic JSON (de)serialisation of the IR.

``dump`` writes sorted keys with ``indent=1`` and a trailing newline; the IR
holds no absolute paths or line numbers, so dumps of two rdma-core releases
can be diffed directly.  ``load(dump(ir)) == ir`` exactly.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, Optional

from .ir import (IR, Enum, EnumMember, Field, Function, Macro, Param, Record,
                 Type, Typedef)

#: bumped when the shape of the IR changes incompatibly
FORMAT = 1


def to_dict(ir: IR) -> Dict[str, Any]:
    d = dataclasses.asdict(ir)
    d["format"] = FORMAT
    return d


def dump(ir: IR) -> str:
    return json.dumps(to_dict(ir), sort_keys=True, indent=1,
                      ensure_ascii=False) + "\n"


def _type(d: Optional[Dict[str, Any]]) -> Optional[Type]:
    if d is None:
        return None
    d = dict(d)
    d["pointee"] = _type(d.get("pointee"))
    d["element"] = _type(d.get("element"))
    return Type(**d)


def _required_type(d: Dict[str, Any]) -> Type:
    t = _type(d)
    assert t is not None
    return t


def from_dict(d: Dict[str, Any]) -> IR:
    fmt = d.get("format", FORMAT)
    if fmt != FORMAT:
        raise ValueError(f"IR JSON format {fmt} is not supported "
                         f"(expected {FORMAT}); regenerate the dump")
    return IR(
        source=d["source"], sha256=d["sha256"], rdma_core=d.get("rdma_core"),
        functions=[Function(name=f["name"], result=_required_type(f["result"]),
                            params=[Param(p["name"], _required_type(p["type"]))
                                    for p in f["params"]],
                            variadic=f["variadic"], storage=f["storage"],
                            macro_target=f.get("macro_target"),
                            header=f["header"],
                            deprecated=f.get("deprecated", False))
                   for f in d.get("functions", [])],
        records=[Record(name=r["name"], kind=r["kind"], size=r.get("size"),
                        align=r.get("align"),
                        fields=[Field(name=x["name"], type=_required_type(x["type"]),
                                      offset=x["offset"],
                                      bit_offset=x.get("bit_offset"),
                                      bit_width=x.get("bit_width"))
                                for x in r["fields"]],
                        header=r["header"], complete=r["complete"])
                 for r in d.get("records", [])],
        enums=[Enum(name=e["name"],
                    members=[EnumMember(m["name"], m["value"])
                             for m in e["members"]],
                    header=e["header"], signed=e["signed"], size=e["size"])
               for e in d.get("enums", [])],
        typedefs=[Typedef(name=t["name"], target=_required_type(t["target"]),
                          header=t["header"])
                  for t in d.get("typedefs", [])],
        macros=[Macro(name=m["name"], params=m.get("params"),
                      tokens=m["tokens"], header=m["header"])
                for m in d.get("macros", [])],
    )


def load(text: str) -> IR:
    return from_dict(json.loads(text))
