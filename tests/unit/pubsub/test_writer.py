"""The Pub/Sub hot path without a service: request halving, batching, limits, pickling.

The rpc is a fake that keeps what was published and rejects messages by their content, the way
the service answers a request with one bad message: the whole request fails with
INVALID_ARGUMENT and does not say which message was wrong.
"""

from __future__ import annotations

import math
import pickle
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import cloudpickle
import grpc
import pytest

from pyflink_gcp.core import (
    CreationLimitExceededError,
    DestinationNotFoundError,
    SerializerError,
    SubtaskInfo,
    WriteError,
)
from pyflink_gcp.core.creation import CreationBudget
from pyflink_gcp.core.options import CreateDisposition
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.pubsub import (
    PubSubPublisherOptions,
    PubSubWriterOptions,
    TopicCreateOptions,
    TopicDestination,
)
from pyflink_gcp.pubsub.attributes import record_digest
from pyflink_gcp.pubsub.client import PubsubMessagePb, publish_request
from pyflink_gcp.pubsub.options import MAX_MESSAGE_BYTES
from pyflink_gcp.pubsub.publishing import publish_batch
from pyflink_gcp.pubsub.writer import PubSubWriterFactory, message_size
from tests.unit.pubsub.fakes import FakeRpc, Status

TOPIC = "projects/p/topics/orders"
FAST_RETRY = RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.001, deadline_s=5)


def messages(datas, key=""):
    return [
        PubsubMessagePb(data=d, ordering_key=key, attributes={"n": str(i)})
        for i, d in enumerate(datas)
    ]


# -- publish_batch: halving ------------------------------------------------------------------


def test_a_clean_request_is_one_call_and_returns_nothing():
    rpc = FakeRpc()
    datas = [f"m{i}".encode() for i in range(100)]
    assert publish_batch(rpc, TOPIC, messages(datas), FAST_RETRY, "s") == []
    assert rpc.calls == 1 and rpc.requests == [datas]


def test_halving_returns_exactly_the_rejected_messages_and_sends_the_rest_in_order():
    datas = [(b"bad-%d" if i in (3, 50, 51, 98) else b"ok-%d") % i for i in range(100)]
    rpc = FakeRpc()
    failed = publish_batch(rpc, TOPIC, messages(datas), FAST_RETRY, "orders-sink")
    assert [f.payload for f in failed] == [b"bad-3", b"bad-50", b"bad-51", b"bad-98"]
    assert rpc.published == [d for d in datas if d.startswith(b"ok")]
    assert all(f.sink == "orders-sink" and f.destination == TOPIC for f in failed)
    assert {f.reason for f in failed} == {"INVALID_ARGUMENT: message data is invalid"}
    assert [f.attributes for f in failed] == [{"n": "3"}, {"n": "50"}, {"n": "51"}, {"n": "98"}]
    # 2 k log2(n / k) extra calls, give or take: far fewer than one per message.
    assert rpc.calls < 40


def test_a_request_of_only_bad_messages_returns_them_all():
    datas = [b"bad-a", b"bad-b", b"bad-c"]
    rpc = FakeRpc()
    failed = publish_batch(rpc, TOPIC, messages(datas), FAST_RETRY, "s")
    assert [f.payload for f in failed] == datas
    assert rpc.published == []


def test_a_rejected_message_keeps_its_ordering_key_as_a_dead_letter_attribute():
    rpc = FakeRpc()
    failed = publish_batch(rpc, TOPIC, messages([b"ok", b"bad"], key="customer-7"), FAST_RETRY, "s")
    assert [(f.payload, f.attributes) for f in failed] == [
        (b"bad", {"n": "1", "dlq-ordering-key": "customer-7"})
    ]


def test_transient_errors_are_retried_before_halving():
    rpc = FakeRpc(failures=[Status(grpc.StatusCode.UNAVAILABLE, "try again")] * 2)
    assert publish_batch(rpc, TOPIC, messages([b"a", b"b"]), FAST_RETRY, "s") == []
    assert rpc.calls == 3 and rpc.published == [b"a", b"b"]


