"""PubSubSink inside real PyFlink MiniCluster jobs, read back by pulling from the emulator."""

from __future__ import annotations

import json
import os
import time
from collections import Counter

import pytest
from pyflink.common import Row
from pyflink.common.typeinfo import Types

from pyflink_gcp.pubsub import (
    PubSubPublisherOptions,
    PubSubSerializationSchema,
    PubSubSink,
    PubSubWriterOptions,
    TopicDestination,
)
from tests.support.jobs import FailOnce, make_env, record_stream
from tests.support.pubsub import make_topics, pull_all, unique
from tests.support.restore import Failover

pytestmark = pytest.mark.e2e

REGIONS = [
    "us-east",
    "us-west",
    "eu-north",
    "eu-south",
    "asia-east",
    "asia-south",
    "sa-east",
    "af-south",
]


def order(i: int) -> dict:
    return {"id": i, "region": REGIONS[i % len(REGIONS)], "customer": f"c{i % 37}", "seq": i}


class RegionResolver:
    """Routes an order to ``<prefix>-<region>``; an object resolver, as the contract allows."""

    def __init__(self, project: str, prefix: str) -> None:
        self.project = project
        self.prefix = prefix

    def resolve(self, record: dict, context) -> TopicDestination:
        return TopicDestination.of(self.project, f"{self.prefix}-{record['region']}")


def region_sink(project: str, prefix: str, **writer) -> PubSubSink:
    builder = (
        PubSubSink.builder()
        .set_destination_resolver(RegionResolver(project, prefix))
        .set_serializer(PubSubSerializationSchema.payload(lambda r: json.dumps(r).encode()))
    )
    if writer:
        builder.set_writer_options(PubSubWriterOptions(**writer))
    return builder.build()


