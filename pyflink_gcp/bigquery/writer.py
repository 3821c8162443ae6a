"""The BigQuery writer: rows of each table appended to its Storage Write API default stream.

This file is the hot path. Per record (:meth:`TableWriter.write`, on the processing thread): a
type check and a list append. A table's rows are cut into requests of ``max_request_rows``; each
cut request is handed to the table's *sender*, which runs on a shared thread pool, encodes the
request (one Arrow record batch, :mod:`pyflink_gcp.bigquery.arrow_rows`, or protobuf rows,
:mod:`pyflink_gcp.bigquery.rows`, split further to stay under ``max_request_bytes``) and
pipelines up to ``max_in_flight_requests`` requests on one AppendRows connection (one with
``OrderingMode.PER_TABLE``). :meth:`TableWriter.flush`, called before every checkpoint barrier,
waits until every request was answered.

Change-data-capture rows are the exception: they are encoded on arrival, because a request must
end before a row whose primary key it already holds (compared by value), and the key needs the
table's schema.

The table's schema is fetched (or the table created) on a metadata thread as soon as the writer
is created, so a subtask meeting many new tables keeps processing records meanwhile; the sender
waits for it before its first request.

Why a connection per sending burst rather than a request per call or a connection per table for
ever: every AppendRows request names its stream (the emulator needs it), responses come back in
order on a connection, and pipelining several requests on one connection is what makes the
default stream fast; the connection is closed once the table has nothing left to send, so an idle
table costs no thread and no open stream.

Failures:

- A row that cannot be encoded (wrong type, unknown column) or is larger than a request is
  rejected at once, without an RPC.
- A request the service rejects for its content is narrowed down to the guilty rows: with the
  service's per-row errors where it sends them, otherwise by splitting the request in halves until
  each bad row stands alone, so good rows land and only bad rows go to the failure handler.
- Transport errors and transient statuses re-send the unanswered requests on a new connection,
  with backoff, until the retry deadline; then the job fails. They are never dead-lettered.
"""

from __future__ import annotations

import base64
import json
import logging
import queue
import threading
from collections import deque
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

import grpc
from google.api_core import exceptions as gexc
from google.cloud.bigquery_storage_v1 import types as storage_types

from pyflink_gcp.bigquery.arrow_rows import ArrowEncoder
from pyflink_gcp.bigquery.destinations import TableDestination
from pyflink_gcp.bigquery.options import (
    BigQueryWriterOptions,
    CreateDisposition,
    OrderingMode,
    RowFormat,
)
from pyflink_gcp.bigquery.rows import RowEncoder, RowError, SchemaNotSupportedError
from pyflink_gcp.bigquery.serialization import CHANGE_TYPE, TableSchema, has_schema
from pyflink_gcp.core.endpoints import Endpoint, resolve_endpoint
from pyflink_gcp.core.errors import (
    ConfigurationError,
    CreationLimitExceededError,
    DestinationNotFoundError,
    SerializerError,
    SinkError,
    WriteError,
)
from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.functions import describe_callable, short_repr
from pyflink_gcp.core.retry import BackoffSequence, RetryPolicy, status_name
from pyflink_gcp.core.runtime_info import SubtaskInfo
from pyflink_gcp.core.writer import DestinationWriter, WriterFactory

_LOG = logging.getLogger("pyflink_gcp.bigquery")

REST_EMULATOR_VARIABLE = "BIGQUERY_EMULATOR_HOST"
STORAGE_EMULATOR_VARIABLE = "BIGQUERY_STORAGE_EMULATOR_HOST"
_DEFAULT_STORAGE_HOST = "bigquerystorage.googleapis.com:443"
_APPEND_ROWS = "/google.cloud.bigquery.storage.v1.BigQueryWrite/AppendRows"

