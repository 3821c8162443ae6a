"""Once readings are loaded into BigQuery, enqueue a Cloud Task per load: write results.

Run against the local emulators (``pyflink-gcp emulators up`` prints the variables; the HTTP
receiver stands in for the service the tasks call) or real BigQuery, Cloud Storage and Cloud
Tasks (Application Default Credentials, an HTTPS endpoint of yours)::

    python examples/bigquery_results_to_tasks.py --readings 4000
    python examples/bigquery_results_to_tasks.py --project my-project --bucket my-staging \\
        --location europe-west1 --target-url https://jobs.example.com/loaded

``sink.write_with_results(readings)`` writes the readings into one table per day with
``WriteMethod.FILE_LOADS`` (exactly once: load jobs after each checkpoint) and returns a stream
of ``WriteResult`` values: after each commit, one per table loaded, with the checkpoint, the
row count and the earliest and latest event time. Each result becomes one HTTP task on the
``loaded`` queue, whose body is the result as JSON: the downstream job it triggers runs only
once the rows are in BigQuery. Against the emulators the script then checks that every task
names a table that holds at least the rows it reports.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import timedelta

import grpc
from google.api_core import exceptions
from google.cloud import bigquery, storage, tasks_v2  # type: ignore[attr-defined]
from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport
from pyflink.common import Configuration
from pyflink.common.watermark_strategy import TimestampAssigner, WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource

from pyflink_gcp import WriteResult
from pyflink_gcp.bigquery import (
    BigQueryFileLoadsOptions,
    BigQuerySerializer,
    BigQuerySink,
    CreateDisposition,
    WriteMethod,
)
from pyflink_gcp.cloudtasks import CloudTasksSerializationSchema, CloudTasksSink, QueueDestination
from pyflink_gcp.routing import bigquery_tables, route_by_template
from pyflink_gcp.tools.emulators import fetch_received
from pyflink_gcp.tools.emulators.clients import bigquery_client

QUEUE = "loaded"
# Not bigquery_file_loads.py's dataset: `make demo` runs both on one emulator, and this example
# counts every row of its tables.
DATASET = "telemetry_results"
FIRST_DAY_MS = 1_709_251_200_000  # 2024-03-01T00:00:00Z
DAYS = 7
READINGS = [
    bigquery.SchemaField("reading_id", "INT64", mode="REQUIRED"),
    bigquery.SchemaField("sensor", "STRING", mode="REQUIRED"),
    bigquery.SchemaField("celsius", "FLOAT64"),
    bigquery.SchemaField("taken_at", "TIMESTAMP"),
]


class ReadingsOf:
    """The reading of an id: in time order over ``DAYS`` days (a subtask reads a range)."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __call__(self, i: int) -> dict:
        return {
            "reading_id": i,
            "sensor": f"s{i % 40:02d}",
            "celsius": round(15 + (i % 200) / 10, 1),
            "taken_ms": FIRST_DAY_MS + i * DAYS * 86_400_000 // self.count,
        }


