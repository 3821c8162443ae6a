"""Lineage of dynamic destinations: each topic a job starts writing to, reported once per subtask.

Run against the local emulators (``pyflink-gcp emulators up`` prints the variables) or real
Pub/Sub (Application Default Credentials)::

    python examples/lineage_listener.py --project my-project --orders 5000

Orders are routed by region to ``lineage-orders-<region>``, topics the job learns from the data.
A lineage listener registered on the sink hears of each topic the first time a subtask writes
to it, as an OpenLineage-style dataset (namespace ``pubsub``, name ``topic:<project>:<topic>``),
and appends it to a JSON-lines file; a real one would send an OpenLineage event to a lineage
backend instead. Afterwards the script prints the datasets reported and checks that every
region's topic was reported, by no subtask twice, and that every order arrived.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from collections import Counter
from typing import Any

from google.api_core.exceptions import AlreadyExists
from google.cloud import pubsub_v1
from pyflink.common import Configuration
from pyflink.common.watermark_strategy import WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource

from pyflink_gcp import LineageDataset, LineageListener
from pyflink_gcp.core import SubtaskInfo
from pyflink_gcp.pubsub import PubSubSerializationSchema, PubSubSink
from pyflink_gcp.routing import pubsub_topics, route_by_template
from pyflink_gcp.tools.emulators.clients import pull_messages

# The emulator answers an empty pull only after its timeout unless asked to return at once.
warnings.filterwarnings("ignore", message="The return_immediately flag is deprecated")

REGIONS = ["us-east", "us-west", "eu-north", "eu-west", "asia-east"]


class JsonLinesLineage(LineageListener):
    """Appends each reported dataset, with the subtask that reported it, to a JSON-lines file.

    One copy runs in every sink subtask (pickled into the job), so it holds only the path; each
    line is one ``write`` of a file opened for appending, so subtasks in several worker
    processes of one machine can share the file.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.subtask: dict[str, Any] = {}

    def open(self, info: SubtaskInfo) -> None:
        self.subtask = {
            "sink": info.sink_name,
            "subtask": info.subtask_index,
            "attempt": info.attempt_number,
        }

    def on_dataset(self, dataset: LineageDataset) -> None:
        self._append({**self.subtask, **dataset.to_dict()})

    def on_limit_reached(self, limit: int) -> None:
        self._append({**self.subtask, "limit_reached": limit})

    def _append(self, line: dict[str, Any]) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(line) + "\n").encode())
        finally:
            os.close(fd)


def make_order(i: int) -> dict:
    return {"order_id": i, "region": REGIONS[(i * 7) % len(REGIONS)], "amount_cents": i % 1000}


def prepare_topics(project: str) -> None:
    """Create each region's topic and a subscription on it (idempotent), before the job: Pub/Sub
    delivers a message only to the subscriptions that exist when it is published."""
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    for region in REGIONS:
        topic = publisher.topic_path(project, f"lineage-orders-{region}")
        subscription = subscriber.subscription_path(project, f"lineage-orders-{region}-demo")
        try:
            publisher.create_topic(name=topic)
        except AlreadyExists:
            pass
        try:
            subscriber.create_subscription(request={"name": subscription, "topic": topic})
        except AlreadyExists:
            pass
    subscriber.close()


def build_sink(project: str, lineage_file: str) -> PubSubSink:
    """Each order to its region's topic, each new topic reported to the listener."""
    return (
        PubSubSink.builder()
        .set_sink_name("orders-lineage")
        .set_destination_resolver(
            route_by_template("lineage-orders-{region}", pubsub_topics(project))
        )
        .set_serializer(PubSubSerializationSchema.payload(lambda o: json.dumps(o).encode()))
        .set_lineage_listener(JsonLinesLineage(lineage_file))
        .set_max_lineage_datasets(100)
        .build()
    )


def run_job(project: str, orders: int, parallelism: int, lineage_file: str) -> None:
    conf = Configuration()
    # The Python workers run this interpreter (the venv with pyflink and pyflink-gcp).
    conf.set_string("python.executable", sys.executable)
    conf.set_string("python.client.executable", sys.executable)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    env.enable_checkpointing(2000)
    numbers = env.from_source(
        NumberSequenceSource(0, orders - 1), WatermarkStrategy.no_watermarks(), "orders"
    )
    numbers.map(make_order).sink_to(build_sink(project, lineage_file))
    env.execute("lineage-listener")


def count_messages(project: str) -> int:
    return sum(len(pull_messages(project, f"lineage-orders-{region}-demo")) for region in REGIONS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default=os.environ.get("GOOGLE_CLOUD_PROJECT", "demo-project"))
    parser.add_argument("--orders", type=int, default=5_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--lineage-file", default="")
    args = parser.parse_args()
    lineage_file = args.lineage_file or os.path.join(
        tempfile.mkdtemp(prefix="lineage-"), "datasets.jsonl"
    )
    open(lineage_file, "w").close()

    prepare_topics(args.project)
    run_job(args.project, args.orders, args.parallelism, lineage_file)
    delivered = count_messages(args.project)
    with open(lineage_file) as lines:
        reports = [json.loads(line) for line in lines]

    datasets = [r for r in reports if "name" in r]
    print(f"\nlineage: {len(datasets)} reports in {lineage_file}")
    for name, count in sorted(Counter(r["name"] for r in datasets).items()):
        print(f"  pubsub:{name:<48} reported by {count} subtask(s)")
    expected = {f"topic:{args.project}:lineage-orders-{region}" for region in REGIONS}
    per_subtask = Counter((r["subtask"], r["attempt"], r["name"]) for r in datasets)
    twice = [key for key, count in per_subtask.items() if count > 1]
    ok = {r["name"] for r in datasets} == expected and not twice and delivered >= args.orders
    print(f"messages delivered: {delivered} of {args.orders}")
    print(
        "OK: every topic reported, by no subtask twice"
        if ok
        else f"MISMATCH (reported twice: {twice})"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
