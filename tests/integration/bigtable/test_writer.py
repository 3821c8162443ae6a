"""The Bigtable writer against the emulator, driven through the core's SinkWriter (no Flink).

The sink's configuration is pickled and unpickled first, as it is on a Flink worker.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import grpc
import pytest

from pyflink_gcp.bigtable import (
    BigtableSink,
    BigtableWriterOptions,
    CreateDisposition,
    DeleteAllFromFamily,
    DeleteAllFromRow,
    DeleteRangeFromColumn,
    RowMutationEntry,
    SetCell,
    TableCreateOptions,
    TableDestination,
)
from pyflink_gcp.bigtable.writer import BigtableWriterFactory
from pyflink_gcp.core import (
    CreationLimitExceededError,
    DestinationNotFoundError,
    FailureHandler,
    SerializerError,
    SubtaskInfo,
    WriteError,
)
from pyflink_gcp.core.sink_writer import SinkWriter
from tests.integration.bigtable.support import (
    PROJECT,
    BigtableProxy,
    column_families,
    create_table,
    delete_table,
    list_tables,
    read_table,
)
from tests.support import writers
from tests.support.dead_letters import MemoryDeadLetterQueue

pytestmark = pytest.mark.integration


def open_writer(sink: BigtableSink) -> SinkWriter:
    """The sink's writer, its configuration pickled first as a worker receives it."""
    return writers.open_writer(sink, pickled=True)


def factory_of(writer: SinkWriter) -> BigtableWriterFactory:
    factory = writer.config.factory
    assert isinstance(factory, BigtableWriterFactory)
    return factory


def cell(i: int, family: str = "cf") -> RowMutationEntry:
    return RowMutationEntry(
        b"row-%06d" % i, [SetCell(family, b"v", b"value-%d" % i, timestamp_micros=(i + 1) * 1000)]
    )


def builder(instance: str, table: str | None = None, **options: Any) -> Any:
    return (
        BigtableSink.builder()
        .set_sink_name("bt-it")
        .set_destination_resolver(
            lambda r, ctx: TableDestination.of(PROJECT, instance, r.get("table", table))
        )
        .set_serializer(lambda r: r["entry"])
        .set_writer_options(BigtableWriterOptions(**options))
    )


def creating(builder: Any, families: dict[str, Any]) -> Any:
    """``builder`` with table creation on, for tables with ``families``."""
    return builder.set_create_disposition(
        CreateDisposition.CREATE_IF_NEEDED
    ).set_table_create_options(TableCreateOptions(column_families=families))


def test_writes_every_mutation_type(instance: str) -> None:
    create_table(instance, "t", {"cf": None, "other": None})
    writer = open_writer(builder(instance, "t", batch_max_entries=7).build())
    for i in range(50):
        writer.write({"entry": cell(i)})
    writer.write({"entry": RowMutationEntry(b"gone", SetCell("cf", b"v", b"x", 1000))})
    writer.write({"entry": RowMutationEntry(b"fam", [SetCell("other", b"a", b"1", 1000)])})
    writer.write({"entry": RowMutationEntry(b"fam", [SetCell("cf", b"a", b"1", 1000)])})
    writer.write(
        {
            "entry": RowMutationEntry(
                b"range", [SetCell("cf", b"q", b"%d" % t, t * 1000) for t in (1, 2, 3, 4)]
            )
        }
    )
    writer.flush()
    writer.write({"entry": RowMutationEntry(b"gone", DeleteAllFromRow())})
    writer.write({"entry": RowMutationEntry(b"fam", DeleteAllFromFamily("other"))})
    writer.write(
        {"entry": RowMutationEntry(b"range", DeleteRangeFromColumn("cf", b"q", 2000, 4000))}
    )
    writer.flush()
    writer.close()

    rows = read_table(instance, "t")
    for i in range(50):
        assert rows[b"row-%06d" % i] == {("cf", b"v"): [((i + 1) * 1000, b"value-%d" % i)]}
    assert b"gone" not in rows
    assert rows[b"fam"] == {("cf", b"a"): [(1000, b"1")]}
    assert rows[b"range"][("cf", b"q")] == [(4000, b"4"), (1000, b"1")]
    stats = factory_of(writer).stats
    assert stats.max_request_entries == 7
    assert stats.entries_rejected == 0


