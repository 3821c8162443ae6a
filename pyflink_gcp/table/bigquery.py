"""``'connector' = 'gcp-bigquery'``: a table's rows appended by the BigQuery DataStream sink.

Each column goes to the table column of the same name. Under ``create-disposition =
create-if-needed`` (the default) a missing table is created with a schema derived from the
DDL's columns (:func:`table_schema`), at most ``sink.max-created-destinations`` per subtask and
``sink.max-created-destinations.per`` (the DataStream sinks' creation budget, 500 per hour by
default): a template over a column with unbounded values fails the job at that bound instead of
creating tables without end.

Types: CHAR/VARCHAR → STRING, BOOLEAN → BOOL, BINARY/VARBINARY → BYTES, TINYINT to BIGINT →
INT64, FLOAT/DOUBLE → FLOAT64, DECIMAL(p, s) → NUMERIC when it fits (s ≤ 9, p - s ≤ 29) else
BIGNUMERIC, DATE → DATE, TIME → TIME, TIMESTAMP and TIMESTAMP_LTZ → TIMESTAMP (a TIMESTAMP
without zone is taken as UTC; top-level columns keep their microseconds), ROW → RECORD,
ARRAY<T> → REPEATED T, MAP<K, V> → REPEATED RECORD<key K, value V>. NOT NULL columns are
REQUIRED. Other types (INTERVAL, MULTISET, nested ARRAYs) have no BigQuery column and fail the
job when it starts.

The ``table.*`` options give the tables the sink creates their partitioning (by time, or by
integer range), clustering, labels, description and KMS key (:func:`table_settings`); each
maps to an argument of the :class:`~pyflink_gcp.bigquery.TableSchema`, which checks it against
BigQuery's rules when the writer opens, and an error names the options and their values. They
apply to tables the sink creates, never to existing ones.

A row whose ``table`` template renders no valid table id (a NULL column, say) is unroutable: it
goes to the failure handler as its JSON.

``write-method`` ``buffered-stream`` and ``file-loads`` are the DataStream sink's exactly-once
methods: the Java sink runs the bridge's committer operator after the writer, which publishes
each checkpoint's rows once it completed (``file-loads`` stages files in
``file-loads.staging-location``, a ``gs://`` prefix or a ``file://`` directory).

A table declared with ``PRIMARY KEY (...) NOT ENFORCED`` takes a changelog: every row is sent
as a change-data-capture row, ``_CHANGE_TYPE`` ``UPSERT`` for an insert or ``UPDATE_AFTER`` and
``DELETE`` for a delete, to tables whose primary key is the DDL's (the tables the sink creates
get it; an existing table needs its own). ``ordering-mode`` then defaults to ``per-table``, so
one key's changes commit in the order the planner produced them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from google.cloud.bigquery import PartitionRange, RangePartitioning, SchemaField, TimePartitioning

from pyflink_gcp.bigquery import (
    BigQueryFileLoadsOptions,
    BigQuerySerializer,
    BigQuerySink,
    BigQueryWriterOptions,
    FileFormat,
    MissingValues,
    OrderingMode,
    SchemaUpdate,
    TableSchema,
    UnknownFields,
    WriteMethod,
)
from pyflink_gcp.bigquery.serialization import CHANGE_TYPE, TableSchemaError
from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.runtime import DynamicSink
from pyflink_gcp.routing import bigquery_tables, names, route_by_template
from pyflink_gcp.table.adapter import (
    configure,
    destination_template,
    writer_options,
    written_columns,
)
from pyflink_gcp.table.options import CONNECTORS
from pyflink_gcp.table.pubsub import row_json
from pyflink_gcp.table.rows import LTZ, NTZ, Column, DeletedRow, TableInfo

IDENTIFIER = "gcp-bigquery"

_SIMPLE = {
    "CHAR": "STRING",
    "VARCHAR": "STRING",
    "BOOLEAN": "BOOL",
    "BINARY": "BYTES",
    "VARBINARY": "BYTES",
    "TINYINT": "INT64",
    "SMALLINT": "INT64",
    "INTEGER": "INT64",
    "BIGINT": "INT64",
    "FLOAT": "FLOAT64",
    "DOUBLE": "FLOAT64",
    "DATE": "DATE",
    "TIME_WITHOUT_TIME_ZONE": "TIME",
    NTZ: "TIMESTAMP",
    LTZ: "TIMESTAMP",
}
_WRITE_METHODS = {
    "storage-api-at-least-once": WriteMethod.STORAGE_API_AT_LEAST_ONCE,
    "buffered-stream": WriteMethod.BUFFERED_STREAM,
    "file-loads": WriteMethod.FILE_LOADS,
}
_FILE_FORMATS = {
    "parquet": FileFormat.PARQUET,
    "avro": FileFormat.AVRO,
    "json": FileFormat.NEWLINE_DELIMITED_JSON,
}
_ORDERING = {"none": OrderingMode.NONE, "per-table": OrderingMode.PER_TABLE}


def _decimal_type(type_: dict[str, Any]) -> str:
    precision, scale = int(type_["precision"]), int(type_["scale"])
    if scale <= 9 and precision - scale <= 29:
        return "NUMERIC"
    return "BIGNUMERIC"


def _field(name: str, type_: dict[str, Any], where: str, repeated: bool = False) -> SchemaField:
    root = type_["root"]
    mode = "REPEATED" if repeated else ("NULLABLE" if type_["nullable"] else "REQUIRED")
    if root in _SIMPLE:
        return SchemaField(name, _SIMPLE[root], mode=mode)
    if root == "DECIMAL":
        return SchemaField(name, _decimal_type(type_), mode=mode)
    if root == "ROW":
        fields = [_field(f["name"], f["type"], f"{where}.{f['name']}") for f in type_["fields"]]
        return SchemaField(name, "RECORD", mode=mode, fields=fields)
    if root == "ARRAY" and not repeated and type_["element"]["root"] not in ("ARRAY", "MAP"):
        return _field(name, type_["element"], where, repeated=True)
    if root == "MAP" and not repeated:
        entry = [
            _field("key", type_["key"], f"{where}.key"),
            _field("value", type_["value"], f"{where}.value"),
        ]
        return SchemaField(name, "RECORD", mode="REPEATED", fields=entry)
    raise ConfigurationError(
        f"column {where} of type {type_['sql']} has no BigQuery column type (supported: strings, "
        "booleans, bytes, integers, floats, DECIMAL, DATE, TIME, TIMESTAMP, TIMESTAMP_LTZ, ROW, "
        "ARRAY of a non-array type, MAP)"
    )


_RANGE = tuple(f"table.range-partitioning.{k}" for k in ("field", "start", "end", "interval"))


def _text(value: Any) -> str:
    """A parsed option value in its DDL form again, for messages."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, timedelta):
        return f"{value // timedelta(milliseconds=1)}ms"
    return str(value)


