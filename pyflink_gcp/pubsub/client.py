"""The client room of the Pub/Sub sink: its emulator variable, endpoint, channel and calls.

The sink publishes with the generated protobuf classes over a plain unary call instead of the
high-level ``PublisherClient``: that client runs its own batching threads and futures per message,
while the sink already batches per topic and flushes at checkpoint barriers. Publish is started
without waiting, as a gRPC future of the synchronous channel (:meth:`PubSubRpc.publish_future`)
whose done-callbacks run on gRPC's polling thread: no Python thread blocks per request. At
thousands of topics these futures cost less client CPU per record than blocking calls on a
thread pool and than ``grpc.aio`` calls on an event loop (whose per-call Python work, a task and
a coroutine per call, outweighs the polling thread); ``bench/README.md`` ("How Publish is
started") has the figures. The blocking calls serve the retries after a first attempt failed,
the topic check under ``CREATE_IF_NEEDED`` and the dead-letter topic's check (GetTopic as a plain
unary call too, since the generated client's layers cost CPU on every call; its errors are
turned into the ``google.api_core`` exceptions the generated client raises) and
CreateTopic, through the generated ``PublisherClient`` on the same channel, with ``retry=None``
and an explicit timeout: the library's default retry would wait up to 600 s on an unreachable
service, outside the sink's own ``retry_deadline``. Under ``CREATE_NEVER`` the sink makes no
GetTopic for its topics: a Publish answers ``NOT_FOUND`` for a missing one.

Compression (``PubSubPublisherOptions.enable_compression``) is decided per Publish request, as
Google's publisher clients do: a request whose serialized size is at least the threshold is
sent with gRPC's gzip compression (:func:`compression_for`), smaller ones as they are. The
channel itself stays uncompressed, so GetTopic, CreateTopic and small requests pay nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from google.api_core import exceptions as gexc
from google.pubsub_v1.services.publisher import PublisherClient
from google.pubsub_v1.services.publisher.transports.grpc import PublisherGrpcTransport
from google.pubsub_v1.types import GetTopicRequest, PublishRequest, PublishResponse, PubsubMessage
from google.pubsub_v1.types import Topic as TopicMessage

from pyflink_gcp.core.channels import UNLIMITED_MESSAGES, open_channel
from pyflink_gcp.core.endpoints import Endpoint, resolve_endpoint

#: The emulator variable of Pub/Sub (``host:port``; the gcloud emulator's own name).
EMULATOR_VARIABLE = "PUBSUB_EMULATOR_HOST"
#: The service's host when no endpoint is given.
DEFAULT_HOST = "pubsub.googleapis.com"
PUBLISH = "/google.pubsub.v1.Publisher/Publish"
GET_TOPIC = "/google.pubsub.v1.Publisher/GetTopic"

#: The raw protobuf classes (proto-plus wrappers add a conversion to every message).
PubsubMessagePb: Any = PubsubMessage.pb()
PublishRequestPb: Any = PublishRequest.pb()
PublishResponsePb: Any = PublishResponse.pb()
GetTopicRequestPb: Any = GetTopicRequest.pb()
TopicPb: Any = TopicMessage.pb()

#: Requests up to the service's 10 MB limit, and keepalives so an idle topic's channel survives
#: the NATs and load balancers between a worker and the service.
_CHANNEL_OPTIONS = (*UNLIMITED_MESSAGES, ("grpc.keepalive_time_ms", 30_000))


class PublishBatch(list):  # type: ignore[type-arg]
    """The messages of one Publish request, with the request they were built in.

    A topic's writer adds each message straight into the request that will carry it
    (``request.messages.add``) and keeps the added messages here, in order: the request then
    needs neither a message object of its own per record nor a copy of every message when it
    is built, about half of what a message cost the processing thread. Everything that reads
    the messages (a retry, the halves of a rejected request, the failure handler) still gets
    this list; :func:`publish_request` sends the request as built for the whole batch and
    builds one for any other part.

    Attributes:
        request: The ``PublishRequest`` holding exactly these messages, in this order.
    """

    __slots__ = ("request",)

    def __init__(self, messages: list[Any], request: Any) -> None:
        super().__init__(messages)
        self.request = request


def publish_request(topic: str, messages: Sequence[Any]) -> Any:
    """The ``PublishRequest`` of ``messages``: the one a :class:`PublishBatch` was built in
    (when it holds exactly them), else a new one."""
    request = getattr(messages, "request", None)
    if request is None or len(request.messages) != len(messages):
        request = PublishRequestPb(topic=topic, messages=messages)
    return request


def compression_for(size: int, threshold: int | None) -> grpc.Compression | None:
    """The compression of a Publish request of ``size`` serialized bytes: gzip from
    ``threshold`` bytes on, none below it or when ``threshold`` is None (compression off)."""
    if threshold is None or size < threshold:
        return None
    return grpc.Compression.Gzip


def resolve_pubsub_endpoint(explicit: str | None) -> Endpoint:
    """The builder's endpoint, else ``PUBSUB_EMULATOR_HOST``, else the service (ADC).

    Resolved on the worker, so a job uses the environment where it runs.
    """
    return resolve_endpoint(explicit, EMULATOR_VARIABLE)


class PubSubRpc:
    """A channel to Pub/Sub (or its emulator) with the calls the sink makes.

    Thread-safe: Publish is started from the processing thread and retried from the writer's
    thread pool. Every call is one attempt bounded by ``request_timeout_s``; the caller
    retries under its :class:`~pyflink_gcp.core.retry.RetryPolicy`.

    Args:
        endpoint: Where to connect.
        request_timeout_s: The timeout of one call.
        compression_threshold: Publish requests of at least this many serialized bytes are
            gzip-compressed; None sends every request uncompressed.

    Attributes:
        endpoint: ``host:port`` the channel connects to, for error messages.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        request_timeout_s: float = 60.0,
        compression_threshold: int | None = None,
    ) -> None:
        self.endpoint = endpoint.host or f"{DEFAULT_HOST}:443"
        self.compression_threshold = compression_threshold
        self.channel = open_channel(
            endpoint, PublisherGrpcTransport, DEFAULT_HOST, _CHANNEL_OPTIONS
        )
        self._timeout = request_timeout_s
        self._publish = self.channel.unary_unary(
            PUBLISH,
            request_serializer=PublishRequestPb.SerializeToString,
            response_deserializer=PublishResponsePb.FromString,
        )
        self._get_topic = self.channel.unary_unary(
            GET_TOPIC,
            request_serializer=GetTopicRequestPb.SerializeToString,
            response_deserializer=TopicPb.FromString,
        )
        self.admin = PublisherClient(transport=PublisherGrpcTransport(channel=self.channel))

    def publish(self, topic: str, messages: Sequence[Any]) -> Any:
        """One Publish request. Raises ``grpc.RpcError`` on failure."""
        request = publish_request(topic, messages)
        return self._publish(
            request,
            timeout=self._timeout,
            metadata=(("x-goog-request-params", f"topic={topic}"),),
            compression=self.compression_of(request),
        )

    def publish_future(self, topic: str, messages: Sequence[Any]) -> Any:
        """Start one Publish request without waiting: a ``grpc.Future`` (its ``exception()``
        is a ``grpc.RpcError`` on failure; its done-callbacks run on gRPC's polling thread)."""
        request = publish_request(topic, messages)
        return self._publish.future(
            request,
            timeout=self._timeout,
            metadata=(("x-goog-request-params", f"topic={topic}"),),
            compression=self.compression_of(request),
        )

    def compression_of(self, request: Any) -> grpc.Compression | None:
        """The compression of ``request`` (its serialized size is only computed when
        compression is on)."""
        threshold = self.compression_threshold
        if threshold is None:
            return None
        return compression_for(request.ByteSize(), threshold)

    def get_topic(self, name: str) -> Any:
        """One GetTopic attempt (no library retry). Raises ``google.api_core`` errors."""
        try:
            return self._get_topic(
                GetTopicRequestPb(topic=name),
                timeout=self._timeout,
                metadata=(("x-goog-request-params", f"topic={name}"),),
            )
        except grpc.RpcError as exc:
            raise gexc.from_grpc_error(exc) from exc

    def create_topic(self, request: dict[str, Any]) -> Any:
        """One CreateTopic attempt (no library retry). Raises ``google.api_core`` errors."""
        return self.admin.create_topic(request=request, retry=None, timeout=self._timeout)

    def close(self) -> None:
        """Close the channel (the admin client shares it); calls still in flight end
        CANCELLED."""
        self.channel.close()
