"""The committer operator of an exactly-once sink: its Python function and its wiring.

The Java bridge's ``CommitterProcessOperator`` keeps the committables in Flink state and hands
them to :class:`CommitterProcessFunction` in commit sets (the rules are in
:mod:`pyflink_gcp.core.commit`). The operator holds the only state that must survive a
restore, so it gets a stable uid: Flink matches operator state to operators by uid on a
restore, and an operator without one is identified by a hash of the job graph around it, which
changes when an operator is added upstream. A restore with ``--allowNonRestoredState`` would
then drop the committables of the last checkpoint silently.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pyflink.datastream import DataStream
from pyflink.datastream.functions import ProcessFunction, RuntimeContext

from pyflink_gcp.core.bridge import COMMITTER_OPERATOR, java_class
from pyflink_gcp.core.commit import (
    COMMIT_TAG,
    MODE_FINAL,
    MODE_RESTORED,
    Committer,
    CommittingWriterFactory,
    WriterStarted,
)
from pyflink_gcp.core.errors import NON_RETRIABLE_MARKER, NonRetriableSinkError, mark_non_retriable
from pyflink_gcp.core.metrics import SINK_GROUP
from pyflink_gcp.core.results import WriteResult, merge_results, output_tags, release_results
from pyflink_gcp.core.runtime_info import subtask_info
from pyflink_gcp.core.sink_writer import SinkConfig

_LOG = logging.getLogger("pyflink_gcp.runtime")

#: Added by the Java committer to the mode of a commit that runs after the operators finished
#: (the final checkpoint's, a stop-with-savepoint's): Flink has sent the end of data downstream,
#: so the commit's write results can reach no operator; they are logged instead.
MODE_AFTER_FINISH = 4


class CommitterProcessFunction(ProcessFunction):
    """The committer operator's Python function.

    Its input is what the Java committer sends at a commit: one commit set's committables,
    then ``(COMMIT_TAG, checkpoint id, mode)``, at which it commits what it received and
    returns what the committer keeps as its output (the Java side captures it into the next
    set); the Java side waits for that before it drops the set from its state.
    """

    def __init__(self, config: SinkConfig) -> None:
        self._config = config
        self._sink = config.sink_name
        self._committer: Committer | None = None
        self._writers: WriterFences | None = None
        self._received: list[Any] = []
        self.commits = 0
        self.committed = 0
        #: The side output of the write results (``write_with_results`` only).
        self._results_tag = output_tags(config.sink_name)[0] if config.write_results else None
        self._subtask = 0

    def open(self, runtime_context: RuntimeContext) -> None:
        info = subtask_info(runtime_context, self._config)
        self._subtask = info.subtask_index
        factory = self._config.factory
        assert isinstance(factory, CommittingWriterFactory)
        committer = factory.create_committer()
        try:
            committer.open(info)
        except NonRetriableSinkError as exc:
            mark_non_retriable(exc)
            raise
        self._committer = committer
        self._writers = WriterFences(info.attempt_number, info.number_of_parallel_subtasks)
        group = runtime_context.get_metrics_group()
        if group is not None:
            sink_group = group.add_group(SINK_GROUP)
            sink_group.gauge("commits", lambda: self.commits)
            sink_group.gauge("committablesCommitted", lambda: self.committed)

    def process_element(self, value: Any, ctx: Any) -> list[Any] | None:
        if type(value) is tuple and len(value) == 3 and value[0] == COMMIT_TAG:
            mode = value[2]
            return self._commit(
                value[1], mode & ~MODE_AFTER_FINISH, after_finish=bool(mode & MODE_AFTER_FINISH)
            )
        self._received.append(value)
        return None

    def _commit(
        self, checkpoint_id: int, mode: int, after_finish: bool = False
    ) -> list[Any] | None:
        """Commit one set; what the committer keeps is the output (the Java side keeps it).

        ``after_finish``: the commit runs after the operators finished, so its write results
        are logged instead of emitted (:data:`MODE_AFTER_FINISH`).
        """
        assert self._committer is not None
        received, self._received = self._received, []
        committables = [
            c for c in received if type(c) is not WriterStarted and type(c) is not WriteResult
        ]
        restored, final = mode == MODE_RESTORED, mode == MODE_FINAL
        start = time.monotonic()
        try:
            kept = self._committer.commit(committables, checkpoint_id, restored, final)
            assert self._writers is not None
            if self._writers.announce(received, restored, final):
                self._committer.writers_started()
        except NonRetriableSinkError as exc:
            mark_non_retriable(exc)
            raise
        self.commits += 1
        self.committed += len(committables)
        _LOG.debug(
            "%s: committed %d committables (%d kept) of %s checkpoint %d in %.3f s",
            self._sink,
            len(committables),
            len(kept or ()),
            "the restored" if restored else "final" if final else "completed",
            checkpoint_id,
            time.monotonic() - start,
        )
        out = list(kept) if kept else []
        if self._results_tag is not None:
            out.extend(self._release(received, out, checkpoint_id, after_finish))
        return out or None

    def _release(
        self, received: list[Any], kept: list[Any], checkpoint_id: int, after_finish: bool
    ) -> list[Any]:
        """The set's write results after its commit: those of destinations the committer
        keeps work of join what it keeps, the others go to the results side output, or to the
        log when the operators downstream have finished. Results of a writer's end of input
        are the checkpoint's that commits them."""
        assert self._committer is not None
        results = merge_results(
            [c for c in received if type(c) is WriteResult], self._subtask, checkpoint_id
        )
        if not results:
            return []
        waiting = self._committer.waiting(kept) if kept else set()
        emit, keep = release_results(results, waiting, bool(kept))
        if after_finish:
            for result in emit:
                _LOG.info(
                    "%s: committed %d records to %s (checkpoint %d) after the operators "
                    "finished: Flink delivers this write result to no operator",
                    self._sink,
                    result.count,
                    result.destination,
                    result.checkpoint_id,
                )
            return keep
        return [*keep, *((self._results_tag, result) for result in emit)]

    def close(self) -> None:
        if self._committer is not None:
            self._committer.close()
            self._committer = None


