"""What the routing helpers share: looking a field up in a record of any shape."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

#: A field that is not there (None is a value a field can have).
MISSING: Any = object()


def row_type() -> type | None:
    """PyFlink's ``Row`` class, when PyFlink is loaded (a record can only be a Row then)."""
    module = sys.modules.get("pyflink.common.types")
    return getattr(module, "Row", None) if module is not None else None


def field_of(value: Any, name: str) -> Any:
    """``value``'s field ``name``: a mapping's key, a Row's field, else an attribute
    (:data:`MISSING` when there is none)."""
    if type(value) is dict or isinstance(value, Mapping):
        return value.get(name, MISSING)
    row = row_type()
    if row is not None and isinstance(value, row):
        # A Row's attributes are its fields and its methods; only the fields are looked up.
        fields: Any = value
        try:
            return fields[name]
        except (KeyError, ValueError, AttributeError, IndexError):
            return MISSING
    return getattr(value, name, MISSING)
