"""The soak's job: records 0..N-1 at a slow steady rate into one sink whose destinations churn.

Submitted with ``flink run -py``, so it imports nothing from the tests: the TaskManagers'
Python workers see only the job's environment and what this script ships by value.

Why the destinations churn: a leak in the per-subtask registry of destination writers (a
publisher, a write stream, a gRPC channel or a thread left behind when a writer is closed)
shows only when writers are created and closed all the time, over a long run. Each record
gets an event time from its id (deterministic, so a replay after a failover goes to the same
destination) and a destination from that time's bucket (:func:`destination_index`): a new
destination every bucket (a minute), and in the first ``churn_s`` of each bucket the records
also go to the two previous buckets' destinations ("late" records, in runs of ``lane_run_s``),
so three destinations are live at once. With ``max_active_destinations`` 2 that evicts a
writer (LRU) every few seconds; in the rest of the bucket only the current destination is
written, and the other open writer is closed by the ``idle_timeout`` (30 s): both release
paths run every minute.

The map (:class:`Paced`) hands records on at ``--rate`` records a second in total, keeping
the rate by the clock. The resolver (Spanner: the serializer) logs every record the writer
takes (``<id> <epoch ms>``, unbuffered) into the control directory, and once the soak drops a
``finish`` file there the map drops the rest of its input, logging the dropped ranges
(``d <first> <last>``): the soak then knows which records the sink was handed and must hold.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from datetime import timedelta
from typing import Any

from pyflink.common import Configuration
from pyflink.common.watermark_strategy import WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource
from pyflink.datastream.functions import FlatMapFunction, RuntimeContext

#: The control directory's folder of emission logs.
LOGS = "log"
#: How far behind its rate a subtask may catch up at once, in seconds of input.
CATCH_UP_S = 1.0
#: Records in one bundle of the map: what a checkpoint barrier may wait for (see ``main``).
MAP_BUNDLE_RECORDS = 2


class Churn:
    """Where a record goes: the destination index of its event time (see the module doc).

    The event time is the record's position in its source split divided by the subtask's
    rate: ``NumberSequenceSource`` splits ``0..count-1`` into ``parallelism`` equal runs, one
    per subtask, so every subtask's records advance in time together, as the clock does.

    Attributes:
        per_split: Records per source split (``count / parallelism``).
        subtask_rate: Records a second per subtask.
        bucket_s: Seconds per destination (a new one every bucket).
        lanes: Destinations live at once during the churn phase (current + late ones).
        lane_run_s: Seconds of records in a row for one lane.
        churn_s: The first seconds of each bucket, in which all lanes are written.
    """

    def __init__(
        self,
        per_split: int,
        subtask_rate: float,
        bucket_s: float = 60.0,
        lanes: int = 3,
        lane_run_s: float = 5.0,
        churn_s: float = 20.0,
    ) -> None:
        self.per_split = per_split
        self.subtask_rate = subtask_rate
        self.bucket_s = bucket_s
        self.lanes = lanes
        self.lane_run_s = lane_run_s
        self.churn_s = churn_s

    def event_s(self, record_id: int) -> float:
        return (record_id % self.per_split) / self.subtask_rate

    def destination_index(self, record_id: int) -> int:
        t = self.event_s(record_id)
        lane = int(t // self.lane_run_s) % self.lanes if t % self.bucket_s < self.churn_s else 0
        return int(t // self.bucket_s) - lane + self.lanes - 1

    def destinations(self) -> int:
        """How many destination indexes the whole input uses (0..n-1)."""
        return self.destination_index(self.per_split - 1) + 1


def open_log(control: str, kind: str) -> int:
    """A new emission log of this process in the control directory (appended, unbuffered)."""
    logs = os.path.join(control, LOGS)
    os.makedirs(logs, exist_ok=True)
    name = f"{kind}-{os.getpid()}-{time.time_ns()}.log"
    return os.open(os.path.join(logs, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND)


class Paced(FlatMapFunction):
    """Turns a number into its record (``{"id", "d"}``: the id and its destination index) at
    ``rate`` records a second for this subtask; after the ``finish`` file, drops the rest and
    logs the dropped ids as ranges.

    It sleeps only when ahead of the rate, and a subtask held up (a failover) catches up at
    most :data:`CATCH_UP_S` of input at once, so a restore does not flood the sink.
    """

    def __init__(self, rate: float, control: str, churn: Churn) -> None:
        self.rate = rate
        self.control = control
        self.churn = churn
        self.finish = os.path.join(control, "finish")
        self.fd = -1
        self.started = 0.0
        self.handed = 0
        self.finished = False
        self.dropped: list[int] = []

    def open(self, runtime_context: RuntimeContext) -> None:
        self.fd = open_log(self.control, f"drops-{runtime_context.get_index_of_this_subtask()}")
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
            if self.dropped and (value != self.dropped[-1] + 1 or len(self.dropped) >= 10000):
                self._write_dropped()
            self.dropped.append(value)
            return
        ahead = self.started + self.handed / self.rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
        elif ahead < -CATCH_UP_S:
            self.started -= ahead + CATCH_UP_S
        self.handed += 1
        yield {"id": int(value), "d": self.churn.destination_index(int(value))}


class SinkLog:
    """Logs each record as the sink's writer takes it (``<id> <epoch ms>``), before it is
    buffered, so a record the sink got is logged even if its process dies the next moment."""

    def __init__(self, control: str) -> None:
        self.control = control
        self.fd = -1

    def __getstate__(self) -> dict[str, Any]:
        return {"control": self.control, "fd": -1}

    def __call__(self, record: dict[str, Any]) -> None:
        if self.fd < 0:
            self.fd = open_log(self.control, "sink")
        os.write(self.fd, f"{record['id']} {time.time_ns() // 1_000_000}\n".encode())


class ByIndex:
    """The resolver: the destination of the record's index, built on first use; logs the
    record (:class:`SinkLog`)."""

    def __init__(self, make: Any, log: SinkLog) -> None:
        self.make = make
        self.log = log
        self.cache: dict[int, Any] = {}

    def resolve(self, record: dict[str, Any], context: Any) -> Any:
        self.log(record)
        index = record["d"]
        if index not in self.cache:
            self.cache[index] = self.make(index)
        return self.cache[index]


def writer_options(builder: Any, args: argparse.Namespace) -> Any:
    """The churn settings every sink with a writer registry gets (and ``--max-carry-s``)."""
    builder = (
        builder.idle_timeout(timedelta(seconds=args.idle_timeout_s))
        .max_active_destinations(args.max_writers)
        .retry_deadline(timedelta(seconds=args.retry_deadline_s))
    )
    return carrying(builder, args).build()


def carrying(builder: Any, args: argparse.Namespace) -> Any:
    """``max_carry_time`` from ``--max-carry-s`` (0: not set)."""
    if args.max_carry_s > 0:
        builder = builder.max_carry_time(timedelta(seconds=args.max_carry_s))
    return builder


def pubsub_sink(args: argparse.Namespace, log: SinkLog) -> Any:
    from pyflink_gcp.pubsub import (
        PubSubSerializationSchema,
        PubSubSink,
        PubSubWriterOptions,
        TopicDestination,
    )

    project, name = args.project, args.name
    return (
        PubSubSink.builder()
        .set_sink_name("soak-pubsub")
        .set_destination_resolver(
            ByIndex(lambda i: TopicDestination.of(project, f"{name}-{i:03d}"), log)
        )
        .set_serializer(
            PubSubSerializationSchema.payload(lambda r: json.dumps({"id": r["id"]}).encode())
        )
        .set_writer_options(writer_options(PubSubWriterOptions.builder(), args))
        .build()
    )


def bigquery_sink(args: argparse.Namespace, log: SinkLog) -> Any:
    from google.cloud.bigquery import SchemaField

    from pyflink_gcp.bigquery import (
        BigQuerySerializer,
        BigQuerySink,
        BigQueryWriterOptions,
        TableDestination,
        WriteMethod,
    )

    project, name = args.project, args.name
    return (
        BigQuerySink.builder()
        .set_sink_name("soak-bigquery")
        .set_destination_resolver(
            ByIndex(lambda i: TableDestination.of(project, name, f"d{i:03d}"), log)
        )
        .set_serializer(
            BigQuerySerializer.of(
                lambda r: {"id": r["id"]}, schema=[SchemaField("id", "INT64", mode="REQUIRED")]
            )
        )
        .set_write_method(WriteMethod.STORAGE_API_AT_LEAST_ONCE)
        .set_writer_options(writer_options(BigQueryWriterOptions.builder(), args))
        .build()
    )


class TaskId:
    """A record's task id, a hash of the run and the id: a replay names the same task."""

    def __init__(self, run: str) -> None:
        self.run = run

    def __call__(self, record: dict[str, Any], context: Any) -> str:
        return hashlib.sha256(f"{self.run}/{record['id']}".encode()).hexdigest()[:32]


