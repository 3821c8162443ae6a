"""What one BigQuery table writer costs in memory, at 1,000 and 10,000 tables in one process.

    python bench/bigquery_memory.py [--tables 1000,10000] [--rows 10] [--trace]

The default-stream sink's subtask writer is opened in this process (no Flink), against the null
backend (bench/nullbackend/, started here on free loopback ports; every table has the schema of
``bench/scale.py``), with the sink's default options (``idle_timeout`` 15 min, no
``max_active_destinations``: every writer lives until the end). Records go round-robin over the
tables, ``--rows`` per table, then the writer flushes, as a checkpoint would; after each step
of ``--tables`` (cumulative: the 10,000 include the first 1,000) the script prints the growth
of this process's resident set over the baseline taken before the first table (after a warm-up
table, so the clients' own start-up is not counted), per table writer, the live writers, and
the step's seconds (its writes and its flush; every new table is looked up on the way).

``--trace`` runs the same with tracemalloc on and prints the Python allocation sites that hold
the most after the last step (protobuf's and Arrow's C++ allocations are not seen by it, so
the resident set is the figure; tracemalloc says which Python objects are the rest).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._nullbackend import running
from bench.scale import DATASET, PROJECT, backend_key, build_sink, configure
from pyflink_gcp.core.runtime_info import SubtaskInfo
from pyflink_gcp.core.sink_writer import SinkWriter


def rss_bytes() -> int:
    """This process's resident set now, from /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def settle() -> int:
    """The resident set once garbage is collected and the sender threads are done."""
    gc.collect()
    time.sleep(0.2)
    gc.collect()
    return rss_bytes()


def write_tables(writer: SinkWriter, first: int, last: int, rows: int) -> None:
    """``rows`` records for each table ``first..last-1`` (round-robin), then one flush."""
    for n in range(rows):
        for d in range(first, last):
            writer.write({"id": n * 100_000 + d, "dest": d, "payload": "x" * 40})
    writer.flush()


def check_counts(backend: Any, tables: int, rows: int) -> None:
    """The backend holds exactly ``rows`` rows of every table (a figure of writers that did not
    write would mean nothing)."""
    got = backend.counts()["records"].get("bigquery", {})
    want = {backend_key("bigquery", d): rows for d in range(tables)}
    wrong = {k: got.get(k, 0) for k, n in want.items() if got.get(k, 0) != n}
    if wrong or len(got) != tables:
        raise RuntimeError(
            f"the backend counted rows for {len(got)} tables, expected {tables} with {rows} "
            f"each; e.g. {dict(list(wrong.items())[:5])}"
        )


def measure(steps: list[int], rows: int, trace: bool) -> None:
    import tracemalloc

    with running(0.0) as backend:
        configure(backend, max(steps), 0.0)
        sink = build_sink("bigquery")
        config = sink._sink_config()
        writer = SinkWriter(config)
        writer.open(SubtaskInfo(config.sink_name, 0, 1))
        try:
            # A warm-up table, on its own index past the measured ones: the channels, threads
            # and imports of a first write are not a table writer's cost.
            warm = max(steps)
            write_tables(writer, warm, warm + 1, rows)
            backend.reset()
            if trace:
                tracemalloc.start(12)
            base = settle()
            print(
                f"baseline RSS {base / 2**20:.1f} MB (after one warm-up table); "
                f"{rows} rows per table, one flush per step"
            )
            print("| tables | live writers | RSS growth MB | bytes per table writer | step s |")
            print("| ---: | ---: | ---: | ---: | ---: |")
            done = 0
            for tables in steps:
                start = time.monotonic()
                write_tables(writer, done, tables, rows)
                seconds = time.monotonic() - start
                done = tables
                check_counts(backend, done, rows)
                grown = settle() - base
                live = len(writer.registry)
                print(
                    f"| {tables:,} | {live:,} | {grown / 2**20:.1f} | {grown / tables:,.0f} "
                    f"| {seconds:.1f} |"
                )
            if trace:
                snapshot = tracemalloc.take_snapshot()
                total = sum(stat.size for stat in snapshot.statistics("filename"))
                print(
                    f"\nPython allocations held after {done:,} tables: {total / done:,.0f} B per "
                    "table writer; the largest sites (tracemalloc):"
                )
                for stat in snapshot.statistics("lineno")[:15]:
                    frame = stat.traceback[0]
                    where = os.path.relpath(frame.filename)
                    print(
                        f"  {stat.size / done:8,.0f} B/table  {stat.count / done:6.1f} "
                        f"blocks/table  {where}:{frame.lineno}"
                    )
        finally:
            writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", default="1000,10000", help="cumulative table counts")
    parser.add_argument("--rows", type=int, default=10, help="rows per table (scale.py: 10)")
    parser.add_argument("--trace", action="store_true", help="tracemalloc's top sites too")
    args = parser.parse_args()
    steps = sorted({int(t) for t in args.tables.split(",") if t})
    import pyflink_gcp

    print(f"pyflink_gcp from {os.path.dirname(pyflink_gcp.__file__)}; {PROJECT}.{DATASET}.t*")
    measure(steps, args.rows, args.trace)


if __name__ == "__main__":
    main()
