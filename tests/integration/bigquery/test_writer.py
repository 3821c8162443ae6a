"""The BigQuery writer against the emulator, driven in this process (no Flink)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from google.cloud.bigquery import SchemaField

from pyflink_gcp import FailureHandler, UnroutableRecord
from pyflink_gcp.bigquery import (
    BigQuerySerializer,
    BigQuerySink,
    BigQueryWriterOptions,
    CreateDisposition,
    OrderingMode,
    RowFormat,
    TableDestination,
    TableSchema,
    UnknownFields,
)
from pyflink_gcp.core import (
    CreationLimitExceededError,
    DestinationNotFoundError,
    RecordRejectedError,
)
from tests.integration.bigquery.support import (
    AppendRecorder,
    make_dataset,
    make_table,
    query,
    table_names,
)
from tests.support.dead_letters import MemoryDeadLetterQueue
from tests.support.writers import open_writer

pytestmark = pytest.mark.integration

# RECORD columns are left out: the emulator's Storage Write API drops their sub-fields (the
# encoding of RECORD columns is covered by the unit tests).
EVENTS = TableSchema.of(
    [
        SchemaField("id", "INT64", mode="REQUIRED"),
        SchemaField("name", "STRING"),
        SchemaField("ts", "TIMESTAMP"),
        SchemaField("amount", "NUMERIC"),
        SchemaField("day", "DATE"),
        SchemaField("tags", "STRING", mode="REPEATED"),
        SchemaField("payload", "JSON"),
    ]
)


class ByTable:
    """Routes ``record["table"]`` in one dataset (picklable, like every resolver)."""

    def __init__(self, project: str, dataset: str) -> None:
        self.project = project
        self.dataset = dataset

    def resolve(self, record: dict[str, Any], context: Any) -> Any:
        table = record.get("table")
        if table is None:
            return UnroutableRecord.of(repr(record).encode(), "no table")
        return TableDestination.of(self.project, self.dataset, table)


def _row(record: dict[str, Any], context: Any) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != "table"}


def _sink(project: str, dataset: str, **settings: Any) -> BigQuerySink:
    builder = (
        BigQuerySink.builder()
        .set_destination_resolver(ByTable(project, dataset))
        .set_serializer(BigQuerySerializer.of(_row, schema=settings.pop("schema", EVENTS)))
        .set_create_disposition(settings.pop("disposition", CreateDisposition.CREATE_IF_NEEDED))
        .set_failure_handler(settings.pop("handler", FailureHandler.fail_job()))
        .set_ordering_mode(settings.pop("ordering", OrderingMode.NONE))
        .set_writer_options(settings.pop("options", BigQueryWriterOptions()))
    )
    assert not settings, settings
    return builder.build()


def test_rows_land_in_their_tables_with_natural_python_values(project: str) -> None:
    dataset = make_dataset(project)
    writer = open_writer(_sink(project, dataset))
    ts = datetime(2024, 1, 1, 12, 30, tzinfo=UTC)
    for i in range(300):
        writer.write(
            {
                "table": f"events_{i % 7}",
                "id": i,
                "name": f"name-{i}",
                # The same instant spelled three ways.
                "ts": [ts, ts.isoformat(), int(ts.timestamp() * 1_000_000)][i % 3],
                "amount": [Decimal("1.50"), "2.25", 3][i % 3],
                "day": "2024-01-0" + str(1 + i % 9),
                "tags": ["a", "b"] if i % 2 else [],
                "payload": {"n": i},
            }
        )
    writer.flush()
    writer.close()

    assert table_names(project, dataset) == [f"events_{i}" for i in range(7)]
    rows = query(
        project,
        " UNION ALL ".join(
            f"SELECT '{t}' AS t, id, name, ts, amount, day, tags, payload "
            f"FROM `{project}.{dataset}.{t}`"
            for t in (f"events_{i}" for i in range(7))
        ),
    )
    assert len(rows) == 300
    by_id = {r["id"]: r for r in rows}
    assert sorted(by_id) == list(range(300))
    for i, r in by_id.items():
        assert r["t"] == f"events_{i % 7}"
        assert r["name"] == f"name-{i}"
        assert r["ts"] == ts
        assert r["amount"] == [Decimal("1.5"), Decimal("2.25"), Decimal(3)][i % 3]
        assert str(r["day"]) == "2024-01-0" + str(1 + i % 9)
        assert list(r["tags"] or []) == (["a", "b"] if i % 2 else [])
    assert by_id[1]["payload"] in ({"n": 1}, '{"n":1}')


def test_a_bad_value_is_isolated_and_good_rows_land(project: str) -> None:
    dataset = make_dataset(project)
    dlq = MemoryDeadLetterQueue()
    sink = _sink(
        project,
        dataset,
        handler=FailureHandler.send_to_dead_letter_queue(dlq),
        # An unknown key is a failed record, not the end of the job (the default).
        options=BigQueryWriterOptions(unknown_fields=UnknownFields.FAILURE_HANDLER),
    )
    writer = open_writer(sink)
    for i in range(64):
        # NUMERIC holds 29 integer digits: the service rejects the request holding row 37.
        amount = "1" + "0" * 40 if i == 37 else str(i)
        writer.write({"table": "t", "id": i, "amount": amount})
    # Rows the writer can tell are bad without asking the service.
    writer.write({"table": "t", "id": "not a number"})
    writer.write({"table": "t", "id": 1000, "no_such_column": 1})
    writer.flush()

    table_writer = next(iter(writer.registry))
    ids = [r["id"] for r in query(project, f"SELECT id FROM `{project}.{dataset}.t`")]
    assert sorted(ids) == [i for i in range(64) if i != 37]
    reasons = sorted(f.reason for f in dlq.sent)
    assert len(dlq.sent) == 3, reasons
    assert {f.destination for f in dlq.sent} == {f"projects/{project}/datasets/{dataset}/tables/t"}
    assert any("data loss" in r or "Rescaling" in r for r in reasons), reasons
    assert any("INT64" in r for r in reasons), reasons
    assert any("no_such_column" in r for r in reasons), reasons
    assert b'"id": 37' in next(f.payload for f in dlq.sent if b'"id": 37' in f.payload)
    # Isolated by halving: a handful of requests, not one per row.
    assert table_writer.requests_sent <= 1 + 2 * 7
    writer.close()


def test_an_existing_table_is_looked_up_on_its_stream_a_missing_one_created_over_rest(
    project: str,
) -> None:
    dataset = make_dataset(project)
    # Another column order and a REPEATED column: the layout must be the table's, not EVENTS.
    make_table(
        project,
        dataset,
        "known",
        [
            SchemaField("tags", "STRING", mode="REPEATED"),
            SchemaField("name", "STRING"),
            SchemaField("id", "INT64", mode="REQUIRED"),
        ],
    )
    writer = open_writer(_sink(project, dataset))
    for i in range(10):
        table = "known" if i % 2 else "missing"
        writer.write({"table": table, "id": i, "name": f"n{i}", "tags": ["a", str(i)]})
    writer.flush()
    lookups = writer._factory.stream_lookups  # type: ignore[attr-defined]
    answered, handed_over = lookups.answered, lookups.handed_over
    writer.close()

    assert (answered, handed_over) == (1, 1)  # known: GetWriteStream; missing: created
    assert table_names(project, dataset) == ["known", "missing"]
    for table, ids in (("known", [1, 3, 5, 7, 9]), ("missing", [0, 2, 4, 6, 8])):
        rows = query(project, f"SELECT id, name, tags FROM `{project}.{dataset}.{table}`")
        assert sorted(r["id"] for r in rows) == ids
        assert all(list(r["tags"]) == ["a", str(r["id"])] for r in rows)


def test_rejected_rows_fail_the_job_by_default(project: str) -> None:
    dataset = make_dataset(project)
    writer = open_writer(_sink(project, dataset))
    writer.write({"table": "t", "id": 1, "amount": "1" + "0" * 40})
    with pytest.raises(RecordRejectedError, match=r"tables/t.*Rescaling|tables/t.*data loss"):
        writer.flush()
    writer.close()


def test_unroutable_records_reach_the_failure_handler_without_table_state(project: str) -> None:
    dataset = make_dataset(project)
    dlq = MemoryDeadLetterQueue()
    writer = open_writer(
        _sink(project, dataset, handler=FailureHandler.send_to_dead_letter_queue(dlq))
    )
    writer.write({"id": 1})
    writer.flush()
    assert len(writer.registry) == 0
    assert [(f.destination, f.reason) for f in dlq.sent] == [("unresolved", "no table")]
    writer.close()


def test_create_never_on_a_missing_table_names_the_table(project: str) -> None:
    dataset = make_dataset(project)
    writer = open_writer(_sink(project, dataset, disposition=CreateDisposition.CREATE_NEVER))
    # The table is looked up in the background; its error fails the flush (the bundle end).
    writer.write({"table": "missing", "id": 1})
    with pytest.raises(
        DestinationNotFoundError, match=rf"{project}\.{dataset}\.missing .*CREATE_NEVER"
    ):
        writer.flush()
    writer.close()


def test_create_never_writes_existing_tables(project: str) -> None:
    dataset = make_dataset(project)
    make_table(project, dataset, "existing", [("id", "INT64"), ("name", "STRING")])
    sink = (
        BigQuerySink.builder()
        .set_destination_resolver(ByTable(project, dataset))
        .set_serializer(_row)
        .build()
    )
    writer = open_writer(sink)
    writer.write({"table": "existing", "id": 1, "name": "x"})
    writer.flush()
    assert query(project, f"SELECT id, name FROM `{project}.{dataset}.existing`") == [
        {"id": 1, "name": "x"}
    ]
    writer.close()


def test_created_tables_are_bounded(project: str) -> None:
    dataset = make_dataset(project)
    options = BigQueryWriterOptions.builder().max_created_destinations(3).build()
    writer = open_writer(_sink(project, dataset, options=options))
    for i in range(3):
        writer.write({"table": f"t{i}", "id": i})
    writer.flush()
    writer.write({"table": "t3", "id": 3})
    with pytest.raises(
        CreationLimitExceededError,
        match=r"t3 would exceed max_created_destinations=3.*3 tables.*ByTable",
    ):
        writer.flush()
    writer.close()


def test_missing_dataset_is_a_clear_error(project: str) -> None:
    writer = open_writer(_sink(project, "no_such_dataset_here"))
    writer.write({"table": "t", "id": 1})
    with pytest.raises(
        DestinationNotFoundError, match="dataset .*no_such_dataset_here does not exist"
    ):
        writer.flush()
    writer.close()


def test_idle_writers_are_evicted_and_recreated_with_a_fresh_schema(project: str) -> None:
    from tests.integration.bigquery.support import bq_client

    dataset = make_dataset(project)
    options = BigQueryWriterOptions.builder().idle_timeout(timedelta(milliseconds=1)).build()
    writer = open_writer(_sink(project, dataset, options=options))
    writer.write({"table": "t", "id": 1})
    writer.flush()  # written, then evicted at the end of the flush (idle for more than 1 ms)
    assert len(writer.registry) == 0 or writer.flush() is None
    assert len(writer.registry) == 0
    # Replace the table with one of another schema: the re-created writer must see it.
    client = bq_client(project)
    client.delete_table(f"{project}.{dataset}.t")
    client.close()
    make_table(project, dataset, "t", [("id", "INT64"), ("added", "STRING")])
    writer.write({"table": "t", "id": 2, "added": "new column"})
    writer.flush()
    assert writer.registry.created == 2
    rows = query(project, f"SELECT id, added FROM `{project}.{dataset}.t` ORDER BY id")
    assert rows == [{"id": 2, "added": "new column"}]
    writer.close()


def test_more_tables_than_active_writers_lose_nothing(project: str) -> None:
    """At the ``max_active_destinations`` cap the registry flushes the least recently used
    writer (it still holds rows) and closes it; a table used again gets a new writer."""
    dataset = make_dataset(project)
    options = BigQueryWriterOptions.builder().max_active_destinations(3).build()
    writer = open_writer(_sink(project, dataset, options=options))
    tables = [f"t{i}" for i in range(8)]
    for i in range(400):
        # Runs of 20 rows per table, cycling through the tables twice.
        writer.write({"table": tables[(i // 20) % len(tables)], "id": i})
        assert len(writer.registry) <= 3
    writer.flush()
    assert writer.registry.created == 20  # every run of rows re-opened its table's writer
    assert writer.registry.evicted == 17
    writer.close()
    assert table_names(project, dataset) == tables
    for n, table in enumerate(tables):
        ids = sorted(
            r["id"] for r in query(project, f"SELECT id FROM `{project}.{dataset}.{table}`")
        )
        assert ids == [i for i in range(400) if (i // 20) % len(tables) == n], table


NESTED = [
    SchemaField("id", "INT64", mode="REQUIRED"),
    SchemaField(
        "customer",
        "RECORD",
        mode="NULLABLE",
        fields=[
            SchemaField("name", "STRING", mode="REQUIRED"),
            SchemaField("emails", "STRING", mode="REPEATED"),
            SchemaField("address", "RECORD", fields=[SchemaField("city", "STRING")]),
        ],
    ),
    SchemaField("lines", "RECORD", mode="REPEATED", fields=[SchemaField("sku", "STRING")]),
    SchemaField("note", "STRING"),
]


def _shape(fields: Any) -> list[Any]:
    return [(f.name, f.field_type, f.mode or "NULLABLE", _shape(f.fields)) for f in fields]


@pytest.mark.parametrize(
    "schema",
    [TableSchema.of(NESTED), NESTED, lambda destination: NESTED],
    ids=["TableSchema", "SchemaField list", "function returning a SchemaField list"],
)
def test_tables_are_created_from_either_schema_form_with_nested_fields_and_modes(
    project: str, schema: Any
) -> None:
    from tests.integration.bigquery.support import bq_client

    dataset = make_dataset(project)
    writer = open_writer(_sink(project, dataset, schema=schema))
    writer.write({"table": "nested", "id": 1, "note": "first"})
    # The emulator's Storage Write API cannot append to a table with RECORD columns, so the
    # test waits for the table's lookup (which created it) instead of flushing the row.
    layout = next(iter(writer.registry)).sender.layout()
    assert layout.arrow is None and layout.encoder is not None
    writer.close()
    client = bq_client(project)
    try:
        table = client.get_table(f"{project}.{dataset}.nested")
    finally:
        client.close()
    assert _shape(table.schema) == _shape(NESTED)


def _recorded_sink(project: str, dataset: str, recorder: AppendRecorder, **settings: Any) -> Any:
    sink = _sink(project, dataset, **settings)
    sink._sink_config().factory.interceptors = recorder.interceptors()
    return sink


def _per_table(events: list[Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for e in events:
        out.setdefault(e.table, []).append(e)
    return out


def test_per_table_ordering_one_request_in_flight_and_order_kept(project: str) -> None:
    dataset = make_dataset(project)
    recorder = AppendRecorder(first_response_delay_s=0.05)
    small = BigQueryWriterOptions.builder().max_request_bytes(2_000).build()
    dlq = MemoryDeadLetterQueue()
    writer = open_writer(
        _recorded_sink(
            project,
            dataset,
            recorder,
            ordering=OrderingMode.PER_TABLE,
            options=small,
            handler=FailureHandler.send_to_dead_letter_queue(dlq),
        )
    )
    for i in range(600):
        bad = i == 250
        writer.write({"table": f"t{i % 3}", "id": i, "amount": "1" + "0" * 40 if bad else str(i)})
    writer.flush()
    writer.close()

    assert [f.payload.count(b'"id": 250') for f in dlq.sent] == [1]
    for table, events in _per_table(recorder.events).items():
        # Strictly send, answer, send, answer...: never two requests of a table in flight.
        assert [e.kind for e in events] == ["send", "recv"] * (len(events) // 2), table
        committed = [
            row["id"]
            for sent, answer in zip(events[::2], events[1::2], strict=True)
            if answer.error == 0
            for row in sent.rows
        ]
        expected = [i for i in range(600) if i % 3 == int(table[1:]) and i != 250]
        assert committed == expected, table  # commit order is send order, bad row isolated
    # Other tables were not held up: at some moment requests of different tables were in
    # flight together. (Not "all three interleave before one finishes": on a busy machine the
    # sender threads can be scheduled one after another, and one table may finish first.)
    in_flight: set[str] = set()
    most = 0
    for e in recorder.events:
        if e.kind == "send":
            in_flight.add(e.table)
        else:
            in_flight.discard(e.table)
        most = max(most, len(in_flight))
    assert most >= 2, "no two tables ever had a request in flight together"


def test_tables_share_a_bounded_pool_of_connections_and_every_row_lands(project: str) -> None:
    # Twelve tables, a pool of two connections: requests of several tables travel on one
    # AppendRows connection (each naming its table, the writer schema only when the table
    # changes), the emulator files each row in its own table, and both row formats decode.
    dataset = make_dataset(project)
    recorder = AppendRecorder()
    options = BigQueryWriterOptions.builder().channel_count(2).max_request_rows(20).build()
    ids_only = TableSchema.of([SchemaField("id", "INT64")])  # every column has an Arrow form
    writer = open_writer(
        _recorded_sink(project, dataset, recorder, options=options, schema=ids_only)
    )
    for i in range(1200):
        # Odd tables get a value the Arrow encoder does not take as given: protobuf rows.
        writer.write({"table": f"t{i % 12}", "id": i if i % 2 == 0 else str(i)})
    writer.flush()
    factory = writer._factory
    assert factory.pool is not None
    opened, channels = factory.pool.connections_opened, factory.pool.channels
    writer.close()

    for t in range(12):
        ids = [r["id"] for r in query(project, f"SELECT id FROM `{project}.{dataset}.t{t}`")]
        assert sorted(ids) == list(range(t, 1200, 12)), t
    sends = [e for e in recorder.events if e.kind == "send"]
    assert {e.format for e in sends} == {"arrow", "proto"}
    assert sorted({r["id"] for e in sends for r in e.rows}) == list(range(1200))
    connections = {e.connection for e in recorder.events}
    assert len(connections) == opened <= 2 and channels <= 2
    tables_per_connection = [
        len({e.table for e in sends if e.connection == c}) for c in connections
    ]
    assert max(tables_per_connection) > 1, tables_per_connection


def test_unordered_mode_pipelines_requests(project: str) -> None:
    dataset = make_dataset(project)
    recorder = AppendRecorder(first_response_delay_s=0.2)
    small = (
        BigQueryWriterOptions.builder().max_request_bytes(2_000).max_in_flight_requests(3).build()
    )
    writer = open_writer(_recorded_sink(project, dataset, recorder, options=small))
    for i in range(3000):
        writer.write({"table": "t", "id": i})
    writer.flush()
    writer.close()
    assert len([e for e in recorder.events if e.kind == "send"]) >= 10
    outstanding = peak = 0
    for e in recorder.events:
        outstanding += 1 if e.kind == "send" else -1
        peak = max(peak, outstanding)
    assert peak == 3
    assert len(query(project, f"SELECT id FROM `{project}.{dataset}.t`")) == 3000


CDC = TableSchema.of(
    [
        SchemaField("id", "INT64"),
        SchemaField("ts", "TIMESTAMP"),
        SchemaField("price", "NUMERIC"),
        SchemaField("note", "STRING"),
    ],
    primary_key=["id", "ts", "price"],
)


def test_cdc_requests_never_hold_one_key_twice_whatever_its_spelling(project: str) -> None:
    dataset = make_dataset(project)
    recorder = AppendRecorder()
    writer = open_writer(
        _recorded_sink(project, dataset, recorder, schema=CDC, ordering=OrderingMode.PER_TABLE)
    )
    changes = [
        {"id": 1, "ts": "2024-01-01T00:00:00Z", "price": "1.50", "_CHANGE_TYPE": "UPSERT"},
        {"id": 2, "ts": "2024-01-01T00:00:00Z", "price": "1.50", "_CHANGE_TYPE": "UPSERT"},
        # Key 1 again, spelled as epoch micros and a float: the request must end before it.
        {"id": 1, "ts": 1704067200000000, "price": 1.5, "_CHANGE_TYPE": "DELETE"},
        {
            "id": 3,
            "ts": datetime(2024, 1, 1, tzinfo=UTC),
            "price": Decimal("1.5"),
            "_CHANGE_TYPE": "UPSERT",
        },
        {
            "id": 1,
            "ts": "2024-01-01 00:00:00 UTC",
            "price": "1.500",
            "_CHANGE_TYPE": "UPSERT",
            "_CHANGE_SEQUENCE_NUMBER": 7,
        },
        {"id": 1, "ts": "2024-01-01T00:00:00.000001Z", "price": "1.5", "_CHANGE_TYPE": "UPSERT"},
    ]
    for i, change in enumerate(changes):
        writer.write({"table": "cdc", "note": f"change-{i}", **change})
    writer.flush()
    writer.close()

    sends = [e for e in recorder.events if e.kind == "send"]
    notes = [[r["note"] for r in e.rows] for e in sends]
    assert notes == [
        ["change-0", "change-1"],
        ["change-2", "change-3"],
        ["change-4", "change-5"],
    ]
    for e in sends:
        keys = [(r["id"], r["ts"], r["price"]) for r in e.rows]
        assert len(keys) == len(set(keys))
        assert all(r["_CHANGE_TYPE"] in ("UPSERT", "DELETE") for r in e.rows)
    assert sends[2].rows[0]["_CHANGE_SEQUENCE_NUMBER"] == "7"
    assert sends[1].rows[0]["price"] == "1.5" and sends[1].rows[0]["ts"] == 1704067200000000


def test_log_and_drop_drops_and_counts(project: str) -> None:
    dataset = make_dataset(project)
    writer = open_writer(_sink(project, dataset, handler=FailureHandler.log_and_drop()))
    writer.write({"id": 1})  # unroutable
    writer.write({"table": "t", "id": 2, "amount": "1" + "0" * 40})  # rejected by the service
    writer.write({"table": "t", "id": 3})
    writer.flush()
    assert writer.router.dropped == 2
    assert query(project, f"SELECT id FROM `{project}.{dataset}.t`") == [{"id": 3}]
    writer.close()


def test_arrow_and_protobuf_rows_land_as_the_same_values(project: str) -> None:
    from datetime import date

    from tests.unit.bigquery.test_arrow_rows import SCALARS

    dataset = make_dataset(project)
    base = datetime(2024, 3, 1, 8, tzinfo=UTC)
    rows = [
        {
            "id": i,
            "name": None if i % 5 == 0 else f"n{i}",
            "score": i / 4,
            "ok": i % 2 == 0,
            "raw": bytes([i % 256, 1]),
            "ts": [base + timedelta(seconds=i), 1_709_280_000_000_000 + i][i % 2],
            "day": date(2024, 3, 1 + i % 28),
            "amount": [Decimal(i) / 8, i][i % 2],
        }
        for i in range(200)
    ]
    writers = {}
    for row_format in RowFormat:
        writer = open_writer(
            _sink(
                project,
                dataset,
                schema=TableSchema.of(SCALARS),
                options=BigQueryWriterOptions.builder().row_format(row_format).build(),
            )
        )
        for row in rows:
            writer.write({"table": row_format.value.lower(), **row})
        writer.flush()
        writers[row_format] = next(iter(writer.registry))
        writer.close()

    assert writers[RowFormat.ARROW].arrow_requests_sent >= 1
    assert writers[RowFormat.PROTO].arrow_requests_sent == 0
    tables = {
        t: query(project, f"SELECT * FROM `{project}.{dataset}.{t}` ORDER BY id")
        for t in ("arrow", "proto")
    }
    assert len(tables["arrow"]) == 200
    assert tables["arrow"] == tables["proto"]
    assert tables["arrow"][2]["amount"] == Decimal("0.25")
