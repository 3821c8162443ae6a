"""The staged files of ``WriteMethod.FILE_LOADS``, one writer per :class:`FileFormat`.

A load job reads a staged file long after the records in it are gone, and one value it cannot
read fails the whole job. So every row is converted with the table's schema when it is
written (:class:`~pyflink_gcp.bigquery.rows.ColumnTree`, the lenient conversion of the Storage
Write encoder): a row that does not fit, or lacks a REQUIRED column, is a
:class:`~pyflink_gcp.bigquery.values.RowError` for the failure handler, with its record. Only the
last step differs per format:

- ``NEWLINE_DELIMITED_JSON``: one JSON object per line (the JSON forms in
  :mod:`pyflink_gcp.bigquery.json_rows`); BigQuery matches keys to columns by name.
- ``AVRO``: an Avro container file (fastavro, deflate blocks) whose schema is derived from the
  table's: BigQuery's Avro types with logical types (TIMESTAMP as ``timestamp-micros``, DATE as
  ``date``, TIME as ``time-micros``, NUMERIC/BIGNUMERIC as ``decimal`` 38/9 and 77/38,
  DATETIME as a string with ``logicalType: datetime``), loaded with
  ``use_avro_logical_types``.
- ``PARQUET``: a Parquet file (pyarrow, snappy) with the table's columns as Arrow types
  (TIMESTAMP as UTC microseconds, DATETIME as microseconds without a time zone, NUMERIC and
  BIGNUMERIC as decimal128(38, 9) and decimal256(76, 38)); REPEATED columns are Parquet lists,
  loaded with list inference. Rows are held and written a row group (up to 2,000 rows) at a
  time.

Avro and Parquet files always carry every column, in schema order: BigQuery matches them by
name, the local emulator by position. fastavro and pyarrow come with apache-flink.
"""

from __future__ import annotations

import decimal
import json
import zlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from datetime import datetime, time
from decimal import Decimal
from typing import Any, ClassVar

from pyflink_gcp.bigquery import rows, values
from pyflink_gcp.bigquery.json_rows import JSON_CONVERTERS
from pyflink_gcp.bigquery.options import FileFormat
from pyflink_gcp.bigquery.rows import ColumnTree, SchemaNotSupportedError
from pyflink_gcp.bigquery.schema_update import SchemaUpdate
from pyflink_gcp.bigquery.values import RowError
from pyflink_gcp.core.errors import WriteError

_MICROS_PER_SECOND = 1_000_000
_EPOCH_CIVIL = datetime(1970, 1, 1)
#: Rows a Parquet file holds before it writes them as one row group.
_ROW_GROUP_ROWS = 2_000
#: A Parquet row's size before the first row group tells (bytes, compressed).
_FIRST_ROW_BYTES = 64


def _decimal(scale: int, precision: int) -> Any:
    """The converter of NUMERIC (38, 9) or BIGNUMERIC (77, 38) values to a Decimal of exactly
    ``scale`` places: more places are rounded half away from zero, as BigQuery rounds them; more
    integer digits than the type holds are a RowError."""
    quantum = Decimal(1).scaleb(-scale)
    context = decimal.Context(prec=precision + 2, rounding=decimal.ROUND_HALF_UP)
    limit = precision - scale

    def convert(value: Any) -> Decimal:
        number = Decimal(values.to_numeric(value))
        if number and number.adjusted() >= limit:
            raise RowError(f"{value!r:.60} has more than {limit} digits before the point")
        return number.quantize(quantum, context=context)

    return convert


def _time_micros(value: Any) -> int:
    parsed = time.fromisoformat(values.to_time(value))
    return (
        (parsed.hour * 60 + parsed.minute) * 60 + parsed.second
    ) * _MICROS_PER_SECOND + parsed.microsecond


def _civil_micros(value: Any) -> int:
    delta = datetime.fromisoformat(values.to_datetime(value)) - _EPOCH_CIVIL
    return (delta.days * 86_400 + delta.seconds) * _MICROS_PER_SECOND + delta.microseconds


