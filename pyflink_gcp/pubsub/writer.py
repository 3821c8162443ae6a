"""The hot path of the Pub/Sub sink: one publisher per active topic, batching and flushing.

Per record (on the Flink processing thread): build one protobuf message, append it to the topic's
batch; when the batch is full, send it. A request is started as a gRPC future whose
done-callback records its outcome (:meth:`PubSubWriterFactory.start_publish`): no Python thread
blocks per request, and at most :data:`MAX_IN_FLIGHT_PER_SUBTASK` requests of a subtask are in
flight. Only a request whose first attempt failed moves to the thread pool, where
:func:`publish_batch` retries it and isolates rejected messages as the blocking path always
did. Before each checkpoint barrier the sink calls :meth:`TopicPublisher.start_flush` on every
topic and then :meth:`TopicPublisher.flush`, which waits for every request of the topic. Under checkpoint markers an ordinary bundle end
sends a topic's open batch only once it is due (:attr:`TopicPublisher.unsent_since`), so at
thousands of topics the batches fill instead of each leaving with one message.

Ordering: with message ordering enabled, a topic's requests run one after another on the thread
pool, in the order they were cut, so one ordering key's messages are published in order (the
records of one key reach one subtask in order through ``key_by``).

Under ``CREATE_NEVER`` (the default) no topic is checked before it is used: a ``NOT_FOUND``
answer to a Publish fails the job at the flush that sees it (:func:`missing_topic`).

Quota errors (RESOURCE_EXHAUSTED) shrink the subtask's window of requests in flight, and each
topic's ``max_in_flight_requests`` with it (:class:`~pyflink_gcp.core.quota.QuotaWindow`),
until Publish succeeds again; the retry policy waits for the quota to refill.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import grpc
from google.api_core import exceptions as gexc

from pyflink_gcp.core.checked import CHECKED_NAMES_LIMIT, CheckedNames
from pyflink_gcp.core.creation import CreationBudget
from pyflink_gcp.core.errors import (
    DestinationNotFoundError,
    SerializerError,
    WriteError,
)
from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.functions import short_repr
from pyflink_gcp.core.isolation import isolate_rejected
from pyflink_gcp.core.options import CreateDisposition
from pyflink_gcp.core.quota import QuotaWindow
from pyflink_gcp.core.retry import RetryPolicy, status_name
from pyflink_gcp.core.runtime_info import SubtaskInfo
from pyflink_gcp.core.status import error_text, is_record_fault
from pyflink_gcp.core.writer import DestinationWriter, PicklesConfiguration, WriterFactory
from pyflink_gcp.pubsub.client import PubsubMessagePb, PubSubRpc, resolve_pubsub_endpoint
from pyflink_gcp.pubsub.destinations import TopicDestination
from pyflink_gcp.pubsub.options import (
    MAX_MESSAGE_BYTES,
    PubSubPublisherOptions,
    PubSubWriterOptions,
    TopicCreateOptions,
)

_LOG = logging.getLogger("pyflink_gcp.pubsub")

#: Bytes a message costs besides data, key and attributes (protobuf framing; conservative).
_MESSAGE_OVERHEAD = 64
#: Timeout of one Publish, GetTopic or CreateTopic attempt (capped by the retry deadline).
_CALL_TIMEOUT_S = 60.0
#: The dead-letter attribute carrying a rejected message's ordering key.
ATTR_ORDERING_KEY = "dlq-ordering-key"
#: Publish requests of one subtask in flight at once (over all its unordered topics): the
#: processing thread waits for the oldest beyond it, so memory stays bounded however many
#: topics there are. ``max_in_flight_requests`` still bounds each topic's own requests.
MAX_IN_FLIGHT_PER_SUBTASK = 256


def message_size(data: bytes, key: str, attributes: dict[str, str] | None) -> int:
    """The bytes a message counts against the request and message limits (an upper bound)."""
    size = len(data) + len(key) + _MESSAGE_OVERHEAD
    if attributes:
        for k, v in attributes.items():
            size += len(k) + len(v) + 8
    return size


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


class TopicPublisher(DestinationWriter[TopicDestination]):
    """Batches and publishes the messages of one topic.

    States: *empty* (clean) → *batching* (messages in the open batch) → *in flight* (requests
    started, as gRPC futures or, with ordering, in the pool) → clean again after :meth:`flush`.
    A full batch is sent as soon as it is cut; the processing thread only blocks when
    ``max_in_flight_requests`` requests of the topic (or, with ordering, that many chained
    requests), or :data:`MAX_IN_FLIGHT_PER_SUBTASK` of the subtask, are already running.

    Flush triggers: ``max_messages`` or ``max_bytes`` reached (in :meth:`write`), each
    checkpoint barrier and the end of input, release by the registry, and the operator's other
    bundle ends: every one without checkpoint markers, under markers only once the open batch
    is due (``max_buffer_time`` old, or among the oldest when the subtask's open
    batches hold more than ``max_buffered_records``).
    """

    def __init__(self, destination: TopicDestination, factory: PubSubWriterFactory) -> None:
        super().__init__(destination)
        self._topic = str(destination)
        self._factory = factory
        options = factory.publisher_options
        self._max_messages = options.max_messages
        self._max_bytes = options.max_bytes
        self._ordered = options.enable_message_ordering
        self._max_in_flight = factory.writer_options.max_in_flight_requests
        self._quota = factory.quota
        self._batch: list[Any] = []
        self._batch_bytes = 0
        self._batch_since = math.inf
        self._in_flight: deque[Future[list[FailedRecord]]] = deque()
        self._rejected: list[FailedRecord] = []
        self._done: list[FailedRecord] = []
        self.messages = 0

    def write(self, element: Any, record: Any) -> None:
        try:
            data, key, attributes = element
        except (TypeError, ValueError):
            raise SerializerError(
                f"sink '{self._factory.sink}': topic {self._topic}: the serializer returned "
                f"{type(element).__name__} for record {short_repr(record)}; use "
                "PubSubSerializationSchema"
            ) from None
        if not self._ordered:
            key = ""
        size = message_size(data, key, attributes)
        if size > MAX_MESSAGE_BYTES:
            self._rejected.append(
                FailedRecord(
                    self._factory.sink,
                    self._topic,
                    f"message of {size} bytes exceeds the Pub/Sub limit of {MAX_MESSAGE_BYTES} bytes",
                    data,
                    dict(attributes or {}),
                    short_repr(record),
                )
            )
            return
        if self._batch:
            if self._batch_bytes + size > self._max_bytes:
                self._send()
                self._batch_since = time.monotonic()
        else:
            self._batch_since = time.monotonic()
        self._batch.append(PubsubMessagePb(data=data, ordering_key=key, attributes=attributes))
        self._batch_bytes += size
        self.bytes_accepted += size
        self.messages += 1
        if len(self._batch) >= self._max_messages:
            self._send()

    def _send(self) -> None:
        batch = self._batch
        self._batch = []
        self._batch_bytes = 0
        self._batch_since = math.inf
        while len(self._in_flight) >= min(self._max_in_flight, self._quota.limit):
            self._collect(self._in_flight.popleft())
        factory = self._factory
        if not self._ordered:
            future = factory.start_publish(self._topic, batch)
        elif self._in_flight:
            previous = self._in_flight[-1]
            future = factory.pool.submit(self._publish_after, previous, batch)
        else:
            future = factory.pool.submit(factory.publish, self._topic, batch)
        self._in_flight.append(future)

    def _publish_after(
        self, previous: Future[list[FailedRecord]], batch: list[Any]
    ) -> list[FailedRecord]:
        # Safe in a shared pool: the predecessor was submitted first, so it already runs or ran.
        if previous.exception() is not None:
            raise WriteError(
                f"sink '{self._factory.sink}': not publishing {len(batch)} ordered messages to "
                f"{self._topic} because the request before them failed"
            )
        return self._factory.publish(self._topic, batch)

    def _collect(self, future: Future[list[FailedRecord]]) -> None:
        self._done.extend(future.result())

    def start_flush(self) -> None:
        if self._batch:
            self._send()

    @property
    def unsent_since(self) -> float:
        return self._batch_since

    @property
    def unsent_records(self) -> int:
        return len(self._batch)

    def flush(self) -> list[FailedRecord]:
        self.start_flush()
        error: BaseException | None = None
        while self._in_flight:
            future = self._in_flight.popleft()
            try:
                self._collect(future)
            except BaseException as exc:  # noqa: BLE001 - wait for all, then raise the first
                error = error or exc
        if error is not None:
            raise error
        failures = self._rejected + self._done
        self._rejected = []
        self._done = []
        return failures

    @property
    def is_clean(self) -> bool:
        return not self._batch and not self._in_flight and not self._rejected and not self._done

    def close(self) -> None:
        budget = self._factory.writer_options.shutdown_budget.total_seconds()
        for future in list(self._in_flight):
            try:
                future.result(timeout=budget)
            except FutureTimeout:
                raise WriteError(
                    f"sink '{self._factory.sink}': the publisher of {self._topic} did not shut "
                    f"down within its budget of {budget:.0f}s"
                ) from None
            except Exception:  # noqa: BLE001 - already reported by flush; closing anyway
                pass
        self._in_flight.clear()


class PubSubWriterFactory(PicklesConfiguration, WriterFactory[TopicDestination]):
    """Creates one :class:`TopicPublisher` per active topic and owns what they share: the gRPC
    channel, the window of requests in flight (:meth:`start_publish`), the thread pool of
    retries and ordered requests, and, under creation, the topics known to exist.

    Under ``CREATE_NEVER`` (the default) a topic is not checked: its existence is learnt from
    its first Publish, whose ``NOT_FOUND`` fails the job at the flush that sees it
    (:func:`missing_topic`), the batch unacknowledged, as Google's own publisher client does.
    At thousands of topics that halves the calls of a topic's first use (a GetTopic cost as
    much client CPU as a Publish), and the job needs no ``pubsub.topics.get``. Under
    ``CREATE_IF_NEEDED`` the check (GetTopic) and the creation run on the processing thread
    when a publisher is created, so the creation bound is met in record order; the topics
    found to exist are remembered in an LRU of
    :data:`~pyflink_gcp.core.checked.CHECKED_NAMES_LIMIT` names, so publishers evicted and
    re-created do not check again and a job naming ever new topics does not grow without end.

    Pickled into the job as its configuration only (``_config_fields``); the channel and the
    pools are opened on the worker.
    """

    destination_type = TopicDestination
    _config_fields = (
        "sink",
        "resolver_name",
        "publisher_options",
        "writer_options",
        "create_disposition",
        "create_options",
        "endpoint",
        "retry",
    )

    def __init__(
        self,
        *,
        sink_name: str,
        resolver_name: str,
        publisher_options: PubSubPublisherOptions,
        writer_options: PubSubWriterOptions,
        create_disposition: CreateDisposition,
        create_options: TopicCreateOptions,
        endpoint: str | None,
        retry: RetryPolicy,
    ) -> None:
        self.sink = sink_name
        self.resolver_name = resolver_name
        self.publisher_options = publisher_options
        self.writer_options = writer_options
        self.create_disposition = create_disposition
        self.create_options = create_options
        self.endpoint = endpoint
        self.retry = retry
        self._init_runtime()

    def _init_runtime(self) -> None:
        self.rpc: Any = None
        self.pool: Any = None
        self._known = CheckedNames(CHECKED_NAMES_LIMIT)  # under CREATE_IF_NEEDED only
        self._create_never = self.create_disposition is CreateDisposition.CREATE_NEVER
        self._create_lock = threading.Lock()
        self.budget = CreationBudget(
            self.writer_options.max_created_destinations,
            self.writer_options.max_created_destinations_per,
        )
        # The outcomes of the requests started as futures, oldest first (MAX_IN_FLIGHT_PER_SUBTASK).
        self._window: deque[Future[list[FailedRecord]]] = deque()
        self._window_size = MAX_IN_FLIGHT_PER_SUBTASK
        #: Less than the window's size while Publish meets quota errors.
        self.quota = QuotaWindow(MAX_IN_FLIGHT_PER_SUBTASK, f"sink '{self.sink}': Publish requests")

    def open(self, info: SubtaskInfo) -> None:
        self.rpc = PubSubRpc(
            resolve_pubsub_endpoint(self.endpoint), self.retry.attempt_timeout(_CALL_TIMEOUT_S)
        )
        self.pool = ThreadPoolExecutor(
            max_workers=16, thread_name_prefix=f"{self.sink}-{info.subtask_index}-publish"
        )

    def create_writer(self, destination: TopicDestination) -> TopicPublisher:
        if not self._create_never:
            name = str(destination)
            if name not in self._known:
                self._ensure_topic(name)
        return TopicPublisher(destination, self)

    # -- publishing ------------------------------------------------------------------------------

    def start_publish(self, topic: str, batch: list[Any]) -> Future[list[FailedRecord]]:
        """Start publishing ``batch`` to ``topic`` without blocking on the request.

        The first attempt is a gRPC future; its done-callback settles the returned future. A
        failed first attempt moves to the thread pool: :func:`publish_batch` with that error,
        so retries, isolation and errors (a ``NOT_FOUND`` under ``CREATE_NEVER`` among them)
        are the blocking path's. Beyond :data:`MAX_IN_FLIGHT_PER_SUBTASK` requests this waits for the oldest
        (backpressure); the outcomes are read at the topic's flush.

        Returns:
            A future of the rejected messages, raising what fails the job.
        """
        window = self._window
        limit = min(self._window_size, self.quota.limit)  # less after quota errors
        if len(window) >= limit:
            while len(window) >= limit:
                window.popleft().exception()  # blocks until done; its outcome is read at flush
            while window and window[0].done():  # whatever ended meanwhile: fewer wake-ups
                window.popleft()
        result: Future[list[FailedRecord]] = Future()
        window.append(result)
        self._attempt(topic, batch, result)
        return result

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
                self.quota.on_quota_error(len(self._window))
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
        ``rpc`` (the one a first attempt used) or the factory's. Runs on the thread pool."""
        return publish_batch(
            rpc or self.rpc, topic, batch, self.retry, self.sink, first_error, self._create_never
        )

    def flush_shared(self) -> list[FailedRecord]:
        # Every topic has waited for its requests by now: the window holds only done ones.
        self._window.clear()
        return []

    # -- topics ------------------------------------------------------------------------------

    def _ensure_topic(self, name: str) -> None:
        """Check that topic ``name`` exists, creating it if missing (``CREATE_IF_NEEDED``
        only; on the processing thread, so the creation bound is met in record order, and
        creating topics is rare)."""
        rpc = self.rpc
        try:
            self.retry.call(
                lambda: rpc.get_topic(name),
                f"sink '{self.sink}': get topic {name} at {rpc.endpoint}",
            )
        except gexc.NotFound:
            self._create(name)
        except gexc.PermissionDenied as exc:
            raise WriteError(
                f"sink '{self.sink}': no permission to use topic {name}: {exc}"
            ) from exc
        self._known.add(name)

    def _create(self, name: str) -> None:
        with self._create_lock:  # the bound counts creations of every publish thread
            self._create_locked(name)

    @property
    def created_topics(self) -> int:
        """Topics this subtask created."""
        return self.budget.created

    def _create_locked(self, name: str) -> None:
        budget = self.budget
        if not budget.take():
            raise budget.exceeded(
                sink=self.sink,
                what=f"creating topic {name}",
                noun="topics",
                resolver=self.resolver_name,
                owner=type(self.writer_options).__name__,
            )
        request: dict[str, Any] = {"name": name, "labels": dict(self.create_options.labels)}
        retention = self.create_options.message_retention_duration
        if retention is not None:
            request["message_retention_duration"] = retention
        try:
            self.retry.call(
                lambda: self.rpc.create_topic(request),
                f"sink '{self.sink}': create topic {name} at {self.rpc.endpoint}",
            )
        except gexc.AlreadyExists:
            budget.give_back()  # another subtask created it first
            return
        except BaseException:
            budget.give_back()
            raise
        _LOG.info(
            "%s: created topic %s (%d created by this subtask)", self.sink, name, budget.created
        )

    def close(self) -> None:
        self._window.clear()
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None
        if self.rpc is not None:
            self.rpc.close()
            self.rpc = None
