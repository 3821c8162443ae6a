"""Apache Beam Python's ``WriteToBigQuery`` and the pyflink-gcp ``BigQuerySink``, side by side.

    python bench/peer_beam.py [--records 100000] [--repeats 3] [--variants beam-loads,...]
                              [--checkpoint-ms 1000] [--beam-option=--runner=...]

In a bounded job, on one BigQuery emulator with a GCS emulator for staged files (both started
here through the project's own ``EmulatorStack``), in one interleaved run (each repeat runs every
variant once, in turn), the same records (``make_record``: ~170 bytes of JSON-like dict, an id,
one of 7 days, a customer, an amount and a 100-character payload) routed per record to their
day table (``events_<day>``, 7 tables created empty in a fresh dataset before each job):

- ``beam-loads`` / ``beam-inserts``: apache-beam[gcp] 2.77.0 (the newest release on PyPI when
  this was written), ``WriteToBigQuery(table=callable)`` with ``method=FILE_LOADS`` (Beam's
  default for bounded input: newline-delimited JSON files in GCS, then load jobs; with dynamic
  destinations Beam loads each table's files into a temporary table and copies it into the
  destination) or ``STREAMING_INSERTS`` (``tabledata.insertAll``), after ``beam.Create`` over
  the ids and a map to the record, on Beam's local default runner: the ``DirectRunner``, which
  tries the Prism runner first and falls back to the ``FnApiRunner`` (in-process, one worker)
  when Prism's binary cannot be obtained (Beam downloads it from GitHub's release page; a
  machine without that access gets the FnApiRunner). The runner that ran is printed;
- ``beam-loads-prism``: FILE_LOADS on the ``PrismRunner`` (Beam's Go runner, the Python SDK
  harness in the Beam process), what the local default runs where Beam can download Prism. The
  binary is built once with ``go install`` at Beam's version into the tools cache
  (``beam-prism``), so Go must be on the PATH.

  Beam runs in a virtualenv of its own (apache-beam conflicts with the apache-beam that PyFlink
  pins), created on first use under the tools cache (``$PYFLINK_GCP_CACHE`` or
  ``~/.cache/pyflink-gcp``, ``beam-venv``), running bench/peer_beam/beam_job.py, which says how
  Beam's clients are pointed at the emulators. ``--beam-option`` passes more pipeline options;
- ``sink-default`` / ``sink-loads``: PyFlink 2.3 with ``BigQuerySink`` (the default stream,
  ``STORAGE_API_AT_LEAST_ONCE``, or ``WriteMethod.FILE_LOADS`` with its defaults: Parquet files
  staged in the GCS emulator, loaded at the checkpoints and at the end of input), parallelism 1,
  default options and job shape (the record map runs in the writer's operator), in streaming
  runtime mode with a bounded source and checkpoints every ``--checkpoint-ms`` (0: none);
- ``sink-default-batch`` / ``sink-loads-batch``: the same jobs in ``RuntimeExecutionMode.BATCH``
  (no checkpoints: the sink commits at the end of input);
- ``ceiling`` / ``ceiling-batch``: the PyFlink no-op ceiling of the same job shape (the record
  map, then a Python process function that does nothing, in its own chain), in each runtime mode;
- ``sink-default-own`` / ``ceiling-fused``: the default stream with
  ``set_chain_with_upstream(False)`` (the writer in an operator chain of its own after the map:
  one more crossing between the JVM and Python per record), and the no-op chained with the map,
  in streaming mode;
- ``ceiling-staged-batch``: PyFlink's floor for the shape of ``FILE_LOADS`` in ``BATCH`` mode, a
  writer fused with the map and its committer in a stage of its own behind a blocking exchange:
  the no-op fused with the map hands one element to a second Python operator in a chain of its
  own, which in ``BATCH`` mode starts (and starts its Python worker) when the first stage ends.

Each job is timed the same way on both sides: from the first record the record map made (it
notes the wall clock and the CPU of the job's processes then) to the end of the job as its
client sees it (PyFlink: the job's result arrived; Beam: ``wait_until_finish()`` returned), so
FILE_LOADS' final load jobs are inside the time, and start-up before the first record is not.
Client CPU is the job's processes only, from ``/proc`` (user + system, all threads, of each
process, read at the first record and every 0.25 s to the end, so a worker that ends before the
job does still counts): for PyFlink the MiniCluster JVM and its Python workers, for Beam the
Beam process and anything it started (Prism); the emulators' CPU is read over the same window.

Delivery is checked for every job: each day table is counted back from the emulator and must
hold exactly its share of the input; the no-op counts the records it received. A run that did
not is reported as failed and left out of the medians. Rows show medians over the runs that
delivered exactly, and ratios against Beam's FILE_LOADS measured in the same run.
"""

