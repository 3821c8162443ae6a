"""The fault suite: checkpointed jobs on a standalone cluster, faults at random points, every
record counted.

    python -m tests.faults [--sink pubsub,bigquery,...] [--method M,...] [--config C,...]
                           [--runs R] [--faults N] [--seed S] [--full]

Per sink (and per BigQuery write method) it runs ``job.py`` at parallelism 4 on two
TaskManagers of two slots with ids 0..N-1, injects ``--faults`` faults per run at random
moments (seeded: the same seed picks the same kinds and gaps), waits for the job to finish,
reads every destination back and prints one table. It then checks that a sink whose emulator
stops answering (SIGSTOP) fails within a short retry deadline with an error naming the
destination. The exit status is non-zero when a record was lost, an exactly-once or idempotent
path delivered a duplicate, a FILE_LOADS run left a staged object in its bucket, a job did not
finish, or that check failed.

``--config`` runs the exactly-once BigQuery methods (BUFFERED_STREAM, FILE_LOADS) in the
configurations users choose (``targets.CONFIGS``): ``unaligned`` checkpoints, FILE_LOADS's
``default-interval``, a ``regional`` dataset, and ``rescale`` (stop-with-savepoint after the
faults, restored at parallelism 2). Other targets run in ``default`` only.

Minutes per sink on a 2-core machine; not part of ``make test`` (``make faults`` runs it).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from pyflink_gcp.cluster import ClusterSettings, StandaloneCluster
from pyflink_gcp.emulators import EmulatorStack
from tests.faults.inject import (
    KINDS,
    Fault,
    inject,
    paused,
    replace_dead_taskmanagers,
    tended_wait,
    wait_for_recovery,
)
from tests.faults.targets import (
    CONFIGS,
    STACK_SERVICES,
    TARGETS,
    Config,
    RestartProbe,
    Target,
    destination_names,
    prepare,
    probe_restart,
    read_back,
    run_name,
    staged_left,
)

JOB = Path(__file__).with_name("job.py")
PROJECT = "test-project"
SHORT = {
    "tm-kill": "tm",
    "worker-kill": "worker",
    "task-exception": "exc",
    "emulator-pause": "pause",
    "emulator-restart": "restart",
}


@dataclass
class Outcome:
    """What one target's runs added up to."""

    target: Target
    config: Config = CONFIGS["default"]
    faults: list[Fault] = field(default_factory=list)
    records_in: int = 0
    records_out: int = 0
    lost: int = 0
    duplicates: int = 0
    #: Objects left in FILE_LOADS runs' buckets after the job ended (None: not FILE_LOADS).
    staged_left: int | None = None
    #: One line per run that lost, duplicated (where not allowed) or left objects.
    run_problems: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    #: TaskManagers that ended by themselves during the runs (replaced, not injected).
    self_ended: list[str] = field(default_factory=list)
    hang: str = "not run"
    hang_ok: bool = True

    @property
    def label(self) -> str:
        return f"{self.target.label} {self.config.name}"

    def problems(self) -> list[str]:
        found = [f"{self.label}: {u}" for u in self.unfinished]
        found += [f"{self.label}: {p}" for p in self.run_problems]
        if not self.hang_ok:
            found.append(f"{self.label}: unresponsive-emulator check: {self.hang}")
        return found


def pick_kinds(rng: random.Random, kinds: list[str], n: int) -> list[str]:
    """``n`` kinds drawn from a bag refilled (and reshuffled) when empty, so a run of several
    faults covers every kind instead of leaving one out by chance."""
    picked: list[str] = []
    bag: list[str] = []
    while len(picked) < n:
        if not bag:
            bag = list(kinds)
            rng.shuffle(bag)
        picked.append(bag.pop())
    return picked


