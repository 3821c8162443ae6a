"""BigQuery sink throughput against its two ceilings, with 1, 30 and 300 tables.

Measured in one run, against the same emulator, with the same records and rows:

- **raw client**: the Storage Write client library appending the same rows outside Flink, one
  pipelined AppendRows stream per table (requests of 10,000 rows), tables spread over 8
  threads — what the service path allows without Flink. Measured twice: with protobuf rows (a
  message class built from the table schema) and with Arrow record batches; the faster one is
  the ceiling.
- **PyFlink ceiling**: the same source and record map into a Python process function that does
  nothing, in the sink's job shape: what a Python operator allows on this machine. By default
  the sink's writer starts an operator chain of its own (records cross the JVM between the map
  and the writer); with ``set_chain_with_upstream()`` PyFlink fuses it into the map. Both
  shapes are measured, each against its own ceiling.
- **sink**: the same job with ``BigQuerySink`` (parallelism 2, checkpoints every second, tables
  created beforehand, so each subtask fetches each table's schema once), in both shapes.
- **buffered** (``--methods default,buffered``): the sink with ``WriteMethod.BUFFERED_STREAM``
  (exactly once: BUFFERED streams flushed after each checkpoint), in the shapes it allows (its
  own chain, keyed; not fused, which would lose the checkpoint markers it needs), next to the
  default stream at the same checkpoint interval and table counts. For every sink job the
  checkpoint statistics of Flink's REST API are printed too (completed checkpoints, average and
  largest end-to-end duration): what each method adds to a checkpoint.
- **loads** (``--methods loads``): ``WriteMethod.FILE_LOADS`` staging newline-delimited JSON
  files in the GCS emulator and loading them with load jobs after each checkpoint (with
  ``min_load_interval`` 0: a load per table per checkpoint), with the load jobs per table per
  hour that interval implies and the staging cost per row (bytes staged).

Job throughput is timed inside the job (first record to the end of the final flush), so job
start-up is not counted. Ratios are against the lower of the two ceilings (target 0.8), and
300 tables against 1 table (target 0.7). The row encoding is profiled on its own: the
per-row cost of the sink's encoder against a bare protobuf message construction.

Run: ``python bench/bigquery.py [--records N] [--tables 1,30,300] [--methods default,buffered]``. Uses the emulator named by
``BIGQUERY_EMULATOR_HOST`` / ``BIGQUERY_STORAGE_EMULATOR_HOST`` or starts one.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
import warnings
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from google.cloud.bigquery import SchemaField

from bench._common import (
    SpanTimedFactory,
    free_port,
    new_spans,
    noop_ceiling,
    run_with_checkpoint_stats,
    shaped_env,
    span_rate,
    span_total,
    timed_factory,
    warm_up,
)
from pyflink_gcp.bigquery import (
    BigQueryFileLoadsOptions,
    BigQuerySink,
    BigQueryWriterOptions,
    TableDestination,
    WriteMethod,
)
from pyflink_gcp.bigquery.file_loads import FileLoadsWriterFactory
from pyflink_gcp.bigquery.rows import RowEncoder
from pyflink_gcp.bigquery.writer import BigQueryWriterFactory, BufferedBigQueryWriterFactory
from pyflink_gcp.tools.emulators import emulators_for
from tests.support.jobs import record_stream

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


class TimedFactory(SpanTimedFactory, BigQueryWriterFactory):
    """The sink's factory, noting when its subtask saw the first record and finished, and how
    many append requests it sent."""

    # The spans file travels with the configuration to the workers.
    _config_fields = (*BigQueryWriterFactory._config_fields, "spans_path")

    def create_writer(self, destination: Any) -> Any:
        writer = super().create_writer(destination)
        self.__dict__.setdefault("_timed_writers", []).append(writer)
        return writer

    def span_counts(self) -> dict[str, int]:
        return {"requests": sum(w.requests_sent for w in self.__dict__.get("_timed_writers", ()))}


class TimedBufferedFactory(TimedFactory, BufferedBigQueryWriterFactory):
    """:class:`TimedFactory` of ``WriteMethod.BUFFERED_STREAM``."""

    _config_fields = TimedFactory._config_fields


METHODS = {
    "default": WriteMethod.STORAGE_API_AT_LEAST_ONCE,
    "buffered": WriteMethod.BUFFERED_STREAM,
    "loads": WriteMethod.FILE_LOADS,
}


class TimedLoadsFactory(SpanTimedFactory, FileLoadsWriterFactory):
    """The FILE_LOADS factory, noting its span and the files and bytes it staged."""

    _config_fields = (*FileLoadsWriterFactory._config_fields, "spans_path")

    def span_counts(self) -> dict[str, int]:
        return {"requests": self.files_staged, "bytes": self.bytes_staged}


def staging_bucket() -> str:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage  # type: ignore[attr-defined]

    client = storage.Client(
        project=PROJECT,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": os.environ["STORAGE_EMULATOR_HOST"]},
    )
    name = f"bench-{uuid.uuid4().hex[:8]}"
    client.create_bucket(name)
    client.close()
    return name


def bigquery_emulator() -> Any:
    return emulators_for(
        ("bigquery", "gcs"),
        "BIGQUERY_EMULATOR_HOST",
        "BIGQUERY_STORAGE_EMULATOR_HOST",
        "STORAGE_EMULATOR_HOST",
    )


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


def raw_client(records: int, tables: int, row_format: str) -> float:
    """The Storage Write client library, fed the same rows from a plain loop."""
    import grpc
    import pyarrow as pa
    from google.cloud.bigquery_storage_v1 import BigQueryWriteClient, types
    from google.cloud.bigquery_storage_v1.services.big_query_write.transports import (
        BigQueryWriteGrpcTransport,
    )

    from pyflink_gcp.bigquery.arrow_rows import ArrowEncoder

    dataset = create_tables(tables)
    encoder = RowEncoder(SCHEMA)  # only for its descriptor and message class
    message = encoder._message
    schema = types.ProtoSchema(proto_descriptor=encoder.descriptor)
    client = BigQueryWriteClient(
        transport=BigQueryWriteGrpcTransport(
            channel=grpc.insecure_channel(os.environ["BIGQUERY_STORAGE_EMULATOR_HOST"])
        )
    )
    arrow_schema = ArrowEncoder(SCHEMA).serialized_schema
    arrow_types = [pa.int64(), pa.string(), pa.float64(), pa.timestamp("us", tz="UTC")]
    names = [f.name for f in SCHEMA]
    start = time.perf_counter()
    per_table: list[list[Any]] = [[] for _ in range(tables)]
    for i in range(records):
        row = to_row(to_record(i))
        per_table[i % tables].append(
            message(**row).SerializeToString() if row_format == "proto" else row
        )

    def request(stream: str, rows: list[Any]) -> Any:
        if row_format == "proto":
            return types.AppendRowsRequest(
                write_stream=stream,
                proto_rows=types.AppendRowsRequest.ProtoData(
                    writer_schema=schema, rows=types.ProtoRows(serialized_rows=rows)
                ),
            )
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array([r[n] for r in rows], type=t)
                for n, t in zip(names, arrow_types, strict=True)
            ],
            names=names,
        )
        return types.AppendRowsRequest(
            write_stream=stream,
            arrow_rows=types.AppendRowsRequest.ArrowData(
                writer_schema=types.ArrowSchema(serialized_schema=arrow_schema),
                rows=types.ArrowRecordBatch(serialized_record_batch=batch.serialize().to_pybytes()),
            ),
        )

    def append(t: int) -> None:
        stream = f"projects/{PROJECT}/datasets/{dataset}/tables/t{t:03d}/streams/_default"
        rows = per_table[t]
        requests = (request(stream, rows[k : k + 10_000]) for k in range(0, len(rows), 10_000))
        for response in client.append_rows(requests):
            assert not response.error.code, response.error

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(append, range(tables)))
    elapsed = time.perf_counter() - start
    client.transport.grpc_channel.close()
    return records / elapsed


SHAPES = ("own chain", "fused", "keyed")


class TableKey:
    """The key of the keyed shape: the record's table, so each table has one writing subtask."""

    def __init__(self, tables: int) -> None:
        self.tables = tables

    def __call__(self, record: dict[str, Any]) -> int:
        return int(record["i"] % self.tables)


