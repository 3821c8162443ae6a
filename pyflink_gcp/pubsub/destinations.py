"""Pub/Sub destinations: a topic, identified by its resource name, and Pub/Sub's topic id rule."""

from __future__ import annotations

from pyflink_gcp.core.lineage import LineageDataset, resource_dataset
from pyflink_gcp.core.names import NameRule
from pyflink_gcp.core.types import Destination

#: A Pub/Sub topic id: what :class:`TopicDestination` accepts and templates render
#: (``pyflink_gcp.routing.names.pubsub_topic_id``).
#:
#: It must start with a letter, contain only letters, numbers, ``-``, ``_``, ``.``, ``~``, ``+``
#: and ``%``, be 3 to 255 characters long and not start with ``goog``
#: (https://cloud.google.com/pubsub/docs/reference/rest/v1/projects.topics, ``Topic.name``).
#: ``sanitize`` replaces anything else with ``_``. Letters are ASCII only (``[A-Za-z]``).
TOPIC_ID = NameRule(
    "Pub/Sub topic id",
    allowed="-_.~+%",
    replacement="_",
    min_length=3,
    max_length=255,
    first="",
    reserved_prefixes=("goog",),
)


class TopicDestination(Destination):
    """A Pub/Sub topic: ``projects/{project}/topics/{topic}``.

    Validated when built so that a resolver producing an impossible name fails on the record that
    produced it, with the name in the message, instead of as an opaque INVALID_ARGUMENT later.
    """

    __slots__ = ()
    _ids = ("project", "topic")

    def __init__(self, project: str, topic: str) -> None:
        if not project or not isinstance(project, str):
            raise ValueError("TopicDestination needs a project id")
        reason = TOPIC_ID.validate(topic) if isinstance(topic, str) else "is not a string"
        if reason is not None:
            raise ValueError(f"invalid Pub/Sub topic id {topic!r}: it {reason}")
        self._init_name(f"projects/{project}/topics/{topic}")

    @staticmethod
    def of(*ids: str) -> TopicDestination:
        """``of(project, topic)``; ``of(topic)`` is the topic in ``GOOGLE_CLOUD_PROJECT``.

        The variable is read where the value is built (on the task managers for a resolver)
        and becomes part of the resource name, so equality stays the resource name. Equal
        arguments return the same (immutable) value from a bounded cache.

        Raises:
            ValueError: An invalid id, or no project given and the variable unset.
        """
        return TopicDestination._of(ids)

    @staticmethod
    def from_resource_name(name: str) -> TopicDestination:
        """Parse ``projects/{project}/topics/{topic}``."""
        parts = name.split("/")
        if len(parts) != 4 or parts[0] != "projects" or parts[2] != "topics":
            raise ValueError(f"not a topic resource name: {name!r}")
        return TopicDestination(parts[1], parts[3])

    def lineage_dataset(self) -> LineageDataset:
        """OpenLineage's Pub/Sub dataset: namespace ``pubsub``, name ``topic:project:topic``."""
        name = f"topic:{self.project}:{self.topic}"
        return resource_dataset("pubsub", name, "pubsub", self._name)

    @property
    def project(self) -> str:
        return self._name.split("/")[1]

    @property
    def topic(self) -> str:
        return self._name.split("/")[3]
