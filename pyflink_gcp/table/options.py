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

This module imports nothing but the standard library and its sibling
:mod:`~pyflink_gcp.table.option_model`, relatively: the bridge build loads it by its file path,
as a module of a stand-in package whose path is this directory, also where the package's
dependencies are not installed (the wheel build).
"""

from __future__ import annotations

# Relative, not absolute: the bridge build loads this file outside the package (see above).
from .option_model import Connector, TableOption, resource_files


def _writer_options(
    *,
    creates: bool,
    create_default: str = "create-never",
    max_rows: str = "20000",
    in_flight: str = "4",
    per_destination: bool = True,
) -> tuple[TableOption, ...]:
    """The options every connector shares: parallelism, buffering, lifetimes, failures.

    Args:
        creates: Whether the sink creates destinations (the disposition and its bound).
        create_default: The DataStream sink's create disposition.
        max_rows: The service's ``max_buffered_records`` default.
        in_flight: The service's ``max_in_flight_requests`` default.
        per_destination: Whether a writer is kept per destination (the idle timeout and the
            cap on live writers); Spanner's one database has none.
    """
    lifetimes = (
        TableOption(
            "sink.idle-timeout",
            "duration",
            "Close a destination's writer unused this long (0ms: at every flush).",
            default="15min",
            maps_to="writer.idle_timeout",
            minimum=0,
        ),
        TableOption(
            "sink.max-active-destinations",
            "int",
            "Cap on live destination writers per subtask (default: no cap).",
            maps_to="writer.max_active_destinations",
            minimum=1,
        ),
    )
    shared = (
        TableOption(
            "sink.parallelism",
            "int",
            "Parallelism of the writer (default: the input's).",
            minimum=1,
        ),
        TableOption(
            "sink.buffer-flush.max-rows",
            "int",
            "Rows a subtask buffers between two bundle ends.",
            default=max_rows,
            maps_to="writer.max_buffered_records",
            minimum=1,
        ),
        TableOption(
            "sink.buffer-flush.interval",
            "duration",
            "Longest time a row waits before it is sent.",
            default="1s",
            maps_to="writer.max_buffer_time",
            minimum=1,
        ),
        TableOption(
            "sink.retry-deadline",
            "duration",
            "How long transient errors of one call are retried before the job fails.",
            default="2min",
            maps_to="writer.retry_deadline",
            minimum=0,
        ),
        TableOption(
            "sink.max-in-flight-requests",
            "int",
            "Write calls sent before the first is answered.",
            default=in_flight,
            maps_to="writer.max_in_flight_requests",
            minimum=1,
        ),
        TableOption(
            "sink.per-destination-metrics",
            "bool",
            "Register Flink counters per destination.",
            default="false",
            maps_to="writer.per_destination_metrics",
        ),
        *(lifetimes if per_destination else ()),
        TableOption(
            "failure-handler",
            "enum",
            "What happens to rows the service rejects for their content and to rows with no"
            " destination (a NULL template column).",
            default="fail",
            choices=("fail", "drop", "dead-letter"),
            maps_to="set_failure_handler",
        ),
        TableOption(
            "dead-letter.topic",
            "string",
            "The dead-letter topic, projects/<project>/topics/<topic>.",
            required_when=("failure-handler", "dead-letter"),
            maps_to="PubSubDeadLetterQueue.of",
        ),
    )
    if not creates:
        return shared
    return (
        *shared,
        TableOption(
            "create-disposition",
            "enum",
            "Whether the sink creates destinations its template names.",
            default=create_default,
            choices=("create-if-needed", "create-never"),
            maps_to="set_create_disposition",
        ),
        TableOption(
            "sink.max-created-destinations",
            "int",
            "How many destinations one subtask may create at once, and then per "
            "sink.max-created-destinations.per (a token bucket); one more fails the job.",
            default="500",
            maps_to="writer.max_created_destinations",
            minimum=0,
        ),
        TableOption(
            "sink.max-created-destinations.per",
            "duration",
            "The window over which a subtask's creation budget refills; a restarted subtask "
            "starts with a full budget.",
            default="1h",
            maps_to="writer.max_created_destinations_per",
            minimum=1,
        ),
    )


#: Whether a destination template sanitizes its values; every connector with one takes it,
#: after the template option (:class:`~pyflink_gcp.routing.templates.Template`'s ``sanitize``).
_NAME_SANITIZE = TableOption(
    "name.sanitize",
    "bool",
    "Replace the characters the service does not allow in each template value (and prefix one "
    "that starts the name as no name may), instead of sending the row to the failure handler; "
    "a value that then renders another value's name goes to the failure handler.",
    default="false",
)


def _field_selection_options(only: bool = True) -> tuple[TableOption, ...]:
    """Which columns a row-shaped sink writes once the row is routed: at most one of the three
    (``set_field_selection``, :mod:`pyflink_gcp.core.fields`).

    Args:
        only: Whether the connector takes ``fields.only`` (a ROW column written as the row).
    """
    selection = (
        TableOption(
            "fields.drop",
            "columns",
            "Columns not written (the table template may still use them); at most one of "
            "fields.drop, fields.keep and fields.only.",
            maps_to="set_field_selection",
        ),
        TableOption(
            "fields.keep",
            "columns",
            "The only columns written (the table template may use others).",
            maps_to="set_field_selection",
        ),
    )
    if not only:
        return selection
    return (
        *selection,
        TableOption(
            "fields.only",
            "column",
            "A ROW column whose fields are written as the row, instead of the whole row.",
            maps_to="set_field_selection",
        ),
    )


def _created_table_options() -> tuple[TableOption, ...]:
    """The settings of the tables a BigQuery sink creates: each maps to an argument of the
    ``TableSchema`` the adapter derives from the DDL, which checks it against BigQuery's rules
    when the writer opens (a column's type, the number of clustering columns, label syntax)."""
    to = "TableSchema."
    # One option a line: a table reads better here than twelve exploded calls.
    # fmt: off
    return (
        TableOption("table.partitioning.type", "enum", "Partition created tables by time: by day, hour, month or year of table.partitioning.field, or of the ingestion time without one.", choices=("day", "hour", "month", "year"), maps_to=to + "time_partitioning"),
        TableOption("table.partitioning.field", "column", "The TIMESTAMP or DATE column of the time partitioning (a DATE column takes no hour).", maps_to=to + "time_partitioning"),
        TableOption("table.partitioning.expiration", "duration", "How long BigQuery keeps each time partition of a created table (default: for ever).", minimum=1, maps_to=to + "time_partitioning"),
        TableOption("table.partitioning.require-filter", "bool", "Whether queries of a created table must filter on its partitions (time or range partitioning).", maps_to=to + "require_partition_filter"),
        TableOption("table.range-partitioning.field", "column", "Partition created tables by ranges of this integer column; needs the three options below.", maps_to=to + "range_partitioning"),
        TableOption("table.range-partitioning.start", "int", "The start of the first range partition (inclusive).", maps_to=to + "range_partitioning"),
        TableOption("table.range-partitioning.end", "int", "The end of the last range partition (exclusive).", maps_to=to + "range_partitioning"),
        TableOption("table.range-partitioning.interval", "int", "The width of each range partition.", minimum=1, maps_to=to + "range_partitioning"),
        TableOption("table.clustering-fields", "columns", "Up to four columns created tables are clustered on, in the order their rows are sorted by.", maps_to=to + "clustering_fields"),
        TableOption("table.labels", "string", "Labels of created tables, key:value,key:value (lowercase letters, digits, _ and -; a value may be empty).", maps_to=to + "labels"),
        TableOption("table.description", "string", "The description of created tables.", maps_to=to + "description"),
        TableOption("table.kms-key-name", "string", "The Cloud KMS key that encrypts created tables, projects/<project>/locations/<location>/keyRings/<ring>/cryptoKeys/<key>.", maps_to=to + "kms_key_name"),
    )
    # fmt: on


def _spanner_commit_options() -> tuple[TableOption, ...]:
    """How a Spanner subtask cuts its mutations into commits, grouping included: each maps to a
    field of ``SpannerWriterOptions``, which checks them against Spanner's limits."""
    to = "writer."
    # One option a line, as the created tables' options above.
    # fmt: off
    return (
        TableOption("sink.max-mutations-per-commit", "int", "The mutation budget of one commit, counted as Spanner counts (columns and index entries).", default="20000", minimum=1, maximum=80_000, maps_to=to + "max_mutations_per_commit"),
        TableOption("sink.max-commit-bytes", "int", "Encoded bytes of one commit request.", default="8388608", minimum=1, maximum=100_000_000, maps_to=to + "max_commit_bytes"),
        TableOption("sink.max-rows-per-commit", "int", "Rows of one commit: one per row written or key deleted (default: only the two budgets above cut commits); the bound to set with grouping.", minimum=1, maps_to=to + "max_rows_per_commit"),
        TableOption("sink.commit-timeout", "duration", "Timeout of one commit attempt (the commit deadline).", default="60s", minimum=1, maps_to=to + "commit_timeout"),
        TableOption("sink.grouping-factor", "int", "Above 1: buffer up to this many commits' worth of rows, sort them by table and primary key, then cut commits, so that each touches fewer splits (bulk loads, backfills); rows of different keys lose their arrival order. 1: commits in arrival order.", default="1", minimum=1, maps_to=to + "grouping_factor"),
        TableOption("sink.max-commit-delay", "duration", "Spanner's max_commit_delay commit option, 0ms to 500ms (Spanner's limit, checked when the statement is planned): how long Spanner may hold a commit to group it with others (default: not sent).", minimum=0, maximum=500, maps_to=to + "max_commit_delay"),
        TableOption("sink.max-cumulative-backoff", "duration", "Total wait between the retries of one commit before the job fails (default: sink.retry-deadline alone bounds the retries).", minimum=1, maps_to=to + "max_cumulative_backoff"),
    )
    # fmt: on


# gcp-pubsub's provenance attribute names (1 to 256 bytes: Pub/Sub's attribute key limit).
# fmt: off
_PROVENANCE = (
    TableOption("attributes.event-time", "string", "Also send each row's event time (its rowtime, epoch milliseconds) as this attribute; a row without one is sent without it (default: not sent).", maps_to="with_event_time_attribute", minimum=1, maximum=256),
    TableOption("attributes.record-id", "string", "Also send a record id stable across replays (a digest of the message and its topic) as this attribute, for subscribers that drop duplicates (default: not sent).", maps_to="with_record_id_attribute", minimum=1, maximum=256, distinct_from="attributes.event-time"),
)
# fmt: on

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
        _NAME_SANITIZE,
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
        *_PROVENANCE,
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
        *_writer_options(creates=True, create_default="create-never"),
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
        _NAME_SANITIZE,
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
        *_field_selection_options(),
        *_writer_options(creates=True, create_default="create-if-needed"),
        *_created_table_options(),
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
        _NAME_SANITIZE,
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
        *_field_selection_options(only=False),
        *_writer_options(creates=True, max_rows="50000", in_flight="8"),
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
        _NAME_SANITIZE,
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
        *_writer_options(creates=False, max_rows="10000", in_flight="256"),
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
        _NAME_SANITIZE,
        TableOption("endpoint", "string", "host:port of Spanner.", maps_to="set_endpoint"),
        *_field_selection_options(),
        *_writer_options(creates=False, max_rows="100000", in_flight="2", per_destination=False),
        *_spanner_commit_options(),
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
