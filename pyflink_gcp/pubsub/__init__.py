"""Pub/Sub sink: publish each record to the topic its resolver names.

Needs the ``pubsub`` extra: ``pip install "pyflink-gcp[pubsub]"``.

``TopicDestination.of(topic)`` is ``TopicDestination.of(project, topic)`` in the project ``GOOGLE_CLOUD_PROJECT``
names where the destination is built (docs/production.md).

Example::

    sink = (PubSubSink.builder()
            .set_destination_resolver(lambda e, ctx: TopicDestination.of("p", e["region"]))
            .set_serializer(PubSubSerializationSchema.payload(lambda e, ctx: json.dumps(e).encode())
                            .with_ordering_key(lambda e, ctx: e["customer_id"]))
            .set_publisher_options(PubSubPublisherOptions.builder()
                                   .enable_message_ordering(True).build())
            .set_writer_options(PubSubWriterOptions.builder()
                                .max_active_destinations(64).build())
            .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
            .set_topic_create_options(TopicCreateOptions(labels={"team": "data"}))
            .build())
    ds.key_by(lambda e: e["customer_id"]).sink_to(sink)

Modules: ``sink`` (the sink and its builder), ``options``, ``serialization``, ``destinations``,
``client`` (emulator variable, endpoint, channel and calls), ``writer`` (the hot path: one
publisher per topic), ``publishing`` (the subtask's publish transport: requests in flight,
retries, ordering), ``attributes`` (the attribute limits and the provenance attributes) and
``dead_letter`` (the dead-letter queue any sink can use).
"""

try:
    import google.pubsub_v1  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "pyflink_gcp.pubsub needs google-cloud-pubsub: pip install 'pyflink-gcp[pubsub]'"
    ) from exc

from pyflink_gcp.core.options import CreateDisposition
from pyflink_gcp.pubsub.dead_letter import PubSubDeadLetterQueue
from pyflink_gcp.pubsub.destinations import TopicDestination
from pyflink_gcp.pubsub.options import (
    PubSubPublisherOptions,
    PubSubPublisherOptionsBuilder,
    PubSubWriterOptions,
    PubSubWriterOptionsBuilder,
    TopicCreateOptions,
)
from pyflink_gcp.pubsub.serialization import PubSubSerializationSchema
from pyflink_gcp.pubsub.sink import PubSubSink, PubSubSinkBuilder

__all__ = [
    "CreateDisposition",
    "PubSubDeadLetterQueue",
    "PubSubPublisherOptions",
    "PubSubPublisherOptionsBuilder",
    "PubSubSerializationSchema",
    "PubSubSink",
    "PubSubSinkBuilder",
    "PubSubWriterOptions",
    "PubSubWriterOptionsBuilder",
    "TopicCreateOptions",
    "TopicDestination",
]
