"""``'connector' = 'gcp-bigtable'``: a table's rows written as cells by the Bigtable DataStream sink.

Each row is one Bigtable row, keyed by the ``row-key`` column (BYTES as they are, any other type
as its UTF-8 text), in the table the ``table`` template names. The other columns are cells,
the family/qualifier mapping of Flink's HBase connector:

- a column that is not a ROW is the cell ``<column-family>:<column name>``;
- a ROW column is a family of its own, named after the column, and each of its fields the
  cell ``<column>:<field name>``.

A NULL value writes no cell (it does not delete one). The ``timestamp.column`` (a TIMESTAMP or
TIMESTAMP_LTZ column, not written as a cell) is every cell's timestamp, truncated to
milliseconds as Bigtable's default granularity requires; a replay then rewrites the same cell
versions. Without it each cell gets the time of the write, and a replay adds versions.

Values (``value.format``): ``text`` (the default) writes every value as its UTF-8 text (numbers
in decimal, booleans ``true``/``false``, DECIMAL exact, DATE/TIME/TIMESTAMP in ISO 8601, ARRAY,
ROW-in-ROW and MAP as JSON); ``binary`` writes integers as 8-byte big-endian two's complement
(what the Bigtable client makes of an ``int``, which Bigtable's increments and SQL functions
read), FLOAT/DOUBLE as 8-byte IEEE 754 big-endian and BOOLEAN as one byte, the rest as text.
BYTES are written as they are in both.

Under ``create-disposition = create-if-needed`` a missing table is created with the families
``column-family`` and one per ROW column, keeping every version (Bigtable's default for a new
family). A row whose template renders no valid table id, or whose row key is NULL, is
unroutable: it goes to the failure handler as its JSON (the table from the resolver, the row
key from the serializer).
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from typing import Any

from pyflink_gcp.bigtable import (
    BigtableSink,
    Mutation,
    RowMutationEntry,
    SetCell,
    TableCreateOptions,
)
from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.fields import FieldSelection
from pyflink_gcp.core.runtime import DynamicSink
from pyflink_gcp.core.types import UnroutableRecord
from pyflink_gcp.routing import bigtable_tables, names, route_by_template
from pyflink_gcp.table.adapter import configure, destination_template, written_columns
from pyflink_gcp.table.pubsub import row_json, value_text
from pyflink_gcp.table.rows import LTZ, NTZ, TableInfo

IDENTIFIER = "gcp-bigtable"

_INTEGERS = frozenset({"TINYINT", "SMALLINT", "INTEGER", "BIGINT"})
_FLOATS = frozenset({"FLOAT", "DOUBLE"})
_BINARY = frozenset({"BINARY", "VARBINARY"})
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_INT64 = struct.Struct(">q")
_FLOAT64 = struct.Struct(">d")


def _text_bytes(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return value_text(value).encode("utf-8")


def _int64(value: int) -> bytes:
    return _INT64.pack(value)


def _float64(value: float) -> bytes:
    return _FLOAT64.pack(value)


def _boolean(value: bool) -> bytes:
    return b"\x01" if value else b"\x00"


def _encoder(root: str, binary: bool) -> Any:
    """The function that turns a value of a column of type ``root`` into a cell's bytes (a
    module-level function: the serializer travels to the workers by pickle)."""
    if root in _BINARY:
        return bytes
    if binary and root in _INTEGERS:
        return _int64
    if binary and root in _FLOATS:
        return _float64
    if binary and root == "BOOLEAN":
        return _boolean
    return _text_bytes


def _micros(value: datetime) -> int:
    """A timestamp as epoch microseconds in whole milliseconds (naive means UTC)."""
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    delta = aware - _EPOCH
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return micros - micros % 1000


class RowCells:
    """The serializer: one ``RowMutationEntry`` per row, a ``SetCell`` per non-NULL value; a row
    whose row key is NULL is unroutable.

    Attributes:
        row_key: The row key column.
        timestamp: The cell timestamp column, or None.
        cells: ``(column, family, qualifier, encoder)`` of the columns that are not ROWs.
        families: ``(column, ((field, qualifier, encoder), ...))`` of the ROW columns, each a
            family named after the column.
    """

    def __init__(self, table: TableInfo, values: dict[str, Any]) -> None:
        self.row_key: str = values["row-key"]
        self.timestamp: str | None = values["timestamp.column"]
        binary = values["value.format"] == "binary"
        family: str = values["column-family"]
        cells: list[tuple[str, str, bytes, Any]] = []
        families: list[tuple[str, tuple[tuple[str, bytes, Any], ...]]] = []
        for column in table.columns:
            if column.name in (self.row_key, self.timestamp):
                continue
            if column.root == "ROW":
                fields = tuple(
                    (f["name"], f["name"].encode("utf-8"), _encoder(f["type"]["root"], binary))
                    for f in column.type["fields"]
                )
                families.append((column.name, fields))
            else:
                encode = _encoder(column.root, binary)
                cells.append((column.name, family, column.name.encode("utf-8"), encode))
        self.cells = tuple(cells)
        self.families = tuple(families)

    def __call__(
        self, record: dict[str, Any], context: Any
    ) -> RowMutationEntry | UnroutableRecord | None:
        key = record[self.row_key]
        if key is None:
            return UnroutableRecord.of(row_json(record), f"row key column {self.row_key} is NULL")
        stamp = None
        if self.timestamp is not None and record[self.timestamp] is not None:
            stamp = _micros(record[self.timestamp])
        mutations: list[Mutation] = []
        for column, family, qualifier, encode in self.cells:
            value = record[column]
            if value is not None:
                mutations.append(SetCell(family, qualifier, encode(value), stamp))
        for column, fields in self.families:
            nested = record[column]
            if nested is None:
                continue
            for field, qualifier, encode in fields:
                value = nested.get(field)
                if value is not None:
                    mutations.append(SetCell(column, qualifier, encode(value), stamp))
        if not mutations:
            return None  # every value NULL: nothing to write (counted as skipped)
        return RowMutationEntry(_text_bytes(key), mutations)


def _check_timestamp_column(table: TableInfo, values: dict[str, Any]) -> None:
    name = values["timestamp.column"]
    if name is not None and table.column(name).root not in (NTZ, LTZ):
        raise ConfigurationError(
            f"sink '{table.sink_name}': option 'timestamp.column' of connector '{IDENTIFIER}' "
            f"names column {name} of type {table.column(name).type['sql']}; it must be a "
            "TIMESTAMP or TIMESTAMP_LTZ column"
        )


def _written(
    table: TableInfo, values: dict[str, Any], selection: FieldSelection | None
) -> TableInfo:
    """The table as its rows reach the serializer under the ``fields.*`` selection: the row
    key and timestamp columns are no cells, but each row needs them, so they stay."""
    if selection is None:
        return table
    columns = written_columns(selection, table)
    names = {c.name for c in columns}
    for key in ("row-key", "timestamp.column"):
        if values[key] is not None and values[key] not in names:
            raise ConfigurationError(
                f"sink '{table.sink_name}': option 'fields.{selection.kind}' of connector "
                f"'{IDENTIFIER}' leaves out the {key} column {values[key]}, which every row "
                f"needs (it is not written as a cell): "
                + ("keep it" if selection.kind == "keep" else "do not drop it")
            )
    return TableInfo(table.sink_name, columns, table.primary_key)


def build_sink(values: dict[str, Any], table: TableInfo) -> DynamicSink:
    """The Bigtable sink of a ``gcp-bigtable`` table."""
    _check_timestamp_column(table, values)
    builder = BigtableSink.builder()
    selection = configure(builder, IDENTIFIER, values, table)
    template = destination_template(values, "table", table, names.bigtable_table_id)
    builder.set_destination_resolver(
        route_by_template(
            template,
            bigtable_tables(values["project"], values["instance"]),
            unroutable=True,
            payload=row_json,
        )
    )
    serializer = RowCells(_written(table, values, selection), values)
    builder.set_serializer(serializer)
    if values["create-disposition"] == "create-if-needed":
        families: dict[str, int | None] = {values["column-family"]: None}
        families.update({column: None for column, _ in serializer.families})
        builder.set_table_create_options(TableCreateOptions(column_families=families))
    if values["endpoint"] is not None:
        builder.set_endpoint(values["endpoint"])
    return builder.build()