# Raw protobuf classes: building requests through proto-plus wrappers costs ~50x more.
_AppendRowsRequest = storage_types.AppendRowsRequest.pb()
_AppendRowsResponse = storage_types.AppendRowsResponse.pb()
_ProtoSchema = storage_types.ProtoSchema.pb()

#: Bytes a serialized row adds to a request besides its own (field tag and length prefix).
_ROW_OVERHEAD = 6
#: Requests a table may queue beyond its in-flight window before ``write`` waits (bounds memory).
_QUEUED_BATCHES = 4
_STATUS_BY_CODE = {code.value[0]: code for code in grpc.StatusCode}


def resolve_storage_endpoint(explicit: str | None) -> Endpoint:
    """The builder's Storage Write endpoint, else ``BIGQUERY_STORAGE_EMULATOR_HOST``, else ADC."""
    return resolve_endpoint(explicit, STORAGE_EMULATOR_VARIABLE)


def resolve_rest_endpoint(explicit: str | None) -> Endpoint:
    """The builder's REST endpoint, else ``BIGQUERY_EMULATOR_HOST``, else the service (ADC)."""
    return resolve_endpoint(explicit, REST_EMULATOR_VARIABLE)


class AppendError(Exception):
    """An AppendRows response that carries an error status (classified like a gRPC error)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.grpc_status_code = code


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


class TableLayout:
    """How one table's rows are encoded: its protobuf encoder, and its Arrow encoder if any."""

    __slots__ = ("encoder", "arrow")

    def __init__(self, encoder: RowEncoder, arrow: ArrowEncoder | None) -> None:
        self.encoder = encoder
        self.arrow = arrow

    @staticmethod
    def of(
        fields: Any,
        primary_key: tuple[str, ...] = (),
        *,
        row_format: RowFormat = RowFormat.ARROW,
        ignore_unknown_values: bool = False,
    ) -> TableLayout:
        """The layout of a table with these columns. Raises SchemaNotSupportedError."""
        encoder = RowEncoder(fields, primary_key, ignore_unknown_values=ignore_unknown_values)
        arrow = None
        if row_format is RowFormat.ARROW:
            arrow = ArrowEncoder.for_schema(fields, ignore_unknown_values=ignore_unknown_values)
        return TableLayout(encoder, arrow)


class _Batch:
    """The rows of one AppendRows request, with what is needed to reject them one by one.

    A batch is *pending* until the sender encodes it (``rows`` and ``arrow`` both None), then
    carries either serialized protobuf rows or one serialized Arrow record batch.
    """

    __slots__ = ("rows", "arrow", "elements", "records", "cdc")

    def __init__(
        self,
        rows: list[bytes] | None,
        elements: list[Any],
        records: list[Any],
        cdc: bool,
        arrow: bytes | None = None,
    ):
        self.rows = rows
        self.arrow = arrow
        self.elements = elements
        self.records = records
        self.cdc = cdc

    def subset(self, indexes: list[int]) -> _Batch:
        rows = self.rows
        return _Batch(
            None if rows is None else [rows[i] for i in indexes],
            [self.elements[i] for i in indexes],
            [self.records[i] for i in indexes],
            self.cdc,
        )

    def halves(self) -> tuple[_Batch, _Batch]:
        mid = len(self.elements) // 2
        rows = self.rows
        return (
            _Batch(
                None if rows is None else rows[:mid],
                self.elements[:mid],
                self.records[:mid],
                self.cdc,
            ),
            _Batch(
                None if rows is None else rows[mid:],
                self.elements[mid:],
                self.records[mid:],
                self.cdc,
            ),
        )


def _requests(pending: queue.SimpleQueue[Any]) -> Iterator[Any]:
    while True:
        request = pending.get()
        if request is None:
            return
        yield request


