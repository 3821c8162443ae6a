"""Rescaling a running fault-suite job: stop-with-savepoint, then the same job restored from
the savepoint at another parallelism, as often as the configuration asks (``rescale``: from 2
to 4, then to 1), every time under load.

The records are counted across all the jobs of a run, as for one job: what a savepoint holds
must reach the destination exactly as a checkpoint's would.

Before each restore the cluster must have the slots the restored job needs
(:func:`~tests.faults.inject.ensure_slots`): a restored job that cannot get them never runs,
and would leave the rest of the run's input unhanded. A failed rescale never leaves a job
behind that the run does not know of: :class:`RescaleError` names the job still running (one
whose stop-with-savepoint failed keeps running), or none.
"""

from __future__ import annotations

import time
from pathlib import Path

from pyflink_gcp.tools.cluster import StandaloneCluster
from pyflink_gcp.tools.cluster.standalone import TERMINAL_STATES
from pyflink_gcp.tools.emulators.processes import http_json
from tests.faults.inject import ensure_slots, http_cancel, settle, tended_wait
from tests.faults.ledger import read_ledger
from tests.faults.targets import Config

__all__ = ["JOB", "RescaleError", "http_cancel", "rescale", "stop_with_savepoint"]

JOB = Path(__file__).with_name("job.py")
#: Stop-with-savepoint attempts per stop: a savepoint is declined while a task is not running
#: (restoring after a failover), and the job then runs on.
STOP_TRIES = 3


class RescaleError(RuntimeError):
    """A rescale step failed.

    Attributes:
        job: The run's job still running (its stop-with-savepoint failed, so it runs on), to be
            finished and counted as usual; None when no job of the run runs any more.
    """

    def __init__(self, message: str, job: str | None) -> None:
        super().__init__(message)
        self.job = job


def rescale(
    config: Config,
    cluster: StandaloneCluster,
    job: str,
    job_args: list[str],
    control: Path,
    ended: list[str],
    problems: list[str],
) -> tuple[str, str]:
    """Stops ``job`` with a savepoint and submits it again from there at each parallelism of
    ``config.rescale_to`` in turn.

    Each restored job must report that it restored the savepoint (``latest.restored``: a
    savepoint, id above 0), run at the asked parallelism and complete two checkpoints at the
    job's rate before it is stopped again: the stop then finds records buffered and in flight.
    TaskManagers that ended by themselves are appended to ``ended``, jobs an earlier run left
    holding slots (cancelled) to ``problems``.

    Returns:
        The last job's id (running) and what happened, for the run's line.

    Raises:
        RescaleError: A stop, a resubmission or a check failed (a restored job that failed a
            check is cancelled); its ``job`` is the run's job still running, if any.
    """
    steps: list[str] = []
    for parallelism in config.rescale_to:
        try:
            savepoint = stop_with_savepoint(cluster, job, control / "savepoints")
        except Exception as err:
            state = str(cluster.job(job).get("state"))
            running = None if state in TERMINAL_STATES else job
            raise RescaleError(f"{type(err).__name__}: {err}", running) from err
        state = cluster.wait_for_job(job, timeout=300)
        if state != "FINISHED":
            raise RescaleError(f"job {job} ended {state} after its stop-with-savepoint", None)
        settle(cluster, ended)
        handed = len(read_ledger(control).handed)
        print(f"    stopped with a savepoint after {handed} records: {savepoint}", flush=True)
        try:
            ensure_slots(cluster, parallelism, ended, problems, found="before a restore")
        except Exception as err:
            raise RescaleError(f"no restore at parallelism {parallelism}: {err}", None) from err
        submitted = cluster.submit(
            JOB,
            *job_args,
            parallelism=parallelism,
            detached=True,
            options=["-s", savepoint],
            timeout=300,
        )
        if not (submitted.ok and submitted.job_id):
            raise RescaleError(f"resubmission failed: {submitted.output[-2000:]}", None)
        job = submitted.job_id
        try:
            state = tended_wait(cluster, job, checkpoints=2, timeout=240, ended=ended)
            if state != "RUNNING":
                raise RuntimeError(f"restored job {job} ended {state} before its second checkpoint")
            restored = cluster.checkpoints(job).get("latest", {}).get("restored") or {}
            if not restored.get("is_savepoint") or int(restored.get("id", 0)) <= 0:
                raise RuntimeError(f"job {job} did not restore from the savepoint: {restored}")
            running = max(v.get("parallelism", 0) for v in cluster.job(job).get("vertices", []))
            if running != parallelism:
                raise RuntimeError(f"restored job {job} runs at parallelism {running}")
        except Exception as err:
            http_cancel(cluster, job)
            raise RescaleError(f"{type(err).__name__}: {err}", None) from err
        print(f"    restored as job {job} at parallelism {running}", flush=True)
        steps.append(f"savepoint at {handed} handed -> p={running}")
    return job, "; " + ", ".join(steps)


def stop_with_savepoint(cluster: StandaloneCluster, job: str, directory: Path) -> str:
    """Stops the job with a savepoint (REST ``POST /jobs/<id>/stop``, no drain) and returns
    the savepoint's location.

    A savepoint that fails while the job runs on (declined by a task not yet running: the job
    was restoring after a failover) is tried again once all the job's tasks run, up to
    :data:`STOP_TRIES` times in all.
    """
    for attempt in range(1, STOP_TRIES + 1):
        try:
            return _stop_once(cluster, job, directory)
        except RuntimeError as err:
            if attempt == STOP_TRIES or cluster.job(job).get("state") != "RUNNING":
                raise
            print(f"    stop-with-savepoint failed, the job runs on: {err}"[:300], flush=True)
            _wait_for_tasks(cluster, job)
    raise AssertionError("unreachable")


def _wait_for_tasks(cluster: StandaloneCluster, job: str, timeout: float = 120.0) -> None:
    """Waits until every vertex of the running job runs and a checkpoint completed after the
    failed savepoint (every task acknowledged one: ready for the next), or the timeout passed
    (the next stop then tells)."""
    completed = int(cluster.checkpoints(job).get("counts", {}).get("completed", 0))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        details = cluster.job(job)
        if details.get("state") != "RUNNING":
            return
        done = int(cluster.checkpoints(job).get("counts", {}).get("completed", 0))
        if done > completed and all(
            v.get("status") == "RUNNING" for v in details.get("vertices", [])
        ):
            return
        time.sleep(0.5)


def _stop_once(cluster: StandaloneCluster, job: str, directory: Path) -> str:
    url = f"{cluster.rest_url}/jobs/{job}"
    body = {"targetDirectory": directory.as_uri(), "drain": False}
    status, answer = http_json("POST", f"{url}/stop", body, timeout=10.0)
    if status != 202 or not isinstance(answer, dict) or "request-id" not in answer:
        raise RuntimeError(f"stop-with-savepoint of job {job}: HTTP {status}: {answer}")
    trigger = answer["request-id"]
    deadline = time.monotonic() + 300.0
    while time.monotonic() < deadline:
        progress = cluster.rest(f"/jobs/{job}/savepoints/{trigger}")
        if progress.get("status", {}).get("id") == "COMPLETED":
            operation = progress.get("operation") or {}
            if "location" in operation:
                return str(operation["location"])
            raise RuntimeError(f"savepoint of job {job} failed: {operation}"[:1500])
        time.sleep(0.5)
    raise TimeoutError(f"savepoint of job {job} not done after 300 s")
