"""Apache Flink's own Java ``PubSubSink`` and the pyflink-gcp Pub/Sub sink, side by side.

    python bench/peer_pubsub.py [--records 100000] [--repeats 3] [--parallelism 1,2]
                                [--variants java,default-1,default-16,own-1] [--full] [--pull]

On one Pub/Sub emulator (started here through the project's own ``EmulatorStack``), in one
interleaved run (each repeat runs every variant once, in turn, at each parallelism), with 1-s
checkpoints and the same ~170-byte JSON records (``make_record``):

- ``java``: Flink 1.18.1's local MiniCluster in a JVM of its own, running Apache Flink's
  ``PubSubSink`` (the legacy ``SinkFunction`` of ``flink-connector-gcp-pubsub`` 1.16.0, the
  connector's last release from Flink's own repository, with the google-cloud-pubsub 1.108
  Publisher it depends on and its default batching: 100 messages, 1,000 bytes or 1 ms; the
  externalized connector's releases for 1.18 did not resolve from the Maven repository this
  was built against) to one fixed topic, after a Java source and a map that makes the same
  JSON string (bench/peer_pubsub/, a Maven project this script builds with ``mvn -q package``
  when a source changed; Maven's own repository cache holds the dependencies). The JVM first
  runs a throw-away job of the same shape to a topic without subscriptions (warm classes and
  JIT, as ``warm_up()`` does for the PyFlink client JVM);
- ``default-1`` / ``default-16``: PyFlink 2.3 with the pyflink-gcp ``PubSubSink`` (default
  options: the record map runs inside the writer's marker operator, one JVM-Python crossing per
  record, checkpoint markers and the writer's own thresholds kept) to one topic / round-robin
  over 16 topics;
- ``own-1``: the same sink with ``set_chain_with_upstream(False)``: the writer in an operator
  chain of its own after the map (the default shape before the writer took the map in), to one
  topic.

Each job is timed the same way on both sides: every sink subtask notes the wall clock and the
CPU of the job's processes at its first record and again after its close, and the rate is the
records over the earliest start to the latest end. Client CPU is the job's JVM plus, for PyFlink,
its Python workers (user + system from ``/proc``, all threads); the emulator's CPU is read over
the same window. Messages per Publish request are counted in the client (the Java Publisher's
stub and the Python sink's Publish call wrapped to count requests, never messages one by one).

Delivery is checked for every job: the emulator numbers the messages it accepts 1, 2, 3, ...
over all topics, so a probe message published just before and just after the job brackets the
count the job delivered. With ``--pull``, a fresh subscription (ack deadline 600 s) is also
created on each topic before the job and pulled dry after it, and every record id must be there
once (slow: the emulator hands out 100 messages a pull). A run that did not deliver exactly the
input is reported as failed and left out of the medians. Rows show medians over the delivered
runs and ratios against the Java sink at the same parallelism, measured in the same run.

``--full`` is the comparison as first measured: 200,000 records a job, 3 repeats, parallelism
1 and 2, all variants (24 jobs); the default runs the same with 100,000 records a job.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import (
    SpanTimedFactory,
    new_spans,
    shaped_env,
    span_rate,
    timed_factory,
    warm_up,
)
from bench._cpu import _processes, _tree, job_cpu, window_cpu
from pyflink_gcp.pubsub import PubSubSink, PubSubWriterOptions, TopicDestination
from pyflink_gcp.pubsub.writer import PubSubWriterFactory
from pyflink_gcp.tools.emulators import EmulatorStack
from tests.support.jobs import record_stream

PROJECT = "bench-project"
TOPICS = 16
CHECKPOINT_MS = 1_000
PEER = Path(__file__).resolve().parent / "peer_pubsub"
JAR = PEER / "target" / "peer-pubsub.jar"
MAIN_CLASS = "dev.pyflinkgcp.bench.PeerPubSubJob"
WARMUP_TOPIC = "peer-warm-up"
PROBE_TOPIC = "peer-probe"
#: Seconds one job (either side) may take before it counts as failed.
JOB_TIMEOUT_S = 600
#: What Flink 1.18 asks of a Java 17 JVM (its default ``env.java.opts.all``).
JAVA_17_OPENS = [
    "--add-exports=java.base/sun.net.util=ALL-UNNAMED",
    "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED",
    *(
        f"--add-opens=java.base/{package}=ALL-UNNAMED"
        for package in (
            "java.lang",
            "java.net",
            "java.io",
            "java.nio",
            "sun.nio.ch",
            "java.lang.reflect",
            "java.text",
            "java.time",
            "java.util",
            "java.util.concurrent",
            "java.util.concurrent.atomic",
            "java.util.concurrent.locks",
        )
    ),
]
VARIANTS = {
    "java": "Java PubSubSink (Flink 1.18), 1 topic",
    "default-1": "pyflink-gcp default shape, 1 topic",
    "default-16": "pyflink-gcp default shape, 16 topics",
    "own-1": "pyflink-gcp own chain, 1 topic",
}


def topic_name(k: int) -> str:
    return f"peer-t{k:02d}"


def make_record(i: int) -> dict[str, Any]:
    """The record both sides write; its JSON is 163-172 bytes (PeerPubSubJob.ToJson makes the
    same bytes in Java)."""
    return {
        "id": i,
        "topic": topic_name(i % TOPICS),
        "customer": f"c{i % 1000}",
        "payload": "x" * 100,
    }


def to_json(record: dict[str, Any], ctx: Any = None) -> bytes:
    return json.dumps(record).encode()


# -- the Java peer ---------------------------------------------------------------------------


def build_peer() -> None:
    """``mvn -q package`` of bench/peer_pubsub/ unless its jar is newer than every source."""
    sources = [PEER / "pom.xml", *PEER.joinpath("src").rglob("*.java")]
    if JAR.exists() and JAR.stat().st_mtime >= max(s.stat().st_mtime for s in sources):
        return
    if shutil.which("mvn") is None:
        raise SystemExit("bench/peer_pubsub needs Maven (mvn) on the PATH to build the Java peer")
    print("building bench/peer_pubsub (mvn -q package) ...", flush=True)
    subprocess.run(["mvn", "-q", "-B", "package"], cwd=PEER, check=True, timeout=1_800)


def java_job(
    host: str,
    topic: str,
    records: int,
    parallelism: int,
    spans: str,
    emulator_pids: list[int],
    warmed_up: Callable[[], None],
) -> None:
    """Run the Java peer; ``warmed_up`` is called between its warm-up and its measured job
    (the JVM waits for it on its standard input)."""
    classpath = os.pathsep.join([str(JAR), str(PEER / "target" / "lib" / "*")])
    command = [
        "java",
        *JAVA_17_OPENS,
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-cp",
        classpath,
        MAIN_CLASS,
        *("--emulator", host, "--project", PROJECT, "--topic", topic),
        *("--records", str(records), "--parallelism", str(parallelism)),
        *("--checkpoint-ms", str(CHECKPOINT_MS), "--spans", spans),
        *("--emulator-pids", ",".join(map(str, emulator_pids))),
        *("--clock-ticks", str(os.sysconf("SC_CLK_TCK"))),
        *("--warmup-topic", WARMUP_TOPIC, "--warmup-records", str(min(records, 50_000))),
    ]
    with tempfile.TemporaryFile("w+") as log:
        job = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
        )
        assert job.stdin is not None and job.stdout is not None
        timer = threading.Timer(JOB_TIMEOUT_S, job.kill)  # bounds the handshake's readline too
        timer.start()
        try:
            line = job.stdout.readline()
            if line.strip() == "warmed up":
                warmed_up()
                job.stdin.write("go\n")
                job.stdin.flush()
            job.wait()
        finally:
            timer.cancel()
            if job.poll() is None:
                job.kill()
        if job.returncode != 0 or line.strip() != "warmed up":
            log.seek(0)
            tail = "\n".join(log.read().splitlines()[-15:])
            raise RuntimeError(f"the Java job exited with {job.returncode}:\n{tail}")


# -- the pyflink-gcp sink --------------------------------------------------------------------


class PublishCounts:
    """Counts the Publish requests, and the messages in them, that a sink's channel sends."""

    def __init__(self) -> None:
        self.calls = 0
        self.messages = 0
        self.lock = threading.Lock()

    def wrap(self, method: Callable[..., Any]) -> Callable[..., Any]:
        """``method(topic, messages, ...)``, counted."""

        def counted(topic: str, messages: Any, *args: Any, **kwargs: Any) -> Any:
            with self.lock:
                self.calls += 1
                self.messages += len(messages)
            return method(topic, messages, *args, **kwargs)

        return counted


