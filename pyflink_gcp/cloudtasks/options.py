"""Options of the Cloud Tasks sink: the shared writer settings, concurrency and the task limits.

Cloud Tasks has no batch API, so the settings that shape batches elsewhere shape only the
writer operator here: ``max_buffered_records`` and ``max_buffer_time`` are its bundle size and
time. Every task's call starts as soon as its record is serialized, so a bundle end has nothing
to send; without checkpoint markers it waits for the calls in flight. Throughput comes from
calls in flight: ``max_in_flight_requests`` ``CreateTask`` calls per subtask, over all its
queues.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Self

from pyflink_gcp.core.options import (
    DestinationOptionsBuilder,
    DestinationWriterOptions,
    check_bool,
    check_duration,
    check_int,
)

#: The documented maximum size of a task (``CreateTask``: "The maximum task size is 100KB").
MAX_TASK_SIZE_BYTES = 100 * 1024
#: Longest task id the service accepts (the last segment of the task name).
MAX_TASK_ID_LENGTH = 500
#: Concurrent streams a Google front end allows on one HTTP/2 connection.
STREAMS_PER_CONNECTION = 100


@dataclass(frozen=True, kw_only=True)
class CloudTasksWriterOptions(DestinationWriterOptions):
    """How one sink subtask sends ``CreateTask`` calls.

    Each record's call starts as soon as it is serialized; ``write`` blocks when
    ``max_in_flight_requests`` calls are outstanding (backpressure), and every call is waited
    for before each checkpoint barrier and at the end of input. Build it with
    :meth:`builder`; the shared settings (``max_buffer_time``, ``retry_deadline``,
    ``per_destination_metrics``, ``idle_timeout``, ``max_active_destinations``) are those of
    :class:`~pyflink_gcp.core.options.DestinationWriterOptions`.

    Attributes:
        max_buffered_records: Records per subtask between two bundle ends of the writer
            operator (default 10,000).
        max_in_flight_requests: Outstanding ``CreateTask`` calls per subtask, over all queues.
            The default (256) is where more calls on one channel stopped raising the rate
            against the emulator; beyond it, more calls only add latency.
        channel_count: gRPC channels (connections) the calls are spread over. One channel
            serves the emulator best (every extra channel cost Python CPU per call); against the
            service, where one HTTP/2 connection carries at most 100 concurrent streams, use
            ``ceil(max_in_flight_requests / 100)``.
        rpc_timeout: Deadline of a single ``CreateTask`` attempt.
        max_task_size_bytes: Tasks whose serialized size (body, headers, URL, name) exceeds this
            go to the failure handler instead of being sent (the service rejects them).
        verify_queues: Check once per queue and subtask, with ``GetQueue``, that the queue exists,
            to fail with a clear error naming it; the check starts with the queue's writer and
            the queue's first flush waits for it, not the processing thread. Needs the
            ``cloudtasks.queues.get`` permission (a caller with only ``cloudtasks.tasks.create``
            gets a warning and the check is skipped; a missing queue then still fails the job on
            its first ``CreateTask``).

    A queue's writer holds no client state (one channel serves every queue), so
    ``idle_timeout`` and ``max_active_destinations`` only bound the bookkeeping of calls per
    queue.
    """

    max_buffered_records: int = 10_000
    max_in_flight_requests: int = 256
    channel_count: int = 1
    rpc_timeout: timedelta = timedelta(seconds=30)
    max_task_size_bytes: int = MAX_TASK_SIZE_BYTES
    verify_queues: bool = True

    def _validate(self) -> None:
        super()._validate()
        owner = type(self).__name__
        check_int(owner, "channel_count", self.channel_count)
        check_duration(owner, "rpc_timeout", self.rpc_timeout)
        check_int(owner, "max_task_size_bytes", self.max_task_size_bytes)
        check_bool(owner, "verify_queues", self.verify_queues)

    @staticmethod
    def builder() -> CloudTasksWriterOptionsBuilder:
        """A builder starting from the defaults."""
        return CloudTasksWriterOptionsBuilder()


class CloudTasksWriterOptionsBuilder(DestinationOptionsBuilder[CloudTasksWriterOptions]):
    """Builder of :class:`CloudTasksWriterOptions`; validates every setting at :meth:`build`."""

    options_type = CloudTasksWriterOptions

    def channel_count(self, channels: int) -> Self:
        """gRPC connections the calls are spread over (default 1)."""
        return self._set("channel_count", channels)

    def rpc_timeout(self, timeout: timedelta) -> Self:
        """Deadline of one ``CreateTask`` attempt (default 30 s)."""
        return self._set("rpc_timeout", timeout)

    def max_task_size_bytes(self, size: int) -> Self:
        """Larger tasks go to the failure handler without a call (default 102,400)."""
        return self._set("max_task_size_bytes", size)

    def verify_queues(self, enabled: bool = True) -> Self:
        """Check with ``GetQueue`` that each queue exists, by its first flush (default on)."""
        return self._set("verify_queues", enabled)
