"""The hot path of the Pub/Sub sink: one publisher per active topic, batching and flushing.

Per record (on the Flink processing thread): build one protobuf message, append it to the topic's
batch; when the batch is full, hand it to the thread pool. Before each checkpoint barrier the
sink calls :meth:`TopicPublisher.start_flush` on every topic and then :meth:`TopicPublisher.flush`,
which waits for every request of the topic. Under checkpoint markers an ordinary bundle end
sends a topic's open batch only once it is due (:attr:`TopicPublisher.unsent_since`), so at
thousands of topics the batches fill instead of each leaving with one message.

Ordering: with message ordering enabled, a topic's requests run one after another, in the order
they were cut, so one ordering key's messages are published in order (the records of one key
reach one subtask in order through ``key_by``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from google.api_core import exceptions as gexc

from pyflink_gcp.core.checked import CHECKED_NAMES_LIMIT, CheckedNames
from pyflink_gcp.core.errors import (
    CreationLimitExceededError,
    DestinationNotFoundError,
    SerializerError,
    WriteError,
)
from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.functions import short_repr
from pyflink_gcp.core.isolation import isolate_rejected
from pyflink_gcp.core.options import CreateDisposition
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


def message_size(data: bytes, key: str, attributes: dict[str, str] | None) -> int:
    """The bytes a message counts against the request and message limits (an upper bound)."""
    size = len(data) + len(key) + _MESSAGE_OVERHEAD
    if attributes:
        for k, v in attributes.items():
            size += len(k) + len(v) + 8
    return size


def publish_batch(
    rpc: PubSubRpc,
    topic: str,
    messages: Sequence[Any],
    retry: RetryPolicy,
    sink: str,
) -> list[FailedRecord]:
    """Publish ``messages`` to ``topic``: retry transient errors, isolate rejected messages.

    A request rejected for its content (:data:`~pyflink_gcp.core.status.RECORD_FAULT_CODES`)
    is split in halves until the rejected messages are alone
    (:func:`~pyflink_gcp.core.isolation.isolate_rejected`); those come back as failed records,
    carrying their attributes and their ordering key as ``dlq-ordering-key``, and every other
    message is published, in order.

    Raises:
        DestinationNotFoundError: The topic does not exist (deleted while the job ran).
        WriteError: Transient errors outlasted the retry deadline, or a non-content error.
    """

    def send(part: Sequence[Any]) -> None:
        what = f"sink '{sink}': publishing {len(part)} messages to {topic} at {rpc.endpoint}"
        try:
            retry.call(lambda: rpc.publish(topic, part), what)
        except WriteError:
            raise
        except Exception as exc:  # classified here; record faults go back to be isolated
            if is_record_fault(exc):
                raise
            if status_name(exc) == "NOT_FOUND":
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
    running in the pool) → clean again after :meth:`flush`. A full batch is sent as soon as it is
    cut; the processing thread only blocks when ``max_in_flight_requests`` requests (or, with
    ordering, that many chained requests) are already running.

    Flush triggers: ``max_messages`` or ``max_bytes`` reached (in :meth:`write`), each
    checkpoint barrier and the end of input, release by the registry, and the operator's other
    bundle ends: every one without checkpoint markers, under markers only once the open batch
    is due (``max_buffer_time`` old, or among the oldest when the subtask's open
    batches hold more than ``max_buffered_records``).
    """

    def __init__(
        self,
        destination: TopicDestination,
        factory: PubSubWriterFactory,
        lookup: TopicLookup | None = None,
    ) -> None:
        super().__init__(destination)
        self._topic = str(destination)
        self._factory = factory
        # The topic's existence check, still running (None: known to exist). The first
        # request waits for it on its publish thread, so the processing thread does not.
        self._lookup = lookup
        options = factory.publisher_options
        self._max_messages = options.max_messages
        self._max_bytes = options.max_bytes
        self._ordered = options.enable_message_ordering
        self._max_in_flight = factory.writer_options.max_in_flight_requests
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
        while len(self._in_flight) >= self._max_in_flight:
            self._collect(self._in_flight.popleft())
        factory = self._factory
        lookup = self._lookup
        if lookup is not None and lookup.succeeded():
            self._lookup = lookup = None
        if self._ordered and self._in_flight:
            previous = self._in_flight[-1]
            future = factory.pool.submit(self._publish_after, previous, batch)
        elif lookup is not None:
            future = factory.pool.submit(self._publish_looked_up, lookup, batch)
        else:
            future = factory.pool.submit(
                publish_batch, factory.rpc, self._topic, batch, factory.retry, factory.sink
            )
        self._in_flight.append(future)

    def _publish_looked_up(self, lookup: TopicLookup, batch: list[Any]) -> list[FailedRecord]:
        """A request sent before the topic's check finished: wait for it (a missing topic under
        CREATE_NEVER, a creation refused, raise here and fail the job at the next flush)."""
        lookup.wait()
        factory = self._factory
        return publish_batch(factory.rpc, self._topic, batch, factory.retry, factory.sink)

    def _publish_after(
        self, previous: Future[list[FailedRecord]], batch: list[Any]
    ) -> list[FailedRecord]:
        # Safe in a shared pool: the predecessor was submitted first, so it already runs or ran.
        if previous.exception() is not None:
            raise WriteError(
                f"sink '{self._factory.sink}': not publishing {len(batch)} ordered messages to "
                f"{self._topic} because the request before them failed"
            )
        factory = self._factory
        return publish_batch(factory.rpc, self._topic, batch, factory.retry, factory.sink)

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