class TimedPubSub(SpanTimedFactory, PubSubWriterFactory):
    """The sink's writer factory, timed like the Java side: the span and the job's CPU at the
    first record and at each full flush (:class:`SpanTimedFactory`: a worker torn down at the
    job's end may never run ``close()``), and the Publish requests counted on the sink's own
    channel."""

    _config_fields = (*PubSubWriterFactory._config_fields, "spans_path", "emulator_pids")
    emulator_pids: tuple[int, ...] = ()
    _cpu_first: dict[str, Any] | None = None
    _counter: PublishCounts | None = None
    #: The sink's Publish calls (a blocking one and, where the sink has it, one that does not
    #: wait), each ``(topic, messages)``: the ones found on its channel object are counted.
    PUBLISH_CALLS = ("publish", "publish_future")

    def open(self, info: Any) -> None:
        super().open(info)
        self._cpu_first = None
        counts = PublishCounts()
        found = [name for name in self.PUBLISH_CALLS if hasattr(self.rpc, name)]
        for name in found:
            setattr(self.rpc, name, counts.wrap(getattr(self.rpc, name)))
        self._counter = counts if found else None

    def create_writer(self, destination: Any) -> Any:
        if self._cpu_first is None:
            self._cpu_first = job_cpu(self.emulator_pids)
        return super().create_writer(destination)

    def span_counts(self) -> dict[str, Any]:
        counter = self._counter
        return {
            "cpu_first": self._cpu_first,
            "cpu_last": job_cpu(self.emulator_pids),
            "publish_calls": counter.calls if counter is not None else -1,
            "published": counter.messages if counter is not None else 0,
        }


