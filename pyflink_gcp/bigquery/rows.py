"""Rows as protobuf messages: a descriptor built from the table schema, rows encoded against
it, and primary keys compared by value.

The Storage Write API takes rows as serialized protobuf messages described by a
``DescriptorProto`` sent with the request. One :class:`RowEncoder` is built per distinct schema
(the tables of one schema share it: :mod:`pyflink_gcp.bigquery.tables`) and encodes their rows,
so the per-row cost is one message construction and one serialization in the protobuf C
extension. Values whose wire form differs from their natural Python form (TIMESTAMP, DATE,
NUMERIC, JSON...) are converted first, by the converters of :mod:`pyflink_gcp.bigquery.values`;
any other value that the message rejects is retried once through a lenient, column-by-column
conversion that also produces the error message naming it. The same column tree
(:class:`ColumnTree`) serves the staged files of load jobs with their own converters.

Wire types (as the Storage Write API documents them): TIMESTAMP → int64 epoch microseconds
(an int in another unit is refused: :func:`~pyflink_gcp.bigquery.values.epoch_micros`), DATE →
int32 days since the epoch, DATETIME/TIME → canonical strings, NUMERIC/BIGNUMERIC → decimal
strings, JSON → JSON text, RECORD → a nested message, REPEATED → a repeated field.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from pyflink_gcp.bigquery.serialization import CHANGE_SEQUENCE_NUMBER, CHANGE_TYPE
from pyflink_gcp.bigquery.values import (
    MICROS_FROM,
    SECONDS_FROM,
    TIMESTAMP_MAX_MICROS,
    TIMESTAMP_MIN_MICROS,
    RowError,
    kind_of,
    to_bool,
    to_bytes,
    to_change_type,
    to_date,
    to_datetime,
    to_float64,
    to_int64,
    to_json,
    to_numeric,
    to_sequence_number,
    to_string,
    to_time,
    to_timestamp,
)

_F = descriptor_pb2.FieldDescriptorProto
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class UnknownColumnError(RowError):
    """A row key that is no column of the table (``UnknownFields`` decides what follows)."""


class SchemaNotSupportedError(ValueError):
    """A table schema this sink cannot describe as a protobuf message."""


#: BigQuery type → (protobuf type, strict converter, wire type or None when always converted).
_SCALARS: dict[str, tuple[int, Callable[[Any], Any], type | None]] = {
    "INT64": (_F.TYPE_INT64, to_int64, int),
    "FLOAT64": (_F.TYPE_DOUBLE, to_float64, float),
    "BOOL": (_F.TYPE_BOOL, to_bool, bool),
    "STRING": (_F.TYPE_STRING, to_string, str),
    "BYTES": (_F.TYPE_BYTES, to_bytes, bytes),
    "TIMESTAMP": (_F.TYPE_INT64, to_timestamp, None),
    "DATE": (_F.TYPE_INT32, to_date, None),
    "DATETIME": (_F.TYPE_STRING, to_datetime, None),
    "TIME": (_F.TYPE_STRING, to_time, None),
    "NUMERIC": (_F.TYPE_STRING, to_numeric, None),
    "BIGNUMERIC": (_F.TYPE_STRING, to_numeric, None),
    "JSON": (_F.TYPE_STRING, to_json, None),
    "GEOGRAPHY": (_F.TYPE_STRING, to_string, str),
    "INTERVAL": (_F.TYPE_STRING, to_string, str),
}
_ALIASES = {
    "INTEGER": "INT64",
    "FLOAT": "FLOAT64",
    "BOOLEAN": "BOOL",
    "BIGDECIMAL": "BIGNUMERIC",
    "DECIMAL": "NUMERIC",
    "STRUCT": "RECORD",
}
#: Types whose ints are already the wire value (skipped by the always-convert pass; a
#: TIMESTAMP int is still checked for its unit, :func:`is_epoch_micros`).
_INT_WIRE = frozenset({"TIMESTAMP", "DATE"})


def bq_type(field: Any) -> str:
    """The canonical BigQuery type of a ``SchemaField`` (``INTEGER`` is ``INT64``, ...)."""
    name = str(field.field_type).upper()
    return _ALIASES.get(name, name)


def _as_list(value: Any) -> list[Any]:
    if isinstance(value, tuple):
        return list(value)
    raise RowError(f"REPEATED column takes a list, got {kind_of(value)}")


def _as_list_or_list(value: Any) -> list[Any]:
    return value if type(value) is list else _as_list(value)


class _Column:
    """One column (or RECORD sub-field): how to encode it and how to convert it leniently."""

    __slots__ = (
        "name",
        "bq_type",
        "repeated",
        "required",
        "scalar",
        "children",
        "by_lower",
        "special",
    )

    def __init__(self, field: Any, converters: Mapping[str, Callable[[Any], Any]] | None = None):
        self.name: str = field.name
        self.bq_type = bq_type(field)
        mode = (field.mode or "NULLABLE").upper()
        self.repeated = mode == "REPEATED"
        self.required = mode == "REQUIRED"
        self.children: dict[str, _Column] = {}
        self.scalar: Callable[[Any], Any] | None = None
        if self.bq_type == "RECORD":
            self.children = {sub.name: _Column(sub, converters) for sub in field.fields}
            if not self.children:
                raise SchemaNotSupportedError(f"RECORD column {self.name!r} has no fields")
        elif self.bq_type in _SCALARS:
            self.scalar = (
                _SCALARS[self.bq_type][1] if converters is None else converters[self.bq_type]
            )
        else:
            raise SchemaNotSupportedError(
                f"column {self.name!r} has type {field.field_type}, which the sink cannot write"
            )
        self.by_lower = {name.lower(): col for name, col in self.children.items()}
        # Whether natural values of this column need converting before the message takes them.
        self.special: bool = (self.scalar is not None and _SCALARS[self.bq_type][2] is None) or any(
            child.special for child in self.children.values()
        )

    def convert(self, value: Any, ignore_unknown: bool, path: str) -> Any:
        """The wire value of ``value`` (lenient; RowError names the column)."""
        if self.repeated:
            if not isinstance(value, list | tuple):
                raise RowError(f"column {path}: REPEATED column takes a list, got {kind_of(value)}")
            out = []
            for item in value:
                if item is None:
                    raise RowError(f"column {path}: REPEATED column cannot hold NULL elements")
                out.append(self._convert_one(item, ignore_unknown, path))
            return out
        return self._convert_one(value, ignore_unknown, path)

    def _convert_one(self, value: Any, ignore_unknown: bool, path: str) -> Any:
        if self.scalar is not None:
            try:
                return self.scalar(value)
            except RowError as exc:
                raise RowError(f"column {path}: {exc}") from None
        if not isinstance(value, Mapping):
            raise RowError(f"column {path}: RECORD column takes a dict, got {kind_of(value)}")
        return _convert_mapping(value, self.children, self.by_lower, ignore_unknown, path + ".")

    def convert_special(self, value: Any) -> Any:
        """Convert only what must be converted (fast path of special columns)."""
        if self.scalar is not None:
            if self.repeated:
                return [self.scalar(v) for v in _as_list_or_list(value)]
            if self.bq_type == "DATE" and type(value) is int:
                return value
            return self.scalar(value)
        if self.repeated:
            return [self._special_record(v) for v in _as_list_or_list(value)]
        return self._special_record(value)

    def _special_record(self, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        out = dict(value)
        for name, child in self.children.items():
            if child.special:
                v = out.get(name)
                if v is not None:
                    out[name] = child.convert_special(v)
        return out


def _convert_mapping(
    row: Mapping[str, Any],
    columns: Mapping[str, _Column],
    by_lower: Mapping[str, _Column],
    ignore_unknown: bool,
    prefix: str = "",
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        if value is None:
            continue
        column = columns.get(key)
        if column is None and isinstance(key, str):
            column = by_lower.get(key.lower())
        if column is None:
            if ignore_unknown:
                continue
            raise UnknownColumnError(f"no column {prefix}{key!s:.80} in the table schema")
        out[column.name] = column.convert(value, ignore_unknown, prefix + column.name)
    return out


class ColumnTree:
    """A schema's columns with one converter per BigQuery type, for encodings other than the
    protobuf rows here (the staged JSON of load jobs): the same names, modes, nesting and
    lenient conversion, only the scalar converters differ.

    Args:
        fields: The table's schema (``SchemaField`` s).
        converters: BigQuery type (``INT64``, ``TIMESTAMP``, ...) → the converter of a value.
    """

    __slots__ = ("_columns", "_by_lower")

    def __init__(self, fields: Sequence[Any], converters: Mapping[str, Callable[[Any], Any]]):
        columns = [_Column(f, converters) for f in fields]
        if not columns:
            raise SchemaNotSupportedError("the table has no columns")
        self._columns = {c.name: c for c in columns}
        self._by_lower = {c.name.lower(): c for c in columns}

    @property
    def columns(self) -> tuple[_Column, ...]:
        """The top-level columns in schema order (a column's ``children`` are its fields)."""
        return tuple(self._columns.values())

    def convert(self, row: Mapping[str, Any], ignore_unknown: bool) -> dict[str, Any]:
        """``row`` converted column by column; RowError names a column that does not fit."""
        return _convert_mapping(row, self._columns, self._by_lower, ignore_unknown)


def _add_fields(
    message: descriptor_pb2.DescriptorProto, columns: Sequence[_Column], scope: str
) -> None:
    for number, column in enumerate(columns, start=1):
        if not _IDENTIFIER.match(column.name):
            raise SchemaNotSupportedError(
                f"column name {column.name!r} is not supported by this sink (letters, digits "
                "and underscores, not starting with a digit)"
            )
        label = _F.LABEL_REPEATED if column.repeated else _F.LABEL_OPTIONAL
        if column.children:
            nested_name = f"{scope}_{column.name}"
            nested = message.nested_type.add(name=nested_name)
            _add_fields(nested, list(column.children.values()), nested_name)
            # A relative type name keeps the descriptor self-contained: the service resolves it
            # inside the message, without the package of the pool it was built in.
            message.field.add(
                name=column.name,
                number=number,
                type=_F.TYPE_MESSAGE,
                label=label,
                type_name=nested_name,
            )
        else:
            message.field.add(
                name=column.name, number=number, type=_SCALARS[column.bq_type][0], label=label
            )


class RowEncoder:
    """Encodes the rows of one table as serialized protobuf messages.

    Args:
        fields: The table's schema (``google.cloud.bigquery.SchemaField`` s).
        primary_key: The table's primary key columns (for change data capture), if any.
        ignore_unknown_values: Drop row keys that are not columns instead of rejecting the row.

    Attributes:
        descriptor: The ``DescriptorProto`` of plain rows.
        cdc_descriptor: The same plus the ``_CHANGE_TYPE`` / ``_CHANGE_SEQUENCE_NUMBER``
            pseudo-columns (field numbers after the columns, so plain rows encode identically).
    """

    def __init__(
        self,
        fields: Sequence[Any],
        primary_key: Sequence[str] = (),
        *,
        ignore_unknown_values: bool = False,
    ) -> None:
        columns = [_Column(f) for f in fields]
        if not columns:
            raise SchemaNotSupportedError("the table has no columns")
        self._columns = {c.name: c for c in columns}
        self._by_lower = {c.name.lower(): c for c in columns}
        self._ignore_unknown = ignore_unknown_values

        plain = descriptor_pb2.DescriptorProto(name="Row")
        _add_fields(plain, columns, "Row")
        cdc = descriptor_pb2.DescriptorProto()
        cdc.CopyFrom(plain)
        for offset, pseudo in enumerate((CHANGE_TYPE, CHANGE_SEQUENCE_NUMBER), start=1):
            cdc.field.add(
                name=pseudo,
                number=len(columns) + offset,
                type=_F.TYPE_STRING,
                label=_F.LABEL_OPTIONAL,
            )
        self.descriptor = plain
        self.cdc_descriptor = cdc

        package = f"pyflink_gcp_rows_{uuid.uuid4().hex}"
        file_proto = descriptor_pb2.FileDescriptorProto(
            name=f"{package}.proto", package=package, syntax="proto2"
        )
        file_proto.message_type.add().CopyFrom(cdc)
        pool = descriptor_pool.DescriptorPool()
        pool.Add(file_proto)
        self._message = message_factory.GetMessageClass(
            pool.FindMessageTypeByName(f"{package}.Row")
        )

        # (column, converter, a type whose values are already wire values) of every column that
        # needs converting; ints of a TIMESTAMP or DATE column go through untouched (those of
        # a TIMESTAMP once checked for their unit, below).
        specials: list[tuple[str, Callable[[Any], Any], type | None]] = [
            (
                c.name,
                c.convert_special,
                int if c.bq_type in _INT_WIRE and not c.repeated else None,
            )
            for c in columns
            if c.special
        ]
        # A string is iterable: a repeated field would take "abc" as ["a", "b", "c"].
        specials += [(c.name, _as_list, list) for c in columns if c.repeated and not c.special]
        specials += [
            (CHANGE_TYPE, to_change_type, None),
            (CHANGE_SEQUENCE_NUMBER, to_sequence_number, None),
        ]
        self._specials = tuple(specials)
        self._timestamps = tuple(
            c.name for c in columns if c.bq_type == "TIMESTAMP" and not c.repeated
        )
        pseudo_columns = _PseudoColumns().columns
        self._all_columns: dict[str, Any] = {**self._columns, **pseudo_columns}
        self._all_by_lower: dict[str, Any] = {**self._by_lower, **pseudo_columns}

        self.primary_key: tuple[str, ...] = ()
        key_converters = []
        for name in primary_key:
            column = self._columns.get(name) or self._by_lower.get(name.lower())
            if column is None or column.scalar is None or column.repeated:
                raise SchemaNotSupportedError(
                    f"primary key column {name!r} is not a scalar column of the table"
                )
            key_converters.append((column.name, column.scalar))
        self.primary_key = tuple(n for n, _ in key_converters)
        self._key_converters = tuple(key_converters)

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(self._columns)

    def encode(self, row: Mapping[str, Any]) -> bytes:
        """The serialized message of ``row``. Raises RowError for a row that does not fit."""
        converted: dict[str, Any] | None = None
        for name, convert, wire_type in self._specials:
            value = row.get(name)
            if value is not None and type(value) is not wire_type:
                if converted is None:
                    converted = dict(row)
                try:
                    converted[name] = convert(value)
                except RowError:
                    return self._encode_lenient(row)
        for name in self._timestamps:
            value = row.get(name)
            # is_epoch_micros, inlined: this runs for every row.
            if type(value) is int and not (
                MICROS_FROM <= value <= TIMESTAMP_MAX_MICROS
                or TIMESTAMP_MIN_MICROS <= value < SECONDS_FROM
            ):
                return self._encode_lenient(row)  # raises the RowError naming the unit
        try:
            return self._message(
                **(converted if converted is not None else row)
            ).SerializeToString()  # type: ignore[no-any-return]
        except (TypeError, ValueError, AttributeError):
            return self._encode_lenient(row)

    def _encode_lenient(self, row: Mapping[str, Any]) -> bytes:
        converted = _convert_mapping(
            row, self._all_columns, self._all_by_lower, self._ignore_unknown
        )
        try:
            return self._message(**converted).SerializeToString()  # type: ignore[no-any-return]
        except (TypeError, ValueError, AttributeError) as exc:
            raise RowError(f"cannot encode the row: {exc}") from None

    def key(self, row: Mapping[str, Any]) -> tuple[Any, ...]:
        """The row's primary key, compared by value (one key whatever its spelling)."""
        out = []
        for name, convert in self._key_converters:
            value = row.get(name)
            out.append(None if value is None else convert(value))
        return tuple(out)


class _PseudoColumn:
    """The lenient conversion of a change-data-capture pseudo-column."""

    __slots__ = ("name", "_convert")

    def __init__(self, name: str, convert: Callable[[Any], Any]) -> None:
        self.name = name
        self._convert = convert

    def convert(self, value: Any, ignore_unknown: bool, path: str) -> Any:
        try:
            return self._convert(value)
        except RowError as exc:
            raise RowError(f"column {path}: {exc}") from None


class _PseudoColumns:
    def __init__(self) -> None:
        self.columns = {
            CHANGE_TYPE: _PseudoColumn(CHANGE_TYPE, to_change_type),
            CHANGE_SEQUENCE_NUMBER: _PseudoColumn(CHANGE_SEQUENCE_NUMBER, to_sequence_number),
        }