def test_not_found_fails_naming_the_topic():
    rpc = FakeRpc(failures=[Status(grpc.StatusCode.NOT_FOUND, "Resource not found")])
    with pytest.raises(DestinationNotFoundError) as err:
        publish_batch(rpc, TOPIC, messages([b"a"]), FAST_RETRY, "orders-sink")
    assert str(err.value) == (
        f"sink 'orders-sink': topic {TOPIC} does not exist (NOT_FOUND while publishing)"
    )


def test_not_found_under_create_never_says_the_topic_does_not_exist_on_any_attempt():
    """The sink does not check topics under CREATE_NEVER: a Publish's NOT_FOUND, a retry's
    after UNAVAILABLE too, is how it learns that the topic is missing."""
    for failures in (
        [Status(grpc.StatusCode.NOT_FOUND, "Resource not found")],
        [Status(grpc.StatusCode.UNAVAILABLE, "try again")] * 2
        + [Status(grpc.StatusCode.NOT_FOUND, "Resource not found")],
    ):
        rpc = FakeRpc(failures=failures)
        with pytest.raises(DestinationNotFoundError) as err:
            publish_batch(rpc, TOPIC, messages([b"a"]), FAST_RETRY, "s", create_never=True)
        assert str(err.value) == (
            f"sink 's': topic {TOPIC} does not exist and the create disposition is CREATE_NEVER"
        )
        assert rpc.calls == len(failures) and rpc.published == []


def test_a_non_content_error_fails_the_job_and_is_not_halved():
    rpc = FakeRpc(failures=[Status(grpc.StatusCode.PERMISSION_DENIED, "no access")])
    with pytest.raises(WriteError) as err:
        publish_batch(rpc, TOPIC, messages([b"a", b"b", b"bad"]), FAST_RETRY, "s")
    assert str(err.value) == (
        f"sink 's': publishing 3 messages to {TOPIC} at 127.0.0.1:8085 failed: "
        "PERMISSION_DENIED: no access"
    )
    assert rpc.calls == 1


def test_a_transient_error_past_the_deadline_is_one_line_as_get_topic_s():
    """A raw gRPC error's str is a multi-line debug dump; the Publish path words the error
    that ends its retries as GetTopic's does (google.api_core's ``<code> <details>``)."""
    from google.api_core import exceptions as gexc

    from pyflink_gcp.core.endpoints import Endpoint
    from pyflink_gcp.pubsub.client import PubSubRpc
    from tests.support.endpoints import refusing_endpoint

    retry = RetryPolicy(initial_backoff_s=0.01, max_backoff_s=0.01, deadline_s=0.2)
    rpc = PubSubRpc(Endpoint(refusing_endpoint(), True), request_timeout_s=2.0)
    try:
        with pytest.raises(WriteError) as published:
            publish_batch(rpc, TOPIC, messages([b"a"]), retry, "s")
        with pytest.raises(WriteError) as got:
            retry.call(lambda: rpc.get_topic(TOPIC), "get topic")
    finally:
        rpc.close()
    publish, get_topic = str(published.value), str(got.value)
    assert "\n" not in publish and "\n" not in get_topic
    assert f"sink 's': publishing 1 messages to {TOPIC} at {rpc.endpoint}: still failing" in publish
    assert "UNAVAILABLE: 503 " in publish and "UNAVAILABLE: 503 " in get_topic
    assert "debug_error_string" not in publish
    cause = published.value.__cause__
    assert isinstance(cause, gexc.ServiceUnavailable) and isinstance(cause.__cause__, grpc.RpcError)


def test_a_transient_first_attempt_of_a_future_is_retried_and_worded_in_one_line():
    """The first attempt of a Publish started as a future fails with the future's own error
    (a grpc.Call): it is retried like any attempt, and words the deadline's error in one line."""
    from pyflink_gcp.core.endpoints import Endpoint
    from pyflink_gcp.pubsub.client import PubSubRpc
    from tests.support.endpoints import refusing_endpoint

    retry = RetryPolicy(initial_backoff_s=0.01, max_backoff_s=0.01, deadline_s=0.2)
    rpc = PubSubRpc(Endpoint(refusing_endpoint(), True), request_timeout_s=2.0)
    try:
        first = rpc.publish_future(TOPIC, messages([b"a"])).exception()
        assert isinstance(first, grpc.Call)
        with pytest.raises(WriteError) as err:
            publish_batch(rpc, TOPIC, messages([b"a"]), retry, "s", first_error=first)
    finally:
        rpc.close()
    assert "\n" not in str(err.value) and "UNAVAILABLE: 503 " in str(err.value)


