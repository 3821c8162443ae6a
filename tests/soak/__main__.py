"""The soak: each sink for an hour on a standalone cluster, its destinations churning, a
TaskManager killed every ten minutes, the processes and checkpoints sampled every minute.

    python -m tests.soak [--sink pubsub,bigquery,bigtable,spanner,cloudtasks] [--minutes 60]
                         [--kill-every 10] [--rate 30] [--max-carry-s 0] [--seed S]

Why: the fault suite (tests/faults) runs for minutes and counts records; what it cannot see
is what an hour leaves behind: writers created and evicted thousands of times (a publisher, a
write stream, a channel or a thread not released), Python workers and JVMs restarted after
kills, checkpoints that slow down as state or connections pile up. Per sink, in turn, it runs
``tests/soak/job.py`` at parallelism 4 on two TaskManagers of two slots against the emulators,
``--rate`` records a second in total with a checkpoint every second, and its destinations
churn (a new one every minute, three live at once, the writer cap 2 and the idle timeout 30 s:
see job.py). Every ``--kill-every`` minutes (first at half that) one TaskManager's process
group is killed and a replacement started. Every minute it reads each TaskManager JVM's and
Python worker's RSS, threads and sockets from ``/proc``; every 5 s the job's checkpoints and
the sink's writer gauges. At the end it reads every destination back by record id.

The exit status is non-zero when a record the sink was handed is missing, when the total RSS,
threads or sockets of the JVMs or of the workers grew more than 10% from the 10th minute to
the end, when a TaskManager ended by itself, or when the job did not finish.

``--max-carry-s`` sets the writers' ``max_carry_time``: records wait across checkpoints in the
writer operator's state. Each window's largest checkpoint state is in the table, so a state
that piles up over the run shows.

Not part of ``make test``: ``make soak SOAK_ARGS="--sink pubsub --minutes 12 --kill-every 5"``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import asdict
from pathlib import Path

from pyflink_gcp.tools.cluster import ClusterSettings, StandaloneCluster
from pyflink_gcp.tools.cluster.standalone import TERMINAL_STATES
from pyflink_gcp.tools.emulators import EmulatorStack
from tests.faults.inject import live_taskmanagers, replace_dead_taskmanagers, settle, tended_wait
from tests.faults.ledger import Ledger, read_ledger
from tests.faults.rescale import http_cancel
from tests.soak.job import Churn
from tests.soak.probe import sample
from tests.soak.report import Outcome, judge, pick_samples, row, table, windows
from tests.soak.targets import REGISTRY, SINKS, STACK_SERVICES, prepare, read_back

PROJECT = "test-project"
JOB = Path(__file__).with_name("job.py")
PARALLELISM = 4
#: How often the checkpoint history and writer gauges are read (the history keeps ~10).
POLL_S = 5.0
#: No kill later than this before the end, so the last sample finds the job steady.
QUIET_END_S = 120.0


def lost_ids(count: int, got: set[int], ledger: Ledger) -> list[int]:
    """Ids missing from the destinations whose last word is not a drop after the finish.

    The fault suite's rule (:mod:`tests.faults.ledger`): an id a restore rolled back and a
    later attempt dropped (the finish file came meanwhile) is owed nothing, even though an
    earlier attempt's writer took it; an id neither handed on nor dropped is lost wherever it
    went.
    """
    missing = [i for i in range(count) if i not in got]
    dropped = ledger.finally_dropped(missing)
    return [i for i in missing if i not in dropped]


def soak_one(
    sink: str, args: argparse.Namespace, stack: EmulatorStack, rng: random.Random
) -> Outcome:
    """Runs one sink's soak on a cluster of its own and returns what it measured."""
    outcome = Outcome(sink)
    subtask_rate = args.rate / PARALLELISM
    kill_times = [
        t
        for t in (args.kill_every * 60 * (k + 0.5) for k in range(10_000))
        if t <= args.minutes * 60 - QUIET_END_S
    ]
    if args.kill_every <= 0:
        kill_times = []
    # Input for the run plus what kills cost (a job lags about a minute per kill).
    seconds = args.minutes * 60 + 60 * len(kill_times) + 120
    per_split = int(subtask_rate * seconds)
    count = per_split * PARALLELISM
    churn = Churn(per_split, subtask_rate)
    destinations = churn.destinations()
    name = f"soak{uuid.uuid4().hex[:8]}"
    control = Path(tempfile.mkdtemp(prefix="soak-control-"))
    print(f"{sink}: run {name}, {count} records at most, {destinations} destinations", flush=True)
    extra = prepare(sink, PROJECT, name, destinations, stack)
    job_args = ["--sink", sink, "--project", PROJECT, "--name", name, "--control", str(control)]
    job_args += ["--count", str(count), "--parallelism", str(PARALLELISM)]
    job_args += ["--rate", f"{args.rate:g}", "--idle-timeout-s", f"{args.idle_timeout_s:g}"]
    job_args += ["--max-writers", str(args.max_writers), "--max-carry-s", f"{args.max_carry_s:g}"]
    job_args += extra
    settings = ClusterSettings(restart_attempts=1000)
    with StandaloneCluster(settings, env=stack.env) as cluster:
        submitted = cluster.submit(JOB, *job_args, parallelism=PARALLELISM, detached=True)
        if not (submitted.ok and submitted.job_id):
            outcome.problems.append(f"submission failed: {submitted.output[-2000:]}")
            return outcome
        job = submitted.job_id
        start_ms = int(time.time() * 1000)
        started = time.monotonic()
        try:
            tended_wait(cluster, job, checkpoints=2, timeout=300, ended=outcome.self_ended)
            run(cluster, job, args, outcome, started, kill_times, rng)
        except BaseException:
            http_cancel(cluster, job)
            raise
        outcome.minutes = (time.monotonic() - started) / 60
        # The end: the map drops the rest of its input; the sink flushes at the end of input.
        (control / "finish").write_text("finish\n")
        outcome.job_state = tended_wait(
            cluster, job, checkpoints=None, timeout=900, ended=outcome.self_ended
        )
        settle(cluster, outcome.self_ended)
        if cluster.logs_kept() is None and (outcome.self_ended or outcome.job_state != "FINISHED"):
            cluster.keep_logs = True
    if cluster.logs_kept() is not None:
        print(f"  cluster logs kept in {cluster.logs_kept()}", flush=True)
    ledger = read_ledger(control)
    handed = set(ledger.handed)
    got = read_back(sink, PROJECT, name, destinations, stack, len(handed))
    distinct = set(got)
    outcome.handed, outcome.out = len(handed), len(got)
    outcome.duplicates = len(got) - len(distinct)
    lost = lost_ids(count, distinct, ledger)
    outcome.lost = len(lost)
    if lost:
        print(f"  lost ids (first 20): {lost[:20]}", flush=True)
    unlogged = distinct - handed
    if unlogged:
        outcome.problems.append(f"{len(unlogged)} ids read back that no sink log names")
    outcome.destinations = len({churn.destination_index(i) for i in handed})
    outcome.warm, outcome.end = pick_samples(outcome.samples, args.warmup * 60, kill_times)
    judge(outcome)
    keep(outcome, args, name, start_ms)
    shutil.rmtree(control, ignore_errors=True)
    return outcome


