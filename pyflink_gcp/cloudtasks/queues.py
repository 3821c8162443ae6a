"""The queue check: does a queue exist and accept tasks, asked once per queue and subtask.

The sink never creates queues. Without a check, a resolver naming a queue that does not exist
fails at the first flush with the status of the first failed ``CreateTask``; with it (the
default, ``verify_queues``), the job fails when the queue's writer is created, with the queue's
name and the command that creates it. The check costs one ``GetQueue`` per queue and subtask,
remembered across writer evictions (the last
:data:`~pyflink_gcp.core.checked.CHECKED_NAMES_LIMIT` queues used). It blocks the processing
thread for that call, on purpose: the queue's first task is created on arrival, and the check
is what turns a missing queue into an error naming it before any task was sent.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc
from google.cloud import tasks_v2

from pyflink_gcp.cloudtasks.client import DEFAULT_HOST, admin_client, open_admin_channel
from pyflink_gcp.cloudtasks.destinations import QueueDestination
from pyflink_gcp.core.checked import CHECKED_NAMES_LIMIT, CheckedNames
from pyflink_gcp.core.endpoints import Endpoint
from pyflink_gcp.core.errors import DestinationNotFoundError, SinkError, WriteError
from pyflink_gcp.core.retry import RetryPolicy, status_name

_LOG = logging.getLogger("pyflink_gcp.cloudtasks")


class QueueCheck:
    """Checks, once per queue, that a queue exists and is not DISABLED.

    Holds the generated client on a synchronous channel of its own (the hot path's channels
    carry raw calls only), opened on the first check.

    Args:
        sink_name: For error messages.
        endpoint: Where the service is.
        retry: Retries transient errors of ``GetQueue``.
        timeout_s: Deadline of one ``GetQueue`` attempt.
    """

    def __init__(
        self, sink_name: str, endpoint: Endpoint, retry: RetryPolicy, timeout_s: float
    ) -> None:
        self._sink = sink_name
        self._endpoint = endpoint
        self._retry = retry
        self._timeout = timeout_s
        self._channel: grpc.Channel | None = None
        self._client: Any = None
        # Bounded: a job naming ever new queues would otherwise grow it without end.
        self._verified = CheckedNames(CHECKED_NAMES_LIMIT)

    def verify(self, destination: QueueDestination) -> None:
        """Return if the queue was checked before or exists; raise a SinkError naming it if not.

        Raises:
            DestinationNotFoundError: The queue does not exist.
            WriteError: The queue is DISABLED, or ``GetQueue`` failed otherwise.
        """
        name = destination.resource_name
        if name in self._verified:
            return
        where = self._endpoint.host or f"{DEFAULT_HOST}:443"
        what = f"sink '{self._sink}': checking Cloud Tasks queue {name} at {where}"
        client = self._client if self._client is not None else self._open()
        try:
            queue = self._retry.call(
                lambda: client.get_queue(name=name, retry=None, timeout=self._timeout), what
            )
        except SinkError:
            raise
        except Exception as exc:
            status = status_name(exc)
            if status == "NOT_FOUND":
                raise DestinationNotFoundError(
                    f"sink '{self._sink}': Cloud Tasks queue '{name}' does not exist. The "
                    f"sink never creates queues: create it (gcloud tasks queues create "
                    f"{destination.queue} --location={destination.location} "
                    f"--project={destination.project}) or fix the destination resolver."
                ) from exc
            if status == "PERMISSION_DENIED":
                _LOG.warning(
                    "%s: no permission to read queue %s (cloudtasks.queues.get); skipping the "
                    "existence check, a missing queue will fail on its first task",
                    self._sink,
                    name,
                )
                self._verified.add(name)
                return
            raise WriteError(f"{what}: {status}: {exc}") from exc
        if queue.state == tasks_v2.Queue.State.DISABLED:
            raise WriteError(
                f"sink '{self._sink}': Cloud Tasks queue '{name}' is DISABLED and accepts no "
                "tasks; resume it (gcloud tasks queues resume) or fix the destination resolver"
            )
        if queue.state == tasks_v2.Queue.State.PAUSED:
            _LOG.warning(
                "%s: queue %s is PAUSED: tasks are created but not dispatched until it resumes",
                self._sink,
                name,
            )
        self._verified.add(name)

    def _open(self) -> Any:
        self._channel = open_admin_channel(self._endpoint)
        self._client = admin_client(self._channel)
        return self._client

    def close(self) -> None:
        """Close the client's channel; the queues checked are forgotten."""
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        self._client = None
        self._verified.clear()
