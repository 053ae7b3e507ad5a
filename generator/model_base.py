"""The base of every part of the model (generator/model.py's HeaderModel,
generator/record_model.py's RecordsModel), a module of its own so that
the root model (model.Model) can hold them all."""
from __future__ import annotations

from dataclasses import dataclass

from .ir import IR
from .spec import SpecFiles


@dataclass
class PartModel:
    """What every part of the model has (and every generated file's header
    names): the IR it was made from and its spec (a digest and its files)."""
    ir: IR
    spec: SpecFiles
