"""The option groups several SQL connectors share: the writer's settings, field selection, the
created tables' settings, Spanner's commit options and Pub/Sub's provenance attributes.

Each group is declared once, so that one setting has one key, one description and one default
in every connector that has it. Like :mod:`pyflink_gcp.table.options`, which assembles the
connectors from these groups, this module imports nothing but the standard library and its
sibling :mod:`~pyflink_gcp.table.option_model`, relatively: the bridge build loads both by their
file paths, outside the package.
"""

from __future__ import annotations

# Relative, not absolute: the bridge build loads this file outside the package.
from .option_model import TableOption

__all__ = [
    "NAME_SANITIZE",
    "PROVENANCE",
    "created_table_options",
    "field_selection_options",
    "spanner_commit_options",
    "writer_options",
]


def writer_options(
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
            "sink.max-carry-time",
            "duration",
            "How long a destination's rows may wait across checkpoints, kept in the writer's "
            "checkpoint state instead of sent before its barrier; a destination's rows are sent "
            "once 500 wait, the oldest is this old, or the subtask carries "
            "sink.max-carried-rows (default: each checkpoint sends every row). Not with a "
            "PRIMARY KEY or an exactly-once write method.",
            maps_to="writer.max_carry_time",
            minimum=1,
        ),
        TableOption(
            "sink.max-carried-rows",
            "int",
            "Rows one subtask carries at most under sink.max-carry-time; beyond, the "
            "destinations carried longest are sent.",
            default="100000",
            maps_to="writer.max_carried_records",
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
NAME_SANITIZE = TableOption(
    "name.sanitize",
    "bool",
    "Replace the characters the service does not allow in each template value (and prefix one "
    "that starts the name as no name may), instead of sending the row to the failure handler; "
    "a value that then renders another value's name goes to the failure handler.",
    default="false",
)


def field_selection_options(only: bool = True) -> tuple[TableOption, ...]:
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


def created_table_options() -> tuple[TableOption, ...]:
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


def spanner_commit_options() -> tuple[TableOption, ...]:
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
PROVENANCE = (
    TableOption("attributes.event-time", "string", "Also send each row's event time (its rowtime, epoch milliseconds) as this attribute; a row without one is sent without it (default: not sent).", maps_to="with_event_time_attribute", minimum=1, maximum=256),
    TableOption("attributes.record-id", "string", "Also send a record id stable across replays (a digest of the message and its topic) as this attribute, for subscribers that drop duplicates (default: not sent).", maps_to="with_record_id_attribute", minimum=1, maximum=256, distinct_from="attributes.event-time"),
)
# fmt: on
