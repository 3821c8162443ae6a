"""The fault suite's job: records 0..N-1, paced, into one sink, on a standalone cluster.

Submitted with ``flink run -py``, so it imports nothing from the tests: the TaskManagers' Python
workers see only the job's environment and what this script ships by value as ``__main__``.
Each record is ``{"id": i}``; even and odd ids go to two destinations (topics, tables,
queues), so every sink runs more than one writer. The paced map keeps the job running long
enough for several faults (until the suite drops a ``finish`` file into ``--control``), and
raises once whenever the suite drops a ``raise`` file there: a task exception at a moment the
suite chooses, not at a fixed record (the first subtask to rename the file claims it, so one
request is one exception).
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
from pyflink.datastream.functions import MapFunction

#: What ``--unaligned`` sets.
UNALIGNED = {
    "execution.checkpointing.unaligned.enabled": "true",
    "execution.checkpointing.unaligned.forced": "true",
    "execution.checkpointing.aligned-checkpoint-timeout": "0 s",
}

#: The destinations: a record goes to the one of its id's parity.
PARITIES = ("even", "odd")


def parity(record: dict[str, Any]) -> str:
    return PARITIES[record["id"] % 2]


class Paced(MapFunction):
    """Turns a number into its record, sleeping ``pace_s`` per record until the suite puts a
    ``finish`` file into ``control``; raises once per ``raise`` file it puts there.

    The pace is slow enough that the input outlasts every fault of a run on a loaded machine
    (a run whose job ended early would inject fewer faults than asked); once the faults are
    in, the ``finish`` file lets the rest through unpaced, so a run lasts as long as its faults
    need rather than as long as the slowest machine might.
    """

    def __init__(self, pace_s: float, control: str) -> None:
        self.pace_s = pace_s
        self.request = os.path.join(control, "raise")
        self.finish = os.path.join(control, "finish")
        self.control = control
        self.unpaced = False

    def map(self, value: int) -> dict[str, Any]:
        if not self.unpaced:
            self.unpaced = os.path.exists(self.finish)
            if not self.unpaced:
                time.sleep(self.pace_s)
        if os.path.exists(self.request):
            claimed = os.path.join(self.control, f"raised-{time.time_ns()}-{os.getpid()}")
            try:
                os.rename(self.request, claimed)
            except OSError:
                pass  # another subtask claimed it
            else:
                raise RuntimeError(f"injected task exception at record {value} (fault suite)")
        return {"id": int(value)}


def bundle_size(pace_ms: float) -> int:
    """Records per bundle: about one second of paced input, at most 100 (unpaced runs)."""
    return max(1, min(100, int(1000 // max(pace_ms, 1.0))))


class ByParity:
    """The resolver: ``make(parity)`` is the destination of each parity, built once."""

    def __init__(self, destinations: dict[str, Any]) -> None:
        self.destinations = destinations

    def resolve(self, record: dict[str, Any], context: Any) -> Any:
        return self.destinations[parity(record)]


def pubsub_sink(args: argparse.Namespace, deadline: timedelta) -> Any:
    from pyflink_gcp.pubsub import (
        PubSubSerializationSchema,
        PubSubSink,
        PubSubWriterOptions,
        TopicDestination,
    )

    return (
        PubSubSink.builder()
        .set_sink_name("faults-pubsub")
        .set_destination_resolver(
            ByParity({p: TopicDestination.of(args.project, f"{args.name}-{p}") for p in PARITIES})
        )
        .set_serializer(PubSubSerializationSchema.payload(lambda r: json.dumps(r).encode()))
        .set_writer_options(PubSubWriterOptions.builder().retry_deadline(deadline).build())
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

    builder = (
        BigQuerySink.builder()
        .set_sink_name(f"faults-bigquery-{args.method.lower()}")
        .set_destination_resolver(
            ByParity({p: TableDestination.of(args.project, args.name, p) for p in PARITIES})
        )
        .set_serializer(
            BigQuerySerializer.of(lambda r: r, schema=[SchemaField("id", "INT64", mode="REQUIRED")])
        )
        .set_write_method(WriteMethod[args.method])
        .set_writer_options(BigQueryWriterOptions.builder().retry_deadline(deadline).build())
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
    """A record's task id: a hash of the run and the id, so a replay names the same task."""

    def __init__(self, run: str) -> None:
        self.run = run

    def __call__(self, record: dict[str, Any], context: Any) -> str:
        return hashlib.sha256(f"{self.run}/{record['id']}".encode()).hexdigest()[:32]


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
        .set_destination_resolver(ByParity(queues))
        .set_serializer(
            CloudTasksSerializationSchema.http_target(args.target)
            .with_body(lambda r, ctx: json.dumps(r).encode(), content_type="application/json")
            .with_task_id(TaskId(args.name))
        )
        .set_writer_options(CloudTasksWriterOptions.builder().retry_deadline(deadline).build())
        .build()
    )


