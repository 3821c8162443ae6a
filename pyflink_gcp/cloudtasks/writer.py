"""The hot path of the Cloud Tasks sink: one ``CreateTask`` call per record, many in flight.

Cloud Tasks has no batch API, so throughput comes from overlapping calls. Per record (on the
Flink processing thread) the writer completes the serialized ``Task`` (name, checks), encodes
it once, prefixes the queue's pre-encoded ``parent`` field to make the ``CreateTaskRequest``
bytes, and hands them to the subtask's ``grpc.aio`` channel (:mod:`pyflink_gcp.cloudtasks.client`
says why that transport), shared by every queue. At most ``max_in_flight_requests`` calls are
outstanding per subtask (:class:`CreateTaskCalls`, an
:class:`~pyflink_gcp.core.batching.InFlightWindow` whose slots each call's completion frees):
when the window is full, ``write`` waits for a slot (backpressure); fewer after quota errors
(RESOURCE_EXHAUSTED), which halve the window until calls succeed again
(:class:`~pyflink_gcp.core.quota.QuotaWindow`). Before each checkpoint
barrier and at the end of input the sink calls :meth:`QueueWriter.flush` on every queue with
calls in flight, which waits for each, retries transient failures with backoff, and hands
rejected tasks to the failure handler. A new
queue's check (:mod:`pyflink_gcp.cloudtasks.queues`) runs meanwhile, off the processing thread;
the flush settles it first.

A task is one request, so a request rejected for its content names its record: nothing is
split to find it (no :func:`~pyflink_gcp.core.isolation.isolate_rejected` here).
"""

from __future__ import annotations

import logging
import re
from typing import Any, ClassVar

from google.cloud import tasks_v2

from pyflink_gcp.cloudtasks.client import (
    DEFAULT_HOST,
    StartCall,
    client_header,
    create_task_caller,
    open_async_channels,
    queue_metadata,
    request_head,
    resolve_cloudtasks_endpoint,
    varint,
)
from pyflink_gcp.cloudtasks.destinations import QueueDestination
from pyflink_gcp.cloudtasks.options import CloudTasksWriterOptions
from pyflink_gcp.cloudtasks.queues import QueueCheck
from pyflink_gcp.cloudtasks.serialization import TaskPb
from pyflink_gcp.core.batching import InFlightWindow
from pyflink_gcp.core.checked import PendingCheck
from pyflink_gcp.core.endpoints import Endpoint
from pyflink_gcp.core.errors import DestinationNotFoundError, SerializerError, WriteError
from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.functions import short_repr
from pyflink_gcp.core.quota import QuotaWindow
from pyflink_gcp.core.retry import RetryPolicy, status_name
from pyflink_gcp.core.runtime_info import SubtaskInfo
from pyflink_gcp.core.status import error_text, is_record_fault
from pyflink_gcp.core.writer import DestinationWriter, PicklesConfiguration, WriterFactory

_LOG = logging.getLogger("pyflink_gcp.cloudtasks")

_TASK_ID = re.compile(r"[A-Za-z0-9_-]{1,500}")
_URL_SCHEMES = ("http://", "https://")
# Pending calls of a queue are pruned of the successful ones once there are this many times
# the in-flight window, so memory stays bounded between two flushes.
_COMPACT_FACTOR = 4
#: Statuses of ``CreateTask`` that blame the task: INVALID_ARGUMENT only. The others of the
#: core's record-fault set describe the queue or the project (FAILED_PRECONDITION: a target
#: the project cannot dispatch to), which no other record would fix, so they fail the job.
TASK_FAULT_CODES = frozenset({"INVALID_ARGUMENT"})

# A pending call: (future, encoded request, task, input record).
_Call = tuple[Any, bytes, Any, Any]


