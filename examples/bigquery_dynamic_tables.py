"""Orders written to one BigQuery table per day, unknown tenants dead-lettered to Pub/Sub.

Run against the local emulators (``pyflink-gcp emulators up`` prints the variables) or real
BigQuery and Pub/Sub (Application Default Credentials), with the ``bigquery`` and ``pubsub``
extras installed::

    python examples/bigquery_dynamic_tables.py --project my-project --orders 20000

Each order carries its event time; the job assigns it as the Flink timestamp, and the sink's
resolver files the order under ``shop.orders_YYYYMMDD`` of that day (tables created on demand
from the serializer's schema). Orders of tenants the shop does not know have no table: the
resolver returns an ``UnroutableRecord`` and the failure handler publishes them to the
``orders-dlq`` topic with ``dlq-destination=unresolved``. Afterwards the script counts the rows of
every day table and the dead letters.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from datetime import UTC, datetime, timedelta

from google.api_core import exceptions
from google.cloud import bigquery, pubsub_v1
from pyflink.common import Configuration
from pyflink.common.watermark_strategy import TimestampAssigner, WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource

from pyflink_gcp import FailureHandler, UnroutableRecord
from pyflink_gcp.bigquery import (
    BigQuerySerializer,
    BigQuerySink,
    BigQueryWriterOptions,
    CreateDisposition,
    TableDestination,
)
from pyflink_gcp.pubsub import PubSubDeadLetterQueue, TopicDestination
from pyflink_gcp.tools.emulators.clients import bigquery_client, pull_messages

warnings.filterwarnings("ignore", message="The return_immediately flag is deprecated")

DATASET = "shop"
DLQ_TOPIC = "orders-dlq"
TENANTS = ("acme", "globex", "initech", "umbrella", "hooli")
FIRST_DAY = datetime(2024, 3, 1, tzinfo=UTC)
DAYS = 10

# The tables' schema, in the client library's own idiom (a TableSchema works too).
ORDERS = [
    bigquery.SchemaField("order_id", "INT64", mode="REQUIRED"),
    bigquery.SchemaField("tenant", "STRING", mode="REQUIRED"),
    bigquery.SchemaField("amount", "NUMERIC"),
    bigquery.SchemaField("ordered_at", "TIMESTAMP"),
]


def make_order(i: int) -> dict:
    """A deterministic order; every 47th comes from a tenant the shop does not know."""
    ordered_at = FIRST_DAY + timedelta(days=i % DAYS, seconds=(i * 7919) % 86_400)
    return {
        "order_id": i,
        "tenant": "unknown-corp" if i % 47 == 5 else TENANTS[i % len(TENANTS)],
        "amount": f"{(i * 37) % 10_000 / 100:.2f}",
        "ordered_at_ms": int(ordered_at.timestamp() * 1000),
    }


class OrderTime(TimestampAssigner):
    def extract_timestamp(self, value: dict, record_timestamp: int) -> int:
        return value["ordered_at_ms"]


class DailyOrderTables:
    """The resolver: ``orders_YYYYMMDD`` of the event time; unknown tenants are unroutable."""

    def __init__(self, project: str) -> None:
        self.project = project

    def resolve(self, order: dict, context):
        if order["tenant"] not in TENANTS:
            return UnroutableRecord.of(
                json.dumps(order).encode(), f"unknown tenant {order['tenant']}"
            )
        # Event time, never the wall clock: a replay after a failure routes the same way.
        millis = context.timestamp if context.timestamp is not None else order["ordered_at_ms"]
        day = datetime.fromtimestamp(millis / 1000, UTC).strftime("%Y%m%d")
        return TableDestination.of(self.project, DATASET, f"orders_{day}")


def to_row(order: dict) -> dict:
    """The row of an order (a row function may also take the WriterContext as second argument)."""
    return {
        "order_id": order["order_id"],
        "tenant": order["tenant"],
        "amount": order["amount"],
        "ordered_at": order["ordered_at_ms"] * 1000,  # TIMESTAMP: epoch microseconds
    }


def prepare(project: str) -> None:
    """Create the dataset (the sink creates tables, not datasets) and the dead-letter topic."""
    client = bigquery_client(project)
    client.create_dataset(f"{project}.{DATASET}", exists_ok=True)
    client.close()
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = publisher.topic_path(project, DLQ_TOPIC)
    for create in (
        lambda: publisher.create_topic(name=topic),
        lambda: subscriber.create_subscription(
            name=subscriber.subscription_path(project, f"{DLQ_TOPIC}-demo"), topic=topic
        ),
    ):
        try:
            create()
        except exceptions.AlreadyExists:
            pass
    subscriber.close()


def run_job(project: str, orders: int, parallelism: int) -> None:
    conf = Configuration()
    # The Python workers run this interpreter (the venv with pyflink and pyflink-gcp), whether
    # or not the venv is activated; otherwise Flink starts the `python` on the PATH.
    conf.set_string("python.executable", sys.executable)
    conf.set_string("python.client.executable", sys.executable)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    env.enable_checkpointing(2000)

    sink = (
        BigQuerySink.builder()
        .set_sink_name("daily-orders")
        .set_destination_resolver(DailyOrderTables(project))
        .set_serializer(BigQuerySerializer.of(to_row, schema=ORDERS))
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_writer_options(
            BigQueryWriterOptions.builder()
            # One table per day: more new tables than days means a resolver bug, so fail fast.
            .max_created_destinations(DAYS)
            .max_buffer_time(timedelta(seconds=2))
            .build()
        )
        .set_failure_handler(
            FailureHandler.send_to_dead_letter_queue(
                PubSubDeadLetterQueue.of(TopicDestination.of(project, DLQ_TOPIC))
            )
        )
        .build()
    )
    (
        env.from_source(
            NumberSequenceSource(0, orders - 1), WatermarkStrategy.no_watermarks(), "orders"
        )
        .map(make_order)
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(OrderTime())
        )
        .sink_to(sink)
    )
    env.execute("bigquery-dynamic-tables")


def count_rows(project: str) -> dict[str, int]:
    client = bigquery_client(project)
    counts = {}
    for table in sorted(client.list_tables(f"{project}.{DATASET}"), key=lambda t: t.table_id):
        if table.table_id.startswith("orders_"):
            sql = (
                f"SELECT COUNT(DISTINCT order_id) AS n FROM `{project}.{DATASET}.{table.table_id}`"
            )
            counts[table.table_id] = next(iter(client.query(sql).result()))["n"]
    client.close()
    return counts


def count_dead_letters(project: str) -> tuple[int, int]:
    """(dead letters, of which carry dlq-destination=unresolved)."""
    letters = pull_messages(project, f"{DLQ_TOPIC}-demo")
    unresolved = sum(m.attributes.get("dlq-destination") == "unresolved" for m in letters)
    return len(letters), unresolved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default=os.environ.get("GOOGLE_CLOUD_PROJECT", "demo-project"))
    parser.add_argument("--orders", type=int, default=20_000)
    parser.add_argument("--parallelism", type=int, default=2)
    args = parser.parse_args()

    prepare(args.project)
    started = time.monotonic()
    run_job(args.project, args.orders, args.parallelism)
    took = time.monotonic() - started
    counts = count_rows(args.project)
    letters, unresolved = count_dead_letters(args.project)

    expected_unknown = sum(1 for i in range(args.orders) if i % 47 == 5)
    print(f"\nBigQuery: {args.orders} orders filed by day in {took:.1f}s (job incl. startup)")
    print(f"{'table':<24}{'orders':>10}")
    for table, n in counts.items():
        print(f"{DATASET + '.' + table:<24}{n:>10}")
    print(f"{'total':<24}{sum(counts.values()):>10}")
    print(f"dead letters on {DLQ_TOPIC}: {letters} ({unresolved} with dlq-destination=unresolved)")
    ok = (
        len(counts) == DAYS
        and sum(counts.values()) >= args.orders - expected_unknown
        and unresolved >= expected_unknown
    )
    print("OK: every order in its day's table, unknown tenants dead-lettered" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
