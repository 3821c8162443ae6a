"""Injecting one fault into a running job on the standalone cluster, and timing its recovery.

The kinds:

- ``tm-kill``: one TaskManager's whole process group (JVM and Python workers) gets SIGKILL,
  then a replacement is started (the job needs all four slots); a replacement that fails to
  register is reported (exit code and log) as a TaskManager that ended by itself, and another
  one is started.
- ``worker-kill``: one Python worker process of a TaskManager gets SIGKILL; the TaskManager
  lives on and the task fails when its worker's channel breaks.
- ``task-exception``: a ``raise`` file in the run's control directory makes the job's paced map
  raise once (see ``job.py``).
- ``emulator-pause``: the sink's emulators are stopped with SIGSTOP for 10 s, then resumed:
  the service stops answering without losing what it holds, so the sink's retries must ride
  it out (or fail the job, which then restores).
- ``emulator-restart``: the emulator stopped, started again after 10 s on the same ports; only
  for services whose emulator keeps its data across a restart (``targets.probe_restart``).

Recovery is read from Flink's checkpoint history: the time from the fault to the
acknowledgement of the first checkpoint triggered after it, which is when the job again has
a state that includes records written after the fault. At that point the suite also reads
where a job that failed over restarted from (``/jobs/<id>/checkpoints`` ``latest.restored``):
a restart after the fault must have restored a checkpoint with an id above 0, or the replay
began from the start of the input and would hide a sink that lost what it buffered.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pyflink_gcp.tools.cluster import ClusterError, StandaloneCluster
from pyflink_gcp.tools.cluster.standalone import TERMINAL_STATES, Slots, TaskManager
from pyflink_gcp.tools.emulators import EmulatorStack
from pyflink_gcp.tools.emulators.processes import group_members, http_json

KINDS = ("tm-kill", "worker-kill", "task-exception", "emulator-pause", "emulator-restart")
#: How long an emulator fault keeps the service away.
OUTAGE_S = 10.0


@dataclass
class Fault:
    """One injected fault.

    Attributes:
        kind: One of :data:`KINDS`.
        at_ms: Wall-clock time of the injection (epoch ms, Flink's clock on this machine).
        detail: What exactly was hit (a TaskManager, a pid, a service).
        recovery_s: Seconds to the first completed checkpoint after it, None when none came.
        checkpoint_ms: Trigger time (epoch ms) of the last checkpoint completed before the
            fault, the state a failover restores; None when there was none.
        restored: The id of the checkpoint the job restored after the fault; None when the
            job did not fail over (an emulator pause the sink's retries rode out).
        restore_problem: Why the restart after the fault was wrong (it restored no checkpoint,
            or one with id 0), None when it was right or there was none.
        outage_s: How long the fault kept the service away (emulator faults), else 0.
        exposed: Records the fault put at risk (``__main__.exposure``, from the job's
            emission logs, filled in after the run).
    """

    kind: str
    at_ms: int
    detail: str
    recovery_s: float | None = None
    checkpoint_ms: int | None = None
    restored: int | None = None
    restore_problem: str | None = None
    outage_s: float = 0.0
    exposed: int = 0


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def python_workers(cluster: StandaloneCluster, index: int) -> list[int]:
    """The Python worker processes of TaskManager ``index``.

    In process mode a TaskManager starts ``pyflink-udf-runner.sh`` (bash) per Python operator
    chain of a slot, which runs ``python -m pyflink.fn_execution.beam.beam_boot``: that Python
    process is the worker (the SDK harness runs in it), next to a ``tee`` of its log. Killing
    it breaks the operator's channel as a crashed or OOM-killed worker does.
    """
    pgid = cluster.taskmanagers[index].process.pgid
    return [
        pid
        for pid in group_members(pgid)
        if "pyflink.fn_execution.beam.beam_boot" in _cmdline(pid)
        and "pyflink-udf-runner" not in _cmdline(pid)
    ]


#: Failed starts of a TaskManager tolerated in a row before the cluster is given up.
START_TRIES = 3


class SlotsError(RuntimeError):
    """A job cannot get the task slots it needs ("not enough slots: N of M"): what a run that
    stalled for them is reported as, rather than as records lost."""


def replace_dead_taskmanagers(cluster: StandaloneCluster, want: int | None = None) -> list[str]:
    """Reports each TaskManager that ended without being killed by the suite, and starts
    TaskManagers until ``want`` (default: the cluster's own count) live ones registered.

    A TaskManager can end by itself: on this machine one shut down with a FATAL error in Beam's
    ``DefaultJobBundleFactory.close`` ("Reference count must not be negative") while a
    cancelled job's Python operator closed, after one of its workers had been killed earlier;
    a replacement exited while it registered, with Flink's exit for an uncaught error in a
    thread. The next job would then never get its slots. A replacement that fails to start is
    killed, reported and started again (:data:`START_TRIES` times in all).

    Returns:
        What ended (exit code, what Flink means by it, the log's telling lines), to be
        reported against the target whose job the TaskManager served.

    Raises:
        ClusterError: The TaskManagers could not be brought back to ``want``.
    """
    ended = []
    for taskmanager in cluster.taskmanagers:
        if not taskmanager.killed and taskmanager.process.exited() is not None:
            ended.append(taskmanager.exit_report() or taskmanager.resource_id)
            taskmanager.killed = True  # no longer ours to watch
    count = cluster.settings.taskmanagers if want is None else want
    for failure in cluster.ensure_taskmanagers(count, tries=START_TRIES):
        ended.append(f"a TaskManager started as a replacement failed: {failure}")
    return ended


def jobs_holding_slots(cluster: StandaloneCluster, but: str | None = None) -> dict[str, int]:
    """The jobs other than ``but`` that have not ended, each with the slots it holds or waits
    for: its widest vertex (the job's operators share one slot-sharing group)."""
    held = {}
    for job in cluster.jobs():
        if job.get("jid") == but or job.get("state") in TERMINAL_STATES:
            continue
        vertices = cluster.job(str(job["jid"])).get("vertices", [])
        held[str(job["jid"])] = max((int(v.get("parallelism", 0)) for v in vertices), default=0)
    return held


def shortage(slots: Slots, needed: int, others: Mapping[str, int]) -> str | None:
    """Why a job that needs ``needed`` slots cannot be seated ("not enough slots: N of M"):
    the live TaskManagers' slots, less those other jobs hold, are too few; None when enough."""
    usable = max(slots.total - sum(others.values()), 0)
    if usable >= needed:
        return None
    held = "".join(f"; job {job} holds {width}" for job, width in others.items())
    return (
        f"not enough slots: {usable} of {needed} ({slots.taskmanagers} live TaskManagers "
        f"registered with {slots.total} slots{held})"
    )


def job_shortage(cluster: StandaloneCluster, job: str) -> str | None:
    """Why ``job`` does not get all its tasks running, when it is missing slots: see
    :func:`shortage`. None when its tasks all run or the slots would seat it."""
    vertices = cluster.job(job).get("vertices", [])
    if all(v.get("status") in ("RUNNING", "FINISHED") for v in vertices):
        return None
    needed = max((int(v.get("parallelism", 0)) for v in vertices), default=0)
    return shortage(cluster.slots(), needed, jobs_holding_slots(cluster, but=job))


def ensure_slots(
    cluster: StandaloneCluster,
    needed: int,
    ended: list[str],
    problems: list[str],
    *,
    found: str,
    timeout: float = 60.0,
) -> None:
    """Makes sure ``needed`` slots are free before a job is submitted or restored.

    A job still running at this point was left by an earlier run (the suite runs one job at a
    time): it is cancelled, and noted in ``problems``. TaskManagers that ended by themselves
    are reported in ``ended`` (marked ``found``: when they were found) and replaced, and
    TaskManagers started until the live ones have the slots (each start waits for its
    registration; failed starts are reported and tried again, a bounded number of times).
    Then it waits until the slots are free: those of a job that just ended come back within
    seconds.

    Raises:
        SlotsError: Fewer than ``needed`` slots free after ``timeout``.
        ClusterError: No TaskManager would start.
    """
    for job, width in jobs_holding_slots(cluster).items():
        http_cancel(cluster, job)
        problems.append(f"job {job}, left running by an earlier run, held {width} slots: cancelled")
        print(f"  cancelled job {job}, left running by an earlier run ({width} slots)", flush=True)
    want = max(cluster.settings.taskmanagers, -(-needed // cluster.settings.slots))
    deadline = time.monotonic() + timeout
    while True:
        for what in replace_dead_taskmanagers(cluster, want):
            ended.append(f"(found {found}) {what}")
            print(f"  a TaskManager ended by itself (found {found}): {what}"[:800], flush=True)
        slots = cluster.slots()
        if slots.free >= needed:
            return
        if time.monotonic() > deadline:
            why = shortage(slots, needed, jobs_holding_slots(cluster)) or (
                f"not enough slots: {slots.free} of {needed} free ({slots.taskmanagers} live "
                f"TaskManagers registered with {slots.total} slots)"
            )
            raise SlotsError(f"{why} after {timeout:g} s")
        time.sleep(0.5)


def http_cancel(cluster: StandaloneCluster, job: str) -> None:
    """Cancels the job (REST ``PATCH /jobs/<id>``) and waits until it ended."""
    http_json("PATCH", f"{cluster.rest_url}/jobs/{job}?mode=cancel", timeout=10.0)
    cluster.wait_for_job(job, timeout=120)


def tended_wait(
    cluster: StandaloneCluster,
    job_id: str,
    *,
    checkpoints: int | None,
    timeout: float,
    ended: list[str],
) -> str:
    """Waits until the job completed ``checkpoints`` checkpoints (None: until it ended),
    replacing every TaskManager that ends by itself meanwhile.

    The FATAL shutdown of ``replace_dead_taskmanagers`` also happens while a job restarts after
    an injected fault (the failed attempt's Python operators close): the job, which needs all
    four slots, would then restart until the wait's timeout, and the run would be lost to a
    Beam bug rather than measured. What ended is appended to ``ended``, to be reported.

    Returns:
        The job's state when the wait ended (``RUNNING`` once the checkpoints completed).

    Raises:
        SlotsError: Neither within ``timeout``, and the job has tasks waiting for slots the
            cluster cannot give it.
        TimeoutError: Neither within ``timeout``, for another reason.
    """
    deadline = time.monotonic() + timeout
    while True:
        for what in replace_dead_taskmanagers(cluster):
            ended.append(what)
            print(f"    a TaskManager ended by itself, replaced: {what}", flush=True)
        state = str(cluster.job(job_id).get("state"))
        if state in TERMINAL_STATES:
            return state
        if checkpoints is not None:
            stats = cluster.checkpoints(job_id)
            if int(stats.get("counts", {}).get("completed", 0)) >= checkpoints:
                return state
        if time.monotonic() > deadline:
            what = "the job's end" if checkpoints is None else f"{checkpoints} checkpoints"
            message = f"job {job_id} still {state} after {timeout:g} s waiting for {what}"
            missing = job_shortage(cluster, job_id)
            if missing is not None:
                raise SlotsError(f"{message}: {missing}")
            raise TimeoutError(message)
        time.sleep(0.5)


def settle(cluster: StandaloneCluster, ended: list[str], timeout: float = 30.0) -> None:
    """After a job ended (finished, cancelled, stopped): waits until the TaskManagers freed its
    slots, and a few seconds more, then replaces each TaskManager that ended by itself and
    appends it to ``ended``.

    A TaskManager that shuts itself down does so while the ended job's Python operators close,
    seconds after the job's end: checked here, it is counted against the target whose job it
    served, not the next target's first wait.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        managers = cluster.rest("/taskmanagers").get("taskmanagers", [])
        if all(int(m.get("freeSlots", 0)) == int(m.get("slotsNumber", 0)) for m in managers):
            break
        time.sleep(0.5)
    time.sleep(3.0)
    wait_for_dying_taskmanagers(cluster, timeout=timeout)
    for what in replace_dead_taskmanagers(cluster):
        ended.append(what)
        print(
            f"    a TaskManager ended by itself after the job's end, replaced: {what}", flush=True
        )


FATAL_MARK = "Fatal error occurred while executing the TaskManager"


def dying_taskmanagers(cluster: StandaloneCluster) -> list[TaskManager]:
    """The live TaskManagers that logged Flink's fatal error: they shut down about 10 s later
    (the runner's grace period), and are then found by ``replace_dead_taskmanagers``."""
    dying = []
    for taskmanager in cluster.taskmanagers:
        if taskmanager.killed or taskmanager.process.describe_exit() is not None:
            continue
        for log in cluster.layout.log.glob(f"flink-{taskmanager.resource_id}-taskexecutor-*.log"):
            with contextlib.suppress(OSError), log.open(errors="replace") as lines:
                if any(FATAL_MARK in line for line in lines):
                    dying.append(taskmanager)
                    break
    return dying


def wait_for_dying_taskmanagers(cluster: StandaloneCluster, timeout: float = 30.0) -> None:
    """Waits until every TaskManager that logged a fatal error has exited, so that it is
    counted against the target whose job it served and not against the next one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and dying_taskmanagers(cluster):
        time.sleep(0.5)


def last_completed_ms(cluster: StandaloneCluster, job_id: str) -> int | None:
    """Trigger time (epoch ms) of the job's latest completed checkpoint, None before any."""
    latest = (cluster.checkpoints(job_id).get("latest") or {}).get("completed") or {}
    stamp = latest.get("trigger_timestamp")
    return None if stamp is None else int(stamp)


def check_restore(cluster: StandaloneCluster, job_id: str, fault: Fault) -> None:
    """Fills in ``fault.restored`` / ``fault.restore_problem`` once the job recovered.

    The job failed over after the fault when its exception history has an entry from then on;
    it must then have restored (``latest.restored``, restored at or after the failure) a
    checkpoint with an id above 0. A worker kill or a task exception always fails the job
    (the worker and the raising map are the job's), so for those a missing failure is a
    problem too; a TaskManager kill fails it only when the job had tasks there (at
    parallelism 2 both may run on the other TaskManager).
    """
    failures = [e for e in cluster.exceptions(job_id) if int(e.get("timestamp", 0)) >= fault.at_ms]
    restored = (cluster.checkpoints(job_id).get("latest") or {}).get("restored") or {}
    must_fail = fault.kind in ("worker-kill", "task-exception")
    if not failures:
        if must_fail:
            fault.restore_problem = "no failover recorded after the fault"
        return
    first = min(int(e.get("timestamp", 0)) for e in failures)
    when = int(restored.get("restore_timestamp", 0) or 0)
    if not restored or when < first:
        fault.restore_problem = f"failed over without restoring a checkpoint: {restored}"
        return
    fault.restored = int(restored.get("id", 0))
    if fault.restored <= 0:
        fault.restore_problem = f"restored checkpoint id {fault.restored}: {restored}"


def busy_taskmanagers(cluster: StandaloneCluster) -> list[int]:
    """The live TaskManagers that run tasks (a slot in use), or every live one if the REST API
    says none does: a job at parallelism 2 may hold one TaskManager only, and killing the idle
    one would test nothing."""
    live = live_taskmanagers(cluster)
    try:
        listed = cluster.rest("/taskmanagers").get("taskmanagers", [])
    except ClusterError:  # the REST API did not answer: any live one will do
        return live
    used = {t["id"] for t in listed if int(t.get("freeSlots", 0)) < int(t.get("slotsNumber", 0))}
    busy = [i for i in live if cluster.taskmanagers[i].resource_id in used]
    return busy or live


def live_taskmanagers(cluster: StandaloneCluster) -> list[int]:
    """The indexes of the TaskManagers the suite did not kill or retire."""
    return [i for i, tm in enumerate(cluster.taskmanagers) if not tm.killed]


def _signal_services(stack: EmulatorStack, services: Sequence[str], sig: int) -> None:
    for service in services:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(stack.processes[service].pgid, sig)


@contextlib.contextmanager
def paused(stack: EmulatorStack, services: Sequence[str]):  # type: ignore[no-untyped-def]
    """The services' emulators stopped (SIGSTOP to their process groups) inside the block,
    resumed on the way out whatever happened."""
    _signal_services(stack, services, signal.SIGSTOP)
    try:
        yield
    finally:
        _signal_services(stack, services, signal.SIGCONT)


def inject(
    kind: str,
    *,
    cluster: StandaloneCluster,
    stack: EmulatorStack,
    services: Sequence[str],
    control: Path,
    rng: random.Random,
    ended: list[str],
) -> Fault:
    """Injects one fault of ``kind`` and returns it once injected (the outage of an emulator
    fault is over, a replacement TaskManager registered). A replacement that failed to start
    before one registered is appended to ``ended``, with its exit code and log."""
    at_ms = int(time.time() * 1000)
    if kind == "tm-kill":
        index = rng.choice(busy_taskmanagers(cluster))
        killed = cluster.kill_taskmanager(index)
        for what in replace_dead_taskmanagers(cluster):
            ended.append(what)
            print(f"    {what}"[:800], flush=True)
        replacement = cluster.taskmanagers[live_taskmanagers(cluster)[-1]].resource_id
        return Fault(kind, at_ms, f"{killed.resource_id} -> {replacement}")
    if kind == "worker-kill":
        candidates = [
            (i, pid) for i in live_taskmanagers(cluster) for pid in python_workers(cluster, i)
        ]
        if not candidates:
            raise RuntimeError("no Python worker process found in any live TaskManager")
        index, pid = rng.choice(candidates)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return Fault(kind, at_ms, f"pid {pid} of {cluster.taskmanagers[index].resource_id}")
    if kind == "task-exception":
        (control / "raise").write_text("raise\n")
        return Fault(kind, at_ms, "raise file")
    if kind == "emulator-pause":
        with paused(stack, services):
            time.sleep(OUTAGE_S)
        return Fault(kind, at_ms, f"SIGSTOP {'+'.join(services)} {OUTAGE_S:g} s", outage_s=OUTAGE_S)
    if kind == "emulator-restart":
        for service in services:
            process = stack.processes[service]
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pgid, signal.SIGKILL)
        time.sleep(OUTAGE_S)
        for service in services:
            stack.restart(service)
        return Fault(kind, at_ms, f"restart {'+'.join(services)}", outage_s=OUTAGE_S)
    raise ValueError(kind)


def wait_for_recovery(
    cluster: StandaloneCluster,
    job_id: str,
    after_ms: int,
    ended: list[str],
    timeout: float = 300.0,
) -> float | None:
    """Seconds from ``after_ms`` to the acknowledgement of the first completed checkpoint
    triggered after it; None when the job ended or ``timeout`` passed without one.

    The REST history keeps the last few checkpoints only, so this polls while the job runs
    rather than reading the history once at the end. A TaskManager that ends by itself
    meanwhile is replaced (and appended to ``ended``), as in :func:`tended_wait`.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for what in replace_dead_taskmanagers(cluster):
            ended.append(what)
            print(f"    a TaskManager ended by itself, replaced: {what}", flush=True)
        stats = cluster.checkpoints(job_id)
        done = [
            c
            for c in stats.get("history", [])
            if c.get("status") == "COMPLETED" and int(c.get("trigger_timestamp", 0)) >= after_ms
        ]
        if done:
            first = min(done, key=lambda c: int(c["trigger_timestamp"]))
            return (int(first["latest_ack_timestamp"]) - after_ms) / 1000.0
        if cluster.job(job_id).get("state") in TERMINAL_STATES:
            return None
        time.sleep(0.5)
    return None
