"""The sender half of a table writer against a scripted AppendRows stub (no emulator): request
encoding and cutting by size, Arrow or protobuf rows, the sending loop and its connection (what
the responses mean is test_responses.py's)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any

import grpc
import pyarrow as pa
import pytest
from google.cloud.bigquery import SchemaField
from google.cloud.bigquery_storage_v1 import types

from pyflink_gcp.bigquery import (
    BigQueryWriterOptions,
    MissingValues,
    OrderingMode,
    RowFormat,
    TableDestination,
)
from pyflink_gcp.bigquery.batch import ARROW_MIN_ROWS
from pyflink_gcp.bigquery.client import AppendConnection
from pyflink_gcp.bigquery.sender import Batch, TableSender
from pyflink_gcp.bigquery.tables import TableLayout
from pyflink_gcp.bigquery.writer import BigQueryWriterFactory, TableWriter
from pyflink_gcp.core import DestinationNotFoundError
from pyflink_gcp.core.batching import Slots
from pyflink_gcp.core.quota import QuotaWindow
from pyflink_gcp.core.retry import RetryPolicy

Response = types.AppendRowsResponse.pb()
DEST = TableDestination.of("p", "d", "t")
ENCODER_SCHEMA = [SchemaField("id", "INT64"), SchemaField("bad", "BOOL")]


class Unavailable(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def __str__(self) -> str:
        return "connection reset"


class FakeService:
    """Answers AppendRows like the service: rows with ``bad`` set make a request fail.

    ``mode``: "whole" rejects the whole request (as the emulator does), "rows" answers with
    per-row errors (as BigQuery does). ``outages`` transport failures and ``busy`` transient
    error responses come first. ``refuse_arrow`` rejects every Arrow request, as an endpoint
    without Arrow support would. ``formats`` lists the format of every request.
    """

    def __init__(
        self,
        mode: str = "whole",
        outages: int = 0,
        busy: int = 0,
        refuse_arrow: bool = False,
        stream: str | None = DEST.default_stream,
    ) -> None:
        self.mode = mode
        self.stream = stream
        self.refuse_arrow = refuse_arrow
        self.formats: list[str] = []
        self.outages = outages
        self.busy = busy
        self.committed: list[int] = []
        self.requests: list[list[int]] = []
        self.max_in_flight = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._decode = None

    def __call__(self, requests: Any, metadata: Any = None, timeout: Any = None) -> Any:
        with self._lock:
            self.connections += 1
        return _FakeCall(self, requests)

    def answer(self, request: Any) -> Any:
        if self.stream is not None:
            assert request.write_stream == self.stream
        else:
            assert request.write_stream.endswith("/streams/_default")
        if request.HasField("arrow_rows"):
            data = request.arrow_rows
            assert data.writer_schema.serialized_schema
            stream = data.writer_schema.serialized_schema + data.rows.serialized_record_batch
            rows = [
                {k: v for k, v in row.items() if v is not None}
                for row in pa.ipc.open_stream(stream).read_all().to_pylist()
            ]
            with self._lock:
                self.formats.append("arrow")
                if self.refuse_arrow:
                    return Response(error={"code": 3, "message": "Arrow is not supported"})
        else:
            if self._decode is None:
                from tests.unit.bigquery.test_rows import decode

                descriptor = request.proto_rows.writer_schema.proto_descriptor
                self._decode = lambda data: decode(descriptor, data)
            assert request.proto_rows.HasField("writer_schema")
            rows = [self._decode(r) for r in request.proto_rows.rows.serialized_rows]
            with self._lock:
                self.formats.append("proto")
        with self._lock:
            self.requests.append([r.get("id", -1) for r in rows])
            if self.busy:
                self.busy -= 1
                return Response(
                    error={"code": grpc.StatusCode.UNAVAILABLE.value[0], "message": "busy"}
                )
            bad = [i for i, r in enumerate(rows) if r.get("bad")]
            if bad and self.mode == "whole":
                return Response(error={"code": 3, "message": f"bad value in row {bad[0]}"})
            if bad:
                return Response(
                    error={"code": 3, "message": "rows rejected"},
                    row_errors=[{"index": i, "code": 1, "message": f"row {i} is bad"} for i in bad],
                )
            self.committed.extend(r["id"] for r in rows)
            return Response()


class _FakeCall:
    def __init__(self, service: FakeService, requests: Any) -> None:
        self._service = service
        self._requests = requests
        self._pending: list[Any] = []

    def __next__(self) -> Any:
        service = self._service
        with service._lock:
            if service.outages:
                service.outages -= 1
                raise Unavailable()
        request = next(self._requests)
        return service.answer(request)

    def cancel(self) -> bool:
        return True


def factory(
    service: FakeService, ordering: OrderingMode = OrderingMode.NONE, **options: Any
) -> BigQueryWriterFactory:
    """A writer factory whose Storage Write stub is ``service`` (no channel, no catalog)."""
    made = BigQueryWriterFactory(
        sink_name="test-sink",
        resolver=None,
        serializer=None,
        options=BigQueryWriterOptions(**options),
        ordering=ordering,
        retry=RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.01, deadline_s=1.0),
    )
    made.stub = service
    return made


def writer(
    service: FakeService,
    ordering: OrderingMode = OrderingMode.NONE,
    row_format: RowFormat = RowFormat.ARROW,
    **options: Any,
) -> TableWriter:
    return factory(service, ordering, **options).writer_for(
        DEST,
        TableLayout.of(ENCODER_SCHEMA, row_format=row_format),
    )


FORMATS = pytest.mark.parametrize("row_format", [RowFormat.ARROW, RowFormat.PROTO])


@FORMATS
def test_requests_are_cut_by_size(row_format: RowFormat) -> None:
    service = FakeService()
    w = writer(service, row_format=row_format, max_request_bytes=1_000)
    for i in range(500):
        w.write({"id": i}, i)
    assert w.flush() == []
    assert len(service.requests) > 3
    assert sorted(service.committed) == list(range(500))


def test_plain_rows_go_as_arrow_and_rows_arrow_cannot_take_as_given_go_as_protobuf() -> None:
    service = FakeService()
    w = writer(service, max_request_rows=10)
    for i in range(10):
        w.write({"id": i, "bad": False}, i)
    # A string for an INT64 and a misspelt key are the protobuf encoder's business: it converts
    # the first and matches the second case-insensitively.
    for i in range(10, 20):
        w.write({"id": str(i)} if i % 2 else {"ID": i}, i)
    assert w.flush() == []
    assert service.formats == ["arrow", "proto"]
    assert sorted(service.committed) == list(range(20))


def test_requests_of_a_few_rows_go_as_protobuf_rows_whatever_the_table() -> None:
    # Many tables with a row or two each per checkpoint: protobuf rows cost less per request.
    service = FakeService()
    w = writer(service, max_request_rows=ARROW_MIN_ROWS)
    for i in range(ARROW_MIN_ROWS + 2):
        w.write({"id": i}, i)
    assert w.flush() == []
    assert service.formats == ["arrow", "proto"]
    assert service.requests == [list(range(ARROW_MIN_ROWS)), [ARROW_MIN_ROWS, ARROW_MIN_ROWS + 1]]
    assert w.arrow_requests_sent == 1


def sender(service: Any, layout: Any, **kw: Any) -> TableSender:
    settings: dict[str, Any] = {
        "sink_name": "test-sink",
        "stub": service,
        "retry": RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.01, deadline_s=0.2),
        "max_in_flight": 2,
        "max_request_bytes": 100_000,
        "connection_timeout_s": 5.0,
    }
    settings.update(kw)
    return TableSender(DEST, layout, **settings)


def test_a_sender_takes_cut_requests_and_settles_with_the_rejected_rows() -> None:
    service = FakeService()
    s = sender(service, TableLayout.of(ENCODER_SCHEMA))
    assert s.is_idle
    s.submit(Batch(None, [{"id": 1}, {"id": 2, "bad": True}], ["r1", "r2"], False))
    s.submit(Batch(None, [{"id": 3}], ["r3"], False))
    failed = s.settle()
    assert [(f.record_repr, f.reason) for f in failed] == [("'r2'", "bad value in row 0")]
    assert sorted(service.committed) == [1, 3]
    assert s.is_idle and s.rows_appended == 2
    assert s.settle() == []


BUFFERED_STREAM = f"{DEST.default_stream.removesuffix('_default')}buffered-1"


def created(name: str = BUFFERED_STREAM) -> Future[str]:
    stream: Future[str] = Future()
    stream.set_result(name)
    return stream


class ScriptedStream:
    """A BUFFERED stream's service side, answering appends by offset as BigQuery does (at the
    end: appended; below it: ALREADY_EXISTS; past it: OUT_OF_RANGE), when told
    (:meth:`answer_all`, by the connections' callbacks), after a script: the first answer
    rejects row 1 with a per-row error, the second is the connection's loss."""

    def __init__(self) -> None:
        self.end = 0
        self.answers = 0
        self.connections: list[_ScriptedConnection] = []
        self.appended: list[int] = []
        #: Answer each request as it is sent (on the sending thread).
        self.at_once = False

    def connect(self, stream: str, layout: Any, on_answer: Any) -> Any:
        connection = _ScriptedConnection(self, on_answer)
        self.connections.append(connection)
        return connection

    def answer_all(self) -> None:
        """Answer every request sent, on the callers' thread, until none is left."""
        while True:
            live = [c for c in self.connections if c.sent and not c.closed]
            if not live:
                return
            connection = live[0]
            request = connection.sent.pop(0)
            self.answers += 1
            if self.answers == 2:
                connection.sent.clear()
                connection.on_answer(Unavailable())
                continue
            connection.on_answer(self.answer(request))

    def answer(self, request: Any) -> Any:
        from tests.unit.bigquery.test_rows import decode

        if self.answers == 1:
            return Response(
                error={"code": 3, "message": "rows rejected"},
                row_errors=[{"index": 1, "code": 1, "message": "row 1 is bad"}],
            )
        descriptor = request.proto_rows.writer_schema.proto_descriptor
        ids = [decode(descriptor, r)["id"] for r in request.proto_rows.rows.serialized_rows]
        offset = request.offset.value
        if offset > self.end:
            return Response(error={"code": 11, "message": f"offset {offset} past the end"})
        if offset < self.end:
            return Response(error={"code": 6, "message": f"offset {offset} exists"})
        self.end += len(ids)
        self.appended.extend(ids)
        return Response(append_result={"offset": {"value": offset}})


class _ScriptedConnection:
    retiring = False

    def __init__(self, service: ScriptedStream, on_answer: Any) -> None:
        self.service = service
        self.on_answer = on_answer
        self.sent: list[Any] = []
        self.closed = False

    def send(self, pending: Any) -> None:
        request = pending.build()  # as a connection builds it when it writes it
        assert request.write_stream == BUFFERED_STREAM
        self.sent.append(request)
        if self.service.at_once:
            self.service.answer_all()

    def close(self) -> None:
        self.closed = True


def test_after_a_lost_connection_requests_holding_an_offset_are_sent_again_first() -> None:
    # A (rows 0-2) at offset 0 and B (3-4) at 3 in flight; A is refused for row 1, so B is
    # stale, and A's good rows go again at offset 0; the connection drops with B and them
    # unanswered. Sent again B first, B would take offset 2, past the stream's end.
    service = ScriptedStream()
    s = sender(
        None,
        TableLayout.of(ENCODER_SCHEMA, row_format=RowFormat.PROTO),
        stream=created(),
        connect=service.connect,
    )
    s.submit(Batch(None, [{"id": i} for i in range(3)], ["r0", "r1", "r2"], False))
    s.submit(Batch(None, [{"id": i} for i in (3, 4)], ["r3", "r4"], False))
    assert len(service.connections[0].sent) == 2  # both in flight before any answer
    service.answer_all()
    # The connection's loss paused the sender; its timer resumes it, and settle waits for it.
    service.at_once = True
    failed = s.settle()
    assert [(f.record_repr, f.reason) for f in failed] == [("'r1'", "row 1 is bad")]
    assert service.appended == [0, 2, 3, 4] and len(service.connections) == 2
    assert s.offsets is not None and s.offsets.appended == 4


def test_the_layout_lookup_error_fails_the_sender_and_close_cancels_a_queued_lookup() -> None:
    failed_lookup: Future[TableLayout] = Future()
    failed_lookup.set_exception(DestinationNotFoundError("table p.d.t does not exist"))
    s = sender(FakeService(), failed_lookup)
    s.submit(Batch(None, [{"id": 1}], ["r1"], False))
    with pytest.raises(DestinationNotFoundError, match="does not exist"):
        s.settle()

    queued: Future[TableLayout] = Future()
    s = sender(FakeService(), queued)
    s.close()
    assert queued.cancelled()


@pytest.mark.parametrize("missing", [MissingValues.NULL, MissingValues.DEFAULT_VALUE])
def test_missing_values_set_the_requests_interpretation(missing: MissingValues) -> None:
    seen: list[int] = []

    class Recording(FakeService):
        def answer(self, request: Any) -> Any:
            seen.append(request.default_missing_value_interpretation)
            return super().answer(request)

    s = sender(Recording(), TableLayout.of(ENCODER_SCHEMA), missing_values=missing)
    s.submit(Batch(None, [{"id": 1}], ["r1"], False))
    assert s.settle() == []
    interpretation = types.AppendRowsRequest.MissingValueInterpretation
    expected = (
        interpretation.DEFAULT_VALUE
        if missing is MissingValues.DEFAULT_VALUE
        else interpretation.MISSING_VALUE_INTERPRETATION_UNSPECIFIED
    )
    assert seen == [expected]


# -- completion by callback ---------------------------------------------------------------------


def _until(condition: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


class Recording:
    """Wraps the connections a sender opens, noting the thread of every request sent."""

    def __init__(self, service: FakeService) -> None:
        self.service = service
        self.threads: list[str] = []
        self.opened = 0

    def connect(self, stream: str, layout: Any, on_answer: Any) -> Any:
        self.opened += 1
        return _Recorded(self, AppendConnection(self.service, stream, 5.0, on_answer))


class _Recorded:
    retiring = False

    def __init__(self, recording: Recording, connection: AppendConnection) -> None:
        self._recording = recording
        self._connection = connection

    def send(self, request: Any) -> None:
        self._recording.threads.append(threading.current_thread().name)
        self._connection.send(request)

    def close(self) -> None:
        self._connection.close()


def _encoded(ids: list[int]) -> Batch:
    encoder = TableLayout.of(ENCODER_SCHEMA).encoder
    rows = [{"id": i} for i in ids]
    return Batch([encoder.encode(r) for r in rows], rows, ids, False)


class Gated(FakeService):
    """Answers nothing until ``gate`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def answer(self, request: Any) -> Any:
        assert self.gate.wait(5.0)
        return super().answer(request)


def test_an_answer_frees_its_slot_and_the_reader_sends_the_next_request_nobody_waiting() -> None:
    service = Gated()
    recording = Recording(service)
    s = sender(None, TableLayout.of(ENCODER_SCHEMA), max_in_flight=1, connect=recording.connect)
    for n in range(3):
        s.submit(Batch(None, [{"id": n}], [n], False))
    # Each request was encoded as it was cut; the window is full: two wait their turn.
    assert s.requests_sent == 1 and s.bytes_encoded > 0
    encoded = s.bytes_encoded
    service.gate.set()
    # No settle: the answers' callbacks settle each request and send the next one.
    _until(lambda: s.rows_appended == 3)
    assert sorted(service.committed) == [0, 1, 2] and s.bytes_encoded == encoded
    assert recording.threads[0] == threading.current_thread().name
    assert set(recording.threads[1:]) == {"append-rows-reader"}
    assert s.settle() == [] and s.is_idle


def test_requests_cut_before_the_table_lookup_ended_are_sent_when_it_ends() -> None:
    lookup: Future[TableLayout] = Future()
    service = FakeService()
    s = sender(service, lookup)
    s.submit(Batch(None, [{"id": 1}], ["r1"], False))
    s.submit(Batch(None, [{"id": 2}], ["r2"], False))
    assert s.requests_sent == 0 and not s.is_idle
    lookup.set_result(TableLayout.of(ENCODER_SCHEMA))  # its callback encodes and sends
    _until(lambda: s.rows_appended == 2)
    assert service.committed == [1, 2]
    assert s.settle() == []


class ManualTimers:
    """Timers that note each callback and run them when told (bookkeeping only)."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self.due: list[Any] = []

    def call_later(self, delay_s: float, fn: Any) -> None:
        self.delays.append(delay_s)
        self.due.append(fn)

    def run(self) -> None:
        while self.due:
            self.due.pop(0)()


class OverQuota(FakeService):
    def __init__(self, errors: int) -> None:
        super().__init__()
        self.errors = errors

    def answer(self, request: Any) -> Any:
        if self.errors:
            self.errors -= 1
            return Response(error={"code": 8, "message": "quota exceeded"})
        return super().answer(request)


def test_a_backoff_is_a_timer_and_a_quota_error_halves_the_window_with_the_slower_schedule() -> (
    None
):
    timers, quota = ManualTimers(), QuotaWindow(4)
    service = OverQuota(errors=1)
    policy = RetryPolicy(
        initial_backoff_s=0.001, max_backoff_s=0.01, deadline_s=5.0, quota_initial_backoff_s=2.0
    )
    s = sender(service, TableLayout.of(ENCODER_SCHEMA), timers=timers, quota=quota, retry=policy)
    s.submit(_encoded([1]))
    _until(lambda: len(timers.due) == 1)
    # Paused: nothing is sent again until the timer ends the backoff; no thread sleeps.
    assert quota.limit == 2 and timers.delays[0] >= 1.0
    assert s.requests_sent == 1 and not s.is_idle
    timers.run()
    assert s.settle() == [] and service.committed == [1]
    assert s.requests_sent == 2


def test_buffered_tables_wait_for_a_connection_slot_and_a_release_hands_it_on() -> None:
    service = Gated()
    service.stream = BUFFERED_STREAM
    recording = Recording(service)
    open_now: list[int] = [0, 0]  # now, most

    def connect(stream: str, layout: Any, on_answer: Any) -> Any:
        connection = recording.connect(stream, layout, on_answer)
        open_now[0] += 1
        open_now[1] = max(open_now)
        close = connection.close

        def closed() -> None:
            open_now[0] -= 1
            close()

        connection.close = closed
        return connection

    slots = Slots(1)
    layout = TableLayout.of(ENCODER_SCHEMA)
    first, second, third = (
        sender(None, layout, stream=created(), connect=connect, slots=slots) for _ in range(3)
    )
    first.submit(_encoded([1]))
    second.submit(_encoded([2]))
    third.submit(_encoded([3]))
    # One connection: the other tables' requests wait in their queues; no thread waits.
    assert recording.opened == 1 and (slots.held, slots.waiting) == (1, 2)
    assert (first.requests_sent, second.requests_sent) == (1, 0)
    third.close()  # a table closed while it waits gives up its turn
    assert slots.waiting == 1
    service.gate.set()
    # The first table's answer closes its connection, and the release sends the second's.
    _until(lambda: second.rows_appended == 1)
    assert first.settle() == [] and second.settle() == []
    _until(lambda: slots.held == 0)
    assert sorted(service.committed) == [1, 2] and recording.opened == 2
    assert open_now == [0, 1] and slots.waiting == 0 and third.requests_sent == 0


def test_a_table_backing_off_gives_its_connection_slot_to_another_table() -> None:
    timers, slots = ManualTimers(), Slots(1)
    service = OverQuota(errors=1)
    service.stream = BUFFERED_STREAM
    policy = RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.01, deadline_s=5.0)
    layout = TableLayout.of(ENCODER_SCHEMA)
    first, second = (
        sender(service, layout, stream=created(), timers=timers, slots=slots, retry=policy)
        for _ in range(2)
    )
    first.submit(_encoded([1]))
    _until(lambda: len(timers.due) == 1)  # quota error: the first table backs off
    second.submit(_encoded([2]))
    # The slot went to the second table while the first waits for its timer.
    _until(lambda: second.rows_appended == 1)
    assert first.rows_appended == 0 and service.committed == [2]
    timers.run()
    assert first.settle() == [] and second.settle() == []
    assert sorted(service.committed) == [1, 2]
    _until(lambda: slots.held == 0)