#: BigQuery type → converter, for Avro (``DATETIME`` stays the civil-time string).
AVRO_CONVERTERS: dict[str, Any] = {
    **JSON_CONVERTERS,
    "BYTES": values.to_bytes,
    "TIMESTAMP": values.to_timestamp,
    "DATE": values.to_date,
    "TIME": _time_micros,
    "NUMERIC": _decimal(9, 38),
    "BIGNUMERIC": _decimal(38, 77),
}
#: BigQuery type → converter, for Parquet (``DATETIME`` as civil microseconds).
PARQUET_CONVERTERS: dict[str, Any] = {
    **AVRO_CONVERTERS,
    "DATETIME": _civil_micros,
    "BIGNUMERIC": _decimal(38, 76),
}

_AVRO_TYPES: dict[str, Any] = {
    "INT64": "long",
    "FLOAT64": "double",
    "BOOL": "boolean",
    "STRING": "string",
    "BYTES": "bytes",
    "TIMESTAMP": {"type": "long", "logicalType": "timestamp-micros"},
    "DATE": {"type": "int", "logicalType": "date"},
    "DATETIME": {"type": "string", "logicalType": "datetime"},
    "TIME": {"type": "long", "logicalType": "time-micros"},
    "NUMERIC": {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 9},
    "BIGNUMERIC": {"type": "bytes", "logicalType": "decimal", "precision": 77, "scale": 38},
    "JSON": {"type": "string", "sqlType": "JSON"},
    "GEOGRAPHY": {"type": "string", "sqlType": "GEOGRAPHY"},
    "INTERVAL": "string",
}


def _check_name(name: str) -> str:
    if not rows._IDENTIFIER.match(name):
        raise SchemaNotSupportedError(
            f"column name {name!r} cannot be written to Avro (letters, digits and underscores, "
            "not starting with a digit)"
        )
    return name


def avro_schema(columns: Sequence[Any]) -> dict[str, Any]:
    """The Avro record schema of a table's columns (``ColumnTree.columns``)."""

    def field(column: Any, scope: str) -> dict[str, Any]:
        name = _check_name(column.name)
        if column.children:
            kind: Any = {
                "type": "record",
                "name": f"{scope}_{name}",
                "fields": [field(c, f"{scope}_{name}") for c in column.children.values()],
            }
        else:
            kind = _AVRO_TYPES[column.bq_type]
        if column.repeated:
            return {"name": name, "type": {"type": "array", "items": kind}, "default": []}
        if column.required:
            return {"name": name, "type": kind}
        return {"name": name, "type": ["null", kind], "default": None}

    return {"type": "record", "name": "row", "fields": [field(c, "row") for c in columns]}


def arrow_schema(columns: Sequence[Any]) -> Any:
    """The Arrow schema of a table's columns, for its Parquet files."""
    import pyarrow as pa

    scalars = {
        "INT64": pa.int64(),
        "FLOAT64": pa.float64(),
        "BOOL": pa.bool_(),
        "STRING": pa.string(),
        "BYTES": pa.binary(),
        "TIMESTAMP": pa.timestamp("us", tz="UTC"),
        "DATE": pa.date32(),
        "DATETIME": pa.timestamp("us"),
        "TIME": pa.time64("us"),
        "NUMERIC": pa.decimal128(38, 9),
        "BIGNUMERIC": pa.decimal256(76, 38),
        "JSON": pa.string(),
        "GEOGRAPHY": pa.string(),
        "INTERVAL": pa.string(),
    }

    def field(column: Any) -> Any:
        if column.children:
            kind = pa.struct([field(c) for c in column.children.values()])
        else:
            kind = scalars[column.bq_type]
        if column.repeated:
            return pa.field(column.name, pa.list_(pa.field("element", kind, nullable=False)))
        return pa.field(column.name, kind, nullable=not column.required)

    return pa.schema([field(c) for c in columns])


def _required(columns: Sequence[Any]) -> tuple[tuple[Any, tuple[Any, ...]], ...]:
    """The columns a row must be checked for, each with the checks of its fields (computed
    once per file, not per row): REQUIRED ones and records with REQUIRED fields."""
    checks = []
    for column in columns:
        inner = _required(tuple(column.children.values())) if column.children else ()
        if column.required or inner:
            checks.append((column, inner))
    return tuple(checks)


