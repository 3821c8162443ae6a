"""Failure handling for record-shaped failures: fail the job, log and drop, or dead-letter.

Only failures that are the record's fault reach a :class:`FailureHandler`: a record the resolver
could not route (:class:`~pyflink_gcp.core.types.UnroutableRecord`), a row the service rejects for
its content, a payload over the service's size limit. Transport and permission errors are retried
by the :mod:`~pyflink_gcp.core.retry` policy and then fail the job; they never reach a handler.
"""

from __future__ import annotations

import enum
import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyflink_gcp.core.errors import RecordRejectedError

if TYPE_CHECKING:
    from pyflink_gcp.core.runtime_info import SubtaskInfo

_LOG = logging.getLogger("pyflink_gcp.failures")

#: The ``destination`` of a failed record that never had one (an unroutable record).
UNRESOLVED = "unresolved"


@dataclass(slots=True)
class FailedRecord:
    """One record that a sink could not write for a reason of its own.

    Attributes:
        sink: The sink's name, for messages and dead-letter attributes.
        destination: The resource name it was headed to, or ``"unresolved"``.
        reason: A short reason (the service's error message or the resolver's reason).
        payload: The bytes a dead-letter queue publishes (the serialized record).
        attributes: Extra string attributes for the dead-letter message (e.g. an ordering key).
        record_repr: A short repr of the input record, for logs and errors.
    """

    sink: str
    destination: str
    reason: str
    payload: bytes
    attributes: dict[str, str] = field(default_factory=dict)
    record_repr: str = ""

    def describe(self) -> str:
        what = f" record {self.record_repr}" if self.record_repr else ""
        return f"sink '{self.sink}': destination '{self.destination}' rejected{what}: {self.reason}"


class DeadLetterQueue(ABC):
    """Where dead-lettered records go. Implemented by a service (Pub/Sub), opened per subtask.

    Implementations must be picklable before :meth:`open` and must make :meth:`flush` block until
    every record sent so far is durable, so a checkpoint never completes with a dead letter lost.
    """

    @abstractmethod
    def open(self, info: SubtaskInfo) -> None: ...

    @abstractmethod
    def send(self, failed: FailedRecord) -> None: ...

    @abstractmethod
    def flush(self) -> None: ...

    @abstractmethod
    def close(self) -> None: ...

    def describe(self) -> str:
        return type(self).__name__


class _Mode(enum.Enum):
    FAIL = "fail_job"
    DROP = "log_and_drop"
    DLQ = "dead_letter_queue"


class FailureHandler:
    """Decides what happens to a record-shaped failure.

    Build one with :meth:`fail_job` (the default of every sink), :meth:`log_and_drop` or
    :meth:`send_to_dead_letter_queue`. The handler is configuration; each sink subtask opens its
    own dead-letter queue from it.
    """

    __slots__ = ("_mode", "_dlq")

    def __init__(self, mode: _Mode, dlq: DeadLetterQueue | None = None) -> None:
        self._mode = mode
        self._dlq = dlq

    @staticmethod
    def fail_job() -> FailureHandler:
        """Fail the job on the first rejected record (the default)."""
        return FailureHandler(_Mode.FAIL)

    @staticmethod
    def log_and_drop() -> FailureHandler:
        """Log the rejected record (rate limited) and count it in the sink's metrics."""
        return FailureHandler(_Mode.DROP)

    @staticmethod
    def send_to_dead_letter_queue(dlq: DeadLetterQueue) -> FailureHandler:
        """Publish the rejected record with attributes saying why and where it was headed."""
        if not isinstance(dlq, DeadLetterQueue):
            raise TypeError(
                "send_to_dead_letter_queue() takes a dead-letter queue such as "
                f"PubSubDeadLetterQueue.of(...), got {type(dlq).__name__}"
            )
        return FailureHandler(_Mode.DLQ, dlq)

    @property
    def mode(self) -> str:
        return self._mode.value

    @property
    def dead_letter_queue(self) -> DeadLetterQueue | None:
        return self._dlq

    def __repr__(self) -> str:
        if self._dlq is not None:
            return f"FailureHandler.send_to_dead_letter_queue({self._dlq.describe()})"
        return f"FailureHandler.{self._mode.value}()"


class FailureRouter:
    """A subtask's live side of a :class:`FailureHandler`: counts, logs and routes failures.

    Runs on the processing thread only (writers hand their failures over at flush time).
    """

    _LOG_INTERVAL_S = 10.0

    def __init__(self, handler: FailureHandler) -> None:
        self._handler = handler
        self._dlq = handler.dead_letter_queue
        self.dropped = 0
        self.dead_lettered = 0
        self._last_log = 0.0
        self._suppressed = 0

    def open(self, info: SubtaskInfo) -> None:
        if self._dlq is not None:
            self._dlq.open(info)

    def handle(self, failed: FailedRecord) -> None:
        mode = self._handler._mode
        if mode is _Mode.FAIL:
            raise RecordRejectedError(failed.describe() + " (failure handler: fail_job)")
        if mode is _Mode.DROP:
            self.dropped += 1
            self._log(failed, "dropped")
            return
        assert self._dlq is not None
        self._dlq.send(failed)
        self.dead_lettered += 1
        self._log(failed, "dead-lettered")

    def flush(self) -> None:
        if self._dlq is not None:
            self._dlq.flush()

    def close(self) -> None:
        if self._dlq is not None:
            self._dlq.close()

    def _log(self, failed: FailedRecord, verb: str) -> None:
        now = time.monotonic()
        if now - self._last_log >= self._LOG_INTERVAL_S:
            extra = f" ({self._suppressed} more since the last message)" if self._suppressed else ""
            _LOG.warning("%s: %s%s", verb, failed.describe(), extra)
            self._last_log = now
            self._suppressed = 0
        else:
            self._suppressed += 1
