"""Pub/Sub sink: publish each record to the topic its resolver names.

Needs the ``pubsub`` extra: ``pip install "pyflink-gcp[pubsub]"``.
"""

try:
    import google.pubsub_v1  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "pyflink_gcp.pubsub needs google-cloud-pubsub: pip install 'pyflink-gcp[pubsub]'"
    ) from exc

from pyflink_gcp.pubsub.dead_letter import PubSubDeadLetterQueue
from pyflink_gcp.pubsub.destinations import TopicDestination
from pyflink_gcp.pubsub.options import (
    CreateDisposition,
    PubSubPublisherOptions,
    PubSubWriterOptions,
    TopicCreateOptions,
)
from pyflink_gcp.pubsub.serialization import PubSubSerializationSchema
from pyflink_gcp.pubsub.sink import PubSubSink, PubSubSinkBuilder

__all__ = [
    "CreateDisposition",
    "PubSubDeadLetterQueue",
    "PubSubPublisherOptions",
    "PubSubSerializationSchema",
    "PubSubSink",
    "PubSubSinkBuilder",
    "PubSubWriterOptions",
    "TopicCreateOptions",
    "TopicDestination",
]
