"""One Apache Beam Python job for bench/peer_beam.py: ``WriteToBigQuery(table=callable)``.

Runs in the Beam virtualenv that bench/peer_beam.py creates (apache-beam conflicts with the
apache-beam that PyFlink pins), so it imports nothing of this repository and only the standard
library besides Beam:

    python beam_job.py --method FILE_LOADS --records 100000 --project P --dataset D \
        --temp-location gs://bucket/tmp --spans out.jsonl [--emulator-pids 1,2] [--beam-option=--runner=R]

It makes the same records as the PyFlink side (``make_record``) from ``beam.Create`` over the
ids, routes each to its day table (``events_<day>``, 7 tables created beforehand) with a
callable ``table``, and writes with ``method`` (``FILE_LOADS`` or ``STREAMING_INSERTS``).

Beam's clients are pointed at the emulators:

- its BigQuery calls go through two clients: the apitools ``BigqueryV2`` (tables, load jobs;
  its ``BASE_URL`` is a class attribute, set here to the emulator's REST endpoint) and
  google-cloud-bigquery's ``Client`` (``insert_rows_json`` of streaming inserts), which reads
  ``BIGQUERY_EMULATOR_HOST`` as a URL (the caller passes ``http://host:port``);
- its GCS client (FILE_LOADS' temporary files) is google-cloud-storage's, which reads
  ``STORAGE_EMULATOR_HOST``;
- both ask ``google.auth.default()`` for credentials (Beam retries it with backoff for about
  half a minute when there are none), so it answers anonymous credentials here, as every
  emulator client of the project uses.

Timing: the record map notes the wall clock and the CPU of each process in this process's tree
(this process and any process it started) at its first record; the script notes them again
once the pipeline finished, and appends one JSON line with both to ``--spans``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any

DAYS = 7
#: The environment variable naming the process whose tree this job's CPU is read from.
ROOT_PID = "PEER_BEAM_ROOT_PID"
# The repository's root, for bench/_cpu.py (standard library only), shared with the PyFlink side.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench._cpu import processes_cpu, tree_cpu  # noqa: E402


def emulators_cpu(roots: list[int]) -> float:
    """CPU seconds so far of the process trees under ``roots`` (the emulators)."""
    return sum(map(tree_cpu, roots))


def make_record(i: int) -> dict[str, Any]:
    """The record both sides write (bench/peer_beam.py has the same function)."""
    return {
        "id": i,
        "day": f"2024030{1 + i % DAYS}",
        "customer": f"c{i % 1000}",
        "amount": i * 0.25,
        "payload": "x" * 100,
    }


class MakeRecord:
    """The record map: notes the first record's time and CPU (once per process)."""

    def __init__(self, spans: str, emulator_pids: list[int]) -> None:
        self.spans = spans
        self.emulator_pids = emulator_pids
        self.seen = False

    def __call__(self, i: int) -> dict[str, Any]:
        if not self.seen:
            self.seen = True
            first = {
                "start": time.time(),
                "cpu_start": processes_cpu(int(os.environ[ROOT_PID])),
                "emulator_start": emulators_cpu(self.emulator_pids),
            }
            with open(self.spans + ".first", "a") as f:
                f.write(json.dumps(first) + "\n")
        return make_record(i)


class DayTable:
    """``table=callable``: the record's day table."""

    def __init__(self, project: str, dataset: str) -> None:
        self.prefix = f"{project}:{dataset}.events_"

    def __call__(self, row: dict[str, Any]) -> str:
        return self.prefix + row["day"]


def point_at_emulators(project: str) -> None:
    """Beam's BigQuery and GCS clients to the emulators, with anonymous credentials."""
    import google.auth
    from apache_beam.io.gcp.internal.clients import bigquery as apitools_bigquery
    from google.auth.credentials import AnonymousCredentials

    host = os.environ["BIGQUERY_EMULATOR_HOST"]  # http://127.0.0.1:PORT
    apitools_bigquery.BigqueryV2.BASE_URL = host.rstrip("/") + "/bigquery/v2/"

    def anonymous(*args: Any, **kwargs: Any) -> tuple[Any, str]:
        return AnonymousCredentials(), project

    google.auth.default = anonymous


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--method", choices=("FILE_LOADS", "STREAMING_INSERTS"), required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--project", required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--temp-location", required=True)
    parser.add_argument("--spans", required=True)
    parser.add_argument("--emulator-pids", default="")
    parser.add_argument(
        "--beam-option", action="append", default=[], help="a Beam pipeline option (repeatable)"
    )
    parser.add_argument("--log-level", default="WARNING", help="Beam's logging level")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(message)s")
    emulator_pids = [int(p) for p in args.emulator_pids.split(",") if p]
    os.environ[ROOT_PID] = str(os.getpid())
    point_at_emulators(args.project)

    import apache_beam as beam
    from apache_beam.io.gcp.bigquery import BigQueryDisposition, WriteToBigQuery
    from apache_beam.options.pipeline_options import PipelineOptions

    options = [f"--project={args.project}", f"--temp_location={args.temp_location}"]
    options.extend(args.beam_option)
    pipeline = beam.Pipeline(options=PipelineOptions(options))
    (
        pipeline
        | "ids" >> beam.Create(range(args.records))
        | "records" >> beam.Map(MakeRecord(args.spans, emulator_pids))
        | "write"
        >> WriteToBigQuery(
            table=DayTable(args.project, args.dataset),
            method=getattr(WriteToBigQuery.Method, args.method),
            create_disposition=BigQueryDisposition.CREATE_NEVER,
            write_disposition=BigQueryDisposition.WRITE_APPEND,
            custom_gcs_temp_location=args.temp_location,
        )
    )
    result = pipeline.run()
    result.wait_until_finish()
    end = {
        "end": time.time(),
        "cpu_end": processes_cpu(os.getpid()),
        "emulator_end": emulators_cpu(emulator_pids),
        "runner": type(result).__module__ + "." + type(result).__name__,
    }
    with open(args.spans + ".first") as f:
        firsts = [json.loads(line) for line in f]
    first = min(firsts, key=lambda s: s["start"])
    with open(args.spans, "a") as f:
        f.write(json.dumps({**first, **end, "first_records": len(firsts)}) + "\n")


if __name__ == "__main__":
    sys.exit(main())
