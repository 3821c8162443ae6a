"""The queue check: does a queue exist and accept tasks, asked once per queue and subtask.

The sink never creates queues. Without a check, a resolver naming a queue that does not exist
fails at the first flush with the status of the first failed ``CreateTask``; with it (the
default, ``verify_queues``), the job fails with the queue's name and the command that creates
it. The check costs one ``GetQueue`` per queue and subtask, remembered across writer evictions
(the last :data:`~pyflink_gcp.core.checked.CHECKED_NAMES_LIMIT` queues used).

It does not block the processing thread: at thousands of queues a blocking ``GetQueue`` per new
queue would cost that thread a round trip each (10,000 queues at 20 ms a round trip: 200 s per
subtask). When a
queue's writer is created, :meth:`QueueCheck.start` sends the first attempt as a gRPC future
(:class:`~pyflink_gcp.core.checked.PendingCheck`); if it fails, the full check (the retry
policy's retries, the errors naming the queue) runs on a small pool of the check's own. The
queue's tasks are sent meanwhile: a ``CreateTask`` on a missing queue only fails NOT_FOUND and
creates nothing. The writer settles the check at the latest at its flush, before it reads its
calls' outcomes, so a missing or DISABLED queue fails the job with the check's error, not with
a status of one of its tasks (and as soon as the writer compacts its calls, if the check has
failed by then: a missing queue's failed calls are not kept until the checkpoint).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from google.cloud import tasks_v2

from pyflink_gcp.cloudtasks.client import (
    DEFAULT_HOST,
    client_header,
    get_queue_metadata,
    get_queue_request,
    get_queue_stub,
    open_admin_channel,
)
from pyflink_gcp.cloudtasks.destinations import QueueDestination
from pyflink_gcp.core.checked import (
    CHECKED_NAMES_LIMIT,
    CHECKS_IN_FLIGHT,
    CheckCalls,
    CheckedNames,
    PendingCheck,
)
from pyflink_gcp.core.endpoints import Endpoint
from pyflink_gcp.core.errors import DestinationNotFoundError, SinkError, WriteError
from pyflink_gcp.core.retry import RetryPolicy, status_name

_LOG = logging.getLogger("pyflink_gcp.cloudtasks")

#: Threads that run full checks (those whose first attempt failed), per subtask: few, since a
#: first attempt fails only for a missing queue, a denied permission or a troubled service.
CHECK_THREADS = 2


class QueueCheck:
    """Checks, once per queue, that a queue exists and is not DISABLED.

    Calls ``GetQueue`` raw on a synchronous channel of its own (the hot path's channels carry
    ``CreateTask`` only), opened on the first check.

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
        self._stub: Any = None
        self._header = client_header()
        # Its threads start on the first full check only.
        self._pool: ThreadPoolExecutor | None = ThreadPoolExecutor(
            CHECK_THREADS, "pyflink-gcp-cloudtasks-check"
        )
        # Bounded: a job naming ever new queues would otherwise grow it without end.
        self._verified = CheckedNames(CHECKED_NAMES_LIMIT)
        # The first GetQueue attempts, a bounded number in flight (thousands of new queues at
        # once would hold thousands of calls).
        self._checks = CheckCalls(CHECKS_IN_FLIGHT, f"sink '{sink_name}'")

    def start(self, destination: QueueDestination) -> PendingCheck | None:
        """Start checking ``destination`` without waiting for the answer.

        Returns:
            None if the queue was found before; else its pending check, whose
            :meth:`PendingCheck.wait` returns once the queue is known to accept tasks or
            raises what :meth:`verify` raises.
        """
        name = destination.resource_name
        if name in self._verified:
            return None
        stub = self._stub if self._stub is not None else self._open()
        call = self._checks.start(self._get_queue, stub, name)
        check = PendingCheck(
            call,
            lambda: self.verify(destination),
            lambda: self._accept(destination, call.result()),
        )
        check.then(_found, lambda: self._settle_on_pool(check))
        return check

    def _get_queue(self, stub: Any, name: str) -> Any:
        """Start the queue's GetQueue (its request built only now: a queued check holds nothing
        but the queue's name)."""
        return stub.future(
            get_queue_request(name),
            timeout=self._timeout,
            metadata=get_queue_metadata(name, self._header),
        )

    def _settle_on_pool(self, check: PendingCheck) -> None:
        """The first attempt failed: run the full check off the processing thread (on gRPC's
        polling thread, this only hands it over)."""
        pool = self._pool
        if pool is None:
            return  # closed: no one waits for the check any more (a flush would run it)
        try:
            pool.submit(_settle, check)
        except RuntimeError:  # the pool shut down meanwhile (the subtask closed)
            pass

    def verify(self, destination: QueueDestination) -> None:
        """Return if the queue was found before or exists; raise a SinkError naming it if not.

        Blocks for ``GetQueue``, retried on transient errors until the retry deadline (the
        full check of :meth:`start`).

        Raises:
            DestinationNotFoundError: The queue does not exist.
            WriteError: The queue is DISABLED, or ``GetQueue`` failed otherwise.
        """
        name = destination.resource_name
        if name in self._verified:
            return
        where = self._endpoint.host or f"{DEFAULT_HOST}:443"
        what = f"sink '{self._sink}': checking Cloud Tasks queue {name} at {where}"
        stub = self._stub if self._stub is not None else self._open()
        request = get_queue_request(name)
        metadata = get_queue_metadata(name, self._header)
        try:
            queue = self._retry.call(
                lambda: stub(request, timeout=self._timeout, metadata=metadata), what
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
        self._accept(destination, queue)

    def _accept(self, destination: QueueDestination, queue: Any) -> None:
        """Judge the state of a queue that exists; remember it if it accepts tasks."""
        name = destination.resource_name
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
        self._stub = get_queue_stub(self._channel)
        return self._stub

    def close(self) -> None:
        """Close the channel and the pool; the queues checked are forgotten."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._checks.close()  # those not started yet end at once
        self._checks = CheckCalls(CHECKS_IN_FLIGHT, f"sink '{self._sink}'")
        if self._channel is not None:
            self._channel.close()  # cancels first attempts still in flight
        self._pool = None
        self._channel = None
        self._stub = None
        self._verified.clear()


def _found() -> None:
    """The first attempt succeeded: nothing more to do (the check has remembered the queue)."""


def _settle(check: PendingCheck) -> None:
    """Run a check to its end on a pool thread; the outcome is kept for the writer's flush."""
    try:
        check.wait()
    except BaseException:  # noqa: BLE001 - kept by the check, raised to the writer
        pass
