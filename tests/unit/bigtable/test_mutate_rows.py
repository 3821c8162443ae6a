"""One MutateRows request through its attempts, against a scripted stub: entry encoding,
per-entry retries and classification, whole-RPC failures, the retry deadline. No emulator."""

from __future__ import annotations

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
from pyflink_gcp.bigtable.mutate_rows import MutateRowsBatch, failed_entry, fill_entry
from pyflink_gcp.core import DestinationNotFoundError, WriteError
from tests.unit.bigtable.support import (
    INTERNAL,
    INVALID_ARGUMENT,
    NOT_FOUND,
    OK,
    TABLE,
    UNAVAILABLE,
    FakeDataClient,
    entry,
    keys,
    make_call,
)

_Request = bigtable_types.MutateRowsRequest


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
    assert call.run(batch_of(10)) == []
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
    failures = call.run(batch_of(60))

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
    assert make_call(client).run(batch_of(10)) == []
    assert keys(client.requests[1]) == [b"k%05d" % i for i in range(4, 10)]


def test_permanent_rpc_errors_fail_with_the_table_named() -> None:
    client = FakeDataClient(raise_on=lambda call: api_exceptions.PermissionDenied("no"))
    with pytest.raises(
        WriteError,
        match=r"sink 'unit': table 'projects/p/instances/inst/tables/t'.*PERMISSION_DENIED",
    ):
        make_call(client).run(batch_of(1))
    assert len(client.requests) == 1

    client = FakeDataClient(raise_on=lambda call: api_exceptions.NotFound("table gone"))
    with pytest.raises(DestinationNotFoundError, match="no longer exists"):
        make_call(client).run(batch_of(1))


def test_transient_failures_end_at_the_retry_deadline() -> None:
    client = FakeDataClient(script=lambda call, pos, key: UNAVAILABLE)
    with pytest.raises(WriteError, match="UNAVAILABLE") as err:
        make_call(client, retry_deadline_s=0.3).run(batch_of(1))
    assert "retry deadline" in str(err.value) and "MutateRows of 1 entries" in str(err.value)
    assert len(client.requests) > 1


def test_the_app_profile_is_sent_on_every_attempt() -> None:
    client = FakeDataClient(script=lambda call, pos, key: UNAVAILABLE if call == 1 else OK)
    make_call(client, app_profile_id="batch").run(batch_of(1, app_profile_id="batch"))
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
