"""The sender-thread half of a table writer: encoding cut requests and appending them.

A :class:`~pyflink_gcp.bigquery.writer.TableWriter` (the processing thread's half) cuts a
table's rows into requests (:class:`Batch`) and hands each to the table's :class:`TableSender`
with :meth:`TableSender.submit`. The sender runs on the factory's shared thread pool while the
table has requests: it encodes each request (one Arrow record batch,
:mod:`pyflink_gcp.bigquery.arrow_rows`, or protobuf rows, :mod:`pyflink_gcp.bigquery.rows`,
split further to stay under ``max_request_bytes``) and pipelines up to ``max_in_flight_requests``
of them on one AppendRows connection (one with ``OrderingMode.PER_TABLE``). The two halves share
only the request queue and the results, under one condition variable.

Every AppendRows request names its stream (the emulator needs it), responses come back in
order on a connection, and pipelining several requests on one connection is what makes the
default stream fast. A sending burst holds one connection until the table has nothing left to
send: on the default stream a lease on a connection it shares with the subtask's other tables
(:mod:`pyflink_gcp.bigquery.connections`), else (a BUFFERED stream, or ``channel_count`` None)
a connection of its own, closed after the burst. So an idle table costs no thread and no stream.

A row that cannot be encoded (wrong type, unknown column) or is larger than a request is
rejected here, at once, without an RPC. What each response (or a lost connection) means for
the request's rows and the stream, from bad rows narrowed down by halving to transport, quota
and stream failures, is decided by :mod:`pyflink_gcp.bigquery.responses`, whose
:class:`~pyflink_gcp.bigquery.responses.ResponseHandling` the sender mixes in.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from pyflink_gcp.bigquery.batch import Batch
from pyflink_gcp.bigquery.buffered import StreamOffsets, resend_order
from pyflink_gcp.bigquery.client import (
    DEFAULT_STORAGE_HOST,
    AppendConnection,
    AppendRowsRequest,
    ProtoSchema,
)
from pyflink_gcp.bigquery.destinations import TableDestination
from pyflink_gcp.bigquery.responses import Reconnect, ResponseHandling
from pyflink_gcp.bigquery.schema_update import MissingValues, UnknownFields, fatal_reason
from pyflink_gcp.bigquery.serialization import row_payload
from pyflink_gcp.bigquery.tables import TableLayout
from pyflink_gcp.bigquery.values import RowError
from pyflink_gcp.core.errors import SinkError, WriteError
from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.functions import short_repr
from pyflink_gcp.core.quota import QuotaWindow
from pyflink_gcp.core.retry import BackoffSequence, RetryPolicy

#: Bytes a serialized row adds to a request besides its own (field tag and length prefix).
ROW_OVERHEAD = 6
#: Requests a table may queue beyond its in-flight window before ``submit`` waits (bounds memory).
_QUEUED_BATCHES = 4
#: ``AppendRowsRequest.MissingValueInterpretation.DEFAULT_VALUE``.
_DEFAULT_VALUE = AppendRowsRequest.MissingValueInterpretation.Value("DEFAULT_VALUE")


class TableSender(ResponseHandling):
    """Appends the cut requests of one table; see the module docstring.

    The processing thread calls :meth:`submit`, :meth:`settle`, :attr:`is_idle` and
    :meth:`close`; everything else runs on a sender thread, one at a time per table. The state
    both sides touch (the queue, the results, the connection) is guarded by ``_cond``.
    """

    def __init__(
        self,
        destination: TableDestination,
        layout: TableLayout | Future[TableLayout],
        *,
        sink_name: str,
        stub: Any,
        executor: Any,
        retry: RetryPolicy,
        max_in_flight: int,
        max_request_bytes: int,
        connection_timeout_s: float,
        endpoint: str = DEFAULT_STORAGE_HOST,
        stream: Future[str] | None = None,
        connect: Callable[[str, TableLayout], Any] | None = None,
        unknown_fields: UnknownFields = UnknownFields.FAIL,
        missing_values: MissingValues = MissingValues.NULL,
        quota: QuotaWindow | None = None,
    ) -> None:
        self.destination = destination
        #: The subtask's window (else the table's own): caps ``max_in_flight`` after quota errors.
        self._quota = quota or QuotaWindow(max_in_flight)
        self._unknown_fields = unknown_fields
        #: The request's ``default_missing_value_interpretation`` (0: unspecified, NULL).
        self._missing = _DEFAULT_VALUE if missing_values is MissingValues.DEFAULT_VALUE else 0
        self._sink = sink_name
        self._name = str(destination)
        #: The default stream, or (``stream``) a BUFFERED stream being created, whose appends
        #: carry offsets.
        self._stream_source = stream
        self._stream: str | None = destination.default_stream if stream is None else None
        self.offsets = None if stream is None else StreamOffsets()
        # Room for the stream name in a request (a created stream's name is not known yet).
        self._stream_length = len(destination.default_stream) + (0 if stream is None else 128)
        self._what = f"sink '{sink_name}': append to {destination.table_id} at {endpoint}"
        #: Opens (or leases) the connection of a sending burst: ``connect(stream, layout)``.
        self._connect = connect or (lambda name, _: AppendConnection(stub, name, self._timeout_s))
        self._executor = executor
        self._retry = retry
        self._depth = max_in_flight
        self._timeout_s = connection_timeout_s
        self._layout_source = layout
        self._layout: TableLayout | None = None
        self._plain_schema: Any = None
        self._cdc_schema: Any = None
        self._max_request_bytes = max_request_bytes
        #: Bytes of rows one request may carry (its limit less the schema it also carries).
        self.max_bytes = max_request_bytes
        self._cond = threading.Condition()
        self._queue: deque[Batch] = deque()
        self._draining = False
        self._failed: list[FailedRecord] = []
        self._fatal: BaseException | None = None
        self._closed = False
        self._connection: Any = None  # an AppendConnection, or a Lease on a shared one
        # Counters (read by tests, metrics and the benchmark).
        self.rows_appended = 0
        self.requests_sent = 0
        #: Bytes of the rows encoded for this table (Arrow or protobuf), once per row.
        self.bytes_encoded = 0
        self.arrow_requests_sent = 0
        self.arrow_rejections = 0

    # -- table layout (either thread) ----------------------------------------------------------

    def layout(self) -> TableLayout:
        """The table's encoders, waiting for its metadata lookup if it is still running.

        Raises the lookup's error (table missing, creation refused...) to every caller.
        """
        layout = self._layout
        if layout is None:
            source = self._layout_source
            layout = source if isinstance(source, TableLayout) else source.result()
            encoder = layout.encoder
            self._plain_schema = ProtoSchema(proto_descriptor=encoder.descriptor)
            self._cdc_schema = ProtoSchema(proto_descriptor=encoder.cdc_descriptor)
            overhead = len(encoder.cdc_descriptor.SerializeToString()) + self._stream_length + 64
            if layout.arrow is not None:
                overhead = max(overhead, len(layout.arrow.serialized_schema) + self._stream_length)
            self.max_bytes = self._max_request_bytes - overhead
            self._layout = self._layout_source = layout  # not the lookup's future, for life
        return layout

    def stream_name(self) -> str:
        """The stream appended to, waiting for a BUFFERED stream's creation if it still runs.

        Raises the creation's error to every caller.
        """
        stream = self._stream
        if stream is None:
            assert self._stream_source is not None
            stream = self._stream = self._stream_source.result()
        return stream

    def stream_created(self) -> bool:
        """Whether the stream is known (the default stream, or a BUFFERED one created)."""
        source = self._stream_source
        return self._stream is not None or (
            source is not None
            and source.done()
            and not source.cancelled()
            and source.exception() is None
        )

    def failure(self, element: Any, record: Any, reason: str) -> FailedRecord:
        """The failed record of a row of this table, for the failure handler."""
        return FailedRecord(
            sink=self._sink,
            destination=self._name,
            reason=reason,
            payload=row_payload(element),
            record_repr=short_repr(record),
        )

    def refused(self, element: Any, record: Any, error: RowError) -> FailedRecord:
        """The failed record of a row that cannot be encoded: one that ends the job, whatever
        the failure handler, for a key that is no column under ``UnknownFields.FAIL``."""
        failed = self.failure(element, record, str(error))
        failed.fatal = fatal_reason(error, self._unknown_fields)
        return failed

    def oversized(self, element: Any, record: Any, size: int) -> FailedRecord:
        """The failed record of a row larger than a request may be."""
        return self.failure(
            element,
            record,
            f"row of {size} bytes is larger than an append request may be ({self.max_bytes} bytes)",
        )

    # -- processing thread ---------------------------------------------------------------------

    def submit(self, batch: Batch) -> None:
        """Queue a cut request, starting a sender if none runs; waits while the table has more
        than its window and a few requests queued (backpressure).

        Raises:
            SinkError: The sender died; its error is raised here rather than rows queued for a
                sender that no longer runs.
        """
        if self._fatal is not None:
            raise self._fatal
        with self._cond:
            self._queue.append(batch)
            if not self._draining and self._fatal is None:
                self._draining = True
                self._executor.submit(self._drain)
            # Backpressure: a table that sends slower than it receives holds the task here.
            while (
                self._draining
                and self._fatal is None
                and len(self._queue) > self._depth + _QUEUED_BATCHES
            ):
                self._cond.wait()

    def settle(self) -> list[FailedRecord]:
        """Wait until every submitted request was answered; the rows the service rejected.

        Raises:
            SinkError: The sender failed (after retries); raised again by every later call.
        """
        with self._cond:
            while self._draining:
                self._cond.wait()
            fatal = self._fatal
            failed, self._failed = self._failed, []
        if fatal is not None:
            raise fatal
        return failed

    def raise_if_failed(self) -> None:
        """Raise the sender's error, if it died."""
        if self._fatal is not None:
            raise self._fatal

    @property
    def is_idle(self) -> bool:
        """Nothing queued, in flight, or waiting to be reported (a sender that died is not idle:
        its error must reach the next flush)."""
        return not (self._queue or self._draining or self._failed or self._fatal is not None)

    def close(self) -> None:
        """Drop what is queued and close the connection (a running sender stops at its next
        step)."""
        with self._cond:
            self._closed = True
            self._queue.clear()
            connection = self._connection
        if connection is not None:
            connection.close()
        source = self._layout_source
        if isinstance(source, Future):
            source.cancel()  # a lookup still queued for a writer that is gone

    # -- sender thread -------------------------------------------------------------------------

    def _drain(self) -> None:
        """Send queued requests until none is left, then close the connection."""
        in_flight: deque[Batch] = deque()
        backoff: BackoffSequence | None = None
        try:
            while True:
                # A retiring shared connection takes no more requests: once this table's are
                # answered, the next one goes on another connection.
                retiring = self._connection is not None and self._connection.retiring
                if retiring and not in_flight:
                    self._disconnect()
                    retiring = False
                with self._cond:
                    if self._closed:
                        self._draining = False
                        self._cond.notify_all()
                        return
                    to_send: list[Batch] = []
                    depth = min(self._depth, self._quota.limit)
                    while not retiring and len(in_flight) + len(to_send) < depth and self._queue:
                        to_send.append(self._queue.popleft())
                    if not to_send and not in_flight:
                        self._draining = False
                        self._cond.notify_all()
                        return
                    if to_send:
                        self._cond.notify_all()
                ready: list[Batch] = []
                for batch in to_send:
                    if batch.rows is None and batch.arrow is None:
                        encoded = self._encode_batch(batch)
                        self.bytes_encoded += sum(
                            len(b.arrow) if b.arrow is not None else sum(map(len, b.rows or ()))
                            for b in encoded
                        )
                        ready.extend(encoded)
                    else:
                        ready.append(batch)
                room = max(0, depth - len(in_flight))
                if len(ready) > room:
                    # Encoding split a request by size: the rest waits its turn in the window.
                    with self._cond:
                        self._queue.extendleft(reversed(ready[room:]))
                    del ready[room:]
                for batch in ready:
                    self._send(batch)
                    in_flight.append(batch)
                if not in_flight:
                    continue
                try:
                    response = self._receive()
                except Exception as exc:  # noqa: BLE001 - classified by _retry_or_raise
                    # The connection is gone: every unanswered request is sent again, those
                    # holding an offset first.
                    self._disconnect()
                    with self._cond:
                        self._queue.extendleft(reversed(resend_order(in_flight)))
                    in_flight.clear()
                    backoff = self._retry_or_raise(exc, backoff)
                    continue
                batch = in_flight.popleft()
                try:
                    backoff = self._handle(batch, response, backoff, in_flight)
                except Reconnect as reconnect:
                    # Sent again, with the ones behind it, on a new connection after a backoff.
                    self._disconnect()
                    with self._cond:
                        self._queue.extendleft(reversed(resend_order([batch, *in_flight])))
                    in_flight.clear()
                    backoff = self._retry_or_raise(reconnect.error, backoff)
        except BaseException as exc:  # noqa: BLE001 - handed to the processing thread
            error = exc
            if not isinstance(exc, SinkError):
                error = WriteError(f"{self._what}: {type(exc).__name__}: {exc}")
                error.__cause__ = exc
            with self._cond:
                self._fatal = error
                self._draining = False
                self._cond.notify_all()
        finally:
            self._disconnect()

    def _encode_batch(self, batch: Batch) -> list[Batch]:
        """Encode a pending batch: one Arrow record batch if possible, else protobuf rows.

        Rows that cannot be encoded go to the failure handler; protobuf rows are cut into
        requests of at most ``max_request_bytes``. Returns the requests to send.
        """
        layout = self.layout()
        elements = batch.elements
        if layout.arrow is not None:
            data = layout.arrow.encode(elements)
            if data is not None:
                if len(data) <= self.max_bytes:
                    batch.arrow = data
                    return [batch]
                if len(elements) > 1:
                    left, right = batch.halves()
                    return self._encode_batch(left) + self._encode_batch(right)
                # A single row over the limit: the protobuf path below rejects it by size.
        return self._encode_proto(batch)

    def _encode_proto(self, batch: Batch) -> list[Batch]:
        """Encode a batch as protobuf rows (see :meth:`_encode_batch`)."""
        elements = batch.elements
        encode = self.layout().encoder.encode
        max_bytes = self.max_bytes
        out: list[Batch] = []
        rows: list[bytes] = []
        kept_elements: list[Any] = []
        kept_records: list[Any] = []
        size = 0
        failed: list[FailedRecord] = []
        for element, record in zip(elements, batch.records, strict=True):
            try:
                data = encode(element)
            except RowError as exc:
                failed.append(self.refused(element, record, exc))
                continue
            row_size = len(data) + ROW_OVERHEAD
            if row_size > max_bytes:
                failed.append(self.oversized(element, record, row_size))
                continue
            if rows and size + row_size > max_bytes:
                out.append(Batch(rows, kept_elements, kept_records, False))
                rows, kept_elements, kept_records, size = [], [], [], 0
            rows.append(data)
            kept_elements.append(element)
            kept_records.append(record)
            size += row_size
        if rows:
            out.append(Batch(rows, kept_elements, kept_records, False))
        if failed:
            with self._cond:
                self._failed.extend(failed)
        return out

    def _send(self, batch: Batch) -> None:
        stream = self.stream_name()
        layout = self.layout()
        connection = self._connection
        if connection is None:
            connection = self._connect(stream, layout)
            with self._cond:
                self._connection = connection
        # Every request names its stream and carries its writer schema, on a shared connection
        # too: a request may follow others whose answers are not in yet, a backend may drop a
        # connection's schema with a rejected request (the emulator does), and a request that
        # fails for that reason must never be mistaken for bad rows.
        request = AppendRowsRequest()
        request.write_stream = stream
        if self._missing:
            request.default_missing_value_interpretation = self._missing
        if self.offsets is not None:
            request.offset.value = self.offsets.assign(batch)
        if batch.arrow is not None:
            assert layout.arrow is not None
            arrow_rows = request.arrow_rows
            arrow_rows.writer_schema.serialized_schema = layout.arrow.serialized_schema
            arrow_rows.rows.serialized_record_batch = batch.arrow
            self.arrow_requests_sent += 1
        else:
            request.proto_rows.writer_schema.CopyFrom(
                self._cdc_schema if batch.cdc else self._plain_schema
            )
            request.proto_rows.rows.serialized_rows.extend(batch.rows or ())
        connection.send(request)
        self.requests_sent += 1

    def _receive(self) -> Any:
        assert self._connection is not None
        return self._connection.receive()

    def _disconnect(self) -> None:
        with self._cond:
            connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()
