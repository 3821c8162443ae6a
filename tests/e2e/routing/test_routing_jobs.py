"""The routing helpers in real jobs: field routing with a fallback on Pub/Sub, a name template on
BigQuery, and live rules changing destinations mid-job (and surviving a restore), each read back
from the emulators."""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import pytest
from pyflink.common import Duration, WatermarkStrategy
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream.connectors.file_system import FileSource, StreamFormat
from pyflink.datastream.functions import MapFunction

from pyflink_gcp.pubsub import PubSubSerializationSchema, PubSubSink, TopicDestination
from pyflink_gcp.routing import (
    LiveRules,
    bigquery_tables,
    pubsub_topics,
    route_by_field,
    route_by_template,
)
from tests.support.jobs import FailOnce, make_env, pause, record_stream
from tests.support.pubsub import make_topics, pull_all, unique
from tests.support.restore import Failover

pytestmark = pytest.mark.e2e

REGIONS = ["eu", "us", "pl", None]


def order(i: int) -> bytes:
    """A JSON payload; every 50th is not JSON, the region is missing every fourth."""
    if i % 50 == 49:
        return b"not json " + str(i).encode()
    doc: dict[str, Any] = {"id": i, "note": "x" * 100}
    region = REGIONS[i % 4]
    if region is not None:
        doc["region"] = region
    return json.dumps(doc).encode()


def raw_sink(name: str, resolver: Any) -> PubSubSink:
    return (
        PubSubSink.builder()
        .set_sink_name(name)
        .set_destination_resolver(resolver)
        .set_serializer(PubSubSerializationSchema.payload(lambda r: r))
        .build()
    )


def pulled_ids(
    project: str, topic: str, expect: int | None = None, quiet_s: float = 1.5
) -> list[int]:
    ids = []
    for message in pull_all(project, topic, expect=expect, timeout_s=60, quiet_s=quiet_s):
        try:
            ids.append(json.loads(message.data)["id"])
        except ValueError:
            ids.append(int(message.data.split()[-1]))
    return ids


def test_field_routing_sends_unmatched_missing_and_unparseable_records_to_the_fallback(
    project: str,
) -> None:
    count = 2_000
    prefix = unique("field")
    topics = {name: f"{prefix}-{name}" for name in ("eu", "us", "other")}
    make_topics(project, list(topics.values()))
    resolver = route_by_field(
        "region",
        {r: TopicDestination.of(project, topics[r]) for r in ("eu", "us")},
        fallback=TopicDestination.of(project, topics["other"]),
    )
    env = make_env(parallelism=2, checkpoint_ms=500)
    record_stream(env, count, order).sink_to(raw_sink("field-routing", resolver))
    env.execute("field routing")

    expected: dict[str, set[int]] = defaultdict(set)
    for i in range(count):
        region = REGIONS[i % 4] if i % 50 != 49 else None
        expected[region if region in ("eu", "us") else "other"].add(i)
    for name, topic in topics.items():
        ids = pulled_ids(project, topic, expect=len(expected[name]))
        assert set(ids) == expected[name], name


class EventTime(TimestampAssigner):
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return int(value["at"])


def test_a_template_routes_rows_to_tables_by_tenant_and_event_day(project: str) -> None:
    from google.cloud.bigquery import SchemaField

    from pyflink_gcp.bigquery import (
        BigQuerySerializer,
        BigQuerySink,
        CreateDisposition,
        TableSchema,
    )
    from tests.integration.bigquery.support import ids_by_table, make_dataset

    count = 1_200
    dataset = make_dataset(project, "template")
    start = int(datetime(2024, 5, 1, tzinfo=UTC).timestamp() * 1000)
    schema = TableSchema.of([SchemaField("id", "INT64"), SchemaField("tenant", "STRING")])

    def row(i: int) -> dict[str, Any]:
        # Three tenants (one with a space, which sanitizing replaces) over two days.
        return {"id": i, "tenant": ("acme", "globex", "ini tech")[i % 3], "at": start + i * 144_000}

    sink = (
        BigQuerySink.builder()
        .set_sink_name("template-routing")
        .set_destination_resolver(
            route_by_template(
                "orders_{tenant}_{event_time:%Y%m%d}",
                bigquery_tables(project, dataset, sanitize=True),
                fields=("id", "tenant", "at"),
            )
        )
        .set_serializer(
            BigQuerySerializer.of(lambda r: {"id": r["id"], "tenant": r["tenant"]}, schema=schema)
        )
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .build()
    )
    env = make_env(parallelism=2, checkpoint_ms=500)
    stream = record_stream(env, count, row).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(EventTime())
    )
    stream.sink_to(sink)
    env.execute("template routing")

    tables = ids_by_table(project, dataset)
    day = lambda i: "20240501" if start + i * 144_000 < start + 86_400_000 else "20240502"  # noqa: E731
    expected: dict[str, set[int]] = defaultdict(set)
    for i in range(count):
        tenant = ("acme", "globex", "ini_tech")[i % 3]
        expected[f"orders_{tenant}_{day(i)}"].add(i)
    assert sorted(tables) == sorted(expected)
    for table, ids in tables.items():
        assert set(ids) == expected[table] and max(ids.values()) == 1, table