from __future__ import annotations

import argparse
import fcntl
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

from pyflink.datastream import RuntimeExecutionMode
from pyflink.datastream.functions import ProcessFunction

from bench._common import warm_up
from bench._cpu import jvm_pid, processes_cpu, tree_cpu
from bench.bigquery import staging_bucket
from pyflink_gcp.bigquery import (
    BigQueryFileLoadsOptions,
    BigQuerySink,
    TableDestination,
    WriteMethod,
)
from pyflink_gcp.tools.emulators import EmulatorStack
from pyflink_gcp.tools.emulators.clients import bigquery_client
from pyflink_gcp.tools.emulators.tools import cache_root
from tests.support.jobs import make_env, record_stream

PROJECT = "bench-project"
DAYS = 7
BEAM_VERSION = "2.77.0"
BEAM_REQUIREMENTS: tuple[str, ...] = (f"apache-beam[gcp]=={BEAM_VERSION}",)
#: The Go package of Beam's Prism runner, built at ``BEAM_VERSION`` for ``beam-*-prism``.
PRISM_PACKAGE = "github.com/apache/beam/sdks/v2/go/cmd/prism"
BEAM_JOB = Path(__file__).resolve().parent / "peer_beam" / "beam_job.py"
#: Seconds one job (either side) may take before it counts as failed.
JOB_TIMEOUT_S = 900
VARIANTS = {
    "beam-loads": "Beam FILE_LOADS",
    "beam-inserts": "Beam STREAMING_INSERTS",
    "beam-loads-prism": "Beam FILE_LOADS, PrismRunner",
    "sink-default": "BigQuerySink default stream, streaming mode",
    "sink-loads": "BigQuerySink FILE_LOADS, streaming mode",
    "sink-default-batch": "BigQuerySink default stream, BATCH mode",
    "sink-loads-batch": "BigQuerySink FILE_LOADS, BATCH mode",
    "ceiling": "PyFlink no-op ceiling, streaming mode",
    "ceiling-batch": "PyFlink no-op ceiling, BATCH mode",
    "sink-default-own": "BigQuerySink default stream, own chain, streaming mode",
    "ceiling-fused": "PyFlink no-op ceiling, fused with the map, streaming mode",
    "ceiling-staged-batch": "PyFlink no-op ceiling, fused, then a second Python stage, BATCH mode",
}
BASELINE = "beam-loads"


def day(i: int) -> str:
    return f"2024030{1 + i % DAYS}"


def make_record(i: int) -> dict[str, Any]:
    """The record both sides write (bench/peer_beam/beam_job.py has the same function)."""
    return {
        "id": i,
        "day": day(i),
        "customer": f"c{i % 1000}",
        "amount": i * 0.25,
        "payload": "x" * 100,
    }


