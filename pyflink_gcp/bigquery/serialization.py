"""What the BigQuery sink writes: a row (a dict keyed by column name) per record, and the schema
of the tables the sink may create."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from google.cloud.bigquery import SchemaField

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
    raise TypeError(
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
            raise ValueError("a table schema needs at least one field")
        names = {f.name.lower() for f in self.fields}
        for column in (*primary_key, *clustering_fields):
            if column.lower() not in names:
                raise ValueError(f"column {column!r} is not a field of the table schema")
        self.primary_key: tuple[str, ...] = tuple(primary_key)
        self.clustering_fields: tuple[str, ...] = tuple(clustering_fields)

    @staticmethod
    def of(
        fields: Iterable[Any],
        primary_key: Sequence[str] | None = None,
        clustering_fields: Sequence[str] | None = None,
    ) -> TableSchema:
        """A schema of ``fields`` (SchemaFields or ``(name, type[, mode])`` tuples)."""
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


class BigQuerySerializer:
    """Turns a record into the row written to its table.

    Subclass it, or build one with :meth:`of`. ``serialize`` returns a dict keyed by column name
    (or None to skip the record); values may be given in their natural Python form (a
    ``datetime`` or an ISO 8601 string for a TIMESTAMP, a ``Decimal`` or a string for a NUMERIC,
    a dict for a RECORD or JSON column...). Change data capture rows also carry ``_CHANGE_TYPE``
    (``"UPSERT"`` or ``"DELETE"``) and optionally ``_CHANGE_SEQUENCE_NUMBER``.

    ``schema(destination)`` returns the :class:`TableSchema` of a table the sink may create
    (None: this serializer cannot create tables). It is called once per table writer, not per
    record.
    """

    def serialize(self, record: Any, context: WriterContext) -> Mapping[str, Any] | None:
        raise NotImplementedError

    def schema(self, destination: TableDestination) -> TableSchema | None:
        return None

    @staticmethod
    def of(
        to_row: Callable[[Any, WriterContext], Mapping[str, Any] | None] | None = None,
        schema: TableSchema | Callable[[TableDestination], TableSchema | None] | None = None,
    ) -> BigQuerySerializer:
        """A serializer from a function ``(record, context) -> row`` (default: the record is the
        row) and a schema (a :class:`TableSchema`, or a function of the destination)."""
        if to_row is not None and not callable(to_row):
            raise TypeError("BigQuerySerializer.of() takes a callable (record, context) -> row")
        if schema is not None and not (isinstance(schema, TableSchema) or callable(schema)):
            raise TypeError("schema must be a TableSchema or a callable destination -> TableSchema")
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

    def schema(self, destination: TableDestination) -> TableSchema | None:
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
