"""What an answered AppendRows request means for its rows, its table and its stream.

:class:`~pyflink_gcp.bigquery.sender.TableSender` (:mod:`pyflink_gcp.bigquery.sender`) sends a
table's requests, and each response comes back to it in order by callback; the methods here
(a mixin of the sender) decide what each response, or a lost connection, means: rows
appended, bad rows to narrow down and hand to the failure handler, a request to send again, a
wait before a new connection, or the end of the job. They are apart from the sending steps
because they are the sink's judgement of the service's answers, the part that decides which
rows fail and which errors a restart cannot fix, while the steps only move requests through a
connection.

Failures (a row that cannot be encoded never gets this far: the sender rejects it at once):

- A request the service rejects for its content is narrowed down to the guilty rows: with the
  service's per-row errors where it sends them, otherwise by splitting the request in halves
  until each bad row stands alone, so good rows land and only bad rows go to the failure handler.
  The halves go back to the front of the queue and travel in the same pipeline as every other
  request, instead of through the synchronous
  :func:`~pyflink_gcp.core.isolation.isolate_rejected` (which sends one part and waits for its
  answer): on a connection whose responses come back in order, waiting for one part would stall
  the requests in flight behind it, and an Arrow request rejected whole is first re-sent as
  protobuf rows rather than halved.
- A refusal whose status carries a StorageError naming the stream or its table (finalized,
  not found, wrong state; :mod:`pyflink_gcp.bigquery.storage_errors`) is the stream's failure,
  whatever its code: it fails the job (a restart appends to new streams), and no row of the
  request reaches the failure handler. A rejection without that detail or per-row errors is
  still narrowed down by halving: the emulator rejects bad rows that way.
- Transport errors and transient statuses re-send the unanswered requests on a new connection,
  with backoff (a timer, no thread sleeping), until the retry deadline; then the job fails.
  They are never dead-lettered. On a BUFFERED stream the requests that hold an offset are sent
  again first, in offset order.
- Quota errors (RESOURCE_EXHAUSTED) are retried the same way, on the policy's slower quota
  schedule, and halve the subtask's :class:`~pyflink_gcp.core.quota.QuotaWindow`, which caps
  every table's requests in flight until appends succeed again.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from pyflink_gcp.bigquery.batch import Batch
from pyflink_gcp.bigquery.buffered import STALE, StreamOffsets
from pyflink_gcp.bigquery.destinations import TableDestination
from pyflink_gcp.bigquery.storage_errors import blames_stream, code_name, storage_error
from pyflink_gcp.core.errors import DestinationNotFoundError, WriteError
from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.quota import QuotaWindow
from pyflink_gcp.core.retry import BackoffSequence, RetryPolicy, status_name
from pyflink_gcp.core.status import StatusError, is_record_fault, status_from_code
from pyflink_gcp.core.waits import LazyCondition

_LOG = logging.getLogger("pyflink_gcp.bigquery")

#: Statuses that blame a request's rows. Only INVALID_ARGUMENT: the default stream takes no
#: offsets, so OUT_OF_RANGE and FAILED_PRECONDITION speak of the stream, not of the rows.
_ROW_FAULT_CODES = frozenset({"INVALID_ARGUMENT"})
#: The status of an append whose offset is already in a BUFFERED stream.
_ALREADY_EXISTS = grpc.StatusCode.ALREADY_EXISTS.value[0]
#: The StorageError of rows whose writer schema has columns the table (as the Storage Write
#: API knows it) lacks: after a schema update, until the API has it.
SCHEMA_MISMATCH = "SCHEMA_MISMATCH_EXTRA_FIELDS"


class Reconnect(Exception):
    """A request to send again on a new connection, after a backoff (``error`` is retried)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class ResponseHandling:
    """Settles a table's answered requests; mixed into
    :class:`~pyflink_gcp.bigquery.sender.TableSender`, whose state it reads and changes
    (under ``_cond``, as the sender does). Runs in the sender's steps, which run one at a time
    (on the thread of the answer's callback, of a timer, or the processing thread)."""

    destination: TableDestination
    offsets: StreamOffsets | None
    rows_appended: int
    arrow_rejections: int
    _cond: LazyCondition
    _queue: list[Batch]
    _failed: list[FailedRecord]
    _quota: QuotaWindow
    _retry: RetryPolicy
    _sink: str
    _stream: str | None
    _what: str

    def failure(self, element: Any, record: Any, reason: str) -> FailedRecord:
        """The failed record of a row of this table (the sender builds it)."""
        raise NotImplementedError

    def _encode_proto(self, batch: Batch) -> list[Batch]:
        """``batch`` encoded as protobuf rows (the sender encodes)."""
        raise NotImplementedError

    def _pause(self, delay_s: float) -> None:
        """Send nothing for ``delay_s`` seconds (a backoff; the sender sets a timer)."""
        raise NotImplementedError

    def _handle(
        self, batch: Batch, response: Any, backoff: BackoffSequence | None, in_flight: list[Batch]
    ) -> Any:
        """Settle one answered request. Returns the backoff sequence to continue with.

        ``in_flight`` are the requests sent after it; on a BUFFERED stream they cannot land
        when it did not.
        """
        code = response.error.code if response.HasField("error") else 0
        offsets = self.offsets
        if offsets is not None:
            if batch.offset == STALE:
                if code == 0:
                    raise WriteError(
                        f"{self._what}: a request sent after a refused one was appended; the "
                        "stream's offsets are not what the sink counted"
                    )
                # Refused because an earlier request was: sent again, at a new offset.
                batch.offset = None
                with self._cond:
                    self._queue.insert(0, batch)
                return backoff
            if code in (0, _ALREADY_EXISTS):
                # ALREADY_EXISTS: re-sent after a lost connection, and appended the first time.
                offsets.confirm(batch)
                self.rows_appended += len(batch.elements)
                self._quota.on_success()
                return None
            offsets.refuse(batch, in_flight)
        detail = None if response.row_errors else storage_error(response.error)
        if detail is not None and blames_stream(detail):
            return self._stream_refused(batch, code, response.error, code_name(detail), backoff)
        if response.row_errors:
            # The service names the bad rows and commits none of the request: re-send the rest.
            bad = {int(e.index): e.message for e in response.row_errors}
            failed = [
                self.failure(batch.elements[i], batch.records[i], message)
                for i, message in sorted(bad.items())
                if 0 <= i < len(batch.elements)
            ]
            rest = [i for i in range(len(batch.elements)) if i not in bad]
            with self._cond:
                self._failed.extend(failed)
                if rest:
                    self._queue.insert(0, batch.subset(rest))
            return backoff
        if code == 0:
            self.rows_appended += len(batch.elements)
            self._quota.on_success()
            return None
        error = StatusError.of(code, response.error.message)
        if is_record_fault(error, _ROW_FAULT_CODES):
            if batch.arrow is not None:
                # Before blaming the rows, send them again as protobuf rows: an endpoint that
                # does not take Arrow must not make every row a failed record.
                self._note_arrow_rejected(str(error))
                retry = self._encode_proto(batch)
                with self._cond:
                    self._queue[:0] = retry
                return backoff
            # Rejected whole for its content: isolate the bad rows by halving the request.
            with self._cond:
                if len(batch.elements) == 1:
                    self._failed.append(
                        self.failure(batch.elements[0], batch.records[0], str(error))
                    )
                else:
                    left, right = batch.halves()
                    self._queue[:0] = (left, right)
            return backoff
        with self._cond:
            self._queue.insert(0, batch)
        return self._retry_or_raise(error, backoff)

    def _stream_refused(
        self, batch: Batch, code: int, status: Any, cause: str, backoff: BackoffSequence | None
    ) -> Any:
        """An append refused for its stream or table (the status's StorageError ``cause``), not
        for its rows: a missing table is waited for like NOT_FOUND, anything else fails the
        sender (a restart appends to new streams). Returns the backoff to continue with."""
        if cause == SCHEMA_MISMATCH:
            # The table gained columns the Storage Write API does not know yet (a schema update
            # takes a while to reach it; a connection keeps the schema it opened with): a new
            # connection after a backoff, until the retry deadline.
            raise Reconnect(
                StatusError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"{cause}: {status.message} (the table's new columns have not reached the "
                    "Storage Write API yet)",
                )
            )
        with self._cond:
            self._queue.insert(0, batch)
        if cause == "TABLE_NOT_FOUND" or (cause == "STREAM_NOT_FOUND" and self.offsets is None):
            error = StatusError(grpc.StatusCode.NOT_FOUND, f"{cause}: {status.message}")
            return self._retry_or_raise(error, backoff)
        raise WriteError(
            f"{self._what} failed: {status_from_code(code).name} ({cause}): {status.message}; "
            f"stream {self._stream} takes no rows, whatever their content"
        )

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
        if not (self._retry.is_transient(exc) or status in ("NOT_FOUND", "CANCELLED")):
            raise WriteError(f"{self._what} failed: {status}: {exc}") from exc
        if backoff is None:
            backoff = self._retry.backoffs(self._quota)
        try:
            self._pause(backoff.next_wait(exc, self._what))
        except WriteError as error:
            if status == "NOT_FOUND":
                raise DestinationNotFoundError(
                    f"sink '{self._sink}': table {self.destination.table_id} is not found by the "
                    f"Storage Write API: {exc}"
                ) from exc
            raise error
        return backoff