def expected_rows(records: int) -> dict[str, int]:
    """Rows each day table must hold after a job of ``records``."""
    return {day(d): records // DAYS + (1 if d < records % DAYS else 0) for d in range(DAYS)}


# -- CPU -------------------------------------------------------------------------------------


class TreeSampler:
    """Reads :func:`processes_cpu` of a job's root every 0.25 s while the job runs, keeping each
    process's last reading (a process that ends loses at most its last 0.25 s)."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[str, float] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done.set()
        self._thread.join()
        self.merge(processes_cpu(self.root)["procs"])

    def merge(self, procs: dict[str, float]) -> None:
        for key, cpu in procs.items():
            self.seen[key] = max(cpu, self.seen.get(key, cpu))

    def _poll(self) -> None:
        while not self._done.is_set():
            self.merge(processes_cpu(self.root)["procs"])
            self._done.wait(0.25)

    def since(self, first: dict[str, Any]) -> float:
        """CPU seconds used since ``first`` (a :func:`processes_cpu` reading): the growth of
        each process alive then, plus everything of the processes started after it."""
        total = 0.0
        for key, cpu in self.seen.items():
            if key in first["procs"]:
                total += max(0.0, cpu - first["procs"][key])
            elif int(key.split(":")[1]) >= first["now"]:
                total += cpu
        return total


def java_ancestor() -> int:
    """The MiniCluster JVM that started the calling Python worker."""
    pid = os.getpid()
    while pid > 1:
        text = Path(f"/proc/{pid}/stat").read_text()
        if text[text.index("(") + 1 : text.rindex(")")] == "java":
            return pid
        pid = int(text.rsplit(")", 1)[1].split()[1])
    raise RuntimeError("the calling process has no java ancestor")


@dataclass
class Setup:
    """What every job of a run shares."""

    records: int
    workdir: str
    bucket: str
    emulator_pids: list[int]
    checkpoint_ms: int
    beam_python: Path | None
    beam_options: list[str]
    bundle_size: int | None = None


# -- the pyflink-gcp side --------------------------------------------------------------------


class MakeRecord:
    """The record map: notes the wall clock and the CPU of the job's processes (the JVM's
    tree) and of the emulators at its first record."""

    def __init__(self, spans: str, emulator_pids: list[int]) -> None:
        self.spans = spans
        self.emulator_pids = emulator_pids
        self.seen = False

    def __call__(self, i: int) -> dict[str, Any]:
        if not self.seen:
            self.seen = True
            first = {
                "start": time.time(),
                "cpu_start": processes_cpu(java_ancestor()),
                "emulator_start": sum(map(tree_cpu, self.emulator_pids)),
            }
            with open(self.spans, "a") as f:
                f.write(json.dumps(first) + "\n")
        return make_record(i)


class CountingNoOp(ProcessFunction):
    """The ceiling: receives every record, emits none, logs how many it received."""

    def __init__(self, counts: str) -> None:
        self.counts = counts
        self.received = 0

    def process_element(self, value: Any, ctx: Any) -> None:
        self.received += 1

    def close(self) -> None:
        with open(self.counts, "a") as f:
            f.write(f"{self.received}\n")


class CountingNoOpThenOne(CountingNoOp):
    """The no-op that hands its first record on: the one element a second stage receives, as a
    committer receives a writer's committables."""

    def process_element(self, value: Any, ctx: Any) -> Any:
        self.received += 1
        if self.received == 1:
            yield self.received


class NoOp(ProcessFunction):
    """A second stage that does nothing with what it receives."""

    def process_element(self, value: Any, ctx: Any) -> None:
        return None


class DayTable:
    """The sink's resolver: the record's day table."""

    def __init__(self, dataset: str) -> None:
        self.dataset = dataset

    def __call__(self, record: dict[str, Any], context: Any) -> TableDestination:
        return TableDestination.of(PROJECT, self.dataset, f"events_{record['day']}")


def as_row(record: dict[str, Any], context: Any = None) -> dict[str, Any]:
    return record


def flink_job(setup: Setup, variant: str, dataset: str, spans: str, counts: str) -> None:
    """Run one PyFlink job of ``variant`` to its end (the client got its result)."""
    records, emulator_pids, checkpoint_ms = setup.records, setup.emulator_pids, setup.checkpoint_ms
    batch = variant.endswith("-batch")
    fused = variant.endswith("-fused")
    staged = "-staged" in variant
    env = make_env(
        parallelism=1,
        checkpoint_ms=None if batch or not checkpoint_ms else checkpoint_ms,
        process_workers=True,
        extra=(
            {"python.fn-execution.bundle.size": str(setup.bundle_size)}
            if setup.bundle_size
            else None
        ),
    )
    if batch:
        env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    stream = record_stream(env, records, MakeRecord(spans, emulator_pids))
    if staged:
        first = stream.process(CountingNoOpThenOne(counts))
        first.process(NoOp()).start_new_chain().set_parallelism(1)
    elif variant.startswith("ceiling"):
        no_op = stream.process(CountingNoOp(counts))
        if not fused:
            no_op.start_new_chain()
    else:
        builder = (
            BigQuerySink.builder()
            .set_destination_resolver(DayTable(dataset))
            .set_serializer(as_row)
            .set_rest_endpoint("http://" + os.environ["BIGQUERY_EMULATOR_HOST"])
        )
        if variant.startswith("sink-loads"):
            builder = builder.set_write_method(WriteMethod.FILE_LOADS).set_file_loads_options(
                BigQueryFileLoadsOptions.builder()
                .staging_location(f"gs://{setup.bucket}/flink-{uuid.uuid4().hex[:8]}")
                .spool_directory(os.path.join(setup.workdir, "spool"))
                .build()
            )
        else:
            builder = builder.set_storage_endpoint(
                "http://" + os.environ["BIGQUERY_STORAGE_EMULATOR_HOST"]
            )
        builder = builder.set_chain_with_upstream(not variant.endswith("-own"))
        stream.sink_to(builder.build())
    with TreeSampler(jvm_pid()) as sampler:
        client = env.execute_async(f"bench-peer-beam-{variant}")
        client.get_job_execution_result().result()
        end = {"end": time.time(), "emulator_end": sum(map(tree_cpu, emulator_pids))}
    with open(spans) as f:
        first = min((json.loads(line) for line in f), key=lambda s: s["start"])
    with open(spans, "w") as f:
        f.write(json.dumps({**first, **end, "cpu": sampler.since(first["cpu_start"])}) + "\n")


