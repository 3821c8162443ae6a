"""Failure handling for record-shaped failures: fail the job, log and drop, or dead-letter.

Only failures that are the record's fault reach a :class:`FailureHandler`: a record the resolver
could not route (:class:`~pyflink_gcp.core.types.UnroutableRecord`), a row the service rejects for
its content, a payload over the service's size limit. Transport and permission errors are retried
by the :mod:`~pyflink_gcp.core.retry` policy and then fail the job; they never reach a handler.
"""

from __future__ import annotations

import enum
import logging
import os
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyflink_gcp.core.errors import RecordRejectedError, RecordSchemaError

if TYPE_CHECKING:
    from pyflink_gcp.core.runtime_info import SubtaskInfo

_LOG = logging.getLogger("pyflink_gcp.failures")

#: The ``destination`` of a failed record that never had one (an unroutable record).
UNRESOLVED = "unresolved"

#: Set to 0 in the workers' environment to keep the sink's warnings off the console.
CONSOLE_LOG_VARIABLE = "PYFLINK_GCP_CONSOLE_LOG"


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
        fatal: Non-empty when the sink's configuration says this failure ends the job whatever
            the failure handler (a row key that is no column under BigQuery's
            ``UnknownFields.FAIL``): why, and what to set instead.
    """

    sink: str
    destination: str
    reason: str
    payload: bytes
    attributes: dict[str, str] = field(default_factory=dict)
    record_repr: str = ""
    fatal: str = ""

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
    STREAM = "to_stream"


#: What a ``fail_job`` error tells the user after naming the record (:meth:`FailureHandler.fail_job`).
FAIL_JOB_REMEDY = (
    "(failure handler: fail_job). A restart replays this record: fix its cause, or let the job "
    "go on past such records with FailureHandler.log_and_drop() or send_to_dead_letter_queue(...)"
)


class FailureHandler:
    """Decides what happens to a record-shaped failure.

    Build one with :meth:`fail_job` (the default of every sink), :meth:`log_and_drop`,
    :meth:`send_to_dead_letter_queue` or :meth:`to_stream`. The handler is configuration; each sink subtask opens its
    own dead-letter queue from it.
    """

    __slots__ = ("_mode", "_dlq", "_remedy")

    def __init__(
        self, mode: _Mode, dlq: DeadLetterQueue | None = None, remedy: str = FAIL_JOB_REMEDY
    ) -> None:
        self._mode = mode
        self._dlq = dlq
        self._remedy = remedy

    @staticmethod
    def fail_job(*, remedy: str = FAIL_JOB_REMEDY) -> FailureHandler:
        """Fail the job on the first rejected record (the default).

        Args:
            remedy: What the error says after naming the record: which handler failed the job
                and how to let it go on past such records, in the terms the user configured it
                with (the SQL connectors name their ``'failure-handler'`` option, not this API).
        """
        return FailureHandler(_Mode.FAIL, remedy=remedy)

    @staticmethod
    def log_and_drop() -> FailureHandler:
        """Log the rejected record (the first few per flush, then a summary) and count it."""
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

    @staticmethod
    def to_stream() -> FailureHandler:
        """Hand the rejected record to the job as a :class:`FailedRecord` in the stream
        ``sink.write_with_results(ds).failed()`` returns, instead of a dead-letter topic.

        Each writer subtask emits its failed records at the next checkpoint's marker (or with
        the next record after a flush found them), so they are held in memory until then; a
        failover replays them like the records they came from. Only ``write_with_results``
        can use this handler: ``ds.sink_to(sink)`` has no stream to hand them to and refuses it.
        """
        return FailureHandler(_Mode.STREAM)

    @property
    def streams_failures(self) -> bool:
        """Whether failed records go to the failed-records stream (:meth:`to_stream`)."""
        return self._mode is _Mode.STREAM

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

    Logging is bounded: the first :attr:`LOG_FIRST` failures between two flushes are logged one
    line each (a WARNING on ``pyflink_gcp.failures``), the rest are only counted and summed up
    in one line per flush, by destination, so a destination rejecting everything costs a few
    lines per checkpoint rather than one per record. Counts are kept for the sink's metrics.

    Runs on the processing thread only (writers hand their failures over at flush time).
    """

    #: Failures logged one line each between two flushes; the rest go into the flush summary.
    LOG_FIRST = 10

    def __init__(self, handler: FailureHandler) -> None:
        self._handler = handler
        self._dlq = handler.dead_letter_queue
        self.dropped = 0
        self.dead_lettered = 0
        #: Failed records handed to the failed-records stream, and those not emitted yet.
        self.streamed = 0
        self.pending: list[FailedRecord] = []
        self._logged = 0
        self._unlogged: Counter[str] = Counter()
        self._sink = ""

    def open(self, info: SubtaskInfo) -> None:
        self._sink = info.sink_name
        install_console_handler()
        if self._dlq is not None:
            self._dlq.open(info)

    def handle(self, failed: FailedRecord) -> None:
        if failed.fatal:
            raise RecordSchemaError(f"{failed.describe()}. {failed.fatal}")
        mode = self._handler._mode
        if mode is _Mode.FAIL:
            raise RecordRejectedError(f"{failed.describe()} {self._handler._remedy}")
        if mode is _Mode.DROP:
            self.dropped += 1
        elif mode is _Mode.STREAM:
            self.pending.append(failed)
            self.streamed += 1
        else:
            assert self._dlq is not None
            self._dlq.send(failed)
            self.dead_lettered += 1
        self._log(failed)

    def flush(self) -> None:
        """Makes dead letters durable, then logs the summary of the failures not yet logged."""
        if self._dlq is not None:
            self._dlq.flush()
        self._summarize()

    def close(self) -> None:
        self._summarize()
        if self._dlq is not None:
            self._dlq.close()

    def take_pending(self) -> list[FailedRecord]:
        """The failed records for the failed-records stream since the last call."""
        pending, self.pending = self.pending, []
        return pending

    @property
    def _verb(self) -> str:
        mode = self._handler._mode
        if mode is _Mode.STREAM:
            return "sent to the failed-records stream"
        return "dropped" if mode is _Mode.DROP else "dead-lettered"

    @property
    def _handled(self) -> int:
        mode = self._handler._mode
        if mode is _Mode.STREAM:
            return self.streamed
        return self.dropped if mode is _Mode.DROP else self.dead_lettered

    def _log(self, failed: FailedRecord) -> None:
        self._sink = failed.sink
        if self._logged < self.LOG_FIRST:
            self._logged += 1
            _LOG.warning("%s: %s", self._verb, failed.describe())
        else:
            self._unlogged[failed.destination] += 1

    def _summarize(self) -> None:
        self._logged = 0
        if not self._unlogged:
            return
        total = sum(self._unlogged.values())
        by_destination = ", ".join(f"{d}: {n}" for d, n in self._unlogged.most_common(10))
        more = len(self._unlogged) - 10
        if more > 0:
            by_destination += f", and {more} more destinations"
        _LOG.warning(
            "sink '%s': %s %d more records since the last flush, not logged one by one "
            "(by destination: %s); %d %s in all by this subtask",
            self._sink,
            self._verb,
            total,
            by_destination,
            self._handled,
            self._verb,
        )
        self._unlogged.clear()


