"""Where a recovery's seconds go: faults in a running Pub/Sub job on a standalone cluster, each
recovery split into phases read from the JobManager's log.

    python bench/recovery.py [--kind tm,worker,exception] [--repeat 3] [--spare]
                             [--set key=value ...]

The cluster is ``pyflink-gcp cluster``'s (``ClusterSettings`` defaults: two TaskManagers of two
slots; ``--spare`` adds a third, idle one). The job is the cluster tests' numbered Pub/Sub job
at parallelism 4 (records paced at 5 ms, bundles of 200, 1-s checkpoints). After two completed
checkpoints a fault is injected; once the job completed a checkpoint triggered after the fault,
and one more, the next fault follows. Per fault, seconds from the fault to:

- ``failed``: the job switched to RESTARTING (the JobManager knew);
- ``restarted``: the job switched back to RUNNING (the restart strategy's delay);
- ``registered``: a replacement TaskManager registered (``tm`` only; started at the fault);
- ``deployed``: the last task switched to DEPLOYING (it had its slot);
- ``running``: the last task switched to RUNNING (Python workers started, state restored);
- ``checkpoint``: the first checkpoint triggered after the fault completed (the suite's
  recovery figure: the job is making durable progress again).

Kinds: ``tm`` kills a TaskManager that runs tasks (its process group: JVM and Python workers)
and starts a replacement, as the fault suite does; ``worker`` kills one Python worker;
``exception`` makes one map subtask raise. Not a test; prints a table of each phase's median.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pyflink_gcp.tools.cluster import ClusterSettings, StandaloneCluster
from pyflink_gcp.tools.emulators import EmulatorStack

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "cluster" / "jobs" / "pubsub_numbered.py"
PROJECT = "bench-recovery"
PHASES = ("failed", "restarted", "registered", "deployed", "running", "checkpoint")

_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+\s+\S+\s+\[\] - (.*)")


def log_events(log: Path, since_ms: int) -> list[tuple[int, str]]:
    """The JobManager's log lines from ``since_ms`` on, as (epoch ms, message)."""
    events = []
    for line in log.read_text(errors="replace").splitlines():
        match = _LINE.match(line)
        if match is None:
            continue
        stamp = datetime.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")
        ms = int(stamp.replace(tzinfo=datetime.UTC).timestamp() * 1000)
        if ms >= since_ms:
            events.append((ms, match.group(2)))
    return events


def phases(events: list[tuple[int, str]], fault_ms: int, until_ms: int) -> dict[str, float]:
    """Seconds from the fault to each phase (see the module docstring); absent when not seen."""
    out: dict[str, float] = {}

    def first(pattern: str) -> int | None:
        for ms, message in events:
            if ms <= until_ms and re.search(pattern, message):
                return ms
        return None

    def last(pattern: str) -> int | None:
        hits = [ms for ms, message in events if ms <= until_ms and re.search(pattern, message)]
        return max(hits) if hits else None

    found = {
        "failed": first(r"switched from state RUNNING to RESTARTING"),
        "restarted": last(r"switched from state RESTARTING to RUNNING"),
        "registered": first(r"Registering TaskManager with ResourceID"),
        "deployed": last(r"switched from SCHEDULED to DEPLOYING"),
        "running": last(r"switched from INITIALIZING to RUNNING"),
    }
    for name, ms in found.items():
        if ms is not None:
            out[name] = (ms - fault_ms) / 1000.0
    return out


def busy_taskmanager(cluster: StandaloneCluster) -> int:
    """The index of a live TaskManager with the fewest free slots (one that runs tasks)."""
    free = {t["id"]: t["freeSlots"] for t in cluster.rest("/taskmanagers")["taskmanagers"]}
    live = [i for i, tm in enumerate(cluster.taskmanagers) if not tm.killed]
    return min(live, key=lambda i: free.get(cluster.taskmanagers[i].resource_id, 1 << 30))


def python_worker(cluster: StandaloneCluster) -> int:
    """The pid of one Python worker of a live TaskManager."""
    for tm in cluster.taskmanagers:
        if tm.killed:
            continue
        out = subprocess.run(
            ["pgrep", "-g", str(tm.process.pgid), "-f", "beam_boot|fn_execution"],
            capture_output=True,
            text=True,
        ).stdout.split()
        if out:
            return int(out[0])
    raise RuntimeError("no Python worker found")


