"""Order events turned into webhook calls, spread over four Cloud Tasks queues by customer.

Run against the local emulators (``pyflink-gcp emulators up`` prints the variables; the HTTP
receiver stands in for the customers' endpoints) or real Cloud Tasks (Application Default
Credentials, an HTTPS endpoint of yours)::

    python examples/cloudtasks_webhooks.py --events 4000
    python examples/cloudtasks_webhooks.py --project my-project --location europe-west1 \\
        --target-url https://hooks.example.com/orders

Each event becomes one HTTP task on ``webhooks-<n>`` where ``n`` is a stable hash of the
customer modulo 4, so the four queues share the dispatch load while one customer's webhooks
always go through the same queue (and its rate limits). The task id is derived from the event
id, so a replay after a failure does not call a webhook twice. Against the emulator the script
then waits for the receiver to get every call and checks queue per customer and duplicates.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import uuid
import zlib
from collections import Counter, defaultdict
from datetime import timedelta

import grpc
from google.api_core import exceptions
from google.cloud import tasks_v2
from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport
from pyflink.common import Configuration
from pyflink.common.watermark_strategy import WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource

from pyflink_gcp.cloudtasks import (
    CloudTasksSerializationSchema,
    CloudTasksSink,
    CloudTasksWriterOptions,
    QueueDestination,
)
from pyflink_gcp.tools.emulators import fetch_received

QUEUES = 4
EVENT_TYPES = ["order.created", "order.paid", "order.shipped", "order.refunded"]


def make_event(i: int) -> dict:
    """A deterministic order event derived from the sequence number."""
    return {
        "event_id": f"evt-{i:07d}",
        "customer_id": f"customer-{i % 53}",
        "type": EVENT_TYPES[i % len(EVENT_TYPES)],
        "amount_cents": (i * 37) % 10_000,
    }


def queue_index(customer_id: str) -> int:
    """A stable hash (Python's hash() of a str differs between worker processes)."""
    return zlib.crc32(customer_id.encode()) % QUEUES


class WebhookQueues:
    """The resolver: a customer's webhooks always go through the same one of four queues."""

    def __init__(self, project: str, location: str, prefix: str) -> None:
        self.queues = [
            QueueDestination.of(project, location, f"{prefix}-{n}") for n in range(QUEUES)
        ]

    def resolve(self, event: dict, context) -> QueueDestination:
        return self.queues[queue_index(event["customer_id"])]


class TaskId:
    """The task id of an event: a hash (not a growing sequence, which the service spreads badly)
    of the run and the event id, so a replayed event maps to the same task."""

    def __init__(self, run: str) -> None:
        self.run = run

    def __call__(self, event: dict, context) -> str:
        return hashlib.sha256(f"{self.run}/{event['event_id']}".encode()).hexdigest()[:32]


def admin_client() -> tasks_v2.CloudTasksClient:
    host = os.environ.get("CLOUD_TASKS_EMULATOR_HOST")
    if host:
        channel = grpc.insecure_channel(host)
        return tasks_v2.CloudTasksClient(transport=CloudTasksGrpcTransport(channel=channel))
    return tasks_v2.CloudTasksClient()


def prepare_queues(project: str, location: str, prefix: str) -> None:
    """Create the queues if they are missing (the sink never creates queues)."""
    client = admin_client()
    parent = f"projects/{project}/locations/{location}"
    emulator = bool(os.environ.get("CLOUD_TASKS_EMULATOR_HOST"))
    for n in range(QUEUES):
        queue = tasks_v2.Queue(name=f"{parent}/queues/{prefix}-{n}")
        if emulator:
            # The local receiver is a small server: a few concurrent dispatches per queue.
            queue.rate_limits = tasks_v2.RateLimits(
                max_dispatches_per_second=500, max_concurrent_dispatches=4
            )
        try:
            client.create_queue(parent=parent, queue=queue)
        except exceptions.AlreadyExists:
            pass


def run_job(args: argparse.Namespace, run: str, target: str) -> None:
    conf = Configuration()
    # The Python workers run this interpreter (the venv with pyflink and pyflink-gcp), whether
    # or not the venv is activated; otherwise Flink starts the `python` on the PATH.
    conf.set_string("python.executable", sys.executable)
    conf.set_string("python.client.executable", sys.executable)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(args.parallelism)
    env.enable_checkpointing(2000)

    sink = (
        CloudTasksSink.builder()
        .set_sink_name("order-webhooks")
        .set_destination_resolver(WebhookQueues(args.project, args.location, args.queue_prefix))
        .set_serializer(
            CloudTasksSerializationSchema.http_target(target)
            .with_body(lambda e, ctx: json.dumps(e).encode(), content_type="application/json")
            .with_headers(
                lambda e, ctx: {"X-Customer-Id": e["customer_id"], "X-Event-Type": e["type"]}
            )
            .with_task_id(TaskId(run))
        )
        .set_writer_options(
            CloudTasksWriterOptions.builder()
            .max_in_flight_requests(256)
            .retry_deadline(timedelta(minutes=2))
            .build()
        )
        .build()
    )
    events = env.from_source(
        NumberSequenceSource(0, args.events - 1), WatermarkStrategy.no_watermarks(), "events"
    )
    events.map(make_event).sink_to(sink)
    env.execute("cloudtasks-webhooks")


def collect(receiver: str, path: str, expected: int, timeout: float = 120.0) -> list[dict]:
    """The receiver's requests under ``path`` once ``expected`` arrived and then none for 2 s."""
    deadline = time.monotonic() + timeout
    seen, quiet_since = -1, time.monotonic()
    while True:
        got = [r for r in fetch_received(receiver) if r["path"].startswith(path)]
        if len(got) != seen:
            seen, quiet_since = len(got), time.monotonic()
        elif (seen >= expected and time.monotonic() - quiet_since >= 2) or (
            time.monotonic() > deadline
        ):
            return got
        time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default=os.environ.get("GOOGLE_CLOUD_PROJECT", "demo-project"))
    parser.add_argument("--location", default="us-central1")
    parser.add_argument("--queue-prefix", default="webhooks")
    parser.add_argument("--events", type=int, default=4000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument(
        "--target-url", help="webhook URL (default: the local receiver, PYFLINK_GCP_RECEIVER_URL)"
    )
    args = parser.parse_args()

    receiver = os.environ.get("PYFLINK_GCP_RECEIVER_URL")
    if not args.target_url and not receiver:
        parser.error("--target-url is required without the local receiver")
    run = uuid.uuid4().hex[:8]  # task names stay unique when the script runs again
    path = f"/webhooks/{run}"
    target = args.target_url or receiver + path

    prepare_queues(args.project, args.location, args.queue_prefix)
    started = time.monotonic()
    run_job(args, run, target)
    took = time.monotonic() - started
    print(f"\nCloud Tasks: {args.events} events -> {QUEUES} queues in {took:.1f}s (incl. startup)")
    if args.target_url:
        print("tasks created; the service dispatches them to", args.target_url)
        return 0

    calls = collect(receiver, path, args.events)
    per_queue = Counter(r["headers"]["x-cloudtasks-queuename"] for r in calls)
    queues_of_customer: dict[str, set[str]] = defaultdict(set)
    for r in calls:
        queues_of_customer[r["headers"]["x-customer-id"]].add(
            r["headers"]["x-cloudtasks-queuename"]
        )
    tasks = Counter(r["headers"]["x-cloudtasks-taskname"] for r in calls)
    print(f"{'queue':<16}{'webhook calls':>14}")
    for queue, count in sorted(per_queue.items()):
        print(f"{queue:<16}{count:>14}")
    split = sum(1 for qs in queues_of_customer.values() if len(qs) > 1)
    duplicates = sum(tasks.values()) - len(tasks)
    print(f"{'total':<16}{len(calls):>14}")
    print(f"customers: {len(queues_of_customer)}, on more than one queue: {split}")
    print(f"duplicate calls: {duplicates}")
    ok = len(tasks) == args.events and split == 0 and duplicates == 0
    print("OK: one call per event, one queue per customer" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