def _required(missing: str, present: str, values: Mapping[str, Any]) -> ConfigurationError:
    return ConfigurationError(
        f"Option '{missing}' of connector '{IDENTIFIER}' is required when '{present}' is set "
        f"(got '{_text(values[present])}')."
    )


def _labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        key, colon, value = (part.strip() for part in entry.partition(":"))
        if not colon or key in labels:
            problem = "a duplicate key" if colon else "no ':'"
            raise ConfigurationError(
                f"Invalid value for option 'table.labels' of connector '{IDENTIFIER}': expected "
                f"key:value pairs separated by commas, each key once ('{entry}' has {problem}), "
                f"got '{text}'."
            )
        labels[key] = value
    return labels


def table_settings(values: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`~pyflink_gcp.bigquery.TableSchema` arguments the ``table.*`` options set
    (parsed values; an option left out is unset).

    Raises:
        ConfigurationError: An option that needs another one without it, both partitionings,
            or labels that are no ``key:value`` list.
    """
    settings: dict[str, Any] = {}
    unit = values.get("table.partitioning.type")
    for key in ("table.partitioning.field", "table.partitioning.expiration"):
        if unit is None and values.get(key) is not None:
            raise _required("table.partitioning.type", key, values)
    if unit is not None:
        expiration = values.get("table.partitioning.expiration")
        settings["time_partitioning"] = TimePartitioning(
            type_=unit.upper(),
            field=values.get("table.partitioning.field"),
            expiration_ms=None if expiration is None else expiration // timedelta(milliseconds=1),
        )
    present = [k for k in _RANGE if values.get(k) is not None]
    if present and unit is not None:
        raise ConfigurationError(
            f"Options 'table.partitioning.type' ('{unit}') and '{present[0]}' "
            f"('{_text(values[present[0]])}') of connector '{IDENTIFIER}' exclude each other: a "
            "table is partitioned by time or by integer range, not both."
        )
    if present:
        for key in _RANGE:
            if values.get(key) is None:
                raise _required(key, present[0], values)
        field, start, end, interval = (values[k] for k in _RANGE)
        settings["range_partitioning"] = RangePartitioning(
            PartitionRange(start=start, end=end, interval=interval), field=field
        )
    if values.get("table.partitioning.require-filter") is not None:
        settings["require_partition_filter"] = values["table.partitioning.require-filter"]
    if values.get("table.clustering-fields"):
        settings["clustering_fields"] = list(values["table.clustering-fields"])
    if values.get("table.labels") is not None:
        settings["labels"] = _labels(values["table.labels"])
    for key, setting in (
        ("table.description", "description"),
        ("table.kms-key-name", "kms_key_name"),
    ):
        if values.get(key) is not None:
            settings[setting] = values[key]
    return settings


def table_schema(
    columns: tuple[Column, ...],
    primary_key: tuple[str, ...] = (),
    values: Mapping[str, Any] | None = None,
) -> TableSchema:
    """The schema of the tables the sink creates, from the DDL's columns and primary key, and
    the settings of its ``table.*`` options (``values``, parsed).

    Raises:
        ConfigurationError: A column type BigQuery has no column for, or ``table.*`` options
            BigQuery would refuse (naming the options and their values).
    """
    values = values or {}
    fields = [_field(c.name, c.type, c.name) for c in columns]
    try:
        return TableSchema.of(
            fields, primary_key=list(primary_key) or None, **table_settings(values)
        )
    except TableSchemaError as exc:
        target = f"TableSchema.{exc.setting}"
        keys = [o.key for o in CONNECTORS[IDENTIFIER].options if o.maps_to == target]
        shown = ", ".join(
            f"'{k}' = '{_text(values[k])}'" for k in keys if values.get(k) is not None
        )
        if not shown:
            raise
        raise ConfigurationError(
            f"Invalid table options of connector '{IDENTIFIER}': {shown}: {exc}"
        ) from exc


def _has_map(type_: dict[str, Any]) -> bool:
    if type_["root"] == "MAP":
        return True
    nested = [f["type"] for f in type_.get("fields", ())]
    nested += [type_[k] for k in ("element", "key", "value") if k in type_]
    return any(_has_map(t) for t in nested)


def _entries(value: Any, type_: dict[str, Any]) -> Any:
    """``value`` with every MAP as the list of ``{key, value}`` records BigQuery stores."""
    if value is None:
        return None
    root = type_["root"]
    if root == "MAP":
        return [
            {"key": _entries(k, type_["key"]), "value": _entries(v, type_["value"])}
            for k, v in value.items()
        ]
    if root == "ARRAY":
        return [_entries(v, type_["element"]) for v in value]
    if root == "ROW":
        return {f["name"]: _entries(value.get(f["name"]), f["type"]) for f in type_["fields"]}
    return value


class MapEntries:
    """The row function of tables with MAP columns: maps become repeated key/value records."""

    def __init__(self, columns: tuple[Column, ...]) -> None:
        self.columns = tuple((c.name, c.type) for c in columns if _has_map(c.type))

    def __call__(self, record: dict[str, Any], context: Any) -> dict[str, Any]:
        row = dict(record)
        for name, type_ in self.columns:
            row[name] = _entries(row[name], type_)
        return row


class ChangeRows:
    """The row function of a table with a primary key: each row as a CDC row.

    An insert or ``UPDATE_AFTER`` is an ``UPSERT`` of its key, a :class:`DeletedRow` a
    ``DELETE``; MAP columns become repeated records as in :class:`MapEntries`.
    """

    def __init__(self, columns: tuple[Column, ...]) -> None:
        self.entries = MapEntries(columns)

    def __call__(self, record: dict[str, Any], context: Any) -> dict[str, Any]:
        change = "DELETE" if isinstance(record, DeletedRow) else "UPSERT"
        row = self.entries(record, context) if self.entries.columns else dict(record)
        row[CHANGE_TYPE] = change
        return row


def build_sink(values: dict[str, Any], table: TableInfo) -> DynamicSink:
    """The BigQuery sink of a ``gcp-bigquery`` table."""
    builder = BigQuerySink.builder()
    selection = configure(builder, IDENTIFIER, values, table)
    columns = written_columns(selection, table)  # the created tables have no other column
    builder.set_writer_options(
        dataclasses.replace(
            writer_options(IDENTIFIER, values, BigQueryWriterOptions),
            schema_update=SchemaUpdate[values["sink.schema-update"].upper().replace("-", "_")],
            unknown_fields=UnknownFields[values["sink.unknown-fields"].upper().replace("-", "_")],
            missing_values=MissingValues[values["sink.missing-values"].upper().replace("-", "_")],
        )
    )
    template = destination_template(values, "table", table, names.bigquery_table_id)
    builder.set_destination_resolver(
        route_by_template(
            template,
            bigquery_tables(values["project"], values["dataset"]),
            unroutable=True,
            payload=row_json,
        )
    )
    try:
        schema = table_schema(columns, table.primary_key, values)
    except ConfigurationError as exc:
        raise ConfigurationError(f"sink '{table.sink_name}': {exc}") from exc
    to_row: Any = ChangeRows(columns) if table.primary_key else MapEntries(columns)
    plain = not table.primary_key and not to_row.columns
    builder.set_serializer(BigQuerySerializer.of(None if plain else to_row, schema))
    method = values["write-method"]
    builder.set_write_method(_WRITE_METHODS[method])
    if method == "file-loads":
        builder.set_file_loads_options(
            BigQueryFileLoadsOptions.builder()
            .staging_location(values["file-loads.staging-location"])
            .file_format(_FILE_FORMATS[values["file-loads.format"]])
            .min_load_interval(values["file-loads.min-load-interval"])
            .build()
        )
    ordering = values["ordering-mode"] or ("per-table" if table.primary_key else "none")
    if method != "file-loads" or values["ordering-mode"] is not None:
        builder.set_ordering_mode(_ORDERING[ordering])
    if values["storage-endpoint"] is not None:
        builder.set_storage_endpoint(values["storage-endpoint"])
    if values["rest-endpoint"] is not None:
        builder.set_rest_endpoint(values["rest-endpoint"])
    return builder.build()
