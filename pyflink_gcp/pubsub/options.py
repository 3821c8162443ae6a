"""Options of the Pub/Sub sink: publisher batching, writer lifetimes, topic creation."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from datetime import timedelta

#: Service limits (https://cloud.google.com/pubsub/quotas#resource_limits).
MAX_MESSAGES_PER_REQUEST = 1_000
MAX_REQUEST_BYTES = 10_000_000
MAX_MESSAGE_BYTES = 10_000_000
MAX_ATTRIBUTES = 100
MAX_ATTRIBUTE_KEY_BYTES = 256
MAX_ATTRIBUTE_VALUE_BYTES = 1_024
MAX_ORDERING_KEY_BYTES = 1_024


class CreateDisposition(enum.Enum):
    """Whether the sink may create a topic its resolver names."""

    CREATE_NEVER = "CREATE_NEVER"
    CREATE_IF_NEEDED = "CREATE_IF_NEEDED"


@dataclass(frozen=True)
class TopicCreateOptions:
    """Applied to every topic the sink creates (CREATE_IF_NEEDED).

    Attributes:
        labels: Topic labels.
        message_retention_duration: How long the topic retains messages (None: service default).
        max_created_topics: How many topics one sink subtask may create. A resolver bug (a
            topic per user id) must fail fast, not create a million topics.
    """

    labels: dict[str, str] = field(default_factory=dict)
    message_retention_duration: timedelta | None = None
    max_created_topics: int = 100

    def __post_init__(self) -> None:
        if self.max_created_topics < 0:
            raise ValueError("max_created_topics must be >= 0")


@dataclass(frozen=True)
class PubSubPublisherOptions:
    """How messages are batched into Publish requests.

    A topic's batch is sent when it holds ``max_messages`` messages or ``max_bytes`` bytes, and at
    the latest after ``max_latency`` (every batch is also sent before each checkpoint barrier).

    Attributes:
        max_messages: Messages per Publish request (service limit 1,000).
        max_bytes: Bytes per Publish request (service limit 10 MB).
        max_latency: Longest time a message waits for its batch to be sent.
        enable_message_ordering: Send ordering keys; requests of a topic are then sent one at a
            time, in order, so one key's messages arrive in order.
        max_in_flight_requests: Concurrent Publish requests per topic without ordering.
        max_buffered_messages: Messages a subtask holds before it stops and waits for all
            in-flight requests (bounds memory; also the operator's bundle size).
    """

    max_messages: int = MAX_MESSAGES_PER_REQUEST
    max_bytes: int = 5_000_000
    max_latency: timedelta = timedelta(seconds=1)
    enable_message_ordering: bool = False
    max_in_flight_requests: int = 4
    max_buffered_messages: int = 20_000

    def __post_init__(self) -> None:
        if not 1 <= self.max_messages <= MAX_MESSAGES_PER_REQUEST:
            raise ValueError(f"max_messages must be in [1, {MAX_MESSAGES_PER_REQUEST}]")
        if not 1 <= self.max_bytes <= MAX_REQUEST_BYTES:
            raise ValueError(f"max_bytes must be in [1, {MAX_REQUEST_BYTES}]")
        if self.max_latency <= timedelta(0):
            raise ValueError("max_latency must be positive")
        if self.max_in_flight_requests < 1 or self.max_buffered_messages < 1:
            raise ValueError("max_in_flight_requests and max_buffered_messages must be >= 1")

    @staticmethod
    def builder() -> PubSubPublisherOptionsBuilder:
        return PubSubPublisherOptionsBuilder()


class PubSubPublisherOptionsBuilder:
    """Fluent builder of :class:`PubSubPublisherOptions`."""

    def __init__(self) -> None:
        self._o = PubSubPublisherOptions()

    def max_messages(self, n: int) -> PubSubPublisherOptionsBuilder:
        self._o = replace(self._o, max_messages=n)
        return self

    def max_bytes(self, n: int) -> PubSubPublisherOptionsBuilder:
        self._o = replace(self._o, max_bytes=n)
        return self

    def max_latency(self, latency: timedelta) -> PubSubPublisherOptionsBuilder:
        self._o = replace(self._o, max_latency=latency)
        return self

    def enable_message_ordering(self, enabled: bool = True) -> PubSubPublisherOptionsBuilder:
        self._o = replace(self._o, enable_message_ordering=enabled)
        return self

    def max_in_flight_requests(self, n: int) -> PubSubPublisherOptionsBuilder:
        self._o = replace(self._o, max_in_flight_requests=n)
        return self

    def max_buffered_messages(self, n: int) -> PubSubPublisherOptionsBuilder:
        self._o = replace(self._o, max_buffered_messages=n)
        return self

    def build(self) -> PubSubPublisherOptions:
        return self._o


@dataclass(frozen=True)
class PubSubWriterOptions:
    """Lifetimes of the per-topic publishers of one sink subtask.

    Attributes:
        idle_timeout: A publisher unused this long is closed at the end of a successful flush
            (re-created transparently when its topic is used again).
        max_active_topics: At most this many publishers open per subtask; the least recently
            used clean one is released first (None: no limit).
        shutdown_budget: How long closing a publisher may take before the sink fails.
        retry_deadline: How long transient errors of one request are retried.
        per_destination_metrics: Register Flink counters per topic (Flink cannot unregister
            metrics, so this is off by default).
    """

    idle_timeout: timedelta = timedelta(minutes=15)
    max_active_topics: int | None = None
    shutdown_budget: timedelta = timedelta(seconds=30)
    retry_deadline: timedelta = timedelta(minutes=2)
    per_destination_metrics: bool = False

    def __post_init__(self) -> None:
        if self.max_active_topics is not None and self.max_active_topics < 1:
            raise ValueError("max_active_topics must be >= 1")

    @staticmethod
    def builder() -> PubSubWriterOptionsBuilder:
        return PubSubWriterOptionsBuilder()


class PubSubWriterOptionsBuilder:
    """Fluent builder of :class:`PubSubWriterOptions`."""

    def __init__(self) -> None:
        self._o = PubSubWriterOptions()

    def idle_timeout(self, timeout: timedelta) -> PubSubWriterOptionsBuilder:
        self._o = replace(self._o, idle_timeout=timeout)
        return self

    def max_active_topics(self, n: int | None) -> PubSubWriterOptionsBuilder:
        self._o = replace(self._o, max_active_topics=n)
        return self

    def shutdown_budget(self, budget: timedelta) -> PubSubWriterOptionsBuilder:
        self._o = replace(self._o, shutdown_budget=budget)
        return self

    def retry_deadline(self, deadline: timedelta) -> PubSubWriterOptionsBuilder:
        self._o = replace(self._o, retry_deadline=deadline)
        return self

    def per_destination_metrics(self, enabled: bool = True) -> PubSubWriterOptionsBuilder:
        self._o = replace(self._o, per_destination_metrics=enabled)
        return self

    def build(self) -> PubSubWriterOptions:
        return self._o