def run(
    cluster: StandaloneCluster,
    job: str,
    args: argparse.Namespace,
    outcome: Outcome,
    started: float,
    kill_times: list[float],
    rng: random.Random,
) -> None:
    """The hour: polls, samples and kills until ``--minutes`` passed or the job ended."""
    end = args.minutes * 60
    next_poll, next_sample = 0.0, args.sample_every
    kills = list(kill_times)
    while True:
        now = time.monotonic() - started
        for what in replace_dead_taskmanagers(cluster):
            outcome.self_ended.append(f"at {now / 60:.1f}' {what}")
            print(f"  a TaskManager ended by itself, replaced: {what}", flush=True)
        if now >= next_poll:
            next_poll = now + POLL_S
            try:
                outcome.checkpoints.poll(cluster, job)
                if args.sink_registry:
                    outcome.gauges.poll(cluster, job)
            except Exception as err:  # noqa: BLE001 - a REST hiccup during a failover
                print(f"  poll failed: {err!r}"[:300], flush=True)
            if cluster.job(job).get("state") in TERMINAL_STATES:
                return
        if kills and now >= kills[0]:
            kills.pop(0)
            index = rng.choice(live_taskmanagers(cluster))
            killed = cluster.kill_taskmanager(index)
            replacement = cluster.start_taskmanager(wait=True)
            outcome.kills += 1
            print(
                f"  {now / 60:5.1f}' killed {killed.resource_id}, "
                f"{replacement.resource_id} registered",
                flush=True,
            )
        if now >= next_sample:
            # On the minute marks since the submission, without a burst to catch up.
            next_sample = (now // args.sample_every + 1) * args.sample_every
            try:
                taken = sample(cluster, job, now)
            except Exception as err:  # noqa: BLE001 - the JobManager busy with a failover
                print(f"  sample failed: {err!r}"[:300], flush=True)
                continue
            outcome.samples.append(taken)
            durations = [d for _, d in outcome.checkpoints.durations.values()]
            print(
                f"  {now / 60:5.1f}' {taken.job_state} {taken.running_tasks}/{taken.total_tasks}"
                f" | JVMs {taken.count('jvm')}: {taken.total('jvm', 'rss_mb'):.0f} MiB, "
                f"{taken.total('jvm', 'threads'):.0f} thr, {taken.total('jvm', 'sockets'):.0f} "
                f"sock | workers {taken.count('worker')}: {taken.total('worker', 'rss_mb'):.0f} "
                f"MiB, {taken.total('worker', 'threads'):.0f} thr, "
                f"{taken.total('worker', 'sockets'):.0f} sock | checkpoints "
                f"{len(durations)} (last {durations[-1] if durations else '-'} ms, failed "
                f"{outcome.checkpoints.failed}) | writers released {outcome.gauges.released}, "
                f"idle-closed {outcome.gauges.idle_closed}",
                flush=True,
            )
            if now >= end:
                return
        time.sleep(0.5)


def keep(outcome: Outcome, args: argparse.Namespace, name: str, start_ms: int) -> None:
    """Writes the run's samples and checkpoint durations as JSON under ``--out``."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{outcome.sink}-{name}.json"
    body = {
        "sink": outcome.sink,
        "start_ms": start_ms,
        "samples": [asdict(s) for s in outcome.samples],
        "checkpoints": sorted(outcome.checkpoints.durations.values()),
        "state_sizes": outcome.checkpoints.sizes,
        "problems": outcome.problems,
    }
    path.write_text(json.dumps(body))
    print(f"  samples in {path}", flush=True)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.soak", description=" ".join(__doc__.split("\n\n")[0].split())
    )
    parser.add_argument("--sink", default=",".join(SINKS), help="comma-separated sinks")
    parser.add_argument("--minutes", type=float, default=60.0, help="per sink")
    parser.add_argument("--kill-every", type=float, default=10.0, help="minutes; 0: no kills")
    parser.add_argument("--rate", type=float, default=30.0, help="records a second in total")
    parser.add_argument("--sample-every", type=float, default=60.0, help="seconds")
    parser.add_argument("--warmup", type=float, default=10.0, help="minutes before growth counts")
    parser.add_argument("--window", type=float, default=10.0, help="checkpoint window, minutes")
    parser.add_argument("--idle-timeout-s", type=float, default=30.0)
    parser.add_argument("--max-writers", type=int, default=2, help="max_active_destinations")
    parser.add_argument(
        "--max-carry-s",
        type=float,
        default=0.0,
        help="the writers' max_carry_time in seconds (records wait across checkpoints in the "
        "writer operator's state); 0: not set",
    )
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--out", default="build/soak", help="where the samples go (JSON)")
    args = parser.parse_args(argv)
    unknown = set(args.sink.split(",")) - set(SINKS)
    if unknown:
        parser.error(f"unknown sink(s) {', '.join(sorted(unknown))}; known: {', '.join(SINKS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    command = "python -m tests.soak " + shlex.join(sys.argv[1:] if argv is None else argv)
    sinks = args.sink.split(",")
    services = sorted({s for sink in sinks for s in STACK_SERVICES[sink]})
    print(f"{command}: started {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    outcomes: list[Outcome] = []
    rows: list[str] = []
    with EmulatorStack(services=services, project=PROJECT) as stack:
        os.environ.update(stack.env)
        for sink in sinks:
            args.sink_registry = sink in REGISTRY
            rng = random.Random(f"{args.seed}/{sink}")
            outcome = soak_one(sink, args, stack, rng)
            outcomes.append(outcome)
            start = min((t for t, _ in outcome.checkpoints.durations.values()), default=0)
            rows.append(row(outcome, windows(outcome.checkpoints, start, args.window * 60)))
            print(rows[-1], flush=True)
    print()
    print(f"{command}: ended {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    print(table(rows))
    problems = [f"{o.sink}: {p}" for o in outcomes for p in o.problems]
    for problem in problems:
        print(f"FAIL {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