class _Connection:
    """One AppendRows bidi stream: requests go in through a queue, responses come back in order."""

    __slots__ = ("_pending", "_call")

    def __init__(self, stub: Any, stream: str, timeout_s: float) -> None:
        self._pending: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # The routing header lets the service find the stream before the first request.
        self._call = stub(
            _requests(self._pending),
            metadata=(("x-goog-request-params", f"write_stream={stream}"),),
            timeout=timeout_s,
        )

    def send(self, request: Any) -> None:
        self._pending.put(request)

    def receive(self) -> Any:
        try:
            return next(self._call)
        except StopIteration:
            raise AppendError(
                grpc.StatusCode.UNAVAILABLE, "the AppendRows stream ended without a response"
            ) from None

    def close(self) -> None:
        self._pending.put(None)
        self._call.cancel()


class TableWriter(DestinationWriter[TableDestination]):
    """Buffers, cuts and appends the rows of one table; see the module docstring."""

    def __init__(
        self,
        destination: TableDestination,
        factory: BigQueryWriterFactory,
        layout: TableLayout | Future[TableLayout],
    ) -> None:
        super().__init__(destination)
        self._factory = factory
        self._sink = factory.sink_name
        self._name = str(destination)
        self._stream = destination.default_stream
        self._layout_source = layout
        self._layout: TableLayout | None = None
        self._plain_schema: Any = None
        self._cdc_schema: Any = None
        self._max_request_bytes = factory.options.max_request_bytes
        self._max_bytes = self._max_request_bytes
        self._max_rows = factory.options.max_request_rows
        ordered = factory.ordering is OrderingMode.PER_TABLE
        self._depth = 1 if ordered else factory.options.max_in_flight_requests
        self._what = f"sink '{self._sink}': append to {destination.table_id}"
        # The open request (processing thread only). Until the table's first change-data-capture
        # row, rows stay pending (encoded by the sender); after it, they are encoded on arrival.
        self._encoding = False
        self._rows: list[bytes] = []
        self._elements: list[Any] = []
        self._records: list[Any] = []
        self._bytes = 0
        self._cdc = False
        self._keys: set[tuple[Any, ...]] = set()
        self._rejected: list[FailedRecord] = []
        self._warned_no_key = False
        # The sender's state, shared with the sender thread under _cond.
        self._cond = threading.Condition()
        self._queue: deque[_Batch] = deque()
        self._draining = False
        self._failed: list[FailedRecord] = []
        self._fatal: BaseException | None = None
        self._closed = False
        self._connection: _Connection | None = None
        # Counters (read by tests and metrics).
        self.rows_appended = 0
        self.requests_sent = 0
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
            self._plain_schema = _ProtoSchema(proto_descriptor=encoder.descriptor)
            self._cdc_schema = _ProtoSchema(proto_descriptor=encoder.cdc_descriptor)
            overhead = len(encoder.cdc_descriptor.SerializeToString()) + len(self._stream) + 64
            if layout.arrow is not None:
                overhead = max(overhead, len(layout.arrow.serialized_schema) + len(self._stream))
            self._max_bytes = self._max_request_bytes - overhead
            self._layout = layout
        return layout

    # -- processing thread ---------------------------------------------------------------------

    def write(self, element: Any, record: Any) -> None:
        if type(element) is not dict and not isinstance(element, Mapping):
            raise SerializerError(
                f"sink '{self._sink}': the serializer returned {type(element).__name__} for "
                f"table {self.destination.table_id}; a BigQuery row is a dict keyed by column "
                f"name (or None to skip). Record: {short_repr(record)}"
            )
        if not self._encoding:
            if CHANGE_TYPE not in element:
                elements = self._elements
                elements.append(element)
                self._records.append(record)
                if len(elements) >= self._max_rows:
                    self._cut()
                return
            # The first change-data-capture row: from now on rows are encoded on arrival.
            self._cut()
            self._encoding = True
        self._write_encoded(element, record)

    def _write_encoded(self, element: Any, record: Any) -> None:
        encoder = self.layout().encoder
        try:
            data = encoder.encode(element)
        except RowError as exc:
            self._rejected.append(self._failure(element, record, str(exc)))
            return
        size = len(data) + _ROW_OVERHEAD
        if size > self._max_bytes:
            self._rejected.append(self._oversized(element, record, size))
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
        if self._rows and (self._bytes + size > self._max_bytes or key in self._keys):
            self._cut()
        self._rows.append(data)
        self._elements.append(element)
        self._records.append(record)
        self._bytes += size
        if cdc:
            self._cdc = True
            if key is not None:
                self._keys.add(key)
        if len(self._rows) >= self._max_rows:
            self._cut()

    def _cut(self) -> None:
        """Hand the open request to the sender and start a new one.

        Raises:
            SinkError: The sender died; its error is raised here rather than rows queued for a
                sender that no longer runs.
        """
        if self._fatal is not None:
            raise self._fatal
        if not self._elements:
            return
        rows = self._rows if self._encoding else None
        batch = _Batch(rows, self._elements, self._records, self._cdc)
        self._rows, self._elements, self._records = [], [], []
        self._bytes = 0
        self._cdc = False
        self._keys = set()
        with self._cond:
            self._queue.append(batch)
            if not self._draining and self._fatal is None:
                self._draining = True
                self._factory.executor.submit(self._drain)
            # Backpressure: a table that sends slower than it receives holds the task here.
            while (
                self._draining
                and self._fatal is None
                and len(self._queue) > self._depth + _QUEUED_BATCHES
            ):
                self._cond.wait()

    def start_flush(self) -> None:
        self._cut()

    def flush(self) -> list[FailedRecord]:
        self._cut()
        with self._cond:
            while self._draining:
                self._cond.wait()
            fatal = self._fatal
            failed, self._failed = self._failed, []
        if fatal is not None:
            raise fatal
        rejected, self._rejected = self._rejected, []
        return rejected + failed

    @property
    def is_clean(self) -> bool:
        # A sender that died is not clean: its error must reach the next flush, which the sink
        # skips for clean writers (an ordinary bundle end may have handed the rows over already).
        return not (
            self._elements
            or self._rejected
            or self._queue
            or self._draining
            or self._failed
            or self._fatal is not None
        )

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._queue.clear()
            connection = self._connection
        if connection is not None:
            connection.close()

    def _oversized(self, element: Any, record: Any, size: int) -> FailedRecord:
        return self._failure(
            element,
            record,
            f"row of {size} bytes is larger than an append request may be "
            f"({self._max_bytes} bytes)",
        )

    def _failure(self, element: Any, record: Any, reason: str) -> FailedRecord:
        return FailedRecord(
            sink=self._sink,
            destination=self._name,
            reason=reason,
            payload=row_payload(element),
            record_repr=short_repr(record),
        )

    # -- sender thread -------------------------------------------------------------------------

    def _drain(self) -> None:
        """Send queued requests until none is left, then close the connection."""
        in_flight: deque[_Batch] = deque()
        backoff: BackoffSequence | None = None
        try:
            while True:
                with self._cond:
                    if self._closed:
                        self._draining = False
                        self._cond.notify_all()
                        return
                    to_send = []
                    while len(in_flight) + len(to_send) < self._depth and self._queue:
                        to_send.append(self._queue.popleft())
                    if not to_send and not in_flight:
                        self._draining = False
                        self._cond.notify_all()
                        return
                    if to_send:
                        self._cond.notify_all()
                ready: list[_Batch] = []
                for batch in to_send:
                    if batch.rows is None and batch.arrow is None:
                        ready.extend(self._encode_batch(batch))
                    else:
                        ready.append(batch)
                room = self._depth - len(in_flight)
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
                except Exception as exc:
                    # The connection is gone: every unanswered request is sent again.
                    self._disconnect()
                    with self._cond:
                        self._queue.extendleft(reversed(in_flight))
                    in_flight.clear()
                    backoff = self._retry_or_raise(exc, backoff)
                    continue
                backoff = self._handle(in_flight.popleft(), response, backoff)
        except BaseException as exc:
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

    def _encode_batch(self, batch: _Batch) -> list[_Batch]:
        """Encode a pending batch: one Arrow record batch if possible, else protobuf rows.

        Rows that cannot be encoded go to the failure handler; protobuf rows are cut into
        requests of at most ``max_request_bytes``. Returns the requests to send.
        """
        layout = self.layout()
        elements = batch.elements
        if layout.arrow is not None:
            data = layout.arrow.encode(elements)
            if data is not None:
                if len(data) <= self._max_bytes:
                    batch.arrow = data
                    return [batch]
                if len(elements) > 1:
                    left, right = batch.halves()
                    return self._encode_batch(left) + self._encode_batch(right)
                # A single row over the limit: the protobuf path below rejects it by size.
        return self._encode_proto(batch)

    def _encode_proto(self, batch: _Batch) -> list[_Batch]:
        """Encode a batch as protobuf rows (see :meth:`_encode_batch`)."""
        elements = batch.elements
        encode = self.layout().encoder.encode
        max_bytes = self._max_bytes
        out: list[_Batch] = []
        rows: list[bytes] = []
        kept_elements: list[Any] = []
        kept_records: list[Any] = []
        size = 0
        failed: list[FailedRecord] = []
        for element, record in zip(elements, batch.records, strict=True):
            try:
                data = encode(element)
            except RowError as exc:
                failed.append(self._failure(element, record, str(exc)))
                continue
            row_size = len(data) + _ROW_OVERHEAD
            if row_size > max_bytes:
                failed.append(self._oversized(element, record, row_size))
                continue
            if rows and size + row_size > max_bytes:
                out.append(_Batch(rows, kept_elements, kept_records, False))
                rows, kept_elements, kept_records, size = [], [], [], 0
            rows.append(data)
            kept_elements.append(element)
            kept_records.append(record)
            size += row_size
        if rows:
            out.append(_Batch(rows, kept_elements, kept_records, False))
        if failed:
            with self._cond:
                self._failed.extend(failed)
        return out

    def _send(self, batch: _Batch) -> None:
        connection = self._connection
        if connection is None:
            connection = _Connection(
                self._factory.stub, self._stream, self._factory.connection_timeout_s
            )
            with self._cond:
                self._connection = connection
        # Every request names its stream and carries its writer schema: a connection whose
        # earlier request failed may have lost the schema it was sent first (the emulator does),
        # and a request that fails for that reason must never be mistaken for bad rows.
        request = _AppendRowsRequest()
        request.write_stream = self._stream
        layout = self.layout()
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

    def _handle(self, batch: _Batch, response: Any, backoff: BackoffSequence | None) -> Any:
        """Settle one answered request. Returns the backoff sequence to continue with."""
        if response.row_errors:
            # The service names the bad rows and commits none of the request: re-send the rest.
            bad = {int(e.index): e.message for e in response.row_errors}
            failed = [
                self._failure(batch.elements[i], batch.records[i], message)
                for i, message in sorted(bad.items())
                if 0 <= i < len(batch.elements)
            ]
            rest = [i for i in range(len(batch.elements)) if i not in bad]
            with self._cond:
                self._failed.extend(failed)
                if rest:
                    self._queue.appendleft(batch.subset(rest))
            return backoff
        code = response.error.code if response.HasField("error") else 0
        if code == 0:
            self.rows_appended += len(batch.elements)
            return None
        status = _STATUS_BY_CODE.get(code, grpc.StatusCode.UNKNOWN)
        message = response.error.message
        if status is grpc.StatusCode.INVALID_ARGUMENT:
            if batch.arrow is not None:
                # Before blaming the rows, send them again as protobuf rows: an endpoint that
                # does not take Arrow must not make every row a failed record.
                self._note_arrow_rejected(message)
                retry = self._encode_proto(batch)
                with self._cond:
                    self._queue.extendleft(reversed(retry))
                return backoff
            # Rejected whole for its content: isolate the bad rows by halving the request.
            with self._cond:
                if len(batch.elements) == 1:
                    self._failed.append(self._failure(batch.elements[0], batch.records[0], message))
                else:
                    left, right = batch.halves()
                    self._queue.appendleft(right)
                    self._queue.appendleft(left)
            return backoff
        with self._cond:
            self._queue.appendleft(batch)
        return self._retry_or_raise(AppendError(status, message), backoff)

    def _note_arrow_rejected(self, message: str) -> None:
        self.arrow_rejections += 1
        if self.arrow_rejections == 1:
            _LOG.warning(
                "%s: an Arrow request to %s was rejected (%s); its rows are sent again as "
                "protobuf rows. If every Arrow request fails, set "
                "BigQueryWriterOptions.row_format=RowFormat.PROTO.",
                self._sink,
                self.destination.table_id,
                message,
            )

    def _retry_or_raise(self, exc: Exception, backoff: BackoffSequence | None) -> BackoffSequence:
        status = status_name(exc)
        # NOT_FOUND is retried too: a table created a moment ago may not be visible to the
        # Storage Write API yet.
        if not (self._factory.retry.is_transient(exc) or status in ("NOT_FOUND", "CANCELLED")):
            raise WriteError(f"{self._what} failed: {status}: {exc}") from exc
        if backoff is None:
            backoff = self._factory.retry.backoffs()
        try:
            backoff.wait_or_raise(exc, self._what)
        except WriteError as error:
            if status == "NOT_FOUND":
                raise DestinationNotFoundError(
                    f"sink '{self._sink}': table {self.destination.table_id} is not found by the "
                    f"Storage Write API: {exc}"
                ) from exc
            raise error
        return backoff


