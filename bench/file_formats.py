"""What each ``FileFormat`` of ``WriteMethod.FILE_LOADS`` costs to stage, and that it loads.

The same rows (an order-like table of 9 columns: INT64, STRING x2, FLOAT64, BOOL, TIMESTAMP,
DATE, NUMERIC, and a REPEATED STRING) are written through each format's file writer, the code
the sink runs per row: the lenient conversion with the table's schema, then the format's
encoding, into local files rolled at 128 MiB. Printed per format: CPU microseconds per row
(the writer's thread; what a sink subtask spends), staged bytes per row, and both as ratios
against newline-delimited JSON measured in the same run. A bare ``json.dumps`` of the
unconverted rows is printed as the floor of any per-row Python encoding.

``--load`` also loads each format's files into the BigQuery emulator (started with the
project's emulator stack, files staged in its GCS emulator) with the sink's load job
configuration, and checks the table's row count and a row's values: the formats are loadable,
not only writable. The emulator's load time is printed but says nothing about BigQuery's.

Run: ``python bench/file_formats.py [--rows N] [--repeats 3] [--load]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from google.cloud.bigquery import SchemaField

from pyflink_gcp.bigquery.file_formats import load_job_config, part_writer_type
from pyflink_gcp.bigquery.options import FileFormat

SCHEMA = [
    SchemaField("order_id", "INT64", mode="REQUIRED"),
    SchemaField("customer", "STRING"),
    SchemaField("country", "STRING"),
    SchemaField("amount", "FLOAT64"),
    SchemaField("paid", "BOOL"),
    SchemaField("created", "TIMESTAMP"),
    SchemaField("day", "DATE"),
    SchemaField("total", "NUMERIC"),
    SchemaField("items", "STRING", mode="REPEATED"),
]
FORMATS = [FileFormat.NEWLINE_DELIMITED_JSON, FileFormat.AVRO, FileFormat.PARQUET]
_START = datetime(2026, 12, 1, tzinfo=UTC)


def make_rows(count: int) -> list[dict[str, Any]]:
    return [
        {
            "order_id": i,
            "customer": f"customer-{i % 5_000:05d}",
            "country": ("de", "fr", "pl", "us", "jp")[i % 5],
            "amount": round(10 + (i % 997) * 0.37, 2),
            "paid": i % 3 != 0,
            "created": _START + timedelta(microseconds=i * 1_337),
            "day": date(2026, 12, 1 + i % 28),
            "total": Decimal(i % 100_000) / 100,
            "items": [f"sku-{i % 300}", f"sku-{(i * 7) % 300}"],
        }
        for i in range(count)
    ]


def stage(file_format: FileFormat, rows: list[dict[str, Any]], directory: str) -> tuple[float, int]:
    """CPU seconds and bytes to write ``rows`` as ``file_format`` files."""
    kind = part_writer_type(file_format)
    path = os.path.join(directory, f"part{kind.extension}")
    start = time.thread_time()
    writer = kind(path, SCHEMA, False, 128 * 1024 * 1024)
    for row in rows:
        writer.write(row)
    writer.finish()
    return time.thread_time() - start, os.path.getsize(path)


def bare_json(rows: list[dict[str, Any]]) -> float:
    start = time.thread_time()
    for row in rows:
        json.dumps(row, default=str).encode()
    return time.thread_time() - start


def load(rows: list[dict[str, Any]], directory: str) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import bigquery, storage  # type: ignore[attr-defined]

    from pyflink_gcp.tools.emulators import EmulatorStack

    with EmulatorStack(services=("bigquery", "gcs")) as stack:
        os.environ.update(stack.env)
        gcs = storage.Client(
            project=stack.project,
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": stack.env["STORAGE_EMULATOR_HOST"]},
        )
        bucket = gcs.create_bucket("bench-file-formats")
        bq = bigquery.Client(
            project=stack.project,
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": "http://" + stack.env["BIGQUERY_EMULATOR_HOST"]},
        )
        dataset = bq.create_dataset("bench_file_formats")
        print(f"\nload jobs into the emulator ({len(rows):,} rows each)")
        for file_format in FORMATS:
            kind = part_writer_type(file_format)
            stage(file_format, rows, directory)
            name = f"in/part{kind.extension}"
            bucket.blob(name).upload_from_filename(os.path.join(directory, f"part{kind.extension}"))
            table_id = f"{stack.project}.{dataset.dataset_id}.{file_format.value.lower()}"
            bq.create_table(bigquery.Table(table_id, schema=SCHEMA))
            start = time.monotonic()
            job = bq.load_table_from_uri(
                f"gs://{bucket.name}/{name}", table_id, job_config=load_job_config(file_format)
            )
            job.result(timeout=600)
            took = time.monotonic() - start
            [row] = bq.query(
                f"SELECT COUNT(*) AS n, MAX(created) AS last, SUM(total) AS total, "
                f"SUM(ARRAY_LENGTH(items)) AS items FROM `{table_id}`"
            ).result()
            expected_total = sum(r["total"] for r in rows)
            ok = (
                row["n"] == len(rows)
                and row["last"] == rows[-1]["created"]
                and Decimal(str(row["total"])) == expected_total
                and row["items"] == 2 * len(rows)
            )
            print(
                f"  {file_format.value:<24} {took:6.2f} s   rows {row['n']:,}   "
                f"values {'match' if ok else 'DIFFER: ' + repr(dict(row.items()))}"
            )
        bq.close()
        gcs.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--load", action="store_true", help="also load each format's files")
    args = parser.parse_args()
    rows = make_rows(args.rows)
    cpu: dict[str, list[float]] = {f.value: [] for f in FORMATS}
    sizes: dict[str, int] = {}
    floor: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-file-formats-") as directory:
        for _ in range(args.repeats):  # interleaved, so a slow moment hits every format
            floor.append(bare_json(rows))
            for file_format in FORMATS:
                seconds, size = stage(file_format, rows, directory)
                cpu[file_format.value].append(seconds)
                sizes[file_format.value] = size
        base_cpu = statistics.median(cpu[FileFormat.NEWLINE_DELIMITED_JSON.value])
        base_size = sizes[FileFormat.NEWLINE_DELIMITED_JSON.value]
        print(f"staging {args.rows:,} rows of {len(SCHEMA)} columns, median of {args.repeats}")
        print(f"  {'format':<24} {'µs/row':>8} {'× JSON':>7} {'bytes/row':>10} {'× JSON':>7}")
        for file_format in FORMATS:
            seconds = statistics.median(cpu[file_format.value])
            size = sizes[file_format.value]
            print(
                f"  {file_format.value:<24} {seconds / args.rows * 1e6:8.2f} "
                f"{seconds / base_cpu:7.2f} {size / args.rows:10.1f} {size / base_size:7.2f}"
            )
        bare = statistics.median(floor)
        print(
            f"  {'bare json.dumps (floor)':<24} {bare / args.rows * 1e6:8.2f} {bare / base_cpu:7.2f}"
        )
        if args.load:
            load(rows, directory)


if __name__ == "__main__":
    main()