def test_an_error_inside_a_half_fails_the_job():
    rpc = FakeRpc()
    original = rpc.publish

    def publish(topic, batch):
        if rpc.calls == 2:  # the first half after the whole request was rejected
            rpc.calls += 1
            raise Status(grpc.StatusCode.NOT_FOUND, "deleted")
        return original(topic, batch)

    rpc.publish = publish
    with pytest.raises(DestinationNotFoundError):
        publish_batch(rpc, TOPIC, messages([b"a", b"bad"]), FAST_RETRY, "s")


# -- TopicPublisher ---------------------------------------------------------------------------


def make_factory(rpc, publisher=None, writer=None, disposition=CreateDisposition.CREATE_NEVER):
    factory = PubSubWriterFactory(
        sink_name="s",
        resolver_name="resolver",
        publisher_options=publisher or PubSubPublisherOptions(),
        writer_options=writer or PubSubWriterOptions(),
        create_disposition=disposition,
        create_options=TopicCreateOptions(),
        endpoint=None,
        retry=FAST_RETRY,
    )
    factory.connect(rpc, ThreadPoolExecutor(max_workers=4))
    return factory


def publisher_of(factory):
    return factory.create_writer(TopicDestination.from_resource_name(TOPIC))


def test_batches_are_cut_at_max_messages_and_the_rest_is_sent_at_flush():
    rpc = FakeRpc()
    writer = publisher_of(make_factory(rpc, PubSubPublisherOptions(max_messages=10)))
    for i in range(25):
        writer.write((b"m%d" % i, "", None), i)
    assert writer.flush() == []
    assert [len(r) for r in sorted(rpc.requests, key=lambda r: r[0])] in ([10, 10, 5], [10, 5, 10])
    assert sorted(rpc.published) == sorted(b"m%d" % i for i in range(25))
    assert writer.is_clean and writer.messages == 25


def test_the_open_batch_reports_its_age_until_it_is_sent():
    """What a bundle end under checkpoint markers reads to leave a young batch open."""
    rpc = FakeRpc()
    writer = publisher_of(make_factory(rpc, PubSubPublisherOptions(max_messages=3)))
    assert writer.unsent_since == math.inf and writer.unsent_records == 0
    before = time.monotonic()
    writer.write((b"a", "", None), 0)
    first = writer.unsent_since
    assert before <= first <= time.monotonic()
    writer.write((b"b", "", None), 1)
    assert writer.unsent_since == first and writer.unsent_records == 2
    writer.write((b"c", "", None), 2)  # full: sent at once, nothing left unsent
    assert writer.unsent_since == math.inf and writer.unsent_records == 0
    writer.write((b"d", "", None), 3)
    assert writer.unsent_since >= first and writer.unsent_records == 1
    writer.start_flush()
    assert writer.unsent_since == math.inf and writer.unsent_records == 0  # handed over
    assert writer.flush() == [] and sorted(rpc.published) == [b"a", b"b", b"c", b"d"]


def test_batches_are_cut_before_max_bytes_would_be_exceeded():
    rpc = FakeRpc()
    size = message_size(b"x" * 100, "", None)
    writer = publisher_of(make_factory(rpc, PubSubPublisherOptions(max_bytes=size * 3)))
    for _ in range(7):
        writer.write((b"x" * 100, "", None), None)
    writer.flush()
    assert sorted(len(r) for r in rpc.requests) == [1, 3, 3]


def test_a_message_over_the_service_limit_goes_to_the_failure_handler_unsent():
    rpc = FakeRpc()
    writer = publisher_of(make_factory(rpc))
    big = b"x" * MAX_MESSAGE_BYTES
    writer.write((b"small", "", None), {"id": 1})
    writer.write((big, "", {"kind": "blob"}), {"id": 2})
    assert not writer.is_clean
    failed = writer.flush()
    assert rpc.published == [b"small"]
    assert len(failed) == 1
    assert failed[0].payload is big and failed[0].attributes == {"kind": "blob"}
    assert failed[0].record_repr == "{'id': 2}"
    assert failed[0].reason == (
        f"message of {message_size(big, '', {'kind': 'blob'})} bytes exceeds the Pub/Sub "
        f"limit of {MAX_MESSAGE_BYTES} bytes"
    )
    assert writer.is_clean


