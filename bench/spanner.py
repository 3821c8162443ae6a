"""Spanner sink throughput against its two ceilings, measured in one run on the same input.

    python bench/spanner.py [--records 30000] [--index] [--job-bound] [--bundle-size N]

Measured against the same emulator, with the same rows, each run into a fresh table:

- **raw client**: google-cloud-spanner's own ``database.batch()`` committing the same
  insert-or-update mutations from a plain Python loop, outside Flink, in commits of the same
  size as the sink's: what the emulator allows without Flink. Measured first and last; the
  baseline is the mean of the two.
- **PyFlink ceiling**: the same source and record map into a Python process function that does
  nothing, in the sink's job shape and at the sink's parallelism: what a Python operator allows
  on this machine. Two shapes: ``own chain`` (the default: the writer starts an operator chain
  of its own, so records cross the JVM once more after the map) and ``fused``
  (``set_chain_with_upstream()``: PyFlink fuses the writer into the map, and the writer flushes
  at the map's bundle ends).
- **sink**: the same job with ``SpannerSink`` (checkpoints every second), at parallelism 1 and
  2. The emulator runs one transaction at a time and aborts the others, so at parallelism 2
  the subtasks' commits take turns (each abort is retried).

With ``--job-bound``, each sink job runs once more with commits skipped (rows encoded and
batched, nothing sent): the most the job shape allows the sink on this machine, whatever Spanner
does.

Every job (ceilings and sinks, both shapes) runs with the same ``python.fn-execution.bundle.size``,
by default the sink's ``max_buffered_records`` (100,000): at PyFlink's default of 1,000 the record
map ends a bundle every 1,000 records, and that per-bundle cost, which is the map's and not the
sink's, weighs on every shape (and, fused, the writer would wait for its commits at each).
``--bundle-size 0`` keeps PyFlink's default in the own chain.

Each sink job also prints the CPU it used per record by process (the emulator, the MiniCluster
JVM, the Python workers, read from ``/proc`` at the writer's first record and last flush) and
how busy its committer thread was (time inside commit calls over the subtask's span): a sink
bound by Spanner keeps its committer busy; one bound by the job leaves it idle.

Job throughput is timed inside the job (each subtask's first record to its final flush), so
job start-up is not counted. Ratios are against the lower of the two ceilings; the target is
0.8. Starts a Spanner emulator unless ``SPANNER_EMULATOR_HOST`` is set. Figures from a machine
shared with other work vary from run to run: compare ratios from the same run only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
import warnings
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


from bench._common import (
    log_span,
    new_spans,
    noop_ceiling,
    shaped_env,
    span_rate,
    timed_factory,
    warm_up,
)
from bench._cpu import describe, job_cpu, per_record, tree_cpu, window_cpu
from pyflink_gcp.core import SubtaskInfo
from pyflink_gcp.spanner import (
    DatabaseDestination,
    Mutation,
    SpannerSink,
    SpannerWriterOptions,
)
from pyflink_gcp.spanner.writer import SpannerWriter, SpannerWriterFactory
from pyflink_gcp.tools.emulators import emulators_for
from tests.support.jobs import record_stream

PROJECT = "test-project"
TARGET = 0.8
KINDS = ("click", "view", "buy", "share")
COLUMNS = ("id", "kind", "score", "customer")
MAX_MUTATIONS = 20_000  # the sink's default budget


def to_record(i: int) -> dict[str, Any]:
    return {"id": i, "kind": KINDS[i % 4], "score": i * 0.5, "customer": f"c{i % 1000:04d}"}


class ToMutation:
    def __init__(self, table: str) -> None:
        self.table = table

    def serialize(self, record: dict[str, Any], context: Any) -> Mutation:
        return Mutation.insert_or_update(self.table, record)


class TimedWriter(SpannerWriter):
    """Notes the first record and the end of each flush, the job's CPU at both ends, and the
    time its commit calls take (the committer thread's busy time)."""

    spans_path = ""
    emulator_pids: tuple[int, ...] = ()
    #: Encode and batch as usual but never send a commit: the sink job's own ceiling.
    skip_commits = False
    first: float | None = None
    last: float | None = None
    cpu_first: dict[str, Any] | None = None
    cpu_last: dict[str, Any] | None = None
    #: Seconds spent in commit calls, and their count.
    commit_seconds = 0.0
    commit_calls = 0

    def write(self, element: Any, record: Any) -> None:
        if self.first is None:
            self.cpu_first = job_cpu(self.emulator_pids)
            self.first = time.time()
        super().write(element, record)

    def _commit_rpc(self, request: Any, records: int, mutations: int) -> None:
        if not self.skip_commits:
            start = time.perf_counter()
            super()._commit_rpc(request, records, mutations)
            self.commit_seconds += time.perf_counter() - start
            self.commit_calls += 1

    def flush(self) -> list[Any]:
        failures = super().flush()
        self.last = time.time()
        if self.first is not None:
            # A few milliseconds per flush (once per checkpoint), never per record.
            self.cpu_last = job_cpu(self.emulator_pids)
        return failures

    def close(self) -> None:
        if self.first is not None and self.last is not None:
            log_span(
                self.spans_path,
                self.first,
                self.last,
                cpu_first=self.cpu_first,
                cpu_last=self.cpu_last,
                commit_seconds=self.commit_seconds,
                commits=self.commit_calls,
            )
        super().close()


class TimedFactory(SpannerWriterFactory):
    """Creates :class:`TimedWriter` s; its settings travel with the configuration."""

    spans_path = ""
    emulator_pids: tuple[int, ...] = ()
    skip_commits = False
    _config_fields = (
        *SpannerWriterFactory._config_fields,
        "spans_path",
        "emulator_pids",
        "skip_commits",
    )

    def create_writer(
        self, destination: DatabaseDestination, writer_type: type[SpannerWriter] | None = None
    ) -> SpannerWriter:
        writer = super().create_writer(destination, TimedWriter)
        assert isinstance(writer, TimedWriter)
        writer.spans_path = self.spans_path
        writer.emulator_pids = self.emulator_pids
        writer.skip_commits = self.skip_commits
        return writer


#: The emulator's processes (with their children, CPU is counted), when this run started it.
EMULATOR_PIDS: list[int] = []


def span_cpu(path: str, records: int) -> dict[str, float]:
    """CPU microseconds per record by role over all subtasks' spans: the emulator, the JVM and
    the Python workers (PyFlink runs every Python operator of a slot in one worker process, so
    the record map and the writer share it)."""
    with open(path) as f:
        spans = [json.loads(line) for line in f]
    firsts = [s["cpu_first"] for s in sorted(spans, key=lambda s: s["start"])]
    lasts = [s["cpu_last"] for s in sorted(spans, key=lambda s: s["end"])]
    return window_cpu(firsts, lasts, records)


def spanner_emulator() -> Any:
    return emulators_for(("spanner",), "SPANNER_EMULATOR_HOST", project=PROJECT)


def destination() -> DatabaseDestination:
    return DatabaseDestination.of(
        PROJECT,
        os.environ.get("SPANNER_INSTANCE", "test-instance"),
        os.environ.get("SPANNER_DATABASE", "test-db"),
    )


def database() -> Any:
    from google.cloud import spanner

    d = destination()
    client = spanner.Client(project=PROJECT, disable_builtin_metrics=True)
    return client.instance(d.instance).database(d.database)


def create_table(index: bool) -> str:
    name = f"Bench_{uuid.uuid4().hex[:8]}"
    ddl = [
        f"CREATE TABLE {name} (id INT64 NOT NULL, kind STRING(16), score FLOAT64, "
        "customer STRING(16)) PRIMARY KEY (id)"
    ]
    if index:
        ddl.append(f"CREATE INDEX {name}_ByCustomer ON {name}(customer)")
    database().update_ddl(ddl).result(120)
    return name


def rows_per_commit(table: str) -> int:
    """The sink's commit size for this table, from its own counting rule."""
    factory = SpannerWriterFactory(
        sink_name="bench", database=destination(), options=SpannerWriterOptions()
    )
    factory.open(SubtaskInfo("bench"))
    try:
        schema = factory.schema.table(table)
        assert schema is not None
        return MAX_MUTATIONS // schema.write_cost("insert_or_update", COLUMNS)
    finally:
        factory.close()


def count_rows(table: str) -> int:
    with database().snapshot() as snapshot:
        return int(list(snapshot.execute_sql(f"SELECT COUNT(*) FROM {table}"))[0][0])


def raw_client(records: int, index: bool) -> float:
    """google-cloud-spanner's batch commits of the same rows, from a plain loop."""
    table = create_table(index)
    chunk = rows_per_commit(table)
    db = database()
    cpu_before = raw_cpu()
    start = time.perf_counter()
    rows: list[tuple[Any, ...]] = []
    for i in range(records):
        r = to_record(i)
        rows.append((r["id"], r["kind"], r["score"], r["customer"]))
        if len(rows) == chunk:
            with db.batch() as batch:
                batch.insert_or_update(table, COLUMNS, rows)
            rows = []
    if rows:
        with db.batch() as batch:
            batch.insert_or_update(table, COLUMNS, rows)
    elapsed = time.perf_counter() - start
    cpu = per_record(cpu_before, raw_cpu(), records)
    assert count_rows(table) == records
    print(f"raw client: {records / elapsed:,.0f}/s   {describe(cpu)}", flush=True)
    return records / elapsed


def raw_cpu() -> dict[str, float]:
    """CPU seconds so far of this process (the raw client) and of the emulator."""
    return {"client": time.process_time(), "emulator": sum(map(tree_cpu, EMULATOR_PIDS))}


SHAPES = ("own chain", "fused")
#: The sink's max_buffered_records: the job's bundle size in the fused shape.
FUSED_BUNDLE = SpannerWriterOptions().max_buffered_records


def job_env(shape: str, parallelism: int, bundle_size: int | None) -> Any:
    """A job's environment; ``bundle_size`` None: PyFlink's default (1,000) in the own chain
    and FUSED_BUNDLE fused."""
    return shaped_env(shape, parallelism, FUSED_BUNDLE, bundle_size=bundle_size)


def pyflink_ceiling(
    records: int, workdir: str, shape: str, parallelism: int, bundle_size: int | None
) -> float:
    env = job_env(shape, parallelism, bundle_size)
    spans = new_spans(workdir, f"ceiling-{shape}-{parallelism}")
    return noop_ceiling(env, record_stream(env, records, to_record), spans, shape, records)


def sink_job(
    records: int,
    parallelism: int,
    index: bool,
    workdir: str,
    bundle_size: int | None,
    skip_commits: bool = False,
    shape: str = "own chain",
) -> float:
    table = create_table(index)
    spans = new_spans(workdir, f"sink{parallelism}-{shape}{'-nocommit' if skip_commits else ''}")
    sink = (
        SpannerSink.builder()
        .set_database(destination())
        .set_serializer(ToMutation(table))
        .set_writer_options(
            SpannerWriterOptions.builder().max_mutations_per_commit(MAX_MUTATIONS).build()
        )
        .set_chain_with_upstream(shape == "fused")
        .build()
    )
    timed = timed_factory(TimedFactory, sink.writer_factory, spans)
    timed.skip_commits = skip_commits
    timed.emulator_pids = tuple(EMULATOR_PIDS)
    sink._config.factory = timed
    env = job_env(shape, parallelism, bundle_size)
    record_stream(env, records, to_record).sink_to(sink)
    env.execute(f"bench-spanner-sink-p{parallelism}")
    assert count_rows(table) == (0 if skip_commits else records)
    rate = span_rate(spans, records)
    what = f"sink, {shape}, p={parallelism}{', commits skipped' if skip_commits else ''}"
    print(f"{what}: {rate:,.0f}/s   {describe(span_cpu(spans, records))}", flush=True)
    if not skip_commits:
        print(f"{'':>6}{commit_busy(spans, records)}", flush=True)
    return rate


def commit_busy(path: str, records: int) -> str:
    """How much of each subtask's span its committer spent in commit calls, and the commit
    calls' time per 1,000 rows: a committer busy all the time is bound by the commits'
    latency (the emulator runs one transaction at a time), not by the job."""
    with open(path) as f:
        spans = [json.loads(line) for line in f]
    busy = [s["commit_seconds"] / (s["end"] - s["start"]) for s in spans]
    seconds = sum(s["commit_seconds"] for s in spans)
    commits = sum(s["commits"] for s in spans)
    return (
        f"committers busy {', '.join(f'{b:.0%}' for b in busy)} of their spans; "
        f"{commits} commits, {1000 * seconds / records * 1000:.1f} ms per 1,000 rows"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Spanner sink benchmark")
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--index", action="store_true", help="give the table a secondary index")
    parser.add_argument(
        "--job-bound",
        action="store_true",
        help="also run the sink jobs with commits skipped (what the job allows the sink)",
    )
    parser.add_argument(
        "--bundle-size",
        type=int,
        default=FUSED_BUNDLE,
        help="the jobs' python.fn-execution.bundle.size in every shape (0: PyFlink's default "
        f"of 1,000 in the own chain, {FUSED_BUNDLE:,} fused)",
    )
    args = parser.parse_args(argv)
    bundle_size = args.bundle_size or None
    warnings.filterwarnings("ignore")
    results: dict[str, float] = {}
    with spanner_emulator() as stack, tempfile.TemporaryDirectory() as workdir:
        if stack is not None:
            EMULATOR_PIDS[:] = [p.pid for p in stack.processes.values()]
        warm_up()
        results["raw client (before)"] = raw_client(args.records, args.index)
        for shape in SHAPES:
            for p in (1, 2):
                ceiling = pyflink_ceiling(args.records, workdir, shape, p, bundle_size)
                results[f"pyflink {shape} p={p}"] = ceiling
                print(f"pyflink ceiling, {shape}, p={p}: {ceiling:,.0f}/s", flush=True)
                sink = sink_job(args.records, p, args.index, workdir, bundle_size, shape=shape)
                results[f"sink {shape} p={p}"] = sink
                if args.job_bound:
                    bound = sink_job(
                        args.records,
                        p,
                        args.index,
                        workdir,
                        bundle_size,
                        skip_commits=True,
                        shape=shape,
                    )
                    results[f"job bound {shape} p={p}"] = bound
        # Once more at the end: on a machine shared with other work the emulator's speed
        # drifts, and the baseline is the mean of the two.
        results["raw client (after)"] = raw_client(args.records, args.index)

    raw = (results["raw client (before)"] + results["raw client (after)"]) / 2
    print(
        f"\n{args.records:,} records per run{', indexed table' if args.index else ''}, "
        + (
            f"job bundle size {args.bundle_size:,} "
            if args.bundle_size
            else f"job bundle size 1,000 own chain, {FUSED_BUNDLE:,} fused "
        )
        + "(records/s, ratios to the ceilings of the same shape and parallelism)"
    )
    print(
        f"{'shape':>9}  {'p':>1}  {'sink':>9}  {'raw':>9}  {'pyflink':>9}  {'/raw':>5}  "
        f"{'/pyflink':>8}  {'/lower':>6}  target"
    )
    ok = True
    for shape in SHAPES:
        for p in (1, 2):
            sink = results[f"sink {shape} p={p}"]
            ceiling = results[f"pyflink {shape} p={p}"]
            lower = min(raw, ceiling)
            met = sink / lower >= TARGET
            ok = ok and met
            print(
                f"{shape:>9}  {p:>1}  {sink:>9,.0f}  {raw:>9,.0f}  {ceiling:>9,.0f}  "
                f"{sink / raw:>5.2f}  {sink / ceiling:>8.2f}  {sink / lower:>6.2f}  "
                f"{'met' if met else 'MISSED'} (>= {TARGET})"
            )
            skipped = results.get(f"job bound {shape} p={p}")
            if skipped:
                print(
                    f"{'':>14}commits skipped: {skipped:,.0f}/s ({skipped / raw:.2f} of raw); "
                    f"the sink reaches {sink / skipped:.2f} of it"
                )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