def test_missing_table_without_creation_names_the_table(instance: str) -> None:
    writer = open_writer(builder(instance, "missing").build())
    # Nothing is checked first: the table's first MutateRows answers NOT_FOUND.
    writer.write({"entry": cell(1)})
    with pytest.raises(DestinationNotFoundError) as err:
        writer.flush()
    message = str(err.value)
    assert f"projects/{PROJECT}/instances/{instance}/tables/missing" in message
    assert "bt-it" in message and "set_table_create_options" in message
    assert "MutateRows answered NOT_FOUND" in message
    writer.close()


def test_without_creation_a_tables_first_request_asks_nothing_first(instance: str) -> None:
    for table in ("a", "b"):
        create_table(instance, table, {"cf": 1})
    writer = open_writer(builder(instance, batch_max_entries=1_000).build())
    for i in range(10):
        writer.write({"table": "ab"[i % 2], "entry": cell(i)})
    writer.flush()
    # No GetTable: the admin client was never opened.
    assert factory_of(writer).client._admin is None  # type: ignore[union-attr]
    writer.close()
    assert set(read_table(instance, "a")) == {b"row-%06d" % i for i in range(0, 10, 2)}
    assert set(read_table(instance, "b")) == {b"row-%06d" % i for i in range(1, 10, 2)}


def test_creates_tables_with_exactly_the_declared_families_up_to_the_bound(instance: str) -> None:
    families = {"cf": 2, "hist": timedelta(days=3), "raw": None}
    sink = creating(builder(instance, max_created_destinations=2), families).build()
    create_table(instance, "existing", {"cf": 1})
    writer = open_writer(sink)
    for table in ("existing", "new_a", "new_b", "new_a"):
        writer.write({"table": table, "entry": cell(1)})
    writer.flush()
    expected = {"cf": {"max_num_versions": 2}, "hist": {"max_age": "259200s"}, "raw": {}}
    assert column_families(instance, "new_a") == expected
    assert column_families(instance, "new_b") == expected
    assert column_families(instance, "existing") == {"cf": {"max_num_versions": 1}}
    assert factory_of(writer).stats.tables_created == 2

    with pytest.raises(CreationLimitExceededError) as err:
        writer.write({"table": "new_c", "entry": cell(2)})
    message = str(err.value)
    assert "max_created_destinations=2 per 1h" in message
    assert "this subtask created 2 tables in the last" in message
    assert "new_c" in message and "<lambda>" in message, message
    assert "new_c" not in list_tables(instance)
    writer.close()
    for table in ("new_a", "new_b"):
        assert read_table(instance, table)[b"row-000001"]


def test_a_table_another_subtask_created_first_is_not_an_error(instance: str) -> None:
    create_table(instance, "shared", {"cf": 1})
    factory = BigtableWriterFactory(
        sink_name="bt-it",
        options=BigtableWriterOptions(max_created_destinations=1),
        create_options=TableCreateOptions(column_families={"cf": 1}),
    )
    factory.open(SubtaskInfo("bt-it"))
    assert factory.tables is not None
    factory.tables.create(TableDestination.of(PROJECT, instance, "shared"))
    assert factory.stats.tables_created == 0 and list(factory.tables.created) == []
    factory.close()


def test_missing_family_goes_to_the_failure_handler_with_the_row_key(instance: str) -> None:
    create_table(instance, "t", {"cf": 1})
    dlq = MemoryDeadLetterQueue()
    sink = (
        builder(instance, "t", batch_max_entries=16)
        .set_failure_handler(FailureHandler.send_to_dead_letter_queue(dlq))
        .build()
    )
    writer = open_writer(sink)
    for i in range(200):
        writer.write({"i": i, "entry": cell(i, "nope" if i % 10 == 3 else "cf")})
    writer.write({"i": -1, "entry": RowMutationEntry(b"", SetCell("cf", b"v", b"x", 1000))})
    writer.flush()
    sent = writer.config.failure_handler.dead_letter_queue.sent  # type: ignore[union-attr]
    writer.close()

    bad = {b"row-%06d" % i for i in range(200) if i % 10 == 3}
    assert {f.attributes["row-key"].encode() for f in sent} == bad | {b""}
    for failed in sent:
        assert failed.destination == f"projects/{PROJECT}/instances/{instance}/tables/t"
        assert failed.attributes["row-key"] in failed.reason
        assert "'i': " in failed.record_repr
    empty = next(f for f in sent if f.attributes["row-key"] == "")
    assert "empty row key" in empty.reason
    family = next(f for f in sent if f.attributes["row-key"] == "row-000003")
    assert "nope" in family.reason
    from google.cloud.bigtable_v2.types import bigtable as bigtable_types

    payload = bigtable_types.MutateRowsRequest.Entry.pb().FromString(family.payload)
    assert payload.row_key == b"row-000003"
    assert payload.mutations[0].set_cell.family_name == "nope"
    rows = read_table(instance, "t")
    assert set(rows) == {b"row-%06d" % i for i in range(200)} - bad


