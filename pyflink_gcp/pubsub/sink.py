"""``PubSubSink``: publish each record to the topic its resolver names."""

from __future__ import annotations

from pyflink_gcp.core.builder import SinkBuilder
from pyflink_gcp.core.endpoints import Endpoint, resolve_endpoint
from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.functions import describe_callable, ensure_picklable
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.core.runtime import DynamicSink
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


class PubSubSinkBuilder(SinkBuilder):
    """Builder of :class:`PubSubSink`. Only the resolver and the serializer are required.

    The serializer is a :class:`PubSubSerializationSchema` or a callable ``record -> bytes``.
    """

    default_name = "pubsub-sink"

    def __init__(self) -> None:
        super().__init__()
        self._publisher = PubSubPublisherOptions()
        self._writer = PubSubWriterOptions()
        self._disposition = CreateDisposition.CREATE_NEVER
        self._create_options = TopicCreateOptions()

    def set_publisher_options(self, options: PubSubPublisherOptions) -> PubSubSinkBuilder:
        """Batching, ordering and in-flight limits."""
        self._publisher = options
        return self

    def set_writer_options(self, options: PubSubWriterOptions) -> PubSubSinkBuilder:
        """Idle timeout, active-topic cap, shutdown budget, retry deadline, metrics."""
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

    def build(self) -> PubSubSink:
        name = self._validate_common("PubSubSerializationSchema.payload(fn)")
        serializer = self._serializer
        if not isinstance(serializer, PubSubSerializationSchema):
            if not callable(serializer):
                raise ConfigurationError(
                    f"sink '{name}': the serializer must be a PubSubSerializationSchema or a "
                    f"callable record -> bytes, got {type(serializer).__name__}"
                )
            serializer = PubSubSerializationSchema.payload(serializer)
        check_ordering(self._publisher, serializer.has_ordering_key, name)
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
        config = self._sink_config(
            name,
            factory,
            serializer,
            idle_timeout_s=w.idle_timeout.total_seconds(),
            max_active=w.max_active_topics,
            max_buffered_records=self._publisher.max_buffered_messages,
            max_buffer_time=self._publisher.max_latency,
            per_destination_metrics=w.per_destination_metrics,
        )
        return PubSubSink(config)
