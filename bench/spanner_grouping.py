"""Spanner grouping: commits per record, rows per commit and records/s, grouping off and on.

    python bench/spanner_grouping.py [--records 200000] [--tables 4] [--latency-ms 5]
        [--split-keys 1000] [--parallelism 1]

Runs the same PyFlink job (a number source, a record map, ``SpannerSink`` at ``--parallelism``,
checkpoints every 5 s) against the null backend once per variant, in one run:

- ``off``: the default options (``grouping_factor`` 1): commits in arrival order, sealed by
  the budget or early when the committer is idle (group commit).
- ``on``: ``grouping_factor(100)``, the default commit limits.
- ``on, Beam's limits``: ``grouping_factor(1000)`` with Apache Beam ``SpannerIO``'s default
  batch limits: 500 rows, 5,000 mutations, 1 MB per commit.

Every variant runs with ``max_buffer_time`` 5 s, so that bundle ends do not cut the group
short; the checkpoint flush then sorts and commits whatever the group holds. Record ``i``
writes key ``i * 7919 mod records`` (every key once, in scattered order) of table
``t<key mod tables>``.

The commits are counted by the null backend, which answers each Commit after ``--latency-ms``
and counts the rows of every table (the run fails unless every record was counted). What
grouping is for, fewer Spanner splits per commit, the backend cannot show: the writer counts,
for each commit it makes, the distinct (table, key // ``--split-keys``) among its rows, as if
every table were split every ``--split-keys`` keys. Throughput is timed inside the job (the
subtask's first record to its last flush). Figures from a machine shared with other work vary
from run to run: compare ratios from the same run only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from datetime import timedelta
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import (
    SpanTimedFactory,
    new_spans,
    shaped_env,
    span_rate,
    span_total,
    timed_factory,
    warm_up,
)
from bench._nullbackend import running
from pyflink_gcp.core import FailureHandler
from pyflink_gcp.spanner import DatabaseDestination, Mutation, SpannerSink, SpannerWriterOptions
from pyflink_gcp.spanner.grouping import GroupingSpannerWriter
from pyflink_gcp.spanner.writer import SpannerWriter, SpannerWriterFactory
from tests.support.jobs import record_stream

PROJECT, INSTANCE = "bench-project", "bench-instance"
COMMIT = "/google.spanner.v1.Spanner/Commit"
COLUMNS = [{"name": "id", "type": "INT64"}, {"name": "payload", "type": "STRING(MAX)"}]
PAYLOAD = "p" * 32

#: (name, grouping options) of each variant.
VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("off", {}),
    ("on", {"grouping_factor": 100}),
    (
        "on, Beam's limits",
        {
            "grouping_factor": 1000,
            "max_rows_per_commit": 500,
            "max_mutations_per_commit": 5_000,
            "max_commit_bytes": 1_000_000,
        },
    ),
]


class Scattered:
    """Record ``i``: key ``i * 7919 mod records`` (a permutation when 7919 does not divide
    ``records``) of table ``t<key mod tables>``."""

    def __init__(self, records: int, tables: int) -> None:
        self.records = records
        self.tables = tables

    def __call__(self, record: Any, ctx: Any = None) -> Mutation:
        key = record * 7919 % self.records
        return Mutation.insert_or_update(f"t{key % self.tables}", {"id": key, "payload": PAYLOAD})


class SplitCounting:
    """Writer mixin: per commit it makes, counts the distinct (table, key // split_keys)."""

    split_keys = 1_000
    split_sum = 0
    rows_sum = 0

    def _commit_rpc(self, request: Any, records: int, mutations: int) -> None:
        splits = set()
        rows = 0
        size = self.split_keys
        for m in request.mutations:
            body = m.insert_or_update
            table = body.table
            for row in body.values:
                splits.add((table, int(row.values[0].string_value) // size))
            rows += len(body.values)
        super()._commit_rpc(request, records, mutations)  # type: ignore[misc]
        self.split_sum += len(splits)
        self.rows_sum += rows


class CountingWriter(SplitCounting, SpannerWriter):
    pass


class CountingGroupingWriter(SplitCounting, GroupingSpannerWriter):
    pass


class CountingFactory(SpannerWriterFactory):
    """Makes counting writers (grouping or not, as the options say)."""

    spans_path = ""
    split_keys = 1_000
    _config_fields = (*SpannerWriterFactory._config_fields, "spans_path", "split_keys")
    _writer: Any = None

    def create_writer(self, destination: Any, writer_type: Any = None) -> SpannerWriter:
        kind = CountingGroupingWriter if self.options.grouping else CountingWriter
        writer = super().create_writer(destination, writer_type or kind)
        writer.split_keys = self.split_keys  # type: ignore[attr-defined]
        self._writer = writer
        return writer


class TimedCountingFactory(SpanTimedFactory, CountingFactory):  # type: ignore[misc]
    _config_fields = CountingFactory._config_fields

    def span_counts(self) -> dict[str, int]:
        w = self._writer
        if w is None:
            return {}
        return {"commits": w.commits, "splits": w.split_sum, "rows": w.rows_sum}


def run_variant(
    backend: Any, args: argparse.Namespace, name: str, grouping: dict[str, Any], workdir: str
) -> dict[str, Any]:
    backend.reset()
    options = SpannerWriterOptions.builder().max_buffer_time(timedelta(seconds=5))
    for setter, value in grouping.items():
        options = getattr(options, setter)(value)
    sink = (
        SpannerSink.builder()
        .set_database(DatabaseDestination.of(PROJECT, INSTANCE, "bench"))
        .set_serializer(Scattered(args.records, args.tables))
        .set_writer_options(options.build())
        .set_failure_handler(FailureHandler.log_and_drop())
        .build()
    )
    spans = new_spans(workdir, f"grouping-{len(grouping)}")
    factory = timed_factory(TimedCountingFactory, sink.writer_factory, spans)
    factory.split_keys = args.split_keys
    sink._config.factory = factory
    env = shaped_env(
        "own chain",
        args.parallelism,
        100_000,
        checkpoint_ms=5_000,
        bundle_size=100_000,
    )
    record_stream(env, args.records, int).sink_to(sink)
    env.execute(f"bench-spanner-grouping-{name}")
    counts = backend.counts()
    counted = sum(counts["records"].get("spanner", {}).values())
    if counted != args.records:
        raise RuntimeError(f"{name}: the backend counted {counted:,} rows of {args.records:,}")
    commits = counts["calls"].get(COMMIT, 0)
    return {
        "name": name,
        "rate": span_rate(spans, args.records),
        "commits": commits,
        "splits": span_total(spans, "splits"),
        "writer_commits": span_total(spans, "commits"),
    }


def report(results: list[dict[str, Any]], records: int) -> str:
    base = results[0]
    lines = [
        "| variant | records/s | commits | commits per 1,000 records | rows per commit "
        "| splits per commit | records/s vs off | commits vs off | splits per commit vs off |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        per_commit = r["splits"] / max(r["writer_commits"], 1)
        base_per_commit = base["splits"] / max(base["writer_commits"], 1)
        lines.append(
            f"| {r['name']} | {r['rate']:,.0f} | {r['commits']:,} | "
            f"{1000 * r['commits'] / records:.2f} | {records / max(r['commits'], 1):,.0f} | "
            f"{per_commit:.1f} | {r['rate'] / base['rate']:.2f} | "
            f"{r['commits'] / max(base['commits'], 1):.2f} | {per_commit / base_per_commit:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--latency-ms", type=float, default=5.0)
    parser.add_argument("--split-keys", type=int, default=1_000)
    parser.add_argument("--parallelism", type=int, default=1)
    args = parser.parse_args(argv)
    if args.records % 7919 == 0:
        parser.error("--records must not be a multiple of 7919 (keys would repeat)")
    with running(args.latency_ms) as backend, tempfile.TemporaryDirectory() as workdir:
        backend.configure(
            latency_ms=args.latency_ms,
            spanner={
                "tables": [f"t{t}" for t in range(args.tables)],
                "columns": COLUMNS,
                "key": ["id"],
            },
        )
        warm_up()
        results = [run_variant(backend, args, name, g, workdir) for name, g in VARIANTS]
    print(
        f"\n{args.records:,} records over {args.tables} tables, parallelism {args.parallelism}, "
        f"commit latency {args.latency_ms:g} ms, a split every {args.split_keys:,} keys\n"
    )
    print(report(results, args.records))
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