def test_missing_family_fails_the_job_by_default(instance: str) -> None:
    create_table(instance, "t", {"cf": 1})
    writer = open_writer(builder(instance, "t").build())
    writer.write({"entry": cell(5, "nope")})
    from pyflink_gcp.core import RecordRejectedError

    with pytest.raises(RecordRejectedError, match="row-000005"):
        writer.flush()
    writer.close()


def test_serializer_returning_the_wrong_type_is_a_clear_error(instance: str) -> None:
    create_table(instance, "t", {"cf": 1})
    from google.cloud.bigtable.row import DirectRow

    writer = open_writer(builder(instance, "t").build())
    with pytest.raises(SerializerError) as err:
        writer.write({"id": 7, "entry": {"row": "dict"}})
    message = str(err.value)
    assert "bt-it" in message and "tables/t" in message and "'id': 7" in message
    assert "returned dict" in message and "RowMutationEntry" in message
    with pytest.raises(SerializerError, match="classic google.cloud.bigtable.row API"):
        writer.write({"id": 8, "entry": DirectRow(b"k")})
    writer.close()


def test_batches_over_100k_cells_are_split(instance: str, proxy: BigtableProxy) -> None:
    create_table(instance, "wide", {"cf": 1})
    sink = (
        builder(instance, "wide", batch_max_entries=500, batch_max_bytes=1 << 30)
        .set_endpoint("http://" + proxy.host)
        .build()
    )
    writer = open_writer(sink)
    # 101,000 cells, all inside one 500-entry batch: one request at the limit and the rest.
    rows, width = 101, 1_000
    for i in range(rows):
        writer.write(
            {
                "entry": RowMutationEntry(
                    b"w%04d" % i,
                    [SetCell("cf", b"c%04d" % c, b"%d" % c, 1000) for c in range(width)],
                )
            }
        )
    writer.flush()
    stats = factory_of(writer).stats
    writer.close()
    assert proxy.rejected == 0
    assert max(m for _, m in proxy.requests) == 100_000
    assert sum(m for _, m in proxy.requests) == rows * width
    assert stats.requests == 2 and stats.max_request_mutations == 100_000
    got = read_table(instance, "wide")
    assert len(got) == rows
    assert all(len(cells) == width for cells in got.values())


def test_the_proxy_rejects_what_the_service_rejects(instance: str, proxy: BigtableProxy) -> None:
    """Guards the test above: without the split, the request fails like on Bigtable."""
    create_table(instance, "wide", {"cf": 1})
    from google.cloud.bigtable_v2.types import bigtable as bigtable_types

    request = bigtable_types.MutateRowsRequest.pb()(
        table_name=f"projects/{PROJECT}/instances/{instance}/tables/wide"
    )
    for i in range(101):
        entry = request.entries.add(row_key=b"k%d" % i)
        for _ in range(1000):
            entry.mutations.add().set_cell.family_name = "cf"
    call = grpc.insecure_channel(proxy.host).unary_stream("/google.bigtable.v2.Bigtable/MutateRows")
    with pytest.raises(grpc.RpcError) as err:
        list(call(request.SerializeToString()))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_transient_entry_statuses_are_retried(instance: str, proxy: BigtableProxy) -> None:
    create_table(instance, "t", {"cf": 1})
    proxy.entry_fault = lambda key, seen: (
        grpc.StatusCode.UNAVAILABLE if seen <= 2 and key.endswith((b"3", b"7")) else None
    )
    proxy.rpc_faults = [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED]
    sink = builder(instance, "t", batch_max_entries=25).set_endpoint("http://" + proxy.host).build()
    writer = open_writer(sink)
    for i in range(500):
        writer.write({"entry": cell(i)})
    writer.flush()
    stats = factory_of(writer).stats
    writer.close()
    assert set(read_table(instance, "t")) == {b"row-%06d" % i for i in range(500)}
    assert stats.entries_retried >= 2 * 100
    assert stats.entries_rejected == 0


