"""The options of the SQL connectors: one list, read by the Python adapter and the Java factories.

Every connector (``gcp-pubsub``, ``gcp-bigquery``, ...) declares its option keys here, once: the
key (Flink's connector convention: lower-case, dash-separated, ``sink.`` for the writer's
settings), whether it is required, its kind, its default (the DataStream sink's default, in the
DDL's string form) and the DataStream option it maps to. The bridge build turns this list into a
resource of the jar (``META-INF/pyflink-gcp/table-options.json``, :func:`resource`), from which
the Java factories declare their ``ConfigOption`` s and check values at planning time; the
Python adapter parses the same list on the worker (:func:`pyflink_gcp.table.parsing.parse`). So
the two sides cannot drift, and a mistake in a DDL fails the ``INSERT`` when it is planned,
with one message, instead of a worker restarting forever. What an option is, its kinds and the
resource's format are in :mod:`pyflink_gcp.table.option_model`.

This module imports nothing but the standard library and its siblings
:mod:`~pyflink_gcp.table.option_model` and :mod:`~pyflink_gcp.table.option_groups`, relatively: the bridge build loads it by its file path,
as a module of a stand-in package whose path is this directory, also where the package's
dependencies are not installed (the wheel build).
"""

from __future__ import annotations

# Relative, not absolute: the bridge build loads this file outside the package (see above).
from .option_groups import (
    NAME_SANITIZE,
    PROVENANCE,
    created_table_options,
    field_selection_options,
    spanner_commit_options,
    writer_options,
)
from .option_model import Connector, TableOption, resource_files

PUBSUB = Connector(
    identifier="gcp-pubsub",
    factory_class="dev.pyflinkgcp.bridge.table.PubSubTableSinkFactory",
    adapter="pyflink_gcp.table.pubsub:build_sink",
    options=(
        TableOption("project", "string", "The topics' project.", required=True),
        TableOption(
            "topic",
            "template",
            "The topic id, a template over the row.",
            required=True,
            names="pubsub_topic_id",
            maps_to="set_destination_resolver",
        ),
        NAME_SANITIZE,
        TableOption("endpoint", "string", "host:port of Pub/Sub.", maps_to="set_endpoint"),
        TableOption(
            "payload.format",
            "enum",
            "json: the row as a JSON object; raw: one column's bytes.",
            default="json",
            choices=("json", "raw"),
            maps_to="set_serializer",
        ),
        TableOption(
            "payload.column",
            "column",
            "The column a raw payload is (BYTES or STRING).",
            required_when=("payload.format", "raw"),
        ),
        TableOption(
            "attributes.columns",
            "columns",
            "Columns sent as attributes (named after the column).",
        ),
        TableOption(
            "attributes.map-column",
            "column",
            "A MAP<STRING, STRING> column whose entries are attributes.",
        ),
        TableOption(
            "ordering-key.column",
            "column",
            "The column that is the ordering key (turns message ordering on).",
            maps_to="with_ordering_key",
        ),
        *PROVENANCE,
        TableOption(
            "publisher.max-messages",
            "int",
            "Messages per Publish request.",
            default="1000",
            maps_to="publisher.max_messages",
            minimum=1,
            maximum=1000,
        ),
        TableOption(
            "publisher.max-bytes",
            "int",
            "Bytes per Publish request.",
            default="5000000",
            maps_to="publisher.max_bytes",
            minimum=1,
            maximum=10_000_000,
        ),
        TableOption(
            "publisher.enable-compression",
            "bool",
            "Gzip Publish requests of at least publisher.compression-bytes-threshold bytes.",
            default="false",
            maps_to="publisher.enable_compression",
        ),
        TableOption(
            "publisher.compression-bytes-threshold",
            "int",
            "The smallest Publish request compressed, in bytes (0: every request).",
            default="240",
            maps_to="publisher.compression_bytes_threshold",
            minimum=0,
            maximum=10_000_000,
        ),
        TableOption(
            "sink.shutdown-budget",
            "duration",
            "How long closing a publisher may wait for its requests.",
            default="30s",
            maps_to="writer.shutdown_budget",
            minimum=1,
        ),
        *writer_options(creates=True, create_default="create-never"),
    ),
)

