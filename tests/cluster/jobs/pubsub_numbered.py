"""A checkpointed Pub/Sub job for the cluster tests: records 0..N-1, each published once.

Submitted with ``flink run -py`` to a standalone cluster, so it imports nothing from the tests:
the TaskManagers' Python workers see only the job's environment (PyFlink, pyflink-gcp, the
client libraries) and what this script ships by value as ``__main__``. Each record is a JSON
object ``{"id": i}`` published to ``<topic>-even`` or ``<topic>-odd``; a paced map keeps the
job running long enough for a TaskManager to be killed in the middle of it, and a small bundle
size lets checkpoints complete between kills.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from pyflink.common import Configuration
from pyflink.common.watermark_strategy import WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource
from pyflink.datastream.functions import MapFunction

from pyflink_gcp.pubsub import PubSubSerializationSchema, PubSubSink, TopicDestination


class Paced(MapFunction):
    """Turns a number into its record, sleeping ``pace_s`` per record.

    With a ``control`` directory, the subtask that first renames its ``raise`` file away
    raises once (a task exception injected at a moment the caller picks), and an ``unpaced``
    file there ends the sleeping: the caller keeps the job running until its fault landed,
    then lets the rest of the input through at full speed.
    """

    def __init__(self, pace_s: float, control: str | None = None) -> None:
        self.pace_s = pace_s
        self.control = control
        self.paced = True

    def map(self, value: int) -> dict:
        if self.paced and self.control is not None:
            self.paced = not os.path.exists(os.path.join(self.control, "unpaced"))
        if self.paced:
            time.sleep(self.pace_s)
        if self.control is not None and os.path.exists(os.path.join(self.control, "raise")):
            try:
                os.rename(os.path.join(self.control, "raise"), os.path.join(self.control, "raised"))
            except OSError:
                pass  # another subtask took it
            else:
                raise RuntimeError("injected task exception")
        return {"id": int(value)}


class ByParity:
    """The resolver: even ids to one topic, odd ids to the other."""

    def __init__(self, project: str, topic: str) -> None:
        self.project = project
        self.topic = topic

    def resolve(self, record: dict, context) -> TopicDestination:
        suffix = "odd" if record["id"] % 2 else "even"
        return TopicDestination.of(self.project, f"{self.topic}-{suffix}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", required=True)
    parser.add_argument("--topic", required=True, help="prefix of the two topics")
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--pace-ms", type=float, default=30.0)
    parser.add_argument("--checkpoint-ms", type=int, default=1000)
    parser.add_argument(
        "--bundle-size",
        type=int,
        default=200,
        help="records of the paced map's Python bundles: a barrier waits for one at most",
    )
    parser.add_argument(
        "--control",
        help="a directory whose 'raise' file makes a map raise, and whose 'unpaced' file ends "
        "the pacing",
    )
    args = parser.parse_args()

    conf = Configuration()
    conf.set_string("python.fn-execution.bundle.size", str(args.bundle_size))
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.enable_checkpointing(args.checkpoint_ms)
    sink = (
        PubSubSink.builder()
        .set_sink_name("numbered")
        .set_destination_resolver(ByParity(args.project, args.topic))
        .set_serializer(PubSubSerializationSchema.payload(lambda r: json.dumps(r).encode()))
        .build()
    )
    (
        env.from_source(
            NumberSequenceSource(0, args.count - 1), WatermarkStrategy.no_watermarks(), "numbers"
        )
        .map(Paced(args.pace_ms / 1000.0, args.control))
        .sink_to(sink)
    )
    env.execute(f"numbered {args.topic}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