def python_job(
    variant: str, records: int, parallelism: int, spans: str, emulator_roots: list[int]
) -> None:
    project = PROJECT
    builder = PubSubSink.builder().set_serializer(to_json)
    if variant == "default-16":
        builder.set_destination_resolver(lambda r, c: TopicDestination.of(project, r["topic"]))
    else:
        fixed = TopicDestination.of(project, topic_name(0))
        builder.set_destination_resolver(lambda r, c: fixed)
    # The default shape runs the record map in the writer's operator; own-1 opts out.
    fused = not variant.startswith("own")
    builder.set_chain_with_upstream(fused)
    sink = builder.build()
    sink._config.factory = timed_factory(TimedPubSub, sink._config.factory, spans)
    sink._config.factory.emulator_pids = tuple(emulator_roots)
    bundle = PubSubWriterOptions().max_buffered_records
    # The job's own bundle settings, as a user's job has them (PyFlink's defaults).
    env = shaped_env("default", parallelism, bundle, CHECKPOINT_MS)
    record_stream(env, records, make_record).sink_to(sink)
    env.execute(f"bench-peer-pubsub-{variant}-p{parallelism}")


# -- delivery --------------------------------------------------------------------------------


def subscribe(topics: list[str]) -> list[str]:
    """A fresh subscription on each topic: it holds only what the next job publishes."""
    from google.cloud import pubsub_v1

    client = pubsub_v1.SubscriberClient()
    run = uuid.uuid4().hex[:8]
    names = []
    for topic in topics:
        name = client.subscription_path(PROJECT, f"peer-{run}-{topic}")
        client.create_subscription(
            request={
                "name": name,
                "topic": f"projects/{PROJECT}/topics/{topic}",
                "ack_deadline_seconds": 600,
            },
            timeout=30,
        )
        names.append(name)
    return names


