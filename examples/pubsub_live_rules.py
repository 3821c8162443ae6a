"""Orders routed to Pub/Sub topics by rules that change while the job runs.

Run against the local emulators (``pyflink-gcp emulators up`` prints the variables) or real
Pub/Sub (Application Default Credentials)::

    python examples/pubsub_live_rules.py --project my-project --orders 6000

The job routes each order by its ``region`` with ``pyflink_gcp.routing.LiveRules``: the rules
start as ``eu -> orders-eu``, ``us -> orders-us``; anything else goes to ``orders-other``. A
file source watches a rules directory; a third of the way through, the script drops a file
there that moves ``eu`` to ``orders-eu-priority``, and two thirds through one that deletes the
``us`` rule (so ``us`` orders fall back to ``orders-other``). The rule source never ends, so the
script reads the topics until every order arrived, cancels the job, and checks that each
region switched destination exactly once, record by record.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings

from google.api_core import exceptions
from google.cloud import pubsub_v1
from pyflink.common import Configuration, Duration
from pyflink.common.watermark_strategy import WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.file_system import FileSource, StreamFormat
from pyflink.datastream.connectors.number_seq import NumberSequenceSource
from pyflink.datastream.functions import MapFunction

from pyflink_gcp.pubsub import PubSubSerializationSchema, PubSubSink, TopicDestination
from pyflink_gcp.routing import LiveRules, pubsub_topics
from pyflink_gcp.tools.emulators.clients import pull_messages

warnings.filterwarnings("ignore", message="The return_immediately flag is deprecated")

TOPICS = ["orders-eu", "orders-eu-priority", "orders-us", "orders-other"]
REGIONS = ["eu", "us", "pl"]


def make_order(i: int) -> bytes:
    return json.dumps({"order_id": i, "region": REGIONS[i % 3]}).encode()


class DropRuleFiles(MapFunction):
    """Stands in for an operator editing the rules: writes a rule file when an order passes,
    and paces the orders so that the job runs for a while."""

    def __init__(self, directory: str, changes: dict[int, dict]) -> None:
        self._directory = directory
        self._changes = changes

    def map(self, order: bytes) -> bytes:
        i = json.loads(order)["order_id"]
        change = self._changes.get(i)
        if change is not None:
            path = os.path.join(self._directory, f"rules-{i}.jsonl")
            partial = os.path.join(self._directory, f".rules-{i}.tmp")
            with open(partial, "w") as f:
                f.write(json.dumps(change) + "\n")
            os.replace(partial, path)  # the source never sees half a file
        time.sleep(0.002)
        return order


def prepare_topics(project: str) -> None:
    """Each topic with a subscription of the same name (idempotent)."""
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    for name in TOPICS:
        topic = publisher.topic_path(project, name)
        try:
            publisher.create_topic(name=topic)
        except exceptions.AlreadyExists:
            pass
        try:
            subscriber.create_subscription(
                request={"name": subscriber.subscription_path(project, name), "topic": topic}
            )
        except exceptions.AlreadyExists:
            pass
    subscriber.close()


def pull(project: str, name: str) -> list[int]:
    messages = pull_messages(project, name, quiet_s=0)
    return [json.loads(m.data)["order_id"] for m in messages]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default=os.environ.get("GOOGLE_CLOUD_PROJECT", "demo-project"))
    parser.add_argument("--orders", type=int, default=6_000)
    parser.add_argument("--parallelism", type=int, default=2)
    args = parser.parse_args()
    project, count = args.project, args.orders
    prepare_topics(project)
    for name in TOPICS:  # start from empty subscriptions
        pull(project, name)
    rules_dir = tempfile.mkdtemp(prefix="routing-rules-")

    conf = Configuration()
    conf.set_string("python.executable", sys.executable)
    conf.set_string("python.client.executable", sys.executable)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(args.parallelism)
    env.enable_checkpointing(1000)

    live = LiveRules(
        "region",
        pubsub_topics(project),
        initial={"eu": "orders-eu", "us": "orders-us"},
        fallback=TopicDestination.of(project, "orders-other"),
    )
    changes = {
        count // 3: {"value": "eu", "destination": "orders-eu-priority"},
        2 * count // 3: {"value": "us", "destination": None},
    }
    # One reader and one routing instance keep the orders in sequence, so the moment of each
    # change can be read off the order ids afterwards.
    orders = (
        env.from_source(
            NumberSequenceSource(0, count - 1), WatermarkStrategy.no_watermarks(), "orders"
        )
        .set_parallelism(1)
        .map(make_order)
        .set_parallelism(1)
        .map(DropRuleFiles(rules_dir, changes))
        .set_parallelism(1)
    )
    rule_files = env.from_source(
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), rules_dir)
        .monitor_continuously(Duration.of_millis(200))
        .build(),
        WatermarkStrategy.no_watermarks(),
        "rule files",
    ).set_parallelism(1)
    sink = (
        PubSubSink.builder()
        .set_sink_name("orders-by-live-rules")
        .set_destination_resolver(live.resolver())
        .set_serializer(PubSubSerializationSchema.payload(lambda order: order))
        .build()
    )
    live.apply(orders, rule_files).sink_to(sink)

    started = time.monotonic()
    client = env.execute_async("pubsub-live-rules")
    seen: dict[str, list[int]] = {name: [] for name in TOPICS}
    try:
        while time.monotonic() - started < 300:
            for name in TOPICS:
                seen[name] += pull(project, name)
            if len({i for ids in seen.values() for i in ids}) >= count:
                break
            time.sleep(1)
    finally:
        client.cancel().result()
    took = time.monotonic() - started

    print(f"\nPub/Sub live rules: {count} orders in {took:.1f}s (job incl. startup)")
    for name in TOPICS:
        ids = seen[name]
        span = f"ids {min(ids)}..{max(ids)}" if ids else "-"
        print(f"{name:<22}{len(ids):>8}  {span}")
    eu_old, eu_new = set(seen["orders-eu"]), set(seen["orders-eu-priority"])
    us_kept = set(seen["orders-us"])
    us_moved = {i for i in seen["orders-other"] if i % 3 == 1}
    delivered = {i for ids in seen.values() for i in ids} == set(range(count))
    switched = (
        bool(eu_old and eu_new and us_kept and us_moved)
        and max(eu_old) < min(eu_new)
        and max(us_kept) < min(us_moved)
    )
    if delivered and switched:
        print(
            f"OK: every order delivered; eu moved at order {min(eu_new)} (rule written at "
            f"{count // 3}), us fell back at {min(us_moved)} (rule deleted at {2 * count // 3})"
        )
        return 0
    print("MISMATCH: " + ("not every order arrived" if not delivered else "a switch was not clean"))
    return 1


if __name__ == "__main__":
    sys.exit(main())
