"""PubSubDeadLetterQueue without a service: what a dead letter carries, clipping, pickling."""

from __future__ import annotations

import pickle

import cloudpickle
import pytest

from pyflink_gcp.core import ConfigurationError, FailedRecord, WriteError
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.pubsub import PubSubDeadLetterQueue, TopicDestination
from pyflink_gcp.pubsub.options import (
    MAX_ATTRIBUTE_VALUE_BYTES,
    MAX_ATTRIBUTES,
    MAX_MESSAGES_PER_REQUEST,
)
from tests.unit.pubsub.fakes import FakeRpc

DLQ_TOPIC = TopicDestination.of("p", "orders-dlq")


def opened(max_payload_bytes: int = 9_000_000, rpc: FakeRpc | None = None):
    """A queue whose rpc is a fake, as if opened (``open`` would dial the service)."""
    queue = PubSubDeadLetterQueue.of(DLQ_TOPIC, max_payload_bytes=max_payload_bytes)
    queue.retry = RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.001, deadline_s=1)
    queue._rpc = rpc or FakeRpc()
    queue._sink = "orders-sink"
    return queue, queue._rpc


class RecordingRpc(FakeRpc):
    """Keeps the messages themselves, to read their attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list = []

    def publish(self, topic, messages):
        super().publish(topic, messages)
        self.topics = {topic}
        self.sent.extend(messages)


def failed(payload=b"{}", reason="INVALID_ARGUMENT: bad", destination="projects/p/topics/t"):
    return FailedRecord("orders-sink", destination, reason, payload, {"kind": "order"})


def test_a_dead_letter_carries_payload_attributes_destination_reason_and_sink():
    queue, rpc = opened(rpc=RecordingRpc())
    queue.send(failed())
    queue.flush()
    [message] = rpc.sent
    assert rpc.topics == {str(DLQ_TOPIC)}
    assert message.data == b"{}"
    assert dict(message.attributes) == {
        "kind": "order",
        "dlq-destination": "projects/p/topics/t",
        "dlq-reason": "INVALID_ARGUMENT: bad",
        "dlq-sink": "orders-sink",
    }


def test_a_payload_over_max_payload_bytes_keeps_its_first_bytes_and_its_size():
    queue, rpc = opened(max_payload_bytes=10, rpc=RecordingRpc())
    queue.send(failed(payload=b"0123456789abcdef"))
    queue.send(failed(payload=b"0123456789"))
    queue.flush()
    clipped, whole = rpc.sent
    assert clipped.data == b"0123456789"
    assert clipped.attributes["dlq-truncated-from"] == "16"
    assert whole.data == b"0123456789"
    assert "dlq-truncated-from" not in whole.attributes


def test_long_attribute_values_are_clipped_to_the_service_limit_on_a_character_boundary():
    queue, rpc = opened(rpc=RecordingRpc())
    reason = "é" * 1_000  # 2,000 bytes in UTF-8
    destination = "projects/p/topics/" + "t" * 2_000
    queue.send(failed(reason=reason, destination=destination))
    queue.flush()
    [message] = rpc.sent
    clipped_reason = message.attributes["dlq-reason"]
    assert len(clipped_reason.encode()) <= MAX_ATTRIBUTE_VALUE_BYTES
    assert clipped_reason.endswith("...") and clipped_reason[:-3] == "é" * 510
    clipped_destination = message.attributes["dlq-destination"]
    assert len(clipped_destination.encode()) == MAX_ATTRIBUTE_VALUE_BYTES
    assert clipped_destination == destination[: MAX_ATTRIBUTE_VALUE_BYTES - 3] + "..."


def test_an_attribute_value_at_the_limit_is_kept_whole():
    queue, rpc = opened(rpc=RecordingRpc())
    reason = "r" * MAX_ATTRIBUTE_VALUE_BYTES
    queue.send(failed(reason=reason))
    queue.flush()
    assert rpc.sent[0].attributes["dlq-reason"] == reason


def test_dead_letters_are_published_in_requests_of_at_most_the_service_limit():
    queue, rpc = opened()
    for i in range(MAX_MESSAGES_PER_REQUEST + 5):
        queue.send(failed(payload=b"%d" % i))
    assert [len(r) for r in rpc.requests] == [MAX_MESSAGES_PER_REQUEST]
    queue.flush()
    assert [len(r) for r in rpc.requests] == [MAX_MESSAGES_PER_REQUEST, 5]
    queue.flush()
    assert rpc.calls == 2


def test_a_dead_letter_the_topic_rejects_fails_the_job():
    queue, _ = opened()
    queue.send(failed(payload=b"bad payload"))
    with pytest.raises(WriteError) as err:
        queue.flush()
    assert str(err.value) == (
        "sink 'orders-sink': the dead-letter topic projects/p/topics/orders-dlq rejected 1 "
        "messages: INVALID_ARGUMENT: message data is invalid"
    )


def test_the_queue_pickles_as_its_configuration_only():
    queue, _ = opened(max_payload_bytes=1_000)
    queue.send(failed())
    copy = pickle.loads(cloudpickle.dumps(queue))
    assert copy.topic == DLQ_TOPIC and copy.max_payload_bytes == 1_000
    assert copy.retry == queue.retry
    assert copy._rpc is None and copy._pending == []


def test_bad_arguments_are_configuration_errors():
    with pytest.raises(ConfigurationError, match="takes a TopicDestination"):
        PubSubDeadLetterQueue.of("projects/p/topics/dlq")
    with pytest.raises(ConfigurationError) as err:
        PubSubDeadLetterQueue.of(DLQ_TOPIC, max_payload_bytes=0)
    assert str(err.value) == (
        "PubSubDeadLetterQueue.max_payload_bytes must be in [1, 10,000,000], got 0"
    )


def test_describe_names_the_topic():
    assert PubSubDeadLetterQueue.of(DLQ_TOPIC).describe() == (
        "PubSubDeadLetterQueue.of('projects/p/topics/orders-dlq')"
    )


def test_without_its_own_policy_the_queue_retries_for_the_sinks_deadline(monkeypatch):
    from types import SimpleNamespace

    import pyflink_gcp.pubsub.dead_letter as module

    queue = PubSubDeadLetterQueue.of(DLQ_TOPIC)
    assert queue.retry is None and queue.policy.deadline_s == 120.0
    rpc = FakeRpc()
    rpc.get_topic = lambda name: None
    timeouts = []
    monkeypatch.setattr(
        module, "PubSubRpc", lambda endpoint, timeout: timeouts.append(timeout) or rpc
    )
    queue.open(SimpleNamespace(sink_name="orders-sink", retry_deadline_s=7.0))
    assert queue.policy.deadline_s == 7.0 and timeouts == [7.0]
    explicit = RetryPolicy(deadline_s=1)
    queue.retry = explicit
    assert queue.policy is explicit


def test_a_missing_dead_letter_topic_fails_the_subtask_at_open_naming_it(monkeypatch):
    from types import SimpleNamespace

    from google.api_core import exceptions as gexc

    import pyflink_gcp.pubsub.dead_letter as module
    from pyflink_gcp.core import DestinationNotFoundError
    from pyflink_gcp.core.errors import is_non_retriable

    rpc = FakeRpc()

    def get_topic(name):
        raise gexc.NotFound(f"Resource not found (resource={name})")

    rpc.get_topic = get_topic
    monkeypatch.setattr(module, "PubSubRpc", lambda endpoint, timeout: rpc)
    queue = PubSubDeadLetterQueue.of(DLQ_TOPIC)
    with pytest.raises(DestinationNotFoundError) as err:
        queue.open(SimpleNamespace(sink_name="orders-sink", retry_deadline_s=1.0))
    assert str(err.value) == (
        "sink 'orders-sink': the dead-letter topic projects/p/topics/orders-dlq does not exist"
    )
    assert is_non_retriable(err.value)


def test_original_attributes_over_a_limit_are_left_out_and_counted_so_the_letter_publishes():
    queue, rpc = opened(rpc=RecordingRpc())
    attributes = {"kind": "order", "note": "x" * 2_000, "k" * 300: "v"}
    queue.send(FailedRecord("orders-sink", "projects/p/topics/t", "too long", b"{}", attributes))
    many = {f"a{i:03}": "v" for i in range(100)}
    queue.send(FailedRecord("orders-sink", "projects/p/topics/t", "too many", b"{}", many))
    queue.flush()
    first, second = (dict(m.attributes) for m in rpc.sent)
    assert first == {
        "kind": "order",
        "dlq-attributes-dropped": "2",
        "dlq-destination": "projects/p/topics/t",
        "dlq-reason": "too long",
        "dlq-sink": "orders-sink",
    }
    # The first 94 originals fit beside the dlq-* attributes (at most 6): 100 in all.
    assert second["dlq-attributes-dropped"] == "6"
    assert sorted(k for k in second if not k.startswith("dlq-")) == sorted(many)[:94]
    assert len(second) <= MAX_ATTRIBUTES
