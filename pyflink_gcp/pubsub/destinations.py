"""Pub/Sub destinations: a topic, identified by its resource name."""

from __future__ import annotations

import re

from pyflink_gcp.core.types import Destination, with_project

# Pub/Sub topic ids: 3-255 characters, start with a letter, then letters, digits, - _ . ~ + %,
# and never start with "goog".
_TOPIC_ID = re.compile(r"^[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}$")


class TopicDestination(Destination):
    """A Pub/Sub topic: ``projects/{project}/topics/{topic}``.

    Validated when built so that a resolver producing an impossible name fails on the record that
    produced it, with the name in the message, instead of as an opaque INVALID_ARGUMENT later.
    """

    __slots__ = ()

    def __init__(self, project: str, topic: str) -> None:
        if not project:
            raise ValueError("TopicDestination needs a project id")
        if not _TOPIC_ID.match(topic or "") or topic.startswith("goog"):
            raise ValueError(
                f"invalid Pub/Sub topic id {topic!r}: 3-255 characters, starting with a letter, "
                "of letters, digits and - _ . ~ + %, not starting with 'goog'"
            )
        self._init_name(f"projects/{project}/topics/{topic}")

    @staticmethod
    def of(*ids: str) -> TopicDestination:
        """``of(project, topic)``; ``of(topic)`` is the topic in ``GOOGLE_CLOUD_PROJECT``.

        The variable is read where the value is built (on the task managers for a resolver)
        and becomes part of the resource name, so equality stays the resource name.

        Raises:
            ValueError: An invalid id, or no project given and the variable unset.
        """
        project, topic = with_project("TopicDestination", ids, ("project", "topic"))
        return TopicDestination(project, topic)

    @staticmethod
    def from_resource_name(name: str) -> TopicDestination:
        """Parse ``projects/{project}/topics/{topic}``."""
        parts = name.split("/")
        if len(parts) != 4 or parts[0] != "projects" or parts[2] != "topics":
            raise ValueError(f"not a topic resource name: {name!r}")
        return TopicDestination(parts[1], parts[3])

    @property
    def project(self) -> str:
        return self._name.split("/")[1]

    @property
    def topic(self) -> str:
        return self._name.split("/")[3]
