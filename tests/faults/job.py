"""The fault suite's job: records 0..N-1 at a steady rate into one sink, on a standalone cluster.

Submitted with ``flink run -py``, so it imports nothing from the tests: the TaskManagers' Python
workers see only the job's environment and what this script ships by value as ``__main__``.
Each record is ``{"id": i}``; even and odd ids go to two destinations (topics, tables,
queues), so every sink runs more than one writer.

The source's map (:class:`Steady`) hands records on at ``--rate`` records a second per
subtask the whole time the suite injects faults, so each fault lands on buffered, in-flight
and (exactly once) prepared-but-uncommitted records. Two logs go into the run's control
directory, each line written before the record moves on: the map logs every record it hands
to the sink's operator (one file per subtask attempt), and the sink's writer every record it
takes (:class:`SinkLog`, called from the resolver or serializer, which run in the writer's
process; one file per writer instance). The suite reads them for the records a replay handed
the sink again and for the records exposed at each fault. Once the suite drops a ``finish``
file there, the map drops the rest of the input (logging the ids it dropped), so a run lasts
as long as its faults need and no input flows without them. The map raises once whenever the
suite drops a ``raise`` file there: a task exception at a moment the suite chooses (the first
subtask to rename the file claims it).

``--break`` makes the job's sink wrong on purpose, to show the suite's checks fail:
``flush`` skips the sink's flush at checkpoint barriers and its sends between them (records
wait in the writer's buffer until the end of input, so a failover loses what the restored
checkpoint covered); ``idempotence`` gives every write attempt a fresh key
(Cloud Tasks task id, Bigtable cell timestamp, Spanner key column), so a replay adds a copy.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import uuid
from datetime import timedelta
from typing import Any

from pyflink.common import Configuration
from pyflink.common.watermark_strategy import WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource
from pyflink.datastream.functions import FlatMapFunction, RuntimeContext

#: What ``--unaligned`` sets.
UNALIGNED = {
    "execution.checkpointing.unaligned.enabled": "true",
    "execution.checkpointing.unaligned.forced": "true",
    "execution.checkpointing.aligned-checkpoint-timeout": "0 s",
}

#: The destinations: a record goes to the one of its id's parity.
PARITIES = ("even", "odd")
#: What ``--break`` takes.
BREAKS = ("none", "flush", "idempotence")
#: The control directory's folder of emission logs.
LOGS = "log"
#: How far behind its rate a subtask may catch up at once, in seconds of input.
CATCH_UP_S = 1.0
#: The map's bundle time (ms): how soon its records reach the sink.
MAP_BUNDLE_MS = 100


def parity(record: dict[str, Any]) -> str:
    return PARITIES[record["id"] % 2]


class Steady(FlatMapFunction):
    """Turns a number into its record at ``rate`` records a second (this subtask), logging it
    (``<id> <epoch ms>``, written before the record leaves for the sink's operator); after the
    suite's
    ``finish`` file, drops the rest, logging the dropped ids as ranges (``d <first> <last>``).
    One file per subtask attempt.

    The rate is kept by the clock, not by a sleep per record: the subtask sleeps only when it
    is ahead of ``rate``, so records leave in ordinary bundles, and a subtask that was held up
    (a slow checkpoint, backpressure) catches up at most :data:`CATCH_UP_S` of input at once:
    a larger burst after every restore would queue the next checkpoint's barrier behind it.
    """

    def __init__(self, rate: float, control: str) -> None:
        self.rate = rate
        self.control = control
        self.request = os.path.join(control, "raise")
        self.finish = os.path.join(control, "finish")
        self.fd = -1
        self.started = 0.0
        self.handed = 0
        self.finished = False
        self.dropped: list[int] = []

    def open(self, runtime_context: RuntimeContext) -> None:
        self.fd = open_log(self.control, f"map-{runtime_context.get_index_of_this_subtask()}")
        self.started = time.monotonic()

    def close(self) -> None:
        self._write_dropped()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _write_dropped(self) -> None:
        if self.dropped and self.fd >= 0:
            os.write(self.fd, f"d {self.dropped[0]} {self.dropped[-1]}\n".encode())
        self.dropped = []

    def flat_map(self, value: int) -> Any:
        if not self.finished:
            self.finished = os.path.exists(self.finish)
        if self.finished:
            # A subtask's split is a run of consecutive ids: one line per run of drops.
            if self.dropped and (value != self.dropped[-1] + 1 or len(self.dropped) >= 10000):
                self._write_dropped()
            self.dropped.append(value)
            return
        ahead = self.started + self.handed / self.rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
        elif ahead < -CATCH_UP_S:
            # Held up longer (a restore, a slow start): catch up one second, not a burst.
            self.started -= ahead + CATCH_UP_S
        self.handed += 1
        if os.path.exists(self.request):
            claimed = os.path.join(self.control, f"raised-{time.time_ns()}-{os.getpid()}")
            try:
                os.rename(self.request, claimed)
            except OSError:
                pass  # another subtask claimed it
            else:
                raise RuntimeError(f"injected task exception at record {value} (fault suite)")
        os.write(self.fd, f"{value} {time.time_ns() // 1_000_000}\n".encode())
        yield {"id": int(value)}


def open_log(control: str, kind: str) -> int:
    """A new emission log of this process in the control directory (appended, unbuffered)."""
    logs = os.path.join(control, LOGS)
    os.makedirs(logs, exist_ok=True)
    name = f"{kind}-{os.getpid()}-{time.time_ns()}.log"
    return os.open(os.path.join(logs, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND)


class SinkLog:
    """Logs each record as the sink's writer takes it (``<id> <epoch ms>``), and applies
    ``--break flush`` in the writer's process.

    Called from the resolver (or Spanner's serializer), which the writer calls once per record
    as it takes it, before buffering it: a record the sink got is in a log even when its
    process is killed the next moment (``os.write``, no buffer of ours). Each deserialized copy
    (one per writer subtask attempt) opens its own file on its first record.
    """

    def __init__(self, control: str, broken: str) -> None:
        self.control = control
        self.broken = broken
        self.fd = -1

    def __getstate__(self) -> dict[str, Any]:
        return {"control": self.control, "broken": self.broken, "fd": -1}

    def __call__(self, record: dict[str, Any]) -> None:
        if self.fd < 0:
            if self.broken == "flush":
                skip_flush_at_checkpoints()
            self.fd = open_log(self.control, "sink")
        os.write(self.fd, f"{record['id']} {time.time_ns() // 1_000_000}\n".encode())


def skip_flush_at_checkpoints() -> None:
    """``--break flush``: the sink's writer neither flushes at a checkpoint barrier nor sends
    what comes due between barriers; only the end of input flushes.

    Applied in the writer's own process, on its first record. A job that runs to its end
    without a failover still writes every record (at the end); a failover restores a
    checkpoint whose records were never sent, and loses them: what the suite must catch.
    """
    from pyflink_gcp.core import operators, sink_writer

    original = operators.WriterProcessFunction._on_marker
    if getattr(original, "broken", False):
        return

    def on_marker(self: Any, marker_id: int) -> Any:
        if marker_id == operators.END_OF_INPUT:
            return original(self, marker_id)
        self.markers += 1
        writer = self._writer
        writer.flushed_at = time.monotonic()  # bundle ends keep to send_due (a no-op now)
        return writer.prepare(marker_id) if writer.commits else None

    def send_nothing(self: Any, now: float = 0.0) -> int:
        return 0

    on_marker.broken = True  # type: ignore[attr-defined]
    operators.WriterProcessFunction._on_marker = on_marker  # type: ignore[method-assign]
    sink_writer.SinkWriter.send_due = send_nothing  # type: ignore[method-assign,assignment]
    sink_writer.SinkWriter._send_due = send_nothing  # type: ignore[method-assign]


def carried(args: argparse.Namespace) -> timedelta | None:
    """The writers' ``max_carry_time`` (``--max-carry-s``): None, unless the configuration
    carries records across checkpoints in the writer operator's state."""
    return None if args.max_carry_s is None else timedelta(seconds=args.max_carry_s)


def buffered(args: argparse.Namespace) -> timedelta:
    """The writers' ``max_buffer_time``: also their operator's bundle time, i.e. how often the
    writer takes the records waiting in its operator's input. At the default (1 s, the
    checkpoint interval) the barrier always comes first, so the writer takes each second's
    records at the barrier and flushes them there, and a failover never replays a record the
    writer had taken: the duplicate checks would have nothing to catch. 100 ms (the suite's
    default) lets the writer take, buffer and send records between barriers."""
    return timedelta(milliseconds=args.max_buffer_ms)


def fresh() -> str:
    """A key no other write attempt has: a replay of the record gets another one."""
    return uuid.uuid4().hex


class ByParity:
    """The resolver: the destination of each parity, built once; logs each record the writer
    takes (:class:`SinkLog`)."""

    def __init__(self, destinations: dict[str, Any], log: SinkLog) -> None:
        self.destinations = destinations
        self.log = log

    def resolve(self, record: dict[str, Any], context: Any) -> Any:
        self.log(record)
        return self.destinations[parity(record)]


def pubsub_sink(args: argparse.Namespace, deadline: timedelta) -> Any:
    from pyflink_gcp.pubsub import (
        PubSubSerializationSchema,
        PubSubSink,
        PubSubWriterOptions,
        TopicDestination,
    )

    topics = {p: TopicDestination.of(args.project, f"{args.name}-{p}") for p in PARITIES}
    return (
        PubSubSink.builder()
        .set_sink_name("faults-pubsub")
        .set_destination_resolver(ByParity(topics, SinkLog(args.control, args.broken)))
        .set_serializer(PubSubSerializationSchema.payload(lambda r: json.dumps(r).encode()))
        .set_writer_options(
            PubSubWriterOptions.builder()
            .retry_deadline(deadline)
            .max_buffer_time(buffered(args))
            .max_carry_time(carried(args))
            .build()
        )
        .build()
    )


def bigquery_sink(args: argparse.Namespace, deadline: timedelta) -> Any:
    from google.cloud.bigquery import SchemaField

    from pyflink_gcp.bigquery import (
        BigQueryFileLoadsOptions,
        BigQuerySerializer,
        BigQuerySink,
        BigQueryWriterOptions,
        TableDestination,
        WriteMethod,
    )

    tables = {p: TableDestination.of(args.project, args.name, p) for p in PARITIES}
    builder = (
        BigQuerySink.builder()
        .set_sink_name(f"faults-bigquery-{args.method.lower()}")
        .set_destination_resolver(ByParity(tables, SinkLog(args.control, args.broken)))
        .set_serializer(
            BigQuerySerializer.of(lambda r: r, schema=[SchemaField("id", "INT64", mode="REQUIRED")])
        )
        .set_write_method(WriteMethod[args.method])
        .set_writer_options(
            BigQueryWriterOptions.builder()
            .retry_deadline(deadline)
            .max_buffer_time(buffered(args))
            .max_carry_time(carried(args))
            .build()
        )
    )
    if args.method == "FILE_LOADS":
        options = (
            BigQueryFileLoadsOptions.builder()
            .staging_location(f"gs://{args.bucket}/{args.name}")
            .spool_directory(os.path.join(args.control, "spool"))
        )
        if args.min_load_interval_s >= 0:  # negative: the option's default (90 s)
            options.min_load_interval(timedelta(seconds=args.min_load_interval_s))
        builder.set_file_loads_options(options.build())
    return builder.build()


class TaskId:
    """A record's task id: a hash of the run and the id, so a replay names the same task
    (``--break idempotence``: a fresh one per attempt, so a replay creates a second task)."""

    def __init__(self, run: str, broken: str) -> None:
        self.run = run
        self.broken = broken

    def __call__(self, record: dict[str, Any], context: Any) -> str:
        suffix = fresh() if self.broken == "idempotence" else ""
        return hashlib.sha256(f"{self.run}/{record['id']}{suffix}".encode()).hexdigest()[:32]


def cloudtasks_sink(args: argparse.Namespace, deadline: timedelta) -> Any:
    from pyflink_gcp.cloudtasks import (
        CloudTasksSerializationSchema,
        CloudTasksSink,
        CloudTasksWriterOptions,
        QueueDestination,
    )

    queues = {
        p: QueueDestination.of(args.project, "us-central1", f"{args.name}-{p}") for p in PARITIES
    }
    return (
        CloudTasksSink.builder()
        .set_sink_name("faults-cloudtasks")
        .set_destination_resolver(ByParity(queues, SinkLog(args.control, args.broken)))
        .set_serializer(
            CloudTasksSerializationSchema.http_target(args.target)
            .with_body(lambda r, ctx: json.dumps(r).encode(), content_type="application/json")
            .with_task_id(TaskId(args.name, args.broken))
        )
        .set_writer_options(
            CloudTasksWriterOptions.builder()
            .retry_deadline(deadline)
            .max_buffer_time(buffered(args))
            .max_carry_time(carried(args))
            .build()
        )
        .build()
    )


#: Bigtable's "the server assigns the timestamp" (a replay writes a new version).
SERVER_TIME = -1


class BigtableCells:
    """The serializer: row ``<id>`` gets two cells.

    ``m:id`` is stamped with a timestamp derived from the id, the idempotent way a user writes
    Bigtable (a replay writes the same cell, not a new version; ``--break idempotence`` stamps
    it with the write's own time instead). ``r:seen`` takes the server's time, so every write
    of the record that reached the table left a version there: the replays the idempotent cell
    hides, counted.
    """

    def __init__(self, broken: str) -> None:
        self.broken = broken

    def __call__(self, record: dict[str, Any], context: Any) -> Any:
        from pyflink_gcp.bigtable import RowMutationEntry, SetCell

        i = record["id"]
        # --break idempotence: the write's own time (Bigtable keeps milliseconds).
        own = time.time_ns() // 1_000_000 * 1000
        stamp = own if self.broken == "idempotence" else (i + 1) * 1000
        cells: list[Any] = [
            SetCell("m", b"id", str(i).encode(), stamp),
            SetCell("r", b"seen", b"", SERVER_TIME),
        ]
        return RowMutationEntry(f"{i:08d}", cells)


def bigtable_sink(args: argparse.Namespace, deadline: timedelta) -> Any:
    from pyflink_gcp.bigtable import (
        BigtableSink,
        BigtableWriterOptions,
        CreateDisposition,
        TableCreateOptions,
        TableDestination,
    )

    tables = {p: TableDestination.of(args.project, args.name, p) for p in PARITIES}
    return (
        BigtableSink.builder()
        .set_sink_name("faults-bigtable")
        .set_destination_resolver(ByParity(tables, SinkLog(args.control, args.broken)))
        .set_serializer(BigtableCells(args.broken))
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        # Every version kept, so a replay that wrote a second version is seen.
        .set_table_create_options(TableCreateOptions(column_families={"m": None, "r": None}))
        .set_writer_options(
            BigtableWriterOptions.builder()
            .retry_deadline(deadline)
            .max_buffer_time(buffered(args))
            .max_carry_time(carried(args))
            .build()
        )
        .build()
    )


class SpannerWrites:
    """The serializer: an upsert of the record into the run's table, keyed ``(id, k)``, and an
    audit row keyed ``(id, attempt)`` with a fresh ``attempt`` per call.

    ``k`` is empty, so a replay upserts the same row (the idempotence users rely on; ``--break
    idempotence`` makes it fresh per call, so a replay adds a row). The audit row is new at
    every serializer call, and upserted so that the sink's own retry of a commit writes it
    again rather than failing: its rows count the replays the table's upsert hides. It logs
    each record the writer takes (Spanner's sink has a fixed database, no resolver).
    """

    def __init__(self, table: str, log: SinkLog) -> None:
        self.table = table
        self.broken = log.broken
        self.log = log

    def __call__(self, record: dict[str, Any], context: Any) -> Any:
        from pyflink_gcp.spanner import Mutation

        self.log(record)
        i = record["id"]
        k = fresh() if self.broken == "idempotence" else ""
        return [
            Mutation.insert_or_update(self.table, {"id": i, "k": k, "parity": parity(record)}),
            Mutation.insert_or_update(f"{self.table}_audit", {"id": i, "attempt": fresh()}),
        ]


def spanner_sink(args: argparse.Namespace, deadline: timedelta) -> Any:
    from pyflink_gcp.spanner import DatabaseDestination, SpannerSink, SpannerWriterOptions

    return (
        SpannerSink.builder()
        .set_sink_name("faults-spanner")
        .set_database(DatabaseDestination.of(args.project, args.instance, args.database))
        .set_serializer(SpannerWrites(args.name, SinkLog(args.control, args.broken)))
        .set_writer_options(
            SpannerWriterOptions.builder()
            .retry_deadline(deadline)
            .max_buffer_time(buffered(args))
            .max_carry_time(carried(args))
            .build()
        )
        .build()
    )


SINKS = {
    "pubsub": pubsub_sink,
    "bigquery": bigquery_sink,
    "cloudtasks": cloudtasks_sink,
    "bigtable": bigtable_sink,
    "spanner": spanner_sink,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sink", choices=sorted(SINKS), required=True)
    parser.add_argument("--method", default="STORAGE_API_AT_LEAST_ONCE", help="BigQuery only")
    parser.add_argument("--project", required=True)
    parser.add_argument("--name", required=True, help="the run's topic/table/queue prefix")
    parser.add_argument("--control", required=True, help="the suite's control directory")
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=100.0, help="records/s per subtask")
    parser.add_argument("--checkpoint-ms", type=int, default=1000)
    parser.add_argument("--max-buffer-ms", type=int, default=100, help="writers' max_buffer_time")
    parser.add_argument("--retry-deadline-s", type=float, default=120.0)
    parser.add_argument(
        "--max-carry-s", type=float, default=None, help="writers' max_carry_time (default: none)"
    )
    parser.add_argument("--bucket", default="", help="FILE_LOADS staging bucket")
    parser.add_argument("--target", default="", help="Cloud Tasks HTTP target")
    parser.add_argument("--instance", default="", help="Spanner instance")
    parser.add_argument("--database", default="", help="Spanner database")
    parser.add_argument(
        "--min-load-interval-s",
        type=float,
        default=0.0,
        help="FILE_LOADS min_load_interval; negative leaves the option's default (90 s)",
    )
    parser.add_argument(
        "--unaligned", action="store_true", help="forced unaligned checkpoints, no alignment"
    )
    parser.add_argument(
        "--break",
        dest="broken",
        choices=BREAKS,
        default="none",
        help="test only: break the sink's checkpoint flush or its idempotence",
    )
    args = parser.parse_args()

    conf = Configuration()
    # The map's output leaves its Python worker at each of its bundle ends. At PyFlink's
    # default (a bundle a second) the sink would get each second's records only as the next
    # checkpoint's barrier forced the bundle out, so a fault would find it holding nothing the
    # checkpoint did not cover. Ending the map's bundles every 100 ms hands the records on as
    # they come, as a Java source would; the writer's own operator keeps the sink's settings.
    conf.set_string("python.fn-execution.bundle.time", str(MAP_BUNDLE_MS))
    # And at most that much input per bundle: a bundle ends only once the Python map went
    # through every record the source already handed it, and a barrier waits for that; at the
    # default size (100,000) the source would hand over minutes of paced input at once.
    conf.set_string(
        "python.fn-execution.bundle.size", str(max(2, int(args.rate * MAP_BUNDLE_MS / 1000)))
    )
    if args.unaligned:
        # Every barrier overtakes the records and committables in flight (forced, and no
        # aligned phase first): they reach the committer after its snapshot, or after a
        # restore from the channel state.
        for key, value in UNALIGNED.items():
            conf.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.enable_checkpointing(args.checkpoint_ms)
    sink = SINKS[args.sink](args, timedelta(seconds=args.retry_deadline_s))
    (
        env.from_source(
            NumberSequenceSource(0, args.count - 1), WatermarkStrategy.no_watermarks(), "numbers"
        )
        .flat_map(Steady(args.rate, args.control))
        .uid("steady")
        .sink_to(sink)
    )
    env.execute(f"faults {args.sink} {args.method} {args.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
