"""The service-agnostic writer that one sink subtask runs: resolve, serialize, route, flush.

This is the hot path of every sink: one resolver call, one serializer call, one dict lookup and
one append per record. Everything that costs more (RPCs, eviction) happens in batches.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from pyflink_gcp.core.carry import CarriedRecords, CarrySettings, decode_restored
from pyflink_gcp.core.commit import CommittingWriterFactory, WriterStarted, commits
from pyflink_gcp.core.errors import ResolverError, SerializerError, SinkError
from pyflink_gcp.core.failure import UNRESOLVED, FailedRecord, FailureHandler, FailureRouter
from pyflink_gcp.core.functions import as_resolver, describe_callable, short_repr
from pyflink_gcp.core.lineage import LineageReporter, LineageSettings
from pyflink_gcp.core.metrics import DestinationMetrics
from pyflink_gcp.core.registry import WriterRegistry
from pyflink_gcp.core.results import result_collector
from pyflink_gcp.core.runtime_info import SubtaskInfo
from pyflink_gcp.core.types import Destination, UnroutableRecord, WriterContext
from pyflink_gcp.core.writer import DestinationWriter, WriterFactory

_LOG = logging.getLogger("pyflink_gcp.writer")


@dataclass
class SinkConfig:
    """Everything a sink subtask needs, pickled into the job at ``build()``.

    Attributes:
        sink_name: Used in every error message, log line and metric.
        factory: The service's writer factory.
        resolver: ``(record, context) -> Destination``, or an object with ``resolve``; None for
            sinks with a fixed destination (``fixed_destination``).
        serializer: ``(record, context) -> element``, or an object with ``serialize``.
        failure_handler: What happens to record-shaped failures.
        idle_timeout_s: Writers unused this long are evicted after a successful flush.
        max_active: Cap on live destination writers per subtask (None: no cap).
        max_buffered_records: Records per subtask between two bundle ends (the operator's bundle
            size); a bundle end sends what is buffered, and waits for it without markers. Under
            markers it also bounds the records that bundle ends leave in open batches.
        max_buffer_time_ms: How long a record waits to be sent: the operator's bundle time;
            under markers a destination's batch is sent at the first bundle end after it is
            this old (see :meth:`SinkWriter.send_due`).
        per_destination_metrics: Register records/bytes/errors counters per destination.
        fixed_destination: The destination of a sink without resolver (Spanner).
        chain_with_upstream: Let the writer's marker operator take in the plain Python
            functions before it when the job is executed (:mod:`pyflink_gcp.core.fusion`);
            False keeps it in a chain of its own.
        checkpoint_markers: Use the Java bridge's marker operator where possible, so that only
            checkpoint barriers and the end of input wait for the writes.
        retry_deadline_s: The writer options' ``retry_deadline`` in seconds, handed to what the
            subtask opens besides the writers (a dead-letter queue), so every call of the sink
            shares one bound.
        requires_bridge: What needs the Java bridge's operator (an exactly-once write method,
            say ``"WriteMethod.FILE_LOADS"``), or None. Such a sink cannot run without it, so
            building the job without the jar (or with markers off, or chained upstream) fails
            with a ConfigurationError naming this, before any record is written.
        uid: The base of the stateful operators' uids (``set_uid``): the writer gets
            ``<uid>-writer``, an exactly-once sink's committer ``<uid>-committer``.
        write_results: Count what each checkpoint writes per destination
            (:mod:`pyflink_gcp.core.results`); set by ``write_with_results``, never by a
            builder.
        lineage: Who hears of each destination a subtask starts writing to, and how many at
            most (``set_lineage_listener``, ``set_max_lineage_datasets``).
        carry: Whether and how long records wait across checkpoints in the marker operator's
            state instead of being sent at each one (``max_carry_time``,
            :mod:`pyflink_gcp.core.carry`).
    """

    sink_name: str
    factory: WriterFactory[Any]
    resolver: Any
    serializer: Any
    failure_handler: FailureHandler = field(default_factory=FailureHandler.fail_job)
    idle_timeout_s: float | None = 15 * 60.0
    max_active: int | None = None
    max_buffered_records: int = 10_000
    max_buffer_time_ms: int = 1_000
    per_destination_metrics: bool = False
    fixed_destination: Destination | None = None
    chain_with_upstream: bool = True
    checkpoint_markers: bool = True
    retry_deadline_s: float | None = None
    requires_bridge: str | None = None
    uid: str | None = None
    write_results: bool = False
    lineage: LineageSettings = field(default_factory=LineageSettings)
    carry: CarrySettings = field(default_factory=CarrySettings)


class SinkWriter:
    """One sink subtask's writer. Driven by the operator on the processing thread.

    Lifecycle: ``open(info)`` → ``write(record)`` * → ``flush()`` before every checkpoint
    barrier and at the end of input → ``close()``. With checkpoint markers, the other bundle
    ends call ``send_due()``; without them every bundle end calls ``flush()``.

    Under markers a bundle end may leave young batches open. PyFlink ends no bundle while no
    record comes, so a background thread sends those batches once they are due; the
    processing thread holds ``_lock`` from its first call after a bundle end to the end of the
    bundle, so that thread only touches the writers between bundles.
    """

    def __init__(self, config: SinkConfig) -> None:
        self.config = config
        self.context = WriterContext()
        #: Added to the first committables of the attempt (a committing factory only).
        self._started: WriterStarted | None = None
        self._sink = config.sink_name
        self._factory = config.factory
        self._dest_type = config.factory.destination_type
        self._fixed = config.fixed_destination
        self._resolve = as_resolver(config.resolver, self._sink) if self._fixed is None else None
        # A resolver whose records carry their destination (routing.LiveRules) hands the
        # serializer the record inside.
        unwrap = getattr(config.resolver, "record_of", None)
        self._unwrap = unwrap if callable(unwrap) else None
        serializer = config.serializer
        method = getattr(serializer, "serialize", None)
        self._serialize = method if callable(method) else serializer
        if not callable(self._serialize):
            raise SerializerError(f"sink '{self._sink}': the serializer must be callable")
        self._router = FailureRouter(config.failure_handler)
        self._lineage = LineageReporter(self._sink, config.lineage)
        self._registry: WriterRegistry[Any] = WriterRegistry(
            self._create_writer,
            idle_timeout_s=config.idle_timeout_s,
            max_active=config.max_active,
            on_failures=self._handle_failures,
            on_close=self._count_bytes,
            on_open=self._lineage.resolved if self._lineage.enabled else None,
            sink_name=self._sink,
        )
        self._per_destination = config.per_destination_metrics
        self._destination_metrics = DestinationMetrics(None)
        self.records_in = 0
        self.records_written = 0
        self.skipped = 0
        #: Bytes the writers accepted, as counted at full flushes and writer closes.
        self.bytes_written = 0
        self.flushes = 0
        self.last_flush_s = 0.0
        #: The longest full flush so far (its gauge keeps the spikes a sampled last value misses).
        self.max_flush_s = 0.0
        #: ``time.monotonic()`` at the end of the last full flush (or at creation).
        self.flushed_at = time.monotonic()
        self._opened = False
        #: Whether the factory's writes need a commit after the checkpoint (exactly once).
        self.commits = commits(config.factory)
        #: Under markers, an open batch is sent at a bundle end once it is this old.
        self.due_after_s = config.max_buffer_time_ms / 1000.0
        #: How often the background thread looks for due batches between bundles.
        self.tick_s = max(0.001, self.due_after_s / 2)
        #: Batches left open at bundle ends because they were younger than ``due_after_s``.
        self.batches_held = 0
        self._lock = threading.Lock()
        self._holding = False
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()
        self._background_error: BaseException | None = None
        self._subtask = 0
        #: Per-destination counts for the write results (``write_with_results`` only).
        self.results = result_collector(config) if config.write_results else None
        #: The records carried across checkpoints (``max_carry_time`` only).
        self.carried: CarriedRecords | None = (
            CarriedRecords(config.carry, self._write_carried) if config.carry.enabled else None
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def open(self, info: SubtaskInfo, metric_group: Any = None) -> None:
        self.context.subtask_index = info.subtask_index
        self.context.number_of_parallel_subtasks = info.number_of_parallel_subtasks
        self._subtask = info.subtask_index
        self._started = WriterStarted(
            info.subtask_index, info.number_of_parallel_subtasks, info.attempt_number
        )
        self._factory.open(info)
        self._router.open(info)
        if self.results is not None:
            self.results.open(info.subtask_index)
        self._lineage.open(info, metric_group)
        if self._per_destination:
            self._destination_metrics = DestinationMetrics(metric_group)
        self._opened = True
        _LOG.info(
            "%s: subtask %d/%d opened",
            self._sink,
            info.subtask_index,
            info.number_of_parallel_subtasks,
        )

    def close(self) -> None:
        """Release everything without flushing: a normal end already flushed at the last bundle
        end, and after a failure the unflushed records are replayed from the checkpoint."""
        self._stop.set()
        self._enter(raise_background=False)
        try:
            if self._ticker is not None:
                self._ticker.join(timeout=5.0)
                self._ticker = None
        finally:
            self._leave()
        pending = self._registry.dirty
        if pending:
            _LOG.warning(
                "%s: closing with %d destinations not flushed (they will be replayed)",
                self._sink,
                pending,
            )
        if self.carried is not None and self.carried.records:
            _LOG.info(
                "%s: closing with %d records of %d destinations carried (a restore brings "
                "back those of its checkpoint; the source replays the later ones)",
                self._sink,
                self.carried.records,
                len(self.carried),
            )
        self._registry.close_all()
        try:
            self._factory.close()
        finally:
            self._router.close()
            self._lineage.close()
        if self._opened:
            _LOG.info(
                "%s: subtask %d closed: %d records written (%d bytes counted) through %d "
                "destination writers opened, %d skipped by the serializer, %d dropped, "
                "%d dead-lettered",
                self._sink,
                self._subtask,
                self.records_written,
                self.bytes_written,
                self._registry.created,
                self.skipped,
                self._router.dropped,
                self._router.dead_lettered,
            )

    # -- hot path ----------------------------------------------------------------------------

    def write(self, record: Any) -> None:
        """Route one record. Raises a SinkError naming the sink for bad resolver/serializer output."""
        if not self._holding:
            self._enter()
        self.records_in += 1
        ctx = self.context
        if self._resolve is not None:
            try:
                destination = self._resolve(record, ctx)
            except Exception as exc:
                raise ResolverError(
                    f"sink '{self._sink}': destination resolver "
                    f"{describe_callable(self.config.resolver)} raised {type(exc).__name__}: "
                    f"{exc} for record {short_repr(record)}"
                ) from exc
            if type(destination) is not self._dest_type:
                destination = self._check_destination(destination, record)
                if destination is None:
                    return
            if self._unwrap is not None:
                record = self._unwrap(record)
        else:
            destination = self._fixed
        try:
            element = self._serialize(record, ctx)
        except Exception as exc:
            error = self._serializer_failed(exc, record)
            if error is exc:
                raise
            raise error from exc
        if element is None:
            self.skipped += 1
            return
        if type(element) is UnroutableRecord:
            # A sink without a resolver (Spanner) learns from its serializer that a record
            # names no valid destination.
            self._check_destination(element, record)
            return
        if self.carried is not None:
            self.carried.hold(destination, element, record)
        else:
            self._registry.get(destination).write(element, record)
        if self._per_destination:
            self._destination_metrics.written(destination, 0)
        self.records_written += 1
        if self.results is not None:
            self.results.add(destination, ctx.timestamp)

    def _serializer_failed(self, exc: Exception, record: Any, what: str = "record") -> Exception:
        """The error to raise for ``exc``, raised by the serializer for ``record``.

        Schema functions raise SinkErrors without knowing the sink: such an error keeps its type
        and gets the sink's name once (``exc`` itself when it has it). Anything else becomes a
        SerializerError naming the sink, the serializer and the record (``what`` it was).
        """
        if isinstance(exc, SinkError):
            if str(exc).startswith("sink '"):
                return exc
            return type(exc)(f"sink '{self._sink}': {exc}")
        return SerializerError(
            f"sink '{self._sink}': serializer {describe_callable(self.config.serializer)} "
            f"raised {type(exc).__name__}: {exc} for {what} {short_repr(record)}"
        )

    def _check_destination(self, destination: Any, record: Any) -> Any:
        """Slow path of the type check: subclasses, UnroutableRecord, None and wrong types."""
        if isinstance(destination, self._dest_type):
            return destination
        resolver = describe_callable(self.config.resolver)
        if isinstance(destination, UnroutableRecord):
            if not self._factory.accepts_unroutable:
                raise ResolverError(
                    f"sink '{self._sink}': destination resolver {resolver} returned an "
                    f"UnroutableRecord, which this sink does not accept, for record "
                    f"{short_repr(record)}"
                )
            self._router.handle(
                FailedRecord(
                    sink=self._sink,
                    destination=UNRESOLVED,
                    reason=destination.reason,
                    payload=destination.payload,
                    record_repr=short_repr(record),
                )
            )
            return None
        if destination is None:
            raise ResolverError(
                f"sink '{self._sink}': destination resolver {resolver} returned None for record "
                f"{short_repr(record)}; every record needs a {self._dest_type.__name__}"
            )
        raise ResolverError(
            f"sink '{self._sink}': destination resolver {resolver} returned "
            f"{type(destination).__name__} ({short_repr(destination)}) for record "
            f"{short_repr(record)}; expected a {self._dest_type.__name__}"
        )

    # -- flushing ----------------------------------------------------------------------------

    def flush(self) -> None:
        """Make everything written so far durable (or handed to the failure handler).

        Called before every checkpoint barrier (which waits for it) and at the end of input.
        Starts all destinations' sends first, then waits for each, so destinations flush in
        parallel. Evicts idle writers only after the whole flush succeeded.
        """
        self._enter()
        try:
            start = time.monotonic()
            writers = self._start_all()
            failures: list[FailedRecord] = []
            for writer in writers:
                failures.extend(writer.flush())
            self._registry.finish_releases()  # their failures go to _handle_failures directly
            failures.extend(self._factory.flush_shared())
            self._handle_failures(failures)
            self._router.flush()
            for writer in self._registry:
                self._count_bytes(writer)
            self._registry.evict_idle()
            self.flushes += 1
            self.flushed_at = time.monotonic()
            self.last_flush_s = self.flushed_at - start
            self.max_flush_s = max(self.max_flush_s, self.last_flush_s)
        finally:
            self._leave()

    def _count_bytes(self, writer: DestinationWriter[Any]) -> None:
        """Count what ``writer`` accepted since it was last counted (at every full flush and
        when it closes: a writer that encodes its requests on a sender thread knows its bytes
        only then)."""
        delta = writer.bytes_accepted - writer.bytes_reported
        if delta:
            writer.bytes_reported += delta
            self.bytes_written += delta
            if self._per_destination:
                self._destination_metrics.bytes(writer.destination, delta)

    def prepare(self, checkpoint_id: int) -> list[Any]:
        """The committables of a committing factory, right after the flush at a marker; the
        first call of an attempt adds its :class:`~pyflink_gcp.core.commit.WriterStarted`."""
        factory = self._factory
        assert isinstance(factory, CommittingWriterFactory)
        self._enter()
        try:
            committables = factory.prepare_commit(checkpoint_id)
        finally:
            self._leave()
        started, self._started = self._started, None
        return committables if started is None else [*committables, started]

    def start_sends(self) -> list[DestinationWriter[Any]]:
        """Hand every destination's buffered records to its sender, without waiting.

        The first half of :meth:`flush`, and a bundle end that sends every open batch however
        young. Results (and failures) are collected by the next :meth:`flush`.

        Returns:
            The writers that were not clean.
        """
        self._enter()
        try:
            return self._start_all()
        finally:
            self._leave()

    def _start_all(self) -> list[DestinationWriter[Any]]:
        writers = [w for w in self._registry if not w.is_clean]
        for writer in writers:
            writer.start_flush()
        return writers

    def send_due(self) -> None:
        """An ordinary bundle end under checkpoint markers: send the batches that are due.

        A batch is due when its oldest record is ``max_buffer_time`` old; a full one left
        when it filled. Younger batches stay open to fill further instead of leaving,
        whatever their size, at every bundle end: bundles also end by size
        (``max_buffered_records``), often at high rates, where a subtask writing to
        thousands of destinations would send a request of a record or two per destination.
        PyFlink's bundle timer (every ``max_buffer_time``) ends a bundle only when a whole
        interval passed since the last bundle end, so a record waits up to about twice
        ``max_buffer_time``, as it already did when every bundle end sent everything. Only
        the checkpoint marker's :meth:`flush` sends everything and waits. The open batches
        keep at most ``max_buffered_records`` records: beyond that the oldest are sent too.
        Writes stay in flight; their results are collected by the next :meth:`flush`.
        """
        self._enter()
        try:
            held = self._send_due(time.monotonic())
            self.batches_held += held
            if held and self._ticker is None:
                self._start_ticker()
        finally:
            self._leave()

    def _send_due(self, now: float) -> int:
        """Start the due sends (the caller holds ``_lock``); returns how many batches stay open,
        carried ones included."""
        carried = self.carried
        if carried is not None:
            carried.hand_on_due()
        cutoff = now - self.due_after_s
        held: list[DestinationWriter[Any]] = []
        held_records = 0
        for writer in self._registry:
            since = writer.unsent_since
            if since <= cutoff:
                if not writer.is_clean:
                    writer.start_flush()
            elif since != math.inf:
                held.append(writer)
                held_records += writer.unsent_records
        limit = self.config.max_buffered_records
        if held_records > limit:
            held.sort(key=lambda w: w.unsent_since)
            while held and held_records > limit:
                writer = held.pop(0)
                held_records -= writer.unsent_records
                writer.start_flush()
        return len(held) + (len(carried) if carried is not None else 0)

    # -- the processing thread's lock and the background sends ------------------------------

    def _enter(self, raise_background: bool = True) -> None:
        """Take ``_lock`` for the processing thread (until the bundle ends), and raise what a
        background send raised meanwhile, on this thread, so it fails the task."""
        if not self._holding:
            self._lock.acquire()
            self._holding = True
        error = self._background_error
        if error is not None and raise_background:
            self._background_error = None
            raise error

    def _leave(self) -> None:
        """A bundle ends: let the background thread send what comes due before the next one."""
        if self._holding:
            self._holding = False
            self._lock.release()

    def _start_ticker(self) -> None:
        self._ticker = threading.Thread(
            target=self._tick,
            name=f"{self._sink}-{self._subtask}-due-sends",
            daemon=True,
        )
        self._ticker.start()

    def _tick(self) -> None:
        """Between bundles, send the batches that came due (the input may have stopped)."""
        while not self._stop.wait(self.tick_s):
            if self._background_error is not None or not self._lock.acquire(blocking=False):
                continue  # a bundle is running: its end sends what is due
            try:
                if not self._stop.is_set():
                    self._send_due(time.monotonic())
            except BaseException as exc:  # noqa: BLE001 - raised on the processing thread
                self._background_error = exc
            finally:
                self._lock.release()

    def _handle_failures(self, failures: list[FailedRecord]) -> None:
        for failed in failures:
            if self.results is not None:
                self.results.failed(failed.destination)
            self._destination_metrics.error(failed.destination)
            self._router.handle(failed)

    # -- carried records (max_carry_time) ---------------------------------------------------

    def _write_carried(self, destination: Any, entries: list[tuple[Any, Any, int]]) -> None:
        """Hand a carried batch to its destination's writer (:class:`CarriedRecords`)."""
        writer = self._registry.get(destination)
        for element, record, _ in entries:
            writer.write(element, record)

    def hand_on_carried(self) -> None:
        """Hand every carried record to its writer: the end of input, before the last flush."""
        if self.carried is None:
            return
        self._enter()
        try:
            self.carried.hand_on_all()
        finally:
            self._leave()

    def take_carried_state(self) -> bytes | None:
        """What the marker operator keeps of the carried records, after a marker's flush
        (:meth:`CarriedRecords.take_state`); None for nothing new."""
        if self.carried is None:
            return None
        self._enter()
        try:
            return self.carried.take_state()
        finally:
            self._leave()

    def restore_carried(self, parameter: str | None) -> int:
        """Take back the records a restored marker operator kept (:data:`~pyflink_gcp.core.
        carry.CARRY_STATE_PARAMETER`): serialized again and carried, or written when this
        sink no longer carries (a savepoint of a job that did). Returns how many."""
        count = 0
        self._enter()
        try:
            for destination, records in decode_restored(parameter):
                for record in records:
                    try:
                        element = self._serialize(record, self.context)
                    except Exception as exc:
                        error = self._serializer_failed(exc, record, "restored record")
                        if error is exc:
                            raise
                        raise error from exc
                    if element is None or type(element) is UnroutableRecord:
                        continue  # it was written once: the serializer took it then
                    if self.carried is not None:
                        self.carried.hold(destination, element, record)
                    else:
                        self._registry.get(destination).write(element, record)
                    count += 1
        finally:
            self._leave()
        if count:
            _LOG.info(
                "%s: subtask %d took back %d carried records from the restored checkpoint",
                self._sink,
                self._subtask,
                count,
            )
        return count

    # -- registry and metrics ----------------------------------------------------------------

    def _create_writer(self, destination: Destination) -> DestinationWriter[Any]:
        return self._factory.create_writer(destination)

    @property
    def registry(self) -> WriterRegistry[Any]:
        return self._registry

    @property
    def router(self) -> FailureRouter:
        return self._router

    @property
    def lineage(self) -> LineageReporter:
        """The subtask's lineage reporter: the operator restores it and takes its state."""
        return self._lineage
