"""Compression, provenance attributes and attribute limits in real PyFlink jobs.

The sink publishes through a counting proxy to the emulator (the jobs run their Python in this
process), so the test sees what the compressed requests cost on the wire; the messages are read
back from the emulator with their attributes.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyflink.common import WatermarkStrategy
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream.functions import MapFunction

from pyflink_gcp.core import FailureHandler
from pyflink_gcp.pubsub import (
    PubSubDeadLetterQueue,
    PubSubPublisherOptions,
    PubSubSerializationSchema,
    PubSubSink,
    PubSubWriterOptions,
    TopicDestination,
)
from pyflink_gcp.pubsub.attributes import record_digest
from pyflink_gcp.pubsub.client import EMULATOR_VARIABLE
from tests.integration.pubsub.counting_proxy import CountingProxy
from tests.support.jobs import make_env, record_stream
from tests.support.pubsub import make_topics, pull_all, unique
from tests.support.restore import Failover, checkpoint_completed

pytestmark = pytest.mark.e2e

#: The event time of record 0; record i happened i seconds later.
START_MS = 1_714_557_600_000
TEXT = "an order line that repeats, as JSON payloads do " * 8


def order(i: int) -> dict:
    return {"id": i, "kind": ("new", "paid")[i % 2], "at": START_MS + i * 1_000, "text": TEXT}


def slow_order(i: int) -> dict:
    """An order, slowly enough that checkpoints complete while the job runs."""
    time.sleep(0.002)
    return order(i)


class FailLate(MapFunction):
    """Fails the job once, at the first record from ``at`` on that comes ``delay_s`` and
    ``after`` records after a checkpoint completed: those records left the map in bundles of
    50 well before the failure, so the sink received and published them (its batches leave
    after 50 ms) even on a busy machine, and the restore of the checkpoint replays them."""

    def __init__(
        self, marker: str, at: int, checkpoints: str, delay_s: float = 0.3, after: int = 200
    ) -> None:
        self._marker = marker
        self._at = at
        self._checkpoints = checkpoints
        self._delay_s = delay_s
        self._after = after
        self._completed_at: float | None = None
        self._since = 0
        self._next_look = 0.0

    def map(self, value: dict) -> dict:
        if value["id"] < self._at or os.path.exists(self._marker):
            return value
        now = time.monotonic()
        time.sleep(0.002)  # the input must not run out before the failure
        if self._completed_at is None:
            if now >= self._next_look:
                self._next_look = now + 0.02
                if checkpoint_completed(self._checkpoints):
                    self._completed_at = now
        elif now - self._completed_at >= self._delay_s and self._since >= self._after:
            with open(self._marker, "w") as f:
                f.write("failed\n")
            raise RuntimeError("injected failure (test)")
        else:
            self._since += 1
        return value


class EventTime(TimestampAssigner):
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return int(value["at"])


def payload(record: dict) -> bytes:
    return json.dumps(record, sort_keys=True).encode()


#: Jobs a test may run until one's failure comes after a record published since the checkpoint.
ATTEMPTS = 3


def test_a_job_with_compression_and_provenance_survives_a_failover_with_stable_ids(
    project, tmp_path
):
    # The failure must come after the sink published a record since the restored checkpoint,
    # or no record is published twice and the ids' stability is not under test. On a loaded
    # machine a job's failure can come first; such a job is run again, with new topics.
    for attempt in range(ATTEMPTS):
        n, published, ids_by_record, sent = _provenance_job(project, tmp_path / f"job{attempt}")
        if published > n:
            break
        print(f"job {attempt}: the failure came before a record since the checkpoint was published")
    data_bytes = sum(len(payload(order(i))) for i in range(n))
    print(
        f"provenance: {published - n} records published twice, each with one id; "
        f"compression: {sent} bytes on the wire for {data_bytes} bytes of data"
    )
    assert set(ids_by_record) == set(range(n))
    # The records published before the failure and again after the restore carry one id.
    assert published > n, "the failure came before any record after the checkpoint was published"
    assert all(len(ids) == 1 for ids in ids_by_record.values())
    assert len({next(iter(ids)) for ids in ids_by_record.values()}) == n
    assert sent < data_bytes / 3, f"{sent} bytes on the wire for {data_bytes} bytes of data"


def _provenance_job(project: str, directory: Path) -> tuple[int, int, dict[int, set[str]], int]:
    """One job with compression and provenance attributes that fails once after a checkpoint.

    Returns the records, the messages published, each record's ids, and the bytes the sink
    sent; every message's payload, attributes and topic are checked on the way.
    """
    os.makedirs(directory)
    topics = [unique("prov-new"), unique("prov-paid")]
    make_topics(project, topics)
    n = 2000
    marker = str(directory / "failed")
    failover = Failover(directory / "failover")
    with CountingProxy(os.environ[EMULATOR_VARIABLE]) as proxy:
        sink = (
            PubSubSink.builder()
            .set_destination_resolver(
                lambda r, ctx: TopicDestination.of(project, topics[0 if r["kind"] == "new" else 1])
            )
            .set_serializer(
                PubSubSerializationSchema.payload(payload)
                .with_attributes(lambda r: {"kind": r["kind"]})
                .with_event_time_attribute()
                .with_record_id_attribute()
            )
            .set_publisher_options(PubSubPublisherOptions.builder().enable_compression().build())
            .set_endpoint(f"http://{proxy.address}")  # plain text, as the emulator speaks
            # Batches leave well before the next checkpoint, so the records between the restored
            # checkpoint and the failure were published already: the replay publishes them again.
            .set_writer_options(
                PubSubWriterOptions.builder().max_buffer_time(timedelta(milliseconds=50)).build()
            )
            .build()
        )
        # Small bundles hand the map's records on to the sink soon after they are mapped.
        extra = {"python.fn-execution.bundle.size": "50", **failover.conf()}
        env = make_env(parallelism=2, checkpoint_ms=1000, extra=extra)
        (
            record_stream(env, n, slow_order)
            .map(FailLate(marker, 1200, failover.checkpoints))
            .assign_timestamps_and_watermarks(
                WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(EventTime())
            )
            .sink_to(sink)
        )
        env.execute("pubsub-provenance-compression")
        sent = proxy.sent
    assert os.path.exists(marker), "the failure was not injected"
    failover.assert_restored()

    ids_by_record: dict[int, set[str]] = defaultdict(set)
    published = 0
    for topic in topics:
        for message in pull_all(project, topic, expect=n // 2):
            published += 1
            record = json.loads(message.data)
            assert message.data == payload(order(record["id"]))
            user_and_time = {"kind": record["kind"], "event-time": str(record["at"])}
            path = f"projects/{project}/topics/{topic}"
            assert message.attributes == {
                **user_and_time,
                "record-id": record_digest(path, message.data, "", user_and_time),
            }
            assert topic == topics[0 if record["kind"] == "new" else 1]
            ids_by_record[record["id"]].add(message.attributes["record-id"])
    return n, published, ids_by_record, sent


def test_a_message_over_an_attribute_limit_is_dead_lettered_and_the_rest_is_published(project):
    topic, dlq = unique("attr-limit"), unique("attr-limit-dlq")
    make_topics(project, [topic, dlq])
    n = 500
    oversized = {i for i in range(n) if i % 50 == 7}

    def attributes(record: dict) -> dict[str, str]:
        note = "x" * (2_000 if record["id"] in oversized else 10)
        return {"kind": record["kind"], "note": note}

    sink = (
        PubSubSink.builder()
        .set_sink_name("orders-with-notes")
        .set_destination_resolver(lambda r, ctx: TopicDestination.of(project, topic))
        .set_serializer(
            PubSubSerializationSchema.payload(payload)
            .with_attributes(attributes)
            .with_record_id_attribute(key=lambda r: f"order-{r['id']}")
        )
        .set_failure_handler(
            FailureHandler.send_to_dead_letter_queue(
                PubSubDeadLetterQueue.of(TopicDestination.of(project, dlq))
            )
        )
        .build()
    )
    env = make_env(parallelism=2, checkpoint_ms=None, restarts=0)
    record_stream(env, n, order).sink_to(sink)
    env.execute("pubsub-attribute-limits")

    published = pull_all(project, topic, expect=n - len(oversized))
    assert sorted(json.loads(m.data)["id"] for m in published) == sorted(set(range(n)) - oversized)
    for message in published:
        record = json.loads(message.data)
        assert message.attributes == {
            "kind": record["kind"],
            "note": "x" * 10,
            "record-id": f"order-{record['id']}",
        }
    letters = pull_all(project, dlq, expect=len(oversized))
    assert sorted(json.loads(m.data)["id"] for m in letters) == sorted(oversized)
    for letter in letters:
        record = json.loads(letter.data)
        assert letter.data == payload(order(record["id"]))
        assert letter.attributes == {
            "kind": record["kind"],
            "record-id": f"order-{record['id']}",
            "dlq-attributes-dropped": "1",  # the oversized note, which no message can carry
            "dlq-destination": f"projects/{project}/topics/{topic}",
            "dlq-sink": "orders-with-notes",
            "dlq-reason": "attribute 'note' has a value of 2,000 bytes, over Pub/Sub's limit "
            "of 1,024 bytes per attribute value",
        }
