"""CPU accounting for the benchmarks: where a run's CPU went, by process role.

On a machine whose cores the job, the emulator and the Python workers share, a rate alone
does not say what bounds it. These helpers read user + system CPU seconds from ``/proc`` (all
threads of a process), so a benchmark can print microseconds of CPU per record for the
emulator, the MiniCluster JVM and the Python workers over exactly the timed window.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (all its threads); 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _processes() -> tuple[dict[int, list[int]], dict[int, str], dict[int, int]]:
    """Children by parent, names and parents of every process."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    parents: dict[int, int] = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            text = Path(stat).read_text()
        except OSError:
            continue
        pid = int(text.split(" ", 1)[0])
        names[pid] = text[text.index("(") + 1 : text.rindex(")")]
        parent = int(text.rsplit(")", 1)[1].split()[1])
        parents[pid] = parent
        children.setdefault(parent, []).append(pid)
    return children, names, parents


def _tree(children: dict[int, list[int]], root: int) -> list[int]:
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def jvm_pid() -> int:
    """The MiniCluster's JVM: the ``java`` process among this process's descendants."""
    children, names, _ = _processes()
    for pid in _tree(children, os.getpid())[1:]:
        if names.get(pid) == "java":
            return pid
    raise RuntimeError("no MiniCluster JVM among this process's descendants")


def job_cpu(emulator_pids: Iterable[int]) -> dict[str, Any]:
    """CPU seconds so far of a Flink job's processes, read from one of its Python workers.

    Returns ``emulator`` (the given processes and their children), ``jvm`` (the MiniCluster,
    the worker's ``java`` ancestor) and ``workers``: the CPU seconds of every process the JVM
    started (the Python workers and their launch scripts) by pid, since a subtask's worker
    may exit before another subtask's last snapshot. Combine snapshots with
    :func:`window_cpu`.

    Raises:
        RuntimeError: The calling process is not (or no longer) under a ``java`` process.
    """
    children, names, parents = _processes()
    jvm = os.getpid()
    while jvm in parents and names.get(jvm) != "java":
        jvm = parents[jvm]
    if names.get(jvm) != "java":
        raise RuntimeError("the calling process has no java ancestor")
    emulator = [pid for root in emulator_pids for pid in _tree(children, root)]
    return {
        "emulator": sum(map(cpu_seconds, emulator)),
        "jvm": cpu_seconds(jvm),
        "workers": {str(pid): cpu_seconds(pid) for pid in _tree(children, jvm)[1:]},
    }


def window_cpu(
    firsts: list[dict[str, Any]], lasts: list[dict[str, Any]], records: int
) -> dict[str, float]:
    """Microseconds of CPU per record by role between the earliest and the latest of several
    :func:`job_cpu` snapshots (``firsts`` in start order, ``lasts`` in end order; CPU counters
    only grow, so each worker's window is its smallest to its largest reading)."""
    first_workers: dict[str, float] = {}
    last_workers: dict[str, float] = {}
    for snap in firsts:
        for pid, value in snap["workers"].items():
            first_workers[pid] = min(value, first_workers.get(pid, value))
    for snap in lasts:
        for pid, value in snap["workers"].items():
            last_workers[pid] = max(value, last_workers.get(pid, value))
    workers = sum(last_workers[p] - v for p, v in first_workers.items() if p in last_workers)
    seconds = {
        "emulator": lasts[-1]["emulator"] - firsts[0]["emulator"],
        "jvm": lasts[-1]["jvm"] - firsts[0]["jvm"],
        "python workers": workers,
    }
    return {name: 1e6 * value / records for name, value in seconds.items()}


def tree_cpu(root: int) -> float:
    """CPU seconds so far of a process and all its descendants."""
    children, _, _ = _processes()
    return sum(map(cpu_seconds, _tree(children, root)))


def processes_cpu(root: int) -> dict[str, Any]:
    """The CPU seconds (user + system) so far of each process under ``root``, by
    ``"<pid>:<start time>"``, and ``now`` in the start times' unit (clock ticks since boot).

    Per process, not the tree's total: a Python worker torn down at the end of a job may be
    re-parented away from its JVM before anyone reaps it, so its CPU would drop out of a
    total; a caller that samples this while the job runs keeps each process's last reading.
    Standard library only: bench/peer_beam/beam_job.py imports it in Apache Beam's virtualenv.
    """
    now = float(Path("/proc/uptime").read_text().split()[0]) * CLOCK_TICKS
    children, _, _ = _processes()
    procs: dict[str, float] = {}
    for pid in _tree(children, root):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        procs[f"{pid}:{fields[19]}"] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return {"now": now, "procs": procs}


def per_record(before: dict[str, float], after: dict[str, float], records: int) -> dict[str, float]:
    """Microseconds of CPU per record, by role, between two snapshots."""
    return {name: 1e6 * (after[name] - before[name]) / records for name in before}


def describe(cpu: dict[str, float]) -> str:
    """``CPU us/record: a 1, b 2, total 3``: the roles in their order, then the sum."""
    parts = [f"{name} {value:.0f}" for name, value in cpu.items()]
    return f"CPU us/record: {', '.join(parts)}, total {sum(cpu.values()):.0f}"
