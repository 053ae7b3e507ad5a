"""The whole model (model.Model) from the two headers' IR and the spec
sets under one spec root: verbs.h's classes (generator/builder.py), the
data-path types (generator/records.py), rdma_cma.h's classes
(generator/rdmacm.py) and the build targets (generator/targets.py).
generator/render.py renders it."""
from __future__ import annotations

from typing import Optional, Tuple

from . import builder, parse, rdmacm, records, spec, targets
from .enum_fields import EnumFields
from .ir import IR
from .model import Model


def build(irs: Tuple[IR, IR], spec_root: str) -> Model:
    """verbs.h's and rdma_cma.h's IR (in that order) + the spec -> the model."""
    ir, cm_ir = irs
    # first: the converters are made knowing the targets their C serves
    build_targets = targets.load(targets.default_path(spec_root))
    verbs = builder.build(ir, spec.load(spec_root), build_targets)
    cm = rdmacm.build(cm_ir, spec.load(rdmacm.spec_dir(spec_root)), build_targets,
                      structs=verbs.structs)
    record_types = records.build(ir, spec_root, EnumFields(verbs.enums, verbs.spec.enum_fields))
    return Model(verbs=verbs, records=record_types, rdmacm=cm, targets=build_targets)


def parse_headers(prefix: Optional[str]) -> Tuple[IR, IR]:
    """verbs.h's and rdma_cma.h's IR from the headers at prefix (None: the baseline)."""
    return parse.parse(prefix), parse.parse(prefix, rdmacm.HEADER)
