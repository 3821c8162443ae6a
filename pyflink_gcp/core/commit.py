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
(:class:`~pyflink_gcp.core.commit_operator.CommitterProcessFunction`) in **commit sets**:

- A set is what the committer operator received between two of its snapshots. It is fixed when
  the snapshot of checkpoint n is taken, is stored under n, and is never merged with another:
  a commit repeated after a failover hands the committer exactly the same set again, so a
  committer that derives its work (a load job id, a grouping) from the set alone repeats the
  same work. This holds whatever the checkpoint mode: under unaligned checkpoints a committable
  the barrier overtook reaches the committer after the snapshot (or, after a restore, from the
  channel state) and joins the next set instead of being lost.
- When checkpoint n completes, every stored set up to n is committed, each in a call of its own,
  in checkpoint order (a set of an aborted checkpoint goes with the next completed one).
- After a restore, every restored set is committed when the committer opens, ``restored``
  True (whatever the new parallelism, each restored committable reaches one subtask).
- At the end of input, the committables go with Flink's final checkpoint (or, without
  checkpointing, are committed at the end of input). After the sets of that checkpoint, or of
  a stop-with-savepoint's savepoint, comes one more commit with ``final`` True: the
  committables the sets' commits kept (possibly none), and the word that nothing follows, so
  the committer ends what it has going (loads what waits, finalizes its streams) there, and
  not in a set that a later one goes on with.
- What :meth:`Committer.commit` returns is kept: it joins the next set, is stored in the
  operator's state with it, and is committed again after that checkpoint completed. A
  committer keeps work there that is not due yet (FILE_LOADS' files waiting out
  ``min_load_interval``), so it survives failovers without any writer carrying it.

- **Writers started.** The runtime adds a :class:`WriterStarted` to the first committables
  each writer subtask prepares. A writer's committables reach the committer in the order it
  emitted them, and what an earlier attempt emitted (replayed from the channel state of an
  unaligned checkpoint) comes before anything the new attempt emits. So once the committer
  has seen a ``WriterStarted`` of its own attempt from every writer subtask that feeds it,
  nothing of an earlier attempt can still arrive: :meth:`Committer.writers_started` is
  called then, and a committer finalizes or removes what the failed attempt left behind.

Writes prepared but never committed (the attempt failed before its checkpoint completed) stay
invisible; the replayed records are written again, by the new attempt.

Without the bridge jar such a sink refuses to build (``SinkConfig.requires_bridge``) instead of
silently degrading to at least once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from pyflink_gcp.core.runtime_info import SubtaskInfo
from pyflink_gcp.core.writer import WriterFactory

#: The first item of the element that tells the committer to commit what it received; the Java
#: committer pickles ``(COMMIT_TAG, checkpoint id, mode)``, mode one of the ``MODE_*`` below.
COMMIT_TAG = "\x00pyflink-gcp:commit"
#: The checkpoint id of a commit of restored committables when Flink names none.
UNKNOWN_CHECKPOINT = -2
#: A set of a completed checkpoint.
MODE_COMPLETED = 0
#: A set from a restored checkpoint: its writers are gone.
MODE_RESTORED = 1
#: The last set: the end of input, or a stop-with-savepoint's savepoint; nothing may wait.
MODE_FINAL = 2


@dataclass(frozen=True, slots=True)
class WriterStarted:
    """A writer subtask's first committable in an attempt (see the module docstring); the
    runtime adds it and hands it to no :class:`Committer`."""

    subtask_index: int
    parallelism: int
    attempt: int


class Committer(ABC):
    """Publishes prepared writes. One per committer subtask, opened on the worker."""

    def open(self, info: SubtaskInfo) -> None:  # noqa: B027 - optional hook
        """Open clients. ``info`` names the committer's subtask, not a writer's."""

    @abstractmethod
    def commit(
        self, committables: list[Any], checkpoint_id: int, restored: bool, final: bool = False
    ) -> list[Any] | None:
        """Publish what ``committables`` describe, or keep it for later; idempotent.

        Args:
            committables: One commit set (see the module docstring): values returned by
                ``prepare_commit`` of any writer subtask, and what this committer returned from
                earlier commits, in the order received. A repeated commit gets the same set.
            checkpoint_id: The checkpoint whose snapshot holds the set (the restored
                checkpoint for a restored set; -1 at the end of input of a job without
                checkpoints).
            restored: Whether the set comes from a restored checkpoint: the writers that
                prepared it are gone, and nothing will be added to what it names.
            final: Whether nothing will be committed after this set (the end of input, or the
                savepoint of a stop-with-savepoint): nothing may be kept.

        Returns:
            Committables to keep (picklable): they join the next commit set and are handed to
            ``commit`` again once its checkpoint completed. None or an empty list for none.

        Raises:
            SinkError: The commit failed after the sink's retries; the task fails and the
                restored job commits the same set again.
        """

    def waiting(self, kept: list[Any]) -> set[str] | None:
        """The destinations (string forms) whose writes ``kept``, what :meth:`commit` just
        returned, holds back for a later commit; None when the committer cannot tell.

        Write results (:mod:`pyflink_gcp.core.results`) of these destinations wait with the
        kept work; with None, every result waits while anything is kept.
        """
        return None

    def writers_started(self) -> None:  # noqa: B027 - optional hook
        """Every writer subtask feeding this committer started in this committer's attempt:
        nothing an earlier attempt prepared can still arrive (called once, after a commit)."""

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

    def check_job(self, checkpoint_interval_ms: int) -> str | None:
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
