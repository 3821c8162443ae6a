"""The sink metrics of Bigtable, Spanner and Cloud Tasks read back through Flink's REST API.

Each job writes ``WRITTEN`` records to two destinations (Spanner: one database, its only kind of
destination), with ``per_destination_metrics`` on and ``log_and_drop``, a few of them records
the service rejects (an unknown column family, a value of the wrong type, a body over Cloud
Tasks' 100 KB), then keeps running on records its serializer skips, so the metrics are read from
a live job. The names asserted are the ones ``docs/metrics.md`` documents; Pub/Sub and BigQuery
have their own tests next to this one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from pyflink_gcp.bigtable import (
    BigtableSink,
    BigtableWriterOptions,
    RowMutationEntry,
    SetCell,
)
from pyflink_gcp.bigtable import TableDestination as BigtableTable
from pyflink_gcp.cloudtasks import (
    CloudTasksSerializationSchema,
    CloudTasksSink,
    CloudTasksWriterOptions,
    QueueDestination,
)
from pyflink_gcp.core import FailureHandler
from pyflink_gcp.core.metrics import metric_identifier
from pyflink_gcp.spanner import Mutation, SpannerSink, SpannerWriterOptions
from pyflink_gcp.tools.emulators import EmulatorStack
from tests.e2e.metrics.test_rest_metrics import (
    SlowAfter,
    free_port,
    per_destination,
    poll_writer_metrics,
    rest_conf,
)
from tests.integration.bigtable.support import PROJECT as BIGTABLE_PROJECT
from tests.integration.bigtable.support import create_table, read_table
from tests.integration.bigtable.support import unique as bigtable_unique
from tests.integration.cloudtasks.support import LOCATION, create_queues, suffix
from tests.integration.spanner.support import create_tables, destination, query
from tests.integration.spanner.support import unique as spanner_unique
from tests.support.jobs import make_env, record_stream

pytestmark = pytest.mark.e2e

WRITTEN = 200
REJECTED = {7, 57, 107, 157}  # odd: all go to destination "b"
#: Records of one writer bundle; see test_rest_metrics.BUNDLE.
BUNDLE = 50


def keep_alive(i: int) -> bool:
    """Past the counted records, the job lives on records the serializer skips (paced by
    :class:`~tests.e2e.metrics.test_rest_metrics.SlowAfter`)."""
    return i >= WRITTEN


class Halves:
    """Even records to destination ``a``, odd ones to ``b``."""

    def __init__(self, make: Callable[[str], Any]) -> None:
        self.make = make

    def __call__(self, i: int, ctx: Any) -> Any:
        return self.make("ab"[i % 2])


class BigtableTableOf:
    def __init__(self, instance: str) -> None:
        self.instance = instance

    def __call__(self, name: str) -> BigtableTable:
        return BigtableTable.of(BIGTABLE_PROJECT, self.instance, name)


class QueueOf:
    def __init__(self, project: str, run: str) -> None:
        self.project = project
        self.run = run

    def __call__(self, name: str) -> QueueDestination:
        return QueueDestination.of(self.project, LOCATION, f"metrics-{self.run}-{name}")


def bigtable_entry(i: int, ctx: Any) -> RowMutationEntry | None:
    if keep_alive(i):
        return None
    family = "nope" if i in REJECTED else "cf"
    return RowMutationEntry(b"r%04d" % i, [SetCell(family, b"v", b"%d" % i, 1_000)])


class SpannerRow:
    def __init__(self, table: str) -> None:
        self.table = table

    def __call__(self, i: int, ctx: Any) -> Mutation | None:
        if keep_alive(i):
            return None
        n: Any = i + 0.5 if i in REJECTED else i  # a FLOAT64 for an INT64 column
        return Mutation.insert_or_update(self.table, {"id": i, "n": n})


class Task:
    def __init__(self, base: str) -> None:
        self.schema = CloudTasksSerializationSchema.http_target(lambda i: f"{base}/{i}").with_body(
            lambda i: b"x" * 150_000 if i in REJECTED else str(i)
        )

    def __call__(self, i: int, ctx: Any) -> Any:
        return None if keep_alive(i) else self.schema.serialize(i, ctx)


@dataclass
class Job:
    """What a service's job wrote, for the assertions every service shares."""

    got: dict[str, float]
    destinations: set[str]  # resource names the records were routed to


