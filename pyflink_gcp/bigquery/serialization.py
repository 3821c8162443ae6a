"""What the BigQuery sink writes: a row (a dict keyed by column name) per record, and the schema
of the tables the sink may create (a :class:`~pyflink_gcp.bigquery.table_spec.TableSchema`)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime, time
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from google.cloud.bigquery import SchemaField

from pyflink_gcp.bigquery.table_spec import TableSchema, TableSchemaError, as_table_schema
from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.functions import RecordOnly, takes_record_only, with_context

if TYPE_CHECKING:
    from pyflink_gcp.bigquery.destinations import TableDestination
    from pyflink_gcp.core.types import WriterContext

#: The pseudo-columns of a change-data-capture row (not table columns).
CHANGE_TYPE = "_CHANGE_TYPE"
CHANGE_SEQUENCE_NUMBER = "_CHANGE_SEQUENCE_NUMBER"

#: Re-exported: the table spec was defined here first, and callers import it from here.
__all__ = [
    "CHANGE_SEQUENCE_NUMBER",
    "CHANGE_TYPE",
    "BigQuerySerializer",
    "SchemaSpec",
    "TableSchema",
    "TableSchemaError",
    "as_serializer",
    "as_table_schema",
    "has_schema",
    "row_payload",
]


#: What ``schema`` may be: a fixed schema, or a function of the destination returning one.
SchemaSpec = (
    TableSchema
    | Sequence[SchemaField]
    | Callable[["TableDestination"], "TableSchema | Sequence[SchemaField] | None"]
)


class BigQuerySerializer:
    """Turns a record into the row written to its table.

    Subclass it, or build one with :meth:`of`. ``serialize(record, context)`` returns a dict
    keyed by column name (or None to skip the record); values may be given in their natural
    Python form (a ``datetime`` or an ISO 8601 string for a TIMESTAMP, a ``Decimal`` or a string
    for a NUMERIC, a dict for a RECORD or JSON column...). Change data capture rows also carry
    ``_CHANGE_TYPE`` (``"UPSERT"`` or ``"DELETE"``) and optionally ``_CHANGE_SEQUENCE_NUMBER``.

    ``schema(destination)`` returns the schema of a table the sink may create: a
    :class:`TableSchema`, or a list of ``google.cloud.bigquery.SchemaField`` (None: this
    serializer cannot create tables). It is called once per table writer, not per record, and
    its result is converted then. It may return a different :class:`TableSchema` per table,
    and with it different partitioning, clustering and labels: a table per region, say, each
    partitioned by day on ``event_time`` and labelled with its region::

        class RegionEvents(BigQuerySerializer):
            def serialize(self, record, context):
                return record

            def schema(self, destination):  # destination.table: events_eu, events_us...
                return TableSchema.of(
                    [("event_time", "TIMESTAMP", "REQUIRED"), ("user_id", "STRING")],
                    time_partitioning=TimePartitioning(type_="DAY", field="event_time"),
                    labels={"region": destination.table.removeprefix("events_")},
                )
    """

    def serialize(self, record: Any, context: WriterContext) -> Mapping[str, Any] | None:
        """The row of ``record`` (None skips it)."""
        raise NotImplementedError

    def schema(self, destination: TableDestination) -> TableSchema | Sequence[SchemaField] | None:
        """The schema of ``destination`` if the sink may create it (default: None)."""
        return None

    @staticmethod
    def of(
        to_row: Callable[[Any, WriterContext], Mapping[str, Any] | None]
        | Callable[[Any], Mapping[str, Any] | None]
        | None = None,
        schema: SchemaSpec | None = None,
    ) -> BigQuerySerializer:
        """A serializer from a function ``(record, context) -> row`` (or ``(record) -> row``;
        default: the record is the row) and a schema: a :class:`TableSchema`, a list of
        ``SchemaField`` (converted here, once), or a function of the destination returning
        either.

        Raises:
            ConfigurationError: ``to_row`` is not callable, or ``schema`` none of the above.
        """
        if to_row is not None:
            to_row = with_context(to_row, "row function (to_row)")
        if schema is not None and not callable(schema):
            schema = as_table_schema(schema)
        return _FunctionSerializer(to_row, schema)


class _FunctionSerializer(BigQuerySerializer):
    __slots__ = ("_to_row", "_schema")

    def __init__(self, to_row: Any, schema: Any) -> None:
        self._to_row = to_row
        self._schema = schema

    def serialize(self, record: Any, context: WriterContext) -> Mapping[str, Any] | None:
        if self._to_row is None:
            return record  # type: ignore[no-any-return]
        return self._to_row(record, context)  # type: ignore[no-any-return]

    def schema(self, destination: TableDestination) -> TableSchema | Sequence[SchemaField] | None:
        if self._schema is None or isinstance(self._schema, TableSchema):
            return self._schema
        return self._schema(destination)  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"BigQuerySerializer.of({self._to_row!r}, schema={self._schema!r})"


def has_schema(serializer: Any) -> bool:
    """Whether ``serializer`` can describe the tables it writes (needed to create them)."""
    method = getattr(serializer, "schema", None)
    if not callable(method):
        return False
    if isinstance(serializer, _FunctionSerializer):
        return serializer._schema is not None
    return type(serializer).schema is not BigQuerySerializer.schema or not isinstance(
        serializer, BigQuerySerializer
    )


def as_serializer(serializer: Any, sink: str) -> Any:
    """The serializer the sink calls as ``(record, context)``, decided once at ``build()``.

    A :class:`BigQuerySerializer` (or any object with ``serialize``) whose ``serialize`` takes
    ``(record, context)`` is used as it is; one taking only the record is wrapped, keeping its
    ``schema``. A plain callable is adapted by :func:`~pyflink_gcp.core.functions.with_context`.

    Raises:
        ConfigurationError: ``serializer`` is neither.
    """
    method = getattr(serializer, "serialize", None)
    if callable(method):
        if not takes_record_only(method):
            return serializer
        schema = serializer.schema if has_schema(serializer) else None
        return _FunctionSerializer(RecordOnly(method), schema)
    if callable(serializer):
        return with_context(serializer, "serializer", sink)
    raise ConfigurationError(
        f"sink '{sink}': the serializer must be a BigQuerySerializer or a callable "
        f"(record, context) -> row dict, got {type(serializer).__name__}"
    )


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    return repr(value)


def row_payload(element: Any) -> bytes:
    """The dead-letter payload of a row: its JSON (bytes as base64, times as ISO 8601)."""
    try:
        return json.dumps(element, default=_json_default, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError):
        return repr(element).encode("utf-8", "replace")