def cloudtasks_sink(args: argparse.Namespace, log: SinkLog) -> Any:
    from pyflink_gcp.cloudtasks import (
        CloudTasksSerializationSchema,
        CloudTasksSink,
        CloudTasksWriterOptions,
        QueueDestination,
    )

    project, name = args.project, args.name
    return (
        CloudTasksSink.builder()
        .set_sink_name("soak-cloudtasks")
        .set_destination_resolver(
            ByIndex(lambda i: QueueDestination.of(project, "us-central1", f"{name}-{i:03d}"), log)
        )
        .set_serializer(
            CloudTasksSerializationSchema.http_target(args.target)
            .with_body(
                lambda r, ctx: json.dumps({"id": r["id"]}).encode(),
                content_type="application/json",
            )
            .with_task_id(TaskId(args.name))
        )
        .set_writer_options(writer_options(CloudTasksWriterOptions.builder(), args))
        .build()
    )


def bigtable_cells(record: dict[str, Any], context: Any) -> Any:
    """Row ``<id>``, one cell stamped from the id: a replay rewrites the same cell."""
    from pyflink_gcp.bigtable import RowMutationEntry, SetCell

    i = record["id"]
    return RowMutationEntry(f"{i:09d}", [SetCell("m", b"id", str(i).encode(), (i + 1) * 1000)])


