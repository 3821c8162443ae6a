"""``PubSubSink``: publish each record to the topic its resolver names."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from pyflink_gcp.core.builder import CreatingSinkBuilder
from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.functions import describe_callable, ensure_picklable
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.core.runtime import DynamicSink
from pyflink_gcp.pubsub.options import (
    PubSubPublisherOptions,
    PubSubWriterOptions,
    TopicCreateOptions,
)
from pyflink_gcp.pubsub.serialization import PubSubSerializationSchema
from pyflink_gcp.pubsub.writer import PubSubWriterFactory

if TYPE_CHECKING:
    from pyflink_gcp.core.sink_writer import SinkConfig


class PubSubSink(DynamicSink):
    """A sink that publishes each record to the Pub/Sub topic its resolver names.

    Example::

        sink = (PubSubSink.builder()
                .set_destination_resolver(lambda e, ctx: TopicDestination.of("p", e["region"]))
                .set_serializer(PubSubSerializationSchema.payload(lambda e: json.dumps(e).encode()))
                .set_writer_options(PubSubWriterOptions.builder()
                                    .max_buffer_time(timedelta(milliseconds=500)).build())
                .build())
        ds.sink_to(sink)

    At least once: every record received before a checkpoint barrier is published (or handed to
    the failure handler) before the checkpoint completes.
    """

    def __init__(self, config: SinkConfig) -> None:
        """Made by ``PubSubSink.builder()...build()``, which validates the configuration; not
        called directly."""
        super().__init__(config)

    @staticmethod
    def builder() -> PubSubSinkBuilder:
        """A builder; only the resolver and the serializer are required."""
        return PubSubSinkBuilder()


class PubSubSinkBuilder(CreatingSinkBuilder):
    """Builder of :class:`PubSubSink`. Only the resolver and the serializer are required.

    The serializer is a :class:`PubSubSerializationSchema` or a callable
    ``(record, ctx) -> bytes`` (or ``record -> bytes``), the payload of a schema without
    ordering key or attributes.
    """

    default_name = "pubsub-sink"
    options_type = PubSubWriterOptions

    def __init__(self) -> None:
        super().__init__()
        self._publisher = PubSubPublisherOptions()
        self._create_options: TopicCreateOptions | None = None

    def set_publisher_options(self, options: PubSubPublisherOptions) -> Self:
        """Request shape and ordering: ``PubSubPublisherOptions.builder()...build()``."""
        self._publisher = self._require(
            options,
            PubSubPublisherOptions,
            "set_publisher_options",
            "PubSubPublisherOptions (PubSubPublisherOptions.builder()...build())",
        )
        return self

    def set_topic_create_options(self, options: TopicCreateOptions) -> Self:
        """Labels and retention of the topics the sink creates (needs ``CREATE_IF_NEEDED``)."""
        self._create_options = self._require(
            options, TopicCreateOptions, "set_topic_create_options", "TopicCreateOptions"
        )
        return self

    def build(self) -> PubSubSink:
        """The sink; raises ConfigurationError naming the sink and what is wrong."""
        name = self._validate_common("PubSubSerializationSchema.payload(fn)")
        if self._create_options is not None and not self.creates_destinations:
            raise ConfigurationError(
                f"sink '{name}': set_topic_create_options() applies only to topics the sink "
                "creates; call set_create_disposition(CreateDisposition.CREATE_IF_NEEDED) too"
            )
        serializer = self._schema(name)
        ensure_picklable(serializer, "serializer", name)
        options: PubSubWriterOptions = self._options
        factory = PubSubWriterFactory(
            sink_name=name,
            resolver_name=describe_callable(self._resolver),
            publisher_options=self._publisher,
            writer_options=options,
            create_disposition=self._disposition,
            create_options=self._create_options or TopicCreateOptions(),
            endpoint=self._endpoint,
            retry=RetryPolicy(deadline_s=options.retry_deadline_s),
            record_id_digest=serializer.record_id_digest,
        )
        return PubSubSink(self._sink_config(name, factory, serializer))

    def _schema(self, name: str) -> PubSubSerializationSchema:
        """The serializer as a schema whose ordering keys the publisher options can send."""
        serializer: Any = self._serializer
        if not isinstance(serializer, PubSubSerializationSchema):
            if not callable(serializer):
                raise ConfigurationError(
                    f"sink '{name}': the serializer must be a PubSubSerializationSchema or a "
                    f"callable (record, ctx) -> bytes, got {type(serializer).__name__}"
                )
            serializer = PubSubSerializationSchema.payload(serializer)
        if serializer.has_ordering_key and not self._publisher.enable_message_ordering:
            # Ordering keys without ordering would be dropped silently.
            raise ConfigurationError(
                f"sink '{name}': the serializer sets ordering keys but message ordering is "
                "disabled; call PubSubPublisherOptions.builder().enable_message_ordering(True)"
            )
        return serializer
