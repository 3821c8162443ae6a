"""One MutateRows request through its attempts, against a scripted stub: entry encoding,
per-entry retries and classification, whole-RPC failures, the retry deadline, quota errors,
and that an operation waits on its event loop without blocking it. No emulator."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from google.api_core import exceptions as api_exceptions
from google.cloud.bigtable_v2.types import bigtable as bigtable_types

from pyflink_gcp.bigtable import (
    AddToCell,
    DeleteAllFromFamily,
    DeleteAllFromRow,
    DeleteRangeFromColumn,
    RowMutationEntry,
    SetCell,
)
from pyflink_gcp.bigtable.mutate_rows import (
    MutateRowsBatch,
    MutateRowsCall,
    failed_entry,
    fill_entry,
)
from pyflink_gcp.core import DestinationNotFoundError, RetryPolicy, WriteError
from pyflink_gcp.core.aio import LOOP_THREAD_NAME, LoopSlots
from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.quota import QuotaWindow
from tests.unit.bigtable.support import (
    INTERNAL,
    INVALID_ARGUMENT,
    NOT_FOUND,
    OK,
    TABLE,
    UNAVAILABLE,
    FakeDataClient,
    close_loops,  # noqa: F401 - the fixture
    entry,
    keys,
    make_call,
    open_loop,
)

_Request = bigtable_types.MutateRowsRequest

pytestmark = pytest.mark.usefixtures("close_loops")


def run(call: MutateRowsCall, batch: MutateRowsBatch) -> list[FailedRecord]:
    """The operation on an event loop of its own, to its end."""
    return asyncio.run(call.run(batch))


def batch_of(count: int, app_profile_id: str | None = None) -> MutateRowsBatch:
    batch = MutateRowsBatch(str(TABLE), app_profile_id)
    for i in range(count):
        fill_entry(batch.request.entries.add(), entry(i))
        batch.records.append({"record": i})
        batch.entries += 1
        batch.mutations += 1
    return batch


@pytest.mark.parametrize(
    "mutation",
    [
        SetCell("cf", b"q", b"value", 123_000),
        SetCell("cf", "q", 42, -1),
        DeleteRangeFromColumn("cf", b"q"),
        DeleteRangeFromColumn("cf", b"q", 1000, 5000),
        DeleteRangeFromColumn("cf", b"q", None, 5000),
        DeleteAllFromFamily("cf"),
        DeleteAllFromRow(),
        AddToCell("agg", b"q", 7, 1000),
    ],
    ids=lambda m: type(m).__name__,
)
def test_entries_encode_exactly_like_the_client_library(mutation: Any) -> None:
    element = RowMutationEntry(b"row", [mutation, SetCell("cf", b"x", b"y", 2000)])
    encoded = _Request.pb()().entries.add()
    fill_entry(encoded, element)
    assert encoded == _Request.Entry.pb(element._to_pb())


def test_a_clean_request_is_one_attempt() -> None:
    client = FakeDataClient()
    call = make_call(client)
    assert run(call, batch_of(10)) == []
    assert len(client.requests) == 1 and keys(client.requests[0])[-1] == b"k00009"
    assert (call.stats.requests, call.stats.entries_sent, call.stats.entries_retried) == (1, 10, 0)


def test_transient_entries_are_retried_alone_and_content_errors_returned_with_row_keys() -> None:
    def script(call: int, pos: int, key: bytes) -> int:
        i = int(key[1:])
        if i % 5 == 0:
            return NOT_FOUND if call == 1 else OK  # content error: reported, not retried
        if i % 3 == 0 and call <= 2:
            return UNAVAILABLE
        if i % 7 == 1 and call == 1:
            return UNAVAILABLE  # retried, then rejected for its content on the retry
        if i % 7 == 1 and call == 2:
            return INVALID_ARGUMENT
        if i == 4:
            return INTERNAL  # the emulator's answer to a missing family: the entry's fault
        return OK

    client = FakeDataClient(script)
    call = make_call(client)
    failures = run(call, batch_of(60))

    expected = {i for i in range(60) if i % 5 == 0 or (i % 7 == 1 and i % 3 != 0) or i == 4}
    assert {int(f.attributes["row-key"][1:]) for f in failures} == expected
    for failed in failures:
        i = int(failed.attributes["row-key"][1:])
        # A rejection found on a retry still names the record of its batch position.
        assert failed.record_repr == repr({"record": i})
        assert failed.attributes["row-key"] in failed.reason
        assert failed.destination == str(TABLE)
        assert _Request.Entry.pb().FromString(failed.payload).row_key == b"k%05d" % i
    assert {f.attributes["status"] for f in failures} == {
        "NOT_FOUND",
        "INVALID_ARGUMENT",
        "INTERNAL",
    }
    retried_once = {i for i in range(60) if (i % 3 == 0 or i % 7 == 1) and i % 5 != 0 and i != 4}
    assert {int(k[1:]) for k in keys(client.requests[1])} == retried_once
    assert {int(k[1:]) for k in keys(client.requests[2])} == {i for i in retried_once if i % 3 == 0}
    assert len(client.requests) == 3
    assert call.stats.requests == 1 and call.stats.entries_rejected == len(expected)
    assert call.stats.entries_retried == len(client.requests[1].entries) + len(
        client.requests[2].entries
    )


def test_a_broken_stream_retries_only_the_unanswered_entries() -> None:
    client = FakeDataClient(
        raise_on=lambda call: api_exceptions.ServiceUnavailable("gone") if call == 1 else None,
        answer_before_raise=4,
    )
    assert run(make_call(client), batch_of(10)) == []
    assert keys(client.requests[1]) == [b"k%05d" % i for i in range(4, 10)]


def test_permanent_rpc_errors_fail_with_the_table_named() -> None:
    client = FakeDataClient(raise_on=lambda call: api_exceptions.PermissionDenied("no"))
    with pytest.raises(
        WriteError,
        match=r"sink 'unit': table 'projects/p/instances/inst/tables/t'.*PERMISSION_DENIED",
    ):
        run(make_call(client), batch_of(1))
    assert len(client.requests) == 1

    client = FakeDataClient(raise_on=lambda call: api_exceptions.NotFound("table gone"))
    with pytest.raises(DestinationNotFoundError, match="no longer exists"):
        run(make_call(client), batch_of(1))


def test_transient_failures_end_at_the_retry_deadline() -> None:
    client = FakeDataClient(script=lambda call, pos, key: UNAVAILABLE)
    with pytest.raises(WriteError, match="UNAVAILABLE") as err:
        run(make_call(client, retry_deadline_s=0.3), batch_of(1))
    assert "retry deadline" in str(err.value) and "MutateRows of 1 entries" in str(err.value)
    assert len(client.requests) > 1


def test_the_app_profile_is_sent_on_every_attempt() -> None:
    client = FakeDataClient(script=lambda call, pos, key: UNAVAILABLE if call == 1 else OK)
    run(make_call(client, app_profile_id="batch"), batch_of(1, app_profile_id="batch"))
    assert [r.app_profile_id for r in client.requests] == ["batch", "batch"]
    assert client.metadata["x-goog-request-params"] == (
        "table_name=projects/p/instances/inst/tables/t&app_profile_id=batch"
    )


def test_failed_entries_carry_the_row_key_and_status() -> None:
    failed = failed_entry("s", "tbl", b"payload", b"k\xff", "INTERNAL", "no family", {"r": 1})
    assert failed.reason == "INTERNAL: no family (row key 'k\\\\xff')"
    assert failed.attributes == {"row-key": "k\\xff", "status": "INTERNAL"}
    assert (failed.sink, failed.destination, failed.payload) == ("s", "tbl", b"payload")
    assert failed.record_repr == "{'r': 1}"


RESOURCE_EXHAUSTED = 8


def quick_policy(deadline_s: float = 5.0, quota_deadline_s: float | None = None) -> RetryPolicy:
    return RetryPolicy(
        quota_deadline_s=quota_deadline_s,
        initial_backoff_s=0.05,
        max_backoff_s=0.1,
        deadline_s=deadline_s,
        quota_initial_backoff_s=0.05,
        quota_max_backoff_s=0.1,
    )


def test_backoff_waits_on_the_loop_without_sleeping_a_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_sleep(seconds: float) -> None:
        raise AssertionError(f"time.sleep({seconds}) on {threading.current_thread().name}")

    # Every attempt fails for a while: the operation backs off several times meanwhile.
    client = FakeDataClient(script=lambda call, pos, key: UNAVAILABLE if call <= 4 else OK)
    call = make_call(client)
    call.policy = quick_policy()
    loop = open_loop()
    try:
        monkeypatch.setattr(time, "sleep", no_sleep)
        retrying = loop.start(call.run, batch_of(3))
        # While it waits out its backoff, the loop runs other operations to their end.
        quick = [loop.start(make_call(FakeDataClient()).run, batch_of(1)) for _ in range(20)]
        assert all(handle.result() == [] for handle in quick)
        assert retrying.result() == [] and len(client.requests) == 5
        monkeypatch.undo()
        assert client.threads == {LOOP_THREAD_NAME}
    finally:
        loop.close()


def test_quota_errors_halve_the_quota_window_and_are_retried_on_the_quota_schedule() -> None:
    client = FakeDataClient(
        script=lambda call, pos, key: RESOURCE_EXHAUSTED if call == 1 and pos % 2 else OK
    )
    call = make_call(client)
    # Only the quota deadline allows the retry: a transient error would fail at once.
    call.policy = quick_policy(deadline_s=0.0, quota_deadline_s=5.0)
    call.window = QuotaWindow(8, "unit")
    assert run(call, batch_of(6)) == []
    assert call.window.limit == 4 and call.window.quota_errors == 1
    assert keys(client.requests[1]) == [b"k00001", b"k00003", b"k00005"]
    assert call.stats.entries_retried == 3


def test_attempts_in_flight_follow_the_quota_windows_limit() -> None:
    quota = QuotaWindow(4, "unit")
    slots = LoopSlots(lambda: quota.limit)

    def max_concurrent_calls() -> int:
        client = FakeDataClient(delay=0.05)
        call = make_call(client)
        call.slots = slots
        loop = open_loop()
        try:
            handles = [loop.start(call.run, batch_of(1)) for _ in range(12)]
            assert all(handle.result() == [] for handle in handles)
        finally:
            loop.close()
        assert len(client.requests) == 12 and slots.in_use == 0
        return client.max_in_flight_entries

    assert max_concurrent_calls() == 4
    quota.on_quota_error()
    assert max_concurrent_calls() == 2


def test_an_operation_in_its_backoff_ends_cancelled_when_the_loop_closes() -> None:
    from pyflink_gcp.core.retry import status_name

    client = FakeDataClient(script=lambda call, pos, key: UNAVAILABLE)
    call = make_call(client, retry_deadline_s=60)
    call.policy = RetryPolicy(initial_backoff_s=30, max_backoff_s=30, deadline_s=120)
    loop = open_loop()
    handle = loop.start(call.run, batch_of(1))
    deadline = time.monotonic() + 5
    while not client.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    seen: list[str | None] = []
    handle.add_done_callback(lambda h: seen.append(status_name(h.exception())))
    loop.close()
    assert handle.done() and seen == ["CANCELLED"]
