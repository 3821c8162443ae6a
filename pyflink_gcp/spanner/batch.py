"""Building commit requests: mutation shapes, the commit being filled, and key encoding.

A *shape* is what a mutation's (operation, table, columns) means for the database: validated
against the schema once, with one value encoder per column and the mutation count of one row
(:func:`compile_shape`). A :class:`Batch` is one ``CommitRequest`` being filled: rows are encoded
straight into its protobuf, and consecutive rows of the same shape share one ``Mutation``
message, as Spanner's own clients do. Rows are never reordered, because two mutations of one key
must apply in arrival order.
"""

from __future__ import annotations

from typing import Any

from google.cloud.spanner_v1.types import KeySet
from google.protobuf import struct_pb2

from pyflink_gcp.core.errors import DestinationNotFoundError, SerializerError
from pyflink_gcp.core.functions import short_repr
from pyflink_gcp.spanner.client import CommitRequestPb
from pyflink_gcp.spanner.schema import TableInfo
from pyflink_gcp.spanner.serialization import DELETE, WRITE_OPERATIONS, KeyRange, Mutation
from pyflink_gcp.spanner.values import Encoder, WrongType, encoder_for

#: Bytes of a commit request besides its mutations (session name, transaction options).
REQUEST_OVERHEAD = 256

_KeySetPb: Any = KeySet.pb()


class BadKey(WrongType):
    """A delete key that does not fit the primary key (a record-shaped failure)."""


class Shape:
    """A validated (operation, table, columns): encoders, mutation count and message header.

    For writes ``encoders`` follow ``columns`` and ``cost`` is the count of one row; for deletes
    ``encoders`` are the primary key's and ``cost`` the count of one key or range.
    """

    __slots__ = (
        "operation",
        "is_delete",
        "table",
        "columns",
        "encoders",
        "cost",
        "header_bytes",
        "schema",
    )

    def __init__(
        self,
        operation: str,
        schema: TableInfo,
        columns: tuple[str, ...],
        encoders: tuple[Encoder, ...],
        cost: int,
    ) -> None:
        self.operation = operation
        self.is_delete = operation == DELETE
        self.table = schema.name
        self.schema = schema
        self.columns = columns
        self.encoders = encoders
        self.cost = cost
        # The Mutation message's own fields (table, column names) plus framing, paid once per
        # run of consecutive rows of this shape.
        self.header_bytes = 8 + len(self.table) + sum(len(c) + 2 for c in columns)


def compile_shape(
    mutation: Mutation, table: TableInfo, sink: str, database: str, record: Any
) -> Shape:
    """The shape of ``mutation`` in ``table``; ``sink``, ``database`` and ``record`` name the
    failure in errors.

    Raises:
        DestinationNotFoundError: A delete from a table without a primary key.
        SerializerError: A column that does not exist, is generated or appears twice, or an
            unknown operation: the serializer's fault, for every record it makes.
    """
    if mutation.operation == DELETE:
        if not table.key:
            raise DestinationNotFoundError(
                f"sink '{sink}': table '{table.name}' has no primary key in the schema of "
                f"{database}"
            )
        return Shape(
            DELETE,
            table,
            (),
            tuple(encoder_for(c.spanner_type) for c in table.key),
            table.delete_cost,
        )
    if mutation.operation not in WRITE_OPERATIONS or mutation.columns is None:
        raise SerializerError(
            f"sink '{sink}': unknown mutation operation {mutation.operation!r} in "
            f"{short_repr(mutation)} (record {short_repr(record)})"
        )
    columns = mutation.columns
    unknown = [c for c in columns if table.column(c) is None]
    if unknown:
        raise SerializerError(
            f"sink '{sink}': column(s) {', '.join(map(repr, unknown))} do not exist in table "
            f"'{table.name}' of {database} (columns: "
            f"{', '.join(c.name for c in table.columns.values())}); the serializer returned "
            f"{short_repr(mutation)} for record {short_repr(record)}"
        )
    generated = [c for c in columns if table.columns[c.lower()].generated]
    if generated:
        raise SerializerError(
            f"sink '{sink}': column(s) {', '.join(map(repr, generated))} of table "
            f"'{table.name}' are generated and cannot be written; the serializer returned "
            f"{short_repr(mutation)} for record {short_repr(record)}"
        )
    if len({c.lower() for c in columns}) != len(columns):
        raise SerializerError(
            f"sink '{sink}': a column appears twice in {short_repr(mutation)} "
            f"(record {short_repr(record)})"
        )
    return Shape(
        mutation.operation,
        table,
        columns,
        tuple(encoder_for(table.columns[c.lower()].spanner_type) for c in columns),
        table.write_cost(mutation.operation, columns),
    )


def has_unknown_columns(table: TableInfo, mutation: Mutation) -> bool:
    """Whether ``mutation`` names a column ``table`` does not have (it may be new)."""
    return any(table.column(c) is None for c in mutation.columns or ())


