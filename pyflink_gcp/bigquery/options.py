"""Options of the BigQuery sink: write method, ordering, table creation, writer limits."""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import timedelta

#: The Storage Write API's limit on one AppendRows request.
MAX_APPEND_REQUEST_BYTES = 10_000_000


class WriteMethod(enum.Enum):
    """How rows reach BigQuery.

    Only ``STORAGE_API_AT_LEAST_ONCE`` (the Storage Write API default stream) is available in this
    version; ``BUFFERED_STREAM`` and ``FILE_LOADS`` (exactly once, committed after each completed
    checkpoint) are planned and rejected by the builder until then.
    """

    STORAGE_API_AT_LEAST_ONCE = "STORAGE_API_AT_LEAST_ONCE"
    BUFFERED_STREAM = "BUFFERED_STREAM"
    FILE_LOADS = "FILE_LOADS"


class OrderingMode(enum.Enum):
    """Whether a table's append requests may overtake each other.

    ``NONE`` (the default) keeps several requests in flight per table. ``PER_TABLE`` sends a
    table's next request only after the previous one was committed, or its rejected rows were
    isolated and the rest re-sent; other tables still proceed in parallel. Use it for change data
    capture (``_CHANGE_TYPE``) without ``_CHANGE_SEQUENCE_NUMBER``, where the order of two
    changes to one key decides the result.
    """

    NONE = "NONE"
    PER_TABLE = "PER_TABLE"


class RowFormat(enum.Enum):
    """How rows travel in an AppendRows request.

    ``ARROW`` (the default) sends a request's plain rows as one Arrow record batch when every
    column of the table has an Arrow form and every value already has its column's Python type;
    any other request, and every change-data-capture row, goes as protobuf rows. The service
    decodes Arrow a column at a time, which the emulator does about six times faster than
    protobuf rows. ``PROTO`` always sends protobuf rows (for a project or endpoint that does not
    accept Arrow: early versions of the API documented Arrow ingestion as allowlisted).
    """

    ARROW = "ARROW"
    PROTO = "PROTO"


class CreateDisposition(enum.Enum):
    """Whether the sink may create a table its resolver names."""

    CREATE_NEVER = "CREATE_NEVER"
    CREATE_IF_NEEDED = "CREATE_IF_NEEDED"


@dataclass(frozen=True)
class BigQueryWriterOptions:
    """Limits and lifetimes of the per-table writers of one sink subtask.

    Attributes:
        max_request_bytes: Size of one AppendRows request (service limit 10 MB). A table's rows
            are cut into requests of at most this size; a single row above it is rejected.
        max_request_rows: Rows of one AppendRows request. Cutting requests while records still
            arrive lets sending overlap with processing instead of all waiting for the flush.
        max_in_flight_requests: Requests of one table sent before the first is answered
            (``OrderingMode.NONE``; ``PER_TABLE`` always uses one).
        sender_threads: Threads per subtask sending requests; bounds how many tables are
            written concurrently.
        idle_timeout: A table writer unused this long is dropped at the end of a successful
            flush (re-created, with a fresh look at the table's schema, when used again).
        max_created_tables: How many tables one sink subtask may create (CREATE_IF_NEEDED). A
            resolver bug (a table per user id) must fail fast, not create a million tables.
        retry_deadline: How long transient errors of one request are retried before the job
            fails.
        max_buffered_rows: Rows a subtask accepts between two bundle ends (the operator's
            bundle size); each bundle end sends every table's open request, and waits for the
            appends only without checkpoint markers.
        max_buffer_time: Longest time a row waits to be sent when no checkpoint comes first.
        ignore_unknown_values: Drop row keys that are not columns of the table instead of
            rejecting the row.
        per_destination_metrics: Register Flink counters per table (Flink cannot unregister
            metrics, so this is off by default).
        row_format: Arrow record batches where a table and its rows allow, else protobuf rows
            (see :class:`RowFormat`).
        metadata_threads: Threads per subtask fetching table metadata (and creating tables) off
            the processing thread. Raise it for jobs that meet hundreds of new tables at once
            against the real service (each lookup is a round trip); the local emulator gains
            nothing from it and is fragile under concurrent table creation.
    """

    max_request_bytes: int = 8_000_000
    max_request_rows: int = 5_000
    max_in_flight_requests: int = 4
    sender_threads: int = 8
    idle_timeout: timedelta = timedelta(minutes=15)
    max_created_tables: int = 100
    retry_deadline: timedelta = timedelta(minutes=2)
    max_buffered_rows: int = 20_000
    max_buffer_time: timedelta = timedelta(seconds=1)
    ignore_unknown_values: bool = False
    per_destination_metrics: bool = False
    row_format: RowFormat = RowFormat.ARROW
    metadata_threads: int = 1

    def __post_init__(self) -> None:
        if not 1_000 <= self.max_request_bytes <= MAX_APPEND_REQUEST_BYTES:
            raise ValueError(f"max_request_bytes must be in [1000, {MAX_APPEND_REQUEST_BYTES}]")
        if self.max_request_rows < 1:
            raise ValueError("max_request_rows must be >= 1")
        if self.max_in_flight_requests < 1 or self.sender_threads < 1 or self.metadata_threads < 1:
            raise ValueError(
                "max_in_flight_requests, sender_threads and metadata_threads must be >= 1"
            )
        if not isinstance(self.row_format, RowFormat):
            raise ValueError("row_format must be a RowFormat")
        if self.max_created_tables < 0:
            raise ValueError("max_created_tables must be >= 0")
        if self.idle_timeout <= timedelta(0) or self.max_buffer_time <= timedelta(0):
            raise ValueError("idle_timeout and max_buffer_time must be positive")
        if self.retry_deadline < timedelta(0):
            raise ValueError("retry_deadline must be >= 0")
        if self.max_buffered_rows < 1:
            raise ValueError("max_buffered_rows must be >= 1")

    @staticmethod
    def builder() -> BigQueryWriterOptionsBuilder:
        return BigQueryWriterOptionsBuilder()


