"""SpannerSink inside real PyFlink MiniCluster jobs, read back from the emulator with SQL."""

from __future__ import annotations

import os
from collections import Counter
from datetime import timedelta
from functools import partial
from typing import Any

import pytest

from pyflink_gcp.core import FailureHandler
from pyflink_gcp.spanner import Mutation, SpannerSink, SpannerWriterOptions
from tests.e2e.spanner.helpers import (
    KINDS,
    SEED,
    EventSerializer,
    RecordingFactory,
    plan,
    slow_record,
)
from tests.integration.spanner.support import create_tables, destination, query, unique
from tests.support.dead_letters import FileDeadLetterQueue
from tests.support.jobs import FailOnce, make_env, record_stream
from tests.support.jsonl import read_json_lines
from tests.support.restore import Failover

pytestmark = pytest.mark.e2e

BUDGET = 100  # mutations per commit: an events row counts 4 columns + 3 for its index


def test_two_tables_deletes_skips_budget_and_a_failure_lose_nothing(
    stack: Any, tmp_path: Any
) -> None:
    events, audit = unique("E2eEvents"), unique("E2eAudit")
    create_tables(
        [
            f"CREATE TABLE {events} (id INT64 NOT NULL, kind STRING(16) NOT NULL, "
            "score FLOAT64, n INT64) PRIMARY KEY (id)",
            f"CREATE INDEX {events}_ByKind ON {events}(kind) STORING (score)",
            f"CREATE TABLE {audit} (id INT64 NOT NULL, who STRING(32)) PRIMARY KEY (id)",
        ]
    )
    # Rows the job deletes by key (records 100..199 delete SEED + i).
    seed = [
        Mutation.insert_or_update(events, {"id": SEED + i, "kind": "seed"}) for i in range(100, 200)
    ]
    _seed_rows(seed)

    log, dead, marker = (str(tmp_path / name) for name in ("commits", "dead", "failed"))
    n = 4_000
    sink = (
        SpannerSink.builder()
        .set_database(destination())
        .set_serializer(EventSerializer(events, audit))
        .set_writer_options(
            SpannerWriterOptions.builder()
            .max_mutations_per_commit(BUDGET)
            .max_buffer_time(timedelta(milliseconds=200))
            .build()
        )
        .set_failure_handler(FailureHandler.send_to_dead_letter_queue(FileDeadLetterQueue(dead)))
        .build()
    )
    sink._config.factory = RecordingFactory.replacing(sink.writer_factory, log)
    # Small bundles upstream, so that the map hands records over (and the sink commits them)
    # between checkpoints too: the restart then replays records that were already committed.
    failover = Failover(tmp_path / "failover")
    env = make_env(
        parallelism=2,
        checkpoint_ms=1000,
        extra={"python.fn-execution.bundle.size": "50", **failover.conf()},
    )
    (
        record_stream(env, n, partial(slow_record, until=marker))
        .map(FailOnce(marker, lambda r: r["i"] == 3_100, after_checkpoint=failover.checkpoints))
        .sink_to(sink)
    )
    env.execute("spanner-e2e-main")
    failover.assert_restored()

    plans = {i: plan(i) for i in range(n)}
    want_events = {i for i, p in plans.items() if p in ("event", "event-and-delete-seed")}
    want_audit = {i for i, p in plans.items() if p == "audit"}
    rows = query(f"SELECT id, kind, score, n FROM {events} WHERE id < {SEED}")
    assert {r[0] for r in rows} == want_events  # 0 lost, nothing extra
    assert all(r[1:] == [KINDS[r[0] % 4], r[0] / 4, r[0]] for r in rows)  # replays converged
    assert {r[0] for r in query(f"SELECT id FROM {audit}")} == want_audit
    remaining_seed = {r[0] - SEED for r in query(f"SELECT id FROM {events} WHERE id >= {SEED}")}
    assert remaining_seed == {i for i in range(100, 200) if plans[i] != "event-and-delete-seed"}

    # Exactly the bad records were dead-lettered (replays may repeat them), with reasons.
    letters = read_json_lines(dead)
    bad = {i for i, p in plans.items() if p in ("wrong-type", "null-kind")}
    assert len(bad) == 4
    assert {int(d["record"].split(": ")[1].rstrip("}")) for d in letters} == bad
    assert all(d["attributes"]["table"] == events for d in letters)
    reasons = " ".join(d["reason"] for d in letters)
    assert "column n (INT64) cannot take float" in reasons
    assert "FAILED_PRECONDITION" in reasons

    # Commits never exceeded the budget as counted with the index, the budget (not only the
    # flushes) cut them, and the index was counted: an events row is 4 columns + 3.
    commits = [e["commit"] for e in read_json_lines(log) if "commit" in e]
    assert max(commits) <= BUDGET
    assert sum(1 for c in commits if c > BUDGET - 2 * 7) >= 2
    cost = {"event": 7, "event-and-delete-seed": 7 + 2, "write-then-delete": 7 + 2, "audit": 2}
    assert sum(commits) >= sum(cost.get(p, 0) for p in plans.values())

    # The restart replayed records from the last checkpoint: count them.
    written = Counter(i for e in read_json_lines(log) if "batch" in e for i in e["batch"])
    expected = {i for i, p in plans.items() if p not in ("skip", "wrong-type")}
    assert set(written) == expected
    duplicates = sum(c - 1 for c in written.values())
    print(f"\nspanner e2e: {len(commits)} commits, {duplicates} records replayed")
    assert os.path.exists(marker)  # the injected failure did happen


@pytest.mark.parametrize(
    ("serializer_kind", "message"),
    [
        ("table", "table 'NoSuchTable' does not exist in Spanner database"),
        ("column", "column(s) 'nope' do not exist in table"),
    ],
)
def test_unknown_table_or_column_fails_the_job_clearly(
    stack: Any, serializer_kind: str, message: str
) -> None:
    table = unique("E2eKnown")
    create_tables([f"CREATE TABLE {table} (id INT64 NOT NULL) PRIMARY KEY (id)"])
    sink = (
        SpannerSink.builder()
        .set_database(destination())
        .set_serializer(UnknownNames(table, serializer_kind))
        .build()
    )
    env = make_env(parallelism=1, checkpoint_ms=None, restarts=0)
    record_stream(env, 20, _identity).sink_to(sink)
    with pytest.raises(Exception) as failure:
        env.execute("spanner-e2e-unknown")
    text = str(failure.value)
    assert message in text
    assert "for record 7" in text


def _identity(i: int) -> int:
    return i


class UnknownNames:
    """Writes record 7 to a table or column that does not exist."""

    def __init__(self, table: str, kind: str) -> None:
        self.table = table
        self.kind = kind

    def serialize(self, record: int, context: Any) -> Mutation:
        if record != 7:
            return Mutation.insert_or_update(self.table, {"id": record})
        if self.kind == "table":
            return Mutation.insert_or_update("NoSuchTable", {"id": record})
        return Mutation.insert_or_update(self.table, {"id": record, "nope": 1})


def _seed_rows(mutations: list[Mutation]) -> None:
    from tests.integration.spanner.support import open_writer

    factory, writer = open_writer()
    try:
        for m in mutations:
            writer.write(m, "seed")
        assert writer.flush() == []
    finally:
        writer.close()
        factory.close()
