"""``WriteMethod.FILE_LOADS`` in real jobs: rows staged in files per table (in-progress on local
disk, pending in the GCS emulator) and loaded into the BigQuery emulator by load jobs after each
checkpoint, exactly once. The emulator stack answers 409 for a reused load job id, as BigQuery
does, and its BigQuery emulator reads ``gs://`` objects the GCS emulator holds."""

from __future__ import annotations

import base64
import os
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from datetime import time as time_of_day
from decimal import Decimal
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
    FileFormat,
    TableDestination,
    TableSchema,
    WriteMethod,
)
from tests.integration.bigquery.support import DailyTables, bq_client, ids_by_table, make_dataset
from tests.support.file_loads import load_log, recording
from tests.support.jobs import FailAt, make_env, record_stream
from tests.support.restore import Failover

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


def gcs_bucket(project: str) -> Any:
    from google.cloud import storage  # type: ignore[attr-defined]

    client = storage.Client(
        project=project,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": os.environ["STORAGE_EMULATOR_HOST"]},
    )
    return client.create_bucket(f"staging-{uuid.uuid4().hex[:8]}")


class Slow(MapFunction):
    """Sleep ``seconds`` every ``every`` records: a job that lasts several checkpoints."""

    def __init__(self, every: int = 50, seconds: float = 0.05) -> None:
        self._every = every
        self._seconds = seconds

    def map(self, value: Any) -> Any:
        if value["id"] % self._every == 0:
            time.sleep(self._seconds)
        return value


def sink(
    project: str,
    dataset: str,
    loads: BigQueryFileLoadsOptions,
    resolver: Any = None,
    name: str = "events-loads",
    **options: Any,
) -> Any:
    """A FILE_LOADS sink of ``EVENTS`` rows: daily tables unless ``resolver`` says otherwise;
    ``options`` are BigQueryWriterOptions settings (bundles of 200 records by default)."""
    writer = BigQueryWriterOptions.builder().max_buffered_records(200)
    for setting, value in options.items():
        writer = getattr(writer, setting)(value)
    return (
        BigQuerySink.builder()
        .set_sink_name(name)
        .set_destination_resolver(resolver or DailyTables(project, dataset))
        .set_serializer(BigQuerySerializer.of(lambda r, c: r, schema=EVENTS))
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_write_method(WriteMethod.FILE_LOADS)
        .set_file_loads_options(loads)
        .set_writer_options(writer.build())
        .build()
    )


def assert_exactly_once(project: str, dataset: str, count: int) -> None:
    tables = ids_by_table(project, dataset)
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


def loads_options(bucket: Any, tmp_path: Any, **settings: Any) -> BigQueryFileLoadsOptions:
    builder = (
        BigQueryFileLoadsOptions.builder()
        .staging_location(f"gs://{bucket.name}/stage")
        .spool_directory(str(tmp_path / "spool"))
        .min_load_interval(timedelta(0))
    )
    for name, value in settings.items():
        builder = getattr(builder, name)(value)
    return builder.build()


@pytest.mark.parametrize("hard", [False, True], ids=["task exceptions", "killed workers"])
def test_every_row_is_loaded_once_through_failovers(
    project: str, tmp_path: Any, hard: bool
) -> None:
    count = 4_000
    failures = (700, 1_500, 2_300, 3_100)
    dataset = make_dataset(project, "loadfail")
    bucket = gcs_bucket(project)
    log = str(tmp_path / "loads.jsonl")
    failover = Failover(tmp_path / "failover")
    env = make_env(
        parallelism=2,
        checkpoint_ms=300,
        process_workers=hard,
        restarts=20,
        extra=failover.conf(),
    )
    built = recording(sink(project, dataset, loads_options(bucket, tmp_path)), log)
    fail = FailAt(str(tmp_path), failures, hard, after_checkpoint=failover.checkpoints)
    record_stream(env, count, event).map(fail).sink_to(built)
    env.execute("file loads through failovers")
    assert len([n for n in os.listdir(tmp_path) if n.startswith("failed-")]) == len(failures)
    failover.assert_restored()

    assert_exactly_once(project, dataset, count)
    # Each load job ran once; a commit repeated after a restore found its job (409).
    entries = load_log(log)
    jobs = [e["job"] for e in entries if not e["found"]]
    assert len(jobs) == len(set(jobs)), "a load job ran twice"
    print(
        f"file loads: {count} rows in {DAYS} tables by {len(jobs)} load jobs after "
        f"{len(failures)} {'worker kills' if hard else 'task exceptions'}: 0 lost, 0 duplicates"
    )


