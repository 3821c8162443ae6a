"""Test helpers for Pub/Sub: topics with subscriptions, and pulling everything back."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from google.cloud import pubsub_v1

from pyflink_gcp.tools.emulators.clients import pull_messages


@dataclass
class Pulled:
    data: bytes
    attributes: dict[str, str]
    ordering_key: str


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def make_topics(project: str, topics: list[str], *, ordered: bool = False) -> None:
    """Create each topic with a subscription of the same name (ordered if asked)."""
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    try:
        for topic in topics:
            publisher.create_topic(name=publisher.topic_path(project, topic))
            make_subscription(project, topic, ordered=ordered, subscriber=subscriber)
    finally:
        subscriber.close()


def make_subscription(
    project: str, topic: str, *, ordered: bool = False, subscriber: Any = None
) -> None:
    own = subscriber is None
    subscriber = subscriber or pubsub_v1.SubscriberClient()
    try:
        subscriber.create_subscription(
            request={
                "name": subscriber.subscription_path(project, topic),
                "topic": f"projects/{project}/topics/{topic}",
                "enable_message_ordering": ordered,
                "ack_deadline_seconds": 60,
            }
        )
    finally:
        if own:
            subscriber.close()


def pull_all(
    project: str,
    subscription: str,
    *,
    expect: int | None = None,
    timeout_s: float = 30.0,
    quiet_s: float = 1.5,
) -> list[Pulled]:
    """Pull and ack until ``expect`` messages arrived (or nothing came for ``quiet_s``)."""
    messages = pull_messages(
        project, subscription, expect=expect, timeout_s=timeout_s, quiet_s=quiet_s
    )
    return [Pulled(m.data, dict(m.attributes), m.ordering_key) for m in messages]


def topics_by_number(project: str, prefix: str, count: int) -> tuple[list[str], Any]:
    """``count`` new topics (each with its subscription) named from ``prefix``, and a resolver
    sending record ``i`` (an int) to topic ``i % count``."""
    from pyflink_gcp.pubsub import TopicDestination

    names = [unique(f"{prefix}{t}") for t in range(count)]
    make_topics(project, names)
    topics = [TopicDestination.of(project, name) for name in names]

    def resolve(record: int, ctx: Any) -> Any:
        return topics[record % count]

    return names, resolve
