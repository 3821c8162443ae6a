"""The table batcher against a scripted stub on a real event loop: batching, splitting at the
limits, flow control, rejected keys and types, errors of background sends, the sending of first
requests with their table's check. No emulator."""

from __future__ import annotations

import time
from typing import Any

import pytest
from google.api_core import exceptions as api_exceptions

from pyflink_gcp.bigtable import RowMutationEntry, SetCell
from pyflink_gcp.core import SerializerError, WriteError
from tests.unit.bigtable.support import (
    LOOP_THREAD,
    FakeDataClient,
    close_loops,  # noqa: F401 - the fixture
    entry,
    keys,
    make_batcher,
)

pytestmark = pytest.mark.usefixtures("close_loops")


def test_full_batches_are_sent_in_the_background_and_the_rest_at_flush() -> None:
    client = FakeDataClient()
    batcher = make_batcher(client, batch_max_entries=100)
    for i in range(250):
        batcher.write(entry(i), i)
    assert not batcher.is_clean
    assert batcher.flush() == []
    assert batcher.is_clean
    assert sorted(len(r.entries) for r in client.requests) == [50, 100, 100]
    assert sorted(k for r in client.requests for k in keys(r)) == [b"k%05d" % i for i in range(250)]
    assert all(r.table_name == "projects/p/instances/inst/tables/t" for r in client.requests)
    assert client.threads == {LOOP_THREAD}  # every request ran on the loop, none on a pool


def test_start_flush_sends_the_partial_batch_without_waiting() -> None:
    client = FakeDataClient(delay=0.2)
    batcher = make_batcher(client)
    for i in range(3):
        batcher.write(entry(i), i)
    batcher.start_flush()
    assert not batcher.is_clean  # in flight
    deadline = time.monotonic() + 5
    while not client.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [len(r.entries) for r in client.requests] == [3]
    assert batcher.flush() == [] and batcher.is_clean
    assert len(client.requests) == 1


def test_a_batch_never_exceeds_the_mutation_limit() -> None:
    client = FakeDataClient()
    batcher = make_batcher(client)  # batch_max_mutations defaults to Bigtable's 100,000
    for i in range(3):
        batcher.write(entry(i, cells=40_000), i)
    batcher.flush()
    assert [sum(len(e.mutations) for e in r.entries) for r in client.requests] == [80_000, 40_000]
    assert batcher._stats.max_request_mutations == 80_000


def test_batches_split_at_the_configured_mutation_and_byte_limits() -> None:
    client = FakeDataClient()
    batcher = make_batcher(client, batch_max_mutations=1_000)
    for i in range(10):
        batcher.write(entry(i, cells=300), i)
    batcher.flush()
    assert [len(r.entries) for r in client.requests] == [3, 3, 3, 1]

    client = FakeDataClient()
    batcher = make_batcher(client, batch_max_bytes=1_000)
    for i in range(10):
        batcher.write(RowMutationEntry(b"k%d" % i, SetCell("cf", b"q", b"x" * 400, 1000)), i)
    batcher.flush()
    assert [len(r.entries) for r in client.requests] == [3, 3, 3, 1]


def test_errors_of_background_sends_surface_on_the_next_write() -> None:
    client = FakeDataClient(raise_on=lambda call: api_exceptions.PermissionDenied("no"))
    batcher = make_batcher(client, batch_max_entries=1)
    with pytest.raises(WriteError, match="PERMISSION_DENIED"):
        for i in range(1_000):
            time.sleep(0.001)
            batcher.write(entry(i), i)


def test_in_flight_entries_stay_within_the_limit() -> None:
    client = FakeDataClient(delay=0.002)
    batcher = make_batcher(
        client, batch_max_entries=5, max_in_flight_entries=12, max_in_flight_requests=8
    )
    for i in range(300):
        batcher.write(entry(i), i)
    batcher.flush()
    assert len(client.requests) == 60
    assert client.max_in_flight_entries <= 12