# -- the Beam side ---------------------------------------------------------------------------


def cached_build(name: str, spec: str, built: Path, build: Callable[[], None]) -> Path:
    """``built`` (under the tools cache), made by ``build`` unless the stamp file ``<name>.stamp``
    already says ``spec``; a lock file serialises two scripts building it at once."""
    cache = cache_root()
    cache.mkdir(parents=True, exist_ok=True)
    stamp = cache / f"{name}.stamp"
    with open(cache / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not (built.exists() and stamp.exists() and stamp.read_text() == spec):
                stamp.unlink(missing_ok=True)
                build()
                stamp.write_text(spec)
            return built
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def beam_python() -> Path:
    """The Beam virtualenv's Python, created with ``BEAM_REQUIREMENTS`` on first use."""
    venv = cache_root() / "beam-venv"
    python = venv / "bin" / "python"

    def build() -> None:
        print(f"creating the Beam venv ({', '.join(BEAM_REQUIREMENTS)}) ...", flush=True)
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, "--upgrade", "pip"], check=True)
        subprocess.run([*pip, *BEAM_REQUIREMENTS], check=True)

    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    spec = json.dumps({"python": version, "requirements": BEAM_REQUIREMENTS})
    return cached_build("beam-venv", spec, python, build)


def prism_binary() -> Path:
    """Beam's Prism runner at ``BEAM_VERSION``, built once into the tools cache with
    ``go install`` (Beam's Python SDK would download it from GitHub's release page instead)."""
    target = cache_root() / "beam-prism"

    def build() -> None:
        if shutil.which("go") is None:
            raise RuntimeError("building Beam's Prism runner needs Go (go) on the PATH")
        print(f"building Beam's Prism runner ({PRISM_PACKAGE}@v{BEAM_VERSION}) ...", flush=True)
        target.mkdir(parents=True, exist_ok=True)
        command = ["go", "install", f"{PRISM_PACKAGE}@v{BEAM_VERSION}"]
        env = {**os.environ, "GOBIN": str(target)}
        subprocess.run(command, env=env, check=True, timeout=1_800)

    return cached_build("beam-prism", BEAM_VERSION, target / "prism", build)