class WriterFences:
    """Which writer subtasks of the committer's attempt have started (sent their
    :class:`~pyflink_gcp.core.commit.WriterStarted`), so the committer learns once when
    nothing of an earlier attempt can still arrive."""

    def __init__(self, attempt: int, committer_parallelism: int) -> None:
        self._attempt = attempt
        self._committers = max(1, committer_parallelism)
        self._started: set[int] = set()
        #: Writer subtasks that feed this committer; known from the first fence.
        self._needed = 0
        self.announced = False

    def announce(self, received: list[Any], restored: bool, final: bool) -> bool:
        """Note the fences of a committed set; whether the committer is to hear now that the
        writers started: every writer feeding it has, or the set is the final one (once)."""
        if self.announced:
            return False
        if not restored:
            for item in received:
                if type(item) is WriterStarted and item.attempt >= self._attempt:
                    self._started.add(item.subtask_index)
                    # Each writer feeds one committer subtask when the parallelism is the
                    # same (forward); all of them feed a committer of parallelism 1.
                    writers = item.parallelism
                    self._needed = (
                        writers // self._committers if writers % self._committers == 0 else 1
                    )
        started = self._needed > 0 and len(self._started) >= self._needed
        self.announced = started or final
        return self.announced


def add_committer_operator(
    writer_out: DataStream, config: SinkConfig, j_conf: Any, writer_name: str
) -> DataStream:
    """The bridge's committer operator after a committing writer (its output: committables).

    The writer's parallelism unless the factory names its own (``committer_parallelism``), in a
    chain of its own (PyFlink would otherwise fuse the two Python operators, and the committer's
    Java state and checkpoint hooks with them), with a stable uid (:func:`committer_uid`).
    The factory's ``check_job`` sees the job's checkpoint interval here, when
    the job is built, and may warn.
    """
    from pyflink.common.typeinfo import Types
    from pyflink.datastream.data_stream import _create_j_data_stream_python_function_info
    from pyflink.fn_execution import flink_fn_execution_pb2

    j_writer = writer_out._j_data_stream
    checkpointing = bool(
        j_writer.getExecutionEnvironment().getCheckpointConfig().isCheckpointingEnabled()
    )
    pickled = Types.PICKLED_BYTE_ARRAY().get_java_type_info()
    j_func_info = _create_j_data_stream_python_function_info(
        CommitterProcessFunction(config),
        flink_fn_execution_pb2.UserDefinedDataStreamFunction.PROCESS,
    )
    j_operator = java_class(COMMITTER_OPERATOR)(
        j_conf, j_func_info, pickled, pickled, COMMIT_TAG, checkpointing, NON_RETRIABLE_MARKER
    )
    name = writer_name.removesuffix(": Writer") + ": Committer"
    committer = DataStream(j_writer.transform(name, pickled, j_operator)).start_new_chain()
    uid = committer_uid(config, j_writer.getExecutionEnvironment())
    if uid is not None:
        committer._j_data_stream.uid(uid)
    factory = config.factory
    assert isinstance(factory, CommittingWriterFactory)
    parallelism = factory.committer_parallelism or j_writer.getParallelism()
    if parallelism > 0:
        committer._j_data_stream.setParallelism(parallelism)
    j_env = j_writer.getExecutionEnvironment()
    warning = factory.check_job(
        int(j_env.getCheckpointConfig().getCheckpointInterval()) if checkpointing else 0
    )
    if warning:
        _LOG.warning("%s", warning)
    return committer


def writer_uid(config: SinkConfig) -> str | None:
    """The writer operator's uid: ``<uid>-writer`` for a sink built with ``set_uid``."""
    return f"{config.uid}-writer" if config.uid else None


def committer_uid(config: SinkConfig, j_env: Any) -> str | None:
    """The committer operator's uid.

    ``<uid>-committer`` for a sink built with ``set_uid``; otherwise
    ``pyflink-gcp-<sink name>-committer``, unless an operator of the job already has that uid
    (two exactly-once sinks of one name), in which case the operator gets none and a warning
    asks for ``set_uid``.
    """
    if config.uid:
        return f"{config.uid}-committer"
    uid = f"pyflink-gcp-{config.sink_name}-committer"
    if any(t.getUid() == uid for t in j_env.getTransformations()):
        _LOG.warning(
            "sink '%s': another exactly-once sink of this job has the same name, so this one's "
            "committer gets no stable uid: its state (the committables of the last checkpoint) "
            "is found on a restore only while the job graph is unchanged. Give each sink its "
            "own set_uid(...)",
            config.sink_name,
        )
        return None
    return uid
