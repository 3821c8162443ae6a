"""``'connector' = 'gcp-spanner'``: a table's rows written by the Spanner DataStream sink.

Every row goes to the database of ``project``/``instance``/``database``, into the table the
``table`` template names (the tables must exist; the sink creates none), each column to the
Spanner column of the same name, as an ``insert_or_update`` mutation: a replay after a failure
rewrites the same row instead of failing with ALREADY_EXISTS. The values are the Spanner sink's
(:mod:`pyflink_gcp.spanner.serialization`): a TIMESTAMP without zone is taken as UTC, DECIMAL
goes to NUMERIC, ARRAY to ARRAY, ROW and MAP to JSON.

A table declared with ``PRIMARY KEY (...) NOT ENFORCED`` takes a changelog: inserts and
``UPDATE_AFTER`` rows are upserts (``insert_or_update``) and a ``DELETE`` deletes the row of its
key. The key columns must be the Spanner table's primary key, in the same order.

Spanner's sink has no resolver (each mutation names its table): a row whose ``table``
template renders no valid table name (a NULL column, say) is unroutable from the serializer,
and goes to the failure handler as its JSON.
"""

from __future__ import annotations

from typing import Any

from pyflink_gcp.core.runtime import DynamicSink
from pyflink_gcp.core.types import UnroutableRecord
from pyflink_gcp.routing import names
from pyflink_gcp.routing.templates import Template, TemplateValueError
from pyflink_gcp.spanner import DatabaseDestination, Mutation, SpannerSink
from pyflink_gcp.table.adapter import configure, destination_template
from pyflink_gcp.table.pubsub import row_json
from pyflink_gcp.table.rows import DeletedRow, TableInfo

IDENTIFIER = "gcp-spanner"


class RowMutations:
    """The serializer: the row's ``insert_or_update``, or its key's delete for a DeletedRow;
    unroutable when the template names no table for the row."""

    def __init__(self, template: Template, primary_key: tuple[str, ...]) -> None:
        self.template = template
        self.primary_key = primary_key

    def __call__(self, record: dict[str, Any], context: Any) -> Mutation | UnroutableRecord:
        try:
            table = self.template.render(record, context)
        except TemplateValueError as exc:
            return UnroutableRecord.of(row_json(record), str(exc))
        if isinstance(record, DeletedRow):
            return Mutation.delete(table, tuple(record[k] for k in self.primary_key))
        return Mutation.insert_or_update(table, record)


def build_sink(values: dict[str, Any], table: TableInfo) -> DynamicSink:
    """The Spanner sink of a ``gcp-spanner`` table."""
    builder = SpannerSink.builder()
    configure(builder, IDENTIFIER, values, table)
    builder.set_database(
        DatabaseDestination.of(values["project"], values["instance"], values["database"])
    )
    template = destination_template(values, "table", table, names.spanner_table_name)
    builder.set_serializer(RowMutations(template, table.primary_key))
    if values["endpoint"] is not None:
        builder.set_endpoint(values["endpoint"])
    return builder.build()