def test_bad_row_keys_are_rejected_without_a_request() -> None:
    client = FakeDataClient()
    batcher = make_batcher(client)
    batcher.write(RowMutationEntry(b"", SetCell("cf", b"q", b"v", 1000)), "empty")
    batcher.write(RowMutationEntry(b"x" * 4097, SetCell("cf", b"q", b"v", 1000)), "long")
    assert not batcher.is_clean
    failures = batcher.flush()
    assert [f.record_repr for f in failures] == ["'empty'", "'long'"]
    assert "empty row key" in failures[0].reason and "4097 bytes" in failures[1].reason
    assert {f.attributes["status"] for f in failures} == {"INVALID_ARGUMENT"}
    assert client.requests == [] and batcher.is_clean
    assert batcher._stats.entries_rejected == 2


def test_the_serializer_must_return_a_row_mutation_entry() -> None:
    batcher = make_batcher(FakeDataClient())
    with pytest.raises(SerializerError) as err:
        batcher.write(b"bytes", {"id": 1})
    message = str(err.value)
    assert message.startswith("sink 'unit': the serializer returned bytes (b'bytes')")
    assert "for record {'id': 1} headed to table 'projects/p/instances/inst/tables/t'" in message
    with pytest.raises(SerializerError, match="one entry per record"):
        batcher.write([entry(1)], {"id": 1})


def test_close_counts_once() -> None:
    batcher = make_batcher(FakeDataClient())
    batcher.close()
    batcher.close()
    assert batcher._stats.batchers_closed == 1


def test_a_missing_tables_first_request_fails_naming_the_table_and_what_to_do() -> None:
    """Without creation nothing checks a table before its first MutateRows: its NOT_FOUND
    (nothing written) is the error, with what to do."""
    from pyflink_gcp.bigtable.mutate_rows import NOT_CREATED
    from pyflink_gcp.core import DestinationNotFoundError

    missing = FakeDataClient(raise_on=lambda call: api_exceptions.NotFound("table not found"))
    batcher = make_batcher(missing)
    batcher._call.not_found = NOT_CREATED
    batcher.write(entry(0), 0)
    with pytest.raises(DestinationNotFoundError) as err:
        batcher.flush()
    message = str(err.value)
    assert "sink 'unit': table 'projects/p/instances/inst/tables/t'" in message
    assert "MutateRows answered NOT_FOUND (" in message
    assert "does not exist, and the sink may not create tables" in message
    assert "set_create_disposition" in message and "set_table_create_options" in message
    assert len(missing.requests) == 1  # not retried


def test_bytes_accepted_counts_the_encoded_entries_of_accepted_rows() -> None:
    client = FakeDataClient()
    batcher = make_batcher(client, batch_max_entries=3)
    for i in range(7):
        batcher.write(entry(i), i)
    batcher.write(RowMutationEntry(b"", SetCell("cf", b"q", b"v", 1000)), "empty key")
    assert batcher.flush() != []  # the empty key is a record failure, not bytes
    sent = sum(e.ByteSize() for r in client.requests for e in r.entries)
    assert batcher.bytes_accepted == sent > 0


class _Unencodable(SetCell):
    """A mutation the request cannot take: its encoding raises, as a bad value would."""

    def _to_dict(self) -> dict[str, Any]:
        raise TypeError("value is not bytes")


def test_an_entry_that_fails_to_encode_leaves_nothing_behind_in_the_request() -> None:
    client = FakeDataClient()
    batcher = make_batcher(client)
    with pytest.raises(TypeError):
        batcher.write(RowMutationEntry(b"bad", _Unencodable("cf", b"q", b"v", 1000)), "bad")
    assert batcher.is_clean  # the request begun for it was dropped with it
    batcher.write(entry(1), 1)
    with pytest.raises(TypeError):
        batcher.write(RowMutationEntry(b"bad", _Unencodable("cf", b"q", b"v", 1000)), "bad")
    batcher.write(entry(2), 2)
    assert batcher.flush() == []
    assert [keys(r) for r in client.requests] == [[b"k00001", b"k00002"]]


def test_an_idle_batcher_holds_no_request() -> None:
    client = FakeDataClient()
    batcher = make_batcher(client)
    assert batcher._batch is None
    batcher.write(entry(1), 1)
    assert batcher._batch is not None
    batcher.flush()
    assert batcher._batch is None  # none is built until the next entry


def test_a_flush_waits_no_longer_than_one_request_with_its_retries_can_last() -> None:
    batcher = make_batcher(FakeDataClient())
    call = batcher._call
    # Past that bound without a completion, the wait fails the task rather than hanging it.
    assert batcher._window.stall_s == call.policy.stall_bound(call.timeout_s)
