"""``PubSubSink``: publish each record to the topic its resolver names."""

from __future__ import annotations

from typing import Any

from pyflink_gcp.core.endpoints import Endpoint, resolve_endpoint
from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.failure import FailureHandler
from pyflink_gcp.core.functions import as_resolver, describe_callable, ensure_picklable
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.core.runtime import DynamicSink
from pyflink_gcp.core.sink_writer import SinkConfig
from pyflink_gcp.pubsub.options import (
    CreateDisposition,
    PubSubPublisherOptions,
    PubSubWriterOptions,
    TopicCreateOptions,
)
from pyflink_gcp.pubsub.serialization import PubSubSerializationSchema
from pyflink_gcp.pubsub.writer import PubSubWriterFactory, check_ordering

EMULATOR_VARIABLE = "PUBSUB_EMULATOR_HOST"


def resolve_pubsub_endpoint(explicit: str | None) -> Endpoint:
    """The builder's endpoint, else ``PUBSUB_EMULATOR_HOST``, else the service (ADC)."""
    return resolve_endpoint(explicit, EMULATOR_VARIABLE)


class PubSubSink(DynamicSink):
    """A sink that publishes each record to the Pub/Sub topic its resolver names.

    Example::

        sink = (PubSubSink.builder()
                .set_destination_resolver(lambda e, ctx: TopicDestination.of("p", e["region"]))
                .set_serializer(PubSubSerializationSchema.payload(lambda e: json.dumps(e).encode()))
                .build())
        ds.sink_to(sink)

    At least once: every record received before a checkpoint barrier is published (or handed to
    the failure handler) before the checkpoint completes.
    """

    @staticmethod
    def builder() -> PubSubSinkBuilder:
        return PubSubSinkBuilder()


class PubSubSinkBuilder:
    """Builder of :class:`PubSubSink`. Only the resolver and the serializer are required."""

    def __init__(self) -> None:
        self._name = "pubsub-sink"
        self._resolver: Any = None
        self._serializer: Any = None
        self._publisher = PubSubPublisherOptions()
        self._writer = PubSubWriterOptions()
        self._disposition = CreateDisposition.CREATE_NEVER
        self._create_options = TopicCreateOptions()
        self._failure_handler = FailureHandler.fail_job()
        self._endpoint: str | None = None

    def set_sink_name(self, name: str) -> PubSubSinkBuilder:
        """The name used in errors, logs and metrics (default ``pubsub-sink``)."""
        self._name = name
        return self

    def set_destination_resolver(self, resolver: Any) -> PubSubSinkBuilder:
        """``(record, WriterContext) -> TopicDestination``, or an object with ``resolve``."""
        self._resolver = resolver
        return self

    def set_serializer(self, serializer: Any) -> PubSubSinkBuilder:
        """A :class:`PubSubSerializationSchema`, or a callable ``record -> bytes``."""
        self._serializer = serializer
        return self

    def set_publisher_options(self, options: PubSubPublisherOptions) -> PubSubSinkBuilder:
        self._publisher = options
        return self

    def set_writer_options(self, options: PubSubWriterOptions) -> PubSubSinkBuilder:
        self._writer = options
        return self

    def set_create_disposition(
        self, disposition: CreateDisposition, options: TopicCreateOptions | None = None
    ) -> PubSubSinkBuilder:
        """Whether missing topics are created (default CREATE_NEVER), with what options."""
        self._disposition = disposition
        if options is not None:
            self._create_options = options
        return self

    def set_failure_handler(self, handler: FailureHandler) -> PubSubSinkBuilder:
        self._failure_handler = handler
        return self

    def set_endpoint(self, endpoint: str) -> PubSubSinkBuilder:
        """``host:port`` of the service; an ``http://host:port`` URL means an emulator."""
        self._endpoint = endpoint
        return self

    def build(self) -> PubSubSink:
        name = self._name
        as_resolver(self._resolver, name)
        serializer = self._serializer
        if serializer is None:
            raise ConfigurationError(f"sink '{name}': set_serializer() is required")
        if not isinstance(serializer, PubSubSerializationSchema):
            if not callable(serializer):
                raise ConfigurationError(
                    f"sink '{name}': the serializer must be a PubSubSerializationSchema or a "
                    f"callable record -> bytes, got {type(serializer).__name__}"
                )
            serializer = PubSubSerializationSchema.payload(serializer)
        check_ordering(self._publisher, serializer.has_ordering_key, name)
        if not isinstance(self._failure_handler, FailureHandler):
            raise ConfigurationError(f"sink '{name}': set_failure_handler() takes a FailureHandler")
        ensure_picklable(self._resolver, "destination resolver", name)
        ensure_picklable(serializer, "serializer", name)
        w = self._writer
        factory = PubSubWriterFactory(
            sink_name=name,
            resolver_name=describe_callable(self._resolver),
            publisher_options=self._publisher,
            writer_options=w,
            create_disposition=self._disposition,
            create_options=self._create_options,
            endpoint=self._endpoint,
            retry=RetryPolicy(deadline_s=w.retry_deadline.total_seconds()),
        )
        dlq = self._failure_handler.dead_letter_queue
        if dlq is not None:
            ensure_picklable(dlq, "dead-letter queue", name)
        config = SinkConfig(
            sink_name=name,
            factory=factory,
            resolver=self._resolver,
            serializer=serializer,
            failure_handler=self._failure_handler,
            idle_timeout_s=w.idle_timeout.total_seconds(),
            max_active=w.max_active_topics,
            max_buffered_records=self._publisher.max_buffered_messages,
            max_buffer_time_ms=max(1, int(self._publisher.max_latency.total_seconds() * 1000)),
            per_destination_metrics=w.per_destination_metrics,
        )
        return PubSubSink(config)
