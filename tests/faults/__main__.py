"""The fault suite: checkpointed jobs on a standalone cluster, faults at random points while
the sink holds real work, every record counted.

    python -m tests.faults [--sink pubsub,bigquery,...] [--method M,...] [--config C,...]
                           [--runs R] [--faults N] [--seed S] [--rate RPS] [--full]

Per sink (and per BigQuery write method) it runs ``job.py`` at parallelism 4 on two
TaskManagers of two slots; the job hands its sink ``--rate`` records a second per subtask the
whole time the faults come (then the suite lets it drop the rest of its input). It injects
``--faults`` faults per run at random moments (seeded per row: the same seed and row pick the
same kinds, gaps and victims), waits for the job to finish, reads every destination back and
prints one table, headed by the command and the machine. It then checks that a sink whose
emulator stops answering (SIGSTOP) fails within a short retry deadline with an error naming
the destination.

The exit status is non-zero when a record the sink was handed is missing; an exactly-once or
idempotent path left a duplicate in the destination; a FILE_LOADS run left a staged object; a
job did not finish; a run injected fewer faults than asked; a failover restarted from no
checkpoint (or id 0); a TaskManager ended by itself (or a replacement failed to start); a job
could not get its slots; or the unresponsive-emulator check failed.

Before each job is submitted or restored, the cluster must have the slots it needs: dead
TaskManagers are reported and replaced, and a job an earlier run left running is cancelled
(and reported). A run never leaves its job behind: whatever fails, the run's job is finished
or cancelled before the run is counted, so the next target starts on a whole cluster. A run
cut short (its last job cancelled, failed or never restored) owes only the records its jobs
handed on; the rest of its input never left the source and is reported as never handed, not
as lost.

``--config`` runs the exactly-once BigQuery methods (BUFFERED_STREAM, FILE_LOADS) in the
configurations users choose (``targets.CONFIGS``): ``unaligned`` checkpoints, FILE_LOADS's
``default-interval``, a ``regional`` dataset; and every target in ``rescale`` (submitted at
parallelism 2, stop-with-savepoint after the faults and restored at 4, then at 1, under load).
``carried``, ``carried-rescale`` and ``carried-unaligned`` run every target that is not exactly
once with ``max_carry_time`` (records wait across checkpoints in the writer operator's state),
the second rescaled as ``rescale`` is, the third with forced unaligned checkpoints.

``--break flush`` / ``--break idempotence`` (test only) break the job's sink on purpose, to
show the loss and duplicate checks fail (see job.py).

Minutes per sink on a 2-core machine; not part of ``make test`` (``make faults`` runs it).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from pyflink_gcp.tools.cluster import ClusterSettings, StandaloneCluster
from pyflink_gcp.tools.emulators import EmulatorStack
from tests.faults.hang import hang_check
from tests.faults.inject import (
    Fault,
    check_restore,
    ensure_slots,
    http_cancel,
    inject,
    jobs_holding_slots,
    last_completed_ms,
    settle,
    tended_wait,
    wait_for_recovery,
)
from tests.faults.ledger import Ledger, read_ledger
from tests.faults.report import SHORT, Outcome, abbreviate, reproduce, table
from tests.faults.rescale import JOB, RescaleError, rescale
from tests.faults.targets import (
    CONFIGS,
    STACK_SERVICES,
    TARGETS,
    Config,
    RestartProbe,
    Target,
    prepare,
    probe_restart,
    read_back,
    run_name,
    staged_left,
)

PROJECT = "test-project"


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


def record_count(args: argparse.Namespace, config: Config) -> int:
    """Input records per run: ``--count``, or enough for the faults at the job's rate (a
    minute per fault, as a TaskManager kill can take, and a minute and a half to spare, plus a
    minute per rescale). A job whose input ran out before its faults fails the run (fewer
    faults than asked); what is left after the faults is dropped, not sent."""
    if args.count:
        return int(args.count)
    widest = max((config.parallelism, *config.rescale_to))
    seconds = 60 * args.faults + 90 + 60 * len(config.rescale_to)
    return int(args.rate * widest * seconds)


def submit(
    cluster: StandaloneCluster, job_args: list[str], parallelism: int, outcome: Outcome
) -> str | None:
    """Submits the job and waits for its second checkpoint; None (and the reason recorded:
    "not enough slots: N of M" when it could not get them) when it did not get there. A job
    that will not be waited for is cancelled: it would hold the slots the next run needs."""
    submitted = cluster.submit(JOB, *job_args, parallelism=parallelism, detached=True, timeout=300)
    if not (submitted.ok and submitted.job_id):
        outcome.unfinished.append(f"submission failed: {submitted.output[-2000:]}")
        return None
    job = submitted.job_id
    try:
        state = tended_wait(cluster, job, checkpoints=2, timeout=240, ended=outcome.self_ended)
        if state != "RUNNING":
            raise RuntimeError(f"job {job} ended {state} before its second checkpoint")
        check_config(cluster, job, outcome.config)
    except Exception as err:  # noqa: BLE001 - reported; the run is over
        outcome.unfinished.append(f"job {job}: {type(err).__name__}: {err}"[:1500])
        print(f"    job {job} not started: {err!r}"[:800], flush=True)
        http_cancel(cluster, job)
        settle(cluster, outcome.self_ended)
        return None
    return job


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
    """Submits one job, injects its faults, rescales it if asked, lets it finish, counts.

    Whatever fails on the way is recorded in ``outcome`` and the run goes on to its end: the
    job still running is finished (or cancelled), and what it handed is counted.
    """
    try:
        ensure_slots(
            cluster,
            config.parallelism,
            outcome.self_ended,
            outcome.run_problems,
            found="before a run",
        )
    except Exception as err:  # noqa: BLE001 - reported; the next run tries again
        outcome.unfinished.append(f"run not started: {type(err).__name__}: {err}"[:1500])
        print(f"  run not started: {err!r}"[:800], flush=True)
        return
    name = run_name()
    control = Path(tempfile.mkdtemp(prefix="faults-control-"))
    count = record_count(args, config)
    extra = prepare(target, PROJECT, name, stack, config.location)
    job_args = ["--sink", target.sink, "--project", PROJECT, "--name", name]
    job_args += ["--control", str(control), "--count", str(count), "--rate", f"{args.rate:g}"]
    job_args += ["--break", args.broken, *extra, *config.job_args(target)]
    if target.method != "-":
        job_args += ["--method", target.method]
    job = submit(cluster, job_args, config.parallelism, outcome)
    if job is None:
        return
    faults: list[Fault] = []
    live: str | None = job
    complete = True
    rescaled = ""
    try:
        inject_faults(target, args, cluster, stack, kinds, rng, outcome, job, control, faults)
        if config.rescale_to:
            live, rescaled = rescale(
                config, cluster, job, job_args, control, outcome.self_ended, outcome.run_problems
            )
    except RescaleError as err:
        live, complete = err.job, err.job is not None
        outcome.unfinished.append(f"{name}: rescale: {err}"[:1500])
        print(f"    rescale failed: {err}"[:800], flush=True)
    except Exception as err:  # noqa: BLE001 - reported; the records are counted all the same
        complete = False
        outcome.unfinished.append(f"{name}: {type(err).__name__}: {err}"[:1500])
        print(f"    run failed: {err!r}"[:800], flush=True)
    sequence = ", ".join(SHORT[f.kind] for f in faults) or "none"
    what = f"run {name} (faults: {sequence})"
    if len(faults) < args.faults:
        outcome.run_problems.append(f"{what}: {len(faults)} of {args.faults} faults injected")
    outcome.run_problems += [
        f"{what}: after {f.kind} at {f.at_ms}: {f.restore_problem}"
        for f in faults
        if f.restore_problem
    ]
    outcome.run_problems += [
        f"{what}: no checkpoint completed after {f.kind} at {f.at_ms} (the job ended or hung)"
        for f in faults
        if f.recovery_s is None
    ]
    # The faults are in: the job drops the rest of its input (see job.py).
    (control / "finish").write_text("finish\n")
    if live is not None:
        complete = finish(cluster, live, name, args.job_timeout, outcome) and complete
    # Nothing of this run may outlive it: a job left running would hold the next run's slots
    # (and write while this run is counted).
    for leftover in jobs_holding_slots(cluster):
        http_cancel(cluster, leftover)
        complete = False
        outcome.run_problems.append(f"{what}: job {leftover} still ran after the run: cancelled")
    settle(cluster, outcome.self_ended)
    count_run(target, name, count, stack, control, faults, outcome, f"{what}{rescaled}", complete)
    outcome.faults += faults
    shutil.rmtree(control, ignore_errors=True)


def cancel_leftovers(cluster: StandaloneCluster, outcome: Outcome) -> None:
    """Cancels every job still holding slots after an aborted target, each counted as a problem
    of that target, and waits for the slots to come back."""
    try:
        for leftover in jobs_holding_slots(cluster):
            http_cancel(cluster, leftover)
            outcome.run_problems.append(f"job {leftover} still ran after the abort: cancelled")
        settle(cluster, outcome.self_ended)
    except Exception as err:  # noqa: BLE001 - reported; the next target checks its slots
        outcome.unfinished.append(f"clean-up after the abort: {type(err).__name__}: {err}"[:800])


def finish(
    cluster: StandaloneCluster, job: str, name: str, timeout: float, outcome: Outcome
) -> bool:
    """Waits for the run's job to drop the rest of its input and finish; cancels it when it
    does not within ``timeout``. Whether it finished."""
    try:
        state = tended_wait(
            cluster, job, checkpoints=None, timeout=timeout, ended=outcome.self_ended
        )
    except Exception as err:  # noqa: BLE001 - reported; the job is cancelled
        http_cancel(cluster, job)
        state = f"CANCELED by the suite ({type(err).__name__}: {err})"
    if state == "FINISHED":
        return True
    failures = cluster.exceptions(job)
    outcome.unfinished.append(f"{name}: job {job} ended {state}: {failures[:1]}"[:1500])
    return False


def inject_faults(
    target: Target,
    args: argparse.Namespace,
    cluster: StandaloneCluster,
    stack: EmulatorStack,
    kinds: list[str],
    rng: random.Random,
    outcome: Outcome,
    job: str,
    control: Path,
    faults: list[Fault],
) -> None:
    """Injects the run's faults one after the other, each once the job recovered from the
    one before, appending each to ``faults``."""
    for kind in pick_kinds(rng, kinds, args.faults):
        time.sleep(rng.uniform(1.0, 4.0))
        if cluster.job(job).get("state") != "RUNNING":
            break
        checkpoint_ms = last_completed_ms(cluster, job)
        fault = inject(
            kind,
            cluster=cluster,
            stack=stack,
            services=target.services,
            control=control,
            rng=rng,
            ended=outcome.self_ended,
        )
        fault.checkpoint_ms = checkpoint_ms
        fault.recovery_s = wait_for_recovery(cluster, job, fault.at_ms, outcome.self_ended)
        faults.append(fault)
        recovery = "none" if fault.recovery_s is None else f"{fault.recovery_s:.1f} s"
        if fault.recovery_s is None:
            print(f"    {kind:<16} {fault.detail:<40} recovered: none", flush=True)
            break  # the job ended or never checkpointed again: later faults would hit nothing
        check_restore(cluster, job, fault)
        restart = "no failover" if fault.restored is None else f"restored {fault.restored}"
        print(
            f"    {kind:<16} {fault.detail:<40} recovered in {recovery}, {restart}"
            f"{'' if fault.restore_problem is None else ': ' + fault.restore_problem}",
            flush=True,
        )


def count_run(
    target: Target,
    name: str,
    count: int,
    stack: EmulatorStack,
    control: Path,
    faults: list[Fault],
    outcome: Outcome,
    what: str,
    complete: bool = True,
) -> None:
    """Reads the run's destinations and the job's emission logs, and adds up the run.

    A record is lost when the destination lacks it and its last word in the job is not a drop
    after the finish (an id neither handed nor dropped is lost too, whatever happened to it);
    see :mod:`tests.faults.ledger` for why a drop after a rolled-back handing excuses it. In a
    run that was not ``complete`` (cut short, reported failed for that), only ids a map
    attempt handed on can be lost; the others are reported as never handed.
    """
    ledger = read_ledger(control)
    for fault, after in zip(faults, [*faults[1:], None], strict=True):
        fault.exposed = exposure(ledger, fault, None if after is None else after.at_ms)
    got = read_back(target, PROJECT, name, stack, set(ledger.handed))
    distinct = set(got.ids)
    lost_ids = sorted(ledger.owed(count, complete=complete) - distinct)
    never = 0
    if not complete:
        reached = distinct | set(ledger.handed) | set(ledger.last_word)
        never = len(set(range(count)) - reached)
    duplicates = len(got.ids) - len(distinct)
    unhanded = sorted(distinct - set(ledger.handed))
    exposed = sum(f.exposed for f in faults)
    left = staged_left(target, PROJECT, name)
    outcome.handed += len(ledger.handed)
    outcome.exposed += exposed
    outcome.resent += ledger.resent
    outcome.out += len(got.ids)
    outcome.lost += len(lost_ids)
    outcome.duplicates += duplicates
    replays = ""
    if got.writes is not None:
        seen = len(got.writes) - len(set(got.writes))
        outcome.replays_seen = (outcome.replays_seen or 0) + seen
        replays = f", {seen} replays seen"
        unrecorded = sorted(distinct - set(got.writes))
        if unrecorded:
            outcome.run_problems.append(
                f"{what}: {len(unrecorded)} records without a recorded write (the replay count "
                f"cannot be trusted), ids {abbreviate(unrecorded)}"
            )
    if left is not None:
        outcome.staged_left = (outcome.staged_left or 0) + len(left)
    if lost_ids:
        outcome.run_problems.append(
            f"{what}: {len(lost_ids)} records lost, ids {abbreviate(lost_ids)}"
        )
    if target.guarantee == "exactly once":
        shown = sorted(ledger.rolled_back() & distinct)
        if shown:
            outcome.run_problems.append(
                f"{what}: {len(shown)} records of a rolled-back attempt are in the destination "
                f"(exactly once), ids {abbreviate(shown)}"
            )
    if duplicates and not target.duplicates_allowed:
        twice = sorted(i for i, n in Counter(got.ids).items() if n > 1)
        outcome.run_problems.append(
            f"{what}: {duplicates} duplicates ({target.guarantee}), ids {abbreviate(twice)}"
        )
    if unhanded:
        outcome.run_problems.append(
            f"{what}: {len(unhanded)} records in the destination that no emission log names "
            f"(the logs cannot be trusted), ids {abbreviate(unhanded)}"
        )
    if left:
        outcome.run_problems.append(
            f"{what}: {len(left)} staged objects left: {', '.join(left[:5])}"
            f"{' ...' if len(left) > 5 else ''}"
        )
    per_fault = ", ".join(str(f.exposed) for f in faults) or "-"
    if never:
        outcome.run_problems.append(
            f"{what}: cut short, {never} records never handed to the sink (not counted as lost)"
        )
    print(
        f"  {what}: {len(ledger.handed)} handed ({ledger.resent} re-sent, {ledger.logs} "
        f"writer attempts), {exposed} exposed ({per_fault}), {len(got.ids)} out, "
        f"{len(lost_ids)} lost, {duplicates} duplicates{replays}"
        f"{'' if left is None else f', {len(left)} staged objects left'}"
        f"{f', cut short: {never} never handed' if never else ''}",
        flush=True,
    )


def exposure(ledger: Ledger, fault: Fault, next_ms: int | None) -> int:
    """The records a fault put at risk (see docs/reliability.md, "What the table reports").

    After a failover, the records handed to the sink before the fault and again after it (up
    to the next fault): a restore hands again exactly what came after the barrier of the
    checkpoint it restored, so these are the records the sink held (buffered, in flight,
    written or prepared but uncommitted) that the fault could lose or duplicate. A fault the
    job rode out without a failover (an emulator pause) replays nothing: then the records
    handed after the last completed checkpoint's trigger and before the outage ended, which
    the sink held unconfirmed through it.
    """
    if fault.restored is not None:
        return ledger.handed_again(fault.at_ms, next_ms)
    if fault.checkpoint_ms is None:
        return 0
    return ledger.between(fault.checkpoint_ms, fault.at_ms + int(fault.outage_s * 1000))


def check_config(cluster: StandaloneCluster, job: str, config: Config) -> None:
    """Raises unless the running job has the configuration's checkpointing."""
    if not config.unaligned:
        return
    settings = cluster.rest(f"/jobs/{job}/checkpoints/config")
    if settings.get("unaligned_checkpoints") is not True:
        raise RuntimeError(f"job {job} does not run with unaligned checkpoints: {settings}")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.faults", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--sink", default=",".join(TARGETS), help="comma-separated sinks")
    parser.add_argument("--method", default="", help="BigQuery write methods to run (default all)")
    parser.add_argument(
        "--config",
        default="default",
        help=f"comma-separated configurations ({', '.join(CONFIGS)}); unaligned, "
        "default-interval and regional run BUFFERED_STREAM and FILE_LOADS only, carried, "
        "carried-rescale and carried-unaligned the other targets",
    )
    parser.add_argument("--full", action="store_true", help="4 runs of 5 faults per target")
    parser.add_argument("--runs", type=int, default=None, help="runs per target (quick: 1)")
    parser.add_argument("--faults", type=int, default=None, help="faults per run (quick: 4)")
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument(
        "--rate",
        type=float,
        default=100.0,
        help="records a second per subtask the job hands its sink while the faults come",
    )
    parser.add_argument(
        "--count",
        type=int,
        default=0,
        help="input records per run (default: enough for the faults at --rate; the rest is "
        "dropped once they are in)",
    )
    parser.add_argument("--job-timeout", type=float, default=900.0)
    parser.add_argument("--retry-deadline-s", type=float, default=5.0, help="for the hang check")
    parser.add_argument("--no-hang-check", action="store_true")
    parser.add_argument("--no-restart-probe", action="store_true")
    parser.add_argument(
        "--break",
        dest="broken",
        choices=("none", "flush", "idempotence"),
        default="none",
        help="test only: run the job with its sink's checkpoint flush or (Cloud Tasks, "
        "Bigtable, Spanner) idempotence broken, to see the suite fail",
    )
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