def test_message_size_counts_data_key_attributes_and_framing():
    assert message_size(b"abc", "", None) == 3 + 64
    assert message_size(b"abc", "key", {"a": "bc"}) == 3 + 3 + 64 + 1 + 2 + 8


def test_each_batch_is_sent_in_the_request_its_messages_were_added_to():
    """The messages go into their Publish request as they come (no copy when it is sent):
    the request holds exactly the batch, keys and attributes included, and each batch has its
    own."""
    rpc = FakeRpc()
    sent = []
    original = rpc.publish
    rpc.publish = lambda topic, batch: (
        sent.append((batch, publish_request(topic, batch))),
        original(topic, batch),
    )
    options = PubSubPublisherOptions(max_messages=2, enable_message_ordering=True)
    writer = publisher_of(make_factory(rpc, options))
    writer.write((b"a", "k1", {"x": "1"}), None)
    writer.write((b"b", "", None), None)
    writer.write((b"c", "k2", None), None)
    writer.flush()
    requests = [request for _, request in sent]
    assert [r is batch.request for batch, r in sent] == [True, True]
    assert requests[0] is not requests[1]
    assert [r.topic for r in requests] == [TOPIC, TOPIC]
    assert [
        [(m.data, m.ordering_key, dict(m.attributes)) for m in r.messages] for r in requests
    ] == [
        [(b"a", "k1", {"x": "1"}), (b"b", "", {})],
        [(b"c", "k2", {})],
    ]


def test_without_ordering_the_key_is_not_sent():
    rpc = FakeRpc()
    keys = []
    original = rpc.publish
    rpc.publish = lambda topic, batch: (
        keys.extend(m.ordering_key for m in batch),
        original(topic, batch),
    )
    writer = publisher_of(make_factory(rpc))
    writer.write((b"a", "customer-1", None), None)
    writer.flush()
    assert keys == [""]


def test_with_ordering_requests_run_one_after_another_in_order():
    rpc = FakeRpc()
    active = []
    original = rpc.publish

    def publish(topic, batch):
        active.append(1)
        assert len(active) == 1, "two ordered requests of one topic overlapped"
        threading.Event().wait(0.002)
        try:
            return original(topic, batch)
        finally:
            active.pop()

    rpc.publish = publish
    options = PubSubPublisherOptions(max_messages=5, enable_message_ordering=True)
    writer = publisher_of(make_factory(rpc, options))
    for i in range(50):
        writer.write((b"%d" % i, "k", None), i)
    writer.flush()
    assert rpc.published == [b"%d" % i for i in range(50)]


def test_in_flight_requests_per_topic_are_bounded_by_the_writer_option():
    rpc = FakeRpc()
    running, peak = [0], [0]
    release = threading.Event()
    original = rpc.publish

    def publish(topic, batch):
        with rpc.lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        release.wait(0.02)
        with rpc.lock:
            running[0] -= 1
        return original(topic, batch)

    rpc.publish = publish
    factory = make_factory(
        rpc,
        PubSubPublisherOptions(max_messages=1),
        PubSubWriterOptions(max_in_flight_requests=2),
    )
    factory.publisher.pool.shutdown()
    factory.publisher.pool = ThreadPoolExecutor(max_workers=8)
    writer = publisher_of(factory)
    for i in range(12):
        writer.write((b"%d" % i, "", None), i)
    writer.flush()
    assert peak[0] == 2
    assert sorted(rpc.published) == sorted(b"%d" % i for i in range(12))


def test_an_ordered_request_after_a_failed_one_is_not_sent():
    rpc = FakeRpc(failures=[Status(grpc.StatusCode.PERMISSION_DENIED, "no")])
    options = PubSubPublisherOptions(max_messages=1, enable_message_ordering=True)
    writer = publisher_of(make_factory(rpc, options))
    writer.write((b"a", "k", None), None)
    writer.write((b"b", "k", None), None)
    with pytest.raises(WriteError, match="PERMISSION_DENIED: no"):
        writer.flush()
    assert rpc.published == []