def one_run(
    target: Target,
    config: Config,
    args: argparse.Namespace,
    cluster: StandaloneCluster,
    stack: EmulatorStack,
    kinds: list[str],
    rng: random.Random,
    outcome: Outcome,
) -> None:
    """Submits one job, injects its faults, waits for the end, counts what arrived."""
    for ended in replace_dead_taskmanagers(cluster):
        print(f"  replaced a TaskManager that ended by itself: {ended}", flush=True)
        outcome.self_ended.append(ended)
    name = run_name()
    control = Path(tempfile.mkdtemp(prefix="faults-control-"))
    extra = prepare(target, PROJECT, name, stack, config.location)
    job_args = ["--sink", target.sink, "--project", PROJECT, "--name", name]
    job_args += ["--control", str(control), "--count", str(args.count)]
    job_args += ["--pace-ms", str(args.pace_ms), *extra, *config.job_args(target)]
    if target.method != "-":
        job_args += ["--method", target.method]
    submitted = cluster.submit(JOB, *job_args, parallelism=4, detached=True, timeout=300)
    if not (submitted.ok and submitted.job_id):
        outcome.unfinished.append(f"{name}: submission failed: {submitted.output[-2000:]}")
        return
    job = submitted.job_id
    try:
        state = tended_wait(cluster, job, checkpoints=2, timeout=240, ended=outcome.self_ended)
        if state != "RUNNING":
            raise RuntimeError(f"job {job} ended {state} before its second checkpoint")
        check_config(cluster, job, config)
    except Exception:
        http_cancel(cluster, job)  # it would hold the slots the next target needs
        raise
    faults: list[Fault] = []
    for kind in pick_kinds(rng, kinds, args.faults):
        time.sleep(rng.uniform(1.0, 4.0))
        if cluster.job(job).get("state") != "RUNNING":
            break
        fault = inject(
            kind, cluster=cluster, stack=stack, services=target.services, control=control, rng=rng
        )
        fault.recovery_s = wait_for_recovery(cluster, job, fault.at_ms, outcome.self_ended)
        faults.append(fault)
        recovery = "none" if fault.recovery_s is None else f"{fault.recovery_s:.1f} s"
        print(f"    {kind:<16} {fault.detail:<40} recovered in {recovery}", flush=True)
        if fault.recovery_s is None:
            break  # the job ended: later faults would hit nothing
    sequence = ", ".join(SHORT[f.kind] for f in faults) or "none"
    rescaled = ""
    if config.rescale_to is not None:
        try:
            job, rescaled = rescale(
                target, config, cluster, stack, name, job, job_args, control, outcome.self_ended
            )
        except Exception as err:  # noqa: BLE001 - reported; the records are counted all the same
            outcome.unfinished.append(f"{name}: rescale: {type(err).__name__}: {err}"[:1500])
            print(f"    rescale failed: {err!r}"[:800], flush=True)
    # The faults are in: the rest of the input need not be paced (see job.py).
    (control / "finish").write_text("finish\n")
    state = tended_wait(
        cluster, job, checkpoints=None, timeout=args.job_timeout, ended=outcome.self_ended
    )
    if state != "FINISHED":
        failures = cluster.exceptions(job)
        outcome.unfinished.append(f"{name}: job {job} ended {state}: {failures[:1]}")
    ids = read_back(target, PROJECT, name, stack, args.count)
    distinct = set(ids)
    missing = sorted(set(range(args.count)) - distinct)
    lost = len(missing)
    duplicates = len(ids) - len(distinct)
    left = staged_left(target, PROJECT, name)
    outcome.faults += faults
    outcome.records_in += args.count
    outcome.records_out += len(ids)
    outcome.lost += lost
    outcome.duplicates += duplicates
    if left is not None:
        outcome.staged_left = (outcome.staged_left or 0) + len(left)
    what = f"run {name} (faults: {sequence}{rescaled})"
    if lost:
        outcome.run_problems.append(f"{what}: {lost} records lost, ids {abbreviate(missing)}")
    if duplicates and not target.duplicates_allowed:
        twice = sorted(i for i, n in Counter(ids).items() if n > 1)
        outcome.run_problems.append(
            f"{what}: {duplicates} duplicates ({target.guarantee}), ids {abbreviate(twice)}"
        )
    if left:
        outcome.run_problems.append(
            f"{what}: {len(left)} staged objects left: {', '.join(left[:5])}"
            f"{' ...' if len(left) > 5 else ''}"
        )
    print(
        f"  run {name}: {state}, {len(faults)} faults ({sequence}){rescaled}, {args.count} in, "
        f"{len(ids)} out, {lost} lost, {duplicates} duplicates"
        f"{'' if left is None else f', {len(left)} staged objects left'}",
        flush=True,
    )
    shutil.rmtree(control, ignore_errors=True)