class _ConsoleHandler(logging.Handler):
    """Writes records to file descriptor 2, bypassing ``sys.stderr``.

    PyFlink's workers log through the Beam harness to the TaskManager's log (the ``PythonWorker``
    logger), and a worker started by PyFlink replaces ``sys.stderr.write`` with that same
    logging. On a local MiniCluster the workers are threads of the client process, whose log
    is a file inside the PyFlink installation: writing to the descriptor itself puts the sink's
    warnings on the console that started the job.
    """

    def emit(self, record: logging.LogRecord) -> None:
        try:
            os.write(2, (self.format(record) + "\n").encode("utf-8", "replace"))
        except OSError:
            self.handleError(record)


def install_console_handler() -> None:
    """Adds the console handler (WARNING and above) to the ``pyflink_gcp`` logger, once per process.

    Set ``PYFLINK_GCP_CONSOLE_LOG=0`` in the workers' environment to leave it out (the records
    still reach the TaskManager's log).
    """
    if os.environ.get(CONSOLE_LOG_VARIABLE, "1").strip().lower() in ("0", "false", "no", "off"):
        return
    logger = logging.getLogger("pyflink_gcp")
    if any(isinstance(h, _ConsoleHandler) for h in logger.handlers):
        return
    handler = _ConsoleHandler(logging.WARNING)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
