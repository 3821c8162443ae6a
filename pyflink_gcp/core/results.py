"""Write results: what each checkpoint made durable (or committed), per destination.

``sink.write_with_results(ds)`` (:mod:`pyflink_gcp.core.result_stream`) writes ``ds`` like
``ds.sink_to(sink)`` and returns a ``DataStream`` of :class:`WriteResult` values, one per
destination per checkpoint, and on request a stream of the
:class:`~pyflink_gcp.core.failure.FailedRecord` values the failure handler
:meth:`~pyflink_gcp.core.failure.FailureHandler.to_stream` hands over instead of a dead-letter
topic. This module holds the values and their bookkeeping; it needs no JVM.

When a result is emitted:

- **At least once** (every sink but BigQuery's exactly-once methods): by each writer subtask,
  right after the flush at a checkpoint's marker, the flush the checkpoint barrier waits for.
  Everything counted is durable then; the checkpoint may still fail, and the records after
  the checkpoint before it are replayed and counted again, under a later checkpoint id.
- **Exactly once** (``WriteMethod.BUFFERED_STREAM``, ``WriteMethod.FILE_LOADS``): the writers
  hand their counts to the committer with their committables, and the committer emits them
  only after the commit of that checkpoint's set, merged over the writer subtasks. A
  destination whose writes the committer keeps for later (FILE_LOADS' ``min_load_interval``,
  a load job still running) has its results kept with them, in the committer's state, and
  emitted after the commit that publishes them.
- **After the operators finished** (a bounded job's final checkpoint, a stop-with-savepoint's
  savepoint): Flink has sent the end of data downstream and no operator takes a record, so
  the committer logs such a commit's results instead of emitting them
  (:data:`~pyflink_gcp.core.commit_operator.MODE_AFTER_FINISH`); the rows are committed. A
  job without checkpointing commits once, at the end of input, before the operators finish:
  its results are emitted.

Memory is bounded by the destinations: a writer subtask keeps one aggregate per destination
written since the last marker, and the committer one per destination and checkpoint it still
waits on.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from typing import Any

from pyflink_gcp.core.commit import commits

__all__ = [
    "AT_LEAST_ONCE",
    "ResultCollector",
    "WriteResult",
    "merge_results",
    "output_tags",
    "release_results",
    "result_collector",
    "write_method",
]

#: The ``checkpoint_id`` of what a writer wrote after its last checkpoint, at the end of input.
END_OF_INPUT = -1
#: The ``method`` of a result of an at-least-once sink.
AT_LEAST_ONCE = "AT_LEAST_ONCE"


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What one checkpoint wrote to one destination.

    Attributes:
        sink: The sink's name.
        destination: The destination's string form: its resource name, such as
            ``projects/p/datasets/d/tables/t`` or ``projects/p/topics/t``.
        checkpoint_id: The checkpoint whose flush (at least once) or commit (exactly once)
            made the records durable; -1 for what an at-least-once writer wrote after its
            last checkpoint, at the end of the input.
        count: Records written to the destination and accepted by the service (records the
            failure handler got are not counted).
        first_event_time: The earliest event timestamp (epoch milliseconds) among the records
            written, failed ones included; None when none of them carried one.
        last_event_time: The latest such timestamp; None when none carried one.
        method: ``"AT_LEAST_ONCE"``, or the exactly-once write method (``"FILE_LOADS"``,
            ``"BUFFERED_STREAM"``).
        subtask: The writer subtask that wrote the records (at least once), or the committer
            subtask that committed them (exactly once): the pair ``(checkpoint_id, subtask)``
            tells the results of one destination apart.
    """

    sink: str
    destination: str
    checkpoint_id: int
    count: int
    first_event_time: int | None
    last_event_time: int | None
    method: str
    subtask: int = 0

    @property
    def exactly_once(self) -> bool:
        """Whether the result was emitted after the commit of an exactly-once method."""
        return self.method != AT_LEAST_ONCE