def test_retries_end_at_the_deadline_with_a_write_error(
    instance: str, proxy: BigtableProxy
) -> None:
    create_table(instance, "t", {"cf": 1})
    proxy.always_fail = grpc.StatusCode.UNAVAILABLE
    sink = (
        builder(instance, "t", retry_deadline=timedelta(seconds=1))
        .set_endpoint("http://" + proxy.host)
        .build()
    )
    writer = open_writer(sink)
    writer.write({"entry": cell(1)})
    with pytest.raises(WriteError) as err:
        writer.flush()
    assert (
        "bt-it" in str(err.value)
        and "tables/t" in str(err.value)
        and "UNAVAILABLE" in str(err.value)
    )
    writer.close()


def test_permanent_rpc_errors_fail_at_once(instance: str, proxy: BigtableProxy) -> None:
    create_table(instance, "t", {"cf": 1})
    proxy.rpc_faults = [grpc.StatusCode.PERMISSION_DENIED]
    sink = builder(instance, "t").set_endpoint("http://" + proxy.host).build()
    writer = open_writer(sink)
    writer.write({"entry": cell(1)})
    with pytest.raises(WriteError, match="PERMISSION_DENIED"):
        writer.flush()
    writer.close()


def test_a_table_deleted_while_writing_names_the_table(instance: str) -> None:
    create_table(instance, "t", {"cf": 1})
    writer = open_writer(builder(instance, "t").build())
    writer.write({"entry": cell(1)})
    writer.flush()
    delete_table(instance, "t")
    writer.write({"entry": cell(2)})
    with pytest.raises(DestinationNotFoundError, match=f"instances/{instance}/tables/t"):
        writer.flush()
    writer.close()


def test_idle_batchers_are_evicted_and_rebuilt(instance: str) -> None:
    for table in ("a", "b"):
        create_table(instance, table, {"cf": 1})
    writer = open_writer(builder(instance, idle_timeout=timedelta(seconds=0.2)).build())
    writer.write({"table": "a", "entry": cell(1)})
    writer.flush()
    time.sleep(0.3)
    writer.write({"table": "b", "entry": cell(2)})
    writer.flush()  # "a" has been idle for longer than the timeout: released
    registry = writer.registry
    assert TableDestination.of(PROJECT, instance, "a") not in registry
    assert TableDestination.of(PROJECT, instance, "b") in registry
    writer.write({"table": "a", "entry": cell(3)})
    writer.flush()
    stats = factory_of(writer).stats
    assert stats.batchers_created == 3 and stats.batchers_closed == 1
    writer.close()
    assert set(read_table(instance, "a")) == {b"row-000001", b"row-000003"}
    assert set(read_table(instance, "b")) == {b"row-000002"}


def test_tight_flow_control_still_writes_everything(instance: str) -> None:
    create_table(instance, "t", {"cf": 1})
    sink = builder(
        instance,
        "t",
        batch_max_entries=5,
        max_in_flight_entries=10,
        max_in_flight_bytes=2_000,
        max_in_flight_requests=2,
    ).build()
    writer = open_writer(sink)
    for i in range(1_000):
        writer.write({"entry": cell(i)})
    writer.flush()
    writer.close()
    assert len(read_table(instance, "t")) == 1_000
    assert factory_of(writer).stats.requests == 200


def test_many_tables_flush_together(instance: str) -> None:
    sink = creating(builder(instance, batch_max_entries=50), {"cf": 1}).build()
    writer = open_writer(sink)
    for i in range(2_000):
        writer.write({"table": f"t{i % 20:02d}", "entry": cell(i)})
    writer.flush()
    writer.close()
    for t in range(20):
        assert set(read_table(instance, f"t{t:02d}")) == {
            b"row-%06d" % i for i in range(t, 2_000, 20)
        }


def test_more_tables_than_active_batchers_releases_the_least_recently_used(instance: str) -> None:
    sink = creating(
        builder(instance, batch_max_entries=50, max_active_destinations=3), {"cf": 1}
    ).build()
    writer = open_writer(sink)
    for i in range(1_200):
        writer.write({"table": f"t{(i // 20) % 8}", "entry": cell(i)})
        assert len(writer.registry) <= 3
    writer.flush()
    stats = factory_of(writer).stats
    assert stats.tables_created == 8
    # Runs of 20 records per table over 8 tables: every switch past the third table releases
    # one batcher and builds another.
    assert stats.batchers_created == 60 and stats.batchers_closed == 57
    writer.close()
    for t in range(8):
        assert set(read_table(instance, f"t{t}")) == {
            b"row-%06d" % i for i in range(1_200) if (i // 20) % 8 == t
        }