BIGQUERY = Connector(
    identifier="gcp-bigquery",
    factory_class="dev.pyflinkgcp.bridge.table.BigQueryTableSinkFactory",
    adapter="pyflink_gcp.table.bigquery:build_sink",
    options=(
        TableOption("project", "string", "The tables' project.", required=True),
        TableOption("dataset", "string", "The tables' dataset.", required=True),
        TableOption(
            "table",
            "template",
            "The table id, a template over the row.",
            required=True,
            names="bigquery_table_id",
            maps_to="set_destination_resolver",
        ),
        NAME_SANITIZE,
        TableOption(
            "write-method",
            "enum",
            "storage-api-at-least-once: the Storage Write API's default stream; buffered-stream: "
            "buffered streams flushed after each checkpoint (exactly once); file-loads: files "
            "loaded after each checkpoint (exactly once).",
            default="storage-api-at-least-once",
            choices=("storage-api-at-least-once", "buffered-stream", "file-loads"),
            maps_to="set_write_method",
        ),
        TableOption(
            "file-loads.staging-location",
            "string",
            "Where file-loads stages its files: gs://bucket/prefix, or file:///dir.",
            required_when=("write-method", "file-loads"),
            maps_to="file_loads.staging_location",
        ),
        TableOption(
            "file-loads.format",
            "enum",
            "The staged files' format.",
            default="parquet",
            choices=("parquet", "avro", "json"),
            maps_to="file_loads.file_format",
        ),
        TableOption(
            "file-loads.min-load-interval",
            "duration",
            "Shortest time between two load jobs of a table (BigQuery's daily load job quota).",
            default="90s",
            maps_to="file_loads.min_load_interval",
            minimum=0,
        ),
        TableOption(
            "sink.schema-update",
            "enum",
            "none; add-columns: add the nullable and ARRAY columns the DDL has and an existing "
            "table lacks before writing; add-and-relax-columns: also make REQUIRED columns the "
            "DDL has as nullable NULLABLE.",
            default="none",
            choices=("none", "add-columns", "add-and-relax-columns"),
            maps_to="schema_update",
        ),
        TableOption(
            "sink.unknown-fields",
            "enum",
            "A row field that is no column of the table: fail the job, ignore it, or hand the "
            "row to the failure handler (failure-handler).",
            default="fail",
            choices=("fail", "ignore", "failure-handler"),
            maps_to="unknown_fields",
        ),
        TableOption(
            "sink.missing-values",
            "enum",
            "A column a row has no value for (NULL): null, or the column's default-value "
            "(Storage Write API methods).",
            default="null",
            choices=("null", "default-value"),
            maps_to="missing_values",
        ),
        TableOption(
            "ordering-mode",
            "enum",
            "none, or per-table: one request in flight per table (default: per-table for a "
            "table with a PRIMARY KEY, whose changes must apply in order, else none).",
            choices=("none", "per-table"),
            maps_to="set_ordering_mode",
        ),
        TableOption(
            "storage-endpoint",
            "string",
            "host:port of the Storage Write API.",
            maps_to="set_storage_endpoint",
        ),
        TableOption(
            "rest-endpoint",
            "string",
            "Base URL of the BigQuery REST API.",
            maps_to="set_rest_endpoint",
        ),
        *field_selection_options(),
        *writer_options(creates=True, create_default="create-if-needed"),
        *created_table_options(),
    ),
    upserts=True,
    committing=("write-method", (("buffered-stream", 0), ("file-loads", 1))),
)

BIGTABLE = Connector(
    identifier="gcp-bigtable",
    factory_class="dev.pyflinkgcp.bridge.table.BigtableTableSinkFactory",
    adapter="pyflink_gcp.table.bigtable:build_sink",
    options=(
        TableOption("project", "string", "The tables' project.", required=True),
        TableOption("instance", "string", "The tables' Bigtable instance.", required=True),
        TableOption(
            "table",
            "template",
            "The table id, a template over the row.",
            required=True,
            names="bigtable_table_id",
            maps_to="set_destination_resolver",
        ),
        NAME_SANITIZE,
        TableOption(
            "row-key",
            "column",
            "The column that is the row key (BYTES as they are, anything else as its text).",
            required=True,
        ),
        TableOption(
            "column-family",
            "string",
            "The family of every column that is not a ROW (qualifier: the column's name); a ROW "
            "column is a family of its own, its fields the qualifiers.",
            required=True,
        ),
        TableOption(
            "timestamp.column",
            "column",
            "A TIMESTAMP or TIMESTAMP_LTZ column that is every cell's timestamp (milliseconds; "
            "default: the time of the write).",
        ),
        TableOption(
            "value.format",
            "enum",
            "text: every value as its UTF-8 text; binary: integers as 8-byte big-endian, "
            "floats as IEEE 754, booleans as one byte, the rest as text.",
            default="text",
            choices=("text", "binary"),
        ),
        TableOption("endpoint", "string", "host:port of Bigtable.", maps_to="set_endpoint"),
        *field_selection_options(only=False),
        *writer_options(creates=True, max_rows="50000", in_flight="50"),
    ),
)