def test_close_fails_when_in_flight_requests_outlast_the_shutdown_budget():
    rpc = FakeRpc()
    release = threading.Event()
    rpc.publish = lambda topic, batch: release.wait(5)
    factory = make_factory(
        rpc, writer=PubSubWriterOptions(shutdown_budget=timedelta(milliseconds=50))
    )
    writer = publisher_of(factory)
    writer.write((b"a", "", None), None)
    writer.start_flush()
    try:
        with pytest.raises(WriteError) as err:
            writer.close()
    finally:
        release.set()
    assert "did not shut down within its budget" in str(err.value)


# -- requests as futures ---------------------------------------------------------------------


class NoPool:
    """A thread pool that must not be used: a request whose first attempt succeeds needs none."""

    def submit(self, *args, **kwargs):
        raise AssertionError("a publish thread was used")

    def shutdown(self, **kwargs):
        pass


def test_unordered_requests_are_started_as_futures_without_a_publish_thread():
    rpc = FakeRpc()
    factory = make_factory(rpc, PubSubPublisherOptions(max_messages=10))
    factory.pool.shutdown()
    factory.publisher.pool = NoPool()
    writer = publisher_of(factory)
    for i in range(25):
        writer.write((b"m%d" % i, "", None), i)
    assert writer.flush() == [] and writer.is_clean
    assert sorted(rpc.published) == sorted(b"m%d" % i for i in range(25))
    assert rpc.futures == 3 and rpc.calls == 3


def test_a_failed_first_attempt_is_retried_on_the_pool_as_its_own_first_attempt():
    rpc = FakeRpc(failures=[Status(grpc.StatusCode.UNAVAILABLE, "try again")])
    writer = publisher_of(make_factory(rpc))
    writer.write((b"a", "", None), 0)
    writer.write((b"b", "", None), 1)
    assert writer.flush() == []
    assert rpc.published == [b"a", b"b"]
    assert rpc.futures == 1 and rpc.calls == 2  # the future's attempt, then one retry


def test_a_request_rejected_as_a_future_is_split_without_being_sent_whole_again():
    rpc = FakeRpc()
    writer = publisher_of(make_factory(rpc))
    writer.write((b"ok", "", None), 0)
    writer.write((b"bad", "", {"kind": "x"}), 1)
    failed = writer.flush()
    assert [f.payload for f in failed] == [b"bad"] and failed[0].attributes == {"kind": "x"}
    assert rpc.published == [b"ok"]
    assert rpc.calls == 3  # the whole request once (as a future), then each half


MISSING = f"sink 's': topic {TOPIC} does not exist and the create disposition is CREATE_NEVER"


def test_a_not_found_first_attempt_fails_the_flush_naming_the_topic():
    rpc = FakeRpc(failures=[Status(grpc.StatusCode.NOT_FOUND, "Resource not found")])
    writer = publisher_of(make_factory(rpc))
    writer.write((b"a", "", None), 0)
    with pytest.raises(DestinationNotFoundError) as err:
        writer.flush()
    assert str(err.value) == MISSING
    assert rpc.calls == 1 and rpc.published == []


def test_a_not_found_retry_after_an_unavailable_first_attempt_is_the_same_error():
    rpc = FakeRpc(
        failures=[
            Status(grpc.StatusCode.UNAVAILABLE, "try again"),
            Status(grpc.StatusCode.NOT_FOUND, "Resource not found"),
        ]
    )
    writer = publisher_of(make_factory(rpc))
    writer.write((b"a", "", None), 0)
    with pytest.raises(DestinationNotFoundError) as err:
        writer.flush()
    assert str(err.value) == MISSING
    assert rpc.futures == 1 and rpc.calls == 2 and rpc.published == []


def test_a_not_found_ordered_request_is_the_same_error_and_its_successor_is_not_sent():
    rpc = FakeRpc(failures=[Status(grpc.StatusCode.NOT_FOUND, "Resource not found")])
    options = PubSubPublisherOptions(max_messages=1, enable_message_ordering=True)
    writer = publisher_of(make_factory(rpc, options))
    writer.write((b"a", "k", None), 0)
    writer.write((b"b", "k", None), 1)
    with pytest.raises(DestinationNotFoundError) as err:
        writer.flush()
    assert str(err.value) == MISSING
    assert rpc.calls == 1 and rpc.published == []


