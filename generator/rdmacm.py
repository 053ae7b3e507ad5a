"""The second header: librdmacm's <rdma/rdma_cma.h> (the RDMA connection
manager), with its own spec set in spec/rdmacm/.

The verbs pipeline is reused as is (parse.parse with another header, the
spec loader on another directory, builder.Builder for enums, handle classes
and hand-written method docstrings, builder.coverage); what differs is what
gets emitted:

  generated/rdmacm_loader.c.h   slots + trampolines + dlsym table for the
                                librdmacm functions the spec binds (the
                                library is dlopen'ed on first use, so a
                                missing librdmacm never breaks import)
  generated/rdmacm_objects.h    their declarations (objects.h's counterpart)
  generated/rdmacm_methods.c.h  the EventChannel and CMID classes, through
                                templates/handle.c.h.j2 like every verbs
                                handle (object layout, wrap, close, dealloc,
                                GC, getters from struct rdma_cm_id's fields,
                                method tables), with their librdmacm rules
                                as spec keys (generator/handle_rules.py); every
                                method is hand-written (ibverbs/src/cm*.c),
                                its arguments parsed by generated code
                                where the spec says `impl:` (impl.py)
  generated/rdmacm_enums.py     the CM enums (event types, port spaces)

This module builds its part of the model (a model.HeaderModel, as verbs.h's:
enums, handle classes and functions, no struct classes); generator/render.py
renders it with the rest of the model.  Nothing here changes the verbs
output: the verbs model, spec and templates render what they did, and the
rdmacm files are added next to them.
"""
from __future__ import annotations

import os
from typing import List, Optional, Sequence

from . import builder as vbuilder
from . import model as vmodel
from .ir import IR
from .spec import Spec, SpecError
from .targets import Target

HEADER = "rdma/rdma_cma.h"
SPEC_SUBDIR = "rdmacm"


def spec_dir(spec_root: str) -> str:
    return os.path.join(spec_root, SPEC_SUBDIR)


def bound_names(spec: Spec, methods: List[vmodel.MethodModel]) -> List[str]:
    """Every librdmacm function the spec binds (methods' verbs, destroys)."""
    names = {v for m in methods for v in m.verbs}
    names |= {h.destroy for h in spec.handles if h.destroy}
    return sorted(names)


def build(ir: IR, spec: Spec, targets: Sequence[Target] = (),
          structs: Sequence[vmodel.StructModel] = ()) -> vmodel.HeaderModel:
    """rdma_cma.h's model; *structs*: verbs.h's struct classes, which a hand
    method's `struct_instance:` argument names (its handles held and
    checked as a verb's struct argument's)."""
    b = vbuilder.Builder(ir, spec, targets)
    b.struct_models.update({s.name: s for s in structs})
    enums = b.enums()
    for h in spec.handles:
        for m in h.methods:
            if m.hand is None:
                raise SpecError(f"{m.where()}: {h.name}.{m.name}: the rdma_cm methods are "
                                "hand-written (ibverbs/src/cm*.c): use 'hand' + 'verbs'")
    handles = b.handles()
    functions = []
    for m in spec.functions:
        if m.hand is None:
            raise SpecError(f"{m.where()}: {m.name}: rdma_cm functions are hand-written: "
                            "use 'hand' + 'verbs'")
        if not b.absent(m):
            functions.append(b.method(m))
    all_methods = [m for h in handles for m in h.methods] + functions
    wanted = set(bound_names(spec, all_methods))
    symbols = [s for s in vbuilder.symbols(ir, spec) if s.name in wanted]
    missing = wanted - {s.name for s in symbols}
    inline = {f.name for f in ir.functions if f.storage != "exported"}
    if missing - inline:
        raise SpecError(f"spec/{SPEC_SUBDIR}: binds {', '.join(sorted(missing - inline))}, "
                        f"which {ir.source} does not export")
    return vmodel.HeaderModel(ir, spec, enums, [], handles, functions, symbols,
                        vbuilder.coverage(ir, spec, all_methods))


def load(prefix: Optional[str], spec_root: str) -> vmodel.HeaderModel:
    """Parse rdma_cma.h at *prefix* and load spec/rdmacm/: its model (with
    verbs.h's struct classes, from the verbs spec under spec_root)."""
    from . import parse, spec as vspec
    structs = vbuilder.build(parse.parse(prefix), vspec.load(spec_root)).structs
    return build(parse.parse(prefix, HEADER), vspec.load(spec_dir(spec_root)), structs=structs)