def beam_job(setup: Setup, variant: str, dataset: str, spans: str) -> str:
    """Run one Beam job of ``variant``; returns the runner that ran it."""
    assert setup.beam_python is not None
    records, bucket, beam_options = setup.records, setup.bucket, setup.beam_options
    env = dict(os.environ)
    # PyFlink's job environment points PYTHONPATH at its own venv, which would shadow Beam's.
    for name in ("PYTHONPATH", "_python_worker_execution_mode"):
        env.pop(name, None)
    env["BIGQUERY_EMULATOR_HOST"] = "http://" + os.environ["BIGQUERY_EMULATOR_HOST"]
    method = "FILE_LOADS" if variant.startswith("beam-loads") else "STREAMING_INSERTS"
    if variant.endswith("-prism"):
        beam_options = [
            *beam_options,
            "--runner=PrismRunner",
            f"--prism_location={prism_binary()}",
        ]
    command = [
        str(setup.beam_python),
        str(BEAM_JOB),
        *("--method", method, "--records", str(records), "--project", PROJECT),
        *("--dataset", dataset, "--temp-location", f"gs://{bucket}/beam-{uuid.uuid4().hex[:8]}"),
        *("--spans", spans, "--emulator-pids", ",".join(map(str, setup.emulator_pids))),
        *(f"--beam-option={option}" for option in beam_options),
    ]
    with tempfile.TemporaryFile("w+") as log:
        job = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        try:
            with TreeSampler(job.pid) as sampler:
                job.wait(timeout=JOB_TIMEOUT_S)
        finally:
            if job.poll() is None:
                job.kill()
                job.wait()
        if job.returncode != 0:
            log.seek(0)
            tail = "\n".join(log.read().splitlines()[-15:])
            raise RuntimeError(f"the Beam job exited with {job.returncode}:\n{tail}")
    with open(spans) as f:
        span = json.loads(f.readline())
    sampler.merge(span["cpu_end"]["procs"])
    span["cpu"] = sampler.since(span["cpu_start"])
    with open(spans, "w") as f:
        f.write(json.dumps(span) + "\n")
    return str(span["runner"])


# -- runs ------------------------------------------------------------------------------------


def create_dataset() -> str:
    """A fresh dataset with the 7 day tables, empty."""
    from google.cloud import bigquery

    client = bigquery_client(PROJECT)
    dataset = f"peer_{uuid.uuid4().hex[:8]}"
    client.create_dataset(dataset)
    schema = [
        bigquery.SchemaField("id", "INT64"),
        bigquery.SchemaField("day", "STRING"),
        bigquery.SchemaField("customer", "STRING"),
        bigquery.SchemaField("amount", "FLOAT64"),
        bigquery.SchemaField("payload", "STRING"),
    ]
    for d in range(DAYS):
        client.create_table(bigquery.Table(f"{PROJECT}.{dataset}.events_{day(d)}", schema=schema))
    client.close()
    return dataset


def rows_landed(dataset: str) -> dict[str, int]:
    """Rows in each day table of ``dataset``, counted by the emulator."""
    client = bigquery_client(PROJECT)
    landed = {}
    for d in range(DAYS):
        query = f"SELECT COUNT(*) FROM `{PROJECT}.{dataset}.events_{day(d)}`"
        landed[day(d)] = int(next(iter(client.query(query).result()))[0])
    client.close()
    return landed


def runner_name(result_type: str) -> str:
    """The Beam runner that ran a job, from the type of its ``PipelineResult``."""
    if ".fn_api_runner." in result_type:
        return "FnApiRunner"
    if ".portable_runner." in result_type:
        return "PrismRunner"
    return result_type.rsplit(".", 1)[-1]


@dataclass
class Run:
    variant: str
    rate: float = 0.0
    client_us: float = 0.0
    emulator_us: float = 0.0
    delivered: bool = False
    detail: str = ""
    runner: str = ""


def measure(setup: Setup, variant: str) -> Run:
    """One job of ``variant`` and its delivery check."""
    records = setup.records
    stamp = f"{variant}-{time.monotonic_ns()}"
    spans = os.path.join(setup.workdir, f"{stamp}.jsonl")
    counts = os.path.join(setup.workdir, f"{stamp}.counts")
    ceiling = variant.startswith("ceiling")
    dataset = "" if ceiling else create_dataset()
    run = Run(variant)
    if variant.startswith("beam"):
        run.runner = runner_name(beam_job(setup, variant, dataset, spans))
    else:
        flink_job(setup, variant, dataset, spans, counts)
        run.runner = "PyFlink MiniCluster"
    with open(spans) as f:
        span = json.loads(f.readline())
    seconds = span["end"] - span["start"]
    run.rate = records / seconds
    run.client_us = 1e6 * span["cpu"] / records
    run.emulator_us = 1e6 * (span["emulator_end"] - span["emulator_start"]) / records
    if ceiling:
        with open(counts) as f:
            received = sum(int(line) for line in f if line.strip())
        run.delivered = received == records
        run.detail = f"the no-op received {received:,} of {records:,}"
    else:
        landed = rows_landed(dataset)
        expected = expected_rows(records)
        run.delivered = landed == expected
        wrong = {d: n for d, n in landed.items() if n != expected[d]}
        run.detail = f"{sum(landed.values()):,} of {records:,} rows landed" + (
            f"; wrong tables {wrong} (expected {expected})" if wrong else " exactly"
        )
    return run