def row_command(args: argparse.Namespace, target: Target, config: Config) -> str:
    """The command that runs one row again with the same faults (its seed is its own)."""
    argv = ["--sink", target.sink]
    if target.method != "-":
        argv += ["--method", target.method]
    argv += ["--config", config.name, "--runs", str(args.runs), "--faults", str(args.faults)]
    argv += ["--seed", str(args.seed), "--rate", f"{args.rate:g}"]
    if args.count:
        argv += ["--count", str(args.count)]
    if args.broken != "none":
        argv += ["--break", args.broken]
    argv += ["--no-hang-check"] if args.no_hang_check else []
    argv += ["--no-restart-probe"] if args.no_restart_probe else []
    return reproduce(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    command = reproduce(sys.argv[1:] if argv is None else argv)
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
    outcomes: list[Outcome] = []
    probes: dict[str, RestartProbe] = {}
    print(f"{command}: started {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
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
                outcome = Outcome(target, config, row_command(args, target, config))
                outcomes.append(outcome)
                # Each row draws from a seed of its own, so it can be run again alone.
                rng = random.Random(f"{args.seed}/{target.label}/{config.name}")
                print(
                    f"{outcome.label} ({config.summary}): {args.runs} run(s) of "
                    f"{args.faults} faults; alone: {outcome.command}",
                    flush=True,
                )
                try:
                    for _ in range(args.runs):
                        one_run(target, config, args, cluster, stack, kinds, rng, outcome)
                    if not args.no_hang_check:
                        outcome.hang_ok, outcome.hang = hang_check(
                            target,
                            config,
                            cluster,
                            stack,
                            PROJECT,
                            args.retry_deadline_s,
                            outcome.self_ended,
                        )
                        print(f"  unresponsive emulator: {outcome.hang}", flush=True)
                except Exception as err:  # noqa: BLE001 - reported, and the next target runs
                    outcome.unfinished.append(f"{type(err).__name__}: {str(err)[:500]}")
                    print(f"  {outcome.label} aborted: {err!r}"[:800], flush=True)
                    # An abort skips the run's own clean-up: a job it left running would hold
                    # the next target's slots and fail its restores at a higher parallelism.
                    cancel_leftovers(cluster, outcome)
            # The JobManager's and TaskManagers' logs are the evidence of a failed run (a
            # restored job that never ran, a TaskManager that would not start): keep them.
            if any(o.problems() for o in outcomes):
                cluster.keep_logs = True
        kept = cluster.logs_kept()
    print()
    print(table(outcomes, probes, command))
    problems = [p for o in outcomes for p in o.problems()]
    for problem in problems:
        print(f"FAIL {problem}")
    if kept is not None:
        print(f"cluster logs kept in {kept}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
