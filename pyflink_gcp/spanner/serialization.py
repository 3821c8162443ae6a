"""What a Spanner serializer returns: :class:`Mutation` values, and :class:`KeyRange` for deletes.

These are small picklable value classes so that a serializer never touches protobufs; the writer
turns them into the client's wire form, column by column, with the types it read from the
database's schema. One :class:`Mutation` (or a list of them, committed together) per record::

    Mutation.insert_or_update("Events", {"id": 7, "kind": "click", "at": datetime.now(UTC)})
    Mutation.delete("Events", 7)                      # one key
    Mutation.delete("Orders", [("eu", 1), ("eu", 2)])  # two composite keys
    Mutation.delete("Orders", KeyRange.prefix("eu"))  # every key starting with "eu"

Python values and the Spanner types they may be written to:

=================  ==========================================================================
Spanner type        Python value
=================  ==========================================================================
INT64, ENUM         ``int`` (not ``bool``), or a ``str`` Spanner parses
FLOAT64, FLOAT32    ``float`` or ``int`` (NaN and infinities included)
BOOL                ``bool``
STRING              ``str``
BYTES, PROTO        ``bytes`` (base64-encoded for you); PROTO also a protobuf message
TIMESTAMP           ``datetime`` (naive means UTC), an RFC 3339 ``str``, or
                    :data:`COMMIT_TIMESTAMP` for ``allow_commit_timestamp`` columns
DATE                ``date`` (not a ``datetime``) or an ISO ``str``
NUMERIC             ``Decimal``, ``int`` or a ``str`` (not ``float``: it would lose digits)
JSON                ``dict``, ``list``, numbers, ``bool`` (serialized for you), or JSON text as a
                    ``str``; ``None`` is SQL NULL
UUID                ``uuid.UUID`` or ``str``
ARRAY<T>            ``list`` or ``tuple`` of the above (elements may be ``None``)
=================  ==========================================================================

``None`` writes NULL in any column. A value of another type is a record-shaped failure that the
sink's failure handler decides about.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from collections.abc import Iterable, Mapping
from typing import Any

from pyflink_gcp.core.fields import FieldSelectionError, SelectedFields, unselectable

#: Write this to a TIMESTAMP column declared with ``OPTIONS (allow_commit_timestamp=true)`` to
#: store the commit's timestamp (a replayed record then gets a new timestamp).
COMMIT_TIMESTAMP = "spanner.commit_timestamp()"

#: The operations of a mutation, named like the fields of Spanner's ``Mutation`` message.
INSERT = "insert"
UPDATE = "update"
INSERT_OR_UPDATE = "insert_or_update"
REPLACE = "replace"
DELETE = "delete"
WRITE_OPERATIONS = (INSERT, UPDATE, INSERT_OR_UPDATE, REPLACE)


class KeyRange:
    """A range of primary keys for :meth:`Mutation.delete`.

    Exactly one start bound and one end bound, each a key prefix: a scalar or a tuple of the
    leading key columns' values (``()`` is the empty prefix: from the first or to the last
    key). A closed bound includes the keys it prefixes, an open one excludes them::

        KeyRange(start_closed=("eu", 1), end_open=("eu", 100))
        KeyRange.prefix("eu")   # every key whose first column is "eu"

    Spanner applies a range delete to every row in it, so its mutation count cannot be known
    before the commit (see the sink's documentation).
    """

    __slots__ = ("start", "start_closed", "end", "end_closed")

    def __init__(
        self,
        *,
        start_closed: Any = None,
        start_open: Any = None,
        end_closed: Any = None,
        end_open: Any = None,
    ) -> None:
        if (start_closed is None) == (start_open is None):
            raise ValueError("KeyRange needs exactly one of start_closed= or start_open=")
        if (end_closed is None) == (end_open is None):
            raise ValueError("KeyRange needs exactly one of end_closed= or end_open=")
        self.start: tuple[Any, ...] = _as_key(start_closed if start_open is None else start_open)
        self.start_closed = start_open is None
        self.end: tuple[Any, ...] = _as_key(end_closed if end_open is None else end_open)
        self.end_closed = end_open is None

    @staticmethod
    def closed(start: Any, end: Any) -> KeyRange:
        """Keys from ``start`` to ``end``, both included."""
        return KeyRange(start_closed=start, end_closed=end)

    @staticmethod
    def closed_open(start: Any, end: Any) -> KeyRange:
        """Keys from ``start`` (included) to ``end`` (excluded)."""
        return KeyRange(start_closed=start, end_open=end)

    @staticmethod
    def prefix(prefix: Any) -> KeyRange:
        """Every key that starts with ``prefix`` (a scalar or a tuple of leading key values)."""
        return KeyRange(start_closed=prefix, end_closed=prefix)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KeyRange):
            return NotImplemented
        return (self.start, self.start_closed, self.end, self.end_closed) == (
            other.start,
            other.start_closed,
            other.end,
            other.end_closed,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        start = "start_closed" if self.start_closed else "start_open"
        end = "end_closed" if self.end_closed else "end_open"
        return f"KeyRange({start}={self.start!r}, {end}={self.end!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_range, (self.start, self.start_closed, self.end, self.end_closed))

    def _to_json(self) -> dict[str, Any]:
        start = "start_closed" if self.start_closed else "start_open"
        end = "end_closed" if self.end_closed else "end_open"
        return {start: list(self.start), end: list(self.end)}


def _rebuild_range(
    start: tuple[Any, ...], start_closed: bool, end: tuple[Any, ...], end_closed: bool
) -> KeyRange:
    obj = KeyRange.__new__(KeyRange)
    obj.start, obj.start_closed, obj.end, obj.end_closed = start, start_closed, end, end_closed
    return obj


def _as_key(key: Any) -> tuple[Any, ...]:
    """A key or key prefix as a tuple: tuples stay, lists become tuples, scalars get wrapped."""
    if isinstance(key, tuple):
        return key
    if isinstance(key, list):
        return tuple(key)
    return (key,)


class Mutation:
    """One write or delete of one table: what a Spanner sink's serializer returns.

    Build it with the factory methods; it is an immutable, picklable value. Rows are dicts of
    column name to Python value (see the module documentation for the types); names are
    matched to the schema case-insensitively, like Spanner does.

    Replays after a failure re-apply mutations, so prefer the idempotent operations:
    :meth:`insert_or_update`, :meth:`replace` and :meth:`delete`. A replayed :meth:`insert`
    of a row that was already committed fails with ALREADY_EXISTS, and :meth:`update` of a
    missing row with NOT_FOUND; both go to the failure handler.

    Attributes:
        operation: ``"insert"``, ``"update"``, ``"insert_or_update"``, ``"replace"`` or
            ``"delete"``.
        table: The table name, as in the schema (``schema.table`` for a named schema).
        columns: The written columns, in order (None for a delete).
        values: The row's values, in the order of ``columns``; for a delete, the keys (tuples)
            and :class:`KeyRange` s.
    """

    __slots__ = ("operation", "table", "columns", "values")

    operation: str
    table: str
    columns: tuple[str, ...] | None
    values: tuple[Any, ...]

    def __init__(
        self,
        operation: str,
        table: str,
        columns: tuple[str, ...] | None,
        values: tuple[Any, ...],
    ) -> None:
        self.operation = operation
        self.table = table
        self.columns = columns
        self.values = values

    # -- factories (called once per record by serializers: kept cheap) ------------------------

    @staticmethod
    def insert(table: str, row: Mapping[str, Any]) -> Mutation:
        """Insert a new row; fails (ALREADY_EXISTS) if the row exists, so not idempotent."""
        return _write(INSERT, table, row)

    @staticmethod
    def update(table: str, row: Mapping[str, Any]) -> Mutation:
        """Update the given columns of an existing row; fails (NOT_FOUND) if it is missing."""
        return _write(UPDATE, table, row)

    @staticmethod
    def insert_or_update(table: str, row: Mapping[str, Any]) -> Mutation:
        """Insert the row, or update the given columns if it exists (idempotent on replay)."""
        return _write(INSERT_OR_UPDATE, table, row)

    @staticmethod
    def replace(table: str, row: Mapping[str, Any]) -> Mutation:
        """Insert the row, or replace it entirely (unset columns become NULL or default)."""
        return _write(REPLACE, table, row)

    @staticmethod
    def delete(table: str, keys: Any) -> Mutation:
        """Delete rows by primary key (a missing row is not an error).

        Args:
            table: The table name.
            keys: One key (a scalar, or a tuple for a composite primary key), a
                :class:`KeyRange`, or a list of keys and ranges.
        """
        if not isinstance(table, str) or not table:
            raise ValueError(f"Mutation.delete needs a table name, got {table!r}")
        if isinstance(keys, tuple | KeyRange):
            items: tuple[Any, ...] = (keys,)
        elif isinstance(keys, str | bytes) or not isinstance(keys, Iterable):
            items = ((keys,),)
        else:
            items = tuple(k if isinstance(k, tuple | KeyRange) else _as_key(k) for k in keys)
            if not items:
                raise ValueError(f"Mutation.delete({table!r}, ...) got no keys")
        return Mutation(DELETE, table, None, items)

    # -- value semantics ------------------------------------------------------------------------

    @property
    def row(self) -> dict[str, Any] | None:
        """The row as a dict (None for a delete)."""
        if self.columns is None:
            return None
        return dict(zip(self.columns, self.values, strict=True))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mutation):
            return NotImplemented
        return (self.operation, self.table, self.columns, self.values) == (
            other.operation,
            other.table,
            other.columns,
            other.values,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if self.columns is None:
            return f"Mutation.delete({self.table!r}, {list(self.values)!r})"
        return f"Mutation.{self.operation}({self.table!r}, {self.row!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Mutation, (self.operation, self.table, self.columns, self.values))

    def to_json_bytes(self) -> bytes:
        """A JSON description of the mutation: the payload a dead-letter queue receives.

        ``{"table": ..., "operation": ..., "row": {...}}`` or ``{..., "keys": [...]}``; bytes
        are base64, timestamps and dates ISO 8601, decimals strings.
        """
        body: dict[str, Any] = {"table": self.table, "operation": self.operation}
        if self.columns is None:
            body["keys"] = [
                k._to_json() if isinstance(k, KeyRange) else list(k) for k in self.values
            ]
        else:
            body["row"] = self.row
        return json.dumps(body, default=_json_default, separators=(",", ":")).encode()


def _write(operation: str, table: str, row: Mapping[str, Any]) -> Mutation:
    if type(row) is dict and row and type(table) is str and table:
        # The common case, without the ABC instance check a Mapping costs.
        return Mutation(operation, table, tuple(row), tuple(row.values()))
    if not isinstance(table, str) or not table:
        raise ValueError(f"Mutation.{operation} needs a table name, got {table!r}")
    if not isinstance(row, Mapping) or not row:
        raise ValueError(
            f"Mutation.{operation}({table!r}, row) needs a non-empty dict of column -> value, "
            f"got {type(row).__name__}"
        )
    return Mutation(operation, table, tuple(row), tuple(row.values()))


class SelectedColumns(SelectedFields):
    """A Spanner serializer under a field selection (``set_field_selection``).

    Spanner's serializer routes as well as serializes (each mutation names its table), so it
    gets the whole record and the selection applies to the row of each write mutation it
    returns; deletes keep their keys. A row the selection cannot apply to (``only`` naming a
    column that is missing or holds no record) makes the record an ``UnroutableRecord``, for
    the failure handler.
    """

    def __call__(self, record: Any, context: Any) -> Any:
        element = self._serialize(record, context)
        try:
            if type(element) is Mutation:
                return self._select(element)
            if isinstance(element, list):
                return [self._select(m) if type(m) is Mutation else m for m in element]
        except FieldSelectionError as exc:
            return unselectable(self.selection, record, exc)
        return element

    def _select(self, mutation: Mutation) -> Mutation:
        if mutation.columns is None:
            return mutation
        row = self.selection.apply(dict(zip(mutation.columns, mutation.values, strict=True)))
        if not isinstance(row, Mapping):
            row = row.as_dict()  # a Row that only() selected
        if not row:
            raise FieldSelectionError(f"it leaves no column of table {mutation.table!r}")
        return Mutation(mutation.operation, mutation.table, tuple(row), tuple(row.values()))


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    return str(value)