class TopicLookup:
    """The existence check of one topic, started on the processing thread without waiting.

    Its GetTopic runs in gRPC's threads (no Python thread waits for it, so no Python thread
    competes for the interpreter lock meanwhile); the topic's first Publish, on a publish
    thread, waits for it in :meth:`wait`. A first attempt that fails for any reason (the topic
    is missing, a transient error) hands over to the factory's full check, with retries,
    creation under ``CREATE_IF_NEEDED`` and the errors that name the topic.
    """

    def __init__(self, factory: PubSubWriterFactory, name: str) -> None:
        self._factory = factory
        self.name = name
        self._call = factory.rpc.get_topic_future(name)
        self._lock = threading.Lock()
        self._settled = False
        self._error: BaseException | None = None

    def succeeded(self) -> bool:
        """Whether the topic is known to exist (never blocks)."""
        if self._settled:
            return self._error is None
        call = self._call
        return bool(call.done() and call.exception() is None)

    def failed(self) -> bool:
        """Whether the check ended with an error (a new lookup may try again)."""
        return self._settled and self._error is not None

    def wait(self) -> None:
        """Block until the topic exists (created if allowed), or raise why it cannot be used."""
        with self._lock:
            if not self._settled:
                try:
                    try:
                        self._call.result()
                    except Exception:  # noqa: BLE001 - the full check classifies and retries
                        self._factory._ensure_topic(self.name)
                    else:
                        self._factory._known.add(self.name)
                except BaseException as exc:  # noqa: BLE001 - kept, raised to every waiter
                    self._error = exc
                finally:
                    self._settled = True
            if self._error is not None:
                raise self._error


class PubSubWriterFactory(PicklesConfiguration, WriterFactory[TopicDestination]):
    """Creates one :class:`TopicPublisher` per active topic and owns what they share: the gRPC
    channel, the publish thread pool, and the topics known to exist.

    Under ``CREATE_NEVER`` (the default) a topic's first use starts its check
    (:class:`TopicLookup`, a ``GetTopic``) instead of blocking the processing thread for a
    round trip; its publisher takes records at once, and its first request waits for the
    check. Under ``CREATE_IF_NEEDED`` the check and the creation stay on the processing
    thread, so the creation bound is met in record order. The topics found to exist are remembered in an LRU of
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
        self._known = CheckedNames(CHECKED_NAMES_LIMIT)
        # Checks started and not yet known to have succeeded, by topic.
        self._lookups: dict[str, TopicLookup] = {}
        self._create_lock = threading.Lock()
        self.created_topics = 0

    def open(self, info: SubtaskInfo) -> None:
        self.rpc = PubSubRpc(
            resolve_pubsub_endpoint(self.endpoint), self.retry.attempt_timeout(_CALL_TIMEOUT_S)
        )
        self.pool = ThreadPoolExecutor(
            max_workers=16, thread_name_prefix=f"{self.sink}-{info.subtask_index}-publish"
        )

    def create_writer(self, destination: TopicDestination) -> TopicPublisher:
        return TopicPublisher(destination, self, self._lookup(str(destination)))

    def _lookup(self, name: str) -> TopicLookup | None:
        """The check of topic ``name``: None when known to exist, else its (shared) lookup.

        Under ``CREATE_IF_NEEDED`` the check (and the creation) runs here, on the processing
        thread, as before: the creation bound is then reached in record order, so the error
        names the topic whose record came first, and creating topics is rare.
        """
        if name in self._known:
            return None
        if self.create_disposition is CreateDisposition.CREATE_IF_NEEDED:
            self._ensure_topic(name)
            return None
        lookups = self._lookups
        lookup = lookups.get(name)
        if lookup is None or lookup.failed():
            if len(lookups) >= 1_000:  # forget settled ones; the known names keep the answers
                for done in [n for n, x in lookups.items() if x.succeeded() or x.failed()]:
                    del lookups[done]
            lookup = lookups[name] = TopicLookup(self, name)
        return lookup

    def _ensure_topic(self, name: str) -> None:
        """Check that topic ``name`` exists, creating it if allowed (on a publish thread)."""
        rpc = self.rpc
        try:
            self.retry.call(
                lambda: rpc.get_topic(name),
                f"sink '{self.sink}': get topic {name} at {rpc.endpoint}",
            )
        except gexc.NotFound:
            if self.create_disposition is CreateDisposition.CREATE_NEVER:
                raise DestinationNotFoundError(
                    f"sink '{self.sink}': topic {name} does not exist and the create disposition "
                    "is CREATE_NEVER"
                ) from None
            self._create(name)
        except gexc.PermissionDenied as exc:
            raise WriteError(
                f"sink '{self.sink}': no permission to use topic {name}: {exc}"
            ) from exc
        self._known.add(name)

    def _create(self, name: str) -> None:
        with self._create_lock:  # the bound counts creations of every publish thread
            self._create_locked(name)

    def _create_locked(self, name: str) -> None:
        bound = self.writer_options.max_created_destinations
        if self.created_topics >= bound:
            raise CreationLimitExceededError(
                f"sink '{self.sink}': resolver {self.resolver_name} named topic {name}, which "
                f"does not exist, but this subtask already created {self.created_topics} topics "
                f"(max_created_destinations={bound}). Check the resolver, or raise the bound "
                "with PubSubWriterOptions.builder().max_created_destinations(...)."
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
            self.created_topics += 1
            _LOG.info(
                "%s: created topic %s (%d created by this subtask)",
                self.sink,
                name,
                self.created_topics,
            )
        except gexc.AlreadyExists:
            pass  # another subtask created it first

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None
        if self.rpc is not None:
            self.rpc.close()
            self.rpc = None
