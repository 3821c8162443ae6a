"""Field selection: which fields of a record a sink writes, once its destination is known.

A record is often routed on a field that has no place in what is written: the ``tenant`` that
names a per-tenant table, the ``country`` that names a topic. A :class:`FieldSelection` set on
a sink builder (``set_field_selection``) removes such fields after the resolver has seen the
whole record and before the serializer turns it into the service's element. Three kinds, the
option set of Apache Beam's Managed I/O, at most one per sink:

- ``FieldSelection.drop(["tenant"])``: every field but these is written;
- ``FieldSelection.keep(["id", "amount"])``: only these fields are written (the record's
  order is kept; a listed field the record lacks is not written, as a missing key would not be);
- ``FieldSelection.only("payload")``: the value of this one field, itself a record, is written
  instead of the whole record.

Records may be dicts (any mapping; a dict subclass keeps its class) or PyFlink ``Row`` s with
field names (a selected Row keeps its kind). Names are top-level fields. A record the selection
cannot apply to (``only`` naming a field that is missing or holds no record, a record that is
neither a mapping nor a named Row) is a record-shaped failure: the serializer wrapper returns an
:class:`~pyflink_gcp.core.types.UnroutableRecord` carrying the record's JSON and the reason, and
the sink's failure handler decides (fail the job, drop it, or dead-letter it).
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.functions import describe_callable, short_repr
from pyflink_gcp.core.types import UnroutableRecord

DROP: Final = "drop"
KEEP: Final = "keep"
ONLY: Final = "only"
#: The kinds of selection, in the order the docs and the SQL options list them.
KINDS: Final = (DROP, KEEP, ONLY)


class FieldSelectionError(ValueError):
    """A record the selection cannot apply to (its message says why, without the record)."""


def _row_type() -> type | None:
    """PyFlink's ``Row`` class, once PyFlink is loaded (a record can only be a Row then)."""
    module = sys.modules.get("pyflink.common.types")
    return getattr(module, "Row", None) if module is not None else None


def _names(fields: Any, kind: str) -> tuple[str, ...]:
    """The field names of a ``drop`` or ``keep``: a non-empty list of distinct names."""
    example = f"FieldSelection.{kind}(['tenant'])"
    if isinstance(fields, str | bytes) or not isinstance(fields, Iterable):
        raise ConfigurationError(
            f"FieldSelection.{kind}() takes a list of field names, e.g. {example}; got {fields!r}"
        )
    names = tuple(fields)
    if not names:
        raise ConfigurationError(f"FieldSelection.{kind}() needs at least one field name")
    for name in names:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(
                f"FieldSelection.{kind}() takes non-empty field names (strings), got {name!r}"
            )
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigurationError(
            f"FieldSelection.{kind}() names {', '.join(map(repr, duplicates))} more than once"
        )
    return names


class FieldSelection:
    """Which fields of a record a sink writes: ``drop``, ``keep`` or ``only``.

    An immutable, picklable value, built by :meth:`drop`, :meth:`keep`, :meth:`only` or, from
    Beam-style configuration keys, :meth:`of`. :meth:`apply` selects the fields of one record.

    Attributes:
        kind: ``"drop"``, ``"keep"`` or ``"only"``.
        fields: The field names (one for ``only``).
    """

    __slots__ = ("kind", "fields", "_set")

    kind: str
    fields: tuple[str, ...]
    _set: frozenset[str]

    def __init__(self, kind: str, fields: tuple[str, ...]) -> None:
        if kind not in KINDS:
            raise ConfigurationError(
                f"a field selection is one of {', '.join(KINDS)}; got {kind!r}"
            )
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "fields", tuple(fields))
        object.__setattr__(self, "_set", frozenset(fields))

    @staticmethod
    def drop(fields: Sequence[str]) -> FieldSelection:
        """Write every field of the record but ``fields`` (those the record lacks are ignored)."""
        return FieldSelection(DROP, _names(fields, DROP))

    @staticmethod
    def keep(fields: Sequence[str]) -> FieldSelection:
        """Write only ``fields``, in the record's order (those the record lacks are not written)."""
        return FieldSelection(KEEP, _names(fields, KEEP))

    @staticmethod
    def only(field: str) -> FieldSelection:
        """Write the value of ``field``, itself a record (a dict or a named Row), instead of the
        whole record."""
        if not isinstance(field, str) or not field:
            raise ConfigurationError(
                "FieldSelection.only() takes the name of one field whose value is a record, "
                f"e.g. FieldSelection.only('payload'); got {field!r}"
            )
        return FieldSelection(ONLY, (field,))

    @staticmethod
    def of(
        drop: Sequence[str] | None = None,
        keep: Sequence[str] | None = None,
        only: str | None = None,
    ) -> FieldSelection | None:
        """The selection of Beam-style configuration keys, at most one of them set (None when
        none is).

        Raises:
            ConfigurationError: More than one is set, or one is malformed.
        """
        given = {k: v for k, v in ((DROP, drop), (KEEP, keep), (ONLY, only)) if v is not None}
        if len(given) > 1:
            raise ConfigurationError(
                f"at most one of drop, keep and only selects the written fields; got "
                f"{' and '.join(given)}"
            )
        if not given:
            return None
        ((kind, value),) = given.items()
        if kind == ONLY:
            return FieldSelection.only(value)  # type: ignore[arg-type]
        return FieldSelection(kind, _names(value, kind))

    # -- selection --------------------------------------------------------------------------

    def apply(self, record: Any) -> Any:
        """The part of ``record`` that is written: a record of the same shape for ``drop`` and
        ``keep`` (a dict, a dict of the record's dict subclass, or a Row of the same kind), the
        field's value for ``only``.

        Raises:
            FieldSelectionError: ``record`` is neither a mapping nor a Row with field names, or
                ``only``'s field is missing or holds no record.
        """
        if self.kind == ONLY:
            value = _field(record, self.fields[0])
            if not _is_record(value):
                raise FieldSelectionError(
                    f"field {self.fields[0]!r} holds {type(value).__name__} "
                    f"({short_repr(value)}), not a record (a dict or a Row with field names)"
                )
            return value
        drop = self.kind == DROP
        chosen = self._set
        if type(record) is dict or isinstance(record, Mapping):
            selected = {k: v for k, v in record.items() if (k in chosen) is not drop}
            if type(record) is dict or not isinstance(record, dict):
                return selected
            out = copy.copy(record)  # a dict subclass keeps its class (and its attributes)
            out.clear()
            out.update(selected)
            return out
        names = _row_names(record)
        if names is None:
            raise FieldSelectionError(_not_a_record(record))
        pairs = [(n, v) for n, v in zip(names, record, strict=True) if (n in chosen) is not drop]
        row = type(record)(*(v for _, v in pairs))
        row._fields = [n for n, _ in pairs]
        kind = getattr(record, "get_row_kind", None)
        if kind is not None:
            row.set_row_kind(kind())
        return row

    def columns(self, names: Sequence[str]) -> tuple[str, ...]:
        """The names of ``names`` (a record's fields, a table's columns) that ``drop`` or
        ``keep`` writes, in their order; for ``only``, its field."""
        if self.kind == ONLY:
            return self.fields
        drop = self.kind == DROP
        return tuple(n for n in names if (n in self._set) is not drop)

    # -- value semantics --------------------------------------------------------------------

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("FieldSelection is immutable")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FieldSelection):
            return NotImplemented
        return (self.kind, self.fields) == (other.kind, other.fields)

    def __hash__(self) -> int:
        return hash((self.kind, self.fields))

    def __repr__(self) -> str:
        if self.kind == ONLY:
            return f"FieldSelection.only({self.fields[0]!r})"
        return f"FieldSelection.{self.kind}({list(self.fields)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FieldSelection, (self.kind, self.fields))


