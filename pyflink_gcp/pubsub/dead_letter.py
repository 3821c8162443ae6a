"""The Pub/Sub dead-letter queue every sink can use as its failure handler's target.

A dead letter must be publishable even when the record was rejected for its size or its
attributes, so the queue clips what it adds: the payload to ``max_payload_bytes`` (noting the
original size in ``dlq-truncated-from``) and each ``dlq-*`` attribute value to the service's
1,024-byte limit, on a UTF-8 character boundary; and it leaves out the original attributes
that would break an attribute limit (an oversized key or value, or more than fit beside the
``dlq-*`` ones), counting them in ``dlq-attributes-dropped``.
"""

from __future__ import annotations

import logging
from typing import Any

from google.api_core import exceptions as gexc

from pyflink_gcp.core.errors import ConfigurationError, DestinationNotFoundError, WriteError
from pyflink_gcp.core.failure import DeadLetterQueue, FailedRecord
from pyflink_gcp.core.options import check_int
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.core.runtime_info import SubtaskInfo
from pyflink_gcp.core.writer import PicklesConfiguration
from pyflink_gcp.pubsub.client import PubsubMessagePb, PubSubRpc, resolve_pubsub_endpoint
from pyflink_gcp.pubsub.destinations import TopicDestination
from pyflink_gcp.pubsub.options import (
    MAX_ATTRIBUTE_KEY_BYTES,
    MAX_ATTRIBUTE_VALUE_BYTES,
    MAX_ATTRIBUTES,
    MAX_MESSAGE_BYTES,
    MAX_MESSAGES_PER_REQUEST,
)
from pyflink_gcp.pubsub.publishing import CALL_TIMEOUT_S, publish_batch

_LOG = logging.getLogger("pyflink_gcp.pubsub.dlq")

#: Attributes added to every dead-lettered message.
ATTR_DESTINATION = "dlq-destination"
ATTR_REASON = "dlq-reason"
ATTR_SINK = "dlq-sink"
ATTR_TRUNCATED = "dlq-truncated-from"
ATTR_DROPPED = "dlq-attributes-dropped"
#: The ``dlq-*`` attributes a dead letter may get, kept free of the original attributes.
_DLQ_SLOTS = 6


def _fits(key: str, value: str) -> bool:
    """Whether an attribute is within the key and value limits (str keys and values only)."""
    return (
        type(key) is str
        and type(value) is str
        and len(key.encode("utf-8")) <= MAX_ATTRIBUTE_KEY_BYTES
        and len(value.encode("utf-8")) <= MAX_ATTRIBUTE_VALUE_BYTES
    )


def publishable_attributes(attributes: dict[str, str]) -> tuple[dict[str, str], int]:
    """The original attributes a dead letter can carry, and how many were left out: those over
    the key or value limit, and those beyond the room the ``dlq-*`` attributes leave."""
    kept: dict[str, str] = {}
    room = MAX_ATTRIBUTES - _DLQ_SLOTS
    for key, value in attributes.items():
        if len(kept) < room and _fits(key, value):
            kept[key] = value
    return kept, len(attributes) - len(kept)


def _clip(value: str) -> str:
    """``value`` cut to the attribute-value limit (with "..."), whole UTF-8 characters only."""
    raw = value.encode("utf-8")
    if len(raw) <= MAX_ATTRIBUTE_VALUE_BYTES:
        return value
    return raw[: MAX_ATTRIBUTE_VALUE_BYTES - 3].decode("utf-8", "ignore") + "..."