class CloudTasksWriterFactory(PicklesConfiguration, WriterFactory[QueueDestination]):
    """Owns what every queue of a subtask shares: channels, the in-flight window, the queue check.

    Pickles as its configuration (sink name, options, endpoint, retry policy); :meth:`open`
    creates the rest on the worker: the channels and the :class:`CreateTaskCalls` every queue
    writer is handed.
    """

    accepts_unroutable = True
    destination_type = QueueDestination
    _config_fields: ClassVar[tuple[str, ...]] = ("sink_name", "options", "endpoint", "retry")

    def __init__(
        self,
        sink_name: str,
        options: CloudTasksWriterOptions,
        endpoint: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.sink_name = sink_name
        self.options = options
        self.endpoint = endpoint
        self.retry = retry or RetryPolicy(deadline_s=options.retry_deadline_s)
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._channels: list[Any] = []
        self._start_call: StartCall | None = None
        #: The subtask's calls (window, counters); made by :meth:`open`.
        self.calls: CreateTaskCalls | None = None
        self.queue_check: QueueCheck | None = None
        self.endpoint_name = f"{DEFAULT_HOST}:443"
        # One attempt never outlasts the retry deadline (a silent endpoint fails each attempt
        # only at its timeout).
        self._timeout = self.retry.attempt_timeout(self.options.rpc_timeout.total_seconds())
        self._max_in_flight = self.options.max_in_flight_requests
        #: The window's size now: ``max_in_flight_requests``, less after quota errors.
        self.quota = QuotaWindow(self._max_in_flight, f"sink '{self.sink_name}': CreateTask calls")

    # -- counters (the calls'; read by tests and the log) -------------------------------------

    @property
    def created(self) -> int:
        """Tasks the service accepted."""
        return 0 if self.calls is None else self.calls.created

    @property
    def already_existed(self) -> int:
        """Named tasks the service already had (replays), counted as written."""
        return 0 if self.calls is None else self.calls.already_existed

    @property
    def retried(self) -> int:
        """Calls retried after a transient error."""
        return 0 if self.calls is None else self.calls.retried

    @property
    def rejected(self) -> int:
        """Tasks handed to the failure handler."""
        return 0 if self.calls is None else self.calls.rejected

    # -- lifecycle ---------------------------------------------------------------------------

    def open(self, info: SubtaskInfo) -> None:
        self._init_runtime()
        options = self.options
        endpoint = resolve_cloudtasks_endpoint(self.endpoint)
        self.endpoint_name = endpoint.host or f"{DEFAULT_HOST}:443"
        self._channels = self._open_channels(endpoint)
        self._start_call = create_task_caller(self._channels)
        self.calls = CreateTaskCalls(
            sink_name=self.sink_name,
            start_call=self._start_call,
            timeout_s=self._timeout,
            header=client_header(),
            retry=self.retry,
            quota=self.quota,
            endpoint_name=self.endpoint_name,
        )
        if options.verify_queues:
            self.queue_check = QueueCheck(self.sink_name, endpoint, self.retry, self._timeout)
        _LOG.info(
            "%s: subtask %d sends to %s over %d channel(s), %d calls in flight",
            self.sink_name,
            info.subtask_index,
            endpoint.host or DEFAULT_HOST,
            len(self._channels),
            options.max_in_flight_requests,
        )

    def _open_channels(self, endpoint: Endpoint) -> list[Any]:
        return list(open_async_channels(endpoint, self.options.channel_count))

    def create_writer(self, destination: QueueDestination) -> QueueWriter:
        # The check starts here without waiting; the writer settles it by its flush.
        check = self.queue_check.start(destination) if self.queue_check is not None else None
        if self.calls is None:
            raise WriteError(f"sink '{self.sink_name}': the Cloud Tasks writer is not open")
        return QueueWriter(destination, self.calls, self.options, check)

    def close(self) -> None:
        _LOG.info(
            "%s: closing (tasks created %d, already existed %d, retried %d, rejected %d)",
            self.sink_name,
            self.created,
            self.already_existed,
            self.retried,
            self.rejected,
        )
        for channel in self._channels:
            channel.close()  # cancels calls still in flight; they are replayed after a restart
        self._channels = []
        if self.queue_check is not None:
            self.queue_check.close()
        self.queue_check = None
        self._start_call = None


class CreateTaskCalls:
    """The ``CreateTask`` calls of one subtask, shared by its queue writers: the window of
    calls in flight, the retry policy and the counters.

    Each call's completion (on gRPC's thread) frees its slot in the window and tells the quota
    window how it ended: quota errors shrink it, successes let it grow back. The outcomes
    themselves are read by the queue's writer at its flush.

    Args:
        sink_name: For errors and the window's name.
        start_call: Starts one raw call (:func:`~pyflink_gcp.cloudtasks.client.create_task_caller`).
        timeout_s: The timeout of one attempt.
        header: The client's identity header (:func:`~pyflink_gcp.cloudtasks.client.client_header`).
        retry: The sink's retry policy.
        quota: The subtask's quota window (its maximum is ``max_in_flight_requests``).
        endpoint_name: The endpoint, named by errors.

    Attributes:
        created: Tasks the service accepted.
        already_existed: Named tasks the service already had (replays), counted as written.
        retried: Calls retried after a transient error.
        rejected: Tasks handed to the failure handler.
    """

    def __init__(
        self,
        *,
        sink_name: str,
        start_call: StartCall,
        timeout_s: float,
        header: tuple[str, str],
        retry: RetryPolicy,
        quota: QuotaWindow,
        endpoint_name: str,
    ) -> None:
        self.sink_name = sink_name
        self.retry = retry
        self.quota = quota
        self.endpoint_name = endpoint_name
        self._start_call = start_call
        self._timeout = timeout_s
        self._header = header
        self.window: InFlightWindow[Any] = InFlightWindow(
            quota.maximum,
            what=f"sink '{sink_name}': CreateTask calls",
            quota=quota,
            collect=False,
            on_done=self._done,
            stall_s=retry.stall_bound(timeout_s),
        )
        self.created = 0
        self.already_existed = 0
        self.retried = 0
        self.rejected = 0

    def start(self, request: bytes, metadata: tuple[tuple[str, str], ...]) -> Any:
        """Start one ``CreateTask`` call; first wait for a slot if the window is full."""
        window = self.window
        window.admit()
        return window.add(self._start_call(request, timeout=self._timeout, metadata=metadata))

    def _done(self, error: BaseException | None) -> None:
        if error is None:
            self.quota.on_success()
        elif self.retry.is_quota(error):
            self.quota.on_quota_error(self.window.outstanding + 1)

    def metadata_for(self, queue: str) -> tuple[tuple[str, str], ...]:
        """Request metadata of a queue's calls: the routing header and the client's identity."""
        return queue_metadata(queue, self._header)


class QueueWriter(DestinationWriter[QueueDestination]):
    """The calls of one queue. Holds no client: only the calls in flight since the last flush.

    Args:
        destination: The queue.
        calls: What the subtask's queues share: the window, the retry policy, the counters.
        options: The task size limit and the window's size.
        check: The queue's check, still running (None: the queue is known, or not checked):
            settled by :meth:`flush` before the calls' outcomes are read, so a missing queue
            fails with the check's error naming it and the command that creates it.
    """

    def __init__(
        self,
        destination: QueueDestination,
        calls: CreateTaskCalls,
        options: CloudTasksWriterOptions,
        check: PendingCheck | None = None,
    ) -> None:
        super().__init__(destination)
        self._calls = calls
        self._check = check
        self._start = calls.start
        self._sink = calls.sink_name
        self._parent = destination.resource_name
        self._task_prefix = self._parent + "/tasks/"
        # The queue's encoded ``parent`` field: each request is it and the task's bytes.
        self._request_head = request_head(self._parent)
        self._metadata = calls.metadata_for(self._parent)
        self._max_size = options.max_task_size_bytes
        self._compact_base = _COMPACT_FACTOR * options.max_in_flight_requests
        self._compact_at = self._compact_base
        self._pending: list[_Call] = []
        self._rejected: list[FailedRecord] = []

    # -- per record ----------------------------------------------------------------------------

    def write(self, element: Any, record: Any) -> None:
        task = element if type(element) is TaskPb else self._coerce(element, record)
        name = task.name
        if name and not name.startswith(self._task_prefix):
            if _TASK_ID.fullmatch(name) is None:
                self._check_foreign_name(name, record)
                self._reject(
                    task,
                    record,
                    f"invalid task id {name[:80]!r}: 1-500 letters, digits, '-' or '_'",
                )
                return
            task.name = self._task_prefix + name
        if task.HasField("http_request") and not task.http_request.url.startswith(_URL_SCHEMES):
            self._reject(
                task, record, f"invalid URL {task.http_request.url[:200]!r}: not http(s)://"
            )
            return
        encoded = task.SerializeToString()
        size = len(encoded)
        if size > self._max_size:
            self._reject(
                task, record, f"task of {size} bytes exceeds the {self._max_size}-byte limit"
            )
            return
        self.bytes_accepted += size
        request = self._request_head + varint(size) + encoded
        pending = self._pending
        pending.append((self._start(request, self._metadata), request, task, record))
        if len(pending) >= self._compact_at:
            self._compact()

    def _coerce(self, element: Any, record: Any) -> Any:
        """Slow path of the element check: proto-plus tasks, and wrong types."""
        if isinstance(element, tasks_v2.Task):
            return tasks_v2.Task.pb(element)
        if isinstance(element, TaskPb):
            return element
        raise SerializerError(
            f"sink '{self._sink}': the serializer returned {type(element).__name__} for queue "
            f"{self._parent} and record {short_repr(record)}; expected a tasks_v2.Task (use "
            "CloudTasksSerializationSchema, or return a Task from a custom serializer)"
        )

    def _check_foreign_name(self, name: str, record: Any) -> None:
        """A full task name of another queue is a bug in the serializer, not bad data."""
        if name.startswith("projects/"):
            raise SerializerError(
                f"sink '{self._sink}': task name {name!r} does not belong to queue "
                f"{self._parent} (record {short_repr(record)}); return the bare task id "
                "and let the sink complete the name"
            )

    def _reject(self, task: Any, record: Any, reason: str) -> None:
        self._rejected.append(self._failed(task, record, reason))

    def _failed(self, task: Any, record: Any, reason: str) -> FailedRecord:
        attributes = {"queue": self._parent}
        if task.name:
            attributes["task"] = task.name.removeprefix(self._task_prefix)
        if task.HasField("http_request"):
            attributes["url"] = task.http_request.url
            payload = task.http_request.body
        else:
            payload = task.SerializeToString()
        return FailedRecord(
            sink=self._sink,
            destination=self._parent,
            reason=reason,
            payload=payload,
            attributes=attributes,
            record_repr=short_repr(record),
        )

    def _compact(self) -> None:
        """Forget calls that already succeeded (bounded memory between flushes); fail now if
        the queue's check has failed (the calls of a missing queue all fail, and would be
        kept until the checkpoint)."""
        check = self._check
        if check is not None and check.failed():
            check.wait()  # raises the check's error
        before = len(self._pending)
        self._pending = [
            call for call in self._pending if not call[0].done() or call[0].exception() is not None
        ]
        self._calls.created += before - len(self._pending)
        self._compact_at = max(self._compact_base, 2 * len(self._pending))

    # -- flush ---------------------------------------------------------------------------------

    def flush(self) -> list[FailedRecord]:
        """Wait for every call of this queue; retry transient failures until the deadline.

        ALREADY_EXISTS is success: the task name came from ``with_task_id`` and the task was
        created before (a replay after a restart, or a retried call that had succeeded).

        Raises:
            DestinationNotFoundError: The queue's check found it missing.
            WriteError: The check found it DISABLED or failed otherwise; a task failed with a
                status that is not the task's fault, or kept failing transiently.
        """
        check = self._check
        if check is not None:
            check.wait()  # at most the retry deadline and two attempts
            self._check = None
        calls = self._calls
        failures, self._rejected = self._rejected, []
        pending, self._pending = self._pending, []
        self._compact_at = self._compact_base
        backoff = None
        while pending:
            retry: list[_Call] = []
            last_error: BaseException | None = None
            quota_errors = 0
            for call in pending:
                error = call[0].exception()
                if error is None:
                    calls.created += 1
                    continue
                if status_name(error) == "ALREADY_EXISTS":
                    calls.already_existed += 1
                elif calls.retry.is_transient(error):
                    retry.append(call)
                    last_error = error
                    quota_errors += calls.retry.is_quota(error)
                else:
                    failures.append(self._classify(call, error))
            if not retry:
                break
            if quota_errors:
                # Once per round, from the calls it made: a window that never filled (its
                # calls are only read here) shrinks too, and the retries go out fewer at once.
                calls.quota.on_quota_error(len(pending))
            if backoff is None:
                backoff = calls.retry.backoffs()
            assert last_error is not None
            backoff.wait_or_raise(
                last_error,
                f"sink '{self._sink}': creating {len(retry)} tasks in {self._parent} at "
                f"{calls.endpoint_name}",
            )
            calls.retried += len(retry)
            pending = [(self._start(c[1], self._metadata), c[1], c[2], c[3]) for c in retry]
        calls.rejected += len(failures)
        return failures

    def _classify(self, call: _Call, error: BaseException) -> FailedRecord:
        """A failed task's fate: the failure handler if the task's content was refused, else fail."""
        if is_record_fault(error, TASK_FAULT_CODES):
            return self._failed(call[2], call[3], error_text(error))
        if status_name(error) == "NOT_FOUND":
            raise DestinationNotFoundError(
                f"sink '{self._sink}': Cloud Tasks queue '{self._parent}' does not exist "
                f"(CreateTask answered {error_text(error)}); the sink never creates queues"
            )
        raise WriteError(
            f"sink '{self._sink}': CreateTask in {self._parent} at {self._calls.endpoint_name} "
            f"failed with {error_text(error)} (record {short_repr(call[3])})"
        )

    @property
    def is_clean(self) -> bool:
        return not self._pending and not self._rejected

    def close(self) -> None:
        self._pending = []
        self._rejected = []
        self._check = None
