"""BUFFERED streams: the offsets of appends, what a commit does per stream, and how a commit
reads the service's refusals, against a scripted BigQueryWrite service (no emulator)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.cloud.bigquery_storage_v1 import types
from google.rpc import status_pb2

from pyflink_gcp.bigquery import buffered
from pyflink_gcp.bigquery.buffered import (
    STALE,
    BufferedStreamCommitter,
    RateLimiter,
    StreamCommit,
    StreamOffsets,
    resend_order,
)
from pyflink_gcp.bigquery.sender import Batch
from pyflink_gcp.bigquery.storage_errors import STATUS_DETAILS_KEY
from pyflink_gcp.core import SubtaskInfo
from pyflink_gcp.core.errors import NonRetriableSinkError, WriteError
from pyflink_gcp.core.retry import RetryPolicy

Code = types.StorageError.StorageErrorCode


def batch(n: int) -> Batch:
    return Batch(None, list(range(n)), list(range(n)), False)


def test_offsets_follow_the_requests_in_the_order_they_are_sent() -> None:
    offsets = StreamOffsets()
    a, b, c = batch(3), batch(2), batch(4)
    assert [offsets.assign(x) for x in (a, b, c)] == [0, 3, 5]
    for x in (a, b, c):
        offsets.confirm(x)
    assert offsets.appended == 9
    assert offsets.committable("p.d.t", "s", finalize=False) == StreamCommit("p.d.t", "s", 8)
    # Nothing new: the stream is still named, so restored and final sets know it.
    assert offsets.committable("p.d.t", "s", finalize=False) == StreamCommit("p.d.t", "s", -1)


def test_a_refused_request_gives_back_its_offset_and_stales_the_ones_sent_after_it() -> None:
    offsets = StreamOffsets()
    a, b, c = batch(3), batch(2), batch(4)
    for x in (a, b, c):
        offsets.assign(x)
    offsets.confirm(a)
    offsets.refuse(b, [c])
    assert b.offset is None and c.offset == STALE and offsets.next == 3
    # Sent again, in the order they come back: new offsets from the refused one on.
    assert offsets.assign(c) == 3 and offsets.assign(b) == 7


def test_a_request_re_sent_after_a_lost_connection_keeps_its_offset() -> None:
    offsets = StreamOffsets()
    a = batch(3)
    offsets.assign(a)
    assert offsets.assign(a) == 0 and offsets.next == 3


def test_requests_holding_an_offset_are_sent_again_first_in_offset_order() -> None:
    stale, new, held_5, held_0 = batch(1), batch(1), batch(1), batch(1)
    stale.offset, held_5.offset, held_0.offset = STALE, 5, 0
    assert resend_order([stale, held_5, new, held_0]) == [held_0, held_5, stale, new]


def test_a_closed_writer_without_new_rows_only_finalizes() -> None:
    offsets = StreamOffsets()
    assert offsets.committable("p.d.t", "s", finalize=True) == StreamCommit("p.d.t", "s", -1, True)


# -- the committer against a scripted service ---------------------------------------------------


class RpcError(grpc.RpcError):
    """A failed unary call, with the trailing status details the service may add."""

    def __init__(self, code: grpc.StatusCode, message: str, detail: Any = None) -> None:
        super().__init__(message)
        self._code = code
        self._message = message
        self._trailing: tuple[tuple[str, bytes], ...] = ()
        if detail is not None:
            status = status_pb2.Status(code=code.value[0], message=message)
            status.details.add().Pack(types.StorageError.pb()(code=detail, entity="stream"))
            self._trailing = ((STATUS_DETAILS_KEY, status.SerializeToString()),)

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._message

    def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
        return self._trailing

    def __str__(self) -> str:
        return f"{self._code.name}: {self._message}"


@dataclass
class Stream:
    rows: int
    flushed: int = -1
    finalized: bool = False


@dataclass
class Service:
    """BigQueryWrite as Beam's connector says BigQuery answers: FlushRows of an offset already
    flushed is ALREADY_EXISTS, past the end OUT_OF_RANGE, and on a finalized stream
    INVALID_ARGUMENT (with a STREAM_FINALIZED StorageError when ``details``); a missing stream
    is NOT_FOUND. ``made`` lists the calls in order, ``metadata`` their routing headers."""

    streams: dict[str, Stream] = field(default_factory=dict)
    details: bool = False
    refuse_flush: tuple[grpc.StatusCode, Any] | None = None
    #: What FinalizeWriteStream answers on a finalized stream (BigQuery documents none): None
    #: for OK, else a status code.
    finalize_again: grpc.StatusCode | None = None
    lost: set[str] = field(default_factory=set)
    made: list[tuple[str, str, int]] = field(default_factory=list)
    metadata: list[tuple[str, Any, float]] = field(default_factory=list)

    def unary_unary(self, method: str, **_: Any) -> Any:
        name = method.rsplit("/", 1)[1]

        def call(request: Any, *, timeout: float, metadata: Any) -> Any:
            self.metadata.append((name, metadata, timeout))
            return getattr(self, name)(request)

        return call

    def _stream(self, name: str) -> Stream:
        stream = self.streams.get(name)
        if stream is None:
            raise RpcError(grpc.StatusCode.NOT_FOUND, f"Requested entity was not found: {name}")
        return stream

    def FlushRows(self, request: Any) -> Any:
        offset = request.offset.value
        self.made.append(("flush", request.write_stream, offset))
        stream = self._stream(request.write_stream)
        if self.refuse_flush is not None:
            raise RpcError(self.refuse_flush[0], "refused", self.refuse_flush[1])
        if stream.finalized:
            detail = Code.STREAM_FINALIZED if self.details else None
            raise RpcError(grpc.StatusCode.INVALID_ARGUMENT, "Stream is finalized", detail)
        if offset <= stream.flushed:
            raise RpcError(grpc.StatusCode.ALREADY_EXISTS, f"Offset {offset} already flushed")
        if offset >= stream.rows:
            raise RpcError(grpc.StatusCode.OUT_OF_RANGE, f"Offset {offset} is past the end")
        stream.flushed = offset
        return types.FlushRowsResponse.pb()(offset=offset)

    def FinalizeWriteStream(self, request: Any) -> Any:
        self.made.append(("finalize", request.name, -1))
        stream = self._stream(request.name)
        if stream.finalized and self.finalize_again is not None:
            detail = Code.STREAM_FINALIZED if self.details else None
            raise RpcError(self.finalize_again, "Stream is already finalized", detail)
        stream.finalized = True
        return types.FinalizeWriteStreamResponse.pb()(row_count=stream.rows)

    def GetWriteStream(self, request: Any) -> Any:
        self.made.append(("get", request.name, -1))
        self._stream("" if request.name in self.lost else request.name)
        return types.WriteStream.pb()(name=request.name)

    def close(self) -> None:
        pass


def committer(
    monkeypatch: pytest.MonkeyPatch, service: Service, calls: Any = None
) -> BufferedStreamCommitter:
    monkeypatch.setattr(buffered, "open_storage_channel", lambda endpoint: service)
    if calls is not None:
        monkeypatch.setattr(buffered, "StreamCalls", lambda *args: calls)
    c = BufferedStreamCommitter(
        sink_name="s",
        storage_endpoint="http://127.0.0.1:1",
        retry=RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.01, deadline_s=0.5),
        threads=2,
    )
    c.open(SubtaskInfo("s"))
    return c


def service(**rows: int) -> Service:
    return Service({name: Stream(n) for name, n in rows.items()})


def test_a_commit_flushes_each_stream_once_to_its_highest_offset(monkeypatch: Any) -> None:
    bq = service(A=20, B=5, C=3)
    c = committer(monkeypatch, bq)
    c.commit(
        [
            StreamCommit("p.d.a", "A", 9),
            StreamCommit("p.d.b", "B", 4),
            StreamCommit("p.d.a", "A", 19),  # a later checkpoint's, after an aborted one
            StreamCommit("p.d.c", "C", -1, finalize=True),
            StreamCommit("p.d.d", "D", -1),  # named only: nothing to do
        ],
        7,
        restored=False,
    )
    assert sorted(bq.made) == [("finalize", "C", -1), ("flush", "A", 19), ("flush", "B", 4)]
    # Every call names its stream for routing and has a timeout.
    assert ("FlushRows", (("x-goog-request-params", "write_stream=A"),)) in [
        (name, metadata) for name, metadata, _ in bq.metadata
    ]
    assert all(timeout > 0 for _, _, timeout in bq.metadata)
    c.close()


def test_restored_streams_are_flushed_at_once_and_finalized_once_the_writers_started(
    monkeypatch: Any,
) -> None:
    bq = service(A=10, B=3)
    c = committer(monkeypatch, bq)
    c.commit([StreamCommit("p.d.a", "A", 9), StreamCommit("p.d.b", "B", -1)], 3, restored=True)
    assert bq.made == [("flush", "A", 9)]
    for checkpoint in (4, 5, 9):  # however many checkpoints pass
        c.commit([], checkpoint, restored=False)
    assert bq.made == [("flush", "A", 9)]
    c.writers_started()
    assert sorted(bq.made[1:]) == [("finalize", "A", -1), ("finalize", "B", -1)]
    c.commit([], 10, restored=False)
    c.writers_started()
    assert len(bq.made) == 3  # once
    c.close()


def test_a_late_committable_of_a_restored_stream_is_flushed_before_the_stream_is_finalized(
    monkeypatch: Any,
) -> None:
    # Unaligned checkpoints, restore from 7: the operator state held (S, 41), the channel state
    # (S, 80); the latter arrives after the restore, sets later (the checkpoints after the
    # restore came before it), ahead of the new attempt's first committables.
    bq = service(S=100)
    c = committer(monkeypatch, bq)
    c.commit([StreamCommit("p.d.a", "S", 41)], 7, restored=True)
    c.commit([], 9, restored=False)
    c.commit([], 10, restored=False)
    c.commit([StreamCommit("p.d.a", "S", 80)], 11, restored=False)
    assert bq.made == [("flush", "S", 41), ("flush", "S", 80)]
    assert not bq.streams["S"].finalized
    c.writers_started()  # the set with the writers' first committables of this attempt
    assert bq.made[-1] == ("finalize", "S", -1) and bq.streams["S"].flushed == 80
    c.close()


@pytest.mark.parametrize("details", [False, True], ids=["plain", "storage-error"])
def test_a_restored_commit_of_a_finalized_stream_is_done(monkeypatch: Any, details: bool) -> None:
    bq = service(A=10)
    bq.details = details
    # The first attempt committed its set: the writer had closed, so A was finalized.
    first = committer(monkeypatch, bq)
    first.commit([StreamCommit("p.d.a", "A", 9, finalize=True)], 3, restored=False)
    first.close()
    assert bq.streams["A"].finalized
    # It failed before checkpoint 4 completed: the restored set is committed again.
    again = committer(monkeypatch, bq)
    again.commit([StreamCommit("p.d.a", "A", 9, finalize=True)], 3, restored=True)
    # Without a StorageError detail, GetWriteStream tells a finalized stream from a lost one.
    assert [call for call, *_ in bq.made].count("get") == (0 if details else 1)
    again.commit([], 5, restored=False)  # finalizing again is harmless
    again.close()


def test_the_same_restored_set_committed_twice_succeeds(monkeypatch: Any) -> None:
    bq = service(A=10)
    c = committer(monkeypatch, bq)
    c.commit([StreamCommit("p.d.a", "A", 9)], 3, restored=True)
    c.commit([StreamCommit("p.d.a", "A", 9)], 3, restored=True)
    assert bq.streams["A"].flushed == 9
    c.close()


@pytest.mark.parametrize("details", [False, True], ids=["plain", "storage-error"])
def test_rows_a_finalized_stream_never_published_end_the_job_naming_them(
    monkeypatch: Any, details: bool
) -> None:
    bq = service(A=20)
    bq.details = details
    c = committer(monkeypatch, bq)
    c.commit([StreamCommit("p.d.a", "A", 9, finalize=True)], 3, restored=False)
    with pytest.raises(NonRetriableSinkError) as caught:
        c.commit([StreamCommit("p.d.a", "A", 15)], 4, restored=False)
    message = str(caught.value)
    assert message.startswith("sink 's': the rows at offsets 10..15 of BUFFERED stream A ")
    assert "of table p.d.a cannot be published: the stream was finalized" in message
    assert "INVALID_ARGUMENT" in message
    c.close()


def test_a_flush_refused_for_another_cause_stays_retriable(monkeypatch: Any) -> None:
    bq = service(A=20)
    bq.refuse_flush = (grpc.StatusCode.INVALID_ARGUMENT, Code.INVALID_STREAM_TYPE)
    c = committer(monkeypatch, bq)
    with pytest.raises(WriteError, match=r"INVALID_ARGUMENT: refused \[INVALID_STREAM_TYPE\]") as e:
        c.commit([StreamCommit("p.d.a", "A", 9)], 3, restored=False)
    assert not isinstance(e.value, NonRetriableSinkError)
    c.close()


def test_not_found_on_a_flush_ends_the_job_naming_the_stream_table_and_offsets(
    monkeypatch: Any,
) -> None:
    bq = service()  # the table expired: its streams are gone
    c = committer(monkeypatch, bq)
    with pytest.raises(NonRetriableSinkError) as caught:
        c.commit([StreamCommit("p.d.a", "A", 9)], 3, restored=False)
    message = str(caught.value)
    assert "the rows at offsets 0..9 of BUFFERED stream A of table p.d.a" in message
    assert "is not found" in message and "NOT_FOUND" in message
    c.close()


def test_a_refused_flush_of_a_stream_the_service_no_longer_has_ends_the_job(
    monkeypatch: Any,
) -> None:
    bq = service(A=20)
    bq.refuse_flush = (grpc.StatusCode.FAILED_PRECONDITION, None)
    bq.lost = {"A"}  # GetWriteStream no longer finds it
    c = committer(monkeypatch, bq)
    with pytest.raises(NonRetriableSinkError, match=r"offsets 0\.\.9 of BUFFERED stream A "):
        c.commit([StreamCommit("p.d.a", "A", 9)], 3, restored=False)
    assert [call for call, *_ in bq.made] == ["flush", "get"]
    c.close()


def test_not_found_on_a_finalize_after_the_rows_were_flushed_is_done(monkeypatch: Any) -> None:
    bq = service()
    c = committer(monkeypatch, bq)
    c.commit([StreamCommit("p.d.a", "A", -1, finalize=True)], 3, restored=False)
    assert bq.made == [("finalize", "A", -1)]
    c.close()


def test_a_final_commit_finalizes_every_stream_it_names_and_the_restored_ones(
    monkeypatch: Any,
) -> None:
    bq = service(A=10, B=3, R=5)
    c = committer(monkeypatch, bq)
    c.commit([StreamCommit("p.d.r", "R", 4)], 3, restored=True)
    c.commit([StreamCommit("p.d.a", "A", 9), StreamCommit("p.d.b", "B", -1)], 4, False, True)
    assert all(s.finalized for s in bq.streams.values())
    assert bq.streams["A"].flushed == 9 and bq.streams["R"].flushed == 4
    c.close()


def test_an_empty_final_commit_finalizes_the_streams_earlier_sets_flushed(
    monkeypatch: Any,
) -> None:
    """The last sets are committed before the final commit that says nothing follows: a
    stream one set flushes is finalized only then, never before a later set flushes it."""
    bq = service(A=10, B=3)
    c = committer(monkeypatch, bq)
    c.commit([StreamCommit("p.d.a", "A", 4), StreamCommit("p.d.b", "B", 2)], 6, False)
    c.commit([StreamCommit("p.d.a", "A", 9)], 7, False)
    assert not any(s.finalized for s in bq.streams.values())
    c.commit([], 7, False, True)
    assert all(s.finalized for s in bq.streams.values())
    assert bq.streams["A"].flushed == 9 and bq.streams["B"].flushed == 2
    c.close()


@pytest.mark.parametrize(
    "answer",
    [None, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION],
    ids=["ok", "invalid-argument", "failed-precondition"],
)
@pytest.mark.parametrize("details", [False, True], ids=["plain", "storage-error"])
def test_finalizing_a_finalized_stream_again_is_done_whatever_it_answers(
    monkeypatch: Any, answer: Any, details: bool
) -> None:
    """A restore of a set whose stream an earlier attempt finalized finalizes it again."""
    bq = service(A=10)
    bq.details, bq.finalize_again = details, answer
    first = committer(monkeypatch, bq)
    first.commit([StreamCommit("p.d.a", "A", 9, finalize=True)], 3, restored=False)
    first.close()
    again = committer(monkeypatch, bq)
    again.commit([StreamCommit("p.d.a", "A", 9, finalize=True)], 3, restored=True)
    again.commit([], 4, False, True)  # the final commit finalizes it again
    again.close()
    assert [call for call, *_ in bq.made].count("finalize") == 2


class Calls:
    """Records the stream calls a commit makes (bookkeeping only)."""

    def __init__(self) -> None:
        self.made: list[tuple[str, str, int, int]] = []

    def flush(self, commit: StreamCommit, known: int) -> None:
        self.made.append(("flush", commit.stream, commit.offset, known))

    def finalize(self, commit: StreamCommit) -> None:
        self.made.append(("finalize", commit.stream, commit.offset, -1))


def test_a_flush_knows_how_far_the_stream_was_flushed_and_is_not_repeated(
    monkeypatch: Any,
) -> None:
    calls = Calls()
    c = committer(monkeypatch, Service(), calls)
    c.commit([StreamCommit("p.d.a", "A", 9)], 3, restored=True)
    c.commit([StreamCommit("p.d.a", "A", 9), StreamCommit("p.d.b", "B", 4)], 4, False)
    c.commit([StreamCommit("p.d.b", "B", 7)], 5, False)
    c.writers_started()
    # The restored set's own offset counts as known (for a finalized stream only); a flush
    # this committer made is not made again.
    assert calls.made == [
        ("flush", "A", 9, 9),
        ("flush", "B", 4, -1),
        ("flush", "B", 7, 4),
        ("finalize", "A", -1, -1),
    ]
    c.close()


class LiveWriter:
    """A table writer's committable side: its stream's offsets."""

    def __init__(self, stream: str, appended: int) -> None:
        self.stream = stream
        self.offsets = StreamOffsets()
        self.offsets.appended = appended

    def committable(self, *, finalize: bool) -> StreamCommit:
        return self.offsets.committable("p.d.t", self.stream, finalize=finalize)


def test_every_live_stream_is_named_and_at_the_end_of_input_finalized() -> None:
    from pyflink_gcp.bigquery import BigQueryWriterOptions
    from pyflink_gcp.bigquery.writer import BufferedBigQueryWriterFactory

    factory = BufferedBigQueryWriterFactory(
        sink_name="s", resolver=None, serializer=None, options=BigQueryWriterOptions()
    )
    busy, idle = LiveWriter("busy", 5), LiveWriter("idle", 0)
    factory._writers.update({busy, idle})  # type: ignore[arg-type]
    assert sorted(factory.prepare_commit(4), key=lambda c: c.stream) == [
        StreamCommit("p.d.t", "busy", 4),
        StreamCommit("p.d.t", "idle", -1),  # named without rows: a restore must finalize it
    ]
    busy.offsets.appended = 8
    # The end of input: the last prepare, the writers close after it.
    assert sorted(factory.prepare_commit(-1), key=lambda c: c.stream) == [
        StreamCommit("p.d.t", "busy", 7, True),
        StreamCommit("p.d.t", "idle", -1, True),
    ]
    factory.writer_closed(busy)  # type: ignore[arg-type]
    assert factory.prepare_commit(-1) == []


def test_the_rate_limiter_spaces_acquisitions(monkeypatch: Any) -> None:
    slept: list[float] = []
    now = [100.0]
    monkeypatch.setattr(buffered.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(buffered.time, "sleep", slept.append)
    limiter = RateLimiter(4.0)
    for _ in range(3):
        limiter.acquire()
    assert slept == [0.25, 0.5]
