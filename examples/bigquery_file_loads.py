"""Sensor readings loaded into one BigQuery table per day by load jobs, exactly once.

Run against the local emulators (``pyflink-gcp emulators up`` prints the variables) or real
BigQuery and Cloud Storage (Application Default Credentials)::

    python examples/bigquery_file_loads.py --project my-project --bucket my-staging-bucket

``WriteMethod.FILE_LOADS``: each sink subtask writes a day's readings to an in-progress file of
its own, finishes it at every checkpoint (or when it reaches its size, goes idle, or is
released: at most three open files per subtask here), uploads it to
``gs://<bucket>/readings/<table>/`` as a pending object, and one committer loads each table's
pending files with one load job per table once the checkpoint completed, then deletes them.
Free of streaming cost, and exactly once: a load job id is derived from the files, so a commit
repeated after a failure finds its job instead of loading again. Afterwards the script counts
each day's rows and checks that every reading is there once and the staging area is empty.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta

from google.api_core import exceptions
from google.cloud import bigquery, storage  # type: ignore[attr-defined]
from pyflink.common import Configuration
from pyflink.common.watermark_strategy import WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource

from pyflink_gcp.bigquery import (
    BigQueryFileLoadsOptions,
    BigQuerySerializer,
    BigQuerySink,
    BigQueryWriterOptions,
    CreateDisposition,
    WriteMethod,
)
from pyflink_gcp.routing import bigquery_tables, route_by_template
from pyflink_gcp.tools.emulators.clients import bigquery_client

DATASET = "telemetry"
FIRST_DAY = datetime(2024, 3, 1, tzinfo=UTC)
DAYS = 7
READINGS = [
    bigquery.SchemaField("reading_id", "INT64", mode="REQUIRED"),
    bigquery.SchemaField("sensor", "STRING", mode="REQUIRED"),
    bigquery.SchemaField("celsius", "FLOAT64"),
    bigquery.SchemaField("taken_at", "TIMESTAMP"),
]


def make_reading(i: int, count: int) -> dict:
    """Readings in time order over ``DAYS`` days (a subtask reads a range of ids)."""
    taken = FIRST_DAY + timedelta(seconds=i * DAYS * 86_400 // count)
    return {
        "reading_id": i,
        "sensor": f"s{i % 40:02d}",
        "celsius": round(15 + (i % 200) / 10, 1),
        "taken_ms": int(taken.timestamp() * 1000),
    }


class ReadingsOf:
    """A picklable map to the reading of an id."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __call__(self, i: int) -> dict:
        return make_reading(i, self.count)


def to_row(reading: dict) -> dict:
    return {
        "reading_id": reading["reading_id"],
        "sensor": reading["sensor"],
        "celsius": reading["celsius"],
        "taken_at": reading["taken_ms"] * 1000,  # TIMESTAMP: epoch microseconds
    }


def storage_client(project: str) -> storage.Client:
    host = os.environ.get("STORAGE_EMULATOR_HOST")
    if not host:
        return storage.Client(project=project)
    from google.auth.credentials import AnonymousCredentials

    return storage.Client(
        project=project, credentials=AnonymousCredentials(), client_options={"api_endpoint": host}
    )


def prepare(project: str, bucket: str) -> None:
    """The dataset (the sink creates tables, not datasets) and the staging bucket."""
    client = bigquery_client(project)
    client.create_dataset(f"{project}.{DATASET}", exists_ok=True)
    client.close()
    gcs = storage_client(project)
    try:
        gcs.create_bucket(bucket)
    except exceptions.Conflict:
        pass
    gcs.close()


def run_job(project: str, bucket: str, count: int, parallelism: int) -> None:
    conf = Configuration()
    # The Python workers run this interpreter (the venv with pyflink and pyflink-gcp).
    conf.set_string("python.executable", sys.executable)
    conf.set_string("python.client.executable", sys.executable)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    env.enable_checkpointing(2000)

    sink = (
        BigQuerySink.builder()
        .set_sink_name("daily-readings")
        .set_destination_resolver(
            route_by_template("readings_{taken_ms:%Y%m%d}", bigquery_tables(project, DATASET))
        )
        .set_serializer(BigQuerySerializer.of(to_row, schema=READINGS))
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_write_method(WriteMethod.FILE_LOADS)
        .set_file_loads_options(
            BigQueryFileLoadsOptions.builder()
            .staging_location(f"gs://{bucket}/readings")
            .spool_directory(os.path.join(tempfile.gettempdir(), "pyflink-gcp-file-loads"))
            # Load after every checkpoint here; in production keep the default 90 s (or
            # more), which holds a table under BigQuery's 1,500 load jobs per day.
            .min_load_interval(timedelta(0))
            .build()
        )
        .set_writer_options(
            BigQueryWriterOptions.builder()
            .max_active_destinations(3)  # at most three open files per subtask
            .max_created_destinations(DAYS)
            .build()
        )
        .build()
    )
    (
        env.from_source(
            NumberSequenceSource(0, count - 1), WatermarkStrategy.no_watermarks(), "readings"
        )
        .map(ReadingsOf(count))
        .sink_to(sink)
    )
    env.execute("bigquery-file-loads")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default=os.environ.get("GOOGLE_CLOUD_PROJECT", "demo-project"))
    parser.add_argument("--bucket", default="pyflink-gcp-demo-staging")
    parser.add_argument("--readings", type=int, default=20_000)
    parser.add_argument("--parallelism", type=int, default=2)
    args = parser.parse_args()

    prepare(args.project, args.bucket)
    started = time.monotonic()
    run_job(args.project, args.bucket, args.readings, args.parallelism)
    took = time.monotonic() - started

    client = bigquery_client(args.project)
    counts: dict[str, tuple[int, int]] = {}
    for table in sorted(client.list_tables(f"{args.project}.{DATASET}"), key=lambda t: t.table_id):
        if table.table_id.startswith("readings_"):
            sql = (
                "SELECT COUNT(*) AS n, COUNT(DISTINCT reading_id) AS d "
                f"FROM `{args.project}.{DATASET}.{table.table_id}`"
            )
            row = next(iter(client.query(sql).result()))
            counts[table.table_id] = (row["n"], row["d"])
    client.close()
    gcs = storage_client(args.project)
    left = [b.name for b in gcs.list_blobs(args.bucket, prefix="readings/")]
    gcs.close()

    print(f"\nBigQuery load jobs: {args.readings} readings in {took:.1f}s (job incl. startup)")
    print(f"{'table':<28}{'rows':>8}{'distinct':>10}")
    for table, (n, d) in counts.items():
        print(f"{DATASET + '.' + table:<28}{n:>8}{d:>10}")
    rows = sum(n for n, _ in counts.values())
    print(f"{'total':<28}{rows:>8}")
    print(f"staged objects left: {len(left)}")
    ok = (
        len(counts) == DAYS
        and rows == args.readings
        and all(n == d for n, d in counts.values())
        and not left
    )
    print("OK: every reading loaded once, the staging area empty" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
