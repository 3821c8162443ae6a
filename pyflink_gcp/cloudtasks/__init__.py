"""Cloud Tasks sink: create an HTTP task per record on the queue its resolver names.

Needs the ``cloudtasks`` extra: ``pip install "pyflink-gcp[cloudtasks]"``.

``QueueDestination.of(location, queue)`` is ``QueueDestination.of(project, location, queue)`` in the project ``GOOGLE_CLOUD_PROJECT``
names where the destination is built (docs/production.md).
"""

try:
    import google.cloud.tasks_v2  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "pyflink_gcp.cloudtasks needs google-cloud-tasks: pip install 'pyflink-gcp[cloudtasks]'"
    ) from exc

from pyflink_gcp.cloudtasks.destinations import QueueDestination
from pyflink_gcp.cloudtasks.options import (
    MAX_TASK_SIZE_BYTES,
    CloudTasksWriterOptions,
    CloudTasksWriterOptionsBuilder,
)
from pyflink_gcp.cloudtasks.serialization import CloudTasksSerializationSchema
from pyflink_gcp.cloudtasks.sink import CloudTasksSink, CloudTasksSinkBuilder

__all__ = [
    "MAX_TASK_SIZE_BYTES",
    "CloudTasksSerializationSchema",
    "CloudTasksSink",
    "CloudTasksSinkBuilder",
    "CloudTasksWriterOptions",
    "CloudTasksWriterOptionsBuilder",
    "QueueDestination",
]
