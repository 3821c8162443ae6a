"""Options of the BigQuery sink: write method, ordering, row format, and the writer options.

:class:`BigQueryWriterOptions` shares the vocabulary of every sink that creates its
destinations (:class:`~pyflink_gcp.core.options.CreatingWriterOptions`) and adds the shapes of
the Storage Write API's requests and the sink's threads.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Self

from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.options import (
    CreatingOptionsBuilder,
    CreatingWriterOptions,
    check_bool,
    check_instance,
    check_int,
)

#: The Storage Write API's limit on one AppendRows request.
MAX_APPEND_REQUEST_BYTES = 10_000_000


class WriteMethod(enum.Enum):
    """How rows reach BigQuery.

    ``STORAGE_API_AT_LEAST_ONCE`` (the default): the Storage Write API default stream; rows are
    visible once appended, before the checkpoint, and a failover can write a row twice.
    ``BUFFERED_STREAM``: exactly once; each table writer appends to a BUFFERED stream with
    offsets, and the rows become visible when the stream is flushed after the checkpoint
    completed (needs the Java bridge jar and checkpointing; no change-data-capture rows).
    ``FILE_LOADS`` (load jobs from staged files) is planned and rejected by the builder.
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


@dataclass(frozen=True, kw_only=True)
class BigQueryWriterOptions(CreatingWriterOptions):
    """Limits and lifetimes of the per-table writers of one sink subtask.

    The shared settings (``max_buffer_time``, ``max_buffered_records``, ``retry_deadline``,
    ``per_destination_metrics``, ``idle_timeout``, ``max_active_destinations``,
    ``max_created_destinations``) mean what
    :class:`~pyflink_gcp.core.options.CreatingWriterOptions` says. For BigQuery:
    ``max_in_flight_requests`` counts the AppendRows requests of one table pipelined on its
    connection (``OrderingMode.NONE``; ``PER_TABLE`` always uses one); ``idle_timeout`` and
    ``max_active_destinations`` drop a table writer, which is re-created with a fresh look at the
    table's schema when the table is used again.

    Attributes:
        max_request_bytes: Size of one AppendRows request (service limit 10 MB). A table's rows
            are cut into requests of at most this size; a single row above it is rejected.
        max_request_rows: Rows of one AppendRows request. Cutting requests while records still
            arrive lets sending overlap with processing instead of all waiting for the flush.
        sender_threads: Threads per subtask sending requests; bounds how many tables are
            written concurrently.
        ignore_unknown_values: Drop row keys that are not columns of the table instead of
            rejecting the row.
        row_format: Arrow record batches where a table and its rows allow, else protobuf rows
            (see :class:`RowFormat`).
        metadata_threads: Threads per subtask fetching table metadata (and creating tables) off
            the processing thread. Raise it for jobs that meet hundreds of new tables at once
            against the real service (each lookup is a round trip); the local emulator gains
            nothing from it and is fragile under concurrent table creation.
        max_stream_creations_per_second: ``WriteMethod.BUFFERED_STREAM`` only: the rate at
            which a subtask creates write streams (one per table writer, reused across
            checkpoints; a new one after the writer was closed or the job restarted). BigQuery
            documents CreateWriteStream slowing down past 40-50 calls per second per project,
            and a longer-term quota on its rate; a writer waits for its stream on a metadata
            thread, not on the task thread.
    """

    max_request_bytes: int = 8_000_000
    max_request_rows: int = 5_000
    sender_threads: int = 8
    ignore_unknown_values: bool = False
    row_format: RowFormat = RowFormat.ARROW
    metadata_threads: int = 1
    max_stream_creations_per_second: float = 10.0

    def _validate(self) -> None:
        super()._validate()
        owner = type(self).__name__
        check_int(
            owner,
            "max_request_bytes",
            self.max_request_bytes,
            minimum=1_000,
            maximum=MAX_APPEND_REQUEST_BYTES,
        )
        check_int(owner, "max_request_rows", self.max_request_rows)
        check_int(owner, "sender_threads", self.sender_threads)
        check_bool(owner, "ignore_unknown_values", self.ignore_unknown_values)
        check_instance(owner, "row_format", self.row_format, RowFormat, "RowFormat.ARROW")
        check_int(owner, "metadata_threads", self.metadata_threads)
        rate = self.max_stream_creations_per_second
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= 1_000:
            raise ConfigurationError(
                f"{owner}.max_stream_creations_per_second must be a number in (0, 1000], "
                f"got {rate!r}"
            )

    @staticmethod
    def builder() -> BigQueryWriterOptionsBuilder:
        """A builder of :class:`BigQueryWriterOptions` (validated at ``build()``)."""
        return BigQueryWriterOptionsBuilder()


class BigQueryWriterOptionsBuilder(CreatingOptionsBuilder[BigQueryWriterOptions]):
    """Fluent builder of :class:`BigQueryWriterOptions`; the shared setters come from core."""

    options_type = BigQueryWriterOptions

    def max_request_bytes(self, size: int) -> Self:
        """Bytes of one AppendRows request (at most 10,000,000; default 8,000,000)."""
        return self._set("max_request_bytes", size)

    def max_request_rows(self, rows: int) -> Self:
        """Rows of one AppendRows request (default 5,000)."""
        return self._set("max_request_rows", rows)

    def sender_threads(self, threads: int) -> Self:
        """Threads per subtask sending requests: tables written at once (default 8)."""
        return self._set("sender_threads", threads)

    def ignore_unknown_values(self, enabled: bool = True) -> Self:
        """Drop row keys that are no column instead of rejecting the row (default off)."""
        return self._set("ignore_unknown_values", enabled)

    def row_format(self, row_format: RowFormat) -> Self:
        """``RowFormat.ARROW`` where tables and rows allow (default) or always ``PROTO``."""
        return self._set("row_format", row_format)

    def metadata_threads(self, threads: int) -> Self:
        """Threads per subtask looking up and creating tables (default 1)."""
        return self._set("metadata_threads", threads)

    def max_stream_creations_per_second(self, rate: float) -> Self:
        """BUFFERED streams a subtask creates per second at most (default 10)."""
        return self._set("max_stream_creations_per_second", rate)