def bigtable_cell(record: dict[str, Any], context: Any) -> Any:
    """Row ``<id>``, one cell stamped with a timestamp derived from the id: a replay writes the
    same cell, not a new version."""
    from pyflink_gcp.bigtable import RowMutationEntry, SetCell

    i = record["id"]
    return RowMutationEntry(f"{i:08d}", [SetCell("m", b"id", str(i).encode(), (i + 1) * 1000)])


def bigtable_sink(args: argparse.Namespace, deadline: timedelta) -> Any:
    from pyflink_gcp.bigtable import (
        BigtableSink,
        BigtableWriterOptions,
        CreateDisposition,
        TableCreateOptions,
        TableDestination,
    )

    return (
        BigtableSink.builder()
        .set_sink_name("faults-bigtable")
        .set_destination_resolver(
            ByParity({p: TableDestination.of(args.project, args.name, p) for p in PARITIES})
        )
        .set_serializer(bigtable_cell)
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        # Several versions kept, so a replay that wrote a second version would be seen.
        .set_table_create_options(TableCreateOptions(column_families={"m": 5}))
        .set_writer_options(BigtableWriterOptions.builder().retry_deadline(deadline).build())
        .build()
    )


class SpannerUpsert:
    """The serializer: an upsert of the record into the run's table."""

    def __init__(self, table: str) -> None:
        self.table = table

    def __call__(self, record: dict[str, Any], context: Any) -> Any:
        from pyflink_gcp.spanner import Mutation

        return [
            Mutation.insert_or_update(self.table, {"id": record["id"], "parity": parity(record)})
        ]


def spanner_sink(args: argparse.Namespace, deadline: timedelta) -> Any:
    from pyflink_gcp.spanner import DatabaseDestination, SpannerSink, SpannerWriterOptions

    return (
        SpannerSink.builder()
        .set_sink_name("faults-spanner")
        .set_database(DatabaseDestination.of(args.project, args.instance, args.database))
        .set_serializer(SpannerUpsert(args.name))
        .set_writer_options(SpannerWriterOptions.builder().retry_deadline(deadline).build())
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
    parser.add_argument("--pace-ms", type=float, default=60.0)
    parser.add_argument("--checkpoint-ms", type=int, default=1000)
    parser.add_argument("--retry-deadline-s", type=float, default=120.0)
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
    args = parser.parse_args()

    conf = Configuration()
    # A checkpoint barrier waits until the Python worker has processed the bundle in flight,
    # which after a restore is a full one: at 400 ms a record, 100 records would hold every
    # checkpoint (and so the recovery time measured) for 40 s. A bundle of about one second
    # of paced records keeps the figures about the failover, not about the pace.
    conf.set_string("python.fn-execution.bundle.size", str(bundle_size(args.pace_ms)))
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
        .map(Paced(args.pace_ms / 1000.0, args.control))
        .sink_to(sink)
    )
    env.execute(f"faults {args.sink} {args.method} {args.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