def test_requests_in_flight_are_bounded_per_subtask_across_topics():
    rpc = FakeRpc()
    running, peak = [0], [0]
    original = rpc.publish

    def publish(topic, batch):
        with rpc.lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        threading.Event().wait(0.02)
        with rpc.lock:
            running[0] -= 1
        return original(topic, batch)

    rpc.publish = publish
    factory = make_factory(rpc, PubSubPublisherOptions(max_messages=1))
    factory.publisher.window.max_requests = 3
    writers = [factory.create_writer(TopicDestination.of("p", f"topic{i}")) for i in range(5)]
    for n in range(2):
        for i, writer in enumerate(writers):
            writer.write((b"%d-%d" % (i, n), "", None), None)
    assert factory.publisher.window.outstanding <= 3
    for writer in writers:
        assert writer.flush() == []
    assert peak[0] == 3 and factory.publisher.window.outstanding == 0
    assert len(rpc.published) == 10


def test_a_first_attempt_failing_after_close_settles_the_request_instead_of_hanging():
    rpc = FakeRpc(failures=[Status(grpc.StatusCode.UNAVAILABLE, "closing")])
    release = threading.Event()
    original = rpc.publish

    def publish(topic, batch):
        release.wait(5)
        return original(topic, batch)

    rpc.publish = publish
    factory = make_factory(rpc)
    writer = publisher_of(factory)
    writer.write((b"a", "", None), 0)
    writer.start_flush()
    factory.close()
    release.set()
    with pytest.raises(WriteError, match="the publisher was closed"):
        writer.flush()


# -- the factory ------------------------------------------------------------------------------


def test_the_factory_pickles_as_its_configuration_only():
    factory = make_factory(FakeRpc())
    factory._known.add(TOPIC)
    for _ in range(5):
        factory.budget.take()
    assert factory.created_topics == 5
    copy = pickle.loads(cloudpickle.dumps(factory))
    assert copy.rpc is None and copy.pool is None
    assert len(copy._known) == 0 and copy.created_topics == 0  # a full budget on the worker
    assert copy.sink == "s" and copy.writer_options == factory.writer_options
    assert copy.publisher_options == factory.publisher_options
    assert copy.retry == FAST_RETRY
    factory.pool.shutdown()


def test_open_resolves_the_emulator_variable_without_connecting(monkeypatch):
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:1")
    factory = make_factory(None)
    factory.pool.shutdown()
    factory.open(SubtaskInfo("s", 0, 1))
    try:
        assert factory.rpc is not None and factory.pool is not None
    finally:
        factory.close()
    assert factory.rpc is None and factory.pool is None


class TopicRpc(FakeRpc):
    """A FakeRpc that knows only the topics in ``existing``: GetTopic raises NOT_FOUND for the
    others (as ``PubSubRpc.get_topic`` raises it), CreateTopic adds them, and each call's
    thread is kept."""

    def __init__(self, existing=(TOPIC,)):
        super().__init__()
        self.existing = set(existing)
        self.admin_calls: list[tuple[str, str, str]] = []

    def get_topic(self, name):
        from google.api_core import exceptions as gexc

        self.admin_calls.append(("GetTopic", name, threading.current_thread().name))
        if name not in self.existing:
            raise gexc.NotFound(f"topic {name} not found")
        return {"name": name}

    def create_topic(self, request):
        self.admin_calls.append(("CreateTopic", request["name"], threading.current_thread().name))
        self.existing.add(request["name"])

    def publish(self, topic, messages):
        if topic not in self.existing:
            with self.lock:
                self.calls += 1
            raise Status(grpc.StatusCode.NOT_FOUND, "Resource not found")
        return super().publish(topic, messages)


