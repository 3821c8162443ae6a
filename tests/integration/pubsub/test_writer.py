"""The Pub/Sub writer against the emulator, driven directly (no Flink): registry, creation, DLQ."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from google.cloud import pubsub_v1

from pyflink_gcp.core import (
    CreationLimitExceededError,
    DestinationNotFoundError,
    FailureHandler,
)
from pyflink_gcp.pubsub import (
    CreateDisposition,
    PubSubDeadLetterQueue,
    PubSubPublisherOptions,
    PubSubSerializationSchema,
    PubSubSink,
    PubSubWriterOptions,
    TopicCreateOptions,
    TopicDestination,
)
from tests.support.dead_letters import MemoryDeadLetterQueue
from tests.support.pubsub import make_subscription, make_topics, pull_all, unique
from tests.support.writers import open_writer

pytestmark = pytest.mark.integration


def by_name(project: str):
    return lambda record, ctx: TopicDestination.of(project, record["topic"])


def payload(record):
    return json.dumps(record).encode()


def test_lru_cap_keeps_at_most_three_publishers_and_delivers_everything(project):
    topics = [unique(f"cap{i}") for i in range(10)]
    make_topics(project, topics)
    sink = (
        PubSubSink.builder()
        .set_destination_resolver(by_name(project))
        .set_serializer(payload)
        .set_writer_options(PubSubWriterOptions.builder().max_active_destinations(3).build())
        .build()
    )
    writer = open_writer(sink)
    try:
        for i in range(2000):
            writer.write({"topic": topics[i % 10], "i": i})
            assert len(writer.registry) <= 3
        writer.flush()
    finally:
        writer.close()
    assert writer.registry.max_seen == 3
    assert writer.registry.created >= 10
    for n, topic in enumerate(topics):
        got = sorted(json.loads(m.data)["i"] for m in pull_all(project, topic, expect=200))
        assert got == list(range(n, 2000, 10))


def test_requests_that_succeed_use_no_publish_thread(project):
    topics = [unique(f"aio{i}") for i in range(5)]
    make_topics(project, topics)
    sink = (
        PubSubSink.builder()
        .set_destination_resolver(by_name(project))
        .set_serializer(payload)
        .set_publisher_options(PubSubPublisherOptions.builder().max_messages(7).build())
        .build()
    )
    writer = open_writer(sink)
    try:
        for i in range(500):
            writer.write({"topic": topics[i % 5], "i": i})
        writer.flush()
        # Every Publish was a gRPC future (and under CREATE_NEVER there is no GetTopic): the
        # pool of retries and ordered topics never started a thread.
        assert writer.config.factory.pool._threads == set()
    finally:
        writer.close()
    for n, topic in enumerate(topics):
        got = sorted(json.loads(m.data)["i"] for m in pull_all(project, topic, expect=100))
        assert got == list(range(n, 500, 5))


def test_idle_publishers_are_evicted_after_a_flush_and_recreated(project):
    topics = [unique("idle"), unique("idle")]
    make_topics(project, topics)
    sink = (
        PubSubSink.builder()
        .set_destination_resolver(by_name(project))
        .set_serializer(payload)
        .set_writer_options(
            PubSubWriterOptions.builder().idle_timeout(timedelta(milliseconds=1)).build()
        )
        .build()
    )
    writer = open_writer(sink)
    try:
        writer.write({"topic": topics[0], "i": 0})
        writer.write({"topic": topics[1], "i": 1})
        time.sleep(0.01)  # both publishers idle longer than their timeout
        writer.flush()
        assert len(writer.registry) == 0 and writer.registry.evicted == 2
        writer.write({"topic": topics[0], "i": 2})
        assert len(writer.registry) == 1 and writer.registry.created == 3
        time.sleep(0.01)
        writer.flush()
    finally:
        writer.close()
    assert sorted(json.loads(m.data)["i"] for m in pull_all(project, topics[0], expect=2)) == [0, 2]
    assert [json.loads(m.data)["i"] for m in pull_all(project, topics[1], expect=1)] == [1]


def test_create_if_needed_creates_topics_with_options_and_the_bound_trips(project):
    names = [unique("made") for _ in range(3)]
    sink = (
        PubSubSink.builder()
        .set_destination_resolver(by_name(project))
        .set_serializer(payload)
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_topic_create_options(TopicCreateOptions(labels={"team": "streaming"}))
        .set_writer_options(PubSubWriterOptions.builder().max_created_destinations(2).build())
        .build()
    )
    writer = open_writer(sink)
    try:
        writer.write({"topic": names[0]})
        writer.write({"topic": names[1]})
        with pytest.raises(CreationLimitExceededError) as err:
            writer.write({"topic": names[2]})
        writer.flush()
    finally:
        writer.close()
    message = str(err.value)
    assert message.startswith(
        f"sink 'pubsub-sink': creating topic projects/{project}/topics/{names[2]} would exceed "
        "max_created_destinations=2 per 1h: this subtask created 2 topics in the last "
    )
    assert (
        f"The destination resolver {by_name.__module__}.by_name.<locals>.<lambda> names new "
        "topics faster than the bound allows; fix the resolver, or raise the bound with "
        "PubSubWriterOptions.builder().max_created_destinations(n, per=timedelta(...))"
    ) in message
    admin = pubsub_v1.PublisherClient()
    topic = admin.get_topic(topic=f"projects/{project}/topics/{names[0]}")
    assert dict(topic.labels) == {"team": "streaming"}


def test_create_never_on_a_missing_topic_names_it(project):
    missing, present = unique("missing"), unique("present")
    make_topics(project, [present])
    sink = (
        PubSubSink.builder()
        .set_destination_resolver(by_name(project))
        .set_serializer(payload)
        .set_failure_handler(FailureHandler.log_and_drop())
        .build()
    )
    writer = open_writer(sink)
    try:
        # No topic is checked: the missing one is learnt from its first Publish's NOT_FOUND,
        # so the error comes at the flush, and fails it even with a handler that drops
        # records (a missing topic is not a record's fault).
        writer.write({"topic": missing, "i": 0})
        writer.write({"topic": present, "i": 1})
        with pytest.raises(DestinationNotFoundError) as err:
            writer.flush()
        assert writer.router.dropped == 0 and writer.flushes == 0
    finally:
        writer.close()
    assert str(err.value) == (
        f"sink 'pubsub-sink': topic projects/{project}/topics/{missing} does not exist and the "
        "create disposition is CREATE_NEVER"
    )
    assert [json.loads(m.data)["i"] for m in pull_all(project, present, expect=1)] == [1]


def test_oversized_message_goes_to_the_dead_letter_queue_with_its_reason(project):
    topic, dlq = unique("big"), unique("dlq")
    make_topics(project, [topic, dlq])
    sink = (
        PubSubSink.builder()
        .set_destination_resolver(by_name(project))
        .set_serializer(
            PubSubSerializationSchema.payload(lambda r, ctx: r["body"].encode()).with_attributes(
                lambda r: {"kind": "test"}
            )
        )
        .set_failure_handler(
            FailureHandler.send_to_dead_letter_queue(
                PubSubDeadLetterQueue.of(TopicDestination.of(project, dlq), max_payload_bytes=1000)
            )
        )
        .build()
    )
    writer = open_writer(sink)
    try:
        writer.write({"topic": topic, "body": "small"})
        writer.write({"topic": topic, "body": "x" * 10_000_001})
        writer.write({"topic": topic, "body": "also small"})
        writer.flush()
    finally:
        writer.close()
    assert sorted(m.data for m in pull_all(project, topic, expect=2)) == [b"also small", b"small"]
    dead = pull_all(project, dlq, expect=1)
    assert len(dead) == 1
    assert dead[0].attributes["dlq-destination"] == f"projects/{project}/topics/{topic}"
    assert dead[0].attributes["dlq-reason"].startswith("message of 10000")
    assert dead[0].attributes["dlq-reason"].endswith("exceeds the Pub/Sub limit of 10000000 bytes")
    assert dead[0].attributes["dlq-sink"] == "pubsub-sink"
    assert dead[0].attributes["kind"] == "test"
    assert dead[0].data == b"x" * 1000
    assert dead[0].attributes["dlq-truncated-from"] == "10000001"
    assert writer.router.dead_lettered == 1


def test_ordered_publishing_keeps_each_keys_order(project):
    topic = unique("ord")
    publisher = pubsub_v1.PublisherClient()
    publisher.create_topic(name=f"projects/{project}/topics/{topic}")
    make_subscription(project, topic, ordered=True)
    sink = (
        PubSubSink.builder()
        .set_destination_resolver(lambda r, c: TopicDestination.of(project, topic))
        .set_serializer(
            PubSubSerializationSchema.payload(payload).with_ordering_key(lambda r: r["key"])
        )
        .set_publisher_options(
            PubSubPublisherOptions.builder().enable_message_ordering(True).max_messages(50).build()
        )
        .build()
    )
    writer = open_writer(sink)
    try:
        for i in range(1000):
            writer.write({"key": f"k{i % 7}", "seq": i})
        writer.flush()
    finally:
        writer.close()
    got = pull_all(project, topic, expect=1000)
    per_key: dict[str, list[int]] = {}
    for m in got:
        per_key.setdefault(m.ordering_key, []).append(json.loads(m.data)["seq"])
    assert sum(len(v) for v in per_key.values()) == 1000
    for seqs in per_key.values():
        assert seqs == sorted(seqs)


def test_messages_the_emulator_rejects_are_isolated_and_the_rest_published(project):
    """An empty message (no data, no attributes) fails its whole Publish request with
    INVALID_ARGUMENT; the writer halves the request until the empty ones are alone."""
    topic = unique("halve")
    make_topics(project, [topic])
    empty = {7, 42, 43}
    dlq = MemoryDeadLetterQueue()
    sink = (
        PubSubSink.builder()
        .set_destination_resolver(lambda r, c: TopicDestination.of(project, topic))
        .set_serializer(lambda r, ctx: b"" if r in empty else str(r).encode())
        .set_failure_handler(FailureHandler.send_to_dead_letter_queue(dlq))
        .build()
    )
    writer = open_writer(sink)
    try:
        for i in range(100):
            writer.write(i)
        writer.flush()
    finally:
        writer.close()
    got = sorted(int(m.data) for m in pull_all(project, topic, expect=97))
    assert got == [i for i in range(100) if i not in empty]
    assert len(dlq.sent) == 3
    assert all(f.payload == b"" and f.reason.startswith("INVALID_ARGUMENT: ") for f in dlq.sent)
    assert {f.destination for f in dlq.sent} == {f"projects/{project}/topics/{topic}"}
