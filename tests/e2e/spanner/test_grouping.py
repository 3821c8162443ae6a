"""SpannerSink with grouping on, in a real PyFlink job against the emulator, read back with SQL."""

from __future__ import annotations

import os
from datetime import timedelta
from functools import partial
from typing import Any

import pytest

from pyflink_gcp.spanner import SpannerSink, SpannerWriterOptions
from tests.e2e.spanner.grouping_helpers import (
    KEYS,
    REWRITES,
    LoggingGroupingFactory,
    ThreeTables,
    by_key,
    key_of,
    to_record,
)
from tests.integration.spanner.support import create_tables, destination, query, unique
from tests.support.jobs import FailOnce, make_env, pause, record_stream
from tests.support.jsonl import read_json_lines
from tests.support.restore import Failover

pytestmark = pytest.mark.e2e

ROWS_PER_COMMIT = 20
FACTOR = 5


def slow_record(i: int, until: str | None = None) -> dict[str, Any]:
    """Records ~1 ms apart, so that checkpoints complete along the way: several before the
    failure at record 5,000; unpaced once the file ``until`` (its marker) exists."""
    pause(0.001, until)
    return to_record(i)


def test_grouped_commits_over_three_tables_lose_nothing_across_a_failure(
    stack: Any, tmp_path: Any
) -> None:
    a, b, c = unique("GrpA"), unique("GrpB"), unique("GrpC")
    create_tables(
        [
            f"CREATE TABLE {a} (id INT64 NOT NULL, k INT64, version INT64) PRIMARY KEY (id)",
            f"CREATE TABLE {b} (region STRING(8) NOT NULL, num INT64 NOT NULL, k INT64, "
            "version INT64) PRIMARY KEY (region, num)",
            f"CREATE INDEX {b}_ByK ON {b}(k)",
            f"CREATE TABLE {c} (name STRING(16) NOT NULL, k INT64, version INT64) "
            "PRIMARY KEY (name)",
        ]
    )
    log, marker = str(tmp_path / "commits"), str(tmp_path / "failed")
    sink = (
        SpannerSink.builder()
        .set_database(destination())
        .set_serializer(ThreeTables([a, b, c]))
        .set_writer_options(
            SpannerWriterOptions.builder()
            .grouping_factor(FACTOR)
            .max_rows_per_commit(ROWS_PER_COMMIT)
            .max_commit_delay(timedelta(milliseconds=10))
            .max_buffer_time(timedelta(seconds=5))
            .build()
        )
        .build()
    )
    sink._config.factory = LoggingGroupingFactory.replacing(sink.writer_factory, log)
    failover = Failover(tmp_path / "failover")
    env = make_env(
        parallelism=2,
        checkpoint_ms=1000,
        extra={"python.fn-execution.bundle.size": "50", **failover.conf()},
    )
    n = KEYS + REWRITES
    # One reader and one failing map, so that one key's records reach its subtask in order.
    failing = FailOnce(marker, lambda r: r["i"] == 5_000, after_checkpoint=failover.checkpoints)
    (
        record_stream(env, n, partial(slow_record, until=marker), parallelism=1)
        .map(failing)
        .set_parallelism(1)
        .key_by(by_key)
        .sink_to(sink)
    )
    env.execute("spanner-e2e-grouping")
    failover.assert_restored()
    assert os.path.exists(marker)

    # Every key's last mutation won: rewritten keys hold version 2, deleted ones are gone.
    deleted = {key_of(j) for j in range(REWRITES) if j % 4 == 0}
    rewritten = {key_of(j) for j in range(REWRITES)} - deleted
    want = {k: 2 if k in rewritten else 1 for k in range(KEYS) if k not in deleted}
    got: dict[int, int] = {}
    for table in (a, b, c):
        for k, version in query(f"SELECT k, version FROM {table}"):
            assert k not in got
            got[k] = version
    assert got == want
    assert {k for (k,) in query(f"SELECT k FROM {b}")} == {k for k in want if k % 3 == 1}

    # Every commit held at most ROWS_PER_COMMIT rows, sorted by table and then key.
    def sort_key(row: list[Any]) -> tuple[Any, ...]:
        table, key = row
        return (table, key[0], int(key[1])) if table == b else (table, *key[:1])

    commits = [e["rows"] for e in read_json_lines(log)]
    assert commits and max(len(rows) for rows in commits) <= ROWS_PER_COMMIT
    for rows in commits:
        typed = [[t, [int(k[0])] if t == a else k] for t, k in rows]
        assert typed == sorted(typed, key=sort_key)
    full = sum(1 for rows in commits if len(rows) == ROWS_PER_COMMIT)
    assert full >= len(commits) // 2  # groups filled up and were cut by the row limit
    tables = [{t for t, _ in rows} for rows in commits]
    print(
        f"\nspanner grouping e2e: {len(commits)} commits, {full} full, "
        f"{sum(len(t) for t in tables) / len(tables):.2f} tables per commit"
    )
