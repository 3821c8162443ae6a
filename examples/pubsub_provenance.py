"""Orders to Pub/Sub with compressed requests, event time and a record id on every message.

Run against the local emulators (``pyflink-gcp emulators up`` prints the variables) or real
Pub/Sub (Application Default Credentials)::

    python examples/pubsub_provenance.py --project my-project --orders 5000

Each order is published to ``orders-provenance`` with its event time (the ``placed_at`` the
timestamp assigner gives Flink) in the ``event-time`` attribute and the order id in
``record-id``, so a subscriber can read the business time and drop the duplicates a replay
after a failover publishes. Publish requests of 240 bytes or more are gzip-compressed. An order
whose ``note`` attribute is over Pub/Sub's 1,024-byte limit goes to ``orders-provenance-dlq``
instead, with ``dlq-reason`` naming the attribute and the limit. Afterwards the script reads
both subscriptions back and checks what arrived.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import warnings
from typing import Any

from google.api_core.exceptions import AlreadyExists
from google.cloud import pubsub_v1
from pyflink.common import Configuration
from pyflink.common.watermark_strategy import TimestampAssigner, WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource

from pyflink_gcp import FailureHandler
from pyflink_gcp.pubsub import (
    PubSubDeadLetterQueue,
    PubSubPublisherOptions,
    PubSubSerializationSchema,
    PubSubSink,
    TopicDestination,
)
from pyflink_gcp.tools.emulators.clients import pull_messages

warnings.filterwarnings("ignore", message="The return_immediately flag is deprecated")

TOPIC, DLQ = "orders-provenance", "orders-provenance-dlq"
#: When order 0 was placed (epoch milliseconds); order i a second later.
START_MS = 1_714_557_600_000


def make_order(i: int) -> dict[str, Any]:
    """A deterministic order; one in a thousand carries a note too long for an attribute."""
    return {
        "order_id": f"order-{i}",
        "placed_at": START_MS + i * 1_000,
        "items": [{"sku": f"sku-{i % 13}", "quantity": 1 + i % 3}],
        "note": "gift wrap " * (150 if i % 1_000 == 999 else 1),
    }


class PlacedAt(TimestampAssigner):
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return int(value["placed_at"])


def build_sink(project: str) -> PubSubSink:
    return (
        PubSubSink.builder()
        .set_sink_name("orders-with-provenance")
        .set_destination_resolver(lambda o, ctx: TopicDestination.of(project, TOPIC))
        .set_serializer(
            PubSubSerializationSchema.payload(lambda o: json.dumps(o).encode())
            .with_attributes(lambda o: {"note": o["note"]})
            .with_event_time_attribute()  # "event-time": the Flink timestamp, epoch ms
            .with_record_id_attribute(key=lambda o: o["order_id"])  # "record-id"
        )
        .set_publisher_options(PubSubPublisherOptions.builder().enable_compression().build())
        .set_failure_handler(
            FailureHandler.send_to_dead_letter_queue(
                PubSubDeadLetterQueue.of(TopicDestination.of(project, DLQ))
            )
        )
        .build()
    )


def run_job(project: str, orders: int, parallelism: int) -> None:
    conf = Configuration()
    conf.set_string("python.executable", sys.executable)  # the workers run this interpreter
    conf.set_string("python.client.executable", sys.executable)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    env.enable_checkpointing(2_000)
    numbers = env.from_source(
        NumberSequenceSource(0, orders - 1), WatermarkStrategy.no_watermarks(), "orders"
    )
    numbers.map(make_order).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(PlacedAt())
    ).sink_to(build_sink(project))
    env.execute("pubsub-provenance")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default=os.environ.get("GOOGLE_CLOUD_PROJECT", "demo-project"))
    parser.add_argument("--orders", type=int, default=5_000)
    parser.add_argument("--parallelism", type=int, default=2)
    args = parser.parse_args()

    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    for name in (TOPIC, DLQ):  # before the job: Pub/Sub keeps messages for existing subscriptions
        topic = publisher.topic_path(args.project, name)
        with contextlib.suppress(AlreadyExists):
            publisher.create_topic(name=topic)
        with contextlib.suppress(AlreadyExists):
            subscriber.create_subscription(
                name=subscriber.subscription_path(args.project, name), topic=topic
            )

    run_job(args.project, args.orders, args.parallelism)

    too_long = sum(1 for i in range(args.orders) if i % 1_000 == 999)
    expected = args.orders - too_long
    published = pull_messages(args.project, TOPIC, expect=expected, subscriber=subscriber)
    letters = pull_messages(args.project, DLQ, expect=too_long, subscriber=subscriber)
    subscriber.close()
    good = sum(
        m.attributes["record-id"] == json.loads(m.data)["order_id"]
        and m.attributes["event-time"] == str(json.loads(m.data)["placed_at"])
        for m in published
    )
    print(f"{len(published)} orders published, {good} with their event time and record id")
    for letter in letters[:3]:
        print(f"dead-lettered {letter.attributes['record-id']}: {letter.attributes['dlq-reason']}")
    ok = good == len(published) >= args.orders - too_long and len(letters) >= too_long
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