def test_under_create_never_a_topic_is_never_checked_and_a_missing_one_fails_its_flush():
    rpc = TopicRpc(existing={TOPIC})
    factory = make_factory(rpc)
    missing = TopicDestination.of("p", "gone")
    known = factory.create_writer(TopicDestination.from_resource_name(TOPIC))
    gone = factory.create_writer(missing)
    for i in range(3):
        known.write((b"k%d" % i, "", None), i)
        gone.write((b"g%d" % i, "", None), i)
    known.start_flush()
    gone.start_flush()
    assert known.flush() == [] and sorted(rpc.published) == [b"k0", b"k1", b"k2"]
    with pytest.raises(DestinationNotFoundError) as err:
        gone.flush()  # the batch is not acknowledged: the flush, so the checkpoint, fails
    assert str(err.value) == (
        f"sink 's': topic {missing} does not exist and the create disposition is CREATE_NEVER"
    )
    assert rpc.admin_calls == [] and len(factory._known) == 0
    assert rpc.futures == 2 and rpc.calls == 2  # one Publish per topic, nothing else


def test_under_create_if_needed_a_topic_is_checked_and_created_on_the_processing_thread_once():
    made = "projects/p/topics/made"
    rpc = TopicRpc(existing={TOPIC})
    factory = make_factory(rpc, disposition=CreateDisposition.CREATE_IF_NEEDED)
    for name in (TOPIC, made, TOPIC, made):
        writer = factory.create_writer(TopicDestination.from_resource_name(name))
        writer.write((b"x", "", None), 0)
        assert writer.flush() == []
    assert rpc.admin_calls == [
        ("GetTopic", TOPIC, "MainThread"),
        ("GetTopic", made, "MainThread"),
        ("CreateTopic", made, "MainThread"),
    ]
    assert factory.created_topics == 1 and rpc.published == [b"x"] * 4


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_creation_budget_refuses_a_topic_past_the_bound_and_refills_over_its_window():
    rpc = TopicRpc(existing={TOPIC})
    writer = PubSubWriterOptions.builder().max_created_destinations(2, per=timedelta(hours=1))
    factory = make_factory(
        rpc, writer=writer.build(), disposition=CreateDisposition.CREATE_IF_NEEDED
    )
    clock = FakeClock()
    factory.budget = CreationBudget(2, timedelta(hours=1), clock=clock)
    for name in ("new-a", "new-b", "new-a"):
        factory.create_writer(TopicDestination.of("p", name))
    with pytest.raises(CreationLimitExceededError) as err:
        factory.create_writer(TopicDestination.of("p", "new-c"))
    assert str(err.value) == (
        "sink 's': creating topic projects/p/topics/new-c would exceed max_created_destinations=2 "
        "per 1h: this subtask created 2 topics in the last 0.0s. The destination resolver "
        "resolver names new topics faster than the bound allows; fix the resolver, or raise the "
        "bound with PubSubWriterOptions.builder().max_created_destinations(n, "
        "per=timedelta(...)) (in SQL: 'sink.max-created-destinations' and "
        "'sink.max-created-destinations.per')."
    )
    assert "projects/p/topics/new-c" not in rpc.existing
    clock.now += 1_800  # half the window: one token back
    factory.create_writer(TopicDestination.of("p", "new-c"))
    with pytest.raises(CreationLimitExceededError):
        factory.create_writer(TopicDestination.of("p", "new-d"))
    assert factory.created_topics == 3


def test_a_topic_another_subtask_created_first_costs_no_creation():
    from google.api_core import exceptions as gexc

    class Raced(TopicRpc):
        def create_topic(self, request):
            super().create_topic(request)
            raise gexc.AlreadyExists("created by another subtask")

    rpc = Raced(existing={TOPIC})
    writer = PubSubWriterOptions.builder().max_created_destinations(1).build()
    factory = make_factory(rpc, writer=writer, disposition=CreateDisposition.CREATE_IF_NEEDED)
    for name in ("new-a", "new-b", "new-c"):
        factory.create_writer(TopicDestination.of("p", name))
    assert factory.created_topics == 0


def test_the_known_topics_are_an_lru_of_bounded_size():
    from pyflink_gcp.core.checked import CheckedNames

    rpc = TopicRpc(existing={f"projects/p/topics/top{i}" for i in range(5)})
    factory = make_factory(rpc, disposition=CreateDisposition.CREATE_IF_NEEDED)
    factory._known = CheckedNames(limit=3)
    for i in range(5):
        factory.create_writer(TopicDestination.of("p", f"top{i}"))
    assert len(factory._known) == 3 and factory._known.forgotten == 2
    assert "projects/p/topics/top0" not in factory._known
    factory.create_writer(TopicDestination.of("p", "top0"))  # checked again
    assert [c[1] for c in rpc.admin_calls].count("projects/p/topics/top0") == 2


