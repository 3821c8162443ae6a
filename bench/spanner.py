"""Spanner sink throughput against its two ceilings, measured in one run on the same input.

    python bench/spanner.py [--records 30000] [--index] [--job-bound]

Measured against the same emulator, with the same rows, each run into a fresh table:

- **raw client**: google-cloud-spanner's own ``database.batch()`` committing the same
  insert-or-update mutations from a plain Python loop, outside Flink, in commits of the same
  size as the sink's: what the emulator allows without Flink. Measured first and last; the
  baseline is the mean of the two.
- **PyFlink ceiling**: the same source and record map into a Python process function that does
  nothing, in the sink's job shape and at the sink's parallelism: what a Python operator allows
  on this machine. Two shapes: ``own chain`` (the default: the writer starts an operator chain
  of its own, so records cross the JVM once more after the map) and ``fused``
  (``set_chain_with_upstream()``: PyFlink fuses the writer into the map; the job's bundle size
  is then raised to the sink's ``flush_max_records``, since the writer flushes at the map's
  bundle ends).
- **sink**: the same job with ``SpannerSink`` (checkpoints every second), at parallelism 1 and
  2. The emulator runs one transaction at a time and aborts the others, so at parallelism 2
  the subtasks' commits take turns (each abort is retried).

With ``--job-bound``, each sink job runs once more with commits skipped (rows encoded and
batched, nothing sent): the most the job shape allows the sink on this machine, whatever Spanner
does.

Job throughput is timed inside the job (each subtask's first record to its final flush), so
job start-up is not counted. Ratios are against the lower of the two ceilings; the target is
0.8. Starts a Spanner emulator unless ``SPANNER_EMULATOR_HOST`` is set. Figures from a machine
shared with other work vary from run to run: compare ratios from the same run only.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
import warnings
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


from bench._common import (  # noqa: E402
    log_span,
    new_spans,
    noop_ceiling,
    shaped_env,
    span_rate,
    warm_up,
)
from pyflink_gcp.core import SubtaskInfo  # noqa: E402
from pyflink_gcp.emulators import emulators_for  # noqa: E402
from pyflink_gcp.spanner import (  # noqa: E402
    DatabaseDestination,
    Mutation,
    SpannerSink,
    SpannerWriterOptions,
)
from pyflink_gcp.spanner.writer import SpannerWriter, SpannerWriterFactory  # noqa: E402
from tests.support.jobs import record_stream  # noqa: E402

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
    """Notes the first record and the end of each flush that committed something."""

    spans_path = ""
    first: float | None = None
    last: float | None = None

    def write(self, element: Any, record: Any) -> None:
        if self.first is None:
            self.first = time.time()
        super().write(element, record)

    def flush(self) -> list[Any]:
        failures = super().flush()
        self.last = time.time()
        return failures

    def close(self) -> None:
        if self.first is not None and self.last is not None:
            log_span(self.spans_path, self.first, self.last)
        super().close()


class TimedFactory(SpannerWriterFactory):
    spans_path = ""
    #: Encode and batch as usual but never send a commit: the sink job's own ceiling.
    skip_commits = False

    def __getstate__(self) -> dict[str, Any]:
        return {
            **super().__getstate__(),
            "spans_path": self.spans_path,
            "skip_commits": self.skip_commits,
        }

    def commit(self, request: Any, what: str) -> None:
        if not self.skip_commits:
            super().commit(request, what)

    def create_writer(self, destination: DatabaseDestination) -> SpannerWriter:
        writer = TimedWriter(destination, self)
        writer.spans_path = self.spans_path
        return writer


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
    assert count_rows(table) == records
    return records / elapsed


SHAPES = ("own chain", "fused")
#: The sink's flush_max_records: the job's bundle size in the fused shape.
FUSED_BUNDLE = SpannerWriterOptions().flush_max_records


def pyflink_ceiling(records: int, workdir: str, shape: str, parallelism: int) -> float:
    env = shaped_env(shape, parallelism, FUSED_BUNDLE)
    spans = new_spans(workdir, f"ceiling-{shape}-{parallelism}")
    return noop_ceiling(env, record_stream(env, records, to_record), spans, shape, records)


def sink_job(
    records: int,
    parallelism: int,
    index: bool,
    workdir: str,
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
    timed = TimedFactory.__new__(TimedFactory)
    timed.__setstate__(
        {**sink.writer_factory.__getstate__(), "spans_path": spans, "skip_commits": skip_commits}
    )
    sink._config.factory = timed
    env = shaped_env(shape, parallelism, FUSED_BUNDLE)
    record_stream(env, records, to_record).sink_to(sink)
    env.execute(f"bench-spanner-sink-p{parallelism}")
    assert count_rows(table) == (0 if skip_commits else records)
    return span_rate(spans, records)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Spanner sink benchmark")
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--index", action="store_true", help="give the table a secondary index")
    parser.add_argument(
        "--job-bound",
        action="store_true",
        help="also run the sink jobs with commits skipped (what the job allows the sink)",
    )
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    results: dict[str, float] = {}
    with spanner_emulator(), tempfile.TemporaryDirectory() as workdir:
        warm_up()
        results["raw client (before)"] = raw_client(args.records, args.index)
        print(f"raw client: {results['raw client (before)']:,.0f}/s", flush=True)
        for shape in SHAPES:
            for p in (1, 2):
                ceiling = pyflink_ceiling(args.records, workdir, shape, p)
                results[f"pyflink {shape} p={p}"] = ceiling
                print(f"pyflink ceiling, {shape}, p={p}: {ceiling:,.0f}/s", flush=True)
                sink = sink_job(args.records, p, args.index, workdir, shape=shape)
                results[f"sink {shape} p={p}"] = sink
                print(f"sink, {shape}, p={p}: {sink:,.0f}/s", flush=True)
                if args.job_bound:
                    bound = sink_job(
                        args.records, p, args.index, workdir, skip_commits=True, shape=shape
                    )
                    results[f"job bound {shape} p={p}"] = bound
                    print(f"sink, {shape}, p={p}, commits skipped: {bound:,.0f}/s", flush=True)
        # Once more at the end: on a machine shared with other work the emulator's speed
        # drifts, and the baseline is the mean of the two.
        results["raw client (after)"] = raw_client(args.records, args.index)
        print(f"raw client: {results['raw client (after)']:,.0f}/s", flush=True)

    raw = (results["raw client (before)"] + results["raw client (after)"]) / 2
    print(
        f"\n{args.records:,} records per run{', indexed table' if args.index else ''} "
        "(records/s, ratios to the ceilings of the same shape and parallelism)"
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
            bound = results.get(f"job bound {shape} p={p}")
            if bound:
                print(
                    f"{'':>14}commits skipped: {bound:,.0f}/s ({bound / raw:.2f} of raw); "
                    f"the sink reaches {sink / bound:.2f} of it"
                )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
