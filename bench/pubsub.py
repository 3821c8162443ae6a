"""Pub/Sub sink throughput against its ceilings, measured in one run on the same input.

    python bench/pubsub.py [--records 200000] [--topics 16] [--naive-records 3000]

Prints records/s of:
- the sink (PyFlink job: source -> map -> PubSubSink), at parallelism 1 and 2;
- the PyFlink ceiling: the same job shape with a no-op Python process function;
- the emulator ceiling: the raw google-cloud-pubsub PublisherClient publishing the same messages
  outside Flink (its own batching, 1,000 messages per request);
- the naive per-record ``publish(...).result()`` inside a ``map``;
and the ratios. Starts its own Pub/Sub emulator. Flink figures are steady-state rates: each job
runs with the full input and with a tenth of it, and the rate is taken from the difference of
their net runtimes, which cancels the workers' start-up.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import NoOp, flink_env, run_job, source, table, timed
from pyflink_gcp.tools.emulators import EmulatorStack

PROJECT = "bench-project"


def make_record(i: int) -> dict:
    return {
        "id": i,
        "topic": f"bench-t{i % 16:02d}",
        "customer": f"c{i % 1000}",
        "payload": "x" * 100,
    }


def payload(r: dict) -> bytes:
    return json.dumps(r).encode()


def create_topics(n: int) -> list[str]:
    from google.cloud import pubsub_v1

    client = pubsub_v1.PublisherClient()
    names = [client.topic_path(PROJECT, f"bench-t{i:02d}") for i in range(n)]
    for name in names:
        try:
            client.create_topic(name=name)
        except Exception:  # noqa: BLE001 - exists from an earlier round
            pass
    return names


def steady_rate(run: Callable[[int], float], records: int) -> float:
    """Records/s net of the job's fixed cost: a job's net runtime includes several seconds of
    Python worker start-up, so time ``records`` and a tenth of them and take the difference."""
    small = max(1, records // 10)
    return (records - small) / max(1e-9, run(records) - run(small))


def sink_job_seconds(records: int, parallelism: int) -> float:
    from pyflink_gcp.pubsub import PubSubSink, TopicDestination

    project = PROJECT
    sink = (
        PubSubSink.builder()
        .set_destination_resolver(lambda r, c: TopicDestination.of(project, r["topic"]))
        .set_serializer(payload)
        .build()
    )
    env = flink_env(parallelism)
    source(env, records, make_record).sink_to(sink)
    return run_job(env, "bench-pubsub-sink")


def noop_job_seconds(records: int, parallelism: int) -> float:
    env = flink_env(parallelism)
    source(env, records, make_record).process(NoOp())
    return run_job(env, "bench-noop")


def raw_client_rate(records: int) -> float:
    from google.cloud import pubsub_v1

    client = pubsub_v1.PublisherClient(
        batch_settings=pubsub_v1.types.BatchSettings(max_messages=1000, max_latency=0.05)
    )
    items = [make_record(i) for i in range(records)]

    def publish_all() -> None:
        futures = [
            client.publish(client.topic_path(PROJECT, r["topic"]), payload(r)) for r in items
        ]
        for f in futures:
            f.result()

    return records / timed(publish_all)


class NaivePublish:
    """What people write today: one blocking publish per record inside a map."""

    def __init__(self, project: str) -> None:
        self.project = project
        self.client = None

    def __call__(self, r: dict) -> int:
        if self.client is None:
            from google.cloud import pubsub_v1

            self.client = pubsub_v1.PublisherClient()
        self.client.publish(self.client.topic_path(self.project, r["topic"]), payload(r)).result()
        return r["id"]


def naive_job_seconds(records: int, parallelism: int) -> float:
    env = flink_env(parallelism)
    source(env, records, make_record).map(NaivePublish(PROJECT)).process(NoOp())
    return run_job(env, "bench-naive-map")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--topics", type=int, default=16)
    parser.add_argument("--naive-records", type=int, default=3_000)
    args = parser.parse_args()
    with EmulatorStack(services=("pubsub",), project=PROJECT) as stack:
        os.environ.update(stack.env)
        create_topics(args.topics)
        rows = []
        for p in (1, 2):
            rows.append(
                (
                    f"PyFlink no-op ceiling p={p}",
                    steady_rate(lambda n, p=p: noop_job_seconds(n, p), args.records),
                )
            )
            rows.append(
                (
                    f"PubSubSink p={p}",
                    steady_rate(lambda n, p=p: sink_job_seconds(n, p), args.records),
                )
            )
        rows.append(("raw PublisherClient (emulator ceiling)", raw_client_rate(args.records)))
        for p in (1, 2):
            rows.append(
                (
                    f"naive publish().result() in map p={p}",
                    steady_rate(lambda n, p=p: naive_job_seconds(n, p), args.naive_records),
                )
            )
    rates = dict(rows)
    print(f"\n{args.records:,} records, {args.topics} topics, ~150-byte JSON payloads\n")
    print(table(rows, {}))
    for p in (1, 2):
        ceiling = min(
            rates[f"PyFlink no-op ceiling p={p}"], rates["raw PublisherClient (emulator ceiling)"]
        )
        sink = rates[f"PubSubSink p={p}"]
        naive = rates[f"naive publish().result() in map p={p}"]
        print(
            f"p={p}: sink / min(ceilings) = {sink / ceiling:.2f}   sink / naive map = {sink / naive:.1f}x"
        )


if __name__ == "__main__":
    main()
