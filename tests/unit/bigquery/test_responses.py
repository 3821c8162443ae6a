"""What the sender makes of AppendRows responses (against a scripted AppendRows stub, no
emulator): rejected requests narrowed to the bad rows, per-row errors, the Arrow fallback,
stream and table refusals, retries of transport errors and of columns the Storage Write API
does not know yet."""

from __future__ import annotations

from typing import Any

import pytest
from google.cloud.bigquery_storage_v1 import types
from google.rpc import status_pb2

from pyflink_gcp.bigquery import OrderingMode, RowFormat
from pyflink_gcp.bigquery.sender import Batch
from pyflink_gcp.bigquery.tables import TableLayout
from pyflink_gcp.core import DestinationNotFoundError, WriteError
from pyflink_gcp.core.retry import RetryPolicy
from tests.unit.bigquery.test_sender import (
    BUFFERED_STREAM,
    DEST,
    ENCODER_SCHEMA,
    FORMATS,
    FakeService,
    Response,
    created,
    sender,
    writer,
)


@FORMATS
def test_whole_request_rejections_are_narrowed_to_the_bad_rows(row_format: RowFormat) -> None:
    service = FakeService("whole")
    w = writer(service, OrderingMode.PER_TABLE, row_format)
    for i in range(100):
        w.write({"id": i, "bad": i in (13, 77)}, f"record-{i}")
    failed = w.flush()
    assert sorted(f.record_repr for f in failed) == ["'record-13'", "'record-77'"]
    assert all(f.destination == str(DEST) and "bad value" in f.reason for f in failed)
    # Per table ordering: what committed is the input order without the bad rows.
    assert service.committed == [i for i in range(100) if i not in (13, 77)]
    # An Arrow request rejected whole is first sent again as protobuf rows.
    assert len(service.requests) <= 1 + (row_format is RowFormat.ARROW) + 2 * 2 * 7
    assert service.formats[0] == row_format.value.lower()
    assert w.is_clean


@FORMATS
def test_per_row_errors_fail_only_those_rows_and_resend_the_rest(row_format: RowFormat) -> None:
    service = FakeService("rows")
    w = writer(service, row_format=row_format)
    for i in range(10):
        w.write({"id": i, "bad": i == 4}, i)
    failed = w.flush()
    assert [(f.reason, f.payload) for f in failed] == [("row 4 is bad", b'{"id": 4, "bad": true}')]
    assert sorted(service.committed) == [i for i in range(10) if i != 4]
    assert len(service.requests) == 2


def test_transport_errors_and_transient_statuses_are_retried_never_dead_lettered() -> None:
    service = FakeService(outages=2, busy=2)
    w = writer(service)
    for i in range(50):
        w.write({"id": i}, i)
    assert w.flush() == []
    assert sorted(service.committed) == list(range(50))
    assert service.connections >= 3


def test_persistent_transport_errors_fail_after_the_retry_deadline() -> None:
    service = FakeService(outages=10**9)
    w = writer(service)
    w.write({"id": 1}, 1)
    with pytest.raises(
        WriteError,
        match=r"sink 'test-sink': append to p\.d\.t at bigquerystorage\.googleapis\.com:443: still failing",
    ):
        w.flush()
    # The failure sticks: a later flush does not pretend the row was written.
    with pytest.raises(WriteError):
        w.flush()


def test_an_endpoint_refusing_arrow_gets_every_row_as_protobuf_and_nothing_fails() -> None:
    service = FakeService(refuse_arrow=True)
    w = writer(service, max_request_rows=25)
    for i in range(100):
        w.write({"id": i}, i)
    assert w.flush() == []
    assert sorted(service.committed) == list(range(100))
    assert service.formats.count("arrow") == 4
    assert w.arrow_rejections == 4


def test_a_status_that_blames_the_stream_is_not_a_bad_row() -> None:
    # FAILED_PRECONDITION (9) is a record fault for other services; on the default stream it
    # speaks of the stream, so the rows are not dead-lettered and the job fails.
    class Refusing(FakeService):
        def answer(self, request: Any) -> Any:
            return Response(error={"code": 9, "message": "stream finalized"})

    s = sender(Refusing(), TableLayout.of(ENCODER_SCHEMA))
    s.submit(Batch(None, [{"id": 1}], ["r1"], False))
    with pytest.raises(
        WriteError,
        match="append to p.d.t at bigquerystorage.googleapis.com:443 failed: FAILED_PRECONDITION",
    ):
        s.settle()
    assert not s.is_idle  # a dead sender's error reaches every later flush
    with pytest.raises(WriteError):
        s.raise_if_failed()


