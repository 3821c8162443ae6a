"""What the BigQuery sink writes: a row (a dict keyed by column name) per record, and the schema
of the tables the sink may create."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date, datetime, time
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from google.cloud.bigquery import SchemaField

from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.functions import RecordOnly, takes_record_only, with_context

if TYPE_CHECKING:
    from pyflink_gcp.bigquery.destinations import TableDestination
    from pyflink_gcp.core.types import WriterContext

#: The pseudo-columns of a change-data-capture row (not table columns).
CHANGE_TYPE = "_CHANGE_TYPE"
CHANGE_SEQUENCE_NUMBER = "_CHANGE_SEQUENCE_NUMBER"


def _as_field(spec: Any) -> SchemaField:
    if isinstance(spec, SchemaField):
        return spec
    if isinstance(spec, tuple | list) and 2 <= len(spec) <= 3:
        name, field_type, *mode = spec
        return SchemaField(str(name), str(field_type), mode=mode[0] if mode else "NULLABLE")
    raise ConfigurationError(
        "a table schema field is a google.cloud.bigquery.SchemaField or a (name, type[, mode]) "
        f"tuple, got {spec!r}"
    )


class TableSchema:
    """The schema of a table the sink creates (``CreateDisposition.CREATE_IF_NEEDED``).

    Also tells the sink the table's primary key when the table's own metadata does not (for
    change data capture the key decides how requests are cut; see :class:`BigQuerySerializer`).

    Example::

        TableSchema.of(
            [SchemaField("order_id", "STRING", mode="REQUIRED"), ("amount", "NUMERIC")],
            primary_key=["order_id"],
        )
    """

    __slots__ = ("fields", "primary_key", "clustering_fields")

    def __init__(
        self,
        fields: Sequence[SchemaField],
        primary_key: Sequence[str] = (),
        clustering_fields: Sequence[str] = (),
    ) -> None:
        self.fields: tuple[SchemaField, ...] = tuple(_as_field(f) for f in fields)
        if not self.fields:
            raise ConfigurationError("a table schema needs at least one field")
        names = {f.name.lower() for f in self.fields}
        for column in (*primary_key, *clustering_fields):
            if column.lower() not in names:
                raise ConfigurationError(f"column {column!r} is not a field of the table schema")
        self.primary_key: tuple[str, ...] = tuple(primary_key)
        self.clustering_fields: tuple[str, ...] = tuple(clustering_fields)

    @staticmethod
    def of(
        fields: Iterable[Any],
        primary_key: Sequence[str] | None = None,
        clustering_fields: Sequence[str] | None = None,
    ) -> TableSchema:
        """A schema of ``fields`` (SchemaFields, nested RECORD fields included, or
        ``(name, type[, mode])`` tuples)."""
        return TableSchema(list(fields), tuple(primary_key or ()), tuple(clustering_fields or ()))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TableSchema):
            return NotImplemented
        return (self.fields, self.primary_key, self.clustering_fields) == (
            other.fields,
            other.primary_key,
            other.clustering_fields,
        )

    def __hash__(self) -> int:
        return hash((self.fields, self.primary_key))

    def __repr__(self) -> str:
        cols = ", ".join(f"{f.name} {f.field_type}" for f in self.fields)
        pk = f", primary_key={list(self.primary_key)}" if self.primary_key else ""
        return f"TableSchema([{cols}]{pk})"


def as_table_schema(schema: Any) -> TableSchema | None:
    """``schema`` as a :class:`TableSchema`: one already, a list of
    ``google.cloud.bigquery.SchemaField`` (the client library's own idiom; ``(name, type[,
    mode])`` tuples too), or None.

    Raises:
        ConfigurationError: ``schema`` is none of these.
    """
    if schema is None or isinstance(schema, TableSchema):
        return schema
    if isinstance(schema, list | tuple):
        return TableSchema(schema)
    raise ConfigurationError(
        "a table schema is a TableSchema or a list of google.cloud.bigquery.SchemaField, "
        f"got {type(schema).__name__}"
    )


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
    its result is converted then.
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
