"""Rescaling a running fault-suite job: stop-with-savepoint, then the same job restored from
the savepoint at another parallelism, as often as the configuration asks (``rescale``: from 2
to 4, then to 1), every time under load.

The records are counted across all the jobs of a run, as for one job: what a savepoint holds
must reach the destination exactly as a checkpoint's would.
"""

from __future__ import annotations

import time
from pathlib import Path

from pyflink_gcp.tools.cluster import StandaloneCluster
from tests.faults.inject import settle, tended_wait
from tests.faults.ledger import read_ledger
from tests.faults.targets import Config

JOB = Path(__file__).with_name("job.py")


def rescale(
    config: Config,
    cluster: StandaloneCluster,
    job: str,
    job_args: list[str],
    control: Path,
    ended: list[str],
) -> tuple[str, str]:
    """Stops ``job`` with a savepoint and submits it again from there at each parallelism of
    ``config.rescale_to`` in turn.

    Each restored job must report that it restored the savepoint (``latest.restored``: a
    savepoint, id above 0), run at the asked parallelism and complete two checkpoints at the
    job's rate before it is stopped again: the stop then finds records buffered and in flight.

    Returns:
        The last job's id (running) and what happened, for the run's line.

    Raises:
        RuntimeError: A stop, a resubmission or a check failed (the job then is cancelled).
    """
    steps: list[str] = []
    for parallelism in config.rescale_to:
        savepoint = stop_with_savepoint(cluster, job, control / "savepoints")
        state = cluster.wait_for_job(job, timeout=300)
        if state != "FINISHED":
            raise RuntimeError(f"job {job} ended {state} after its stop-with-savepoint")
        settle(cluster, ended)
        handed = len(read_ledger(control).handed)
        print(f"    stopped with a savepoint after {handed} records: {savepoint}", flush=True)
        submitted = cluster.submit(
            JOB,
            *job_args,
            parallelism=parallelism,
            detached=True,
            options=["-s", savepoint],
            timeout=300,
        )
        if not (submitted.ok and submitted.job_id):
            raise RuntimeError(f"resubmission failed: {submitted.output[-2000:]}")
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
        except Exception:
            http_cancel(cluster, job)
            raise
        print(f"    restored as job {job} at parallelism {running}", flush=True)
        steps.append(f"savepoint at {handed} handed -> p={running}")
    return job, "; " + ", ".join(steps)


def stop_with_savepoint(cluster: StandaloneCluster, job: str, directory: Path) -> str:
    """Stops the job with a savepoint (REST ``POST /jobs/<id>/stop``, no drain) and returns
    the savepoint's location."""
    from pyflink_gcp.tools.emulators.processes import http_json

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


def http_cancel(cluster: StandaloneCluster, job: str) -> None:
    """Cancels the job (REST ``PATCH /jobs/<id>``) and waits until it ended."""
    from pyflink_gcp.tools.emulators.processes import http_json

    http_json("PATCH", f"{cluster.rest_url}/jobs/{job}?mode=cancel", timeout=10.0)
    cluster.wait_for_job(job, timeout=120)