def inject(kind: str, cluster: StandaloneCluster, control: Path) -> None:
    if kind == "tm":
        cluster.kill_taskmanager(busy_taskmanager(cluster))
        cluster.start_taskmanager(wait=False)
    elif kind == "worker":
        with contextlib.suppress(ProcessLookupError):
            os.kill(python_worker(cluster), signal.SIGKILL)
    elif kind == "exception":
        (control / "raise").write_text("raise\n")
    else:
        raise ValueError(kind)


def recovered(cluster: StandaloneCluster, job: str, fault_ms: int, timeout: float) -> int:
    """The acknowledgement time (epoch ms) of the first checkpoint triggered after the fault."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        history = cluster.checkpoints(job).get("history", [])
        done = [
            c
            for c in history
            if c.get("status") == "COMPLETED" and int(c.get("trigger_timestamp", 0)) >= fault_ms
        ]
        if done:
            return int(min(done, key=lambda c: int(c["trigger_timestamp"]))["latest_ack_timestamp"])
        time.sleep(0.2)
    raise TimeoutError(f"no checkpoint completed within {timeout} s of the fault")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", default="tm,worker,exception")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--spare", action="store_true", help="a third, idle TaskManager")
    parser.add_argument("--set", action="append", default=[], help="extra key=value")
    args = parser.parse_args()
    kinds = args.kind.split(",")
    extra = dict(item.split("=", 1) for item in args.set)
    settings = ClusterSettings(
        taskmanagers=3 if args.spare else 2, restart_attempts=1000, extra=extra
    )
    rows: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    control = Path(tempfile.mkdtemp(prefix="pyflink-gcp-recovery-"))
    with EmulatorStack(services=["pubsub"], project=PROJECT) as stack:
        os.environ.update(stack.env)
        from tests.support.pubsub import make_topics, unique

        topic = unique("recovery")
        make_topics(PROJECT, [f"{topic}-even", f"{topic}-odd"])
        with StandaloneCluster(settings, env=stack.env) as cluster:
            count = 4 * 200 * 60 * len(kinds) * args.repeat  # 5 ms a record: a minute a fault
            submitted = cluster.submit(
                JOB,
                *("--project", PROJECT, "--topic", topic, "--count", str(count)),
                *("--pace-ms", "5", "--control", str(control)),
                parallelism=4,
                detached=True,
                timeout=300,
            )
            if not (submitted.ok and submitted.job_id):
                print(submitted.output[-3000:], file=sys.stderr)
                return 1
            job = submitted.job_id
            log = next(cluster.layout.log.glob("*standalonesession*.log"))
            for _ in range(args.repeat):
                for kind in kinds:
                    done = cluster.wait_for_checkpoints(job, 2, timeout=300)
                    cluster.wait_for_checkpoints(job, done + 2, timeout=300)
                    fault_ms = int(time.time() * 1000)
                    inject(kind, cluster, control)
                    ack_ms = recovered(cluster, job, fault_ms, timeout=300)
                    time.sleep(1.0)  # the log lines of the recovery are written
                    row = phases(log_events(log, fault_ms), fault_ms, ack_ms)
                    row["checkpoint"] = (ack_ms - fault_ms) / 1000.0
                    rows[kind].append(row)
                    print(f"{kind}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()))
            with contextlib.suppress(Exception):
                cluster.rest(f"/jobs/{job}/yarn-cancel")
    print()
    print(table(rows, settings, args))
    return 0


def table(rows: dict[str, list[dict[str, float]]], settings: Any, args: Any) -> str:
    command = "python bench/recovery.py" + (" --spare" if args.spare else "")
    lines = [
        f"`{command} --kind {args.kind} --repeat {args.repeat}` "
        f"(heartbeat {settings.heartbeat_interval}, first restart after "
        f"{settings.restart_delay}); seconds from the fault, median of {args.repeat}:",
        "",
        "| fault | " + " | ".join(PHASES) + " |",
        "| --- | " + " | ".join("---:" for _ in PHASES) + " |",
    ]
    for kind, samples in rows.items():
        cells = []
        for phase in PHASES:
            values = [s[phase] for s in samples if phase in s]
            cells.append(f"{statistics.median(values):.1f}" if values else "-")
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
