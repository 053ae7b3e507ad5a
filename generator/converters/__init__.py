"""Converters, one class per kind of spec value, in registries keyed by
kind (see registry.py).  Importing the package registers them all."""
from __future__ import annotations

from . import (args, attributes, buffers, composite, fields, impl_args, record_fields,  # noqa: F401 (registers)
               returns, shapes)
from .registry import (ATTRIBUTES, BUFFER_LIKE, FIELDS, GID_LIKE, PARAMS, RECORD_FIELDS, REQUIRED,
                       RETURNS, Arg, AttributeConverter, FieldConverter, ParamConverter,
                       RecordFieldConverter, ReturnConverter)

__all__ = ["ATTRIBUTES", "BUFFER_LIKE", "FIELDS", "GID_LIKE", "PARAMS", "RECORD_FIELDS", "REQUIRED",
           "RETURNS", "Arg", "AttributeConverter", "FieldConverter", "ParamConverter",
           "RecordFieldConverter", "ReturnConverter"]
