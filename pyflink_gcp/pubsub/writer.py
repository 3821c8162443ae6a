"""The hot path of the Pub/Sub sink: one publisher per active topic, batching and flushing.

Per record (on the Flink processing thread): add one message to the Publish request the topic's
open batch (:class:`~pyflink_gcp.core.batching.OpenBatch`) will be sent in, built in place so the
request needs no copy of it (:class:`~pyflink_gcp.pubsub.client.PublishBatch`); when the batch is
full, cut it and hand it to the subtask's :class:`~pyflink_gcp.pubsub.publishing.Publisher`,
which starts the request without blocking. Each topic bounds its own requests in flight
(``max_in_flight_requests``, an :class:`~pyflink_gcp.core.batching.InFlightWindow` whose slots the
requests' completions free). Before each checkpoint barrier the sink calls
:meth:`TopicPublisher.start_flush` on every topic and then :meth:`TopicPublisher.flush`, which
waits for every request of the topic. Under checkpoint markers an ordinary bundle end sends a
topic's open batch only once it is due (:attr:`TopicPublisher.unsent_since`), so at thousands of
topics the batches fill instead of each leaving with one message.

Ordering: with message ordering enabled, a topic's requests run one after another on the thread
pool, in the order they were cut, so one ordering key's messages are published in order (the
records of one key reach one subtask in order through ``key_by``).

Attributes: a message whose attributes break Pub/Sub's limits (count, key and value sizes) is
not sent; it goes to the failure handler, alone, at the next flush, like a message over the
size limit (:func:`~pyflink_gcp.pubsub.attributes.attribute_violation`). With a digest record
id (``with_record_id_attribute()`` without a key) the writer adds it here, where the topic is
known (:func:`~pyflink_gcp.pubsub.attributes.record_digest`).

Under ``CREATE_NEVER`` (the default) no topic is checked before it is used: a ``NOT_FOUND``
answer to a Publish fails the job at the flush that sees it
(:func:`~pyflink_gcp.pubsub.publishing.missing_topic`).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from google.api_core import exceptions as gexc

from pyflink_gcp.core.batching import InFlightWindow, OpenBatch
from pyflink_gcp.core.checked import CHECKED_NAMES_LIMIT, CheckedNames
from pyflink_gcp.core.creation import CreationBudget
from pyflink_gcp.core.errors import SerializerError, WriteError
from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.functions import short_repr
from pyflink_gcp.core.options import CreateDisposition
from pyflink_gcp.core.quota import QuotaWindow
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.core.runtime_info import SubtaskInfo
from pyflink_gcp.core.writer import DestinationWriter, PicklesConfiguration, WriterFactory
from pyflink_gcp.pubsub.attributes import attribute_violation, record_digest
from pyflink_gcp.pubsub.client import (
    PublishBatch,
    PublishRequestPb,
    PubSubRpc,
    resolve_pubsub_endpoint,
)
from pyflink_gcp.pubsub.destinations import TopicDestination
from pyflink_gcp.pubsub.options import (
    MAX_MESSAGE_BYTES,
    PubSubPublisherOptions,
    PubSubWriterOptions,
    TopicCreateOptions,
)
from pyflink_gcp.pubsub.publishing import CALL_TIMEOUT_S, MAX_IN_FLIGHT_PER_SUBTASK, Publisher

_LOG = logging.getLogger("pyflink_gcp.pubsub")

#: Bytes a message costs besides data, key and attributes (protobuf framing; conservative).
_MESSAGE_OVERHEAD = 64


def message_size(data: bytes, key: str, attributes: dict[str, str] | None) -> int:
    """The bytes a message counts against the request and message limits (an upper bound)."""
    size = len(data) + len(key) + _MESSAGE_OVERHEAD
    if attributes:
        for k, v in attributes.items():
            size += len(k) + len(v) + 8
    return size


class TopicPublisher(DestinationWriter[TopicDestination]):
    """Batches and publishes the messages of one topic.

    States: *empty* (clean) → *batching* (messages in the open batch) → *in flight* (requests
    started, as gRPC futures or, with ordering, in the pool) → clean again after :meth:`flush`.
    A full batch is sent as soon as it is cut; the processing thread only blocks when
    ``max_in_flight_requests`` requests of the topic (or, with ordering, that many chained
    requests), or :data:`~pyflink_gcp.pubsub.publishing.MAX_IN_FLIGHT_PER_SUBTASK` of the
    subtask, are already running.

    Flush triggers: ``max_messages`` or ``max_bytes`` reached (in :meth:`write`), each
    checkpoint barrier and the end of input, release by the registry, and the operator's other
    bundle ends: every one without checkpoint markers, under markers only once the open batch
    is due (``max_buffer_time`` old, or among the oldest when the subtask's open
    batches hold more than ``max_buffered_records``).

    Args:
        destination: The topic.
        publisher: The subtask's publish transport (channel, pool, subtask window).
        options: The batch limits and whether messages are ordered.
        writer_options: The topic's ``max_in_flight_requests`` and ``shutdown_budget``.
        record_id_digest: The attribute to put each message's digest record id in, or None.
    """

    def __init__(
        self,
        destination: TopicDestination,
        publisher: Publisher,
        options: PubSubPublisherOptions,
        writer_options: PubSubWriterOptions,
        record_id_digest: str | None = None,
    ) -> None:
        super().__init__(destination)
        self._record_id = record_id_digest
        self._topic = str(destination)
        self._publisher = publisher
        self._sink = publisher.sink
        self._ordered = options.enable_message_ordering
        self.open_batch: OpenBatch[Any] = OpenBatch(options.max_messages, options.max_bytes)
        #: The request the open batch's messages are added to (see :meth:`_new_request`).
        self._request: Any = None
        self._add: Any = None
        self._new_request()
        #: This topic's requests (a quota error lowers every topic's bound with the subtask's).
        self._window: InFlightWindow[FailedRecord] = InFlightWindow(
            writer_options.max_in_flight_requests,
            what=f"sink '{self._sink}': Publish requests to {self._topic}",
            quota=publisher.quota,
            stall_s=publisher.window.stall_s,
        )
        self._shutdown_s = writer_options.shutdown_budget.total_seconds()
        self._rejected: list[FailedRecord] = []
        self.messages = 0

    def write(self, element: Any, record: Any) -> None:
        try:
            data, key, attributes = element
        except (TypeError, ValueError):
            raise SerializerError(
                f"sink '{self._sink}': topic {self._topic}: the serializer returned "
                f"{type(element).__name__} for record {short_repr(record)}; use "
                "PubSubSerializationSchema"
            ) from None
        if not self._ordered:
            key = ""
        if self._record_id is not None:
            attributes = dict(attributes) if attributes else {}
            attributes[self._record_id] = record_digest(self._topic, data, key, attributes)
        if attributes and self._attributes_fail(data, attributes, record):
            return
        size = message_size(data, key, attributes)
        if size > MAX_MESSAGE_BYTES:
            self._rejected.append(
                FailedRecord(
                    self._sink,
                    self._topic,
                    f"message of {size} bytes exceeds the Pub/Sub limit of {MAX_MESSAGE_BYTES} bytes",
                    data,
                    dict(attributes or {}),
                    short_repr(record),
                )
            )
            return
        batch = self.open_batch
        if batch.elements and batch.bytes + size > batch.max_bytes:  # OpenBatch.fits, inlined
            self._send()
        if key or attributes:
            message = self._add(data=data, ordering_key=key, attributes=attributes)
        else:
            message = self._add(data=data)
        full = batch.append(message, size)
        self.bytes_accepted += size
        self.messages += 1
        if full:
            self._send()

    def _attributes_fail(self, data: bytes, attributes: dict[str, str], record: Any) -> bool:
        """Whether the message breaks an attribute limit: then it is rejected (for the
        failure handler, at the flush) instead of failing its whole request at the service."""
        try:
            reason = attribute_violation(attributes)
        except TypeError as exc:
            raise SerializerError(
                f"sink '{self._sink}': topic {self._topic}: {exc}, for record {short_repr(record)}"
            ) from None
        if reason is None:
            return False
        self._rejected.append(
            FailedRecord(
                self._sink, self._topic, reason, data, dict(attributes), short_repr(record)
            )
        )
        return True

    def _new_request(self) -> None:
        """Start the request the next batch's messages go into: each message is added to it
        in place (:class:`~pyflink_gcp.pubsub.client.PublishBatch`), so the request is not
        built again, with a copy of every message, when the batch is sent."""
        self._request = PublishRequestPb(topic=self._topic)
        self._add = self._request.messages.add

    def _send(self) -> None:
        messages = PublishBatch(self.open_batch.cut(), self._request)
        self._new_request()
        window = self._window
        window.admit()
        if not self._ordered:
            future = self._publisher.start(self._topic, messages)
        else:
            future = self._publisher.start_after(window.last, self._topic, messages)
        window.add(future)

    def start_flush(self) -> None:
        if self.open_batch:
            self._send()

    def flush(self) -> list[FailedRecord]:
        self.start_flush()
        done = self._window.drain()  # waits for all, then raises the first error
        failures = self._rejected + done
        self._rejected = []
        return failures

    @property
    def is_clean(self) -> bool:
        return not self.open_batch and self._window.is_clean and not self._rejected

    def close(self) -> None:
        budget = self._shutdown_s
        try:
            self._window.settle(timeout=budget)  # errors were reported by flush
        except WriteError:
            raise WriteError(
                f"sink '{self._sink}': the publisher of {self._topic} did not shut "
                f"down within its budget of {budget:.0f}s"
            ) from None


class PubSubWriterFactory(PicklesConfiguration, WriterFactory[TopicDestination]):
    """Creates one :class:`TopicPublisher` per active topic and owns what they share: the
    publish transport (:class:`~pyflink_gcp.pubsub.publishing.Publisher`: the gRPC channel, the
    window of requests in flight, the thread pool of retries and ordered requests) and, under
    creation, the topics known to exist.

    Under ``CREATE_NEVER`` (the default) a topic is not checked: its existence is learnt from
    its first Publish, whose ``NOT_FOUND`` fails the job at the flush that sees it
    (:func:`~pyflink_gcp.pubsub.publishing.missing_topic`), the batch unacknowledged, as
    Google's own publisher client does. At thousands of topics that halves the calls of a topic's first use (a GetTopic cost as
    much client CPU as a Publish), and the job needs no ``pubsub.topics.get``. Under
    ``CREATE_IF_NEEDED`` the check (GetTopic) and the creation run on the processing thread
    when a publisher is created, so the creation bound is met in record order; the topics
    found to exist are remembered in an LRU of
    :data:`~pyflink_gcp.core.checked.CHECKED_NAMES_LIMIT` names, so publishers evicted and
    re-created do not check again and a job naming ever new topics does not grow without end.

    Pickled into the job as its configuration only (``_config_fields``); the channel and the
    pools are opened on the worker.
    """

    accepts_unroutable = True
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
        "record_id_digest",
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
        record_id_digest: str | None = None,
    ) -> None:
        self.sink = sink_name
        self.resolver_name = resolver_name
        self.publisher_options = publisher_options
        self.writer_options = writer_options
        self.create_disposition = create_disposition
        self.create_options = create_options
        self.endpoint = endpoint
        self.retry = retry
        #: The attribute of the digest record id the publishers add (None: none).
        self.record_id_digest = record_id_digest
        self._init_runtime()

    def _init_runtime(self) -> None:
        #: The subtask's publish transport, made by :meth:`open`.
        self.publisher: Publisher | None = None
        self._known = CheckedNames(CHECKED_NAMES_LIMIT)  # under CREATE_IF_NEEDED only
        self._create_never = self.create_disposition is CreateDisposition.CREATE_NEVER
        self._create_lock = threading.Lock()
        self.budget = CreationBudget(
            self.writer_options.max_created_destinations,
            self.writer_options.max_created_destinations_per,
        )
        #: Less than the subtask window's size while Publish meets quota errors.
        self.quota = QuotaWindow(MAX_IN_FLIGHT_PER_SUBTASK, f"sink '{self.sink}': Publish requests")

    @property
    def rpc(self) -> Any:
        """The channel and its calls (None until opened)."""
        return None if self.publisher is None else self.publisher.rpc

    @property
    def pool(self) -> Any:
        """The thread pool of retries and ordered requests (None until opened)."""
        return None if self.publisher is None else self.publisher.pool

    def open(self, info: SubtaskInfo) -> None:
        self.connect(
            PubSubRpc(
                resolve_pubsub_endpoint(self.endpoint),
                self.retry.attempt_timeout(CALL_TIMEOUT_S),
                self.publisher_options.compression_threshold,
            ),
            ThreadPoolExecutor(
                max_workers=16, thread_name_prefix=f"{self.sink}-{info.subtask_index}-publish"
            ),
        )

    def connect(self, rpc: Any, pool: Any) -> Publisher:
        """Publish through ``rpc`` (a :class:`~pyflink_gcp.pubsub.client.PubSubRpc`, or a
        stand-in) with ``pool`` for retries and ordered requests."""
        self.publisher = Publisher(
            sink=self.sink,
            rpc=rpc,
            pool=pool,
            retry=self.retry,
            create_never=self._create_never,
            quota=self.quota,
        )
        return self.publisher

    def create_writer(self, destination: TopicDestination) -> TopicPublisher:
        publisher = self.publisher
        if publisher is None:
            raise WriteError(f"sink '{self.sink}': the Pub/Sub writer is not open")
        if not self._create_never:
            name = str(destination)
            if name not in self._known:
                self._ensure_topic(name)
        return TopicPublisher(
            destination,
            publisher,
            self.publisher_options,
            self.writer_options,
            self.record_id_digest,
        )

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
        if self.publisher is not None:
            self.publisher.close()
            self.publisher = None