CLOUDTASKS = Connector(
    identifier="gcp-cloudtasks",
    factory_class="dev.pyflinkgcp.bridge.table.CloudTasksTableSinkFactory",
    adapter="pyflink_gcp.table.cloudtasks:build_sink",
    options=(
        TableOption("project", "string", "The queues' project.", required=True),
        TableOption("location", "string", "The queues' location (us-central1).", required=True),
        TableOption(
            "queue",
            "template",
            "The queue id, a template over the row (the sink never creates queues).",
            required=True,
            names="cloudtasks_queue_id",
            maps_to="set_destination_resolver",
        ),
        NAME_SANITIZE,
        TableOption(
            "url",
            "template",
            "The task's target URL, a template over the row (values are URL-encoded).",
            required=True,
            maps_to="CloudTasksSerializationSchema.http_target",
        ),
        TableOption(
            "http-method",
            "enum",
            "The task's HTTP method.",
            default="POST",
            choices=("POST", "PUT", "PATCH", "GET", "DELETE", "HEAD", "OPTIONS"),
            maps_to="with_http_method",
        ),
        TableOption(
            "body.format",
            "enum",
            "json: the row as a JSON object; raw: one column's bytes; none: no body.",
            default="json",
            choices=("json", "raw", "none"),
            maps_to="with_body",
        ),
        TableOption(
            "body.column",
            "column",
            "The column a raw body is (BYTES or STRING).",
            required_when=("body.format", "raw"),
        ),
        TableOption(
            "content-type",
            "string",
            "The Content-Type header (default: application/json for a json body).",
        ),
        TableOption(
            "headers.columns",
            "columns",
            "Columns sent as headers (named after the column).",
            maps_to="with_headers",
        ),
        TableOption(
            "headers.map-column",
            "column",
            "A MAP<STRING, STRING> column whose entries are headers.",
            maps_to="with_headers",
        ),
        TableOption(
            "task-id.column",
            "column",
            "The column that names each task (a replay then creates no second task).",
            maps_to="with_task_id",
        ),
        TableOption("endpoint", "string", "host:port of Cloud Tasks.", maps_to="set_endpoint"),
        *writer_options(creates=False, max_rows="10000", in_flight="256"),
    ),
)

SPANNER = Connector(
    identifier="gcp-spanner",
    factory_class="dev.pyflinkgcp.bridge.table.SpannerTableSinkFactory",
    adapter="pyflink_gcp.table.spanner:build_sink",
    options=(
        TableOption("project", "string", "The database's project.", required=True),
        TableOption("instance", "string", "The database's Spanner instance.", required=True),
        TableOption("database", "string", "The database.", required=True),
        TableOption(
            "table",
            "template",
            "The table, a template over the row (tables must exist).",
            required=True,
            names="spanner_table_name",
        ),
        NAME_SANITIZE,
        TableOption("endpoint", "string", "host:port of Spanner.", maps_to="set_endpoint"),
        *field_selection_options(),
        *writer_options(creates=False, max_rows="100000", in_flight="2", per_destination=False),
        *spanner_commit_options(),
    ),
    upserts=True,
)

#: Every connector, by identifier.
CONNECTORS: dict[str, Connector] = {
    c.identifier: c for c in (PUBSUB, BIGQUERY, BIGTABLE, CLOUDTASKS, SPANNER)
}


def resource(non_retriable_marker: str) -> dict[str, str]:
    """The files the bridge build puts into the jar: the option list and the SPI file
    (:func:`~pyflink_gcp.table.option_model.resource_files` of :data:`CONNECTORS`).

    Args:
        non_retriable_marker: The line a Python error a restart cannot fix carries
            (:data:`pyflink_gcp.core.errors.NON_RETRIABLE_MARKER`); the Java sink hands it to
            the marker operator.
    """
    return resource_files(CONNECTORS.values(), non_retriable_marker)