class Paced:
    """Pass readings through at about ``per_second`` per subtask, as a live source would, so
    that checkpoints (and loads) happen while the job runs."""

    def __init__(self, per_second: int) -> None:
        self.every = max(1, per_second // 20)
        self.seen = 0

    def __call__(self, reading: dict) -> dict:
        self.seen += 1
        if self.seen % self.every == 0:
            time.sleep(0.05)
        return reading


def to_row(reading: dict) -> dict:
    return {
        "reading_id": reading["reading_id"],
        "sensor": reading["sensor"],
        "celsius": reading["celsius"],
        "taken_at": reading["taken_ms"] * 1000,  # TIMESTAMP: epoch microseconds
    }


class TakenAt(TimestampAssigner):
    """A reading's event time: when it was taken."""

    def extract_timestamp(self, value: dict, record_timestamp: int) -> int:
        return int(value["taken_ms"])


def result_body(result: WriteResult) -> bytes:
    """The task's body: the result as JSON."""
    return json.dumps(dataclasses.asdict(result)).encode()


def prepare(project: str, bucket: str, location: str) -> None:
    """The dataset (the sink creates tables, not datasets), the staging bucket and the queue
    (the sink never creates queues)."""
    client = bigquery_client(project)
    client.create_dataset(f"{project}.{DATASET}", exists_ok=True)
    client.close()
    host = os.environ.get("STORAGE_EMULATOR_HOST")
    if host:
        from google.auth.credentials import AnonymousCredentials

        gcs = storage.Client(
            project=project,
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": host},
        )
    else:
        gcs = storage.Client(project=project)
    try:
        gcs.create_bucket(bucket)
    except exceptions.Conflict:
        pass
    gcs.close()
    tasks_host = os.environ.get("CLOUD_TASKS_EMULATOR_HOST")
    if tasks_host:
        transport = CloudTasksGrpcTransport(channel=grpc.insecure_channel(tasks_host))
        tasks = tasks_v2.CloudTasksClient(transport=transport)
    else:
        tasks = tasks_v2.CloudTasksClient()
    parent = f"projects/{project}/locations/{location}"
    try:
        tasks.create_queue(parent=parent, queue=tasks_v2.Queue(name=f"{parent}/queues/{QUEUE}"))
    except exceptions.AlreadyExists:
        pass


def table_rows(project: str) -> dict[str, int]:
    """The row count of each readings table."""
    client = bigquery_client(project)
    rows: dict[str, int] = {}
    for table in client.list_tables(f"{project}.{DATASET}"):
        if table.table_id.startswith("readings_"):
            sql = f"SELECT COUNT(*) AS n FROM `{project}.{DATASET}.{table.table_id}`"
            rows[table.table_id] = next(iter(client.query(sql).result()))["n"]
    client.close()
    return rows


def collect(receiver: str, path: str, timeout: float = 120.0) -> list[dict]:
    """The receiver's requests under ``path`` once some arrived and then none for 3 s."""
    deadline = time.monotonic() + timeout
    seen, quiet_since = -1, time.monotonic()
    while True:
        got = [r for r in fetch_received(receiver) if r["path"].startswith(path)]
        if len(got) != seen:
            seen, quiet_since = len(got), time.monotonic()
        elif (seen > 0 and time.monotonic() - quiet_since >= 3) or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def run_job(args: argparse.Namespace, target: str) -> None:
    conf = Configuration()
    # The Python workers run this interpreter (the venv with pyflink and pyflink-gcp).
    conf.set_string("python.executable", sys.executable)
    conf.set_string("python.client.executable", sys.executable)
    # Small bundles in the maps before the sinks, so checkpoint barriers pass them quickly
    # (the sinks' writers set their own).
    conf.set_string("python.fn-execution.bundle.size", "100")
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(args.parallelism)
    env.enable_checkpointing(1000)

    readings_sink = (
        BigQuerySink.builder()
        .set_sink_name("daily-readings")
        .set_destination_resolver(
            route_by_template("readings_{taken_ms:%Y%m%d}", bigquery_tables(args.project, DATASET))
        )
        .set_serializer(BigQuerySerializer.of(to_row, schema=READINGS))
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_write_method(WriteMethod.FILE_LOADS)
        .set_file_loads_options(
            BigQueryFileLoadsOptions.builder()
            .staging_location(f"gs://{args.bucket}/results-to-tasks")
            .spool_directory(os.path.join(tempfile.gettempdir(), "pyflink-gcp-results-to-tasks"))
            .min_load_interval(timedelta(0))  # keep the default 90 s in production
            .build()
        )
        .build()
    )
    queue = QueueDestination.of(args.project, args.location, QUEUE)
    tasks_sink = (
        CloudTasksSink.builder()
        .set_sink_name("after-load")
        .set_destination_resolver(lambda result, ctx: queue)
        .set_serializer(
            CloudTasksSerializationSchema.http_target(target).with_body(
                result_body, content_type="application/json"
            )
        )
        .build()
    )
    readings = (
        env.from_source(
            NumberSequenceSource(0, args.readings - 1), WatermarkStrategy.no_watermarks(), "ids"
        )
        .map(ReadingsOf(args.readings))
        .map(Paced(args.rate))
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(TakenAt())
        )
    )
    results = readings_sink.write_with_results(readings)
    results.sink_to(tasks_sink)
    env.execute("bigquery-results-to-tasks")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default=os.environ.get("GOOGLE_CLOUD_PROJECT", "demo-project"))
    parser.add_argument("--bucket", default="pyflink-gcp-demo-staging")
    parser.add_argument("--location", default="us-central1")
    parser.add_argument("--readings", type=int, default=20_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--rate", type=int, default=500, help="readings per second per subtask")
    parser.add_argument(
        "--target-url", help="the URL each task calls (default: the local receiver)"
    )
    args = parser.parse_args()

    receiver = os.environ.get("PYFLINK_GCP_RECEIVER_URL")
    if not args.target_url and not receiver:
        parser.error("--target-url is required without the local receiver")
    path = f"/loaded/{uuid.uuid4().hex[:8]}"
    target = args.target_url or receiver + path

    prepare(args.project, args.bucket, args.location)
    before = {} if args.target_url else table_rows(args.project)  # an earlier run's rows
    started = time.monotonic()
    run_job(args, target)
    took = time.monotonic() - started
    print(f"\nBigQuery loads -> Cloud Tasks: {args.readings} readings in {took:.1f}s")
    if args.target_url:
        print("tasks created; the service dispatches them to", args.target_url)
        return 0

    rows = {table: n - before.get(table, 0) for table, n in table_rows(args.project).items()}
    # A bounded job's last commit (its final checkpoint) comes after the operators downstream
    # saw the end of their input: its results reach no task (the committer logs them instead,
    # docs/guarantees.md). An unbounded job reports every commit.
    calls = collect(receiver, path)
    reported: Counter[str] = Counter()
    for call in calls:
        result = json.loads(call["body"])
        reported[result["destination"].rsplit("/", 1)[1]] += result["count"]
    print(f"{'table':<38}{'rows':>8}{'reported by tasks':>20}")
    for table in sorted(rows):
        print(f"{DATASET + '.' + table:<38}{rows[table]:>8}{reported[table]:>20}")
    print(f"tasks: {len(calls)}, one per committed load of a table")
    if any(reported[table] < n for table, n in rows.items()):
        print(
            "(rows no task reports were committed after the end of input: a bounded job "
            "logs those results instead of emitting them, docs/guarantees.md)"
        )
    ok = (
        sum(rows.values()) == args.readings
        and bool(calls)
        and all(0 < n <= rows.get(table, 0) for table, n in reported.items())
    )
    print("OK: every task names rows that are in BigQuery" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
