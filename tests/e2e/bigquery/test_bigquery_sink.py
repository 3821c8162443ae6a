"""BigQuerySink inside real PyFlink MiniCluster jobs, read back from the emulator with queries."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.cloud.bigquery import SchemaField
from pyflink.common.watermark_strategy import TimestampAssigner, WatermarkStrategy

from pyflink_gcp import FailureHandler, UnroutableRecord
from pyflink_gcp.bigquery import (
    BigQuerySerializer,
    BigQuerySink,
    BigQueryWriterOptions,
    CreateDisposition,
    OrderingMode,
    TableDestination,
    TableSchema,
)
from pyflink_gcp.bigquery.batch import ARROW_MIN_ROWS
from pyflink_gcp.pubsub import PubSubDeadLetterQueue, TopicDestination
from tests.integration.bigquery.support import (
    FileAppendRecorder,
    make_dataset,
    query,
    read_events,
    table_names,
)
from tests.support.jobs import FailOnce, make_env, record_stream
from tests.support.pubsub import make_topics, pull_all, unique
from tests.support.restore import Failover

pytestmark = pytest.mark.e2e

TENANTS = ("acme", "globex", "initech", "umbrella")
START = datetime(2024, 3, 1, tzinfo=UTC)
DAYS = 9
BAD_ID = 1234  # its amount overflows NUMERIC: the service rejects it

ORDERS = TableSchema.of(
    [
        SchemaField("order_id", "INT64", mode="REQUIRED"),
        SchemaField("tenant", "STRING"),
        SchemaField("amount", "NUMERIC"),
        SchemaField("event_time", "TIMESTAMP"),
        SchemaField("source", "STRING"),
    ]
)


def order(i: int) -> dict[str, Any]:
    """Order ``i``: an unknown tenant every 97th, an event on one of nine days."""
    event = START + timedelta(days=i % DAYS, seconds=i)
    return {
        "id": i,
        "tenant": "unknown-co" if i % 97 == 5 else TENANTS[i % len(TENANTS)],
        "event_ms": int(event.timestamp() * 1000),
        "amount": "1" + "0" * 40 if i == BAD_ID else f"{i}.50",
        # The day a record without an event timestamp is filed under.
        "fallback_day": event.strftime("%Y%m%d"),
    }


def with_wrong_fallback(i: int) -> dict[str, Any]:
    """Records that get an event timestamp: their fallback must not be used."""
    time.sleep(0.002)  # slow enough that checkpoints complete before the injected failure
    record = order(i)
    record["fallback_day"] = "19991231"
    record["source"] = "event-time"
    return record


def without_timestamp(i: int) -> dict[str, Any]:
    record = order(i)
    record["source"] = "fallback"
    return record


class EventTime(TimestampAssigner):
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return int(value["event_ms"])


class DailyTables:
    """``orders_YYYYMMDD`` of the record's event time (else its ``fallback_day``); unknown
    tenants are unroutable."""

    def __init__(self, project: str, dataset: str) -> None:
        self.project = project
        self.dataset = dataset

    def resolve(self, record: dict[str, Any], context: Any) -> Any:
        if record["tenant"] not in TENANTS:
            return UnroutableRecord.of(
                json.dumps(record).encode(), f"unknown tenant {record['tenant']}"
            )
        if context.timestamp is not None:
            day = datetime.fromtimestamp(context.timestamp / 1000, UTC).strftime("%Y%m%d")
        else:
            day = record["fallback_day"]
        return TableDestination.of(self.project, self.dataset, f"orders_{day}")


def to_row(record: dict[str, Any], context: Any) -> dict[str, Any]:
    return {
        "order_id": record["id"],
        "tenant": record["tenant"],
        "amount": record["amount"],
        "event_time": record["event_ms"] * 1000,
        "source": record["source"],
    }


def orders_sink(project: str, dataset: str, handler: FailureHandler, **kw: Any) -> BigQuerySink:
    return (
        BigQuerySink.builder()
        .set_sink_name(kw.pop("name", "orders-sink"))
        .set_destination_resolver(DailyTables(project, dataset))
        .set_serializer(BigQuerySerializer.of(to_row, schema=ORDERS))
        .set_create_disposition(kw.pop("disposition", CreateDisposition.CREATE_IF_NEEDED))
        .set_failure_handler(handler)
        .build()
    )


def test_daily_tables_dead_letters_and_a_restart_lose_nothing(project: str, tmp_path: Any) -> None:
    """The flagship job: event-time routing with a fallback to a record field, tables created on
    demand, unroutable records and a rejected row dead-lettered to Pub/Sub, and an injected
    failure after checkpoints: every row in its table, 0 lost."""
    dataset = make_dataset(project, "daily")
    dlq_topic = unique("orders-dlq")
    make_topics(project, [dlq_topic])
    n_timed, n_untimed = 2400, 600
    marker = str(tmp_path / "failed")

    failover = Failover(tmp_path / "failover")
    env = make_env(parallelism=2, checkpoint_ms=500, extra=failover.conf())
    timed = record_stream(
        env, n_timed, with_wrong_fallback, name="timed"
    ).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(EventTime())
    )
    untimed = record_stream(
        env, n_untimed, lambda i: without_timestamp(n_timed + i), name="untimed"
    )
    sink = orders_sink(
        project,
        dataset,
        FailureHandler.send_to_dead_letter_queue(
            PubSubDeadLetterQueue.of(TopicDestination.of(project, dlq_topic))
        ),
    )
    timed.union(untimed).map(
        FailOnce(marker, lambda r: r["id"] == 1100, after_checkpoint=failover.checkpoints)
    ).sink_to(sink)
    env.execute("bigquery-daily-tables")
    assert os.path.exists(marker), "the failure was not injected"
    failover.assert_restored()

    everything = [
        {**order(i), "source": "event-time" if i < n_timed else "fallback"}
        for i in range(n_timed + n_untimed)
    ]
    routable = [r for r in everything if r["tenant"] in TENANTS]
    unroutable = [r for r in everything if r["tenant"] not in TENANTS]

    tables = table_names(project, dataset)
    expected_tables = sorted({f"orders_{r['fallback_day']}" for r in routable})
    assert tables == expected_tables and len(tables) >= 7
    seen: Counter[int] = Counter()
    for table in tables:
        for row in query(
            project, f"SELECT order_id, source, event_time FROM `{project}.{dataset}.{table}`"
        ):
            seen[row["order_id"]] += 1
            # Event time when there was one, else the fallback field (both name the same day
            # here, but the event-time records carry a wrong fallback, so no row can sit in a
            # table it was not routed to by the right rule).
            assert table == "orders_" + row["event_time"].strftime("%Y%m%d"), (table, row)
    expected_ids = {r["id"] for r in routable} - {BAD_ID}
    assert set(seen) == expected_ids, f"lost {sorted(expected_ids - set(seen))[:10]}"
    assert "orders_19991231" not in tables

    letters = pull_all(project, dlq_topic, expect=len(unroutable) + 1)
    unresolved = [m for m in letters if m.attributes["dlq-destination"] == "unresolved"]
    assert {json.loads(m.data)["id"] for m in unresolved} == {r["id"] for r in unroutable}
    assert all(m.attributes["dlq-reason"] == "unknown tenant unknown-co" for m in unresolved)
    assert all(m.attributes["dlq-sink"] == "orders-sink" for m in letters)
    rejected = [m for m in letters if m.attributes["dlq-destination"] != "unresolved"]
    assert {json.loads(m.data)["order_id"] for m in rejected} == {BAD_ID}
    bad_day = order(BAD_ID)["fallback_day"]
    assert rejected[0].attributes["dlq-destination"] == (
        f"projects/{project}/datasets/{dataset}/tables/orders_{bad_day}"
    )
    duplicates = sum(c - 1 for c in seen.values())
    print(
        f"daily tables: {len(expected_ids)} rows in {len(tables)} tables, 0 lost, {duplicates} duplicates"
    )


def test_unroutable_record_fails_the_job_by_default(project: str) -> None:
    dataset = make_dataset(project, "fail")
    sink = orders_sink(project, dataset, FailureHandler.fail_job(), name="strict-orders")
    env = make_env(parallelism=1, checkpoint_ms=None, restarts=0)
    record_stream(env, 10, without_timestamp).filter(lambda r: r["id"] == 5).sink_to(sink)
    with pytest.raises(Exception) as err:
        env.execute("bigquery-unroutable-fails")
    text = str(err.value)
    assert "RecordRejectedError: sink 'strict-orders': destination 'unresolved' rejected" in text
    assert "unknown tenant unknown-co (failure handler: fail_job)" in text


def test_create_never_on_a_missing_table_fails_naming_the_table(project: str) -> None:
    dataset = make_dataset(project, "never")
    sink = orders_sink(
        project, dataset, FailureHandler.log_and_drop(), disposition=CreateDisposition.CREATE_NEVER
    )
    env = make_env(parallelism=1, checkpoint_ms=None, restarts=0)
    record_stream(env, 3, without_timestamp).sink_to(sink)
    with pytest.raises(Exception) as err:
        env.execute("bigquery-create-never")
    day = order(0)["fallback_day"]
    assert (
        f"DestinationNotFoundError: sink 'orders-sink': table {project}.{dataset}.orders_{day} "
        "does not exist and the create disposition is CREATE_NEVER"
    ) in str(err.value)


CDC = TableSchema.of(
    [
        SchemaField("account", "STRING"),
        SchemaField("opened", "TIMESTAMP"),
        SchemaField("balance", "NUMERIC"),
        SchemaField("version", "INT64"),
    ],
    primary_key=["account", "opened"],
)
OPENED = datetime(2024, 1, 1, tzinfo=UTC)


def change(i: int) -> dict[str, Any]:
    """Changes to 40 accounts over 4 tables; the key's TIMESTAMP is spelled three ways."""
    account = i % 40
    opened = [OPENED.isoformat(), int(OPENED.timestamp() * 1_000_000), "2024-01-01 00:00:00 UTC"]
    return {
        "region": f"r{account % 4}" if i % 50 != 49 else "nowhere",
        "account": f"a{account}",
        "opened": opened[i % 3],
        "balance": f"{i}.10",
        "version": i,
        "_CHANGE_TYPE": "DELETE" if i % 11 == 0 else "UPSERT",
    }


