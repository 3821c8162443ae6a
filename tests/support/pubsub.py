"""Test helpers for Pub/Sub: topics with subscriptions, and pulling everything back."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from google.cloud import pubsub_v1


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
    subscriber = pubsub_v1.SubscriberClient()
    path = subscriber.subscription_path(project, subscription)
    out: list[Pulled] = []
    deadline = time.monotonic() + timeout_s
    last = time.monotonic()
    try:
        while time.monotonic() < deadline:
            # Once all expected arrived, drain a little longer so extra messages show up.
            if expect is not None and len(out) >= expect and time.monotonic() - last > 0.5:
                break
            response = subscriber.pull(
                request={"subscription": path, "max_messages": 1000, "return_immediately": True},
                timeout=10,
            )
            if response.received_messages:
                last = time.monotonic()
                for m in response.received_messages:
                    out.append(
                        Pulled(m.message.data, dict(m.message.attributes), m.message.ordering_key)
                    )
                subscriber.acknowledge(
                    request={
                        "subscription": path,
                        "ack_ids": [m.ack_id for m in response.received_messages],
                    }
                )
            else:
                if expect is None and time.monotonic() - last > quiet_s:
                    break
                time.sleep(0.1)
    finally:
        subscriber.close()
    return out