def test_a_commit_repeated_after_its_load_finds_the_job_and_loads_nothing_twice(
    project: str, tmp_path: Any
) -> None:
    count = 2_000
    dataset = make_dataset(project, "loadagain")
    bucket = gcs_bucket(project)
    log = str(tmp_path / "loads.jsonl")
    # The worker dies in a commit, which runs only once its checkpoint completed.
    failover = Failover(tmp_path / "failover")
    env = make_env(
        parallelism=1, checkpoint_ms=300, process_workers=True, restarts=5, extra=failover.conf()
    )
    built = recording(
        sink(project, dataset, loads_options(bucket, tmp_path)),
        log,
        kill_marker=str(tmp_path / "killed-in-commit"),
    )
    record_stream(env, count, event).map(FailAt(str(tmp_path), (), False)).sink_to(built)
    env.execute("file loads, a commit repeated")
    assert os.path.exists(tmp_path / "killed-in-commit"), "the worker was not killed"
    failover.assert_restored()

    entries = load_log(log)
    first = entries[0]
    again = [e for e in entries[1:] if e["job"] == first["job"]]
    assert again and again[0]["found"], entries[:5]  # BigQuery's 409: the job already ran
    assert_exactly_once(project, dataset, count)


class Halves:
    """Two tables, taking turns: each gets a file at every checkpoint."""

    def __init__(self, project: str, dataset: str) -> None:
        self.project = project
        self.dataset = dataset

    def __call__(self, record: dict[str, Any], ctx: Any) -> TableDestination:
        return TableDestination.of(self.project, self.dataset, f"half_{record['id'] % 2}")


def trickling_env(checkpoint_ms: int) -> Any:
    """One subtask whose upstream map hands records on in bundles of 5: they reach the writer
    as they come, not in one burst per second."""
    return make_env(
        parallelism=1, checkpoint_ms=checkpoint_ms, extra={"python.fn-execution.bundle.size": "5"}
    )


def test_files_wait_out_the_minimum_load_interval_and_load_together(
    project: str, tmp_path: Any
) -> None:
    count = 1_500
    dataset = make_dataset(project, "loadlater")
    bucket = gcs_bucket(project)
    log = str(tmp_path / "loads.jsonl")
    env = trickling_env(200)
    loads = loads_options(bucket, tmp_path, min_load_interval=timedelta(seconds=3))
    built = sink(
        project,
        dataset,
        loads,
        Halves(project, dataset),
        "halves-loads",
        max_buffered_records=BigQueryWriterOptions().max_buffered_records,
    )
    slow = Slow(every=10, seconds=0.05)  # about 7 s: some 35 checkpoints
    record_stream(env, count, event, parallelism=1).map(slow).set_parallelism(1).sink_to(
        recording(built, log)
    )
    start = time.monotonic()
    env.execute("file loads, a minimum interval")
    took = time.monotonic() - start

    entries = load_log(log)
    # A file per table per checkpoint, but a table loads at most every 3 s (the first at once,
    # the last with the end of input): many files a job, and a few jobs per table rather than
    # one per checkpoint.
    assert max(e["files"] for e in entries) >= 5, entries
    assert len(entries) <= 2 * (took / 3 + 2), (took, entries)
    tables = ids_by_table(project, dataset)
    assert tables == {f"half_{h}": Counter(range(h, count, 2)) for h in (0, 1)}


def test_files_roll_on_size_and_move_from_in_progress_to_pending_to_loaded_to_deleted(
    project: str, tmp_path: Any
) -> None:
    count = 1_750  # seven days of 250
    dataset = make_dataset(project, "lifecycle")
    bucket = gcs_bucket(project)
    spool = str(tmp_path / "spool")
    # Small files (about 35 rows each); after its first load, a table loads at the end of input.
    loads = loads_options(
        bucket,
        tmp_path,
        max_file_bytes=2_048,
        min_load_interval=timedelta(hours=1),
        file_format=FileFormat.NEWLINE_DELIMITED_JSON,
    )
    env = trickling_env(500)
    log = str(tmp_path / "loads.jsonl")
    built = recording(sink(project, dataset, loads), log)
    # Slow enough that each file is in progress for longer than the watcher's poll.
    slow = Slow(every=5, seconds=0.03)
    record_stream(env, count, event, parallelism=1).map(slow).set_parallelism(1).sink_to(built)
    pending: set[str] = set()
    with OpenFiles(spool, ".inprogress") as watch:
        client = env.execute_async("file lifecycle")
        result = client.get_job_execution_result()
        while not result.done():
            pending |= {b.name for b in bucket.list_blobs(prefix="stage/")}
            time.sleep(0.1)
        result.result()

    # Every in-progress file seen became a pending object under the same name, and was loaded
    # (a file that rolls within one write of rows can live shorter than the watchers' polls).
    loaded = {name for entry in load_log(log) for name in entry["names"]}
    assert pending <= loaded, sorted(pending - loaded)[:5]
    staged = {name.rsplit("/", 1)[1].removesuffix(".pending") for name in loaded}
    seen = {name.removesuffix(".inprogress") for name in watch.names}
    assert seen and seen <= staged, (sorted(seen - staged)[:5], len(staged))
    assert len(seen) >= len(staged) // 2, (len(seen), len(staged))
    assert len(staged) >= count * 40 // 2_048  # rolled on size, not only at checkpoints
    assert all(name.endswith(".json.pending") for name in pending)
    assert_exactly_once(project, dataset, count)
    assert [b.name for b in bucket.list_blobs(prefix="stage/")] == []  # deleted once loaded
    assert not any(files for _, _, files in os.walk(spool))  # no in-progress file is left


