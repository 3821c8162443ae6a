"""The publish path of the Pub/Sub sink: one transport per subtask, shared by its topics.

:class:`Publisher` owns the channel (:class:`~pyflink_gcp.pubsub.client.PubSubRpc`), the thread
pool of retries and ordered requests, and the subtask's window of requests in flight, so a
topic's writer (:class:`~pyflink_gcp.pubsub.writer.TopicPublisher`) hands it a cut batch and
gets back a future of the batch's rejected messages:

- An unordered request is started as a gRPC future whose done-callback records its outcome
  (:meth:`Publisher.start`): no Python thread blocks per request, and at most
  :data:`MAX_IN_FLIGHT_PER_SUBTASK` requests of a subtask are in flight (an
  :class:`~pyflink_gcp.core.batching.InFlightWindow`, lowered by quota errors). Only a request
  whose first attempt failed moves to the thread pool, where :func:`publish_batch` retries it
  and isolates rejected messages as the blocking path always did.
- An ordered request runs on the pool after the topic's previous one
  (:meth:`Publisher.start_after`), so one ordering key's messages are published in the order
  they were cut.

Quota errors (RESOURCE_EXHAUSTED) shrink the subtask's window of requests in flight, and each
topic's ``max_in_flight_requests`` with it (:class:`~pyflink_gcp.core.quota.QuotaWindow`),
until Publish succeeds again; the retry policy waits for the quota to refill.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import grpc
from google.api_core import exceptions as gexc

from pyflink_gcp.core.batching import InFlightWindow
from pyflink_gcp.core.errors import DestinationNotFoundError, WriteError
from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.isolation import isolate_rejected
from pyflink_gcp.core.quota import QuotaWindow
from pyflink_gcp.core.retry import RetryPolicy, status_name
from pyflink_gcp.core.status import error_text, is_record_fault
from pyflink_gcp.pubsub.client import PubSubRpc

#: Timeout of one Publish, GetTopic or CreateTopic attempt (capped by the retry deadline).
CALL_TIMEOUT_S = 60.0

#: The dead-letter attribute carrying a rejected message's ordering key.
ATTR_ORDERING_KEY = "dlq-ordering-key"
#: Publish requests of one subtask in flight at once (over all its unordered topics): the
#: processing thread waits for a slot beyond it, so memory stays bounded however many topics
#: there are. ``max_in_flight_requests`` still bounds each topic's own requests.
MAX_IN_FLIGHT_PER_SUBTASK = 256


def missing_topic(sink: str, topic: str) -> DestinationNotFoundError:
    """The error of a topic found missing under ``CREATE_NEVER``: its first Publish (or any
    later one) was answered ``NOT_FOUND``."""
    return DestinationNotFoundError(
        f"sink '{sink}': topic {topic} does not exist and the create disposition is CREATE_NEVER"
    )


def publish_batch(
    rpc: PubSubRpc,
    topic: str,
    messages: Sequence[Any],
    retry: RetryPolicy,
    sink: str,
    first_error: BaseException | None = None,
    create_never: bool = False,
) -> list[FailedRecord]:
    """Publish ``messages`` to ``topic``: retry transient errors, isolate rejected messages.

    A request rejected for its content (:data:`~pyflink_gcp.core.status.RECORD_FAULT_CODES`)
    is split in halves until the rejected messages are alone
    (:func:`~pyflink_gcp.core.isolation.isolate_rejected`); those come back as failed records,
    carrying their attributes and their ordering key as ``dlq-ordering-key``, and every other
    message is published, in order.

    ``first_error`` is the failure of a first attempt already made (a Publish started as a
    future): it is handled as this call's own first attempt would have been, so the request is
    not sent again before its backoff or its split.

    ``create_never``: the sink does not check its topics (``CREATE_NEVER``), so a
    ``NOT_FOUND`` on any attempt, a retry's or a half's included, is how it learns that the
    topic does not exist, and the error is :func:`missing_topic`'s.

    Raises:
        DestinationNotFoundError: The topic does not exist (deleted while the job ran, or,
            with ``create_never``, never created).
        WriteError: Transient errors outlasted the retry deadline, or a non-content error.
    """

    replay = [] if first_error is None else [first_error]

    def attempt(part: Sequence[Any]) -> Any:
        try:
            if replay:  # the whole request's first attempt, made before this call
                raise replay.pop()
            return rpc.publish(topic, part)
        except grpc.RpcError as exc:
            if not isinstance(exc, grpc.Call) or not retry.is_transient(exc):
                raise  # classified below, where error_text() words it
            # Retried, then logged and named by the deadline's error: in one line, as GetTopic's
            # (a raw gRPC error's str is a multi-line debug dump).
            raise gexc.from_grpc_error(exc) from exc

    def send(part: Sequence[Any]) -> None:
        what = f"sink '{sink}': publishing {len(part)} messages to {topic} at {rpc.endpoint}"
        try:
            retry.call(lambda: attempt(part), what)
        except WriteError:
            raise
        except Exception as exc:  # classified here; record faults go back to be isolated
            if is_record_fault(exc):
                raise
            if status_name(exc) == "NOT_FOUND":
                if create_never:
                    raise missing_topic(sink, topic) from exc
                raise DestinationNotFoundError(
                    f"sink '{sink}': topic {topic} does not exist (NOT_FOUND while publishing)"
                ) from exc
            raise WriteError(f"{what} failed: {error_text(exc)}") from exc

    rejected = isolate_rejected(messages, send, is_record_fault)
    if not rejected:
        return []
    failed = []
    for message, exc in rejected:
        attributes = dict(message.attributes)
        if message.ordering_key:
            attributes[ATTR_ORDERING_KEY] = message.ordering_key
        failed.append(FailedRecord(sink, topic, error_text(exc), message.data, attributes))
    return failed


class Publisher:
    """The publish transport of one subtask: channel, thread pool and window of requests.

    Thread-safe where it must be: requests start on the processing thread and complete on
    gRPC's polling thread or the pool.

    Args:
        sink: The sink's name, for errors.
        rpc: The channel and its calls.
        pool: Runs retries after a failed first attempt, and ordered requests.
        retry: The sink's retry policy.
        create_never: The topics are not checked (``CREATE_NEVER``): a ``NOT_FOUND`` is how a
            missing topic is learnt (:func:`missing_topic`).
        quota: The subtask's quota window, fed by every first attempt's outcome.
        max_in_flight: The subtask's window of unordered requests.
    """

    def __init__(
        self,
        *,
        sink: str,
        rpc: Any,
        pool: Any,
        retry: RetryPolicy,
        create_never: bool,
        quota: QuotaWindow,
        max_in_flight: int = MAX_IN_FLIGHT_PER_SUBTASK,
    ) -> None:
        self.sink = sink
        self.rpc = rpc
        self.pool = pool
        self.retry = retry
        self.create_never = create_never
        self.quota = quota
        #: The unordered requests in flight; their outcomes are read by their topics.
        self.window: InFlightWindow[FailedRecord] = InFlightWindow(
            max_in_flight,
            what=f"sink '{sink}': Publish requests",
            quota=quota,
            collect=False,
            stall_s=retry.stall_bound(retry.attempt_timeout(CALL_TIMEOUT_S)),
        )

    def start(self, topic: str, batch: list[Any]) -> Future[list[FailedRecord]]:
        """Start publishing ``batch`` to ``topic`` without blocking on the request.

        The first attempt is a gRPC future; its done-callback settles the returned future. A
        failed first attempt moves to the thread pool: :func:`publish_batch` with that error,
        so retries, isolation and errors (a ``NOT_FOUND`` under ``CREATE_NEVER`` among them)
        are the blocking path's. Beyond :data:`MAX_IN_FLIGHT_PER_SUBTASK` requests this waits
        for a slot (backpressure); the outcomes are read at the topic's flush.

        Returns:
            A future of the rejected messages, raising what fails the job.
        """
        window = self.window
        window.admit()
        result: Future[list[FailedRecord]] = Future()
        window.add(result)
        self._attempt(topic, batch, result)
        return result

    def start_after(
        self, previous: Future[list[FailedRecord]] | None, topic: str, batch: list[Any]
    ) -> Future[list[FailedRecord]]:
        """Publish ``batch`` on the pool once ``previous`` (the topic's last ordered request,
        None: none yet) has succeeded; not at all if it failed."""
        pool = self.pool
        if pool is None:
            raise WriteError(f"sink '{self.sink}': the publisher was closed")
        if previous is None or (previous.done() and previous.exception() is None):
            return pool.submit(self.publish, topic, batch)  # type: ignore[no-any-return]
        return pool.submit(self._publish_after, previous, topic, batch)  # type: ignore[no-any-return]

    def _publish_after(
        self, previous: Future[list[FailedRecord]], topic: str, batch: list[Any]
    ) -> list[FailedRecord]:
        # Safe in a shared pool: the predecessor was submitted first, so it already runs or ran.
        if previous.exception() is not None:
            raise WriteError(
                f"sink '{self.sink}': not publishing {len(batch)} ordered messages to "
                f"{topic} because the request before them failed"
            )
        return self.publish(topic, batch)

    def _attempt(self, topic: str, batch: list[Any], result: Future[list[FailedRecord]]) -> None:
        rpc = self.rpc
        try:
            call = rpc.publish_future(topic, batch)
        except Exception as exc:  # noqa: BLE001 - classified by publish_batch, as a first attempt
            self._on_pool(result, self.publish, topic, batch, exc, rpc)
            return
        call.add_done_callback(lambda done: self._attempted(done, rpc, topic, batch, result))

    def _attempted(
        self, call: Any, rpc: Any, topic: str, batch: list[Any], result: Future[list[FailedRecord]]
    ) -> None:
        """A first attempt ended (on gRPC's polling thread): settle ``result``, or retry."""
        try:
            error = call.exception()
        except Exception as exc:  # noqa: BLE001 - cancelled: the channel was closed
            error = exc
        if error is None:
            self.quota.on_success()
            result.set_result([])
        else:
            if self.retry.is_quota(error):
                self.quota.on_quota_error(self.window.outstanding)
            self._on_pool(result, self.publish, topic, batch, error, rpc)

    def _on_pool(
        self, result: Future[list[FailedRecord]], fn: Callable[..., list[FailedRecord]], *args: Any
    ) -> None:
        """Run ``fn(*args)`` on the thread pool and settle ``result`` with its outcome."""
        try:
            pool = self.pool
            if pool is None:
                raise WriteError(f"sink '{self.sink}': the publisher was closed")
            inner = pool.submit(fn, *args)
        except BaseException as exc:  # noqa: BLE001 - settles the future, raised at flush
            result.set_exception(exc)
            return

        def settle(done: Future[list[FailedRecord]]) -> None:
            if done.cancelled():
                result.set_exception(WriteError(f"sink '{self.sink}': the publisher was closed"))
            elif (error := done.exception()) is not None:
                result.set_exception(error)
            else:
                result.set_result(done.result())

        inner.add_done_callback(settle)

    def publish(
        self,
        topic: str,
        batch: list[Any],
        first_error: BaseException | None = None,
        rpc: Any = None,
    ) -> list[FailedRecord]:
        """:func:`publish_batch` with this sink's retry policy and create disposition, on
        ``rpc`` (the one a first attempt used) or this transport's. Runs on the thread pool."""
        return publish_batch(
            rpc or self.rpc, topic, batch, self.retry, self.sink, first_error, self.create_never
        )

    def close(self) -> None:
        """Stop the pool (queued retries are cancelled) and close the channel: requests still
        in flight end with the publisher-closed error."""
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None
        if self.rpc is not None:
            self.rpc.close()
            self.rpc = None