class ResultCollector:
    """A writer subtask's aggregates since the last marker: count and event-time bounds per
    destination. :meth:`add` runs once per record written; the rest once per flush."""

    __slots__ = ("_sink", "_method", "_subtask", "_written", "_failed")

    def __init__(self, sink: str, method: str, subtask: int = 0) -> None:
        self._sink = sink
        self._method = method
        self._subtask = subtask
        #: destination -> [count, first event time, last event time]
        self._written: dict[Any, list[Any]] = {}
        self._failed: Counter[str] = Counter()

    def open(self, subtask: int) -> None:
        self._subtask = subtask

    def add(self, destination: Any, timestamp: int | None) -> None:
        """Count one record written to ``destination`` with event time ``timestamp``."""
        entry = self._written.get(destination)
        if entry is None:
            self._written[destination] = [1, timestamp, timestamp]
            return
        entry[0] += 1
        if timestamp is not None:
            if entry[1] is None or timestamp < entry[1]:
                entry[1] = timestamp
            if entry[2] is None or timestamp > entry[2]:
                entry[2] = timestamp

    def failed(self, destination: str) -> None:
        """One record headed to ``destination`` (its string form) went to the failure handler."""
        self._failed[destination] += 1

    def take(self, checkpoint_id: int) -> list[WriteResult]:
        """The results since the last call, as of checkpoint ``checkpoint_id``; starts anew.

        A destination every record of which failed gets no result.
        """
        written, self._written = self._written, {}
        failed, self._failed = self._failed, Counter()
        results = []
        for destination, (count, first, last) in written.items():
            name = str(destination)
            count -= failed.get(name, 0)
            if count > 0:
                results.append(
                    WriteResult(
                        self._sink,
                        name,
                        checkpoint_id,
                        count,
                        first,
                        last,
                        self._method,
                        self._subtask,
                    )
                )
        return results

    def __len__(self) -> int:
        return len(self._written)


def output_tags(sink_name: str) -> tuple[Any, Any]:
    """The side outputs of a sink's write results and failed records (PyFlink ``OutputTag``
    values of pickled objects), named after the sink."""
    from pyflink.common.typeinfo import Types
    from pyflink.datastream import OutputTag

    pickled = Types.PICKLED_BYTE_ARRAY()
    return (
        OutputTag(f"{sink_name}: write results", pickled),
        OutputTag(f"{sink_name}: failed records", pickled),
    )


def write_method(config: Any) -> str:
    """The ``method`` of a sink's results: ``AT_LEAST_ONCE``, or the exactly-once write
    method its configuration names (``"WriteMethod.FILE_LOADS"`` gives ``"FILE_LOADS"``)."""
    if not commits(config.factory):
        return AT_LEAST_ONCE
    named = config.requires_bridge or type(config.factory).__name__
    return str(named).rpartition(".")[2]


def result_collector(config: Any) -> ResultCollector:
    """A writer subtask's :class:`ResultCollector` for the sink ``config`` (a ``SinkConfig``)."""
    return ResultCollector(config.sink_name, write_method(config))


def merge_results(
    results: list[WriteResult], subtask: int, checkpoint_id: int = END_OF_INPUT
) -> list[WriteResult]:
    """One result per destination and checkpoint: counts summed, event times widened (the
    committer merges its writer subtasks' results this way), in first-seen order. Results of
    a writer's end of input (checkpoint -1) become ``checkpoint_id``'s, the checkpoint whose
    commit publishes them."""
    merged: dict[tuple[str, int], WriteResult] = {}
    for result in results:
        if result.checkpoint_id == END_OF_INPUT:
            result = dataclasses.replace(result, checkpoint_id=checkpoint_id)
        key = (result.destination, result.checkpoint_id)
        seen = merged.get(key)
        if seen is None:
            merged[key] = WriteResult(
                result.sink,
                result.destination,
                result.checkpoint_id,
                result.count,
                result.first_event_time,
                result.last_event_time,
                result.method,
                subtask,
            )
            continue
        merged[key] = WriteResult(
            seen.sink,
            seen.destination,
            seen.checkpoint_id,
            seen.count + result.count,
            _bound(min, seen.first_event_time, result.first_event_time),
            _bound(max, seen.last_event_time, result.last_event_time),
            seen.method,
            subtask,
        )
    return list(merged.values())


def release_results(
    results: list[WriteResult], waiting: set[str] | None, kept: bool
) -> tuple[list[WriteResult], list[WriteResult]]:
    """Split a commit's results into those to emit now and those to keep with the committer's
    kept work.

    Args:
        results: The commit set's results (merged).
        waiting: The destinations (string forms) whose writes the committer keeps for a later
            commit; None: it cannot tell, so every result waits while anything is kept.
        kept: Whether the committer kept anything.

    Returns:
        ``(emit, keep)``.
    """
    if not kept:
        return results, []
    if waiting is None:
        return [], results
    emit = [r for r in results if r.destination not in waiting]
    keep = [r for r in results if r.destination in waiting]
    return emit, keep


def _bound(pick: Any, a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return int(pick(a, b))