@dataclass
class Delivery:
    """What reached the emulator: ``accepted`` messages by its counter, and, when the
    subscriptions were pulled, ``missing`` and ``duplicates`` record ids."""

    records: int
    accepted: int
    missing: int | None = None
    duplicates: int | None = None

    @property
    def exact(self) -> bool:
        return self.accepted == self.records and not self.missing and not self.duplicates

    def __str__(self) -> str:
        pulled = (
            f", pulled: {self.missing:,} ids missing, {self.duplicates:,} duplicated"
            if self.missing is not None
            else ""
        )
        verdict = "delivered exactly" if self.exact else "FAILED"
        return f"{verdict}: emulator accepted {self.accepted:,} of {self.records:,}{pulled}"


def message_counter() -> int:
    """The emulator's message-id counter: it numbers every message it accepts on any topic
    1, 2, 3, ..., so a probe published before and after a job brackets what the job sent."""
    from google.cloud import pubsub_v1

    client = pubsub_v1.PublisherClient()
    try:
        future = client.publish(client.topic_path(PROJECT, PROBE_TOPIC), b"probe")
        return int(future.result(timeout=30))
    finally:
        client.stop()


def pull_all(subscriptions: list[str], records: int) -> tuple[int, int]:
    """Pull every subscription dry (never acknowledging: the 600-s deadline keeps pulled
    messages from coming back), count each record id, delete the subscriptions; return the
    missing and the duplicated ids. The emulator hands out 100 messages a pull: a few
    thousand a second."""
    from google.api_core import exceptions as gexc
    from google.cloud import pubsub_v1

    client = pubsub_v1.SubscriberClient()
    seen = bytearray(records)
    duplicates = 0
    expected = records // len(subscriptions)
    for name in subscriptions:
        got = empty = 0
        # Until the expected count and then one empty pull (which catches duplicates), or
        # three empty pulls in a row while records are still missing.
        while empty < (1 if got >= expected else 3):
            try:
                response = client.pull(
                    request={"subscription": name, "max_messages": 1_000},
                    timeout=2 if got >= expected else 10,
                    retry=None,
                )
                # The raw protobuf: proto-plus wrappers cost more per message than the pull.
                received = type(response).pb(response).received_messages
            except gexc.DeadlineExceeded:
                received = []
            if not received:
                empty += 1
                continue
            empty = 0
            got += len(received)
            for item in received:
                data = item.message.data  # b'{"id": 123, ...'
                i = int(data[7 : data.index(b",")])
                if seen[i]:
                    duplicates += 1
                seen[i] = 1
        client.delete_subscription(request={"subscription": name}, timeout=30)
    return records - sum(seen), duplicates


# -- runs ------------------------------------------------------------------------------------


