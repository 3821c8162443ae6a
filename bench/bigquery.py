"""BigQuery sink throughput against its two ceilings, with 1, 30 and 300 tables.

Measured in one run, against the same emulator, with the same records and rows:

- **raw client**: the Storage Write client library appending the same rows outside Flink: rows
  encoded with a protobuf class built from the table schema, one pipelined AppendRows stream per
  table (requests of 10,000 rows), tables spread over 8 threads — what the service path allows
  without Flink.
- **PyFlink ceiling**: the same source and record map into a Python process function that does
  nothing: what a Python operator allows on this machine.
- **sink**: the same job with ``BigQuerySink`` (parallelism 2, checkpoints every second, tables
  created beforehand, so each subtask fetches each table's schema once).

Job throughput is timed inside the job (first record to the end of the final flush), so job
start-up is not counted. Ratios are against the lower of the two ceilings (target 0.8), and
300 tables against 1 table (target 0.7). The row encoding is profiled on its own: the
per-row cost of the sink's encoder against a bare protobuf message construction.

Run: ``python bench/bigquery.py [--records N] [--tables 1,30,300]``. Uses the emulator named by
``BIGQUERY_EMULATOR_HOST`` / ``BIGQUERY_STORAGE_EMULATOR_HOST`` or starts one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from google.cloud.bigquery import SchemaField  # noqa: E402

from bench._common import SpanTimedNoOp, log_span, span_rate  # noqa: E402
from pyflink_gcp.bigquery import (  # noqa: E402
    BigQuerySink,
    TableDestination,
)
from pyflink_gcp.bigquery.rows import RowEncoder  # noqa: E402
from pyflink_gcp.bigquery.writer import BigQueryWriterFactory, TableWriter  # noqa: E402
from pyflink_gcp.core import SubtaskInfo  # noqa: E402
from tests.support.jobs import make_env, record_stream  # noqa: E402

PROJECT = "test-project"
TARGET = 0.8
TABLES_TARGET = 0.7
SCHEMA = [
    SchemaField("id", "INT64"),
    SchemaField("sensor", "STRING"),
    SchemaField("value", "FLOAT64"),
    SchemaField("ts", "TIMESTAMP"),
]
BASE_MICROS = 1_704_067_200_000_000


def to_record(i: int) -> dict[str, Any]:
    return {"i": i, "sensor": f"s{i % 1000:03d}", "value": i * 0.5}


def to_row(record: dict[str, Any], context: Any = None) -> dict[str, Any]:
    return {
        "id": record["i"],
        "sensor": record["sensor"],
        "value": record["value"],
        "ts": BASE_MICROS + record["i"],
    }


class TableOf:
    def __init__(self, dataset: str, tables: int) -> None:
        self.dataset = dataset
        self.tables = tables

    def resolve(self, record: dict[str, Any], context: Any) -> TableDestination:
        return TableDestination.of(PROJECT, self.dataset, f"t{record['i'] % self.tables:03d}")


class TimedFactory(BigQueryWriterFactory):
    """The sink's factory, noting when its subtask saw the first record and finished."""

    spans_path: str
    _first: float | None = None

    def create_writer(self, destination: TableDestination) -> TableWriter:
        if self._first is None:
            self._first = time.time()
        return super().create_writer(destination)

    def open(self, info: SubtaskInfo) -> None:
        self._first = None
        super().open(info)

    def close(self) -> None:
        if self._first is not None:
            log_span(self.spans_path, self._first, time.time())
        super().close()


@contextlib.contextmanager
def bigquery_emulator() -> Iterator[None]:
    if os.environ.get("BIGQUERY_EMULATOR_HOST") and os.environ.get(
        "BIGQUERY_STORAGE_EMULATOR_HOST"
    ):
        yield
        return
    from pyflink_gcp.emulators import EmulatorStack

    with EmulatorStack(services=("bigquery",), keep_logs=False) as stack:
        os.environ.update(stack.env)
        yield


def _rest() -> Any:
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import bigquery

    return bigquery.Client(
        project=PROJECT,
        credentials=AnonymousCredentials(),
        client_options=ClientOptions(api_endpoint="http://" + os.environ["BIGQUERY_EMULATOR_HOST"]),
    )


def create_tables(tables: int) -> str:
    """A fresh dataset with ``tables`` tables (fresh, so appends do not grow with old data)."""
    from google.cloud import bigquery

    client = _rest()
    dataset = f"bench_{uuid.uuid4().hex[:8]}"
    client.create_dataset(dataset)
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda t: client.create_table(
                    bigquery.Table(f"{PROJECT}.{dataset}.t{t:03d}", schema=SCHEMA)
                ),
                range(tables),
            )
        )
    client.close()
    return dataset