def abbreviate(ids: list[int], most: int = 20) -> str:
    return ", ".join(map(str, ids[:most])) + (f" ... ({len(ids)})" if len(ids) > most else "")


def check_config(cluster: StandaloneCluster, job: str, config: Config) -> None:
    """Raises unless the running job has the configuration's checkpointing."""
    if not config.unaligned:
        return
    settings = cluster.rest(f"/jobs/{job}/checkpoints/config")
    if settings.get("unaligned_checkpoints") is not True:
        raise RuntimeError(f"job {job} does not run with unaligned checkpoints: {settings}")


def rescale(
    target: Target,
    config: Config,
    cluster: StandaloneCluster,
    stack: EmulatorStack,
    name: str,
    job: str,
    job_args: list[str],
    control: Path,
    ended: list[str],
) -> tuple[str, str]:
    """Stops ``job`` with a savepoint and submits it again from there at
    ``config.rescale_to``; returns the new job's id (running, two checkpoints completed) and
    what happened, for the run's line."""
    assert config.rescale_to is not None
    savepoint = stop_with_savepoint(cluster, job, control / "savepoints")
    state = cluster.wait_for_job(job, timeout=300)
    if state != "FINISHED":
        raise RuntimeError(f"job {job} ended {state} after its stop-with-savepoint")
    before = len(set(read_back(target, PROJECT, name, stack, 0)))
    print(
        f"    stopped with a savepoint, {before} distinct ids in the tables: {savepoint}",
        flush=True,
    )
    submitted = cluster.submit(
        JOB,
        *job_args,
        parallelism=config.rescale_to,
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
        if not restored.get("is_savepoint"):
            raise RuntimeError(f"job {job} did not restore from the savepoint: {restored}")
        parallelism = max(v.get("parallelism", 0) for v in cluster.job(job).get("vertices", []))
        if parallelism != config.rescale_to:
            raise RuntimeError(f"restored job {job} runs at parallelism {parallelism}")
    except Exception:
        http_cancel(cluster, job)
        raise
    print(f"    restored as job {job} at parallelism {parallelism}", flush=True)
    return job, f"; savepoint at {before} ids, restored at p={parallelism}"


def stop_with_savepoint(cluster: StandaloneCluster, job: str, directory: Path) -> str:
    """Stops the job with a savepoint (REST ``POST /jobs/<id>/stop``, no drain) and returns
    the savepoint's location."""
    from pyflink_gcp.emulators.processes import http_json

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


def hang_check(
    target: Target,
    config: Config,
    cluster: StandaloneCluster,
    stack: EmulatorStack,
    deadline_s: float,
) -> tuple[bool, str]:
    """Runs the job with a ``deadline_s`` retry deadline, stops its emulators (SIGSTOP) once
    it checkpointed, and reads the first failure from Flink's exception history: it must come
    within the deadline plus one attempt (and a margin for a loaded machine) and name one of
    the run's destinations."""
    for ended in replace_dead_taskmanagers(cluster):
        print(f"  replaced a TaskManager that ended by itself: {ended}", flush=True)
    name = run_name()
    control = Path(tempfile.mkdtemp(prefix="faults-control-"))
    extra = prepare(target, PROJECT, name, stack, config.location)
    job_args = ["--sink", target.sink, "--project", PROJECT, "--name", name]
    job_args += ["--control", str(control), "--count", "100000", "--pace-ms", "5"]
    job_args += ["--retry-deadline-s", str(deadline_s), *extra, *config.job_args(target)]
    if target.method != "-":
        job_args += ["--method", target.method]
    submitted = cluster.submit(JOB, *job_args, parallelism=4, detached=True, timeout=300)
    if not (submitted.ok and submitted.job_id):
        return False, f"submission failed: {submitted.output[-1000:]}"
    job = submitted.job_id
    budget = deadline_s + 5.0 + 30.0  # the deadline, one attempt's timeout, a loaded machine
    try:
        ended: list[str] = []
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
        shutil.rmtree(control, ignore_errors=True)
    if not failures:
        return False, f"no failure {budget + 30:.0f} s after the emulator stopped answering"
    first = failures[-1]
    took = (int(first.get("timestamp", stopped_ms)) - stopped_ms) / 1000.0
    text = str(first.get("stacktrace", ""))
    named = [d for d in destination_names(target, PROJECT, name) if d in text]
    retried = "still failing after" in text
    summary = (
        f"failed {took:.1f} s after SIGSTOP (deadline {deadline_s:g} s), "
        f"{'names ' + named[0] if named else 'names no destination'}"
        f"{'' if retried else ', no retry report'}"
    )
    return bool(named) and retried and took <= budget, summary


def http_cancel(cluster: StandaloneCluster, job: str) -> None:
    """Cancels the job (REST ``PATCH /jobs/<id>``) and waits until it ended."""
    from pyflink_gcp.emulators.processes import http_json

    http_json("PATCH", f"{cluster.rest_url}/jobs/{job}?mode=cancel", timeout=10.0)
    cluster.wait_for_job(job, timeout=120)


def table(outcomes: list[Outcome], probes: dict[str, RestartProbe]) -> str:
    """The suite's figures as a Markdown table."""
    lines = [
        "| target | guarantee | faults (by kind) | in | out | lost | duplicates | staged left "
        "| recovery s (median / max) | unresponsive emulator |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for o in outcomes:
        kinds = Counter(f.kind for f in o.faults)
        by_kind = ", ".join(f"{SHORT[k]} {kinds[k]}" for k in KINDS if kinds[k])
        times = [f.recovery_s for f in o.faults if f.recovery_s is not None]
        recovery = f"{statistics.median(times):.1f} / {max(times):.1f}" if times else "-"
        ended = f" (+{len(o.self_ended)} TaskManager ended by itself)" if o.self_ended else ""
        left = "-" if o.staged_left is None else str(o.staged_left)
        lines.append(
            f"| {o.label} | {o.target.guarantee} "
            f"| {len(o.faults)}: {by_kind or '-'}{ended} | {o.records_in} | {o.records_out} "
            f"| {o.lost} | {o.duplicates} | {left} | {recovery} | {o.hang} |"
        )
    if probes:
        lines.append("")
        lines.append("Emulator restart (data kept across a restart?):")
        for probe in probes.values():
            verdict = (
                "kept (a sink gets the restart fault only if all its emulators keep their data)"
                if probe.survives
                else "restart fault skipped for its sinks"
            )
            lines.append(f"- {probe.service}: {probe.detail} ({probe.seconds:.1f} s); {verdict}")
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.faults", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--sink", default=",".join(TARGETS), help="comma-separated sinks")
    parser.add_argument("--method", default="", help="BigQuery write methods to run (default all)")
    parser.add_argument(
        "--config",
        default="default",
        help=f"comma-separated configurations ({', '.join(CONFIGS)}); those other than "
        "default run BUFFERED_STREAM and FILE_LOADS only",
    )
    parser.add_argument("--full", action="store_true", help="4 runs of 5 faults per target")
    parser.add_argument("--runs", type=int, default=None, help="runs per target (quick: 1)")
    parser.add_argument("--faults", type=int, default=None, help="faults per run (quick: 4)")
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--count", type=int, default=3000, help="records per run")
    parser.add_argument(
        "--pace-ms",
        type=float,
        default=400.0,
        help="per record and subtask, until the run's faults are in (then unpaced)",
    )
    parser.add_argument("--job-timeout", type=float, default=900.0)
    parser.add_argument("--retry-deadline-s", type=float, default=5.0, help="for the hang check")
    parser.add_argument("--no-hang-check", action="store_true")
    parser.add_argument("--no-restart-probe", action="store_true")
    args = parser.parse_args(argv)
    args.runs = args.runs if args.runs is not None else (4 if args.full else 1)
    args.faults = args.faults if args.faults is not None else (5 if args.full else 4)
    unknown = set(args.sink.split(",")) - set(TARGETS)
    if unknown:
        parser.error(f"unknown sink(s) {', '.join(sorted(unknown))}; known: {', '.join(TARGETS)}")
    unknown = set(args.config.split(",")) - set(CONFIGS)
    if unknown:
        parser.error(f"unknown config(s) {', '.join(sorted(unknown))}; known: {', '.join(CONFIGS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    sinks = args.sink.split(",")
    methods = set(args.method.split(",")) if args.method else None
    targets = [
        t for s in sinks for t in TARGETS[s] if methods is None or t.method in (methods | {"-"})
    ]
    runs = [
        (t, CONFIGS[c]) for c in args.config.split(",") for t in targets if CONFIGS[c].applies(t)
    ]
    if not runs:
        print(f"no target of --sink {args.sink} takes --config {args.config}", file=sys.stderr)
        return 2
    targets = list(dict.fromkeys(t for t, _ in runs))
    services = sorted({svc for s in sinks for svc in STACK_SERVICES[s]})
    rng = random.Random(args.seed)
    outcomes: list[Outcome] = []
    probes: dict[str, RestartProbe] = {}
    with EmulatorStack(services=services, project=PROJECT) as stack:
        os.environ.update(stack.env)
        if not args.no_restart_probe:
            for service in sorted({svc for t in targets for svc in t.services}):
                probes[service] = probe_restart(service, PROJECT, stack)
                print(f"restart probe {service}: {probes[service].detail}", flush=True)
        settings = ClusterSettings(restart_attempts=1000)
        with StandaloneCluster(settings, env=stack.env) as cluster:
            for target, config in runs:
                kinds = ["tm-kill", "worker-kill", "task-exception", "emulator-pause"]
                if probes and all(probes[s].survives for s in target.services):
                    kinds.append("emulator-restart")
                outcome = Outcome(target, config)
                outcomes.append(outcome)
                print(
                    f"{outcome.label} ({config.summary}): {args.runs} run(s) of "
                    f"{args.faults} faults",
                    flush=True,
                )
                try:
                    for _ in range(args.runs):
                        one_run(target, config, args, cluster, stack, kinds, rng, outcome)
                    if not args.no_hang_check:
                        outcome.hang_ok, outcome.hang = hang_check(
                            target, config, cluster, stack, args.retry_deadline_s
                        )
                        print(f"  unresponsive emulator: {outcome.hang}", flush=True)
                except Exception as err:  # noqa: BLE001 - reported, and the next target runs
                    outcome.unfinished.append(f"{type(err).__name__}: {str(err)[:500]}")
                    print(f"  {outcome.label} aborted: {err!r}"[:800], flush=True)
        kept = cluster.logs_kept()
    print()
    print(table(outcomes, probes))
    problems = [p for o in outcomes for p in o.problems()]
    for problem in problems:
        print(f"FAIL {problem}")
    if kept is not None:
        print(f"cluster logs kept in {kept}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
