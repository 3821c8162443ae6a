"""The table batcher's logic against a scripted data client: batching, splitting, per-entry
retries and classification, flow control. No emulator."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from google.api_core import exceptions as api_exceptions
from google.cloud.bigtable_v2.types import bigtable as bigtable_types

from pyflink_gcp.bigtable import (
    AddToCell,
    BigtableWriterOptions,
    DeleteAllFromFamily,
    DeleteAllFromRow,
    DeleteRangeFromColumn,
    RowMutationEntry,
    SetCell,
    TableCreateOptions,
    TableDestination,
)
from pyflink_gcp.bigtable.writer import BigtableWriterFactory, TableBatcher, fill_entry
from pyflink_gcp.core import (
    CreationLimitExceededError,
    DestinationNotFoundError,
    SerializerError,
    SubtaskInfo,
    WriteError,
)

TABLE = TableDestination.of("p", "inst", "t")
_Request = bigtable_types.MutateRowsRequest
_Response = bigtable_types.MutateRowsResponse
OK, NOT_FOUND, INVALID_ARGUMENT, UNAVAILABLE, INTERNAL = 0, 5, 3, 14, 13

# (request number from 1, position in request, row key) -> status code
Script = Callable[[int, int, bytes], int]


class FakeDataClient:
    """Stands for the MutateRows stub: answers from a script, records every request."""

    def __init__(
        self,
        script: Script = lambda call, pos, key: OK,
        *,
        raise_on: Callable[[int], BaseException | None] = lambda call: None,
        answer_before_raise: int = 0,
        delay: float = 0.0,
    ) -> None:
        self.script = script
        self.raise_on = raise_on
        self.answer_before_raise = answer_before_raise
        self.delay = delay
        self.requests: list[Any] = []
        self.in_flight = 0
        self.max_in_flight_entries = 0
        self._lock = threading.Lock()

    def __call__(self, raw: Any, timeout: float, metadata: Any) -> Iterator[Any]:
        with self._lock:
            self.requests.append(raw)
            self.metadata = dict(metadata)
            call = len(self.requests)
            self.in_flight += len(raw.entries)
            self.max_in_flight_entries = max(self.max_in_flight_entries, self.in_flight)
        try:
            time.sleep(self.delay)
            error = self.raise_on(call)
            response = _Response.pb()()
            answered = len(raw.entries) if error is None else self.answer_before_raise
            for pos, entry in enumerate(raw.entries[:answered]):
                result = response.entries.add(index=pos)
                result.status.code = self.script(call, pos, entry.row_key)
        finally:
            with self._lock:
                self.in_flight -= len(raw.entries)
        yield response
        if error is not None:
            raise error


def make_factory(client: FakeDataClient, **options: Any) -> BigtableWriterFactory:
    options.setdefault("retry_deadline", 5.0)
    factory = BigtableWriterFactory(sink_name="unit", options=BigtableWriterOptions(**options))
    factory.mutate_rows = client
    factory._pool = ThreadPoolExecutor(options.get("max_concurrent_requests", 8))
    factory._info = SubtaskInfo("unit")
    factory._known_tables.add(str(TABLE))
    return factory


def entry(i: int, cells: int = 1, family: str = "cf") -> RowMutationEntry:
    return RowMutationEntry(
        b"k%05d" % i, [SetCell(family, b"q%d" % c, b"v", 1000) for c in range(cells)]
    )


def keys(request: Any) -> list[bytes]:
    return [e.row_key for e in request.entries]


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


def test_full_batches_are_sent_in_the_background_and_the_rest_at_flush() -> None:
    client = FakeDataClient()
    factory = make_factory(client, batch_max_entries=100)
    batcher = factory.create_writer(TABLE)
    for i in range(250):
        batcher.write(entry(i), i)
    assert not batcher.is_clean
    assert batcher.flush() == []
    assert batcher.is_clean
    assert sorted(len(r.entries) for r in client.requests) == [50, 100, 100]
    assert sorted(k for r in client.requests for k in keys(r)) == [b"k%05d" % i for i in range(250)]
    assert all(r.table_name == "projects/p/instances/inst/tables/t" for r in client.requests)


def test_a_batch_never_exceeds_the_mutation_limit() -> None:
    client = FakeDataClient()
    factory = make_factory(client)  # batch_max_mutations defaults to Bigtable's 100,000
    batcher = factory.create_writer(TABLE)
    for i in range(3):
        batcher.write(entry(i, cells=40_000), i)
    batcher.flush()
    assert [sum(len(e.mutations) for e in r.entries) for r in client.requests] == [80_000, 40_000]
    assert factory.stats.max_request_mutations == 80_000


def test_batches_split_at_the_configured_mutation_and_byte_limits() -> None:
    client = FakeDataClient()
    batcher = make_factory(client, batch_max_mutations=1_000).create_writer(TABLE)
    for i in range(10):
        batcher.write(entry(i, cells=300), i)
    batcher.flush()
    assert [len(r.entries) for r in client.requests] == [3, 3, 3, 1]

    client = FakeDataClient()
    batcher = make_factory(client, batch_max_bytes=1_000).create_writer(TABLE)
    for i in range(10):
        batcher.write(RowMutationEntry(b"k%d" % i, SetCell("cf", b"q", b"x" * 400, 1000)), i)
    batcher.flush()
    assert [len(r.entries) for r in client.requests] == [3, 3, 3, 1]


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
    batcher = make_factory(client, batch_max_entries=1_000).create_writer(TABLE)
    for i in range(60):
        batcher.write(entry(i), {"record": i})
    failures = batcher.flush()

    expected = {i for i in range(60) if i % 5 == 0 or (i % 7 == 1 and i % 3 != 0) or i == 4}
    assert {int(f.attributes["row-key"][1:]) for f in failures} == expected
    for failed in failures:
        i = int(failed.attributes["row-key"][1:])
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


def test_a_broken_stream_retries_only_the_unanswered_entries() -> None:
    client = FakeDataClient(
        raise_on=lambda call: api_exceptions.ServiceUnavailable("gone") if call == 1 else None,
        answer_before_raise=4,
    )
    batcher = make_factory(client).create_writer(TABLE)
    for i in range(10):
        batcher.write(entry(i), i)
    assert batcher.flush() == []
    assert keys(client.requests[1]) == [b"k%05d" % i for i in range(4, 10)]


def test_permanent_rpc_errors_fail_with_the_table_named() -> None:
    client = FakeDataClient(raise_on=lambda call: api_exceptions.PermissionDenied("no"))
    batcher = make_factory(client).create_writer(TABLE)
    batcher.write(entry(1), 1)
    with pytest.raises(
        WriteError,
        match=r"sink 'unit': table 'projects/p/instances/inst/tables/t'.*PERMISSION_DENIED",
    ):
        batcher.flush()
    assert len(client.requests) == 1

    client = FakeDataClient(raise_on=lambda call: api_exceptions.NotFound("table gone"))
    batcher = make_factory(client).create_writer(TABLE)
    batcher.write(entry(1), 1)
    with pytest.raises(DestinationNotFoundError, match="no longer exists"):
        batcher.flush()


def test_transient_failures_end_at_the_retry_deadline() -> None:
    client = FakeDataClient(script=lambda call, pos, key: UNAVAILABLE)
    batcher = make_factory(client, retry_deadline=0.3).create_writer(TABLE)
    batcher.write(entry(1), 1)
    with pytest.raises(WriteError, match="UNAVAILABLE") as err:
        batcher.flush()
    assert "retry deadline" in str(err.value)
    assert len(client.requests) > 1


def test_errors_of_background_sends_surface_on_the_next_write() -> None:
    client = FakeDataClient(raise_on=lambda call: api_exceptions.PermissionDenied("no"))
    batcher = make_factory(client, batch_max_entries=1).create_writer(TABLE)
    with pytest.raises(WriteError, match="PERMISSION_DENIED"):
        for i in range(1_000):
            time.sleep(0.001)
            batcher.write(entry(i), i)


def test_in_flight_entries_stay_within_the_limit() -> None:
    client = FakeDataClient(delay=0.002)
    factory = make_factory(
        client, batch_max_entries=5, max_in_flight_entries=12, max_concurrent_requests=8
    )
    batcher = factory.create_writer(TABLE)
    for i in range(300):
        batcher.write(entry(i), i)
    batcher.flush()
    assert len(client.requests) == 60
    assert client.max_in_flight_entries <= 12


def test_bad_row_keys_are_rejected_without_a_request() -> None:
    client = FakeDataClient()
    batcher = make_factory(client).create_writer(TABLE)
    batcher.write(RowMutationEntry(b"", SetCell("cf", b"q", b"v", 1000)), "empty")
    batcher.write(RowMutationEntry(b"x" * 4097, SetCell("cf", b"q", b"v", 1000)), "long")
    assert not batcher.is_clean
    failures = batcher.flush()
    assert [f.record_repr for f in failures] == ["'empty'", "'long'"]
    assert "empty row key" in failures[0].reason and "4097 bytes" in failures[1].reason
    assert client.requests == [] and batcher.is_clean


def test_the_serializer_must_return_a_row_mutation_entry() -> None:
    batcher = make_factory(FakeDataClient()).create_writer(TABLE)
    with pytest.raises(SerializerError) as err:
        batcher.write(b"bytes", {"id": 1})
    message = str(err.value)
    assert message.startswith("sink 'unit': the serializer returned bytes (b'bytes')")
    assert "for record {'id': 1} headed to table 'projects/p/instances/inst/tables/t'" in message
    with pytest.raises(SerializerError, match="one entry per record"):
        batcher.write([entry(1)], {"id": 1})


def test_app_profile_is_sent_on_every_request() -> None:
    client = FakeDataClient(script=lambda call, pos, key: UNAVAILABLE if call == 1 else OK)
    batcher = make_factory(client, app_profile_id="batch").create_writer(TABLE)
    batcher.write(entry(1), 1)
    batcher.flush()
    assert [r.app_profile_id for r in client.requests] == ["batch", "batch"]
    assert client.metadata["x-goog-request-params"] == (
        "table_name=projects/p/instances/inst/tables/t&app_profile_id=batch"
    )


class FakeAdmin:
    def __init__(self, get_error: BaseException | None) -> None:
        self.get_error = get_error
        self.created: list[dict[str, Any]] = []

    def get_table(self, request: Any, retry: Any, timeout: float) -> Any:
        if self.get_error is not None:
            raise self.get_error
        return object()

    def create_table(self, request: dict[str, Any], retry: Any, timeout: float) -> Any:
        self.created.append(request)
        return object()


def factory_with_admin(
    admin: FakeAdmin, create: TableCreateOptions | None
) -> BigtableWriterFactory:
    factory = make_factory(FakeDataClient())
    factory._known_tables.clear()
    factory.create_options = create
    factory.resolver_name = "my.resolver"
    factory._admin_client = admin
    return factory


def test_table_checks_and_creation() -> None:
    admin = FakeAdmin(api_exceptions.NotFound("no table"))
    with pytest.raises(
        DestinationNotFoundError, match="does not exist, and the sink may not create"
    ):
        factory_with_admin(admin, None).create_writer(TABLE)

    options = TableCreateOptions(column_families={"cf": 3, "raw": None}, max_tables=2)
    factory = factory_with_admin(admin, options)
    for table in ("a", "b", "a"):
        assert isinstance(
            factory.create_writer(TableDestination.of("p", "inst", table)), TableBatcher
        )
    assert [r["table_id"] for r in admin.created] == ["a", "b"]
    created = admin.created[0]
    assert created["parent"] == "projects/p/instances/inst"
    families = created["table"].column_families
    assert set(families) == {"cf", "raw"}
    assert families["cf"].gc_rule.max_num_versions == 3
    with pytest.raises(CreationLimitExceededError) as err:
        factory.create_writer(TableDestination.of("p", "inst", "c"))
    assert "max_tables=2" in str(err.value) and "my.resolver" in str(err.value)
    assert "already created 2 tables (a, b)" in str(err.value)

    # Writing needs no admin permission: without creation, a denied check is not fatal.
    admin = FakeAdmin(api_exceptions.PermissionDenied("no admin"))
    assert factory_with_admin(admin, None).create_writer(TABLE) is not None
