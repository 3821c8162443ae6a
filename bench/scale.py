"""How each sink scales with its number of destinations, against a backend that is not the limit.

    python bench/scale.py [--sinks pubsub,bigquery,bigtable,cloudtasks,spanner]
                          [--destinations 1,100,1000,10000] [--latencies 0,20]
                          [--checkpoints 1000,10000] [--records 100000] [--parallelism 2]
                          [--max-active N] [--max-buffer-time-ms MS] [--max-buffered-records N]
                          [--prove] [--fused] [--bundle-size N] [--log-calls]

Every sink job runs against the null backend (bench/nullbackend/, started here on free
loopback ports): it answers every write after the chosen latency, stores nothing and counts
records per destination, so the figures are the sink's own and not an emulator's. Per sink,
number of destinations D (records round-robin over them), backend latency and checkpoint
interval, at parallelism 2, one job measures:

- records/s from a subtask's first record to its last flush (bench/_common.py spans), and the
  PyFlink no-op ceiling of the same job shape (the same source and record map into a no-op
  Python function in its own chain), measured in the same run at each checkpoint interval;
- the peak RSS, threads, open sockets and connections to the backend of each Python worker,
  sampled every 0.5 s from /proc (the workers are the Python processes under the
  MiniCluster's JVM; the backend's connections are matched in /proc/net/tcp);
- Flink's checkpoint statistics from its REST API (completed, average and largest duration),
  and the writer's full flushes: the median of its ``lastFlushMillis`` gauge's readings there,
  and the largest of those and of its ``maxFlushMillis`` gauge: how much of a checkpoint the
  flush is;
- the write calls the backend received (Publish, AppendRows requests, MutateRows, CreateTask,
  Commit), per completed checkpoint, the other calls (lookups, sessions, schema), and the
  AppendRows streams opened.

``--fused`` runs every sink with ``set_chain_with_upstream()`` (the record map inside the
writer's marker operator) and measures the ceiling in that shape too: a no-op fused with the map.

No figure is printed before the backend's per-destination counts equal the input exactly.
``--prove`` first runs each sink twice (fewest destinations, shortest checkpoint interval):
once with records carrying a reject marker (the backend refuses them, the sink's log-and-drop
handler drops them; the counts must equal the input less the marked records), once with the
third write call failed with UNAVAILABLE (the sink retries it; every record counted once).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import (
    SpanTimedFactory,
    free_port,
    new_spans,
    noop_ceiling,
    run_with_checkpoint_stats,
    shaped_env,
    span_rate,
    timed_factory,
    warm_up,
)
from bench._cpu import _processes, _tree
from bench._nullbackend import NullBackend, running
from pyflink_gcp.bigquery import (
    BigQuerySerializer,
    BigQuerySink,
    BigQueryWriterOptions,
    TableDestination,
)
from pyflink_gcp.bigquery.writer import BigQueryWriterFactory
from pyflink_gcp.bigtable import BigtableSink, BigtableWriterOptions, RowMutationEntry, SetCell
from pyflink_gcp.bigtable import TableDestination as BigtableTable
from pyflink_gcp.bigtable.writer import BigtableWriterFactory
from pyflink_gcp.cloudtasks import (
    CloudTasksSerializationSchema,
    CloudTasksSink,
    CloudTasksWriterOptions,
    QueueDestination,
)
from pyflink_gcp.cloudtasks.writer import CloudTasksWriterFactory
from pyflink_gcp.core import FailureHandler
from pyflink_gcp.pubsub import PubSubSink, PubSubWriterOptions, TopicDestination
from pyflink_gcp.pubsub.writer import PubSubWriterFactory
from pyflink_gcp.spanner import DatabaseDestination, Mutation, SpannerSink, SpannerWriterOptions
from pyflink_gcp.spanner.writer import SpannerWriterFactory
from tests.support.jobs import record_stream

PROJECT = "bench-project"
INSTANCE = "bench"
DATASET = "bench"
LOCATION = "us-central1"
#: Every record's payload length in bytes (``--payload-bytes``; 1,000 gives rows of about 1 KB).
PAYLOAD_BYTES: list[int] = [100]
MARKER = "REJECT-THIS-RECORD"
#: With --prove, records whose id is 1 modulo this carry the marker.
MARKED_EVERY = 997
SERVICES = ("pubsub", "bigquery", "bigtable", "cloudtasks", "spanner")
#: The call that carries records, per service (the backend's method names).
WRITE_CALLS = {
    "pubsub": "/google.pubsub.v1.Publisher/Publish",
    "bigquery": "/google.cloud.bigquery.storage.v1.BigQueryWrite/AppendRows",
    "bigtable": "/google.bigtable.v2.Bigtable/MutateRows",
    "cloudtasks": "/google.cloud.tasks.v2.CloudTasks/CreateTask",
    "spanner": "/google.spanner.v1.Spanner/Commit",
}
#: Every BigQuery table's schema, as the backend's REST tables.get answers it.
BIGQUERY_SCHEMA = [
    {"name": "id", "type": "INTEGER", "mode": "NULLABLE"},
    {"name": "dest", "type": "INTEGER", "mode": "NULLABLE"},
    {"name": "payload", "type": "STRING", "mode": "NULLABLE"},
]
SPANNER_COLUMNS = [{"name": "id", "type": "INT64"}, {"name": "payload", "type": "STRING(MAX)"}]


class Records:
    """The record map: record ``i`` goes to destination ``i % destinations``; with
    ``marked_every``, records whose id is 1 modulo it carry the reject marker."""

    def __init__(self, destinations: int, marked_every: int = 0) -> None:
        self.destinations = destinations
        self.marked_every = marked_every
        self.payload = "x" * PAYLOAD_BYTES[0]

    def __call__(self, i: int) -> dict[str, Any]:
        marked = self.marked_every and i % self.marked_every == 1
        return {
            "id": i,
            "dest": i % self.destinations,
            "payload": MARKER if marked else self.payload,
        }


def expected_counts(records: int, destinations: int, marked_every: int) -> dict[int, int]:
    """Records per destination index the backend must have accepted."""
    out = dict.fromkeys(range(destinations), 0)
    for i in range(records):
        if not (marked_every and i % marked_every == 1):
            out[i % destinations] += 1
    return {d: n for d, n in out.items() if n}


def backend_key(service: str, d: int) -> str:
    """The name the backend counts destination ``d`` of ``service`` under."""
    return {
        "pubsub": f"projects/{PROJECT}/topics/t{d:05d}",
        "bigquery": f"projects/{PROJECT}/datasets/{DATASET}/tables/t{d:05d}",
        "bigtable": f"projects/{PROJECT}/instances/{INSTANCE}/tables/t{d:05d}",
        "cloudtasks": f"projects/{PROJECT}/locations/{LOCATION}/queues/q{d:05d}",
        "spanner": f"projects/{PROJECT}/instances/{INSTANCE}/databases/bench/tables/t{d:05d}",
    }[service]


class Resolver:
    """Names record's destination, one destination object per index (built once: the cost of
    building names is the resolver's, not the sink's)."""

    def __init__(self, service: str) -> None:
        self.service = service
        self.cache: dict[int, Any] = {}

    def resolve(self, record: dict[str, Any], ctx: Any) -> Any:
        d = record["dest"]
        destination = self.cache.get(d)
        if destination is None:
            name = f"t{d:05d}"
            if self.service == "pubsub":
                destination = TopicDestination.of(PROJECT, name)
            elif self.service == "bigquery":
                destination = TableDestination.of(PROJECT, DATASET, name)
            elif self.service == "bigtable":
                destination = BigtableTable.of(PROJECT, INSTANCE, name)
            else:
                destination = QueueDestination.of(PROJECT, LOCATION, f"q{d:05d}")
            self.cache[d] = destination
        return destination


def json_bytes(record: dict[str, Any], ctx: Any = None) -> bytes:
    return json.dumps(record).encode()


def bigquery_row(record: dict[str, Any], ctx: Any = None) -> dict[str, Any]:
    return record


def bigtable_entry(record: dict[str, Any], ctx: Any = None) -> RowMutationEntry:
    return RowMutationEntry(
        f"{record['id']:09d}", [SetCell("cf", b"v", record["payload"].encode(), 1_000)]
    )


def spanner_mutation(record: dict[str, Any], ctx: Any = None) -> Mutation:
    return Mutation.insert_or_update(
        f"t{record['dest']:05d}", {"id": record["id"], "payload": record["payload"]}
    )


class TimedPubSub(SpanTimedFactory, PubSubWriterFactory):
    _config_fields = (*PubSubWriterFactory._config_fields, "spans_path")


class TimedBigQuery(SpanTimedFactory, BigQueryWriterFactory):
    _config_fields = (*BigQueryWriterFactory._config_fields, "spans_path")


class TimedBigtable(SpanTimedFactory, BigtableWriterFactory):
    _config_fields = (*BigtableWriterFactory._config_fields, "spans_path")


class TimedCloudTasks(SpanTimedFactory, CloudTasksWriterFactory):
    _config_fields = (*CloudTasksWriterFactory._config_fields, "spans_path")


class TimedSpanner(SpanTimedFactory, SpannerWriterFactory):
    _config_fields = (*SpannerWriterFactory._config_fields, "spans_path")


TIMED = {
    "pubsub": TimedPubSub,
    "bigquery": TimedBigQuery,
    "bigtable": TimedBigtable,
    "cloudtasks": TimedCloudTasks,
    "spanner": TimedSpanner,
}


#: The writer options type of each sink with a writer per destination (for --max-active).
OPTIONS = {
    "pubsub": PubSubWriterOptions,
    "bigquery": BigQueryWriterOptions,
    "bigtable": BigtableWriterOptions,
    "cloudtasks": CloudTasksWriterOptions,
}


def build_sink(
    service: str,
    max_active: int | None = None,
    max_buffer_time_ms: int | None = None,
    max_buffered_records: int | None = None,
    bigquery_channels: str | None = None,
    fused: bool = False,
    max_carry_time_ms: int | None = None,
    bigquery_declared: bool = False,
) -> Any:
    """The sink of ``service`` with its default options (but ``max_active_destinations``,
    ``max_buffer_time`` and ``max_buffered_records`` when given; the cap only for the sinks
    with a writer per destination; BigQuery's ``channel_count``, "none" or a number), fused
    with the record map (``set_chain_with_upstream()``) when ``fused``, ``max_carry_time`` when
    given, BigQuery's serializer declaring the tables' schema when ``bigquery_declared``, and
    the log-and-drop handler (only records carrying the reject marker are ever rejected)."""
    builder: Any
    if service == "pubsub":
        builder = PubSubSink.builder().set_serializer(json_bytes)
    elif service == "bigquery":
        serializer: Any = bigquery_row
        if bigquery_declared:
            serializer = BigQuerySerializer.of(
                bigquery_row,
                schema=[(f["name"], f["type"], f["mode"]) for f in BIGQUERY_SCHEMA],
            )
        builder = BigQuerySink.builder().set_serializer(serializer)
    elif service == "bigtable":
        builder = BigtableSink.builder().set_serializer(bigtable_entry)
    elif service == "cloudtasks":
        schema = CloudTasksSerializationSchema.http_target("https://hooks.example.com/bench")
        builder = CloudTasksSink.builder().set_serializer(
            schema.with_body(json_bytes, content_type="application/json")
        )
    else:
        database = DatabaseDestination.of(PROJECT, INSTANCE, "bench")
        builder = SpannerSink.builder().set_database(database).set_serializer(spanner_mutation)
    if service != "spanner":
        builder = builder.set_destination_resolver(Resolver(service))
    if service != "bigquery":
        bigquery_channels = None
    given = (
        max_active,
        max_buffer_time_ms,
        max_buffered_records,
        bigquery_channels,
        max_carry_time_ms,
    )
    if any(x is not None for x in given):
        options = (SpannerWriterOptions if service == "spanner" else OPTIONS[service]).builder()
        if max_active is not None and service != "spanner":
            options = options.max_active_destinations(max_active)
        if max_buffer_time_ms is not None:
            options = options.max_buffer_time(timedelta(milliseconds=max_buffer_time_ms))
        if max_buffered_records is not None:
            options = options.max_buffered_records(max_buffered_records)
        if bigquery_channels is not None:
            count = None if bigquery_channels == "none" else int(bigquery_channels)
            options = options.channel_count(count)
        if max_carry_time_ms is not None:
            options = options.max_carry_time(timedelta(milliseconds=max_carry_time_ms))
        builder = builder.set_writer_options(options.build())
    # Explicit either way: fused is the default shape, ``--fused`` off keeps the earlier one.
    builder = builder.set_chain_with_upstream(fused)
    return builder.set_failure_handler(FailureHandler.log_and_drop()).build()


# -- the Python workers, from /proc ----------------------------------------------------------


def _socket_inodes(ports: set[int]) -> set[str]:
    """Inodes of the established TCP connections whose remote port is one of ``ports``."""
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == "01" and int(cols[2].rsplit(":", 1)[1], 16) in ports:
                found.add(cols[9])
    return found


def _worker_reading(pid: int, backend_inodes: set[str]) -> dict[str, int] | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    sockets = [link[8:-1] for link in links if link.startswith("socket:[")]
    return {
        "rss_kb": int(fields.get("VmRSS", "0 kB").split()[0]),
        "threads": int(fields.get("Threads", "0")),
        "sockets": len(sockets),
        "backend_conns": sum(1 for inode in sockets if inode in backend_inodes),
    }


class WorkerSampler:
    """Samples every Python worker under the MiniCluster's JVM every 0.5 s while a job runs;
    :meth:`peaks` are the largest readings of any one worker."""

    def __init__(self, backend: NullBackend) -> None:
        self.ports = {backend.grpc_port, backend.http_port}
        self.readings: dict[int, list[dict[str, int]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> WorkerSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            children, names, _ = _processes()
            jvms = [p for p in _tree(children, os.getpid())[1:] if names.get(p) == "java"]
            inodes = _socket_inodes(self.ports)
            for jvm in jvms:
                for pid in _tree(children, jvm)[1:]:
                    if names.get(pid, "").startswith("python"):
                        reading = _worker_reading(pid, inodes)
                        if reading is not None:
                            self.readings.setdefault(pid, []).append(reading)
            self._stop.wait(0.5)

    def peaks(self) -> dict[str, int]:
        out = {"workers": len(self.readings)}
        for key in ("rss_kb", "threads", "sockets", "backend_conns"):
            out[key] = max((r[key] for rs in self.readings.values() for r in rs), default=0)
        return out


# -- jobs ------------------------------------------------------------------------------------


@dataclass
class Result:
    service: str
    destinations: int
    latency_ms: float
    checkpoint_ms: int
    rate: float
    ceiling: float
    checkpoints: dict[str, Any]
    write_calls: int
    other_calls: int
    streams: int
    workers: dict[str, int]
    notes: list[str] = field(default_factory=list)


def verify(service: str, backend: NullBackend, expected: dict[int, int]) -> dict[str, Any]:
    """The backend's counts, once its records of ``service`` equal ``expected`` per
    destination (waiting up to 5 s for answers still on their way); raises otherwise."""
    want = {backend_key(service, d): n for d, n in expected.items()}
    deadline = time.monotonic() + 5
    while True:
        counts = backend.counts()
        got = counts["records"].get(service, {})
        if got == want:
            return counts
        if time.monotonic() > deadline:
            missing = {k: (n, got.get(k, 0)) for k, n in want.items() if got.get(k, 0) != n}
            extra = sorted(set(got) - set(want))
            raise RuntimeError(
                f"{service}: the backend counted {sum(got.values()):,} records, the input holds "
                f"{sum(want.values()):,}; {len(missing)} destinations differ (expected, got), "
                f"e.g. {dict(list(missing.items())[:5])}; {len(extra)} unexpected, e.g. "
                f"{extra[:5]}; unimplemented calls: {counts['unimplemented']}"
            )
        time.sleep(0.2)


def configure(backend: NullBackend, destinations: int, latency_ms: float, **more: Any) -> None:
    backend.configure(
        latency_ms=latency_ms,
        reject_marker=more.get("reject_marker", ""),
        fail=more.get("fail", []),
        bigquery_schema=BIGQUERY_SCHEMA,
        spanner={
            "tables": [f"t{d:05d}" for d in range(destinations)],
            "columns": SPANNER_COLUMNS,
            "key": ["id"],
        },
    )
    backend.reset()


def sink_job(
    backend: NullBackend,
    service: str,
    records: int,
    destinations: int,
    latency_ms: float,
    checkpoint_ms: int,
    parallelism: int,
    workdir: str,
    prove: str = "",
    max_active: int | None = None,
    max_buffer_time_ms: int | None = None,
    max_buffered_records: int | None = None,
    bigquery_channels: str | None = None,
    fused: bool = False,
    max_carry_time_ms: int | None = None,
    bigquery_declared: bool = False,
) -> tuple[float, dict[str, Any], dict[str, Any], dict[str, int]]:
    """One sink job; its rate, checkpoint statistics, verified backend counts and worker peaks.

    ``prove="reject"``: records carrying the marker are refused and must be missing from the
    counts; ``prove="fail"``: the third write call fails with UNAVAILABLE and must be the only
    failed call, every record still counted once. Two jobs rather than one: a call failed
    while the sink is still isolating a refused record may be cancelled by the sink before
    it is answered, and would then prove nothing.
    """
    marked_every = MARKED_EVERY if prove == "reject" else 0
    fail = [{"method": WRITE_CALLS[service], "nth": 3, "code": "UNAVAILABLE"}]
    configure(
        backend,
        destinations,
        latency_ms,
        reject_marker=MARKER if prove == "reject" else "",
        fail=fail if prove == "fail" else [],
    )
    spans = new_spans(workdir, f"{service}-{destinations}")
    sink = build_sink(
        service,
        max_active,
        max_buffer_time_ms,
        max_buffered_records,
        bigquery_channels,
        fused,
        max_carry_time_ms,
        bigquery_declared,
    )
    sink._config.factory = timed_factory(TIMED[service], sink._config.factory, spans)
    port = free_port()
    shape = "fused" if fused else "own chain"
    extra = {"rest.port": str(port), "metrics.fetcher.update-interval": "500"}
    if max_carry_time_ms is not None:
        # The carried records are checkpoint state: more than the JobManager's 5 MB in-memory
        # checkpoints take.
        extra["execution.checkpointing.dir"] = f"file://{workdir}/checkpoints"
    env = shaped_env(shape, parallelism, 1_000, checkpoint_ms, BUNDLE_SIZE[0], extra=extra)
    record_stream(env, records, Records(destinations, marked_every)).sink_to(sink)
    with WorkerSampler(backend) as sampler:
        stats = run_with_checkpoint_stats(env, f"bench-scale-{service}-{destinations}", port)
    counts = verify(service, backend, expected_counts(records, destinations, marked_every))
    if prove == "reject":
        marked = sum(1 for i in range(records) if i % marked_every == 1)
        refused = sum(counts["refused"].get(service, {}).values())
        if refused < marked:
            raise RuntimeError(f"{service}: {marked} marked records but {refused} refused")
        print(
            f"  proof {service}: {records - marked:,} records counted per destination = the "
            f"input less its {marked} marked records (refused {refused:,} times: a sink that "
            "splits a refused request sends a record again in each part)",
            flush=True,
        )
    elif prove == "fail":
        failed = counts["failed_calls"]
        if failed != {WRITE_CALLS[service]: 1}:
            raise RuntimeError(f"{service}: failed calls {failed}, expected one write call")
        print(
            f"  proof {service}: {records:,} records counted once each per destination with "
            "write call 3 failed (UNAVAILABLE) and retried",
            flush=True,
        )
    return span_rate(spans, records), stats, counts, sampler.peaks()


#: The job's ``python.fn-execution.bundle.size`` (``--bundle-size``): the record map's and the
#: no-op's bundles (the writer's operator sets its own). Unless given, PyFlink's default
#: (100,000 records, or 1 s) in a chain of its own and 1,000 fused (``shaped_env``).
BUNDLE_SIZE: list[int | None] = [None]


def ceiling_job(
    backend: NullBackend,
    records: int,
    checkpoint_ms: int,
    parallelism: int,
    workdir: str,
    fused: bool = False,
) -> tuple[float, dict[str, int]]:
    shape = "fused" if fused else "own chain"
    env = shaped_env(shape, parallelism, 1_000, checkpoint_ms, BUNDLE_SIZE[0])
    spans = new_spans(workdir, f"ceiling-{checkpoint_ms}")
    with WorkerSampler(backend) as sampler:
        rate = noop_ceiling(env, record_stream(env, records, Records(1)), spans, shape, records)
    return rate, sampler.peaks()


# -- the table -------------------------------------------------------------------------------

COLUMNS = (
    ("sink", 10, "{r.service}"),
    ("dest", 6, "{r.destinations}"),
    ("lat ms", 6, "{r.latency_ms:g}"),
    ("ckpt s", 6, "{ckpt_s:g}"),
    ("records/s", 10, "{r.rate:,.0f}"),
    ("ceiling", 9, "{r.ceiling:,.0f}"),
    ("ratio", 6, "{ratio:.2f}"),
    ("ckpts", 5, "{done}"),
    ("ckpt avg/max ms", 16, "{avg}/{top}"),
    ("flush med/max ms", 16, "{flush}"),
    ("writes", 8, "{r.write_calls:,}"),
    ("writes/ckpt", 11, "{per_ckpt}"),
    ("other", 6, "{r.other_calls:,}"),
    ("streams", 7, "{r.streams:,}"),
    ("RSS MB", 7, "{rss:.0f}"),
    ("threads", 7, "{w[threads]}"),
    ("sockets", 7, "{w[sockets]}"),
    ("conns", 5, "{w[backend_conns]}"),
)


def flush_text(readings: list[float], largest: float = 0.0) -> str:
    """The writer's full flushes: the median of the ``lastFlushMillis`` readings and the largest
    of those and ``maxFlushMillis`` (``largest``), in ms, or "-"."""
    if not readings:
        return "-"
    return f"{statistics.median(readings):.0f}/{max(*readings, largest):.0f}"


def row(r: Result) -> str:
    done = int(r.checkpoints.get("completed", 0))
    values = {
        "r": r,
        "ckpt_s": r.checkpoint_ms / 1000,
        "ratio": r.rate / r.ceiling if r.ceiling else 0.0,
        "done": done,
        "avg": f"{r.checkpoints['avg_ms']:.0f}" if done else "-",
        "top": f"{r.checkpoints['max_ms']:.0f}" if done else "-",
        "per_ckpt": f"{r.write_calls / done:,.1f}" if done else "-",
        "flush": flush_text(
            r.checkpoints.get("flush_ms", []), r.checkpoints.get("flush_max_ms", 0)
        ),
        "rss": r.workers["rss_kb"] / 1024,
        "w": r.workers,
    }
    return "  ".join(fmt.format(**values).rjust(width) for _, width, fmt in COLUMNS)


def header() -> str:
    return "  ".join(name.rjust(width) for name, width, _ in COLUMNS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sinks", default=",".join(SERVICES))
    parser.add_argument("--destinations", default="1,100,1000,10000")
    parser.add_argument("--latencies", default="0,20", help="backend latencies in ms")
    parser.add_argument("--checkpoints", default="1000,10000", help="checkpoint intervals in ms")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument(
        "--max-active", type=int, default=None, help="max_active_destinations of every sink"
    )
    parser.add_argument(
        "--max-buffer-time-ms", type=int, default=None, help="max_buffer_time of every sink"
    )
    parser.add_argument(
        "--max-buffered-records", type=int, default=None, help="max_buffered_records of every sink"
    )
    parser.add_argument(
        "--max-carry-time-ms",
        type=int,
        default=None,
        help="max_carry_time of every sink (records wait across checkpoints, in checkpoint state)",
    )
    parser.add_argument(
        "--bigquery-channels",
        default="",
        help="BigQuery channel_count values to run one after another, e.g. none,4 (none: a "
        "connection per table while it sends); default: the sink's default",
    )
    parser.add_argument(
        "--bigquery-declared-schema",
        action="store_true",
        help="BigQuery's serializer declares the tables' schema (a new table of a dataset "
        "already met is then written without asking it first)",
    )
    parser.add_argument("--prove", action="store_true", help="first prove the counting per sink")
    parser.add_argument(
        "--bundle-size",
        type=int,
        help="the job's python.fn-execution.bundle.size: the map's and the no-op's bundles",
    )
    parser.add_argument(
        "--fused",
        action="store_true",
        help="sinks with set_chain_with_upstream(), against the no-op ceiling fused with the map",
    )
    parser.add_argument("--log-calls", action="store_true", help="backend logs each new method")
    parser.add_argument(
        "--payload-bytes",
        type=int,
        default=PAYLOAD_BYTES[0],
        help="each record's payload length (1000: rows of about 1 KB, the size of Dataflow's "
        "published per-worker figures)",
    )
    args = parser.parse_args()
    BUNDLE_SIZE[0] = args.bundle_size
    PAYLOAD_BYTES[0] = args.payload_bytes
    services = [s for s in args.sinks.split(",") if s]
    unknown = set(services) - set(SERVICES)
    if unknown:
        parser.error(f"unknown sinks {sorted(unknown)}; choose from {SERVICES}")
    destinations = [int(d) for d in args.destinations.split(",")]
    latencies = [float(x) for x in args.latencies.split(",")]
    checkpoints = [int(c) for c in args.checkpoints.split(",")]
    warnings.filterwarnings("ignore")
    results: list[Result] = []
    # Started before the first job, so the MiniCluster's workers inherit its variables.
    with running(log_calls=args.log_calls) as backend, tempfile.TemporaryDirectory() as workdir:
        warm_up()
        if args.prove:
            for service in services:
                for proof in ("reject", "fail"):
                    sink_job(
                        backend, service, args.records, destinations[0], 0.0, checkpoints[0],
                        args.parallelism, workdir, prove=proof, fused=args.fused,
                    )  # fmt: skip
        for checkpoint_ms in checkpoints:
            ceiling, ceiling_workers = ceiling_job(
                backend, args.records, checkpoint_ms, args.parallelism, workdir, args.fused
            )
            print(
                f"PyFlink no-op ceiling ({'fused with the map' if args.fused else 'own chain'}), "
                f"{checkpoint_ms / 1000:g} s checkpoints: "
                f"{ceiling:,.0f} records/s, worker RSS {ceiling_workers['rss_kb'] / 1024:.0f} MB, "
                f"{ceiling_workers['threads']} threads",
                flush=True,
            )
            print(header(), flush=True)
            channels = [c for c in args.bigquery_channels.split(",") if c] or [None]
            runs = [(s, c if s == "bigquery" else None) for s in services for c in
                    (channels if s == "bigquery" else [None])]  # fmt: skip
            for service, channel_count in runs:
                label = service if channel_count is None else f"bq ch={channel_count}"
                for d in destinations:
                    for latency in latencies:
                        rate, stats, counts, workers = sink_job(
                            backend, service, args.records, d, latency, checkpoint_ms,
                            args.parallelism, workdir, max_active=args.max_active,
                            max_buffer_time_ms=args.max_buffer_time_ms,
                            max_buffered_records=args.max_buffered_records,
                            bigquery_channels=channel_count, fused=args.fused,
                            max_carry_time_ms=args.max_carry_time_ms,
                            bigquery_declared=args.bigquery_declared_schema,
                        )  # fmt: skip
                        writes = counts["calls"].get(WRITE_CALLS[service], 0)
                        result = Result(
                            label, d, latency, checkpoint_ms, rate, ceiling, stats, writes,
                            sum(counts["calls"].values()) - writes,
                            sum(counts["streams"].values()), workers,
                        )  # fmt: skip
                        results.append(result)
                        print(row(result), flush=True)
    cap = "" if args.max_active is None else f", max_active_destinations {args.max_active:,}"
    if args.max_buffer_time_ms is not None:
        cap += f", max_buffer_time {args.max_buffer_time_ms:,} ms"
    if args.max_buffered_records is not None:
        cap += f", max_buffered_records {args.max_buffered_records:,}"
    if args.bigquery_declared_schema:
        cap += ", BigQuery's schema declared by its serializer"
    if args.max_carry_time_ms is not None:
        cap += f", max_carry_time {args.max_carry_time_ms:,} ms"
    print(
        f"\n{args.records:,} records a job, parallelism {args.parallelism}{cap}, "
        f"{'the writer fused with the record map, ' if args.fused else ''}"
        f"{'' if args.bundle_size is None else f'job bundle size {args.bundle_size:,}, '}"
        f"{args.payload_bytes:,}-byte payloads, records round-robin "
        "over the destinations; every row verified: the backend's per-destination counts equal "
        "the input. ratio = records/s / the no-op ceiling at that checkpoint interval; flush: the "
        "writer's full flushes (checkpoint markers, end of input): the median of its "
        "lastFlushMillis readings / the largest of those and of maxFlushMillis; writes: "
        "Publish, AppendRows requests, MutateRows, CreateTask or Commit calls; other: lookups, "
        "sessions, schema queries; streams: AppendRows streams opened; RSS, threads, sockets, conns (to the backend): the largest "
        "reading of one Python worker during the job.\n"
    )
    print(header())
    for result in results:
        print(row(result))


if __name__ == "__main__":
    main()
