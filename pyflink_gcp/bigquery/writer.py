"""The BigQuery writer: rows of each table appended to its Storage Write API default stream.

This module is the processing thread's side and the hot path. Per record
(:meth:`TableWriter.write`): a type check and a list append. A table's rows are cut into
requests of ``max_request_rows``; each cut request is handed to the table's
:class:`~pyflink_gcp.bigquery.sender.TableSender`, which encodes it and writes it onto the
table's connection while its window has room; answers complete it by callback, so no thread
waits on a request. :meth:`TableWriter.flush`, called before every checkpoint barrier (and by the
registry before it releases a dirty writer at the ``max_active_destinations`` cap), waits until
every request was answered.

Change-data-capture rows are the exception: they are encoded on arrival, because a request must
end before a row whose primary key it already holds (compared by value), and the key needs the
table's schema.

The table's schema is looked up as soon as the writer is created, so a subtask meeting many new
tables keeps processing records meanwhile; the sender sends the table's first request when the
lookup ends. On the default stream the lookup is a ``GetWriteStream`` call that no thread waits
on (:mod:`~pyflink_gcp.bigquery.stream_lookup`); what it cannot answer (a missing table to
create, a schema to update, a BUFFERED stream's table) is asked of the table's REST metadata
by the :class:`~pyflink_gcp.bigquery.tables.TableCatalog` on a metadata thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from functools import partial
from typing import Any, ClassVar

from pyflink_gcp.bigquery.batch import ROW_OVERHEAD, Batch
from pyflink_gcp.bigquery.buffered import (
    BufferedStreamCommitter,
    RateLimiter,
    StreamCalls,
    StreamCommit,
)
from pyflink_gcp.bigquery.client import (
    DEFAULT_STORAGE_HOST,
    append_rows_stub,
    open_append_channel,
    open_lookup_channel,
    open_storage_channel,
    resolve_storage_endpoint,
)
from pyflink_gcp.bigquery.connections import ConnectionPool, Lease
from pyflink_gcp.bigquery.destinations import TableDestination
from pyflink_gcp.bigquery.options import BigQueryWriterOptions, OrderingMode
from pyflink_gcp.bigquery.schema_update import SchemaUpdate
from pyflink_gcp.bigquery.sender import TableSender
from pyflink_gcp.bigquery.serialization import CHANGE_TYPE
from pyflink_gcp.bigquery.stream_lookup import StreamLookups
from pyflink_gcp.bigquery.tables import TableCatalog, TableLayout, open_metadata, schema_updates
from pyflink_gcp.bigquery.values import RowError
from pyflink_gcp.core.aio import AsyncChannel, LoopTasks
from pyflink_gcp.core.batching import OpenBatch, Slots, Timers
from pyflink_gcp.core.commit import CommittingWriterFactory
from pyflink_gcp.core.errors import ConfigurationError, SerializerError, WriteError
from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.functions import describe_callable, short_repr
from pyflink_gcp.core.options import CreateDisposition
from pyflink_gcp.core.quota import QuotaWindow
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.core.runtime_info import SubtaskInfo
from pyflink_gcp.core.writer import DestinationWriter, PicklesConfiguration, WriterFactory

_LOG = logging.getLogger("pyflink_gcp.bigquery")
#: Timeout of one GetWriteStream attempt (a new table's layout), capped by the retry deadline.
_LOOKUP_TIMEOUT_S = 30.0
#: The checkpoint id of the last ``prepare_commit``, at the end of input (see core.commit).
_END_OF_INPUT = -1
#: A table writer's change-data-capture keys while its open request holds none.
_NO_KEYS: frozenset[tuple[Any, ...]] = frozenset()


class TableWriter(DestinationWriter[TableDestination]):
    """Buffers and cuts the rows of one table (processing thread); its
    :class:`~pyflink_gcp.bigquery.sender.TableSender` appends them.

    Args:
        destination: The table.
        sender: The table's sender (encodes, appends, retries; its requests in flight).
        sink_name: For errors.
        max_rows: A request holds at most this many rows (``max_request_rows``).
        on_close: Told when the writer closes (a BUFFERED stream's commit is prepared then).
        table_layout: Looks the table up over REST (blocking), for its primary key when the
            layout came from the table's stream and its first change-data-capture row comes.
    """

    def __init__(
        self,
        destination: TableDestination,
        sender: TableSender,
        *,
        sink_name: str,
        max_rows: int,
        on_close: Callable[[TableWriter], None] | None = None,
        table_layout: Callable[[], TableLayout] | None = None,
    ) -> None:
        super().__init__(destination)
        self.sender = sender
        self._sink = sink_name
        self._on_close = on_close
        self._table_layout = table_layout
        # The open request: its rows (their bytes counted once encoded) and its age. Until the
        # table's first change-data-capture row, rows stay pending (encoded by the sender);
        # after it, they are encoded on arrival, into ``_rows``.
        self.open_batch: OpenBatch[Any] = OpenBatch(max_rows)
        self._encoding = False
        self._rows: list[bytes] = []
        self._records: list[Any] = []
        self._cdc = False
        self._keys: set[tuple[Any, ...]] | frozenset[tuple[Any, ...]] = _NO_KEYS
        self._rejected: list[FailedRecord] = []
        self._warned_no_key = False

    # -- counters (the sender's; read by tests, metrics and the benchmark) --------------------

    @property
    def rows_appended(self) -> int:
        return self.sender.rows_appended

    @property
    def bytes_accepted(self) -> int:  # type: ignore[override]
        """The bytes of the rows encoded so far: rows are encoded by the sender."""
        return self.sender.bytes_encoded

    @property
    def requests_sent(self) -> int:
        return self.sender.requests_sent

    @property
    def arrow_requests_sent(self) -> int:
        return self.sender.arrow_requests_sent

    @property
    def arrow_rejections(self) -> int:
        return self.sender.arrow_rejections

    # -- hot path ------------------------------------------------------------------------------

    def write(self, element: Any, record: Any) -> None:
        if type(element) is not dict and not isinstance(element, Mapping):
            raise SerializerError(
                f"sink '{self._sink}': the serializer returned {type(element).__name__} for "
                f"table {self.destination.table_id}; a BigQuery row is a dict keyed by column "
                f"name (or None to skip). Record: {short_repr(record)}"
            )
        if not self._encoding:
            if CHANGE_TYPE not in element:
                self._records.append(record)
                if self.open_batch.append(element):
                    self._cut()
                return
            # The first change-data-capture row: from now on rows are encoded on arrival.
            if self.sender.offsets is not None:
                raise ConfigurationError(
                    f"sink '{self._sink}': a change-data-capture row ({CHANGE_TYPE}) for table "
                    f"{self.destination.table_id}, but BigQuery applies upserts and deletes "
                    "only on the default stream: use WriteMethod.STORAGE_API_AT_LEAST_ONCE "
                    f"for CDC tables. Record: {short_repr(record)}"
                )
            self._cut()
            self._encoding = True
            self._learn_key()
        self._write_encoded(element, record)

    def _learn_key(self) -> None:
        """Before the first change-data-capture row: a layout from the table's stream knows
        only the serializer's key, and an assumed one (of the serializer's schema) may not be
        the table's, so the table's own is asked for (once, over REST). Change-data-capture
        rows are encoded as they come, so a row the assumed layout refused would be a failed
        record before any request could check it."""
        layout = self.sender.layout()
        asks = layout.assumed or not (layout.table_key_known or layout.encoder.primary_key)
        if asks and self._table_layout is not None:
            self.sender.use_layout(self._table_layout())

    def _write_encoded(self, element: Any, record: Any) -> None:
        sender = self.sender
        encoder = sender.layout().encoder
        try:
            data = encoder.encode(element)
        except RowError as exc:
            self._rejected.append(sender.refused(element, record, exc))
            return
        size = len(data) + ROW_OVERHEAD
        max_bytes = sender.max_bytes
        if size > max_bytes:
            self._rejected.append(sender.oversized(element, record, size))
            return
        cdc = CHANGE_TYPE in element
        key = None
        if cdc:
            if encoder.primary_key:
                key = encoder.key(element)
            elif not self._warned_no_key:
                self._warned_no_key = True
                _LOG.warning(
                    "%s: change-data-capture rows for %s but no primary key is known (from the "
                    "table or the serializer's schema): requests are not cut by key",
                    self._sink,
                    self.destination.table_id,
                )
        # The change-data-capture cut rule: a request ends before a key it already holds.
        if self._rows and (self.open_batch.bytes + size > max_bytes or key in self._keys):
            self._cut()
        self._rows.append(data)
        self._records.append(record)
        if cdc:
            self._cdc = True
            if key is not None:
                if self._keys is _NO_KEYS:  # an empty set per table writer is 216 bytes
                    self._keys = {key}
                else:
                    self._keys.add(key)  # type: ignore[union-attr]
        if self.open_batch.append(element, size):
            self._cut()

    def _cut(self) -> None:
        """Hand the open request to the sender and start a new one.

        Raises:
            SinkError: The sender died; its error is raised here rather than rows queued for a
                sender that no longer runs.
        """
        self.sender.raise_if_failed()
        if not self.open_batch:
            return
        rows = self._rows if self._encoding else None
        batch = Batch(rows, self.open_batch.cut(), self._records, self._cdc)
        self._rows, self._records = [], []
        self._cdc = False
        self._keys = _NO_KEYS
        self.sender.submit(batch)

    # -- flushing and lifetime -----------------------------------------------------------------

    def start_flush(self) -> None:
        self._cut()

    def flush(self) -> list[FailedRecord]:
        self._cut()
        failed = self.sender.settle()
        rejected, self._rejected = self._rejected, []
        return rejected + failed

    @property
    def is_clean(self) -> bool:
        return not (self.open_batch or self._rejected) and self.sender.is_idle

    def close(self) -> None:
        self.sender.close()
        if self._on_close is not None:
            self._on_close(self)

    def committable(self, *, finalize: bool) -> StreamCommit | None:
        """What the rows appended to this writer's BUFFERED stream since the last call need to
        become visible (called after a flush), offset -1 without new rows; None without a
        BUFFERED stream created."""
        offsets = self.sender.offsets
        if offsets is None or not self.sender.stream_created():
            return None
        return offsets.committable(
            self.destination.table_id, self.sender.stream_name(), finalize=finalize
        )


class BigQueryWriterFactory(PicklesConfiguration, WriterFactory[TableDestination]):
    """Creates the table writers of one sink subtask and owns their shared clients.

    Picklable configuration (``_config_fields``) until :meth:`open`, which (on the worker) opens
    the Storage Write channel, the table catalog (REST client for table metadata and creation),
    the timer thread of retries' backoffs and the metadata threads.
    """

    accepts_unroutable = True
    destination_type = TableDestination

    _config_fields: ClassVar[tuple[str, ...]] = (
        "sink_name",
        "resolver_name",
        "serializer",
        "options",
        "ordering",
        "create_disposition",
        "storage_endpoint",
        "rest_endpoint",
        "retry",
        "connection_timeout_s",
        "interceptors",
    )

    def __init__(
        self,
        *,
        sink_name: str,
        resolver: Any,
        serializer: Any,
        options: BigQueryWriterOptions,
        ordering: OrderingMode = OrderingMode.NONE,
        create_disposition: CreateDisposition = CreateDisposition.CREATE_NEVER,
        storage_endpoint: str | None = None,
        rest_endpoint: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.sink_name = sink_name
        self.resolver_name = describe_callable(resolver) if resolver is not None else "-"
        self.serializer = serializer
        self.options = options
        self.ordering = ordering
        self.create_disposition = create_disposition
        self.storage_endpoint = storage_endpoint
        self.rest_endpoint = rest_endpoint
        self.retry = retry or RetryPolicy(deadline_s=options.retry_deadline_s)
        self.connection_timeout_s = 120.0
        #: Client interceptors of the AppendRows calls (observability; tests): the
        #: ``grpc.aio`` ones apply to the shared connections (``channel_count`` on the default
        #: stream), the synchronous ones to the connections a table holds on its own. The
        #: tables' lookups take none.
        self.interceptors: tuple[Any, ...] = ()
        self._init_runtime()

    #: Whether the tables share a pool of AppendRows connections (the default stream only).
    shares_connections = True
    #: Whether a new table's layout is asked of its default stream first (:mod:`.stream_lookup`).
    looks_up_streams = True

    def _init_runtime(self) -> None:
        self.storage_endpoint_name = DEFAULT_STORAGE_HOST
        self._channel: Any = None
        #: The tables' GetWriteStream lookups (a grpc.aio channel on the process's event loop).
        self._lookup_channel: AsyncChannel | None = None
        self.stub: Any = None
        #: The shared AppendRows connections, when ``channel_count`` is set.
        self.pool: ConnectionPool | None = None
        #: Ends the senders' backoffs (one thread for every table of the subtask).
        self.timers: Timers | None = None
        #: Bounds the connections of their own that tables hold at once (BUFFERED streams,
        #: each on its own connection: ``channel_count``); None: the pool bounds them, or none.
        self.slots: Slots | None = None
        self.metadata_executor: Any = None
        self.catalog: TableCatalog | None = None
        #: New tables' layouts from their default streams (None: REST lookups only).
        self.stream_lookups: StreamLookups | None = None
        #: Each table's requests in flight: max_in_flight_requests, less after quota errors.
        self.quota = QuotaWindow(
            self.options.max_in_flight_requests, f"sink '{self.sink_name}': AppendRows per table"
        )

    @property
    def tables_created(self) -> int:
        """Tables this subtask created so far."""
        return 0 if self.catalog is None else self.catalog.tables_created

    def gauges(self) -> dict[str, Callable[[], int]]:
        return {
            "schemaUpdates": lambda: schema_updates(self.catalog),
            "declaredSchemaTables": lambda: 0 if (s := self.stream_lookups) is None else s.assumed,
            "declaredSchemaChecks": lambda: (
                0 if (s := self.stream_lookups) is None else s.checked_after
            ),
        }

    # -- lifecycle -----------------------------------------------------------------------------

    def open(self, info: SubtaskInfo) -> None:
        self.sink_name = info.sink_name
        endpoint = resolve_storage_endpoint(self.storage_endpoint)
        self.storage_endpoint_name = endpoint.host or DEFAULT_STORAGE_HOST
        self._channel = open_storage_channel(endpoint)
        self.stub = append_rows_stub(self._channel, self.interceptors)
        count = self.options.channel_count
        if self.shares_connections and count is not None:
            self.pool = ConnectionPool(
                LoopTasks(),
                lambda: open_append_channel(endpoint, self.interceptors),
                channel_count=count,
                timeout_s=self.retry.attempt_timeout(self.connection_timeout_s),
            )
        elif count is not None:
            self.slots = Slots(count)
        self.timers = Timers(f"{self.sink_name}-{info.subtask_index}-timers")
        self.catalog, self.metadata_executor = open_metadata(self, info.subtask_index)
        if self.looks_up_streams and self.options.schema_update is SchemaUpdate.NONE:
            self._lookup_channel = open_lookup_channel(endpoint)
            self.stream_lookups = StreamLookups(
                self._lookup_channel,
                self.catalog,
                self._rest_layout,
                timeout_s=self.retry.attempt_timeout(_LOOKUP_TIMEOUT_S),
            )

    def close(self) -> None:
        if self.stream_lookups is not None:
            self.stream_lookups.close()
            self.stream_lookups = None
        if self.metadata_executor is not None:
            self.metadata_executor.shutdown(wait=False, cancel_futures=True)
        self.metadata_executor = None
        if self._lookup_channel is not None:
            # After the metadata threads: a lookup it cancels is not handed over to them.
            self._lookup_channel.close()
            self._lookup_channel = None
        if self.timers is not None:
            self.timers.close()
            self.timers = None
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self.catalog is not None:
            self.catalog.close()
            self.catalog = None

    def create_writer(self, destination: TableDestination) -> TableWriter:
        """A writer for the table; its metadata is looked up on a metadata thread meanwhile."""
        if self.stub is None or self.metadata_executor is None or self.catalog is None:
            raise WriteError(f"sink '{self.sink_name}': the writer factory is not open")
        if destination.partition is not None:
            raise ConfigurationError(
                f"sink '{self.sink_name}': the resolver named the partition "
                f"{destination.table_id} (resolver {self.resolver_name}); the Storage "
                "Write API appends to tables, and a partitioned table puts each row in its "
                "partition itself: route to the table, or use WriteMethod.FILE_LOADS, which "
                "loads into a partition"
            )
        lookups = self.stream_lookups
        if lookups is None:
            return self.writer_for(destination, self._rest_layout(destination))
        return self.writer_for(
            destination, lookups.layout(destination), partial(lookups.check_later, destination)
        )

    def _rest_layout(self, destination: TableDestination) -> Future[TableLayout]:
        """The table's REST lookup on a metadata thread. Raises RuntimeError once closed."""
        executor, catalog = self.metadata_executor, self.catalog
        if executor is None or catalog is None:
            raise RuntimeError("the writer factory is closed")
        return executor.submit(catalog.layout, destination)  # type: ignore[no-any-return]

    def _table_layout(self, destination: TableDestination) -> TableLayout:
        """The table's REST lookup, on the calling thread."""
        if self.catalog is None:
            raise WriteError(f"sink '{self.sink_name}': the writer factory is not open")
        return self.catalog.layout(destination)

    def writer_for(
        self,
        destination: TableDestination,
        layout: TableLayout | Future[TableLayout],
        check: Callable[[], Future[TableLayout]] | None = None,
    ) -> TableWriter:
        """The writer of a table whose ``layout`` is known or being looked up, with its
        sender on this subtask's clients; ``check`` looks the table's own up when ``layout``
        is an assumed one."""
        options = self.options
        ordered = self.ordering is OrderingMode.PER_TABLE
        sender = TableSender(
            destination,
            layout,
            sink_name=self.sink_name,
            stub=self.stub,
            retry=self.retry,
            max_in_flight=1 if ordered else options.max_in_flight_requests,
            max_request_bytes=options.max_request_bytes,
            connection_timeout_s=self.retry.attempt_timeout(self.connection_timeout_s),
            endpoint=self.storage_endpoint_name,
            stream=self.stream_for(destination, layout),
            connect=None if self.pool is None else self.lease,
            unknown_fields=options.unknown_fields,
            missing_values=options.missing_values,
            quota=self.quota,
            timers=self.timers,
            slots=self.slots,
            check=check,
        )
        return TableWriter(
            destination,
            sender,
            sink_name=self.sink_name,
            max_rows=options.max_request_rows,
            on_close=self.writer_closed,
            table_layout=partial(self._table_layout, destination),
        )

    def stream_for(
        self, destination: TableDestination, layout: Future[TableLayout] | TableLayout
    ) -> Future[str] | None:
        """The BUFFERED stream a new writer appends to, being created; None: the default
        stream."""
        return None

    def lease(self, stream: str, layout: TableLayout, on_answer: Callable[[Any], None]) -> Lease:
        """A lease on one of the pool's connections while ``stream`` has requests in flight;
        ``on_answer`` receives their answers."""
        assert self.pool is not None
        return self.pool.acquire(stream, stream.split("/", 2)[1], layout.location, on_answer)

    def writer_closed(self, writer: TableWriter) -> None:
        """A writer was closed (idle, evicted, or the task ends)."""


