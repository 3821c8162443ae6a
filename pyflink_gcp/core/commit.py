"""Exactly once: the two extra steps of a writer whose writes become visible only when committed.

A sink is at least once when its writer makes every write durable and visible before each
checkpoint barrier: a failover replays what came after the last checkpoint, so a row can land
twice. A writer factory that opts in (:class:`CommittingWriterFactory`) makes its writes durable
but *invisible* at each checkpoint's marker and returns what must still be done to publish them:

1. **prepare** (:meth:`CommittingWriterFactory.prepare_commit`, on the writer's subtask, at a
   checkpoint's marker after the flush): the committables, picklable values such as "flush
   BigQuery stream S to offset 41". They leave the writer operator as its output, before the
   barrier.
2. **commit** (:meth:`Committer.commit`, on the committer operator's subtask): called only after
   the checkpoint they belong to completed, and again after a restore for whatever the restored
   checkpoint still held. It must be idempotent: a commit interrupted by a failure runs again.

The Java bridge's ``CommitterProcessOperator`` between the writer and the discarding sink keeps
the committables in Flink's list state and hands them to the Python committer
(:class:`~pyflink_gcp.core.runtime.CommitterProcessFunction`) once a checkpoint completed: a
committable prepared for checkpoint n is committed when the first checkpoint m >= n completes
(an aborted checkpoint's committables go with the next completed one), restored ones when the
committer opens after a failover or a savepoint (whatever the new parallelism, each restored
committable reaches one subtask), and those of the end of input with Flink's final checkpoint
(or at the end of input of a job without checkpointing). Writes prepared but never committed
(the attempt failed before its checkpoint completed) stay invisible; the replayed records are
written again, by the new attempt.

Without the bridge jar such a sink refuses to build (``SinkConfig.requires_bridge``) instead of
silently degrading to at least once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from pyflink_gcp.core.runtime_info import SubtaskInfo
from pyflink_gcp.core.writer import WriterFactory

#: The first item of the element that tells the committer to commit what it received; the Java
#: committer pickles ``(COMMIT_TAG, checkpoint id, restored)``.
COMMIT_TAG = "\x00pyflink-gcp:commit"
#: The checkpoint id of a commit of restored committables when Flink names none.
UNKNOWN_CHECKPOINT = -2


class Committer(ABC):
    """Publishes prepared writes. One per committer subtask, opened on the worker."""

    def open(self, info: SubtaskInfo) -> None:  # noqa: B027 - optional hook
        """Open clients. ``info`` names the committer's subtask, not a writer's."""

    @abstractmethod
    def commit(self, committables: list[Any], checkpoint_id: int, restored: bool) -> None:
        """Publish everything ``committables`` describe; idempotent.

        Args:
            committables: Values returned by ``prepare_commit`` of any writer subtask, in the
                order they were prepared (several checkpoints' worth after an aborted one).
            checkpoint_id: The completed checkpoint that allows the commit (the restored one
                after a failover, -1 at the end of input of a job without checkpoints).
            restored: Whether they come from a restored checkpoint: the writers that prepared
                them are gone, and nothing will be added to what they name.

        Raises:
            SinkError: The commit failed after the sink's retries; the task fails and the
                restored job commits the same committables again.
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients."""


class CommittingWriterFactory(WriterFactory[Any]):
    """A writer factory whose writes become visible only through a commit after the checkpoint.

    The sink runtime adds the committer operator after the writer for such a factory, and asks
    for the committables after every full flush at a checkpoint's marker.
    """

    #: The committer operator's parallelism; None: the writer's (committables of a writer
    #: subtask go to the committer subtask of the same index). 1 gathers every subtask's
    #: committables in one committer, which can then group them (one load job per table).
    committer_parallelism: int | None = None

    def check_job(self, parallelism: int, checkpoint_interval_ms: int) -> str | None:
        """A warning about the job this sink is built into (quotas the configuration would
        exceed), logged when the job is built; None for none. ``checkpoint_interval_ms`` is 0
        without checkpointing."""
        return None

    @abstractmethod
    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        """The committables of everything written (and flushed) since the last call.

        Called on the writer's subtask right after the flush at a checkpoint's marker (or at
        the end of input, ``checkpoint_id`` -1). Writers closed since the last call (idle,
        evicted) must be included: their last writes are not committed yet.
        """

    @abstractmethod
    def create_committer(self) -> Committer:
        """A new, unopened committer (runs in the committer operator, not beside the writers)."""


def commits(factory: WriterFactory[Any]) -> bool:
    """Whether ``factory``'s writes need the commit step."""
    return isinstance(factory, CommittingWriterFactory)
