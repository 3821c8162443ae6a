"""The Pub/Sub client room: endpoint resolution and the channel to an emulator."""

from __future__ import annotations

import grpc
import pytest

from pyflink_gcp.core.endpoints import Endpoint
from pyflink_gcp.pubsub.client import (
    EMULATOR_VARIABLE,
    PublishBatch,
    PublishRequestPb,
    PubsubMessagePb,
    PubSubRpc,
    compression_for,
    publish_request,
    resolve_pubsub_endpoint,
)


def test_the_emulator_variable_is_the_gcloud_one():
    assert EMULATOR_VARIABLE == "PUBSUB_EMULATOR_HOST"


@pytest.mark.parametrize(
    ("explicit", "variable", "expected"),
    [
        (None, None, Endpoint(None, False)),
        (None, "localhost:8085", Endpoint("localhost:8085", True)),
        ("pubsub.example.com:443", "localhost:8085", Endpoint("pubsub.example.com:443", False)),
        ("http://127.0.0.1:9000", None, Endpoint("127.0.0.1:9000", True)),
    ],
)
def test_explicit_endpoint_then_emulator_variable_then_the_service(
    monkeypatch, explicit, variable, expected
):
    if variable is None:
        monkeypatch.delenv(EMULATOR_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(EMULATOR_VARIABLE, variable)
    assert resolve_pubsub_endpoint(explicit) == expected


def test_an_emulator_endpoint_gets_a_plain_text_channel_and_a_publish_error_is_a_grpc_error():
    # Nothing listens on port 1: the insecure channel opens lazily, and the call fails with a
    # gRPC status the writer classifies (UNAVAILABLE, retried), not with a credentials error.
    rpc = PubSubRpc(Endpoint("127.0.0.1:1", True), request_timeout_s=2.0)
    try:
        with pytest.raises(grpc.RpcError) as err:
            rpc.publish("projects/p/topics/t", [])
        assert err.value.code() is grpc.StatusCode.UNAVAILABLE
    finally:
        rpc.close()


def test_admin_calls_are_one_attempt_bounded_by_the_timeout_not_the_library_retry():
    # The library's default retry on GetTopic/CreateTopic waits up to 600 s on an unreachable
    # service; each call here must be one attempt that ends at the rpc's timeout.
    import time

    from google.api_core import exceptions as gexc

    from tests.support.endpoints import black_hole_endpoint, refusing_endpoint

    rpc = PubSubRpc(Endpoint(refusing_endpoint(), True), request_timeout_s=1.0)
    try:
        start = time.monotonic()
        with pytest.raises(gexc.ServiceUnavailable):
            rpc.get_topic("projects/p/topics/orders")
        assert time.monotonic() - start < 3
    finally:
        rpc.close()
    with black_hole_endpoint() as silent:
        rpc = PubSubRpc(Endpoint(silent, True), request_timeout_s=1.0)
        assert rpc.endpoint == silent
        try:
            start = time.monotonic()
            with pytest.raises(gexc.DeadlineExceeded):
                rpc.create_topic({"name": "projects/p/topics/orders"})
            assert time.monotonic() - start < 3
        finally:
            rpc.close()


@pytest.mark.parametrize(
    ("size", "threshold", "expected"),
    [
        (10_000, None, None),  # compression off: never, whatever the size
        (239, 240, None),
        (240, 240, grpc.Compression.Gzip),  # at the threshold: compressed
        (241, 240, grpc.Compression.Gzip),
        (0, 0, grpc.Compression.Gzip),  # threshold 0: every request
    ],
)
def test_a_request_is_gzipped_from_the_threshold_on(size, threshold, expected):
    assert compression_for(size, threshold) is expected


class RecordingCall:
    """Stands in for the channel's Publish callable: keeps each call's request and options."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, dict]] = []

    def __call__(self, request, **kwargs):
        self.calls.append((request, kwargs))

    def future(self, request, **kwargs):
        self.calls.append((request, kwargs))


@pytest.mark.parametrize("threshold", [None, 240])
def test_publish_passes_each_request_s_compression_to_grpc(threshold):
    rpc = PubSubRpc(Endpoint("127.0.0.1:1", True), compression_threshold=threshold)
    recording = rpc._publish = RecordingCall()
    try:
        small = [PubsubMessagePb(data=b"x")]
        large = [PubsubMessagePb(data=b"x" * 300)]
        rpc.publish("projects/p/topics/t", small)
        rpc.publish("projects/p/topics/t", large)
        rpc.publish_future("projects/p/topics/t", large)
    finally:
        rpc.close()
    sizes = [request.ByteSize() for request, _ in recording.calls]
    assert sizes[0] < 240 <= sizes[1] == sizes[2]
    compressions = [kwargs["compression"] for _, kwargs in recording.calls]
    if threshold is None:
        assert compressions == [None, None, None]
    else:
        assert compressions == [None, grpc.Compression.Gzip, grpc.Compression.Gzip]


def built_batch(topic: str, payloads: list[bytes]) -> PublishBatch:
    """A batch as a topic's writer builds it: each message added to its request in place."""
    request = PublishRequestPb(topic=topic)
    return PublishBatch([request.messages.add(data=p) for p in payloads], request)


def test_a_whole_batch_is_sent_in_the_request_it_was_built_in():
    batch = built_batch("projects/p/topics/t", [b"a", b"b", b"c"])
    assert publish_request("projects/p/topics/t", batch) is batch.request


def test_a_part_of_a_batch_or_a_plain_list_gets_a_request_of_its_own():
    topic = "projects/p/topics/t"
    batch = built_batch(topic, [b"a", b"b", b"c"])
    half = publish_request(topic, batch[:2])  # a rejected request's half, as isolation cuts it
    assert half is not batch.request
    assert half.topic == topic
    assert [m.data for m in half.messages] == [b"a", b"b"]
    plain = publish_request(topic, [PubsubMessagePb(data=b"x", ordering_key="k")])
    assert [(m.data, m.ordering_key) for m in plain.messages] == [(b"x", "k")]


def test_both_publish_paths_send_a_whole_batch_in_the_request_it_was_built_in():
    # The first attempt goes out through publish_future, a retry through publish: neither
    # copies the batch's messages into a new request.
    rpc = PubSubRpc(Endpoint("127.0.0.1:1", True))
    recording = rpc._publish = RecordingCall()
    batch = built_batch("projects/p/topics/t", [b"a", b"b"])
    try:
        rpc.publish_future("projects/p/topics/t", batch)
        rpc.publish("projects/p/topics/t", batch)
    finally:
        rpc.close()
    assert [request for request, _ in recording.calls] == [batch.request, batch.request]
    assert all(request is batch.request for request, _ in recording.calls)