def wait_for_spans(
    path: str, subtasks: int, timeout_s: float = 60.0, at_least: int | None = None
) -> list[dict[str, Any]]:
    """Every subtask's latest span line (the Python side appends one after each full flush;
    the JVM writes one per subtask before it exits). With ``at_least``, fewer than
    ``subtasks`` are accepted after ``timeout_s``: a Python writer that received no record
    logs no span.

    Raises:
        RuntimeError: Fewer than ``at_least`` (default: ``subtasks``) subtasks logged a span
            within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        latest: dict[Any, dict[str, Any]] = {}
        try:
            with open(path) as f:
                for n, line in enumerate(f):
                    if line.endswith("\n"):
                        span = json.loads(line)
                        key = span.get("subtask", n)
                        if key not in latest or span["end"] >= latest[key]["end"]:
                            latest[key] = span
        except FileNotFoundError:
            pass
        if len(latest) >= subtasks or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if len(latest) < (subtasks if at_least is None else at_least):
        raise RuntimeError(f"{len(latest)} of {subtasks} subtasks logged a span in {timeout_s:g} s")
    return list(latest.values())


@dataclass
class Run:
    variant: str
    parallelism: int
    rate: float
    client_us: float
    jvm_us: float
    python_us: float
    emulator_us: float
    per_publish: float | None
    delivery: Delivery
    #: Subtasks that received records (a fused job's source may hand them all to one).
    active: int = 0


def measure(
    variant: str,
    records: int,
    parallelism: int,
    workdir: str,
    host: str,
    emulator: list[int],
    pull: bool,
) -> Run:
    """One job of ``variant`` with its delivery check; ``emulator``: the emulator's root pids;
    ``pull``: also pull fresh subscriptions and count each id."""
    topics = [topic_name(k) for k in range(TOPICS if variant == "default-16" else 1)]
    subscriptions = subscribe(topics) if pull else []
    spans = new_spans(workdir, f"{variant}-p{parallelism}")
    before: list[int] = []
    if variant == "java":
        children = _processes()[0]
        tree = [pid for root in emulator for pid in _tree(children, root)]
        warmed_up = lambda: before.append(message_counter())  # noqa: E731
        java_job(host, topics[0], records, parallelism, spans, tree, warmed_up)
    else:
        before.append(message_counter())
        python_job(variant, records, parallelism, spans, emulator)
    delivery = Delivery(records, message_counter() - before[0] - 1)
    try:
        if variant == "java":
            lines = wait_for_spans(spans, parallelism)
        else:
            # The job has ended, so every writer that received records has logged its span.
            # With the source in the writer's chain (fused) a reader can take every split of
            # the number source before the other subtask's reader asks for one.
            lines = wait_for_spans(spans, parallelism, timeout_s=5.0, at_least=1)
    except RuntimeError as exc:
        raise RuntimeError(f"{exc} ({delivery})") from None
    if subscriptions:
        delivery.missing, delivery.duplicates = pull_all(subscriptions, records)
    firsts = [s["cpu_first"] for s in sorted(lines, key=lambda s: s["start"])]
    lasts = [s["cpu_last"] for s in sorted(lines, key=lambda s: s["end"])]
    cpu = window_cpu(firsts, lasts, records)
    if variant == "java":
        calls = max(s["publish_calls"] for s in lines)
        published = max(s["published"] for s in lines)
    else:
        calls = sum(s["publish_calls"] for s in lines)
        published = sum(s["published"] for s in lines)
        if min(s["publish_calls"] for s in lines) < 0:
            calls = -1
    return Run(
        variant,
        parallelism,
        span_rate(spans, records),
        cpu["jvm"] + cpu["python workers"],
        cpu["jvm"],
        cpu["python workers"],
        cpu["emulator"],
        published / calls if calls > 0 else None,
        delivery,
        len(lines),
    )


def median_row(runs: list[Run]) -> dict[str, Any] | None:
    """Medians over the runs that delivered exactly (None when none did)."""
    ok = [r for r in runs if r.delivery.exact]
    if not ok:
        return None
    per_publish = [r.per_publish for r in ok if r.per_publish is not None]
    return {
        "rate": statistics.median(r.rate for r in ok),
        "client": statistics.median(r.client_us for r in ok),
        "jvm": statistics.median(r.jvm_us for r in ok),
        "python": statistics.median(r.python_us for r in ok),
        "emulator": statistics.median(r.emulator_us for r in ok),
        "per_publish": statistics.median(per_publish) if per_publish else None,
    }


def report(runs: list[Run], variants: list[str], parallelisms: list[int]) -> str:
    head = (
        f"{'variant':<38}{'p':>2}{'records/s':>11}{'x Java':>8}{'client us/rec':>15}"
        f"{'(JVM+Py)':>12}{'emulator us/rec':>17}{'msgs/Publish':>14}{'delivered':>11}"
    )
    out = [head, "-" * len(head)]
    for p in parallelisms:
        rows = {
            v: median_row([r for r in runs if r.variant == v and r.parallelism == p])
            for v in variants
        }
        java = rows.get("java")
        for v in variants:
            mine = [r for r in runs if r.variant == v and r.parallelism == p]
            ok = sum(r.delivery.exact for r in mine)
            row = rows[v]
            if row is None:
                out.append(f"{VARIANTS[v]:<38}{p:>2}{'failed':>11}{'':>67}{ok:>5}/{len(mine)}")
                continue
            ratio = f"{row['rate'] / java['rate']:.2f}" if java else "-"
            split = f"({row['jvm']:.0f}+{row['python']:.0f})"
            per = f"{row['per_publish']:.1f}" if row["per_publish"] is not None else "n/a"
            out.append(
                f"{VARIANTS[v]:<38}{p:>2}{row['rate']:>11,.0f}{ratio:>8}{row['client']:>15.0f}"
                f"{split:>12}{row['emulator']:>17.1f}{per:>14}{ok:>7}/{len(mine)}"
            )
    partial = [r for r in runs if 0 < r.active < r.parallelism]
    if partial:
        out.append(
            "\n"
            + "; ".join(
                f"{VARIANTS[r.variant]} p={r.parallelism}: records reached {r.active} of "
                f"{r.parallelism} subtasks"
                for r in partial
            )
            + " (the rate is then that of fewer subtasks)"
        )
    return "\n".join(out)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def measured_tree() -> str:
    """The commit measured, and whether the package had uncommitted changes (they run too)."""
    root = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "pyflink_gcp"],
            cwd=root,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown (no git)"
    return f"{rev or 'unknown'}{' with uncommitted changes in pyflink_gcp/' if dirty else ''}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--parallelism", default="1,2", help="comma-separated")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    parser.add_argument("--full", action="store_true", help="200,000 records, 3 repeats")
    parser.add_argument(
        "--pull",
        action="store_true",
        help="also pull every message back and check each record id (slow: the emulator hands "
        "out a few thousand messages a second)",
    )
    args = parser.parse_args(argv)
    if args.full:
        args.records, args.repeats = 200_000, 3
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    parallelisms = [int(p) for p in args.parallelism.split(",")]
    warnings.filterwarnings("ignore")
    if "java" in variants:
        build_peer()
    print(f"pyflink-gcp at {measured_tree()}; uptime at start: {uptime()}", flush=True)
    runs: list[Run] = []
    with EmulatorStack(services=("pubsub",), project=PROJECT, keep_logs=False) as stack:
        os.environ.update(stack.env)
        host = stack.env["PUBSUB_EMULATOR_HOST"]
        emulator = [p.pid for p in stack.processes.values()]
        create_topics([topic_name(k) for k in range(TOPICS)] + [WARMUP_TOPIC, PROBE_TOPIC])
        warm_up()
        with tempfile.TemporaryDirectory() as workdir:
            for repeat in range(1, args.repeats + 1):
                for p in parallelisms:
                    for variant in variants:
                        try:
                            run = measure(
                                variant, args.records, p, workdir, host, emulator, args.pull
                            )
                        except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
                            run = Run(variant, p, 0, 0, 0, 0, 0, None, Delivery(args.records, 0))
                            print(f"  {variant} p={p}: job failed: {exc}", flush=True)
                        runs.append(run)
                        per = f"{run.per_publish:.1f}" if run.per_publish else "n/a"
                        print(
                            f"[{repeat}/{args.repeats}] {VARIANTS[variant]} p={p}: "
                            f"{run.rate:,.0f} records/s, client {run.client_us:.0f} us/record "
                            f"(JVM {run.jvm_us:.0f}, Python {run.python_us:.0f}), emulator "
                            f"{run.emulator_us:.1f} us/record, {per} messages/Publish, "
                            f"{run.delivery}"
                            + (
                                f"; records reached {run.active} of {p} subtasks"
                                if 0 < run.active < p
                                else ""
                            ),
                            flush=True,
                        )
    print(
        f"\n{args.records:,} records of ~170-byte JSON per job, {CHECKPOINT_MS / 1000:g}-s "
        f"checkpoints, medians of {args.repeats} interleaved repeats over the runs that "
        "delivered exactly; x Java: against the Java sink at the same parallelism\n"
    )
    print(report(runs, variants, parallelisms))
    print(f"\nuptime at end: {uptime()}")


def create_topics(names: list[str]) -> None:
    from google.api_core import exceptions as gexc
    from google.cloud import pubsub_v1

    client = pubsub_v1.PublisherClient()
    for name in names:
        try:
            client.create_topic(name=client.topic_path(PROJECT, name), timeout=30)
        except gexc.AlreadyExists:
            pass


if __name__ == "__main__":
    main()
