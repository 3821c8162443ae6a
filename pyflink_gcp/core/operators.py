"""What runs on the worker: the writer operator's Python functions.

:mod:`pyflink_gcp.core.runtime` builds the job graph in the client and picks one of these
functions for the writer operator; PyFlink pickles it (by reference to this module) and runs it
in the Python worker. There it opens a :class:`~pyflink_gcp.core.sink_writer.SinkWriter`, hands
it every record and decides, at every bundle end, whether the writer waits for its writes:

- **At every bundle end** (:class:`WriterProcessFunction`), where the writer runs as PyFlink's
  own process operator. The operator's ``prepareSnapshotPreBarrier`` ends the current bundle and
  waits for the Python side, which evaluates the operator's metric gauges at every bundle end;
  the writer registers its flush as a gauge (``FLUSH_GAUGE``), so every checkpoint barrier
  waits for a full flush. Python alone cannot tell a checkpoint's bundle end from a size or
  time one, so every bundle end waits.
- **At checkpoint markers** (:class:`MarkedWriterProcessFunction`,
  :class:`TypedMarkedWriterProcessFunction`), where the writer runs as the Java bridge's marker
  operator (:mod:`pyflink_gcp.core.bridge`). That operator puts a ``(MARKER_TAG,
  checkpoint_id)`` element into the input just before each barrier's bundle end and one
  (``END_OF_INPUT``) at the end of input. The writer waits for its writes at those markers
  only; an ordinary bundle end hands the batches that are due (``max_buffer_time`` old) to the
  senders and goes on, so writes stay in flight while records keep coming and young batches
  keep filling. After ``MARKERLESS_FLUSH_S`` without a marker, an ordinary bundle end waits for
  everything. The barrier still waits for the marker's flush, so the delivery guarantee is the
  same. On a typed stream (records that are not pickled Python objects; a keyed stream's
  values) a record comes as it is and a marker as an element without a value whose watermark
  says it is one (:func:`bare_marker_id`).

Every :class:`~pyflink_gcp.core.errors.NonRetriableSinkError` leaving a function (from
``open``, a record, a marker or a bundle end) is marked on its way out
(:func:`~pyflink_gcp.core.errors.mark_non_retriable`); the bridge's operator finds the mark in
the failure PyFlink reports and ends the job once instead of restarting it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pyflink.datastream.functions import KeyedProcessFunction, ProcessFunction, RuntimeContext

from pyflink_gcp.core.carry import CARRY_STATE_PARAMETER
from pyflink_gcp.core.errors import ConfigurationError, NonRetriableSinkError, mark_non_retriable
from pyflink_gcp.core.lineage import LINEAGE_STATE_PARAMETER
from pyflink_gcp.core.metrics import SINK_GROUP
from pyflink_gcp.core.runtime_info import subtask_info
from pyflink_gcp.core.sink_writer import SinkConfig, SinkWriter

__all__ = [
    "BARE_MARKER_WATERMARK",
    "END_OF_INPUT",
    "FLUSH_GAUGE",
    "MARKERLESS_FLUSH_S",
    "MARKER_TAG",
    "MarkedWriterProcessFunction",
    "TypedMarkedWriterProcessFunction",
    "WriterProcessFunction",
    "bare_marker_id",
    "writer_function",
]

# The logger users know from docs/production.md; the job wiring logs under it too.
_LOG = logging.getLogger("pyflink_gcp.runtime")

#: The name of the operator's metric gauge whose evaluation at every bundle end is the flush.
FLUSH_GAUGE = "pyflinkGcpFlushes"

#: The first item of a marker element; the Java operator pickles ``(MARKER_TAG, id)``.
MARKER_TAG = "\x00pyflink-gcp:checkpoint"
#: The id of the marker sent at the end of input.
END_OF_INPUT = -1
#: The watermark of a typed stream's marker of id 0 (the bridge's ``CheckpointMarkers.
#: BARE_MARKER_WATERMARK``): -2^62 ms, about 146 million years before 1970, which no stream's
#: watermark reaches. The marker of id ``i`` carries ``BARE_MARKER_WATERMARK + i``.
BARE_MARKER_WATERMARK = -(2**62)
#: Under markers, an ordinary bundle end still waits for everything when no marker came for
#: this long: a job without checkpoints (or with rare ones) then still retries failed writes
#: and surfaces errors within this time, and no failed write is held indefinitely.
MARKERLESS_FLUSH_S = 30.0
#: Marker ids are below this (checkpoint ids count up from 1).
_MARKER_IDS = 2**40


def bare_marker_id(value: Any, ctx: Any) -> int | None:
    """The id of the marker the element ``value`` is, or None: a record (a None one included).

    On a typed stream (a keyed stream's typed values) the marker operator sends its records as
    they are (Python decodes them as it would without markers) and a marker as an element
    without a value, no timestamp and the watermark ``BARE_MARKER_WATERMARK + id``; PyFlink
    sets the context's watermark from each element, so only an element without a value has its
    watermark read.
    """
    if value is not None:
        return None
    offset = ctx.timer_service().current_watermark() - BARE_MARKER_WATERMARK
    return offset if END_OF_INPUT <= offset < _MARKER_IDS else None


class WriterProcessFunction(ProcessFunction, KeyedProcessFunction):
    """The writer operator's Python function, on a plain or a keyed stream.

    PyFlink's process-mode runtime tells a keyed function from a plain one by the function type
    the operator is built with (``KEYED_PROCESS`` or ``PROCESS``), not by its class: either way it
    calls ``open``, ``process_element`` and ``close``, and ``on_timer`` only for timers, which a
    writer never registers. So one class is both kinds of function, and its subclasses differ
    only in what their input elements are. This one writes every element and waits for its
    writes at every bundle end.
    """

    #: Checkpoints are marked in the input: ordinary bundle ends need not wait.
    _marked = False

    def __init__(self, config: SinkConfig) -> None:
        self._config = config
        self._writer: SinkWriter | None = None
        self.markers = 0

    def open(self, runtime_context: RuntimeContext) -> None:
        try:
            self._open(runtime_context)
        except NonRetriableSinkError as exc:
            mark_non_retriable(exc)
            raise

    def _open(self, runtime_context: RuntimeContext) -> None:
        group = runtime_context.get_metrics_group()
        if group is None:
            raise ConfigurationError(
                f"sink '{self._config.sink_name}': Python metrics are disabled "
                "(python.metric.enabled=false). pyflink-gcp flushes before each checkpoint "
                "barrier through the operator's metric hook; without it records could be lost "
                "on failure, so the sink refuses to run. Enable python.metric.enabled."
            )
        info = subtask_info(runtime_context, self._config)
        writer = SinkWriter(self._config)
        sink_group = group.add_group(SINK_GROUP)
        writer.open(info, sink_group)
        # The bridge's marker operator hands over what the subtask reported before a restore.
        writer.lineage.restore(runtime_context.get_job_parameter(LINEAGE_STATE_PARAMETER, None))
        # ... and the records it carried across the checkpoint (pyflink_gcp.core.carry).
        writer.restore_carried(runtime_context.get_job_parameter(CARRY_STATE_PARAMETER, None))
        self._writer = writer
        group.gauge(FLUSH_GAUGE, self._on_bundle_end)
        sink_group.gauge("activeWriters", lambda: len(writer.registry))
        sink_group.gauge("writersReleased", lambda: writer.registry.released)
        sink_group.gauge("recordsWritten", lambda: writer.records_written)
        sink_group.gauge("recordsSkipped", lambda: writer.skipped)
        sink_group.gauge("recordsDropped", lambda: writer.router.dropped)
        sink_group.gauge("recordsDeadLettered", lambda: writer.router.dead_lettered)
        sink_group.gauge("lastFlushMillis", lambda: int(writer.last_flush_s * 1000))
        sink_group.gauge("maxFlushMillis", lambda: int(writer.max_flush_s * 1000))
        sink_group.gauge("checkpointMarkers", lambda: self.markers)
        carried = writer.carried
        if carried is not None:
            sink_group.gauge("recordsCarried", lambda: carried.records)
            sink_group.gauge("carriedChunksKept", lambda: carried.chunks_kept)
        for name, read in self._config.factory.gauges().items():
            sink_group.gauge(name, read)

    def _on_bundle_end(self) -> int:
        assert self._writer is not None
        try:
            if self._marked and time.monotonic() - self._writer.flushed_at < MARKERLESS_FLUSH_S:
                self._writer.send_due()
            else:
                self._writer.flush()
        except NonRetriableSinkError as exc:
            mark_non_retriable(exc)
            raise
        return self._writer.flushes

    def _on_marker(self, marker_id: int) -> list[Any] | None:
        """A checkpoint barrier (or the end of input) follows: everything written must be durable.

        Returns:
            A committing writer's committables, the operator's output to the committer (they
            leave before the barrier), and what the marker operator keeps in its state: the
            lineage datasets reported since the last marker
            (:meth:`~pyflink_gcp.core.lineage.LineageReporter.take_state`) and the records
            carried across this checkpoint (:meth:`~pyflink_gcp.core.carry.CarriedRecords.
            take_state`); None for none.
        """
        writer = self._writer
        assert writer is not None
        self.markers += 1
        try:
            if marker_id == END_OF_INPUT:
                writer.hand_on_carried()
            writer.flush()
            committables = writer.prepare(marker_id) if writer.commits else None
            carried = writer.take_carried_state()
        except NonRetriableSinkError as exc:
            mark_non_retriable(exc)
            raise
        lineage = writer.lineage.take_state()
        if lineage is not None:
            committables = [*(committables or ()), lineage]
        if carried is not None:
            committables = [*(committables or ()), carried]
        _LOG.debug(
            "%s: flushed for %s",
            self._config.sink_name,
            "the end of input" if marker_id == END_OF_INPUT else f"checkpoint {marker_id}",
        )
        return committables

    def _write(self, value: Any, ctx: Any) -> list[Any] | None:
        """Write one record; no output (the return type is ``process_element``'s)."""
        writer = self._writer
        assert writer is not None
        writer.context._set_time(ctx.timestamp(), ctx.timer_service().current_watermark())
        try:
            writer.write(value)
        except NonRetriableSinkError as exc:
            mark_non_retriable(exc)
            raise
        return None

    process_element = _write

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class MarkedWriterProcessFunction(WriterProcessFunction):
    """The writer of pickled Python objects under a marker operator.

    A marker is the tuple ``(MARKER_TAG, checkpoint id)`` among the records (a keyed stream's
    values); the writer waits for its writes only there.
    """

    _marked = True

    def process_element(self, value: Any, ctx: Any) -> list[Any] | None:
        if type(value) is tuple and len(value) == 2 and value[0] == MARKER_TAG:
            return self._on_marker(value[1])
        self._write(value, ctx)
        return None


class TypedMarkedWriterProcessFunction(WriterProcessFunction):
    """The writer of typed records (a keyed stream's typed values) under a marker operator.

    A record comes as it is; a marker is an element without a value (:func:`bare_marker_id`).
    """

    _marked = True

    def process_element(self, value: Any, ctx: Any) -> list[Any] | None:
        marker = bare_marker_id(value, ctx)
        if marker is not None:
            return self._on_marker(marker)
        self._write(value, ctx)
        return None


def writer_function(config: SinkConfig, *, marked: bool, typed: bool) -> WriterProcessFunction:
    """The writer function for ``config`` in the operator the job wiring chose.

    The writer's own operator and the fused one (:mod:`pyflink_gcp.core.fusion`) both ask here,
    so the choice of class (markers or not, typed rows or pickled objects, results or not) is
    made in one place.

    Args:
        config: The sink's settings; ``config.write_results`` picks the function that emits
            results at each marker.
        marked: Whether the operator sends checkpoint markers among the records.
        typed: Whether the records (a keyed stream's values) are typed, not pickled objects:
            a marker is then an element without a value (:func:`bare_marker_id`).

    Raises:
        ConfigurationError: Results were asked of a writer without markers, which has no
            point at which to emit them.
    """
    func_class: type[WriterProcessFunction] = WriterProcessFunction
    if marked:
        func_class = TypedMarkedWriterProcessFunction if typed else MarkedWriterProcessFunction
    if config.write_results:
        from pyflink_gcp.core.result_stream import results_function

        func_class = results_function(func_class)
    return func_class(config)