def bigtable_sink(args: argparse.Namespace, log: SinkLog) -> Any:
    from pyflink_gcp.bigtable import (
        BigtableSink,
        BigtableWriterOptions,
        CreateDisposition,
        TableCreateOptions,
        TableDestination,
    )

    project, name = args.project, args.name
    return (
        BigtableSink.builder()
        .set_sink_name("soak-bigtable")
        .set_destination_resolver(
            ByIndex(lambda i: TableDestination.of(project, name, f"d{i:03d}"), log)
        )
        .set_serializer(bigtable_cells)
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_table_create_options(TableCreateOptions(column_families={"m": None}))
        .set_writer_options(writer_options(BigtableWriterOptions.builder(), args))
        .build()
    )


class SpannerRows:
    """The serializer: an upsert of the record into its destination's table (Spanner's sink
    writes one database, so the churn is over tables, without a writer per table); logs it."""

    def __init__(self, name: str, log: SinkLog) -> None:
        self.name = name
        self.log = log

    def __call__(self, record: dict[str, Any], context: Any) -> Any:
        from pyflink_gcp.spanner import Mutation

        self.log(record)
        table = f"{self.name}_{record['d']:03d}"
        return [Mutation.insert_or_update(table, {"id": record["id"]})]


def spanner_sink(args: argparse.Namespace, log: SinkLog) -> Any:
    from pyflink_gcp.spanner import DatabaseDestination, SpannerSink, SpannerWriterOptions

    options = SpannerWriterOptions.builder().retry_deadline(
        timedelta(seconds=args.retry_deadline_s)
    )
    return (
        SpannerSink.builder()
        .set_sink_name("soak-spanner")
        .set_database(DatabaseDestination.of(args.project, args.instance, args.database))
        .set_serializer(SpannerRows(args.name, log))
        .set_writer_options(carrying(options, args).build())
        .build()
    )


SINKS = {
    "pubsub": pubsub_sink,
    "bigquery": bigquery_sink,
    "bigtable": bigtable_sink,
    "spanner": spanner_sink,
    "cloudtasks": cloudtasks_sink,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sink", choices=sorted(SINKS), required=True)
    parser.add_argument("--project", required=True)
    parser.add_argument("--name", required=True, help="the run's destination prefix")
    parser.add_argument("--control", required=True, help="the soak's control directory")
    parser.add_argument("--count", type=int, required=True, help="a multiple of parallelism")
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--rate", type=float, default=30.0, help="records/s, all subtasks")
    parser.add_argument("--checkpoint-ms", type=int, default=1000)
    parser.add_argument("--idle-timeout-s", type=float, default=30.0)
    parser.add_argument("--max-writers", type=int, default=2)
    parser.add_argument("--retry-deadline-s", type=float, default=120.0)
    parser.add_argument("--max-carry-s", type=float, default=0.0, help="max_carry_time; 0: off")
    parser.add_argument("--target", default="", help="Cloud Tasks HTTP target")
    parser.add_argument("--instance", default="", help="Spanner instance")
    parser.add_argument("--database", default="", help="Spanner database")
    args = parser.parse_args()

    subtask_rate = args.rate / args.parallelism
    churn = Churn(args.count // args.parallelism, subtask_rate)
    conf = Configuration()
    # The map's bundles end every 100 ms, so records reach the sink as they come rather than
    # at the next checkpoint (PyFlink's default bundle time is a second). And they hold at
    # most MAP_BUNDLE_RECORDS records: the source emits as fast as it can, a bundle of the
    # default size (100,000) would take in thousands of ids the paced map then works through
    # at the rate, and a checkpoint barrier waits for the bundle to finish (minutes at a few
    # records a second). The writer's operator keeps the sink's own bundle settings.
    conf.set_string("python.fn-execution.bundle.time", "100")
    conf.set_string("python.fn-execution.bundle.size", str(MAP_BUNDLE_RECORDS))
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(args.parallelism)
    env.enable_checkpointing(args.checkpoint_ms)
    sink = SINKS[args.sink](args, SinkLog(args.control))
    (
        env.from_source(
            NumberSequenceSource(0, args.count - 1), WatermarkStrategy.no_watermarks(), "numbers"
        )
        .flat_map(Paced(subtask_rate, args.control, churn))
        .uid("paced")
        .sink_to(sink)
    )
    env.execute(f"soak {args.sink} {args.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
