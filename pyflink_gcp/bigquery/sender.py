"""The sending half of a table writer: encoding cut requests and appending them by callback.

A :class:`~pyflink_gcp.bigquery.writer.TableWriter` (the processing thread's half) cuts a
table's rows into requests (:class:`Batch`) and hands each to the table's :class:`TableSender`
with :meth:`TableSender.submit`. The sender encodes each request (one Arrow record batch,
:mod:`pyflink_gcp.bigquery.arrow_rows`, or protobuf rows, :mod:`pyflink_gcp.bigquery.rows`,
split further to stay under ``max_request_bytes``) and pipelines up to ``max_in_flight_requests``
of them on one AppendRows connection (one with ``OrderingMode.PER_TABLE``).

No thread waits on a request. The processing thread encodes each cut request and queues it;
the sender is a small state machine whose steps run one at a time, on whichever thread brings
it something to do, and never make a thread wait for another: the processing thread, which
writes the queued requests onto the connection while the table's window has room; the thread
that reads the connection's answers (the event loop's for a shared connection, a reader thread
for one of the table's own), which hands each response to the sender's callback, which settles it
(frees its slot, records rejected rows or the first error, queues what must be sent again) and
sends the requests that waited for the slot; a timer of the subtask, which ends a retry's
backoff; a metadata thread, which ends the table's lookup (requests cut before it are encoded
then). The processing thread waits only when the table has more than its window and a few
requests queued (backpressure), and in :meth:`TableSender.settle`, once, until everything in
flight was answered; neither wait trusts another thread to bring what it waits for
(:mod:`pyflink_gcp.bigquery.sender_waits`).

Every AppendRows request names its stream (the emulator needs it), responses come back in
order on a connection, and pipelining several requests on one connection is what makes the
default stream fast. A table holds one connection while it has requests in flight: on the
default stream a lease on a connection it shares with the subtask's other tables
(:mod:`pyflink_gcp.bigquery.connections`), else (a BUFFERED stream, or ``channel_count`` None)
a connection of its own, closed when nothing is left in flight. A BUFFERED stream's
connection first takes one of the subtask's ``channel_count`` slots
(:class:`~pyflink_gcp.core.batching.Slots`): when all are held, the table's requests wait in
its queue until a table releases one, and that release calls the table back. So an idle
table costs no thread and no stream, and a subtask holds a bounded number of connections
however many tables it writes.

A row that cannot be encoded (wrong type, unknown column) or is larger than a request is
rejected here, at once, without an RPC; under a layout assumed from the serializer's declared
schema the table is asked first (:mod:`pyflink_gcp.bigquery.layout_checks`). What each
response (or a lost connection) means for the request's rows and the stream, from bad rows
narrowed down by halving to transport, quota and stream failures, is decided by :mod:`pyflink_gcp.bigquery.responses`, whose
:class:`~pyflink_gcp.bigquery.responses.ResponseHandling` the sender mixes in.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Any

import grpc

from pyflink_gcp.bigquery.batch import Batch, encode_requests, encode_rows
from pyflink_gcp.bigquery.buffered import StreamOffsets, resend_order
from pyflink_gcp.bigquery.client import (
    DEFAULT_STORAGE_HOST,
    AppendConnection,
    AppendRowsRequest,
    PendingAppend,
)
from pyflink_gcp.bigquery.destinations import TableDestination
from pyflink_gcp.bigquery.layout_checks import LayoutChecks
from pyflink_gcp.bigquery.responses import Reconnect, ResponseHandling
from pyflink_gcp.bigquery.schema_update import MissingValues, UnknownFields, fatal_reason
from pyflink_gcp.bigquery.sender_waits import BoundedWaits
from pyflink_gcp.bigquery.serialization import row_payload
from pyflink_gcp.bigquery.tables import TableLayout
from pyflink_gcp.bigquery.values import RowError
from pyflink_gcp.core.batching import Slots, Timers
from pyflink_gcp.core.errors import SinkError, WriteError
from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.functions import short_repr
from pyflink_gcp.core.quota import QuotaWindow
from pyflink_gcp.core.retry import BackoffSequence, RetryPolicy
from pyflink_gcp.core.status import StatusError
from pyflink_gcp.core.waits import LazyCondition

_LOG = logging.getLogger("pyflink_gcp.bigquery")

#: Bytes a serialized row adds to a request besides its own (field tag and length prefix).
#: Requests a table may queue beyond its in-flight window before ``submit`` waits (bounds memory).
_QUEUED_BATCHES = 4
#: The subtask timers of senders made without a factory's (tests, tools).
_TIMERS = Timers("bigquery-append-timers")
#: ``AppendRowsRequest.MissingValueInterpretation.DEFAULT_VALUE``.
_DEFAULT_VALUE = AppendRowsRequest.MissingValueInterpretation.Value("DEFAULT_VALUE")


class TableSender(ResponseHandling, BoundedWaits, LayoutChecks):
    """Appends the cut requests of one table; see the module docstring.

    The processing thread calls :meth:`submit`, :meth:`settle`, :attr:`is_idle` and
    :meth:`close`; the steps (:meth:`_run`) run on one thread at a time (``_busy``), whichever
    brought the work. The state the threads share (the queues, the results, the connection)
    is guarded by ``_cond``.

    A subtask holds one per table it writes, so its attributes are slots.
    """

    # fmt: off
    __slots__ = (
        "destination", "offsets", "max_bytes", "rows_appended", "requests_sent",
        "bytes_encoded", "arrow_requests_sent", "arrow_rejections", "_quota", "_unknown_fields",
        "_missing", "_sink", "_name", "_stream_source", "_stream", "_stream_length", "_what",
        "_timeout_s", "_connect", "_timers", "_slots", "_slot", "_slot_wanted", "_retry",
        "_depth", "_layout_source", "_layout",
        "_max_request_bytes", "_cond", "_queue", "_in_flight", "_answers", "_answers_seen",
        "_busy", "_paused", "_pauses", "_resume_due", "_backoff", "_failed", "_fatal", "_closed",
        "_connection", "_generation", "_check",
    )
    # fmt: on

    def __init__(
        self,
        destination: TableDestination,
        layout: TableLayout | Future[TableLayout],
        *,
        sink_name: str,
        stub: Any,
        retry: RetryPolicy,
        max_in_flight: int,
        max_request_bytes: int,
        connection_timeout_s: float,
        endpoint: str = DEFAULT_STORAGE_HOST,
        stream: Future[str] | None = None,
        connect: Callable[[str, TableLayout, Callable[[Any], None]], Any] | None = None,
        unknown_fields: UnknownFields = UnknownFields.FAIL,
        missing_values: MissingValues = MissingValues.NULL,
        quota: QuotaWindow | None = None,
        timers: Timers | None = None,
        slots: Slots | None = None,
        check: Callable[[], Future[TableLayout]] | None = None,
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
        self._timeout_s = connection_timeout_s
        #: Opens (or leases) the connection while requests are in flight:
        #: ``connect(stream, layout, on_answer)``; ``on_answer`` receives each answer in order.
        self._connect = connect or (
            lambda name, _, on_answer: AppendConnection(stub, name, self._timeout_s, on_answer)
        )
        self._timers = timers or _TIMERS
        #: The subtask's bound on connections of their own (``channel_count``); None: none.
        self._slots = slots
        self._slot = False  # holds one of ``_slots`` (while it connects and sends)
        self._slot_wanted = False  # queued for one
        self._retry = retry
        self._depth = max_in_flight
        self._layout_source = layout
        self._layout: TableLayout | None = None
        #: Looks the table's own layout up while the layout in use is an assumed one (it may
        #: come from a lookup's future too; :meth:`_check_layout`); None once asked, or once
        #: the layout in use is the table's (:meth:`use_layout`).
        self._check = check
        self._max_request_bytes = max_request_bytes
        #: Bytes of rows one request may carry (its limit less the schema it also carries).
        self.max_bytes = max_request_bytes
        # Its flushes wait on it rarely: a condition built only for them (1.4 KB less a table).
        self._cond = LazyCondition()
        # Lists rather than deques: they hold a window's few requests at most (the queue is
        # bounded by ``submit``), and an empty deque costs a table writer ten times an empty
        # list's bytes (about 700 bytes a table: 7 MB of a subtask's 10,000 tables).
        #: Requests to send, in order (cut ones, and those to send again, at the front).
        self._queue: list[Batch] = []
        #: Requests sent on ``_connection`` and not answered yet, in order.
        self._in_flight: list[Batch] = []
        #: Answers not settled yet: (connection generation, response or exception).
        self._answers: list[tuple[int, Any]] = []
        self._answers_seen = 0
        self._busy = False  # a thread runs the steps
        self._paused = 0  # the running backoff's number, else 0
        self._pauses = 0
        self._resume_due = 0.0  # when the running backoff ends (monotonic)
        self._backoff: BackoffSequence | None = None
        self._failed: list[FailedRecord] = []
        self._fatal: BaseException | None = None
        self._closed = False
        self._connection: Any = None  # an AppendConnection, or a Lease on a shared one
        self._generation = 0  # of ``_connection``: answers of an older one are dropped
        # Counters (read by tests, metrics and the benchmark).
        self.rows_appended = 0
        self.requests_sent = 0
        #: Bytes of the rows encoded for this table (Arrow or protobuf), once per row.
        self.bytes_encoded = 0
        self.arrow_requests_sent = 0
        self.arrow_rejections = 0
        # A lookup or a stream creation that ends lets the steps go on (on its thread).
        for source in (layout, stream):
            if isinstance(source, Future):
                source.add_done_callback(lambda _: self._step())

    # -- table layout (either thread) ----------------------------------------------------------

    def layout(self) -> TableLayout:
        """The table's encoders, waiting for its metadata lookup if it is still running.

        Raises the lookup's error (table missing, creation refused...) to every caller.
        """
        layout = self._layout
        if layout is None:
            source = self._layout_source
            layout = source if isinstance(source, TableLayout) else source.result()
            self.use_layout(layout)
        return layout

    def use_layout(self, layout: TableLayout) -> None:
        """Encode with ``layout`` from now on: the lookup's, or one of the same columns that
        knows more (the table's primary key, asked for by its first change-data-capture row).
        """
        overhead = layout.writer_schemas[1].ByteSize() + self._stream_length + 64
        if layout.arrow is not None:
            overhead = max(overhead, len(layout.arrow.serialized_schema) + self._stream_length)
        self.max_bytes = self._max_request_bytes - overhead
        self._layout = self._layout_source = layout  # not the lookup's future, for life
        if not layout.assumed:
            self._check = None

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
        """Queue a cut request and send what the window has room for; waits while the table has
        more than its window and a few requests queued (backpressure).

        Raises:
            SinkError: The sender failed; its error is raised here rather than rows queued for
                a sender that no longer sends.
        """
        if self._fatal is not None:
            raise self._fatal
        # Encoded here, on the processing thread, once the table's lookup has ended (until
        # then the lookup's callback encodes it): a step on an answer's thread only sends it.
        source = self._layout_source
        if batch.rows is None and (
            isinstance(source, TableLayout)
            or (source.done() and not source.cancelled() and source.exception() is None)
        ):
            batches = self._encode(batch)
        else:
            batches = [batch]
        with self._cond:
            self._queue.extend(batches)
        self._step()
        # Backpressure: a table that sends slower than it receives holds the task here.
        self._wait(lambda: len(self._queue) <= self._depth + _QUEUED_BATCHES)

    def settle(self) -> list[FailedRecord]:
        """Wait until every submitted request was answered; the rows the service rejected.

        Raises:
            SinkError: The sender failed (after retries); raised again by every later call.
        """
        self._step()
        self._wait(lambda: not (self._queue or self._in_flight or self._answers))
        with self._cond:
            fatal = self._fatal
            failed, self._failed = self._failed, []
        if fatal is not None:
            raise fatal
        return failed

    def raise_if_failed(self) -> None:
        """Raise the sender's error, if it failed."""
        if self._fatal is not None:
            raise self._fatal

    @property
    def is_idle(self) -> bool:
        """Nothing queued, in flight, or waiting to be reported (a sender that failed is not
        idle: its error must reach the next flush)."""
        return not (
            self._queue
            or self._in_flight
            or self._answers
            or self._busy
            or self._failed
            or self._fatal is not None
        )

    def close(self) -> None:
        """Drop what is queued and close the connection (a running step stops at its next)."""
        with self._cond:
            self._closed = True
            self._queue.clear()
            connection, self._connection = self._connection, None
            self._generation += 1
            slot, self._slot = self._slot, False
            wanted, self._slot_wanted = self._slot_wanted, False
            self._cond.notify_all()
        if connection is not None:
            connection.close()
        if self._slots is not None:
            if slot:
                self._slots.release()
            if wanted:
                self._slots.cancel(self)  # if granted meanwhile, _slot_granted gives it back
        source = self._layout_source
        if isinstance(source, Future):
            source.cancel()  # a lookup still queued for a writer that is gone

    # -- the steps (one thread at a time) ------------------------------------------------------

    def _step(self) -> None:
        """Run the steps there is work for on this thread, unless a step runs elsewhere: that
        one sees the work this thread brought (its ``_action`` is taken under ``_cond``), so no
        thread waits for another here."""
        with self._cond:
            if self._busy or self._closed or self._fatal is not None:
                return
            self._busy = True
        self._run()

    def _action(self) -> str:
        """The next step ('' for none); under ``_cond``."""
        if self._answers:
            return "answer"
        connection = self._connection
        if (
            connection is not None
            and not self._in_flight
            and (not self._queue or connection.retiring or self._paused)
        ):
            # Nothing left in flight; a retiring connection takes no more; a backoff gives the
            # connection (and its slot) to the other tables while it runs.
            return "disconnect"
        if not self._queue or self._paused:
            # A slot held without a connection (all its rows refused, or a backoff) goes back.
            return "disconnect" if self._slot and connection is None else ""
        if connection is not None and connection.retiring:
            return ""
        if len(self._in_flight) >= min(self._depth, self._quota.limit):
            return ""
        for source in (self._layout_source, self._stream_source):
            if isinstance(source, Future) and not source.done():
                return ""  # its done-callback runs the steps
        if connection is None and self._slots is not None and not self._slot:
            # A connection of its own needs one of the subtask's slots; when all are held,
            # the release of one calls ``_slot_granted`` (no thread waits for it).
            if self._slot_wanted:
                return ""
            if not self._slots.acquire(self, self._slot_granted):
                self._slot_wanted = True
                return ""
            self._slot = True
        return "send"

    def _slot_granted(self) -> None:
        """A connection slot was taken for this sender (the releasing thread)."""
        with self._cond:
            self._slot_wanted = False
            keep = not self._closed and self._fatal is None and not self._slot
            if keep:
                self._slot = True
        if not keep:
            assert self._slots is not None
            self._slots.release()
            return
        self._step()

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    action = "" if self._closed else self._action()
                    if not action:
                        self._busy = False
                        self._cond.notify_all()
                        return
                    if action == "answer":
                        generation, answer = self._answers.pop(0)
                        self._answers_seen += 1
                if action == "answer":
                    if generation == self._generation:
                        self._settle_answer(answer)
                elif action == "disconnect":
                    self._disconnect()
                else:
                    self._send_next()
        except BaseException as exc:  # noqa: BLE001 - handed to the processing thread
            error = exc
            if not isinstance(exc, SinkError):
                error = WriteError(f"{self._what}: {type(exc).__name__}: {exc}")
                error.__cause__ = exc
            self._disconnect()
            with self._cond:
                self._fatal = error
                self._busy = False
                self._cond.notify_all()

    def _on_answer(self, generation: int, answer: Any) -> None:
        """A connection's answer to the oldest request sent on it (on the thread that reads
        its answers)."""
        with self._cond:
            if self._closed:
                return
            self._answers.append((generation, answer))
        self._step()

    def _settle_answer(self, answer: Any) -> None:
        if isinstance(answer, Exception):
            if self._guess_refused(answer, self._in_flight):
                self._take_back([])  # encoded by the table's own layout, without a backoff
            else:
                self._lost(answer, [])
            return
        with self._cond:
            batch = self._in_flight.pop(0) if self._in_flight else None
        if batch is None:
            self._lost(StatusError(grpc.StatusCode.INTERNAL, "an answer nobody waits for"), [])
            return
        if batch.guessed and self._guess_refused(answer, [batch]):
            with self._cond:
                self._queue.insert(0, batch)
            return
        try:
            self._backoff = self._handle(batch, answer, self._backoff, self._in_flight)
        except Reconnect as reconnect:
            # Sent again, with the ones behind it, on a new connection after a backoff.
            self._lost(reconnect.error, [batch])

    def _lost(self, error: Exception, answered: list[Batch]) -> None:
        """The connection is gone (or must be replaced): every unanswered request is sent again
        on a new one after a backoff, those holding an offset first."""
        self._take_back(answered)
        self._backoff = self._retry_or_raise(error, self._backoff)

    def _take_back(self, answered: list[Batch]) -> None:
        """Drop the connection and queue every unanswered request (and ``answered`` ones to
        send again) at the front, those holding an offset first."""
        self._disconnect()
        with self._cond:
            self._queue[:0] = resend_order([*answered, *self._in_flight])
            self._in_flight.clear()

    def _pause(self, delay_s: float) -> None:
        """Send nothing for ``delay_s`` seconds; a subtask timer resumes (no thread sleeps)."""
        with self._cond:
            self._pauses += 1
            token = self._paused = self._pauses
            self._resume_due = time.monotonic() + delay_s

        def resume() -> None:
            with self._cond:
                if self._paused != token:
                    return
                self._paused = 0
            self._step()

        self._timers.call_later(delay_s, resume)

    def _send_next(self) -> None:
        """Encode (if it was not) and send the request at the front of the queue."""
        with self._cond:
            batch = self._queue.pop(0)
        if batch.guessed and batch.layout is not self.layout():
            batch = batch.pending()  # encoded by a guess the table's own layout replaced
        if batch.rows is None and batch.arrow is None:
            # Cut before the table's lookup ended, or a part of a rejected Arrow request.
            encoded = self._encode(batch)
            if not encoded:
                return
            batch = encoded[0]
            if batch.rows is None and batch.arrow is None:
                # Rows the assumed layout cannot take: the table's own decides.
                with self._cond:
                    self._queue.insert(0, batch)
                self._check_layout("a row the declared schema cannot encode")
                return
            if len(encoded) > 1:
                # Encoding split a request by size: the rest waits its turn in the window.
                with self._cond:
                    self._queue[:0] = encoded[1:]
        self._send(batch)

    def _encode(self, batch: Batch) -> list[Batch]:
        """``batch`` (pending) encoded into requests; the rows refused are failed records.
        Under an assumed layout, a refused row leaves the whole batch pending instead, for a
        step to check the layout (:meth:`_send_next`)."""
        layout = self.layout()
        encoded, failed = encode_requests(
            batch, layout, self.max_bytes, self.refused, self.oversized
        )
        if failed and layout.assumed and self._check is not None:
            return [batch.pending()]
        for request in encoded:
            request.layout = layout
        if failed:
            with self._cond:
                self._failed.extend(failed)
        size = sum(
            len(b.arrow) if b.arrow is not None else sum(map(len, b.rows or ())) for b in encoded
        )
        with self._cond:
            self.bytes_encoded += size
        return encoded

    def _encode_proto(self, batch: Batch) -> list[Batch]:
        """The batch as protobuf rows (a retry of rows an Arrow request had refused)."""
        layout = self.layout()
        encoded, failed = encode_rows(batch, layout, self.max_bytes, self.refused, self.oversized)
        for request in encoded:
            request.layout = layout
        if failed:
            with self._cond:
                self._failed.extend(failed)
        return encoded

    def _send(self, batch: Batch) -> None:
        stream = self.stream_name()
        layout = self.layout()
        connection = self._connection
        if connection is None:
            generation = self._generation
            connection = self._connect(stream, layout, partial(self._on_answer, generation))
            with self._cond:
                closed = self._closed or generation != self._generation
                if not closed:
                    self._connection = connection
            if closed:
                connection.close()
                return
        # Every request names its stream and carries its writer schema, on a shared connection
        # too: a request may follow others whose answers are not in yet, a backend may drop a
        # connection's schema with a rejected request (the emulator does), and a request that
        # fails for that reason must never be mistaken for bad rows.
        # The writer schema is that of the layout the rows were encoded by.
        encoded_by = batch.layout or layout
        if batch.arrow is not None:
            assert encoded_by.arrow is not None
            request = PendingAppend(
                stream, encoded_by.arrow.serialized_schema, arrow=batch.arrow, missing=self._missing
            )
            self.arrow_requests_sent += 1
        else:
            request = PendingAppend(
                stream,
                encoded_by.writer_schemas[1 if batch.cdc else 0],
                rows=batch.rows,
                missing=self._missing,
            )
        if self.offsets is not None:
            request.offset = self.offsets.assign(batch)
        with self._cond:
            self._in_flight.append(batch)  # before its answer can come
        connection.send(request)
        self.requests_sent += 1

    def _disconnect(self) -> None:
        with self._cond:
            connection, self._connection = self._connection, None
            self._generation += 1
            slot, self._slot = self._slot, False
        if connection is not None:
            connection.close()
        if slot:
            assert self._slots is not None
            self._slots.release()