class BigQueryWriterOptionsBuilder:
    """Fluent builder of :class:`BigQueryWriterOptions` (validated at ``build()``)."""

    def __init__(self) -> None:
        self._values: dict[str, object] = {}

    def _set(self, name: str, value: object) -> BigQueryWriterOptionsBuilder:
        self._values[name] = value
        return self

    def max_request_bytes(self, n: int) -> BigQueryWriterOptionsBuilder:
        return self._set("max_request_bytes", n)

    def max_request_rows(self, n: int) -> BigQueryWriterOptionsBuilder:
        return self._set("max_request_rows", n)

    def max_in_flight_requests(self, n: int) -> BigQueryWriterOptionsBuilder:
        return self._set("max_in_flight_requests", n)

    def sender_threads(self, n: int) -> BigQueryWriterOptionsBuilder:
        return self._set("sender_threads", n)

    def idle_timeout(self, timeout: timedelta) -> BigQueryWriterOptionsBuilder:
        return self._set("idle_timeout", timeout)

    def max_created_tables(self, n: int) -> BigQueryWriterOptionsBuilder:
        return self._set("max_created_tables", n)

    def retry_deadline(self, deadline: timedelta) -> BigQueryWriterOptionsBuilder:
        return self._set("retry_deadline", deadline)

    def max_buffered_rows(self, n: int) -> BigQueryWriterOptionsBuilder:
        return self._set("max_buffered_rows", n)

    def max_buffer_time(self, latency: timedelta) -> BigQueryWriterOptionsBuilder:
        return self._set("max_buffer_time", latency)

    def ignore_unknown_values(self, enabled: bool = True) -> BigQueryWriterOptionsBuilder:
        return self._set("ignore_unknown_values", enabled)

    def per_destination_metrics(self, enabled: bool = True) -> BigQueryWriterOptionsBuilder:
        return self._set("per_destination_metrics", enabled)

    def row_format(self, row_format: RowFormat) -> BigQueryWriterOptionsBuilder:
        return self._set("row_format", row_format)

    def metadata_threads(self, n: int) -> BigQueryWriterOptionsBuilder:
        return self._set("metadata_threads", n)

    def build(self) -> BigQueryWriterOptions:
        return replace(BigQueryWriterOptions(), **self._values)  # type: ignore[arg-type]
