"""The fault suite's unresponsive-emulator check: a sink whose emulator stops answering
(SIGSTOP) must fail its job within a short retry deadline, with an error naming the
destination."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from pyflink_gcp.tools.cluster import StandaloneCluster
from pyflink_gcp.tools.emulators import EmulatorStack
from tests.faults.inject import ensure_slots, http_cancel, paused, settle, tended_wait
from tests.faults.rescale import JOB
from tests.faults.targets import Config, Target, destination_names, prepare, run_name


def hang_check(
    target: Target,
    config: Config,
    cluster: StandaloneCluster,
    stack: EmulatorStack,
    project: str,
    deadline_s: float,
    ended: list[str],
) -> tuple[bool, str]:
    """Runs the job with a ``deadline_s`` retry deadline, stops its emulators (SIGSTOP) once
    it checkpointed, and reads the first failure from Flink's exception history: it must come
    within the deadline plus one attempt (and a margin for a loaded machine) and name one of
    the run's destinations. TaskManagers that end by themselves meanwhile, or after the
    job's cancel, are appended to ``ended`` (this target's); a job an earlier run left running
    (cancelled here, as it would hold the slots) fails the check."""
    problems: list[str] = []
    ensure_slots(cluster, config.parallelism, ended, problems, found="before the hang check")
    name = run_name()
    control = Path(tempfile.mkdtemp(prefix="faults-control-"))
    extra = prepare(target, project, name, stack, config.location)
    job_args = ["--sink", target.sink, "--project", project, "--name", name]
    job_args += ["--control", str(control), "--count", "1000000", "--rate", "50"]
    job_args += ["--retry-deadline-s", str(deadline_s), *extra, *config.job_args(target)]
    if target.method != "-":
        job_args += ["--method", target.method]
    parallelism = config.parallelism
    submitted = cluster.submit(JOB, *job_args, parallelism=parallelism, detached=True, timeout=300)
    if not (submitted.ok and submitted.job_id):
        return False, f"submission failed: {submitted.output[-1000:]}"
    job = submitted.job_id
    budget = deadline_s + 5.0 + 30.0  # the deadline, one attempt's timeout, a loaded machine
    try:
        if tended_wait(cluster, job, checkpoints=1, timeout=240, ended=ended) != "RUNNING":
            return False, f"job {job} ended before its first checkpoint"
        stopped_ms = int(time.time() * 1000)
        with paused(stack, target.services):
            end = time.monotonic() + budget + 30.0
            failures: list[dict] = []
            while time.monotonic() < end and not failures:
                failures = cluster.exceptions(job)
                time.sleep(0.5)
    finally:
        http_cancel(cluster, job)
        settle(cluster, ended)
        shutil.rmtree(control, ignore_errors=True)
    if not failures:
        return False, f"no failure {budget + 30:.0f} s after the emulator stopped answering"
    first = failures[-1]
    took = (int(first.get("timestamp", stopped_ms)) - stopped_ms) / 1000.0
    text = str(first.get("stacktrace", ""))
    named = [d for d in destination_names(target, project, name) if d in text]
    retried = "still failing after" in text
    summary = (
        f"failed {took:.1f} s after SIGSTOP (deadline {deadline_s:g} s), "
        f"{'names ' + named[0] if named else 'names no destination'}"
        f"{'' if retried else ', no retry report'}"
    )
    summary = "; ".join([*problems, summary])
    return bool(named) and retried and took <= budget and not problems, summary