def _row_names(record: Any) -> list[str] | None:
    """The field names of a PyFlink Row, or None for anything else (or a Row without names)."""
    row = _row_type()
    if row is None or not isinstance(record, row):
        return None
    names = getattr(record, "_fields", None)
    return list(names) if names else None


def _is_record(value: Any) -> bool:
    return isinstance(value, Mapping) or _row_names(value) is not None


def _field(record: Any, name: str) -> Any:
    """``record``'s field ``name``, or FieldSelectionError naming what is wrong."""
    if type(record) is dict or isinstance(record, Mapping):
        if name in record:
            return record[name]
        raise FieldSelectionError(f"the record has no field {name!r}")
    names = _row_names(record)
    if names is None:
        raise FieldSelectionError(_not_a_record(record))
    if name not in names:
        raise FieldSelectionError(f"the record has no field {name!r} (its fields: {names})")
    return record[name]


def _not_a_record(record: Any) -> str:
    row = _row_type()
    if row is not None and isinstance(record, row):
        return (
            "the record is a Row without field names: give its type field names "
            "(Types.ROW_NAMED) so fields can be selected by name"
        )
    return f"the record is a {type(record).__name__}, not a dict or a Row with field names"


def _plain(value: Any) -> Any:
    """``value`` with Rows as dicts, for a dead-letter payload."""
    names = _row_names(value)
    if names is not None:
        return {n: _plain(v) for n, v in zip(names, value, strict=True)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def record_payload(record: Any) -> bytes:
    """The dead-letter payload of a record the selection could not apply to: its JSON (values
    JSON has no form for as their text), or its repr."""
    if isinstance(record, bytes | bytearray):
        return bytes(record)
    try:
        return json.dumps(_plain(record), default=str, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError):
        return repr(record).encode("utf-8", "replace")


class SelectedFields:
    """A sink's serializer under a field selection: the serializer gets the selected record.

    Built by the sink builder at ``build()`` (``set_field_selection``); the resolver has seen
    the whole record by then. A record the selection cannot apply to becomes an
    :class:`~pyflink_gcp.core.types.UnroutableRecord` (its JSON and the reason), which the sink
    hands to its failure handler. Errors of the serializer itself still name the user's
    serializer (the wrapper carries its name).

    Attributes:
        selection: The field selection.
        serializer: The sink's serializer, a ``(record, context)`` callable.
    """

    def __init__(self, selection: FieldSelection, serializer: Any) -> None:
        self.selection = selection
        self.serializer = serializer
        method = getattr(serializer, "serialize", None)
        self._serialize = method if callable(method) else serializer
        # describe_callable() reads these: errors name the user's serializer, not the wrapper.
        self.__qualname__ = describe_callable(serializer)
        self.__module__ = ""

    def __call__(self, record: Any, context: Any) -> Any:
        try:
            selected = self.selection.apply(record)
        except FieldSelectionError as exc:
            return unselectable(self.selection, record, exc)
        return self._serialize(selected, context)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.selection, self.serializer))


def unselectable(selection: FieldSelection, record: Any, error: Exception) -> UnroutableRecord:
    """The record-shaped failure of a record ``selection`` cannot apply to."""
    return UnroutableRecord.of(
        record_payload(record), f"field selection {selection!r} cannot apply: {error}"
    )
