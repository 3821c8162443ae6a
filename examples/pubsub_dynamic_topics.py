"""Orders routed by region to one Pub/Sub topic each, in order per customer.

Run against the local emulators (``pyflink-gcp emulators up`` prints the variables) or real
Pub/Sub (Application Default Credentials)::

    python examples/pubsub_dynamic_topics.py --project my-project --orders 20000

The job keys the orders by customer, so one customer's orders reach one sink subtask in order,
and publishes each to ``orders-<region>`` with the customer as ordering key. Afterwards the script
pulls every topic's subscription and prints a count per topic, checking per-customer order.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

from google.api_core import exceptions
from google.cloud import pubsub_v1
from pyflink.common import Configuration
from pyflink.common.watermark_strategy import WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource

from pyflink_gcp.pubsub import PubSubPublisherOptions, PubSubSerializationSchema, PubSubSink
from pyflink_gcp.routing import pubsub_topics, route_by_template
from pyflink_gcp.tools.emulators.clients import pull_messages

# The emulator answers an empty pull only after its timeout unless asked to return at once.
warnings.filterwarnings("ignore", message="The return_immediately flag is deprecated")

REGIONS = [
    "us-east",
    "us-west",
    "eu-north",
    "eu-west",
    "asia-east",
    "asia-south",
    "sa-east",
    "af-south",
]


def make_order(i: int) -> dict:
    """A deterministic order: region and customer derived from the sequence number."""
    customer = i % 97
    return {
        "order_id": i,
        "customer_id": f"customer-{customer}",
        "region": REGIONS[(customer * 7) % len(REGIONS)],
        "amount_cents": (i * 37) % 10_000,
    }


def prepare_topics(project: str) -> None:
    """Create the region topics and an ordered subscription on each (idempotent).

    Before the job runs: Pub/Sub delivers a message only to the subscriptions that exist when
    it is published, so a subscription created afterwards would read nothing back. With
    PUBSUB_EMULATOR_HOST set the clients talk to the emulator without credentials.
    """
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    for region in REGIONS:
        topic = publisher.topic_path(project, f"orders-{region}")
        try:
            publisher.create_topic(name=topic)
        except exceptions.AlreadyExists:
            pass
        try:
            subscriber.create_subscription(
                request={
                    "name": subscriber.subscription_path(project, f"orders-{region}-demo"),
                    "topic": topic,
                    "enable_message_ordering": True,
                }
            )
        except exceptions.AlreadyExists:
            pass
    subscriber.close()


def build_sink(project: str) -> PubSubSink:
    """The sink: each order to its region's topic (``orders-<region>``), the customer as
    ordering key. ``pyflink-gcp plan examples/pubsub_dynamic_topics.py:build_sink --arg
    project=my-project --sample orders.jsonl`` dry-runs it over a sample."""
    return (
        PubSubSink.builder()
        .set_sink_name("orders-by-region")
        .set_destination_resolver(route_by_template("orders-{region}", pubsub_topics(project)))
        .set_serializer(
            PubSubSerializationSchema.payload(lambda o: json.dumps(o).encode()).with_ordering_key(
                lambda o, ctx: o["customer_id"]
            )
        )
        .set_publisher_options(
            PubSubPublisherOptions.builder().enable_message_ordering(True).build()
        )
        .build()
    )


def run_job(project: str, orders: int, parallelism: int) -> None:
    conf = Configuration()
    # The Python workers run this interpreter (the venv with pyflink and pyflink-gcp), whether
    # or not the venv is activated; otherwise Flink starts the `python` on the PATH.
    conf.set_string("python.executable", sys.executable)
    conf.set_string("python.client.executable", sys.executable)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    env.enable_checkpointing(2000)

    sink = build_sink(project)

    # One reader keeps each customer's orders in sequence; key_by keeps them on one subtask.
    numbers = env.from_source(
        NumberSequenceSource(0, orders - 1), WatermarkStrategy.no_watermarks(), "orders"
    ).set_parallelism(1)
    numbers.map(make_order).set_parallelism(1).key_by(lambda o: o["customer_id"]).sink_to(sink)
    env.execute("pubsub-dynamic-topics")


def read_back(project: str, expected: int) -> dict[str, tuple[int, int]]:
    """Pull each subscription; return per topic (messages, customers seen out of order)."""
    result = {}
    for region in REGIONS:
        last: dict[str, int] = {}
        out_of_order = 0
        messages = pull_messages(project, f"orders-{region}-demo")
        for message in messages:
            order = json.loads(message.data)
            if order["order_id"] < last.get(order["customer_id"], -1):
                out_of_order += 1
            last[order["customer_id"]] = order["order_id"]
        result[f"orders-{region}"] = (len(messages), out_of_order)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default=os.environ.get("GOOGLE_CLOUD_PROJECT", "demo-project"))
    parser.add_argument("--orders", type=int, default=20_000)
    parser.add_argument("--parallelism", type=int, default=2)
    args = parser.parse_args()

    prepare_topics(args.project)
    started = time.monotonic()
    run_job(args.project, args.orders, args.parallelism)
    took = time.monotonic() - started
    counts = read_back(args.project, args.orders)

    print(f"\nPub/Sub: {args.orders} orders routed by region in {took:.1f}s (job incl. startup)")
    print(f"{'topic':<22}{'messages':>10}{'out of order':>14}")
    for topic, (count, bad) in counts.items():
        print(f"{topic:<22}{count:>10}{bad:>14}")
    total = sum(c for c, _ in counts.values())
    disorder = sum(b for _, b in counts.values())
    print(f"{'total':<22}{total:>10}{disorder:>14}")
    ok = total >= args.orders and disorder == 0
    print("OK: every order delivered, per-customer order kept" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