class Batch:
    """One commit being filled: the request, the entries in it and their budget use."""

    __slots__ = ("request", "entries", "mutations", "bytes", "rows", "last_shape", "last_rows")

    def __init__(self) -> None:
        self.request = CommitRequestPb()
        self.request.single_use_transaction.read_write.SetInParent()
        #: (element, record) per accepted record, in order: what a split re-encodes.
        self.entries: list[tuple[Any, Any]] = []
        self.mutations = 0
        self.bytes = REQUEST_OVERHEAD
        #: Rows written plus keys and ranges deleted.
        self.rows = 0
        self.last_shape: Shape | None = None
        #: The repeated field the next row of ``last_shape`` goes to (a write's rows, or a
        #: delete's KeySet).
        self.last_rows: Any = None

    def snapshot(self) -> tuple[Any, ...]:
        """What :meth:`rollback` needs to undo the record about to be encoded."""
        rows = self.last_rows
        shape = self.last_shape
        if rows is None:
            sizes: tuple[int, ...] = ()
        elif shape is not None and shape.operation == DELETE:
            sizes = (len(rows.keys), len(rows.ranges))
        else:
            sizes = (len(rows),)
        return (len(self.request.mutations), shape, rows, sizes)

    def rollback(self, snap: tuple[Any, ...]) -> None:
        """Undo everything a partly encoded record added since :meth:`snapshot`."""
        count, shape, rows, sizes = snap
        del self.request.mutations[count:]
        if rows is not None:
            if shape is not None and shape.operation == DELETE:
                del rows.keys[sizes[0] :]
                del rows.ranges[sizes[1] :]
            else:
                del rows[sizes[0] :]
        self.last_shape, self.last_rows = shape, rows

    def _start_run(self, shape: Shape) -> int:
        """Open a new ``Mutation`` message for rows of ``shape``; returns its header bytes."""
        m = self.request.mutations.add()
        body = getattr(m, shape.operation)
        body.table = shape.table
        if shape.operation == DELETE:
            self.last_rows = body.key_set
        else:
            body.columns.extend(shape.columns)
            self.last_rows = body.values
        self.last_shape = shape
        return shape.header_bytes

    def add(self, shape: Shape, mutation: Mutation) -> int:
        """Encode ``mutation`` (of ``shape``) into the request; returns its encoded bytes."""
        size = 0
        if shape is not self.last_shape:
            size = self._start_run(shape)
        if shape.operation == DELETE:
            return size + encode_keys(self.last_rows, shape, mutation.values)
        row = self.last_rows.add()
        values = row.values
        for encode, value in zip(shape.encoders, mutation.values, strict=True):
            encode(values, value)
        return size + row.ByteSize() + 4

    def add_encoded(self, shape: Shape, rows: list[Any]) -> None:
        """Append rows (writes) or keys (point deletes) of ``shape``, each already encoded as
        a ``ListValue``; the caller accounts for their bytes."""
        if shape is not self.last_shape:
            self._start_run(shape)
        if shape.is_delete:
            self.last_rows.keys.extend(rows)
        else:
            self.last_rows.extend(rows)


def encode_keys(key_set: Any, shape: Shape, keys: tuple[Any, ...]) -> int:
    """Encode the keys and ranges of a delete into ``key_set``; returns their encoded bytes.

    Raises:
        BadKey: A key or range bound longer than the primary key, or a key of another length.
        WrongType: A key value its column's type cannot take.
    """
    key_len = len(shape.encoders)
    size = 0
    for key in keys:
        if isinstance(key, KeyRange):
            r = key_set.ranges.add()
            for bound, closed, target_closed, target_open in (
                (key.start, key.start_closed, r.start_closed, r.start_open),
                (key.end, key.end_closed, r.end_closed, r.end_open),
            ):
                if len(bound) > key_len:
                    raise BadKey(f"key range bound {bound!r} is longer than the primary key")
                target = target_closed if closed else target_open
                target.SetInParent()
                for encode, value in zip(shape.encoders, bound, strict=False):
                    encode(target.values, value)
            size += r.ByteSize() + 4
        else:
            if len(key) != key_len:
                raise BadKey(
                    f"key {key!r} has {len(key)} value(s), the primary key has {key_len} "
                    f"({', '.join(c.name for c in shape.schema.key)})"
                )
            row = key_set.keys.add()
            for encode, value in zip(shape.encoders, key, strict=True):
                encode(row.values, value)
            size += row.ByteSize() + 4
    return size


def diagnose(shape: Shape, mutation: Mutation) -> str | None:
    """Why ``mutation`` cannot be encoded (a value or key its column cannot take), or None.

    Runs off the hot path, only for a record already rejected, on throwaway messages.
    """
    if mutation.operation == DELETE:
        try:
            encode_keys(_KeySetPb(), shape, mutation.values)
        except BadKey as exc:
            return f"table {shape.table}: {exc}"
        except WrongType:
            key_types = ", ".join(f"{c.name} {c.spanner_type}" for c in shape.schema.key)
            return (
                f"table {shape.table}: a key of {short_repr(list(mutation.values))} does not "
                f"fit the primary key ({key_types})"
            )
        return None
    scratch = struct_pb2.ListValue().values
    for column, encode, value in zip(shape.columns, shape.encoders, mutation.values, strict=True):
        try:
            encode(scratch, value)
        except WrongType:
            spanner_type = shape.schema.columns[column.lower()].spanner_type
            return (
                f"table {shape.table}: column {column} ({spanner_type}) cannot take "
                f"{type(value).__name__} {short_repr(value)}"
            )
    return None