class BufferedBigQueryWriterFactory(BigQueryWriterFactory, CommittingWriterFactory):
    """``WriteMethod.BUFFERED_STREAM``: every table writer appends to a BUFFERED stream of its
    own, and its rows become visible only when the committer flushes the stream after the
    checkpoint (:mod:`pyflink_gcp.bigquery.buffered`)."""

    shares_connections = False
    looks_up_streams = False

    def _init_runtime(self) -> None:
        super()._init_runtime()
        self._stream_calls: StreamCalls | None = None
        self._stream_limiter: RateLimiter | None = None
        self._writers: set[TableWriter] = set()
        self._closed_commits: list[StreamCommit] = []
        #: BUFFERED streams this subtask created (tests, logs).
        self.streams_created = 0

    def open(self, info: SubtaskInfo) -> None:
        super().open(info)
        self._stream_calls = StreamCalls(
            self._channel, self.retry, self.sink_name, self.storage_endpoint_name
        )
        self._stream_limiter = RateLimiter(self.options.max_stream_creations_per_second)

    def create_writer(self, destination: TableDestination) -> TableWriter:
        writer = super().create_writer(destination)
        self._writers.add(writer)
        return writer

    def stream_for(
        self, destination: TableDestination, layout: Future[TableLayout] | TableLayout
    ) -> Future[str] | None:
        assert self.metadata_executor is not None
        return self.metadata_executor.submit(self._create_stream, destination, layout)

    def _create_stream(
        self, destination: TableDestination, layout: Future[TableLayout] | TableLayout
    ) -> str:
        if isinstance(layout, Future):
            layout.result()  # the table exists (or was created) first
        assert self._stream_calls is not None and self._stream_limiter is not None
        self._stream_limiter.acquire()
        stream = self._stream_calls.create(str(destination), destination.table_id)
        self.streams_created += 1
        _LOG.debug("%s: BUFFERED stream %s for %s", self.sink_name, stream, destination.table_id)
        return stream

    def writer_closed(self, writer: TableWriter) -> None:
        if writer in self._writers:
            self._writers.discard(writer)
            commit = writer.committable(finalize=True)
            if commit is not None:
                self._closed_commits.append(commit)

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        """A committable per live writer's stream, with new rows or not (the committer
        finalizes the streams restored and final sets name), and those of writers closed since.

        At the end of input this is the last call, and the writers close after it: their
        streams are finalized with this commit.
        """
        commits: list[Any] = self._closed_commits
        self._closed_commits = []
        last = checkpoint_id == _END_OF_INPUT
        for writer in self._writers:
            commit = writer.committable(finalize=last)
            if commit is not None:
                commits.append(commit)
        if last:
            self._writers.clear()  # closed next, with nothing left to prepare
        return commits

    def create_committer(self) -> BufferedStreamCommitter:
        return BufferedStreamCommitter(
            sink_name=self.sink_name,
            storage_endpoint=self.storage_endpoint,
            retry=self.retry,
            threads=self.options.sender_threads,
        )

    def close(self) -> None:
        self._writers.clear()
        super().close()