class WriteRulesAt(MapFunction):
    """Writes a rule change file into the watched directory when a record's id passes, once,
    and paces the records so that checkpoints and the file source's scans happen between, until
    the file ``until`` (the injected failure's marker) exists."""

    def __init__(self, directory: str, changes: dict[int, str], until: str) -> None:
        self._directory = directory
        self._changes = changes
        self._until = until

    def map(self, value: bytes) -> bytes:
        i = int(json.loads(value)["id"]) if value.startswith(b"{") else -1
        change = self._changes.get(i)
        if change is not None:
            path = os.path.join(self._directory, f"change-{i}.jsonl")
            if not os.path.exists(path):
                partial = os.path.join(self._directory, f".change-{i}.tmp")
                with open(partial, "w") as f:
                    f.write(change + "\n")
                os.replace(partial, path)
        pause(0.004, self._until)
        return value


def live_order(i: int) -> bytes:
    return json.dumps({"id": i, "region": ("eu", "us", "pl")[i % 3]}).encode()


def test_live_rules_change_destinations_mid_job_and_survive_a_restore(
    project: str, tmp_path: Any
) -> None:
    count = 2_400
    first, second, fail_at = 300, 900, 1_800
    prefix = unique("live")
    names = {k: f"{prefix}-{k}" for k in ("eu", "eu2", "us", "other")}
    make_topics(project, list(names.values()))
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    live = LiveRules(
        "region",
        pubsub_topics(project),
        initial={"eu": names["eu"], "us": names["us"]},
        fallback=TopicDestination.of(project, names["other"]),
    )
    changes = {
        first: json.dumps({"value": "eu", "destination": names["eu2"]}),
        second: json.dumps({"value": "us", "destination": None}),
    }
    failover = Failover(tmp_path / "failover")
    env = make_env(parallelism=1, checkpoint_ms=300, restarts=5, extra=failover.conf())
    records = (
        record_stream(env, count, live_order, parallelism=1)
        .map(WriteRulesAt(str(rules_dir), changes, until=str(tmp_path / "failed")))
        .map(
            FailOnce(
                str(tmp_path / "failed"),
                lambda r: b'"id": %d,' % fail_at in r,
                after_checkpoint=failover.checkpoints,
            )
        )
    )
    rule_source = (
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(rules_dir))
        .monitor_continuously(Duration.of_millis(100))
        .build()
    )
    rule_changes = env.from_source(rule_source, WatermarkStrategy.no_watermarks(), "rule files")
    live.apply(records, rule_changes).sink_to(raw_sink("live-routing", live.resolver()))
    client = env.execute_async("live rules")
    try:
        # The rule source never ends: wait until every record arrived somewhere, then cancel.
        # Each round drains the four topics without waiting for them to go quiet: a topic
        # still written to is drained again in the next round.
        seen: dict[str, list[int]] = {k: [] for k in names}
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            for key, topic in names.items():
                seen[key] += pulled_ids(project, topic, quiet_s=0.2)
            if len({i for ids in seen.values() for i in ids}) == count:
                break
            time.sleep(0.3)
    finally:
        client.cancel().result()

    assert os.path.exists(tmp_path / "failed"), "the injected failure did not happen"
    failover.assert_restored()
    everything = {i for ids in seen.values() for i in ids}
    assert everything == set(range(count))  # nothing lost (duplicates are allowed: at least once)
    eu_old, eu_new = set(seen["eu"]), set(seen["eu2"])
    us_kept, fallback = set(seen["us"]), set(seen["other"])
    # Record by record: each value switches once, from the old rule to the new one.
    assert eu_old and eu_new and max(eu_old) < min(eu_new), (max(eu_old), min(eu_new))
    assert eu_old | eu_new == {i for i in range(count) if i % 3 == 0}
    us_deleted = {i for i in fallback if i % 3 == 1}
    assert us_kept and us_deleted and max(us_kept) < min(us_deleted)
    assert {i for i in fallback if i % 3 == 2} == {i for i in range(count) if i % 3 == 2}
    # The changes were applied after they were written, and the restore kept them: records
    # after the failure follow the changed rules although the rule files are not read again.
    assert min(eu_new) > first and min(us_deleted) > second
    assert max(eu_old) < fail_at and max(us_kept) < fail_at
    print(
        f"live rules: eu switched at id {min(eu_new)} (written at {first}), us deleted at "
        f"{min(us_deleted)} (written at {second}); failure at {fail_at}"
    )