class AccountTables:
    def __init__(self, project: str, dataset: str) -> None:
        self.project = project
        self.dataset = dataset

    def resolve(self, record: dict[str, Any], context: Any) -> Any:
        if record["region"] == "nowhere":
            return UnroutableRecord.of(b"x", "no region")
        return TableDestination.of(self.project, self.dataset, f"accounts_{record['region']}")


def test_per_table_cdc_job_one_request_in_flight_and_keys_unique_per_request(
    project: str, tmp_path: Any
) -> None:
    """A keyed CDC job with PER_TABLE ordering, observed at the gRPC boundary; unroutable
    records are logged and dropped."""
    dataset = make_dataset(project, "cdc")
    log = str(tmp_path / "appends.jsonl")
    sink = (
        BigQuerySink.builder()
        .set_destination_resolver(AccountTables(project, dataset))
        .set_serializer(
            BigQuerySerializer.of(
                lambda r, c: {k: v for k, v in r.items() if k != "region"}, schema=CDC
            )
        )
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_ordering_mode(OrderingMode.PER_TABLE)
        .set_failure_handler(FailureHandler.log_and_drop())
        # One shared AppendRows connection per subtask: its tables' requests interleave on it.
        .set_writer_options(BigQueryWriterOptions.builder().channel_count(1).build())
        .build()
    )
    sink._sink_config().factory.interceptors = FileAppendRecorder(log).interceptors()
    n = 2000
    env = make_env(parallelism=2)
    record_stream(env, n, change).key_by(lambda r: r["account"]).sink_to(sink)
    env.execute("bigquery-cdc-per-table")

    events = read_events(log)
    sends = [e for e in events if e["kind"] == "send"]
    assert sum(len(e["rows"]) for e in sends) >= n - n // 50
    streams: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for e in events:
        streams.setdefault((e["recorder"], e["table"]), []).append(e)
    for key, stream in streams.items():
        stream.sort(key=lambda e: e["seq"])
        assert [e["kind"] for e in stream] == ["send", "recv"] * (len(stream) // 2), key
    tables_per_connection: dict[tuple[str, int], set[str]] = {}
    for e in sends:
        tables_per_connection.setdefault((e["recorder"], e["connection"]), set()).add(e["table"])
    assert max(len(t) for t in tables_per_connection.values()) > 1, tables_per_connection
    for e in sends:
        keys = [(r["account"], r["opened"]) for r in e["rows"]]
        assert len(keys) == len(set(keys)), "a CDC request holds one key twice"
    # Three spellings of one instant are one key: at most one change per account per request.
    assert all(len({r["account"] for r in e["rows"]}) == len(e["rows"]) for e in sends)

    total = 0
    for t in table_names(project, dataset):
        rows = query(project, f"SELECT account, opened FROM `{project}.{dataset}.{t}`")
        assert {r["opened"] for r in rows} == {OPENED}
        total += len(rows)
    # The emulator ignores CDC semantics and appends every change.
    assert total >= n - n // 50


PLAIN = TableSchema.of(
    [
        SchemaField("id", "INT64", mode="REQUIRED"),
        SchemaField("tenant", "STRING"),
        SchemaField("amount", "FLOAT64"),
        SchemaField("at", "TIMESTAMP"),
    ]
)


class ByTenant:
    def __init__(self, project: str, dataset: str) -> None:
        self.project = project
        self.dataset = dataset

    def resolve(self, record: dict[str, Any], context: Any) -> TableDestination:
        return TableDestination.of(self.project, self.dataset, f"t_{record['tenant']}")


def plain_record(i: int) -> dict[str, Any]:
    time.sleep(0.001)  # slow enough that checkpoints complete before the injected failure
    return {"id": i, "tenant": TENANTS[i % len(TENANTS)], "amount": i / 2, "at": i * 1000}


def test_writer_fused_into_the_upstream_operator_loses_nothing_when_its_worker_dies(
    project: str, tmp_path: Any
) -> None:
    """``set_chain_with_upstream()``: the preceding Python map runs inside the writer's operator
    (its bundles follow the writer's thresholds, and it waits at the checkpoint markers). Killing the worker process
    (no close, no flush) after checkpoints must lose nothing. The rows are plain scalars, so
    they travel as Arrow record batches."""
    dataset = make_dataset(project, "fused")
    marker = str(tmp_path / "killed")
    log = str(tmp_path / "appends.jsonl")
    n = 3000
    sink = (
        BigQuerySink.builder()
        .set_sink_name("fused-sink")
        .set_destination_resolver(ByTenant(project, dataset))
        .set_serializer(BigQuerySerializer.of(lambda r: dict(r), schema=PLAIN))
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        # At most 400 records wait in open batches: sent along the way, whatever the
        # checkpoints' timing.
        .set_writer_options(BigQueryWriterOptions.builder().max_buffered_records(400).build())
        .set_chain_with_upstream()
        .build()
    )
    sink._sink_config().factory.interceptors = FileAppendRecorder(log).interceptors()
    failover = Failover(tmp_path / "failover")
    env = make_env(parallelism=2, checkpoint_ms=300, process_workers=True, extra=failover.conf())
    record_stream(env, n, plain_record).map(
        FailOnce(
            marker, lambda r: r["id"] == 2000, hard=True, after_checkpoint=failover.checkpoints
        )
    ).sink_to(sink)
    env.execute("bigquery-fused-writer")
    assert os.path.exists(marker), "the worker was not killed"
    failover.assert_restored()

    seen: Counter[int] = Counter()
    for tenant in TENANTS:
        for row in query(project, f"SELECT id, tenant FROM `{project}.{dataset}.t_{tenant}`"):
            assert row["tenant"] == tenant
            seen[row["id"]] += 1
    assert set(seen) == set(range(n)), f"lost {sorted(set(range(n)) - set(seen))[:10]}"
    sends = [e for e in read_events(log) if e["kind"] == "send"]
    # Arrow, but for requests of a few rows (a checkpoint's tail), which go as protobuf rows.
    assert sends and all(e["format"] == "arrow" for e in sends if len(e["rows"]) >= ARROW_MIN_ROWS)
    assert any(e["format"] == "arrow" for e in sends)
    # Sent in pieces along the way, not in one piece at the end.
    assert len(sends) >= n / 400
