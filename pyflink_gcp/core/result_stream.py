"""``sink.write_with_results(ds)``: the sink's writer (and committer) wired to emit its write
results and failed records as streams of the job.

The values and when they are emitted are in :mod:`pyflink_gcp.core.results`. The wiring (facts
pinned to PyFlink 2.3):

- The writer runs as with ``ds.sink_to(sink)`` (:func:`~pyflink_gcp.core.runtime.add_writer_operator`),
  with a function that, after the flush at each checkpoint's marker, takes the subtask's
  :class:`~pyflink_gcp.core.results.ResultCollector`: an at-least-once writer emits the results
  to the side output ``"<sink>: write results"``; an exactly-once writer adds them to its
  committables, and the committer (:mod:`pyflink_gcp.core.commit_operator`) emits them to that
  side output after the commit. The committer's main output is what it keeps (the Java bridge
  captures it); side outputs pass it.
- Failed records (:meth:`~pyflink_gcp.core.failure.FailureHandler.to_stream`) leave the writer
  at the same markers, or with the next record when a flush between markers found them, to
  the side output ``"<sink>: failed records"``.
- Results need the Java bridge's marker operator: PyFlink's own operator flushes inside a
  metric gauge, where nothing can be emitted. A sink without it refuses to build
  (``SinkConfig.requires_bridge``); ``set_chain_with_upstream()`` is set aside, since a fused
  writer's side outputs would be its upstream's.
- PyFlink registers a Python operator's side outputs when the job is built, from the side
  output streams that reach a sink. Both side outputs therefore end in a discarding sink of
  their own, so that the writer's and the committer's side outputs exist whether or not the
  job reads them (a committer whose results went to its main output would keep them).
- A commit after the committer's operators finished emits nothing: the discarding sink chained
  to it, like any finished operator, refuses a record then (Flink's sink writer fails its task
  on one), so the Python committer logs those results and the Java side drops any that come.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from pyflink.datastream import DataStream

from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.operators import (
    MarkedWriterProcessFunction,
    TypedMarkedWriterProcessFunction,
    WriterProcessFunction,
)
from pyflink_gcp.core.results import output_tags
from pyflink_gcp.core.sink_writer import SinkConfig

__all__ = ["WriteResultStream", "results_function", "results_stream", "write_with_results"]

_LOG = logging.getLogger("pyflink_gcp.runtime")


class WriteResultStream(DataStream):
    """The ``DataStream`` of :class:`~pyflink_gcp.core.results.WriteResult` values
    ``sink.write_with_results(ds)`` returns; :meth:`failed` gives the failed records."""

    def __init__(self, j_data_stream: Any, sink_name: str, failed: DataStream | None) -> None:
        super().__init__(j_data_stream)
        self._sink_name = sink_name
        self._failed = failed

    def failed(self) -> DataStream:
        """The ``DataStream`` of :class:`~pyflink_gcp.core.failure.FailedRecord` values the
        failure handler hands over; the sink must be built with
        ``set_failure_handler(FailureHandler.to_stream())``.

        Raises:
            ConfigurationError: The sink's failure handler is another one.
        """
        if self._failed is None:
            raise ConfigurationError(
                f"sink '{self._sink_name}': failed() needs the failure handler "
                "FailureHandler.to_stream(); with another handler no failed record reaches "
                "the job (set_failure_handler(FailureHandler.to_stream()))"
            )
        return self._failed


def write_with_results(ds: DataStream, config: SinkConfig, name: str) -> WriteResultStream:
    """Add the sink's writer (and committer) after ``ds``, emitting results; see the module."""
    from pyflink_gcp.core.runtime import add_writer_operator

    if config.chain_with_upstream:
        _LOG.info(
            "sink '%s': write_with_results() runs the writer in an operator of its own "
            "(set_chain_with_upstream() is set aside)",
            config.sink_name,
        )
    config = dataclasses.replace(
        config,
        write_results=True,
        chain_with_upstream=False,
        requires_bridge=config.requires_bridge or "write_with_results()",
    )
    out = add_writer_operator(ds, config, name)
    assert isinstance(out, WriteResultStream)
    return out


def results_function(func_class: type[WriterProcessFunction]) -> type[WriterProcessFunction]:
    """The writer function that emits results, for the marker function ``func_class``."""
    if func_class is TypedMarkedWriterProcessFunction:
        return TypedResultsWriterFunction
    if func_class is MarkedWriterProcessFunction:
        return ResultsWriterFunction
    raise ConfigurationError(f"write results need a checkpoint-marker writer, not {func_class}")


def results_stream(config: SinkConfig, writer: DataStream, last: DataStream) -> WriteResultStream:
    """The results stream of a writer (``writer``) and its committer, if any (``last``)."""
    from pyflink.java_gateway import get_gateway

    results_tag, failed_tag = output_tags(config.sink_name)
    jvm = get_gateway().jvm
    discarding = jvm.org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink
    for stream, tag in ((last, results_tag), (writer, failed_tag)):
        side = stream._j_data_stream.getSideOutput(tag.get_java_output_tag())
        side.sinkTo(discarding()).name(f"{tag.tag_id} (discarded)")
    results = last.get_side_output(results_tag).name(f"{config.sink_name}: Write results")
    failed = None
    if config.failure_handler.streams_failures:
        failed = writer.get_side_output(failed_tag).name(f"{config.sink_name}: Failed records")
    return WriteResultStream(results._j_data_stream, config.sink_name, failed)


class _EmitsResults(WriterProcessFunction):
    """What the results writers add to a marker writer function (see the module docstring)."""

    def __init__(self, config: SinkConfig) -> None:
        super().__init__(config)
        self._results_tag, self._failed_tag = output_tags(config.sink_name)

    def _on_marker(self, marker_id: int) -> list[Any] | None:
        committables = super()._on_marker(marker_id)
        writer = self._writer
        assert writer is not None and writer.results is not None
        results = writer.results.take(marker_id)
        out: list[Any] = list(committables or ())
        if writer.commits:
            out.extend(results)  # the committer emits them after the commit
        else:
            out.extend((self._results_tag, result) for result in results)
        out.extend((self._failed_tag, failed) for failed in writer.router.take_pending())
        return out or None

    def _with_failed(self, out: list[Any] | None) -> list[Any] | None:
        """``out`` and the failed records a flush between markers found (at a bundle end)."""
        writer = self._writer
        if writer is None or not writer.router.pending:
            return out
        failed = [(self._failed_tag, f) for f in writer.router.take_pending()]
        return [*(out or ()), *failed]


class ResultsWriterFunction(_EmitsResults, MarkedWriterProcessFunction):
    """:class:`~pyflink_gcp.core.operators.MarkedWriterProcessFunction` emitting results."""

    def process_element(self, value: Any, ctx: Any) -> list[Any] | None:
        return self._with_failed(MarkedWriterProcessFunction.process_element(self, value, ctx))


class TypedResultsWriterFunction(_EmitsResults, TypedMarkedWriterProcessFunction):
    """:class:`~pyflink_gcp.core.operators.TypedMarkedWriterProcessFunction` emitting results."""

    def process_element(self, value: Any, ctx: Any) -> list[Any] | None:
        return self._with_failed(TypedMarkedWriterProcessFunction.process_element(self, value, ctx))
