"""Sensor readings into one Bigtable table per day, created on first use.

A PyFlink job reads three days of readings and writes each one to ``readings_<yyyymmdd>`` of its
event time, with the reading's own timestamp on the cell. The sink creates each day's table the
first time a reading for that day arrives, keeps one batcher per active table, and flushes all of
them before every checkpoint. The job then reads the tables back and prints what landed where.

Run it with ``python examples/bigtable_daily_tables.py``. It uses the Bigtable emulator named by
``BIGTABLE_EMULATOR_HOST``, or starts one for the run (``pyflink-gcp emulators up`` prints the
variable for a long-lived one). Against real Bigtable, drop the variable and pass
``--project``/``--instance``: the sink then uses Application Default Credentials.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from datetime import timedelta
from typing import Any

from pyflink_gcp.bigtable import (
    BigtableSink,
    BigtableWriterOptions,
    CreateDisposition,
    RowMutationEntry,
    SetCell,
    TableCreateOptions,
)
from pyflink_gcp.routing import bigtable_tables, route_by_template
from pyflink_gcp.tools.emulators import emulators_for

DAY_MS = 86_400_000
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SENSORS = 50


def reading(i: int) -> dict[str, Any]:
    """The i-th reading: sensors report in turn; the stream interleaves three days (a late
    upload next to live data), one reading per second per day."""
    return {
        "sensor": f"sensor-{i % SENSORS:03d}",
        "ts": START_MS + (i % 3) * DAY_MS + (i // 3) * 1_000,
        "celsius": round(15 + (i % 97) / 10, 1),
    }


def day_of(ts_ms: int) -> str:
    return time.strftime("%Y%m%d", time.gmtime(ts_ms // 1000))


def to_row(event: dict[str, Any], context: Any) -> RowMutationEntry:
    """The serializer: row key ``sensor#timestamp``, one cell stamped with the reading's time."""
    return RowMutationEntry(
        f"{event['sensor']}#{event['ts']:013d}",
        [SetCell("m", b"celsius", str(event["celsius"]).encode(), event["ts"] * 1000)],
    )


def run_job(project: str, instance: str, count: int, parallelism: int = 2) -> None:
    from pyflink.common import Configuration
    from pyflink.common.watermark_strategy import WatermarkStrategy
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.datastream.connectors.number_seq import NumberSequenceSource

    conf = Configuration()
    # The Python workers must run this interpreter (the one with pyflink-gcp installed).
    # The Python workers run this interpreter (the venv with pyflink and pyflink-gcp), whether
    # or not the venv is activated; otherwise Flink starts the `python` on the PATH.
    conf.set_string("python.executable", sys.executable)
    conf.set_string("python.client.executable", sys.executable)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    env.enable_checkpointing(1_000)

    sink = (
        BigtableSink.builder()
        .set_sink_name("daily-readings")
        .set_destination_resolver(
            # The table of the reading's day, from its own timestamp (epoch ms): event time
            # only, so a replay routes the same way.
            route_by_template("readings_{ts:%Y%m%d}", bigtable_tables(project, instance))
        )
        .set_serializer(to_row)
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_table_create_options(TableCreateOptions(column_families={"m": 1}))
        .set_writer_options(
            BigtableWriterOptions.builder()
            .idle_timeout(timedelta(minutes=15))
            .max_created_destinations(31)
            .build()
        )
        .build()
    )
    source = NumberSequenceSource(0, count - 1)
    (
        env.from_source(source, WatermarkStrategy.no_watermarks(), "readings")
        .map(reading)
        .sink_to(sink)
    )
    env.execute("bigtable-daily-tables")


def summarize(project: str, instance: str) -> dict[str, int]:
    """Rows per table, read back with ReadRows, and one sample row."""
    from google.cloud.bigtable.data import BigtableDataClient, ReadRowsQuery

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "Connecting to Bigtable emulator at"
        client = BigtableDataClient(project=project)
    counts: dict[str, int] = {}
    try:
        for day in sorted({day_of(START_MS + d * DAY_MS) for d in range(3)}):
            table = client.get_table(instance, f"readings_{day}")
            rows = table.read_rows(ReadRowsQuery())
            counts[table.table_id] = len(rows)
            if rows:
                cell = rows[0].cells[0]
                print(
                    f"  {table.table_id}: {len(rows):6d} rows; first {rows[0].row_key.decode()}"
                    f" = {cell.value.decode()} °C at {cell.timestamp_micros} µs"
                )
    finally:
        client.close()
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default=os.environ.get("GOOGLE_CLOUD_PROJECT", "test-project"))
    parser.add_argument("--instance", default=f"demo-{int(time.time())}")
    parser.add_argument("--count", type=int, default=30_000, help="readings (at most 259200)")
    parser.add_argument("--parallelism", type=int, default=2)
    args = parser.parse_args(argv)
    if not 3 <= args.count <= 259_200:
        parser.error("--count must be between 3 and 259200 (three days of one reading a second)")
    with emulators_for(("bigtable",), "BIGTABLE_EMULATOR_HOST"):
        started = time.monotonic()
        run_job(args.project, args.instance, args.count, args.parallelism)
        print(
            f"wrote {args.count} readings to instance {args.instance} "
            f"in {time.monotonic() - started:.1f}s (including job startup):"
        )
        counts = summarize(args.project, args.instance)
    total = sum(counts.values())
    print(f"read back {total} rows from {len(counts)} daily tables")
    return 0 if total == args.count else 1


if __name__ == "__main__":
    sys.exit(main())