def median_row(runs: list[Run]) -> dict[str, float] | None:
    ok = [r for r in runs if r.delivered]
    if not ok:
        return None
    return {
        "rate": statistics.median(r.rate for r in ok),
        "client": statistics.median(r.client_us for r in ok),
        "emulator": statistics.median(r.emulator_us for r in ok),
    }


def report(runs: list[Run], variants: list[str]) -> str:
    """The markdown table: medians over the runs that delivered exactly."""
    rows = {v: median_row([r for r in runs if r.variant == v]) for v in variants}
    base = rows.get(BASELINE)
    out = [
        "| variant | records/s (median) | × Beam FILE_LOADS | client CPU µs/record "
        "| emulator CPU µs/record | delivered |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for v in variants:
        mine = [r for r in runs if r.variant == v]
        ok = sum(r.delivered for r in mine)
        row = rows[v]
        if row is None:
            out.append(f"| {VARIANTS[v]} | failed | | | | {ok}/{len(mine)} |")
            continue
        ratio = f"{row['rate'] / base['rate']:.2f}" if base else "-"
        out.append(
            f"| {VARIANTS[v]} | {row['rate']:,.0f} | {ratio} | {row['client']:.0f} "
            f"| {row['emulator']:.0f} | {ok}/{len(mine)} |"
        )
    return "\n".join(out)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    parser.add_argument(
        "--checkpoint-ms",
        type=int,
        default=1_000,
        help="checkpoint interval of the streaming-mode PyFlink jobs; 0: none",
    )
    parser.add_argument(
        "--bundle-size",
        type=int,
        default=None,
        help="the PyFlink jobs' python.fn-execution.bundle.size (default: PyFlink's, 1,000)",
    )
    parser.add_argument(
        "--beam-option",
        action="append",
        default=[],
        help="a Beam pipeline option for the Beam jobs (repeatable), e.g. "
        "--beam-option=--runner=PrismRunner",
    )
    args = parser.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    warnings.filterwarnings("ignore")
    python = beam_python() if any(v.startswith("beam") for v in variants) else None
    print(f"uptime at start: {uptime()}", flush=True)
    runs: list[Run] = []
    with EmulatorStack(services=("bigquery", "gcs"), project=PROJECT, keep_logs=False) as stack:
        os.environ.update(stack.env)
        if any(not v.startswith("beam") for v in variants):
            warm_up()
        with tempfile.TemporaryDirectory() as workdir:
            setup = Setup(
                args.records,
                workdir,
                staging_bucket(),
                [p.pid for p in stack.processes.values()],
                args.checkpoint_ms,
                python,
                args.beam_option,
                args.bundle_size,
            )
            for repeat in range(1, args.repeats + 1):
                for variant in variants:
                    try:
                        run = measure(setup, variant)
                    except Exception as exc:  # noqa: BLE001 - a failed job is a result
                        run = Run(variant, detail=f"job failed: {exc}")
                    runs.append(run)
                    print(
                        f"[{repeat}/{args.repeats}] {VARIANTS[variant]}"
                        + (f" ({run.runner})" if run.runner else "")
                        + f": {run.rate:,.0f} records/s, client {run.client_us:.0f} us/record, "
                        f"emulator {run.emulator_us:.0f} us/record; "
                        + ("delivered exactly" if run.delivered else "FAILED")
                        + f": {run.detail}",
                        flush=True,
                    )
    checkpoints = (
        f"{args.checkpoint_ms / 1000:g}-s checkpoints" if args.checkpoint_ms else "no checkpoints"
    )
    print(
        f"\n{args.records:,} records per job over {DAYS} day tables, parallelism 1, medians of "
        f"{args.repeats} interleaved repeats over the runs that delivered exactly; PyFlink "
        f"streaming mode with {checkpoints}"
        + (f", job bundle size {args.bundle_size:,}" if args.bundle_size else "")
        + "; "
        f"Beam {BEAM_REQUIREMENTS[0].split('==')[1]} on "
        f"{', '.join(sorted({r.runner for r in runs if r.variant.startswith('beam') and r.runner}))}"
        "\n"
    )
    print(report(runs, variants))
    print(f"\nuptime at end: {uptime()}")


if __name__ == "__main__":
    main()
