"""``WriteMethod.BUFFERED_STREAM`` in real jobs against the emulator: exactly once.

Rows go to BUFFERED streams with offsets and become visible only when the committer flushes
them after their checkpoint completed (the emulator stack's FlushRows follows BigQuery's
inclusive offsets and answers ALREADY_EXISTS for a repeated flush). The tests inject failures
of both kinds into checkpointed jobs writing per-day tables created on demand, and count every
row: 0 lost, 0 twice. One test holds a job between two checkpoints and reads what is visible.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

import pytest
from google.cloud.bigquery import SchemaField
from pyflink.datastream.functions import MapFunction

from pyflink_gcp import FailureHandler, UnroutableRecord
from pyflink_gcp.bigquery import (
    BigQuerySerializer,
    BigQuerySink,
    BigQueryWriterOptions,
    CreateDisposition,
    TableSchema,
    WriteMethod,
)
from tests.integration.bigquery.support import DailyTables, ids_by_table, make_dataset
from tests.support.jobs import FailAt, make_env, record_stream
from tests.support.restore import Failover
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e

DAYS = 7
EVENTS = TableSchema.of([SchemaField("id", "INT64", mode="REQUIRED"), SchemaField("day", "STRING")])


def event(i: int) -> dict[str, Any]:
    return {"id": i, "day": f"2024030{1 + i % DAYS}"}


def sink(
    project: str,
    dataset: str,
    method: WriteMethod = WriteMethod.BUFFERED_STREAM,
    fused: bool = True,
) -> Any:
    return (
        BigQuerySink.builder()
        .set_sink_name("events-buffered")
        .set_chain_with_upstream(fused)
        .set_destination_resolver(DailyTables(project, dataset))
        .set_serializer(BigQuerySerializer.of(lambda r, c: r, schema=EVENTS))
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_write_method(method)
        .set_writer_options(BigQueryWriterOptions.builder().max_buffered_records(200).build())
        .build()
    )


@pytest.mark.parametrize("hard", [False, True], ids=["task exceptions", "killed workers"])
def test_daily_tables_hold_exactly_their_input_through_failovers(
    project: str, tmp_path: Any, hard: bool
) -> None:
    count = 4_000
    failures = (700, 1_500, 2_300, 3_100)
    dataset = make_dataset(project, "buffered")
    failover = Failover(tmp_path / "failover")
    env = make_env(
        parallelism=2,
        checkpoint_ms=300,
        process_workers=hard,
        restarts=20,
        extra=failover.conf(),
    )
    fail = FailAt(str(tmp_path), failures, hard, after_checkpoint=failover.checkpoints)
    record_stream(env, count, event).map(fail).sink_to(sink(project, dataset))
    env.execute("buffered streams through failovers")
    assert len([n for n in os.listdir(tmp_path) if n.startswith("failed-")]) == len(failures)
    failover.assert_restored()

    tables = ids_by_table(project, dataset)
    assert sorted(tables) == [f"events_2024030{d}" for d in range(1, DAYS + 1)]
    for table, ids in tables.items():
        day = table.removeprefix("events_")
        expected = {i for i in range(count) if event(i)["day"] == day}
        assert set(ids) == expected, (table, sorted(expected - set(ids))[:10])
        assert max(ids.values()) == 1, (table, [i for i, n in ids.items() if n > 1][:10])
    print(
        f"buffered streams: {count} rows in {len(tables)} tables after {len(failures)} "
        f"{'worker kills' if hard else 'task exceptions'}: 0 lost, 0 duplicates"
    )


class Gate(MapFunction):
    """Hold the stream at record ``at`` until the file ``gate`` exists; create the file
    ``reached`` when the record got there."""

    def __init__(self, at: int, gate: str, reached: str) -> None:
        self._at = at
        self._gate = gate
        self._reached = reached

    def map(self, value: Any) -> Any:
        if value["id"] == self._at:
            open(self._reached, "a").close()
            while not os.path.exists(self._gate):
                time.sleep(0.05)
        return value


def visible(project: str, dataset: str) -> int:
    return sum(sum(ids.values()) for ids in ids_by_table(project, dataset).values())


#: How long the held job runs on before the buffered streams are read: several ends of the
#: writer's Python bundles (a second apart at most), each of which appends what it holds.
APPENDED_S = 4.0


@pytest.mark.parametrize(
    "method", [WriteMethod.BUFFERED_STREAM, WriteMethod.STORAGE_API_AT_LEAST_ONCE]
)
def test_rows_are_visible_only_after_their_checkpoint_completed(
    project: str, tmp_path: Any, method: WriteMethod
) -> None:
    """The records before the gate reach the writer and are appended at its bundle ends, but no
    checkpoint can complete while the gate holds the stream (the barrier waits behind it). On
    the default stream they are visible; on BUFFERED streams only what an earlier checkpoint
    committed is."""
    count, at = 1_000, 400
    gate, reached = str(tmp_path / "open"), tmp_path / "reached"
    dataset = make_dataset(project, "visible")
    # The gate's own Python bundles of 10: the records it passed before the gate leave it.
    env = make_env(
        parallelism=1, checkpoint_ms=1_000, extra={"python.fn-execution.bundle.size": "10"}
    )
    record_stream(env, count, event, parallelism=1).map(
        Gate(at, gate, str(reached))
    ).set_parallelism(1).sink_to(
        # The gate must hold the stream before the writer, not the writer itself: fused, the
        # gate would run in the writer's operator and its bundles could not end while it waits.
        sink(project, dataset, method, fused=False)
    )
    client = env.execute_async("visible after the checkpoint")
    try:
        wait_for(reached.exists, "the stream reached the gate")
        if method is WriteMethod.BUFFERED_STREAM:
            time.sleep(APPENDED_S)  # the records before the gate were appended
        else:
            # Appended rows of the default stream are visible: they show when it happened.
            wait_for(lambda: visible(project, dataset) >= at - 10, "rows before the gate visible")
        held = visible(project, dataset)
    finally:
        open(gate, "w").close()
    client.get_job_execution_result().result()
    # The default stream shows what the writer appended (all before the gate, but the gate's
    # bundle); BUFFERED streams only what a checkpoint before the gate committed.
    if method is WriteMethod.BUFFERED_STREAM:
        assert held < at - 10, held
    else:
        assert at - 10 <= held <= at, held
    assert visible(project, dataset) == count


AMOUNTS = TableSchema.of(
    [SchemaField("id", "INT64", mode="REQUIRED"), SchemaField("amount", "NUMERIC")]
)
BAD = 777  # its amount overflows NUMERIC: the service rejects the row


def amount_row(record: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"id": record["id"], "amount": "1" + "0" * 40 if record["id"] == BAD else "1.5"}


class DailyOrUnroutable(DailyTables):
    def __call__(self, record: dict[str, Any], ctx: Any) -> Any:
        if record["id"] % 97 == 5:
            return UnroutableRecord.of(str(record["id"]).encode(), "no day")
        return super().__call__(record, ctx)


def test_rejected_rows_and_unroutable_records_reach_the_handler_and_idle_streams_rotate(
    project: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """The default stream's contract on BUFFERED streams: a row the service rejects is isolated
    and handed to the failure handler while the rest of its request lands, an unroutable
    record creates nothing, and with ``idle_timeout(0)`` every table writer is closed at each
    flush (its stream finalized after its commit) and a new stream is created for the next rows:
    each table still holds exactly its input."""
    count = 1_500
    dataset = make_dataset(project, "rotate")
    options = (
        BigQueryWriterOptions.builder().max_buffered_records(200).idle_timeout(timedelta(0)).build()
    )
    built = (
        BigQuerySink.builder()
        .set_sink_name("rotating-buffered")
        .set_destination_resolver(DailyOrUnroutable(project, dataset))
        .set_serializer(BigQuerySerializer.of(amount_row, schema=AMOUNTS))
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_write_method(WriteMethod.BUFFERED_STREAM)
        .set_failure_handler(FailureHandler.log_and_drop())
        .set_writer_options(options)
        .build()
    )
    env = make_env(parallelism=2, checkpoint_ms=300)
    record_stream(env, count, event).map(FailAt("/nonexistent", (), False)).sink_to(built)
    env.execute("rotating buffered streams")

    tables = ids_by_table(project, dataset)
    assert len(tables) == DAYS
    for table, ids in tables.items():
        day = table.removeprefix("events_")
        expected = {i for i in range(count) if event(i)["day"] == day and i % 97 != 5 and i != BAD}
        assert set(ids) == expected, (table, sorted(expected ^ set(ids))[:10])
        assert max(ids.values()) == 1
    # The handler logged them: the first ten of a flush one by one, the rest summed up by
    # destination, so the rejected row's table is named either way.
    err = capfd.readouterr().err
    assert "dropped: sink 'rotating-buffered': destination 'unresolved'" in err
    assert f"projects/{project}/datasets/{dataset}/tables/events_" in err
