"""Proof that a failover test's restart restored a checkpoint instead of starting from scratch.

A failover test passes when nothing is lost after the restart. A restart from scratch replays
every record, so an at-least-once sink that dropped its buffer at the failure would pass too;
only a restore from a completed checkpoint puts the records since that checkpoint at risk.
Each failover test therefore:

- gives its job a :class:`Failover` (``make_env(extra=failover.conf())``): checkpoints go to a
  directory of the test, and the JobManager archives the job's REST answers to another when the
  job ends (``jobmanager.archive.fs.dir``; a MiniCluster writes it too, the way a cluster feeds
  its History Server). The archive is read after the job, so nothing has to be polled while the
  job runs: the restore is recorded in ``/jobs/<id>/checkpoints`` (``counts.restored``,
  ``latest.restored``) whatever moment it happened at.
- injects its failure only once a checkpoint has completed (:func:`checkpoint_completed`, used
  by ``FailOnce`` and ``FailAt``), so the restore of a checkpoint is what the restart must do,
  not a matter of how fast the machine was.
- calls :meth:`Failover.assert_restored` after the job.
"""

from __future__ import annotations

import glob
import json
import os
import re
import time
from typing import Any

#: How long the JobManager may take to write a finished job's archive. It writes it after the
#: job result reached the client, so ``env.execute()`` can return before the file exists.
ARCHIVE_WAIT_S = 120.0

_CHK = re.compile(r"chk-(\d+)$")


def _checkpoint_dirs(checkpoints: str) -> dict[int, str]:
    """Checkpoint directories (``<job id>/chk-<n>``) under ``checkpoints``, by id."""
    found: dict[int, str] = {}
    for path in glob.glob(os.path.join(checkpoints, "*", "chk-*")):
        match = _CHK.search(path)
        if match:
            found[int(match.group(1))] = path
    return found


def checkpoint_completed(checkpoints: str, at_least: int = 1) -> bool:
    """Whether a checkpoint (of id ``at_least`` or later) of the job checkpointing under
    ``checkpoints`` has completed.

    Its ``_metadata`` is the last thing the JobManager writes before it stores the checkpoint
    as completed. (Waiting for the directory of a later checkpoint as well would close the
    moment in between, but a checkpoint that fails at once leaves its directory for a few
    milliseconds only, so a job's failure could wait for ever.) Should a failure ever slip
    into that moment, the restart starts from scratch and :meth:`Failover.assert_restored`
    fails: the test then fails loudly, it cannot pass without a restore.
    """
    return any(
        os.path.exists(os.path.join(path, "_metadata"))
        for checkpoint_id, path in _checkpoint_dirs(checkpoints).items()
        if checkpoint_id >= at_least
    )


def latest_checkpoint_completed(checkpoints: str) -> int:
    """The highest id of a completed checkpoint (one with its ``_metadata``) under
    ``checkpoints``; 0 for none."""
    return max(
        (
            checkpoint_id
            for checkpoint_id, path in _checkpoint_dirs(checkpoints).items()
            if os.path.exists(os.path.join(path, "_metadata"))
        ),
        default=0,
    )


def latest_checkpoint_started(checkpoints: str) -> int:
    """The highest id of a checkpoint started (completed or not) under ``checkpoints``; 0 for
    none. Its directory is made before the checkpoint is triggered, so a checkpoint of a
    higher id is triggered after this call: its barriers follow every record processed
    before it."""
    return max(_checkpoint_dirs(checkpoints), default=0)


class Failover:
    """Where one failover job checkpoints and where its JobManager archives it; the check that
    its restarts restored a checkpoint."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = os.fspath(directory)
        #: Handed to ``FailOnce``/``FailAt`` (``after_checkpoint``), which wait for a checkpoint
        #: to complete in here before they fail.
        self.checkpoints = os.path.join(self.directory, "checkpoints")
        self.archive = os.path.join(self.directory, "archive")

    def conf(self) -> dict[str, str]:
        """Configuration entries for ``make_env(extra=...)`` (or a Table API job's config)."""
        return {
            "execution.checkpointing.dir": f"file://{self.checkpoints}",
            "jobmanager.archive.fs.dir": f"file://{self.archive}",
        }

    def archived(self, endpoint: str) -> dict[str, Any]:
        """The archived answer of ``/jobs/<id>/<endpoint>`` of the one job run with :meth:`conf`.

        Waits (up to :data:`ARCHIVE_WAIT_S`) for the archive to be written and complete.
        """
        deadline = time.monotonic() + ARCHIVE_WAIT_S
        while True:
            files = glob.glob(os.path.join(self.archive, "**", "jobs", "*"), recursive=True)
            files = [f for f in files if os.path.isfile(f)]
            try:
                if files:
                    assert len(files) == 1, f"one job per Failover, archived: {files}"
                    with open(files[0]) as f:
                        archive = json.load(f)["archive"]
                    for entry in archive:
                        if re.fullmatch(rf"/jobs/[0-9a-f]+/{endpoint}", entry["path"]):
                            return dict(json.loads(entry["json"]))
                    raise AssertionError(f"no {endpoint} in the archive {files[0]}")
            except json.JSONDecodeError:
                pass  # still being written
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the JobManager archived no job in {self.archive} within {ARCHIVE_WAIT_S}s"
                )
            time.sleep(0.2)

    def assert_restored(self) -> dict[str, Any]:
        """The job failed over, and every failover restored a completed checkpoint (id > 0).

        The failovers are the entries of the job's exception history (failures of several
        subtasks handled by one restart are one entry). Flink counts a restore only when it
        restores a checkpoint (``counts.restored``); a restart from scratch leaves the count and
        ``latest.restored`` as they were. Returns the latest restored checkpoint's statistics.
        """
        failovers = len(self.archived("exceptions")["exceptionHistory"]["entries"])
        stats = self.archived("checkpoints")
        counts, restored = stats["counts"], stats["latest"]["restored"]
        assert failovers > 0, "the job never failed over"
        assert restored is not None, (
            f"the job restarted from scratch, not from a checkpoint: counts {counts}"
        )
        assert restored["id"] > 0 and not restored["is_savepoint"], restored
        assert counts["restored"] >= failovers, (
            f"{counts['restored']} restores from a checkpoint in {failovers} failovers: the "
            f"others started from scratch; counts {counts}, latest restored {restored}"
        )
        return dict(restored)
