"""The fault suite: checkpointed jobs on a standalone cluster, faults at random points, every
record counted.

    python -m tests.faults [--sink pubsub,bigquery,...] [--runs R] [--faults N] [--seed S] [--full]

Per sink (and per BigQuery write method) it runs ``job.py`` at parallelism 4 on two
TaskManagers of two slots with ids 0..N-1, injects ``--faults`` faults per run at random
moments (seeded: the same seed picks the same kinds and gaps), waits for the job to finish,
reads every destination back and prints one table. It then checks that a sink whose emulator
stops answering (SIGSTOP) fails within a short retry deadline with an error naming the
destination. The exit status is non-zero when a record was lost, an exactly-once or idempotent
path delivered a duplicate, a job did not finish, or that check failed.

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
    STACK_SERVICES,
    TARGETS,
    RestartProbe,
    Target,
    destination_names,
    prepare,
    probe_restart,
    read_back,
    run_name,
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
    faults: list[Fault] = field(default_factory=list)
    records_in: int = 0
    records_out: int = 0
    lost: int = 0
    duplicates: int = 0
    unfinished: list[str] = field(default_factory=list)
    #: TaskManagers that ended by themselves during the runs (replaced, not injected).
    self_ended: list[str] = field(default_factory=list)
    hang: str = "not run"
    hang_ok: bool = True

    def problems(self) -> list[str]:
        found = [f"{self.target.label}: {u}" for u in self.unfinished]
        if self.lost:
            found.append(f"{self.target.label}: {self.lost} records lost")
        if self.duplicates and not self.target.duplicates_allowed:
            found.append(
                f"{self.target.label}: {self.duplicates} duplicates ({self.target.guarantee})"
            )
        if not self.hang_ok:
            found.append(f"{self.target.label}: unresponsive-emulator check: {self.hang}")
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
    extra = prepare(target, PROJECT, name, stack)
    job_args = ["--sink", target.sink, "--project", PROJECT, "--name", name]
    job_args += ["--control", str(control), "--count", str(args.count)]
    job_args += ["--pace-ms", str(args.pace_ms), *extra]
    if target.method != "-":
        job_args += ["--method", target.method]
    submitted = cluster.submit(JOB, *job_args, parallelism=4, detached=True, timeout=300)
    if not (submitted.ok and submitted.job_id):
        outcome.unfinished.append(f"submission failed: {submitted.output[-2000:]}")
        return
    job = submitted.job_id
    try:
        state = tended_wait(cluster, job, checkpoints=2, timeout=240, ended=outcome.self_ended)
        if state != "RUNNING":
            raise RuntimeError(f"job {job} ended {state} before its second checkpoint")
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
    # The faults are in: the rest of the input need not be paced (see job.py).
    (control / "finish").write_text("finish\n")
    state = tended_wait(
        cluster, job, checkpoints=None, timeout=args.job_timeout, ended=outcome.self_ended
    )
    if state != "FINISHED":
        failures = cluster.exceptions(job)
        outcome.unfinished.append(f"job {job} ended {state}: {failures[:1]}")
    ids = read_back(target, PROJECT, name, stack, args.count)
    distinct = set(ids)
    lost = len(set(range(args.count)) - distinct)
    outcome.faults += faults
    outcome.records_in += args.count
    outcome.records_out += len(ids)
    outcome.lost += lost
    outcome.duplicates += len(ids) - len(distinct)
    print(
        f"  run {name}: {state}, {len(faults)} faults, {args.count} in, {len(ids)} out, "
        f"{lost} lost, {len(ids) - len(distinct)} duplicates",
        flush=True,
    )
    shutil.rmtree(control, ignore_errors=True)


def hang_check(
    target: Target, cluster: StandaloneCluster, stack: EmulatorStack, deadline_s: float
) -> tuple[bool, str]:
    """Runs the job with a ``deadline_s`` retry deadline, stops its emulators (SIGSTOP) once
    it checkpointed, and reads the first failure from Flink's exception history: it must come
    within the deadline plus one attempt (and a margin for a loaded machine) and name one of
    the run's destinations."""
    for ended in replace_dead_taskmanagers(cluster):
        print(f"  replaced a TaskManager that ended by itself: {ended}", flush=True)
    name = run_name()
    control = Path(tempfile.mkdtemp(prefix="faults-control-"))
    extra = prepare(target, PROJECT, name, stack)
    job_args = ["--sink", target.sink, "--project", PROJECT, "--name", name]
    job_args += ["--control", str(control), "--count", "100000", "--pace-ms", "5"]
    job_args += ["--retry-deadline-s", str(deadline_s), *extra]
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
        "| sink | method | guarantee | faults (by kind) | in | out | lost | duplicates "
        "| recovery s (median / max) | unresponsive emulator |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for o in outcomes:
        kinds = Counter(f.kind for f in o.faults)
        by_kind = ", ".join(f"{SHORT[k]} {kinds[k]}" for k in KINDS if kinds[k])
        times = [f.recovery_s for f in o.faults if f.recovery_s is not None]
        recovery = f"{statistics.median(times):.1f} / {max(times):.1f}" if times else "-"
        ended = f" (+{len(o.self_ended)} TaskManager ended by itself)" if o.self_ended else ""
        lines.append(
            f"| {o.target.sink} | {o.target.method} | {o.target.guarantee} "
            f"| {len(o.faults)}: {by_kind or '-'}{ended} | {o.records_in} | {o.records_out} | {o.lost} "
            f"| {o.duplicates} | {recovery} | {o.hang} |"
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
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    sinks = args.sink.split(",")
    methods = set(args.method.split(",")) if args.method else None
    targets = [
        t for s in sinks for t in TARGETS[s] if methods is None or t.method in (methods | {"-"})
    ]
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
            for target in targets:
                kinds = ["tm-kill", "worker-kill", "task-exception", "emulator-pause"]
                if probes and all(probes[s].survives for s in target.services):
                    kinds.append("emulator-restart")
                outcome = Outcome(target)
                outcomes.append(outcome)
                print(f"{target.label}: {args.runs} run(s) of {args.faults} faults", flush=True)
                try:
                    for _ in range(args.runs):
                        one_run(target, args, cluster, stack, kinds, rng, outcome)
                    if not args.no_hang_check:
                        outcome.hang_ok, outcome.hang = hang_check(
                            target, cluster, stack, args.retry_deadline_s
                        )
                        print(f"  unresponsive emulator: {outcome.hang}", flush=True)
                except Exception as err:  # noqa: BLE001 - reported, and the next target runs
                    outcome.unfinished.append(f"{type(err).__name__}: {str(err)[:500]}")
                    print(f"  {target.label} aborted: {err!r}"[:800], flush=True)
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
