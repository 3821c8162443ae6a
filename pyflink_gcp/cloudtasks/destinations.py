"""Cloud Tasks destinations: a queue, identified by its resource name, and the queue id rule."""

from __future__ import annotations

import re

from pyflink_gcp.core.lineage import LineageDataset, resource_dataset
from pyflink_gcp.core.names import NameRule
from pyflink_gcp.core.types import Destination

#: A Cloud Tasks queue id: what :class:`QueueDestination` accepts and templates render
#: (``pyflink_gcp.routing.names.cloudtasks_queue_id``).
#:
#: Letters, numbers and hyphens, at most 100 characters
#: (https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues, ``name``).
#: Underscores are not allowed, so ``sanitize`` replaces with ``-``.
QUEUE_ID = NameRule(
    "Cloud Tasks queue id",
    allowed="-",
    replacement="-",
    min_length=1,
    max_length=100,
)

# Projects and locations are checked loosely (non-empty, no slash): the service is the
# authority on which ones exist.
_SEGMENT = re.compile(r"[^/\s]+")


class QueueDestination(Destination):
    """A Cloud Tasks queue: ``projects/{project}/locations/{location}/queues/{queue}``.

    Validated when built, so a resolver that produces an impossible name fails on the record that
    produced it, with the name in the message. The sink never creates queues.
    """

    __slots__ = ()
    _ids = ("project", "location", "queue")

    def __init__(self, project: str, location: str, queue: str) -> None:
        if not isinstance(project, str) or not _SEGMENT.fullmatch(project):
            raise ValueError(f"QueueDestination needs a project id, got {project!r}")
        if not isinstance(location, str) or not _SEGMENT.fullmatch(location):
            raise ValueError(
                f"QueueDestination needs a location such as 'us-central1', got {location!r}"
            )
        reason = QUEUE_ID.validate(queue) if isinstance(queue, str) else "is not a string"
        if reason is not None:
            raise ValueError(f"invalid Cloud Tasks queue id {queue!r}: it {reason}")
        self._init_name(f"projects/{project}/locations/{location}/queues/{queue}")

    @staticmethod
    def of(*ids: str) -> QueueDestination:
        """``of(project, location, queue)``: the queue ``queue`` of ``project`` in
        ``location``; ``of(location, queue)`` is in ``GOOGLE_CLOUD_PROJECT``.

        The variable is read where the value is built (on the task managers for a resolver)
        and becomes part of the resource name, so equality stays the resource name.
        Resolvers call this once per record; equal arguments return the same (immutable) value
        from a bounded cache, so the hot path skips validation and allocation.

        Raises:
            ValueError: An invalid id, or no project given and the variable unset.
        """
        return QueueDestination._of(ids)

    @staticmethod
    def from_resource_name(name: str) -> QueueDestination:
        """Parse ``projects/{project}/locations/{location}/queues/{queue}``."""
        parts = name.split("/") if isinstance(name, str) else []
        if (
            len(parts) != 6
            or parts[0] != "projects"
            or parts[2] != "locations"
            or parts[4] != "queues"
        ):
            raise ValueError(f"not a Cloud Tasks queue resource name: {name!r}")
        return QueueDestination._of((parts[1], parts[3], parts[5]))

    def lineage_dataset(self) -> LineageDataset:
        """The queue's dataset: namespace ``cloudtasks``, name ``project.location.queue``
        (OpenLineage names no Cloud Tasks datasets; this follows its BigQuery form)."""
        name = f"{self.project}.{self.location}.{self.queue}"
        return resource_dataset("cloudtasks", name, "cloudtasks", self._name)

    @property
    def project(self) -> str:
        return self._name.split("/")[1]

    @property
    def location(self) -> str:
        return self._name.split("/")[3]

    @property
    def queue(self) -> str:
        """The queue id (the last segment of the resource name)."""
        return self._name.split("/")[5]
