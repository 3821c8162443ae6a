"""``WriteMethod.FILE_LOADS`` in real jobs: rows staged in files per table (in-progress on local
disk, pending in the GCS emulator) and loaded into the BigQuery emulator by load jobs after each
checkpoint, exactly once. The emulator stack answers 409 for a reused load job id, as BigQuery
does, and its BigQuery emulator reads ``gs://`` objects the GCS emulator holds."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud.bigquery import SchemaField
from pyflink.datastream.functions import MapFunction

from pyflink_gcp.bigquery import (
    BigQueryFileLoadsOptions,
    BigQuerySerializer,
    BigQuerySink,
    BigQueryWriterOptions,
    CreateDisposition,
    TableDestination,
    TableSchema,
    WriteMethod,
)
from tests.integration.bigquery.support import make_dataset, query, table_names
from tests.support.jobs import make_env, record_stream

pytestmark = pytest.mark.e2e

DAYS = 7
EVENTS = TableSchema.of(
    [
        SchemaField("id", "INT64", mode="REQUIRED"),
        SchemaField("day", "STRING"),
        SchemaField("at", "TIMESTAMP"),
    ]
)


def event(i: int) -> dict[str, Any]:
    """Records in event-time order, a day every 250 (each subtask reads a range of ids)."""
    return {"id": i, "day": f"2024030{1 + (i // 250) % DAYS}", "at": 1_709_251_200_000_000 + i}


class Daily:
    def __init__(self, project: str, dataset: str) -> None:
        self.project = project
        self.dataset = dataset

    def __call__(self, record: dict[str, Any], ctx: Any) -> TableDestination:
        return TableDestination.of(self.project, self.dataset, f"events_{record['day']}")


def gcs_bucket(project: str) -> Any:
    from google.cloud import storage  # type: ignore[attr-defined]

    client = storage.Client(
        project=project,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": os.environ["STORAGE_EMULATOR_HOST"]},
    )
    return client.create_bucket(f"staging-{uuid.uuid4().hex[:8]}")


class Slow(MapFunction):
    def map(self, value: Any) -> Any:
        if value["id"] % 50 == 0:
            time.sleep(0.05)
        return value


def sink(project: str, dataset: str, loads: BigQueryFileLoadsOptions, **options: Any) -> Any:
    writer = BigQueryWriterOptions.builder().max_buffered_records(200)
    for name, value in options.items():
        writer = getattr(writer, name)(value)
    return (
        BigQuerySink.builder()
        .set_sink_name("events-loads")
        .set_destination_resolver(Daily(project, dataset))
        .set_serializer(BigQuerySerializer.of(lambda r, c: r, schema=EVENTS))
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_write_method(WriteMethod.FILE_LOADS)
        .set_file_loads_options(loads)
        .set_writer_options(writer.build())
        .build()
    )


def rows_by_table(project: str, dataset: str) -> dict[str, Counter[int]]:
    return {
        table: Counter(
            row["id"] for row in query(project, f"SELECT id FROM `{project}.{dataset}.{table}`")
        )
        for table in table_names(project, dataset)
    }


def assert_exactly_once(project: str, dataset: str, count: int) -> None:
    tables = rows_by_table(project, dataset)
    assert sorted(tables) == [f"events_2024030{d}" for d in range(1, DAYS + 1)]
    for table, ids in tables.items():
        day = table.removeprefix("events_")
        expected = {i for i in range(count) if event(i)["day"] == day}
        assert set(ids) == expected, (table, sorted(expected - set(ids))[:10])
        assert max(ids.values()) == 1, (table, [i for i, n in ids.items() if n > 1][:10])


class OpenFiles:
    """Watches the spool directory while the job runs: the most in-progress files seen at once
    per subtask, and every in-progress name seen."""

    def __init__(self, spool: str, suffix: str) -> None:
        self.spool = spool
        self.suffix = suffix
        self.most: Counter[str] = Counter()
        self.names: set[str] = set()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> OpenFiles:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._done.is_set():
            now: Counter[str] = Counter()
            for root, _, files in os.walk(self.spool):
                for name in files:
                    if name.endswith(self.suffix):
                        subtask = os.path.relpath(root, self.spool).split(os.sep)[1]
                        now[subtask] += 1
                        self.names.add(name)
            for subtask, n in now.items():
                self.most[subtask] = max(self.most[subtask], n)
            self._done.wait(0.02)


def test_daily_tables_under_a_cap_of_three_open_files_load_every_row_once(
    project: str, tmp_path: Any
) -> None:
    count = 4_000
    dataset = make_dataset(project, "loads")
    bucket = gcs_bucket(project)
    spool = str(tmp_path / "spool")
    loads = (
        BigQueryFileLoadsOptions.builder()
        .staging_location(f"gs://{bucket.name}/stage")
        .spool_directory(spool)
        .min_load_interval(timedelta(0))
        .build()
    )
    env = make_env(parallelism=2, checkpoint_ms=400)
    built = sink(project, dataset, loads, max_active_destinations=3)
    record_stream(env, count, event).map(Slow()).sink_to(built)
    with OpenFiles(spool, ".inprogress") as watch:
        env.execute("file loads under a cap")

    assert watch.names, "no in-progress file was seen"
    assert set(watch.most) == {"0", "1"} and max(watch.most.values()) <= 3, watch.most
    assert_exactly_once(project, dataset, count)
    # Loaded files are deleted: nothing is left in the staging location.
    assert [b.name for b in bucket.list_blobs(prefix="stage/")] == []