# -- attributes: limits and the digest record id ----------------------------------------------


class AttributesRpc(FakeRpc):
    """Keeps the published messages themselves, attributes included."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list = []

    def publish(self, topic, messages):
        super().publish(topic, messages)
        with self.lock:
            self.messages.extend(messages)


def test_a_message_over_an_attribute_limit_goes_to_the_failure_handler_and_the_rest_is_sent():
    rpc = AttributesRpc()
    writer = publisher_of(make_factory(rpc))
    writer.write((b"ok", "", {"note": "short"}), {"id": 1})
    writer.write((b"long", "", {"note": "x" * 1_025}), {"id": 2})
    writer.write((b"many", "", {f"k{i}": "v" for i in range(101)}), {"id": 3})
    writer.write((b"ok2", "", None), {"id": 4})
    failed = writer.flush()
    assert sorted(m.data for m in rpc.messages) == [b"ok", b"ok2"]
    assert [(f.payload, f.record_repr) for f in failed] == [
        (b"long", "{'id': 2}"),
        (b"many", "{'id': 3}"),
    ]
    assert failed[0].describe() == (
        f"sink 's': destination '{TOPIC}' rejected record {{'id': 2}}: attribute 'note' has a "
        "value of 1,025 bytes, over Pub/Sub's limit of 1,024 bytes per attribute value"
    )
    assert failed[0].attributes == {"note": "x" * 1_025}  # as they were, for the handler
    assert "101 attributes, over Pub/Sub's limit of 100" in failed[1].reason
    assert writer.is_clean and writer.messages == 2


def test_an_attribute_that_is_not_a_str_fails_naming_sink_topic_attribute_and_record():
    writer = publisher_of(make_factory(FakeRpc()))
    with pytest.raises(SerializerError) as err:
        writer.write((b"x", "", {"count": 3}), {"id": 9})
    assert str(err.value) == (
        f"sink 's': topic {TOPIC}: attribute 'count' has a int value; attribute keys and "
        "values must be str, for record {'id': 9}"
    )


def test_the_digest_record_id_is_added_by_the_writer_and_counted_in_the_limits():
    rpc = AttributesRpc()
    factory = make_factory(rpc)
    factory.record_id_digest = "record-id"
    writer = publisher_of(factory)
    writer.write((b"a", "", None), 0)
    writer.write((b"b", "", {"kind": "k"}), 1)
    writer.write((b"a", "", None), 2)  # the same message: the same id
    # 100 attributes of its own plus the id: one over the limit.
    writer.write((b"c", "", {f"k{i}": "v" for i in range(100)}), 3)
    failed = writer.flush()
    by_data: dict[bytes, list] = {}
    for m in rpc.messages:
        by_data.setdefault(m.data, []).append(dict(m.attributes))
    assert by_data[b"a"][0] == by_data[b"a"][1] == {"record-id": record_digest(TOPIC, b"a", "", {})}
    assert by_data[b"b"] == [
        {"kind": "k", "record-id": record_digest(TOPIC, b"b", "", {"kind": "k"})}
    ]
    assert [f.payload for f in failed] == [b"c"]
    assert "101 attributes" in failed[0].reason


def test_the_factory_opens_its_rpc_with_the_compression_threshold_and_pickles_the_digest(
    monkeypatch,
):
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:1")
    compressed = PubSubPublisherOptions(enable_compression=True, compression_bytes_threshold=512)
    for options, threshold in ((PubSubPublisherOptions(), None), (compressed, 512)):
        factory = make_factory(None, options)
        factory.pool.shutdown()
        factory.record_id_digest = "rid"
        copy = pickle.loads(cloudpickle.dumps(factory))
        assert copy.record_id_digest == "rid"
        copy.open(SubtaskInfo("s", 0, 1))
        try:
            assert copy.rpc.compression_threshold == threshold
        finally:
            copy.close()