#: The sink's default buffered rows: the job's bundle size in the fused shape.
FUSED_BUNDLE = 20_000
#: The jobs' checkpoint interval (``--checkpoint-ms``); the sink's ``max_buffer_time`` follows
#: it when it is longer than the default second.
CHECKPOINT_MS = 1_000


def pyflink_ceiling(records: int, workdir: str, shape: str, tables: int = 30) -> float:
    """The no-op Python operator after the record map, in the sink's job shape (see
    :func:`bench._common.noop_ceiling`). ``keyed``: the stream is keyed by table first
    (``key_by``), so each table is written by one subtask: a table's rows are not split over
    two writers' requests."""
    env = shaped_env(shape, 2, FUSED_BUNDLE, CHECKPOINT_MS)
    stream = record_stream(env, records, to_record)
    if shape == "keyed":
        stream = stream.key_by(TableKey(tables))
    return noop_ceiling(env, stream, new_spans(workdir, f"ceiling-{shape}"), shape, records)


def sink_job(records: int, tables: int, workdir: str, shape: str, method: str = "default") -> float:
    dataset = create_tables(tables)
    spans = new_spans(workdir, f"sink{tables}-{shape}-{method}")
    builder = BigQuerySink.builder().set_write_method(METHODS[method])
    if method == "loads":
        builder = builder.set_file_loads_options(
            BigQueryFileLoadsOptions.builder()
            .staging_location(f"gs://{staging_bucket()}/bench")
            .spool_directory(os.path.join(workdir, "spool"))
            .min_load_interval(timedelta(0))
            .build()
        )
    else:
        # Explicit endpoints: each cell may run against an emulator of its own (on new
        # ports), and the Python workers keep the environment of the JVM that started them.
        builder = builder.set_storage_endpoint(
            "http://" + os.environ["BIGQUERY_STORAGE_EMULATOR_HOST"]
        )
    sink = (
        builder.set_destination_resolver(TableOf(dataset, tables))
        .set_serializer(to_row)
        .set_chain_with_upstream(shape == "fused")
        .set_writer_options(
            BigQueryWriterOptions.builder()
            .max_buffer_time(timedelta(milliseconds=max(CHECKPOINT_MS, 1_000)))
            .build()
        )
        .set_rest_endpoint("http://" + os.environ["BIGQUERY_EMULATOR_HOST"])
        .build()
    )
    timed = {"buffered": TimedBufferedFactory, "loads": TimedLoadsFactory}.get(method, TimedFactory)
    sink._config.factory = timed_factory(timed, sink._config.factory, spans)
    port = free_port()
    env = shaped_env(shape, 2, FUSED_BUNDLE, CHECKPOINT_MS, extra={"rest.port": str(port)})
    stream = record_stream(env, records, to_record)
    if shape == "keyed":
        stream = stream.key_by(TableKey(tables))
    stream.sink_to(sink)
    stats = run_with_checkpoint_stats(env, f"bench-bigquery-sink-{tables}", port)
    client = _rest()
    landed = sum(
        next(
            iter(client.query(f"SELECT COUNT(*) AS n FROM `{PROJECT}.{dataset}.t{t:03d}`").result())
        )["n"]
        for t in range(tables)
    )
    client.close()
    if landed != records:
        raise SystemExit(f"sink with {tables} tables: {landed} of {records} rows landed")
    rate = span_rate(spans, records)
    CHECKPOINTS[f"{method} {shape} {tables}"] = stats
    if method == "loads":
        print(
            f"  loads {shape} {tables}: {span_total(spans, 'requests')} files staged, "
            f"{span_total(spans, 'bytes') / records:.0f} bytes staged per row; at most one load "
            f"job per table per checkpoint: {3_600_000 / max(CHECKPOINT_MS, 1):,.0f} per table "
            "per hour at this interval",
            flush=True,
        )
    print(
        f"  sink {method} {shape} {tables}: {span_total(spans, 'requests')} requests or files, "
        f"{rate:,.0f}/s; checkpoints: {stats.get('completed', 0)} completed, "
        f"{stats.get('avg_ms', float('nan')):.0f} ms average, "
        f"{stats.get('max_ms', float('nan')):.0f} ms largest",
        flush=True,
    )
    return rate