def _check_required(
    row: Mapping[str, Any], checks: Sequence[tuple[Any, tuple[Any, ...]]], prefix: str = ""
) -> None:
    for column, inner in checks:
        value = row.get(column.name)
        if value is None:
            if column.required:
                raise RowError(f"column {prefix}{column.name} is REQUIRED and has no value")
            continue
        if inner:
            for item in value if column.repeated else (value,):
                _check_required(item, inner, f"{prefix}{column.name}.")


class PartWriter(ABC):
    """One in-progress file of one table. ``write`` converts a row and raises RowError before
    anything of that row is in the file; ``finish`` leaves a complete file for a load job.

    Args:
        path: The local file to write.
        fields: The table's schema (``google.cloud.bigquery.SchemaField`` s).
        ignore_unknown_values: Drop row keys that are not columns instead of rejecting the row.
        max_file_bytes: The size the file is rolled at (a Parquet file holds fewer rows).
    """

    #: The extension in the file's name.
    extension: ClassVar[str]
    converters: ClassVar[Mapping[str, Any]]

    def __init__(
        self, path: str, fields: Sequence[Any], ignore_unknown_values: bool, max_file_bytes: int
    ) -> None:
        self.path = path
        self._tree = ColumnTree(fields, self.converters)
        self._checks = _required(self._tree.columns)
        self._ignore_unknown = ignore_unknown_values
        self._max_bytes = max_file_bytes
        self.rows = 0

    def _convert(self, row: Mapping[str, Any]) -> dict[str, Any]:
        converted = self._tree.convert(row, self._ignore_unknown)
        if self._checks:
            _check_required(converted, self._checks)
        return converted

    @abstractmethod
    def write(self, row: Mapping[str, Any]) -> None:
        """Convert and write ``row``; RowError when it does not fit the table."""

    @property
    @abstractmethod
    def size(self) -> int:
        """The file's size so far, rows held for it included (estimated for Parquet)."""

    @abstractmethod
    def finish(self) -> None:
        """Complete and close the file."""

    @abstractmethod
    def abort(self) -> None:
        """Close the file without completing it (it is never loaded)."""


