"""Rows as Arrow record batches: the fast encoding for tables of plain scalar columns.

The Storage Write API takes a request's rows either as serialized protobuf messages
(:mod:`pyflink_gcp.bigquery.rows`) or as one Arrow IPC record batch with an Arrow schema. Arrow
is built a column at a time by the Arrow C++ converter, and the service (and the emulator) load
it without decoding rows one by one. So Arrow rows cost less CPU than protobuf rows on both
sides: this encoder, checks included, spends less per row than the protobuf encoder, and the
server that loads them far less (``bench/README.md``, BigQuery, has the figures).

Arrow's converter is more forgiving than a column type allows (it truncates ``1.5`` to an INT64,
reads a ``str`` as BYTES), so an :class:`ArrowEncoder` only takes a batch whose every value has
exactly the Python type the column's Arrow type stores without conversion, whose keys are all
columns in their exact spelling, and whose REQUIRED columns have no nulls. Anything else (a
TIMESTAMP as text, a NUMERIC as a string, a column name in another case, an unknown key) returns
None, and the writer encodes that batch as protobuf rows, whose lenient per-row conversion and
per-row errors decide. So Arrow changes how valid rows travel, never which rows are valid. The
same holds for a TIMESTAMP in a range where an int is another unit than microseconds
(:func:`~pyflink_gcp.bigquery.values.epoch_micros`): the protobuf rows refuse those ints.

Tables with a column Arrow is not used for (RECORD, REPEATED, JSON, DATETIME, TIME, GEOGRAPHY,
BIGNUMERIC, INTERVAL, RANGE) are written as protobuf rows throughout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pyflink_gcp.bigquery.values import (
    MICROS_FROM,
    SECONDS_FROM,
    TIMESTAMP_MAX_MICROS,
    TIMESTAMP_MIN_MICROS,
)

#: BigQuery type -> (Arrow type, the exact Python types Arrow stores without a lossy conversion).
_TYPES: dict[str, tuple[pa.DataType, frozenset[type]]] = {
    "INT64": (pa.int64(), frozenset({int})),
    "FLOAT64": (pa.float64(), frozenset({float, int})),
    "BOOL": (pa.bool_(), frozenset({bool})),
    "STRING": (pa.string(), frozenset({str})),
    "BYTES": (pa.binary(), frozenset({bytes})),
    # Ints are epoch microseconds and naive datetimes UTC, as in the protobuf encoding; a batch
    # with an int that can only be another unit is left to the protobuf rows (_other_unit).
    "TIMESTAMP": (pa.timestamp("us", tz="UTC"), frozenset({int, datetime})),
    "DATE": (pa.date32(), frozenset({date})),
    # NUMERIC is precision 38, scale 9; a value with more digits fails the batch (ArrowInvalid).
    "NUMERIC": (pa.decimal128(38, 9), frozenset({Decimal, int})),
}
_ALIASES = {
    "INTEGER": "INT64",
    "FLOAT": "FLOAT64",
    "BOOLEAN": "BOOL",
    "DECIMAL": "NUMERIC",
}
_NONE = type(None)


def _other_unit(array: pa.Array) -> bool:
    """Whether a TIMESTAMP column holds a value in the ranges where
    :func:`~pyflink_gcp.bigquery.values.epoch_micros` refuses an int (seconds, milliseconds,
    nanoseconds). A ``datetime`` in those years goes as protobuf rows too, which take it."""
    micros = array.cast(pa.int64())
    suspect = pc.or_(
        pc.and_(pc.greater_equal(micros, SECONDS_FROM), pc.less(micros, MICROS_FROM)),
        pc.or_(pc.greater(micros, TIMESTAMP_MAX_MICROS), pc.less(micros, TIMESTAMP_MIN_MICROS)),
    )
    return bool(pc.any(suspect).as_py())


class ArrowEncoder:
    """Encodes a batch of one table's rows as a serialized Arrow record batch.

    :meth:`for_schema` returns None for a schema Arrow is not used for; the constructor raises
    ValueError for one.

    Attributes:
        serialized_schema: The Arrow IPC schema message sent as the request's writer schema.
    """

    def __init__(self, fields: Sequence[Any], *, ignore_unknown_values: bool = False) -> None:
        if not fields:
            raise ValueError("a table without columns")
        arrow_fields = []
        columns = []
        required = []
        timestamps = []
        for field in fields:
            bq_type = str(field.field_type).upper()
            mode = (field.mode or "NULLABLE").upper()
            known = _TYPES.get(_ALIASES.get(bq_type, bq_type))
            if known is None or mode == "REPEATED":
                raise ValueError(f"column {field.name!r} ({mode} {bq_type}) has no Arrow form here")
            arrow_type, python_types = known
            arrow_fields.append(pa.field(field.name, arrow_type, nullable=mode != "REQUIRED"))
            columns.append((field.name, arrow_type, python_types | {_NONE}))
            if mode == "REQUIRED":
                required.append(len(columns) - 1)
            if arrow_type == pa.timestamp("us", tz="UTC"):
                timestamps.append(len(columns) - 1)
        self._schema = pa.schema(arrow_fields)
        self._columns = tuple(columns)
        self._required = tuple(required)
        self._timestamps = tuple(timestamps)
        self._names = frozenset(name for name, _, _ in columns)
        self._lower_names = frozenset(name.lower() for name in self._names)
        self._ignore_unknown = ignore_unknown_values
        self.serialized_schema: bytes = self._schema.serialize().to_pybytes()

    @classmethod
    def for_schema(
        cls, fields: Sequence[Any], *, ignore_unknown_values: bool = False
    ) -> ArrowEncoder | None:
        """An encoder for a table of these columns, or None if a column is not Arrow-encoded."""
        try:
            return cls(fields, ignore_unknown_values=ignore_unknown_values)
        except ValueError:
            return None

    def encode(self, rows: Sequence[Mapping[str, Any]]) -> bytes | None:
        """The serialized record batch of ``rows``, or None if a row needs the protobuf path."""
        names = self._names
        for row in rows:
            if not names.issuperset(row):
                # A key in another case is a column to the protobuf encoder (which matches names
                # case-insensitively); with ignore_unknown_values only truly unknown keys may be
                # left out here.
                if not self._ignore_unknown:
                    return None
                lower = self._lower_names
                if any(str(key).lower() in lower for key in row if key not in names):
                    return None
        arrays = []
        try:
            for name, arrow_type, python_types in self._columns:
                values = [row.get(name) for row in rows]
                if not python_types.issuperset(map(type, values)):
                    return None
                arrays.append(pa.array(values, type=arrow_type))
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            return None
        for index in self._required:
            if arrays[index].null_count:
                return None
        for index in self._timestamps:
            if _other_unit(arrays[index]):
                return None
        batch = pa.RecordBatch.from_arrays(arrays, schema=self._schema)
        return batch.serialize().to_pybytes()  # type: ignore[no-any-return]