#: Flink's checkpoint statistics of each sink job, by ``"<method> <shape> <tables>"``.
CHECKPOINTS: dict[str, dict] = {}


def encoding_cost(rows: int = 100_000) -> tuple[float, float, float]:
    """Microseconds per row: the sink's protobuf encoder, a bare message construction, and the
    sink's Arrow encoder (checks included) on requests of 5,000 rows."""
    from pyflink_gcp.bigquery.arrow_rows import ArrowEncoder

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
    arrow = ArrowEncoder(SCHEMA)
    start = time.perf_counter()
    for k in range(0, rows, 5_000):
        assert arrow.encode(data[k : k + 5_000]) is not None
    arrow_us = (time.perf_counter() - start) / rows * 1e6
    return sink_us, bare_us, arrow_us


def shape_tables(shape: str, table_counts: list[int]) -> list[int]:
    """Keyed by table, one table leaves a subtask idle: that shape is run for many tables only."""
    return [t for t in table_counts if t > 1] if shape == "keyed" else table_counts


def compare_methods(
    methods: list[str], shapes: list[str], table_counts: list[int], results: dict[str, float]
) -> None:
    """The exactly-once methods next to the default stream, with each job's checkpoints."""
    for method in ("buffered", "loads"):
        if method not in methods:
            continue
        print(
            f"\n{'shape':>9}  {'tables':>6}  {'default':>9}  {method:>9}  "
            f"{method + '/default':>16}  checkpoint avg ms (default, {method})"
        )
        for shape in (s for s in shapes if s != "fused"):
            for tables in shape_tables(shape, table_counts):
                other = results[f"{method} {shape} {tables}"]
                default = results.get(f"sink {shape} {tables}")
                ratio = f"{other / default:>16.2f}" if default else f"{'-':>16}"
                ck = [
                    CHECKPOINTS.get(f"{m} {shape} {tables}", {}).get("avg_ms", float("nan"))
                    for m in ("default", method)
                ]
                print(
                    f"{shape:>9}  {tables:>6}  {default or float('nan'):>9,.0f}  "
                    f"{other:>9,.0f}  {ratio}  {ck[0]:.0f}, {ck[1]:.0f}"
                )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="BigQuery sink benchmark")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--tables", default="1,30,300", help="comma-separated table counts")
    parser.add_argument("--repeat", type=int, default=2, help="Flink runs per cell (best kept)")
    parser.add_argument(
        "--checkpoint-ms",
        type=int,
        default=1_000,
        help="checkpoint interval of every job; the sink's max_buffer_time follows it above 1 s",
    )
    parser.add_argument(
        "--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}"
    )
    parser.add_argument(
        "--methods", default="default", help="comma-separated, of default, buffered, loads"
    )
    args = parser.parse_args(argv)
    global CHECKPOINT_MS
    CHECKPOINT_MS = args.checkpoint_ms
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip() in SHAPES]
    methods = [m.strip() for m in args.methods.split(",") if m.strip() in METHODS]
    table_counts = [int(t) for t in args.tables.split(",")]
    warnings.filterwarnings("ignore")
    sink_us, bare_us, arrow_us = encoding_cost()
    print(
        f"row encoding: {sink_us:.2f} us/row in the sink's protobuf encoder, {bare_us:.2f} us/row "
        f"for a bare protobuf message ({sink_us / bare_us:.2f}x), {arrow_us:.2f} us/row in the "
        "sink's Arrow encoder"
    )
    results: dict[str, float] = {}

    def best(key: str, run: Any) -> None:
        results[key] = max(run() for _ in range(args.repeat))
        print(f"{key}: {results[key]:,.0f}/s", flush=True)

    with bigquery_emulator(), tempfile.TemporaryDirectory() as workdir:
        warm_up()
        for tables in table_counts:
            for row_format in ("proto", "arrow"):
                rate = raw_client(args.records, tables, row_format)
                results[f"raw {row_format} {tables}"] = rate
                print(f"raw client, {row_format}, {tables} tables: {rate:,.0f}/s", flush=True)
            results[f"raw {tables}"] = max(
                results[f"raw proto {tables}"], results[f"raw arrow {tables}"]
            )
        for shape in shapes:
            best(
                f"pyflink {shape}",
                lambda shape=shape: pyflink_ceiling(args.records, workdir, shape),
            )
            for tables in shape_tables(shape, table_counts):
                if "default" in methods:
                    best(
                        f"sink {shape} {tables}",
                        lambda shape=shape, tables=tables: sink_job(
                            args.records, tables, workdir, shape
                        ),
                    )
                for method in ("buffered", "loads"):
                    if method in methods and shape != "fused":
                        best(
                            f"{method} {shape} {tables}",
                            lambda shape=shape, tables=tables, method=method: sink_job(
                                args.records, tables, workdir, shape, method
                            ),
                        )

    print(
        f"\n{args.records:,} records per run, parallelism 2, checkpoints every "
        f"{CHECKPOINT_MS:,} ms (records/s, ratios to the ceilings)"
    )
    print(
        f"{'shape':>9}  {'tables':>6}  {'sink':>9}  {'raw client':>10}  {'pyflink':>9}  "
        f"{'sink/raw':>8}  {'sink/pyflink':>12}  {'sink/lower':>10}  target"
    )
    ok = True
    if "default" not in methods:
        compare_methods(methods, shapes, table_counts, results)
        return 0
    for shape in shapes:
        ceiling = results[f"pyflink {shape}"]
        for tables in shape_tables(shape, table_counts):
            sink = results[f"sink {shape} {tables}"]
            raw = results[f"raw {tables}"]
            lower = min(raw, ceiling)
            met = sink / lower >= TARGET
            ok = ok and met
            print(
                f"{shape:>9}  {tables:>6}  {sink:>9,.0f}  {raw:>10,.0f}  {ceiling:>9,.0f}  "
                f"{sink / raw:>8.2f}  {sink / ceiling:>12.2f}  {sink / lower:>10.2f}  "
                f"{'met' if met else 'MISSED'} (>= {TARGET})"
            )
    if 1 in table_counts and max(table_counts) > 1:
        most = max(table_counts)
        raw_ratio = results[f"raw {most}"] / results["raw 1"]
        for shape in shapes:
            # Keyed by table, one table would be written by one subtask: compare with 1 table
            # in the default shape.
            one = results.get(f"sink {'own chain' if shape == 'keyed' else shape} 1")
            if one is None:
                continue
            ratio = results[f"sink {shape} {most}"] / one
            met = ratio >= TABLES_TARGET
            ok = ok and met
            print(
                f"{shape}: sink with {most} tables / 1 table: {ratio:.2f}  "
                f"{'met' if met else 'MISSED'} (>= {TABLES_TARGET}); the raw client's own "
                f"{most}/1: {raw_ratio:.2f}"
            )
    compare_methods(methods, shapes, table_counts, results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