class JsonPartWriter(PartWriter):
    extension = ".json"
    converters = JSON_CONVERTERS

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._file = open(self.path, "wb")  # noqa: SIM115 - closed by finish() or abort()
        self._size = 0

    def write(self, row: Mapping[str, Any]) -> None:
        converted = self._convert(row)
        try:
            text = json.dumps(converted, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
            line = text.encode("utf-8") + b"\n"
        except ValueError as exc:  # NaN, a lone surrogate
            raise RowError(f"cannot write the row as JSON: {exc}") from None
        self._file.write(line)
        self._size += len(line)
        self.rows += 1

    @property
    def size(self) -> int:
        return self._size

    def finish(self) -> None:
        self._file.close()

    abort = finish


def _avro_long(value: int) -> bytes:
    """An Avro ``long``: zig-zag, then base-128 varint."""
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while encoded & ~0x7F:
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7
    out.append(encoded)
    return bytes(out)


class AvroPartWriter(PartWriter):
    extension = ".avro"
    converters = AVRO_CONVERTERS

    def __init__(self, *args: Any) -> None:
        import fastavro

        super().__init__(*args)
        schema = fastavro.parse_schema(avro_schema(self._tree.columns))
        self._file = open(self.path, "wb")  # noqa: SIM115 - closed by finish() or abort()
        self._writer = fastavro.write.Writer(self._file, schema, codec="deflate")
        self._final_size = 0

    def write(self, row: Mapping[str, Any]) -> None:
        converted = self._convert(row)
        block: Any = self._writer.io  # the block being built (a memory buffer)
        start = block.tell()
        try:
            self._writer.write(converted)
        except (ValueError, TypeError, OverflowError) as exc:
            self._drop_after(start)
            raise RowError(f"cannot write the row as Avro: {exc}") from None
        self.rows += 1

    def _drop_after(self, start: int) -> None:
        """Nothing of a rejected row stays in the file: the rows before it in the block being
        built are written as a block of their own (the Avro container layout: row count,
        byte count, raw-deflated rows, sync marker), and the rejected row's bytes dropped."""
        writer: Any = self._writer
        block: Any = writer.io
        rows_before = writer.block_count
        data = block.getvalue()[:start]
        block.clear()
        writer.block_count = 0
        if rows_before:
            deflate = zlib.compressobj(wbits=-15)
            packed = deflate.compress(data) + deflate.flush()
            self._file.write(
                _avro_long(rows_before) + _avro_long(len(packed)) + packed + writer.sync_marker
            )

    @property
    def size(self) -> int:
        if self._file.closed:
            return self._final_size
        block: Any = self._writer.io
        return self._file.tell() + block.tell()

    def finish(self) -> None:
        self._writer.flush()
        self._final_size = self._file.tell()
        self._file.close()

    def abort(self) -> None:
        self._file.close()


class ParquetPartWriter(PartWriter):
    extension = ".parquet"
    converters = PARQUET_CONVERTERS

    def __init__(self, *args: Any) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        super().__init__(*args)
        self._pa = pa
        self._schema = arrow_schema(self._tree.columns)
        self._sink = pa.OSFile(self.path, "wb")
        self._writer = pq.ParquetWriter(self._sink, self._schema, compression="snappy")
        self._held: list[dict[str, Any]] = []
        self._repeated = tuple(c.name for c in self._tree.columns if c.repeated)
        self._row_bytes = _FIRST_ROW_BYTES
        self._final_size = 0

    def write(self, row: Mapping[str, Any]) -> None:
        converted = self._convert(row)
        for name in self._repeated:  # an absent REPEATED column is an empty list, not null
            converted.setdefault(name, [])
        self._held.append(converted)
        self.rows += 1
        held = len(self._held)
        if held >= _ROW_GROUP_ROWS or held * self._row_bytes >= self._max_bytes:
            self._write_group()

    def _write_group(self) -> None:
        if not self._held:
            return
        held, self._held = self._held, []
        try:
            table = self._pa.Table.from_pylist(held, schema=self._schema)
        except (self._pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
            raise WriteError(
                f"converted rows did not fit the Parquet schema of {self.path}: {exc}"
            ) from exc
        self._writer.write_table(table)
        self._row_bytes = max(1, self._sink.tell() // self.rows)

    @property
    def size(self) -> int:
        if self._sink.closed:
            return self._final_size
        return self._sink.tell() + len(self._held) * self._row_bytes

    def finish(self) -> None:
        self._write_group()
        self._writer.close()
        self._final_size = self._sink.tell()
        self._sink.close()

    def abort(self) -> None:
        self._held = []
        self._sink.close()


_WRITERS: dict[FileFormat, type[PartWriter]] = {
    FileFormat.NEWLINE_DELIMITED_JSON: JsonPartWriter,
    FileFormat.AVRO: AvroPartWriter,
    FileFormat.PARQUET: ParquetPartWriter,
}


def part_writer_type(file_format: FileFormat) -> type[PartWriter]:
    """The writer class of ``file_format``."""
    return _WRITERS[file_format]


def load_job_config(
    file_format: FileFormat, schema_update: SchemaUpdate = SchemaUpdate.NONE
) -> Any:
    """The ``LoadJobConfig`` that appends files of ``file_format`` to an existing table, with
    the ``schemaUpdateOptions`` of ``schema_update``. The writers updated the table's schema
    when they opened it; the options make a load that still meets a table without a column
    of its files (a table dropped and created again meanwhile) add it rather than fail."""
    from google.cloud import bigquery

    config = bigquery.LoadJobConfig(
        source_format=getattr(bigquery.SourceFormat, file_format.value),
        write_disposition=bigquery.WriteDisposition.WRITE_APPEND,
        create_disposition=bigquery.CreateDisposition.CREATE_NEVER,
    )
    if schema_update.load_options:
        config.schema_update_options = schema_update.load_options
    if file_format is FileFormat.AVRO:
        config.use_avro_logical_types = True
    elif file_format is FileFormat.PARQUET:
        options = bigquery.ParquetOptions()
        options.enable_list_inference = True
        config.parquet_options = options
    return config