def run_job(sink: Any, name: str) -> dict[str, float]:
    port = free_port()
    env = make_env(parallelism=1, checkpoint_ms=500, extra=rest_conf(port))
    record_stream(env, 1_000_000, SlowAfter(WRITTEN)).sink_to(sink)
    client = env.execute_async(name)
    try:
        _, got = poll_writer_metrics(
            port,
            str(client.get_job_id()),
            lambda got: (
                got.get("pyflink_gcp.recordsWritten", 0) >= WRITTEN
                and got.get("pyflink_gcp.recordsDropped", 0) >= len(REJECTED)
                and got.get("pyflink_gcp.recordsSkipped", 0) > 0
                and sum(per_destination(got, "errors").values()) >= len(REJECTED)
                and len(per_destination(got, "bytes")) > 0
                and all(v > 0 for v in per_destination(got, "bytes").values())
            ),
        )
    finally:
        client.cancel().result()
    return got


def check(job: Job, per_destination_records: list[float]) -> None:
    got = job.got
    assert got["pyflink_gcp.recordsWritten"] == WRITTEN, got
    assert got["pyflink_gcp.recordsDropped"] == len(REJECTED), got
    assert got["pyflink_gcp.recordsDeadLettered"] == 0, got
    assert got["pyflink_gcp.recordsSkipped"] > 0, got
    assert got["pyflink_gcp.activeWriters"] == len(job.destinations), got
    assert {
        "pyflink_gcp.writersReleased",
        "pyflink_gcp.lastFlushMillis",
        "pyflink_gcp.maxFlushMillis",
        "pyflink_gcp.checkpointMarkers",
    } <= set(got), got
    assert got["pyflink_gcp.checkpointMarkers"] > 0, got
    assert got["pyflink_gcp.maxFlushMillis"] >= got["pyflink_gcp.lastFlushMillis"], got
    ids = {metric_identifier(d) for d in job.destinations}
    records = per_destination(got, "records")
    assert set(records) == ids, got
    assert sorted(records.values()) == per_destination_records, got
    assert set(per_destination(got, "bytes")) == ids, got
    assert all(v > 0 for v in per_destination(got, "bytes").values()), got
    errors = per_destination(got, "errors")
    assert sum(errors.values()) == len(REJECTED), got


def test_bigtable_sink_metrics(stack: EmulatorStack) -> None:
    instance = bigtable_unique("metrics-")
    for table in "ab":
        create_table(instance, table, {"cf": 1})
    sink = (
        BigtableSink.builder()
        .set_destination_resolver(Halves(BigtableTableOf(instance)))
        .set_serializer(bigtable_entry)
        .set_failure_handler(FailureHandler.log_and_drop())
        .set_writer_options(
            BigtableWriterOptions.builder()
            .per_destination_metrics(True)
            .max_buffered_records(BUNDLE)
            .build()
        )
        .build()
    )
    got = run_job(sink, "bigtable sink metrics")
    tables = {f"projects/{BIGTABLE_PROJECT}/instances/{instance}/tables/{t}" for t in "ab"}
    check(Job(got, tables), [WRITTEN / 2, WRITTEN / 2])
    # The rows the metrics counted are the rows in the tables.
    written = len(read_table(instance, "a")) + len(read_table(instance, "b"))
    assert written == WRITTEN - len(REJECTED)


def test_spanner_sink_metrics(stack: EmulatorStack) -> None:
    table = spanner_unique("Metrics")
    create_tables([f"CREATE TABLE {table} (id INT64 NOT NULL, n INT64) PRIMARY KEY (id)"])
    database = destination()
    sink = (
        SpannerSink.builder()
        .set_database(database)
        .set_serializer(SpannerRow(table))
        .set_failure_handler(FailureHandler.log_and_drop())
        .set_writer_options(
            SpannerWriterOptions.builder()
            .per_destination_metrics(True)
            .max_buffered_records(BUNDLE)
            .build()
        )
        .build()
    )
    got = run_job(sink, "spanner sink metrics")
    check(Job(got, {str(database)}), [WRITTEN])
    assert query(f"SELECT COUNT(*) FROM {table}") == [[WRITTEN - len(REJECTED)]]


def test_cloudtasks_sink_metrics(stack: EmulatorStack, project: str) -> None:
    run = suffix()
    queues = create_queues(stack, [f"metrics-{run}-{q}" for q in "ab"])
    sink = (
        CloudTasksSink.builder()
        .set_destination_resolver(Halves(QueueOf(project, run)))
        .set_serializer(Task(f"{stack.receiver_url}/metrics/{run}"))
        .set_failure_handler(FailureHandler.log_and_drop())
        .set_writer_options(
            CloudTasksWriterOptions.builder()
            .per_destination_metrics(True)
            .max_buffered_records(BUNDLE)
            .build()
        )
        .build()
    )
    got = run_job(sink, "cloud tasks sink metrics")
    check(Job(got, set(queues)), [WRITTEN / 2, WRITTEN / 2])