class PubSubDeadLetterQueue(PicklesConfiguration, DeadLetterQueue):
    """Publishes rejected records to one Pub/Sub topic.

    Each dead letter carries the original payload as its data, the original attributes, and
    ``dlq-destination`` (where it was headed, ``unresolved`` for an unroutable record),
    ``dlq-reason`` and ``dlq-sink``. A payload longer than ``max_payload_bytes`` (a record rejected
    for being over the size limit cannot be republished whole) keeps its first bytes and gets
    ``dlq-truncated-from`` with its original size. Flushed with the sink before every checkpoint
    barrier. The topic must exist (checked when the subtask opens).

    Example::

        FailureHandler.send_to_dead_letter_queue(
            PubSubDeadLetterQueue.of(TopicDestination.of("my-project", "orders-dlq")))
    """

    _config_fields = ("topic", "endpoint", "retry", "max_payload_bytes")

    def __init__(
        self,
        topic: TopicDestination,
        endpoint: str | None = None,
        retry: RetryPolicy | None = None,
        max_payload_bytes: int = 9_000_000,
    ) -> None:
        if not isinstance(topic, TopicDestination):
            raise ConfigurationError(
                f"PubSubDeadLetterQueue.of() takes a TopicDestination, got {topic!r}"
            )
        check_int(
            "PubSubDeadLetterQueue",
            "max_payload_bytes",
            max_payload_bytes,
            maximum=MAX_MESSAGE_BYTES,
        )
        self.topic = topic
        self.endpoint = endpoint
        #: An explicit policy, or None: the sink's own (its ``retry_deadline``), learnt at open.
        self.retry = retry
        self.max_payload_bytes = max_payload_bytes
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._sink_retry = RetryPolicy()
        self._rpc: Any = None
        self._pending: list[Any] = []
        self._sink = "sink"

    @staticmethod
    def of(
        topic: TopicDestination, endpoint: str | None = None, max_payload_bytes: int = 9_000_000
    ) -> PubSubDeadLetterQueue:
        """Dead-letter to ``topic`` (``endpoint``: as the sinks' ``set_endpoint``)."""
        return PubSubDeadLetterQueue(topic, endpoint, max_payload_bytes=max_payload_bytes)

    @property
    def policy(self) -> RetryPolicy:
        """The retry policy of every call: the explicit one, else the sink's."""
        return self.retry or self._sink_retry

    def open(self, info: SubtaskInfo) -> None:
        self._sink = info.sink_name
        # The sink's retry deadline, where the runtime hands it over, bounds the dead-letter
        # queue's calls like the sink's own.
        deadline = info.retry_deadline_s
        if deadline is not None:
            self._sink_retry = RetryPolicy(deadline_s=deadline)
        rpc = self._rpc = PubSubRpc(
            resolve_pubsub_endpoint(self.endpoint), self.policy.attempt_timeout(CALL_TIMEOUT_S)
        )
        name = str(self.topic)
        try:
            self.policy.call(
                lambda: rpc.get_topic(name),
                f"sink '{self._sink}': get dead-letter topic {name} at {rpc.endpoint}",
            )
        except gexc.NotFound:
            raise DestinationNotFoundError(
                f"sink '{self._sink}': the dead-letter topic {name} does not exist"
            ) from None

    def send(self, failed: FailedRecord) -> None:
        attributes, dropped = publishable_attributes(failed.attributes)
        if dropped:
            attributes[ATTR_DROPPED] = str(dropped)
        attributes[ATTR_DESTINATION] = _clip(failed.destination)
        attributes[ATTR_REASON] = _clip(failed.reason)
        attributes[ATTR_SINK] = _clip(failed.sink)
        payload = failed.payload
        if len(payload) > self.max_payload_bytes:
            attributes[ATTR_TRUNCATED] = str(len(payload))
            payload = payload[: self.max_payload_bytes]
        self._pending.append(PubsubMessagePb(data=payload, attributes=attributes))
        if len(self._pending) >= MAX_MESSAGES_PER_REQUEST:
            self.flush()

    def flush(self) -> None:
        while self._pending:
            batch = self._pending[:MAX_MESSAGES_PER_REQUEST]
            rejected = publish_batch(self._rpc, str(self.topic), batch, self.policy, self._sink)
            if rejected:
                raise WriteError(
                    f"sink '{self._sink}': the dead-letter topic {self.topic} rejected "
                    f"{len(rejected)} messages: {rejected[0].reason}"
                )
            del self._pending[: len(batch)]

    def close(self) -> None:
        if self._pending:
            _LOG.warning(
                "%s: closing the dead-letter queue with %d unsent messages (they will be replayed)",
                self._sink,
                len(self._pending),
            )
        if self._rpc is not None:
            self._rpc.close()
            self._rpc = None

    def describe(self) -> str:
        return f"PubSubDeadLetterQueue.of({self.topic.resource_name!r})"
