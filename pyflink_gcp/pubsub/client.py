"""The gRPC plumbing of the Pub/Sub sink: one channel, raw-protobuf Publish, admin calls.

The sink publishes with the generated protobuf classes over a plain unary call instead of the
high-level ``PublisherClient``: that client runs its own batching threads and futures per message,
while the sink already batches per topic and flushes at checkpoint barriers. Admin calls (get and
create topic) go through the generated ``PublisherClient`` on the same channel.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.pubsub_v1.services.publisher import PublisherClient
from google.pubsub_v1.services.publisher.transports.grpc import PublisherGrpcTransport
from google.pubsub_v1.types import PublishRequest, PublishResponse, PubsubMessage

from pyflink_gcp.core.endpoints import Endpoint

#: The raw protobuf classes (proto-plus wrappers cost microseconds per message).
PubsubMessagePb: Any = PubsubMessage.pb()
PublishRequestPb: Any = PublishRequest.pb()
PublishResponsePb: Any = PublishResponse.pb()

DEFAULT_HOST = "pubsub.googleapis.com"
_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    ("grpc.keepalive_time_ms", 30_000),
]


class PubSubRpc:
    """A channel to Pub/Sub (or its emulator) with the calls the sink makes.

    Thread-safe: Publish is called from the writer's thread pool.
    """

    def __init__(self, endpoint: Endpoint, request_timeout_s: float = 60.0) -> None:
        if endpoint.insecure:
            assert endpoint.host is not None
            self.channel = grpc.insecure_channel(endpoint.host, options=_CHANNEL_OPTIONS)
        else:
            self.channel = PublisherGrpcTransport.create_channel(
                endpoint.host or DEFAULT_HOST, options=_CHANNEL_OPTIONS
            )
        self._timeout = request_timeout_s
        self._publish = self.channel.unary_unary(
            "/google.pubsub.v1.Publisher/Publish",
            request_serializer=PublishRequestPb.SerializeToString,
            response_deserializer=PublishResponsePb.FromString,
        )
        self.admin = PublisherClient(transport=PublisherGrpcTransport(channel=self.channel))

    def publish(self, topic: str, messages: list[Any]) -> Any:
        """One Publish request. Raises ``grpc.RpcError`` on failure."""
        request = PublishRequestPb(topic=topic, messages=messages)
        return self._publish(
            request, timeout=self._timeout, metadata=(("x-goog-request-params", f"topic={topic}"),)
        )

    def close(self) -> None:
        self.channel.close()