class AllTypes(MapFunction):
    """An event with a value in every column type the file formats convert."""

    def map(self, value: Any) -> Any:
        i = value["id"]
        return {
            **value,
            "amount": f"{i}.125",
            "civil": f"2024-03-01 10:00:{i % 60:02d}.000500",
            "clock": f"12:{i % 60:02d}:00.000001",
            "on": date(2024, 3, 1 + i % 28),
            "tags": [f"t{i % 3}", "all"],
            "raw": i.to_bytes(2, "big"),
        }


RICH = TableSchema.of(
    [
        *EVENTS.fields,
        SchemaField("amount", "NUMERIC"),
        SchemaField("civil", "DATETIME"),
        SchemaField("clock", "TIME"),
        SchemaField("on", "DATE"),
        SchemaField("tags", "STRING", mode="REPEATED"),
        SchemaField("raw", "BYTES"),
    ]
)


#: Rows of the formats job.
FORMATS_COUNT = 1_000


@pytest.fixture(scope="module")
def loaded_formats(
    project: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[FileFormat, tuple[str, Any]]:
    """Runs one job writing the same events through a sink per file format, each into its own
    dataset from its own local staging directory (one job instead of one per format); the
    dataset and the staging directory of each format."""
    tmp_path = tmp_path_factory.mktemp("formats")
    env = make_env(parallelism=2, checkpoint_ms=400)
    events = record_stream(env, FORMATS_COUNT, event).map(AllTypes())
    where: dict[FileFormat, tuple[str, Any]] = {}
    for file_format in FileFormat:
        name = file_format.value.lower()
        dataset = make_dataset(project, f"fmt_{name}")
        stage = tmp_path / name / "stage"
        loads = (
            BigQueryFileLoadsOptions.builder()
            .staging_location(f"file://{stage}")
            .spool_directory(str(tmp_path / name / "spool"))
            .min_load_interval(timedelta(0))
            .file_format(file_format)
            .build()
        )
        events.sink_to(
            BigQuerySink.builder()
            .set_sink_name(f"formats-{name}")
            .set_destination_resolver(DailyTables(project, dataset))
            .set_serializer(BigQuerySerializer.of(lambda r, c: r, schema=RICH))
            .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
            .set_write_method(WriteMethod.FILE_LOADS)
            .set_file_loads_options(loads)
            .set_writer_options(BigQueryWriterOptions.builder().max_buffered_records(200).build())
            .build()
        )
        where[file_format] = (dataset, stage)
    env.execute("file loads in every format")
    return where


@pytest.mark.parametrize("file_format", list(FileFormat), ids=lambda f: f.value.lower())
def test_each_format_loads_every_column_type_from_a_local_staging_directory(
    project: str, loaded_formats: dict[FileFormat, tuple[str, Any]], file_format: FileFormat
) -> None:
    count = FORMATS_COUNT
    dataset, stage = loaded_formats[file_format]
    tables = ids_by_table(project, dataset)
    assert sum(sum(ids.values()) for ids in tables.values()) == count
    assert all(max(ids.values()) == 1 for ids in tables.values())
    client = bq_client(project)
    day = event(7)["day"]
    [row] = client.query(
        f"SELECT * FROM `{project}.{dataset}.events_{day}` WHERE id = 7", timeout=10
    ).result(timeout=30)
    client.close()
    assert row["at"] == datetime.fromtimestamp(event(7)["at"] / 1e6, UTC)
    assert row["amount"] == Decimal("7.125")
    assert row["civil"] == datetime(2024, 3, 1, 10, 0, 7, 500)
    assert row["clock"] == time_of_day(12, 7, 0, 1)
    assert row["on"] == date(2024, 3, 8) and list(row["tags"]) == ["t1", "all"]
    raw = row["raw"]
    if file_format is FileFormat.NEWLINE_DELIMITED_JSON:
        # BigQuery decodes a JSON BYTES value from base64; the emulator keeps the base64 text
        # (docs/emulators.md), so the staged value is checked in its JSON form here.
        raw = base64.b64decode(raw)
    assert raw == (7).to_bytes(2, "big")
    left = [p for p in stage.rglob("*") if p.is_file()]
    assert left == []  # loaded files are deleted from the staging directory