class BigQueryWriterFactory(WriterFactory[TableDestination]):
    """Creates the table writers of one sink subtask and owns their shared clients.

    Picklable configuration until :meth:`open`, which (on the worker) opens the Storage Write
    channel, the REST client used for table metadata and creation, and the sender threads.
    """

    accepts_unroutable = True
    destination_type = TableDestination

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
        self.retry = retry or RetryPolicy(deadline_s=options.retry_deadline.total_seconds())
        self.connection_timeout_s = 120.0
        #: Client interceptors for the Storage Write channel (observability; tests).
        self.interceptors: tuple[Any, ...] = ()
        self.tables_created = 0
        self._channel: Any = None
        self.stub: Any = None
        self.executor: Any = None
        self.metadata_executor: Any = None
        self._lock = threading.Lock()
        self._rest: Any = None
        self._rest_endpoint: Endpoint | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(
            _channel=None,
            stub=None,
            executor=None,
            metadata_executor=None,
            _lock=None,
            _rest=None,
            tables_created=0,
        )
        return state

    # -- lifecycle -----------------------------------------------------------------------------

    def open(self, info: SubtaskInfo) -> None:
        self.sink_name = info.sink_name
        endpoint = resolve_storage_endpoint(self.storage_endpoint)
        options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        if endpoint.insecure:
            assert endpoint.host is not None
            channel = grpc.insecure_channel(endpoint.host, options=options)
        else:
            from google.cloud.bigquery_storage_v1.services.big_query_write.transports import (
                BigQueryWriteGrpcTransport,
            )

            channel = BigQueryWriteGrpcTransport.create_channel(
                endpoint.host or _DEFAULT_STORAGE_HOST, options=options
            )
        self._channel = channel
        if self.interceptors:
            channel = grpc.intercept_channel(channel, *self.interceptors)
        self.stub = channel.stream_stream(
            _APPEND_ROWS,
            request_serializer=_AppendRowsRequest.SerializeToString,
            response_deserializer=_AppendRowsResponse.FromString,
        )
        self.executor = ThreadPoolExecutor(
            max_workers=self.options.sender_threads,
            thread_name_prefix=f"{self.sink_name}-{info.subtask_index}-send",
        )
        # Separate from the senders: a sender waits for its table's metadata, which must not
        # queue behind it.
        self.metadata_executor = ThreadPoolExecutor(
            max_workers=self.options.metadata_threads,
            thread_name_prefix=f"{self.sink_name}-{info.subtask_index}-meta",
        )
        self._lock = threading.Lock()
        self._rest_endpoint = resolve_rest_endpoint(self.rest_endpoint)

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)
            self.executor = None
        if self.metadata_executor is not None:
            self.metadata_executor.shutdown(wait=False, cancel_futures=True)
            self.metadata_executor = None
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self._rest is not None:
            self._rest.close()
            self._rest = None

    # -- tables --------------------------------------------------------------------------------

    def create_writer(self, destination: TableDestination) -> TableWriter:
        """A writer for the table; its metadata is looked up on a metadata thread meanwhile."""
        if self.stub is None or self.metadata_executor is None:
            raise WriteError(f"sink '{self.sink_name}': the writer factory is not open")
        return TableWriter(
            destination, self, self.metadata_executor.submit(self.layout, destination)
        )

    def layout(self, destination: TableDestination) -> TableLayout:
        """Fetch (or create) the table and build its encoders. Runs on a metadata thread."""
        table = self._get_or_create_table(destination)
        primary_key: tuple[str, ...] = ()
        constraints = table.table_constraints
        if constraints is not None and constraints.primary_key is not None:
            primary_key = tuple(constraints.primary_key.columns)
        if not primary_key:
            # The table's metadata may not carry the key (an emulator drops it): fall back on
            # the key the serializer declares for the table.
            schema = self._serializer_schema(destination)
            if schema is not None:
                primary_key = schema.primary_key
        try:
            return TableLayout.of(
                table.schema,
                primary_key,
                row_format=self.options.row_format,
                ignore_unknown_values=self.options.ignore_unknown_values,
            )
        except SchemaNotSupportedError as exc:
            raise ConfigurationError(
                f"sink '{self.sink_name}': table {destination.table_id}: {exc}"
            ) from exc

    def rest_client(self, project: str) -> Any:
        """The REST client (table metadata and creation), created on first use."""
        with self._lock:
            return self._rest_client(project)

    def _rest_client(self, project: str) -> Any:
        if self._rest is None:
            from google.api_core.client_options import ClientOptions
            from google.cloud import bigquery

            endpoint = self._rest_endpoint or resolve_rest_endpoint(self.rest_endpoint)
            if endpoint.insecure:
                from google.auth.credentials import AnonymousCredentials

                self._rest = bigquery.Client(
                    project=project,
                    credentials=AnonymousCredentials(),
                    client_options=ClientOptions(api_endpoint=endpoint.http_url),
                )
            elif endpoint.host is not None:
                self._rest = bigquery.Client(
                    project=project, client_options=ClientOptions(api_endpoint=endpoint.http_url)
                )
            else:
                self._rest = bigquery.Client(project=project)
        return self._rest

    def _get_or_create_table(self, destination: TableDestination) -> Any:
        client = self.rest_client(destination.project)
        table_id = destination.table_id
        try:
            return self.retry.call(
                lambda: client.get_table(table_id, retry=None, timeout=60),
                f"sink '{self.sink_name}': get table {table_id}",
            )
        except gexc.NotFound:
            pass
        if self.create_disposition is CreateDisposition.CREATE_NEVER:
            raise DestinationNotFoundError(
                f"sink '{self.sink_name}': table {table_id} does not exist and the create "
                f"disposition is CREATE_NEVER (resolver {self.resolver_name})"
            )
        return self._create_table(destination)

    def _serializer_schema(self, destination: TableDestination) -> TableSchema | None:
        if not has_schema(self.serializer):
            return None
        try:
            schema = self.serializer.schema(destination)
        except Exception as exc:
            raise SerializerError(
                f"sink '{self.sink_name}': serializer {describe_callable(self.serializer)} "
                f"schema() raised {type(exc).__name__}: {exc} for table {destination.table_id}"
            ) from exc
        if schema is not None and not isinstance(schema, TableSchema):
            raise SerializerError(
                f"sink '{self.sink_name}': serializer {describe_callable(self.serializer)} "
                f"schema() returned {type(schema).__name__} for table {destination.table_id}; "
                "expected a TableSchema"
            )
        return schema

    def _create_table(self, destination: TableDestination) -> Any:
        table_id = destination.table_id
        limit = self.options.max_created_tables
        with self._lock:
            # Counted when attempted (metadata threads create concurrently); given back below
            # when another subtask created the table first.
            if self.tables_created >= limit:
                raise CreationLimitExceededError(
                    f"sink '{self.sink_name}': creating table {table_id} would exceed "
                    f"max_created_tables={limit} for this subtask ({self.tables_created} tables "
                    f"created so far). The destination resolver {self.resolver_name} names more "
                    "new tables than expected; raise BigQueryWriterOptions.max_created_tables "
                    "if that is intended."
                )
            self.tables_created += 1
        try:
            return self._create_table_counted(destination)
        except BaseException:
            with self._lock:
                self.tables_created -= 1
            raise

    def _create_table_counted(self, destination: TableDestination) -> Any:
        from google.cloud import bigquery
        from google.cloud.bigquery.table import PrimaryKey, TableConstraints

        table_id = destination.table_id
        schema = self._serializer_schema(destination)
        if schema is None:
            raise DestinationNotFoundError(
                f"sink '{self.sink_name}': table {table_id} does not exist and serializer "
                f"{describe_callable(self.serializer)} gives no schema() to create it with"
            )
        table = bigquery.Table(table_id, schema=list(schema.fields))
        if schema.primary_key:
            table.table_constraints = TableConstraints(
                primary_key=PrimaryKey(columns=list(schema.primary_key)), foreign_keys=[]
            )
        if schema.clustering_fields:
            table.clustering_fields = list(schema.clustering_fields)
        client = self.rest_client(destination.project)
        what = f"sink '{self.sink_name}': create table {table_id}"
        backoff = self.retry.backoffs()
        while True:
            try:
                created = client.create_table(table, retry=None, timeout=60)
            except gexc.Conflict:
                # Another subtask created it first: not counted against this subtask.
                existing = self.retry.call(
                    lambda: client.get_table(table_id, retry=None, timeout=60), what
                )
                with self._lock:
                    self.tables_created -= 1
                return existing
            except gexc.NotFound:
                raise self._no_dataset(destination) from None
            except Exception as exc:
                if not self.retry.is_transient(exc):
                    raise WriteError(f"{what} failed: {status_name(exc)}: {exc}") from exc
                # Some backends answer a create in a missing dataset with an internal error.
                if self._dataset_missing(destination):
                    raise self._no_dataset(destination) from exc
                backoff.wait_or_raise(exc, what)
                continue
            _LOG.info("%s: created table %s", self.sink_name, table_id)
            return created

    def _dataset_missing(self, destination: TableDestination) -> bool:
        client = self.rest_client(destination.project)
        try:
            client.get_dataset(f"{destination.project}.{destination.dataset}", retry=None)
        except gexc.NotFound:
            return True
        except Exception:  # noqa: BLE001 - only a definite NotFound answers the question
            return False
        return False

    def _no_dataset(self, destination: TableDestination) -> DestinationNotFoundError:
        return DestinationNotFoundError(
            f"sink '{self.sink_name}': cannot create table {destination.table_id}: dataset "
            f"{destination.project}.{destination.dataset} does not exist (the sink creates "
            "tables, not datasets)"
        )
