"""The parts of a standalone cluster as values: a job submission, a TaskManager process with
the report of how it ended, the slots the JobManager lists.

Kept apart from :mod:`pyflink_gcp.tools.cluster.standalone`, which starts and drives the
processes, so that what the fault suite and the soak read from a cluster can be tested without
one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyflink_gcp.tools.emulators.processes import ManagedProcess

__all__ = ["TERMINAL_STATES", "Slots", "Submission", "TaskManager", "free_slots"]

#: Job states after which a job does not run again.
TERMINAL_STATES = frozenset({"FINISHED", "FAILED", "CANCELED", "SUSPENDED"})
#: What a TaskManager's exit code says beyond the number.
_EXIT_MEANINGS = {
    1: "Flink's exit after a failed start or a fatal error it handled",
    239: "Flink's exit (-17) after an uncaught error in one of its threads",
}
#: Log lines that tell why a process ended.
_CAUSE = re.compile(r"\b(FATAL|ERROR)\b|Exception|Error:|^Caused by")
_FRAME = re.compile(r"\s*(at |\.\.\. \d+ more)")


@dataclass(frozen=True)
class Submission:
    """One ``flink run`` and how it ended.

    Attributes:
        argv: The command line.
        returncode: The client's exit status: 0 when the job script returned 0 (attached) or
            the job was accepted (detached); a script that raised or exited non-zero makes it
            non-zero (31 in Flink 2.3, its ``ProgramAbortException``).
        output: What the client and the job script printed (stdout and stderr).
        job_id: The id of the job it submitted, when it got that far.
        log_path: The file holding :attr:`output`.
        seconds: The client's wall time.
    """

    argv: list[str]
    returncode: int
    output: str
    job_id: str | None
    log_path: Path
    seconds: float

    @property
    def ok(self) -> bool:
        """Whether the client exited with 0."""
        return self.returncode == 0


@dataclass
class TaskManager:
    """One TaskManager process of the cluster.

    Attributes:
        resource_id: Its ``taskmanager.resource-id``, the ``id`` the REST API lists it under.
        process: The JVM (the leader of its process group, with its Python workers).
        killed: Whether :meth:`StandaloneCluster.kill_taskmanager` killed it.
    """

    resource_id: str
    process: ManagedProcess
    killed: bool = False

    def exit_report(self, causes: int = 6, last: int = 4) -> str | None:
        """How the process ended, with the log lines that say why; None while it runs.

        The exit code (and what Flink means by it), the log's path, its first ``causes``
        lines naming an error (where the chain of failures starts: a thread's uncaught
        error comes before the shutdown it causes) and its ``last`` lines.
        """
        how = self.process.describe_exit()
        if how is None:
            return None
        code = self.process.exited()
        meaning = _EXIT_MEANINGS.get(code if code is not None else 0)
        # Stack frames ("at ...") say nothing the exception's own line does not.
        lines = [x for x in self.process.log_tail(10_000).splitlines() if not _FRAME.match(x)]
        picked = [x for x in lines if _CAUSE.search(x)][:causes]
        picked += [x for x in lines[-last:] if x not in picked]
        tail = " | ".join(line.strip()[:300] for line in picked) or "(empty log)"
        return (
            f"{self.resource_id} {how}{f' ({meaning})' if meaning else ''}; "
            f"log {self.process.log_path}: {tail}"
        )


@dataclass(frozen=True)
class Slots:
    """The task slots of the live TaskManagers the JobManager lists.

    Attributes:
        taskmanagers: Live TaskManagers registered with the JobManager.
        total: Their slots.
        free: Their slots no job holds.
    """

    taskmanagers: int
    total: int
    free: int


def free_slots(listed: Sequence[Mapping[str, Any]], live: set[str]) -> Slots:
    """Counts the slots of the TaskManagers in ``listed`` (REST ``/taskmanagers``) whose id is
    in ``live``: a killed TaskManager stays listed, with its slots, until its heartbeat
    times out, and a job cannot run there."""
    mine = [tm for tm in listed if tm.get("id") in live]
    return Slots(
        taskmanagers=len(mine),
        total=sum(int(tm.get("slotsNumber", 0)) for tm in mine),
        free=sum(int(tm.get("freeSlots", 0)) for tm in mine),
    )
