"""What the soak reads while the job runs: per-process figures from ``/proc``, the job's
checkpoints from the REST API, and the sink's writer gauges.

Why ``/proc`` and not a profiler: the figures a slow leak moves (resident memory, threads,
open sockets) are the kernel's own, cost nothing to read, and mean the same for the
TaskManager JVMs and the Python workers they start.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyflink_gcp.tools.cluster import StandaloneCluster
from pyflink_gcp.tools.emulators.processes import group_members

#: A TaskManager JVM's main class, to tell the JVM from the start script in its group.
TM_MAIN = "org.apache.flink.runtime.taskexecutor.TaskManagerRunner"
#: A Python worker's module (the SDK harness runs in it; ``pyflink-udf-runner.sh`` is bash).
WORKER = "pyflink.fn_execution.beam.beam_boot"


@dataclass(frozen=True)
class Proc:
    """One process's figures at one sample.

    Attributes:
        kind: ``jvm`` (a TaskManager) or ``worker`` (a Python worker of one).
        owner: The TaskManager's resource id.
        pid: The process id.
        rss_mb: Resident memory (``VmRSS``), MiB.
        threads: ``Threads`` of ``/proc/<pid>/status``.
        sockets: Open file descriptors that are sockets.
        age_s: Seconds since the process started.
    """

    kind: str
    owner: str
    pid: int
    rss_mb: float
    threads: int
    sockets: int
    age_s: float


@dataclass
class Sample:
    """Every live TaskManager JVM and Python worker at one moment.

    Attributes:
        at_s: Seconds since the job was submitted.
        procs: The processes read.
        job_state: The job's state then.
        running_tasks: Subtasks in state RUNNING (all of them: the job is steady).
        total_tasks: Subtasks of the job.
    """

    at_s: float
    procs: list[Proc]
    job_state: str
    running_tasks: int
    total_tasks: int

    @property
    def steady(self) -> bool:
        return self.job_state == "RUNNING" and self.running_tasks == self.total_tasks > 0

    def total(self, kind: str, what: str) -> float:
        return float(sum(getattr(p, what) for p in self.procs if p.kind == kind))

    def count(self, kind: str) -> int:
        return sum(1 for p in self.procs if p.kind == kind)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _boot_time() -> float:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return 0.0


_BOOT = _boot_time()
_HZ = os.sysconf("SC_CLK_TCK")


def read_proc(kind: str, owner: str, pid: int) -> Proc | None:
    """The process's figures, None when it is gone (it may end between listing and reading)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text()
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    sockets = 0
    for fd in fds:
        with contextlib.suppress(OSError):
            sockets += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
    started = _BOOT + int(stat.rsplit(")", 1)[1].split()[19]) / _HZ
    return Proc(
        kind=kind,
        owner=owner,
        pid=pid,
        rss_mb=int(fields.get("VmRSS", "0 kB").split()[0]) / 1024.0,
        threads=int(fields.get("Threads", "0").strip()),
        sockets=sockets,
        age_s=time.time() - started,
    )


def processes(cluster: StandaloneCluster) -> list[Proc]:
    """Every live TaskManager's JVM and Python workers (the members of its process group)."""
    found: list[Proc] = []
    for tm in cluster.taskmanagers:
        if tm.killed or tm.process.describe_exit() is not None:
            continue
        members = group_members(tm.process.pgid)
        for pid in members:
            line = _cmdline(pid)
            if TM_MAIN in line:
                kind = "jvm"
            elif WORKER in line and "pyflink-udf-runner" not in line:
                kind = "worker"
            else:
                continue
            proc = read_proc(kind, tm.resource_id, pid)
            if proc is not None:
                found.append(proc)
    return found


def sample(cluster: StandaloneCluster, job: str, at_s: float) -> Sample:
    details = cluster.job(job)
    tasks = [v.get("tasks", {}) for v in details.get("vertices", [])]
    running = sum(int(t.get("RUNNING", 0)) for t in tasks)
    total = sum(int(v.get("parallelism", 0)) for v in details.get("vertices", []))
    return Sample(at_s, processes(cluster), str(details.get("state")), running, total)


@dataclass
class Checkpoints:
    """Every completed checkpoint seen in the REST history, by id.

    The history keeps the last few checkpoints only (10 by default): with one a second it is
    polled every few seconds to see them all.

    Attributes:
        durations: Checkpoint id -> (trigger epoch ms, end-to-end duration ms).
        sizes: Checkpoint id -> its full state size in bytes (carried records are state:
            a size that grows with the run is state piling up).
        failed: The job's count of failed checkpoints, last read.
        restored: Restores the job reported (``counts.restored``), last read.
    """

    durations: dict[int, tuple[int, int]] = field(default_factory=dict)
    sizes: dict[int, int] = field(default_factory=dict)
    failed: int = 0
    restored: int = 0

    def poll(self, cluster: StandaloneCluster, job: str) -> None:
        stats = cluster.checkpoints(job)
        counts = stats.get("counts", {})
        self.failed = int(counts.get("failed", 0))
        self.restored = int(counts.get("restored", 0))
        for entry in stats.get("history", []):
            if entry.get("status") == "COMPLETED" and not entry.get("is_savepoint"):
                self.durations[int(entry["id"])] = (
                    int(entry["trigger_timestamp"]),
                    int(entry["end_to_end_duration"]),
                )
                self.sizes[int(entry["id"])] = int(entry.get("state_size") or 0)


@dataclass
class WriterGauges:
    """The sink's ``activeWriters`` and ``writersReleased`` gauges, summed over subtask
    attempts (a restart starts a gauge again from 0).

    Attributes:
        released: LRU releases at the ``max_active_destinations`` cap.
        idle_closed: Drops of ``activeWriters`` between two polls of one subtask attempt, a
            lower bound of the writers the idle timeout closed (an LRU release replaces the
            writer it releases, so only the idle path lowers the count).
        max_active: The highest ``activeWriters`` seen.
    """

    released: int = 0
    idle_closed: int = 0
    max_active: int = 0
    _last: dict[str, tuple[int, int]] = field(default_factory=dict)
    _vertex: str | None = None

    def poll(self, cluster: StandaloneCluster, job: str) -> None:
        if self._vertex is None:
            vertices = cluster.job(job).get("vertices", [])
            writer = [v for v in vertices if "Writer" in str(v.get("name", ""))]
            if not writer:
                return
            self._vertex = str(writer[0]["id"])
        base = f"/jobs/{job}/vertices/{self._vertex}/metrics"
        names = [str(m["id"]) for m in cluster.rest(base)]
        wanted = [n for n in names if n.endswith(("activeWriters", "writersReleased"))]
        if not wanted:
            return
        values = {
            str(m["id"]): m.get("value") for m in cluster.rest(f"{base}?get={','.join(wanted)}")
        }
        for subtask in {n.split(".", 1)[0] for n in wanted}:
            active = _int(values.get(_named(wanted, subtask, "activeWriters")))
            released = _int(values.get(_named(wanted, subtask, "writersReleased")))
            if active is None or released is None:
                continue
            self.max_active = max(self.max_active, active)
            last_active, last_released = self._last.get(subtask, (0, 0))
            if released < last_released:  # a new attempt of the subtask
                self.released += released
            else:
                self.released += released - last_released
                if active < last_active:
                    self.idle_closed += last_active - active
            self._last[subtask] = (active, released)


def _named(names: list[str], subtask: str, suffix: str) -> str:
    return next((n for n in names if n.startswith(f"{subtask}.") and n.endswith(suffix)), "")


def _int(value: Any) -> int | None:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None