def raw_client(records: int, tables: int) -> float:
    """The Storage Write client library, fed the same rows from a plain loop."""
    import grpc
    from google.cloud.bigquery_storage_v1 import BigQueryWriteClient, types
    from google.cloud.bigquery_storage_v1.services.big_query_write.transports import (
        BigQueryWriteGrpcTransport,
    )

    dataset = create_tables(tables)
    encoder = RowEncoder(SCHEMA)  # only for its descriptor and message class
    message = encoder._message
    schema = types.ProtoSchema(proto_descriptor=encoder.descriptor)
    client = BigQueryWriteClient(
        transport=BigQueryWriteGrpcTransport(
            channel=grpc.insecure_channel(os.environ["BIGQUERY_STORAGE_EMULATOR_HOST"])
        )
    )
    start = time.perf_counter()
    per_table: list[list[bytes]] = [[] for _ in range(tables)]
    for i in range(records):
        per_table[i % tables].append(message(**to_row(to_record(i))).SerializeToString())

    def append(t: int) -> None:
        stream = f"projects/{PROJECT}/datasets/{dataset}/tables/t{t:03d}/streams/_default"
        rows = per_table[t]
        requests = (
            types.AppendRowsRequest(
                write_stream=stream,
                proto_rows=types.AppendRowsRequest.ProtoData(
                    writer_schema=schema,
                    rows=types.ProtoRows(serialized_rows=rows[k : k + 10_000]),
                ),
            )
            for k in range(0, len(rows), 10_000)
        )
        for response in client.append_rows(requests):
            assert not response.error.code, response.error

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(append, range(tables)))
    elapsed = time.perf_counter() - start
    client.transport.grpc_channel.close()
    return records / elapsed


def pyflink_ceiling(records: int, workdir: str) -> float:
    spans = os.path.join(workdir, "ceiling.jsonl")
    env = make_env(parallelism=2, checkpoint_ms=1_000, process_workers=True)
    record_stream(env, records, to_record).process(SpanTimedNoOp(spans))
    env.execute("bench-pyflink-ceiling")
    return span_rate(spans, records)


def sink_job(records: int, tables: int, workdir: str) -> float:
    dataset = create_tables(tables)
    spans = os.path.join(workdir, f"sink{tables}.jsonl")
    sink = (
        BigQuerySink.builder()
        .set_destination_resolver(TableOf(dataset, tables))
        .set_serializer(to_row)
        .build()
    )
    timed = TimedFactory.__new__(TimedFactory)
    timed.__dict__.update(sink._config.factory.__getstate__())
    timed.spans_path = spans
    sink._config.factory = timed
    env = make_env(parallelism=2, checkpoint_ms=1_000, process_workers=True)
    record_stream(env, records, to_record).sink_to(sink)
    env.execute(f"bench-bigquery-sink-{tables}")
    client = _rest()
    landed = sum(
        next(
            iter(client.query(f"SELECT COUNT(*) AS n FROM `{PROJECT}.{dataset}.t{t:03d}`").result())
        )["n"]
        for t in range(tables)
    )
    client.close()
    if landed < records:
        raise SystemExit(f"sink with {tables} tables: only {landed} of {records} rows landed")
    return span_rate(spans, records)


def encoding_cost(rows: int = 100_000) -> tuple[float, float]:
    """Microseconds per row: the sink's encoder, and a bare message construction."""
    encoder = RowEncoder(SCHEMA)
    message = encoder._message
    data = [to_row(to_record(i)) for i in range(rows)]
    start = time.perf_counter()
    for row in data:
        encoder.encode(row)
    sink_us = (time.perf_counter() - start) / rows * 1e6
    start = time.perf_counter()
    for row in data:
        message(**row).SerializeToString()
    bare_us = (time.perf_counter() - start) / rows * 1e6
    return sink_us, bare_us


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="BigQuery sink benchmark")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--tables", default="1,30,300", help="comma-separated table counts")
    args = parser.parse_args(argv)
    table_counts = [int(t) for t in args.tables.split(",")]
    warnings.filterwarnings("ignore")
    sink_us, bare_us = encoding_cost()
    print(
        f"row encoding: {sink_us:.2f} us/row in the sink's encoder, {bare_us:.2f} us/row for a "
        f"bare protobuf message ({sink_us / bare_us:.2f}x)"
    )
    results: dict[str, float] = {}
    with bigquery_emulator(), tempfile.TemporaryDirectory() as workdir:
        for tables in table_counts:
            results[f"raw {tables}"] = raw_client(args.records, tables)
            print(f"raw client, {tables} tables: {results[f'raw {tables}']:,.0f}/s", flush=True)
        results["pyflink"] = pyflink_ceiling(args.records, workdir)
        print(f"pyflink ceiling: {results['pyflink']:,.0f}/s", flush=True)
        for tables in table_counts:
            results[f"sink {tables}"] = sink_job(args.records, tables, workdir)
            print(f"sink, {tables} tables: {results[f'sink {tables}']:,.0f}/s", flush=True)

    ceiling = results["pyflink"]
    print(f"\n{args.records:,} records per run, parallelism 2 (records/s, ratios to the ceilings)")
    print(
        f"{'tables':>6}  {'sink':>9}  {'raw client':>10}  {'pyflink':>9}  "
        f"{'sink/raw':>8}  {'sink/pyflink':>12}  {'sink/lower':>10}  target"
    )
    ok = True
    for tables in table_counts:
        sink = results[f"sink {tables}"]
        raw = results[f"raw {tables}"]
        lower = min(raw, ceiling)
        met = sink / lower >= TARGET
        ok = ok and met
        print(
            f"{tables:>6}  {sink:>9,.0f}  {raw:>10,.0f}  {ceiling:>9,.0f}  {sink / raw:>8.2f}  "
            f"{sink / ceiling:>12.2f}  {sink / lower:>10.2f}  {'met' if met else 'MISSED'} "
            f"(>= {TARGET})"
        )
    if 1 in table_counts and max(table_counts) > 1:
        most = max(table_counts)
        ratio = results[f"sink {most}"] / results["sink 1"]
        met = ratio >= TABLES_TARGET
        ok = ok and met
        print(
            f"sink with {most} tables / 1 table: {ratio:.2f}  {'met' if met else 'MISSED'} "
            f"(>= {TABLES_TARGET})"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