def read_regions(project: str, prefix: str, expect_total: int) -> dict[str, list[dict]]:
    out = {}
    for region in REGIONS:
        msgs = pull_all(project, f"{prefix}-{region}", expect=expect_total // len(REGIONS))
        out[region] = [json.loads(m.data) for m in msgs]
    return out


def test_routes_every_record_to_its_region_topic_at_parallelism_2(project):
    prefix = unique("route")
    make_topics(project, [f"{prefix}-{r}" for r in REGIONS])
    n = 4000  # 500 per topic: below one batch, so delivery relies on the end-of-input flush
    env = make_env(parallelism=2)
    record_stream(env, n, order).sink_to(region_sink(project, prefix))
    env.execute("pubsub-routing")

    got = read_regions(project, prefix, n)
    for region, records in got.items():
        assert all(r["region"] == region for r in records), f"misrouted record in {region}"
        assert sorted(r["id"] for r in records) == [i for i in range(n) if REGIONS[i % 8] == region]


def test_thread_mode_job_with_ten_topics_and_three_active_publishers(project):
    prefix = unique("lru")
    topics = [f"{prefix}-t{i}" for i in range(10)]
    make_topics(project, topics)
    n = 3000
    sink = (
        PubSubSink.builder()
        .set_destination_resolver(lambda r, c: TopicDestination.of(project, f"{prefix}-t{r % 10}"))
        .set_serializer(lambda r: str(r).encode())
        .set_writer_options(PubSubWriterOptions.builder().max_active_destinations(3).build())
        .build()
    )
    env = make_env(parallelism=2, thread_mode=True)
    record_stream(env, n, lambda i: i).sink_to(sink)
    env.execute("pubsub-lru-thread-mode")
    for t in range(10):
        got = sorted(int(m.data) for m in pull_all(project, topics[t], expect=n // 10))
        assert got == list(range(t, n, 10))


def test_keyed_stream_with_ordering_keys_keeps_per_customer_order(project):
    prefix = unique("ord")
    make_topics(project, [f"{prefix}-{r}" for r in REGIONS[:4]], ordered=True)
    n = 3000

    def to_record(i: int) -> dict:
        return {"id": i, "region": REGIONS[i % 4], "customer": f"c{i % 23}", "seq": i}

    sink = (
        PubSubSink.builder()
        .set_destination_resolver(RegionResolver(project, prefix))
        .set_serializer(
            PubSubSerializationSchema.payload(lambda r: json.dumps(r).encode()).with_ordering_key(
                lambda r, ctx: r["customer"]
            )
        )
        .set_publisher_options(
            PubSubPublisherOptions.builder().enable_message_ordering(True).max_messages(100).build()
        )
        .build()
    )
    env = make_env(parallelism=2)
    record_stream(env, n, to_record, name="orders", parallelism=1).key_by(
        lambda r: r["customer"]
    ).sink_to(sink)
    env.execute("pubsub-ordering")

    total = 0
    for region in REGIONS[:4]:
        msgs = pull_all(project, f"{prefix}-{region}", expect=n // 4)
        per_key: dict[str, list[int]] = {}
        for m in msgs:
            record = json.loads(m.data)
            assert m.ordering_key == record["customer"]
            per_key.setdefault(m.ordering_key, []).append(record["seq"])
        for key, seqs in per_key.items():
            assert seqs == sorted(seqs), f"{region}/{key} out of order"
        total += sum(len(s) for s in per_key.values())
    assert total == n


def slow(i: int) -> dict:
    """Records ~1 ms apart: several checkpoints complete before the failure at record 2,200,
    which waits for one anyway (``after_checkpoint``)."""
    time.sleep(0.001)
    return order(i)


@pytest.mark.parametrize("hard", [True, False], ids=["worker-killed", "task-raises"])
def test_failure_and_restart_lose_nothing(project, tmp_path, hard):
    prefix = unique("ckpt")
    make_topics(project, [f"{prefix}-{r}" for r in REGIONS])
    n = 3000
    marker = str(tmp_path / "failed")
    failover = Failover(tmp_path / "failover")
    env = make_env(parallelism=2, checkpoint_ms=300, process_workers=hard, extra=failover.conf())
    (
        record_stream(env, n, slow)
        .map(
            FailOnce(
                marker,
                lambda r: r["id"] == 2200,
                hard=hard,
                after_checkpoint=failover.checkpoints,
            )
        )
        # The maps run inside the writer's operator, in its bundles: a few hundred records keep
        # a barrier's wait for the slow map short, so checkpoints complete before the failure.
        .sink_to(region_sink(project, prefix, max_buffered_records=300))
    )
    env.execute("pubsub-restart")
    assert os.path.exists(marker), "the failure was not injected"
    failover.assert_restored()

    got = read_regions(project, prefix, n)
    ids = Counter(r["id"] for records in got.values() for r in records)
    assert set(ids) == set(range(n)), f"lost {sorted(set(range(n)) - set(ids))[:10]}"
    duplicates = sum(c - 1 for c in ids.values())
    print(f"restart ({'kill' if hard else 'raise'}): {n} records, 0 lost, {duplicates} duplicates")


ORDER_ROW = ("id", "region", "customer", "seq")


def order_row(r: dict) -> Row:
    return Row(*(r[name] for name in ORDER_ROW))


def row_order(row: Row) -> dict:
    return dict(zip(ORDER_ROW, row, strict=True))


def test_typed_row_stream_keeps_markers_and_loses_nothing_when_its_worker_dies(project, tmp_path):
    """A typed input (a row type, not pickled objects) runs under the typed marker operator."""
    prefix = unique("typed")
    make_topics(project, [f"{prefix}-{r}" for r in REGIONS])
    n = 3000
    marker = str(tmp_path / "failed")
    row_type = Types.ROW_NAMED(
        list(ORDER_ROW), [Types.LONG(), Types.STRING(), Types.STRING(), Types.LONG()]
    )
    sink = (
        PubSubSink.builder()
        .set_destination_resolver(lambda row, c: TopicDestination.of(project, f"{prefix}-{row[1]}"))
        .set_serializer(lambda row: json.dumps(row_order(row)).encode())
        .build()
    )
    failover = Failover(tmp_path / "failover")
    env = make_env(parallelism=2, checkpoint_ms=300, process_workers=True, extra=failover.conf())
    (
        record_stream(env, n, slow)
        .map(
            FailOnce(
                marker, lambda r: r["id"] == 2200, hard=True, after_checkpoint=failover.checkpoints
            )
        )
        .map(order_row, output_type=row_type)
        .sink_to(sink)
    )
    env.execute("pubsub-typed-restart")
    assert os.path.exists(marker), "the failure was not injected"
    failover.assert_restored()

    got = read_regions(project, prefix, n)
    ids = Counter(r["id"] for records in got.values() for r in records)
    assert set(ids) == set(range(n)), f"lost {sorted(set(range(n)) - set(ids))[:10]}"
    assert all(r["region"] == region for region, rs in got.items() for r in rs)


def test_resolver_returning_none_fails_the_job_naming_sink_resolver_and_record(project):
    sink = (
        PubSubSink.builder()
        .set_sink_name("orders-by-region")
        .set_destination_resolver(
            lambda r, c: None if r == 7 else TopicDestination.of(project, "never-used")
        )
        .set_serializer(lambda r: b"x")
        .build()
    )
    env = make_env(parallelism=1, checkpoint_ms=None, restarts=0)
    record_stream(env, 10, lambda i: i).filter(lambda i: i == 7).sink_to(sink)
    with pytest.raises(Exception) as err:
        env.execute("pubsub-resolver-none")
    text = str(err.value)
    assert (
        "ResolverError: sink 'orders-by-region': destination resolver "
        "tests.e2e.pubsub.test_pubsub_sink.test_resolver_returning_none_fails_the_job_naming_sink_"
        "resolver_and_record.<locals>.<lambda> returned None for record 7; every record needs a "
        "TopicDestination"
    ) in text


def test_sink_refuses_a_job_with_python_metrics_disabled(project):
    from pyflink_gcp.core import ConfigurationError

    env = make_env(parallelism=1, extra={"python.metric.enabled": "false"})
    sink = (
        PubSubSink.builder()
        .set_destination_resolver(lambda r, c: TopicDestination.of(project, "unused"))
        .set_serializer(lambda r: b"x")
        .build()
    )
    with pytest.raises(ConfigurationError) as err:
        record_stream(env, 10, lambda i: i).sink_to(sink)
    assert str(err.value) == (
        "sink 'pubsub-sink': python.metric.enabled=false disables the pre-barrier flush hook "
        "pyflink-gcp relies on for at-least-once delivery; enable it."
    )
