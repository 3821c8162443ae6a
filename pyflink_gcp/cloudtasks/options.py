"""Options of the Cloud Tasks sink: concurrency, retries, and the task size limit."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta

#: The documented maximum size of a task (``CreateTask``: "The maximum task size is 100KB").
MAX_TASK_SIZE_BYTES = 100 * 1024
#: Longest task id the service accepts (the last segment of the task name).
MAX_TASK_ID_LENGTH = 500
#: Concurrent streams a Google front end allows on one HTTP/2 connection.
STREAMS_PER_CONNECTION = 100


@dataclass(frozen=True)
class CloudTasksWriterOptions:
    """How one sink subtask sends ``CreateTask`` calls.

    Cloud Tasks has no batch API, so throughput comes from many calls in flight at once. Each
    record's call starts as soon as it is serialized; ``write`` blocks when ``max_in_flight``
    calls are outstanding (backpressure), and every call is waited for before each checkpoint
    barrier and at the end of input.

    Attributes:
        max_in_flight: Outstanding ``CreateTask`` calls per subtask, over all queues. Measured
            against the local emulator on two cores, 256 calls on one channel reached the peak
            (about 3x a sequential client); more only adds latency.
        channel_count: gRPC channels (connections) the calls are spread over. One channel
            serves the emulator best (every extra channel cost Python CPU per call); against the
            service, where one HTTP/2 connection carries at most 100 concurrent streams, use
            ``ceil(max_in_flight / 100)``.
        retry_deadline: How long transient errors (UNAVAILABLE, DEADLINE_EXCEEDED,
            RESOURCE_EXHAUSTED, ...) of one task are retried before the job fails.
        rpc_timeout: Deadline of a single ``CreateTask`` attempt.
        max_task_size_bytes: Tasks whose serialized size (body, headers, URL, name) exceeds this
            go to the failure handler instead of being sent (the service rejects them).
        verify_queues: Check once per queue and subtask, with ``GetQueue``, that the queue exists
            before its first task, to fail with a clear error naming it. Needs the
            ``cloudtasks.queues.get`` permission (a caller with only ``cloudtasks.tasks.create``
            gets a warning and the check is skipped; a missing queue then still fails the job on
            its first ``CreateTask``).
        idle_timeout: A queue unused this long is forgotten at the end of a successful flush
            (its writer holds no client state; this only bounds bookkeeping).
    """

    max_in_flight: int = 256
    channel_count: int = 1
    retry_deadline: timedelta = timedelta(minutes=2)
    rpc_timeout: timedelta = timedelta(seconds=30)
    max_task_size_bytes: int = MAX_TASK_SIZE_BYTES
    verify_queues: bool = True
    idle_timeout: timedelta = timedelta(minutes=15)

    def __post_init__(self) -> None:
        if self.max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        if self.channel_count < 1:
            raise ValueError("channel_count must be >= 1")
        if self.retry_deadline < timedelta(0):
            raise ValueError("retry_deadline must be >= 0")
        if self.rpc_timeout <= timedelta(0):
            raise ValueError("rpc_timeout must be positive")
        if self.max_task_size_bytes < 1:
            raise ValueError("max_task_size_bytes must be >= 1")
        if self.idle_timeout <= timedelta(0):
            raise ValueError("idle_timeout must be positive")

    @staticmethod
    def builder() -> CloudTasksWriterOptionsBuilder:
        return CloudTasksWriterOptionsBuilder()


class CloudTasksWriterOptionsBuilder:
    """Fluent builder of :class:`CloudTasksWriterOptions`."""

    def __init__(self) -> None:
        self._o = CloudTasksWriterOptions()

    def max_in_flight(self, n: int) -> CloudTasksWriterOptionsBuilder:
        self._o = replace(self._o, max_in_flight=n)
        return self

    def channel_count(self, n: int) -> CloudTasksWriterOptionsBuilder:
        self._o = replace(self._o, channel_count=n)
        return self

    def retry_deadline(self, deadline: timedelta) -> CloudTasksWriterOptionsBuilder:
        self._o = replace(self._o, retry_deadline=deadline)
        return self

    def rpc_timeout(self, timeout: timedelta) -> CloudTasksWriterOptionsBuilder:
        self._o = replace(self._o, rpc_timeout=timeout)
        return self

    def max_task_size_bytes(self, n: int) -> CloudTasksWriterOptionsBuilder:
        self._o = replace(self._o, max_task_size_bytes=n)
        return self

    def verify_queues(self, enabled: bool = True) -> CloudTasksWriterOptionsBuilder:
        self._o = replace(self._o, verify_queues=enabled)
        return self

    def idle_timeout(self, timeout: timedelta) -> CloudTasksWriterOptionsBuilder:
        self._o = replace(self._o, idle_timeout=timeout)
        return self

    def build(self) -> CloudTasksWriterOptions:
        return self._o