def test_a_table_the_storage_api_never_finds_is_named() -> None:
    class Missing(FakeService):
        def answer(self, request: Any) -> Any:
            return Response(error={"code": 5, "message": "Stream not found"})

    s = sender(Missing(), TableLayout.of(ENCODER_SCHEMA))
    s.submit(Batch(None, [{"id": 1}], ["r1"], False))
    with pytest.raises(DestinationNotFoundError, match=r"table p\.d\.t is not found"):
        s.settle()


def refusal(code: int, message: str, cause: Any) -> Any:
    """An AppendRows error whose status carries a StorageError, as BigQuery sends it."""
    status = status_pb2.Status(code=code, message=message)
    status.details.add().Pack(types.StorageError.pb()(code=cause, entity=BUFFERED_STREAM))
    return Response(error=status)


Cause = types.StorageError.StorageErrorCode


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "default"])
def test_a_stream_refusing_appends_fails_the_sender_and_no_row_is_dead_lettered(
    buffered: bool,
) -> None:
    # INVALID_ARGUMENT is what BigQuery answers bad rows with too; the StorageError tells.
    class Finalized(FakeService):
        def answer(self, request: Any) -> Any:
            self.requests.append([])
            return refusal(3, "Stream is finalized", Cause.STREAM_FINALIZED)

    service = Finalized(stream=BUFFERED_STREAM if buffered else DEST.default_stream)
    s = sender(service, TableLayout.of(ENCODER_SCHEMA), stream=created() if buffered else None)
    s.submit(Batch(None, [{"id": i} for i in range(4)], ["r0", "r1", "r2", "r3"], False))
    with pytest.raises(WriteError, match=r"INVALID_ARGUMENT \(STREAM_FINALIZED\): Stream is fin"):
        s.settle()
    assert len(service.requests) == 1  # not halved down to single rows


def test_a_table_a_storage_error_says_is_missing_is_waited_for_then_named() -> None:
    class Missing(FakeService):
        def answer(self, request: Any) -> Any:
            return refusal(3, "Table is deleted", Cause.TABLE_NOT_FOUND)

    s = sender(Missing(), TableLayout.of(ENCODER_SCHEMA))
    s.submit(Batch(None, [{"id": 1}, {"id": 2}], ["r1", "r2"], False))
    with pytest.raises(DestinationNotFoundError, match=r"table p\.d\.t is not found"):
        s.settle()


class Lagging(FakeService):
    """A table whose new columns reach the Storage Write API only on the ``lag``-th connection:
    appends before it are refused with SCHEMA_MISMATCH_EXTRA_FIELDS, as BigQuery does."""

    def __init__(self, lag: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.lag = lag

    def answer(self, request: Any) -> Any:
        if self.connections < self.lag:
            with self._lock:
                self.requests.append([])
            return refusal(
                3,
                "Input schema has more fields than BigQuery schema, extra fields: 'bad'",
                Cause.SCHEMA_MISMATCH_EXTRA_FIELDS,
            )
        return super().answer(request)


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "default"])
def test_columns_the_storage_api_does_not_know_yet_are_waited_for_on_new_connections(
    buffered: bool,
) -> None:
    service = Lagging(3, stream=BUFFERED_STREAM if buffered else DEST.default_stream)
    s = sender(
        service,
        TableLayout.of(ENCODER_SCHEMA),
        stream=created() if buffered else None,
        retry=RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.01, deadline_s=5.0),
    )
    for start in range(0, 12, 4):
        s.submit(Batch(None, [{"id": i} for i in range(start, start + 4)], ["r"] * 4, False))
    assert s.settle() == []  # no row was blamed
    assert sorted(service.committed) == list(range(12))
    assert service.connections == 3


def test_columns_that_never_reach_the_storage_api_fail_after_the_retry_deadline() -> None:
    s = sender(Lagging(10**9), TableLayout.of(ENCODER_SCHEMA))
    s.submit(Batch(None, [{"id": 1}], ["r1"], False))
    with pytest.raises(WriteError, match="SCHEMA_MISMATCH_EXTRA_FIELDS.*have not reached"):
        s.settle()
