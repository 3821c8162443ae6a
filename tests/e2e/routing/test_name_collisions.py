"""Sanitized names in a real job: two tenants whose values sanitize to one BigQuery table id
(``acme/eu`` and ``acme_eu``) are never merged. The job routes by ``orders_{tenant}`` with
``bigquery_tables(..., sanitize=True)``, the stream keyed by the sanitized tenant so that both
values reach one subtask (the collision check is per subtask); the tenant seen first fills
``orders_acme_eu``, every record of the other reaches the failure handler (a dead-letter file)
with a reason naming both values and the name, and a third tenant is routed as usual. The same
through a SQL connector with ``'name.sanitize' = 'true'``, the failure handler a dead-letter
topic."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest
from pyflink.common import Types

from pyflink_gcp import FailureHandler
from pyflink_gcp.routing import bigquery_tables, names, route_by_template
from tests.support.dead_letters import FileDeadLetterQueue
from tests.support.jobs import make_env, record_stream
from tests.support.pubsub import make_topics, pull_all, unique
from tests.support.tables import make_table_env

pytestmark = pytest.mark.e2e

TENANTS = ("acme/eu", "globex", "acme_eu")


def row(i: int) -> dict[str, Any]:
    return {"id": i, "tenant": TENANTS[i % 3]}


def sanitized_tenant(record: dict[str, Any]) -> str:
    return names.bigquery_table_id.sanitize(record["tenant"])


def test_tenants_that_sanitize_to_one_table_are_never_merged(project: str, tmp_path: Any) -> None:
    from google.cloud.bigquery import SchemaField

    from pyflink_gcp.bigquery import (
        BigQuerySerializer,
        BigQuerySink,
        CreateDisposition,
        TableSchema,
    )
    from tests.integration.bigquery.support import ids_by_table, make_dataset

    count = 900
    dataset = make_dataset(project, "collide")
    dead = str(tmp_path / "dead.jsonl")
    schema = TableSchema.of([SchemaField("id", "INT64"), SchemaField("tenant", "STRING")])
    sink = (
        BigQuerySink.builder()
        .set_sink_name("colliding-tenants")
        .set_destination_resolver(
            route_by_template(
                "orders_{tenant}",
                bigquery_tables(project, dataset, sanitize=True),
                unroutable=True,
                fields=("id", "tenant"),
            )
        )
        .set_serializer(
            BigQuerySerializer.of(lambda r: {"id": r["id"], "tenant": r["tenant"]}, schema=schema)
        )
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_failure_handler(FailureHandler.send_to_dead_letter_queue(FileDeadLetterQueue(dead)))
        .build()
    )
    env = make_env(parallelism=2, checkpoint_ms=500)
    record_stream(env, count, row).key_by(sanitized_tenant, key_type=Types.STRING()).sink_to(sink)
    env.execute("colliding tenants")

    by_tenant = {t: {i for i in range(count) if TENANTS[i % 3] == t} for t in TENANTS}
    tables = ids_by_table(project, dataset)
    assert sorted(tables) == ["orders_acme_eu", "orders_globex"]
    assert set(tables["orders_globex"]) == by_tenant["globex"]
    in_table = set(tables["orders_acme_eu"])
    assert max(tables["orders_acme_eu"].values()) == 1
    # One tenant's records, all of them, and none of the other's: nothing merged.
    winner = next(t for t in ("acme/eu", "acme_eu") if in_table == by_tenant[t])
    loser = "acme_eu" if winner == "acme/eu" else "acme/eu"

    letters = FileDeadLetterQueue(dead).read()
    dead_ids = Counter(int(re.findall(r"'id': (\d+)", d["reason"])[-1]) for d in letters)
    assert set(dead_ids) == by_tenant[loser] and max(dead_ids.values()) == 1
    reason = (
        f"placeholder {{tenant}}: the values {winner!r} and {loser!r} both sanitize to "
        f"'acme_eu', so both would be 'orders_acme_eu'; {winner!r}, seen first, keeps it"
    )
    assert all(reason in d["reason"] for d in letters), letters[0]["reason"]


def test_a_sql_table_with_name_sanitize_dead_letters_the_colliding_value(project: str) -> None:
    prefix = unique("collide")
    dead_letters = unique("collide-dlq")
    make_topics(project, [f"{prefix}-eu_west", f"{prefix}-us", dead_letters])
    rows = [(1, "eu/west"), (2, "eu_west"), (3, "us"), (4, "eu/west"), (5, "eu_west")]
    t_env = make_table_env(parallelism=1)
    t_env.execute_sql(
        "CREATE TEMPORARY TABLE events (id BIGINT, region STRING) WITH ("
        f"'connector' = 'gcp-pubsub', 'project' = '{project}', 'topic' = '{prefix}-{{region}}', "
        "'name.sanitize' = 'true', 'failure-handler' = 'dead-letter', "
        f"'dead-letter.topic' = 'projects/{project}/topics/{dead_letters}')"
    )
    values = ", ".join(f"({i}, '{region}')" for i, region in rows)
    t_env.execute_sql(f"INSERT INTO events VALUES {values}").wait()

    # One source, one subtask, rows in order: 'eu/west' is seen first and keeps the topic.
    routed = pull_all(project, f"{prefix}-eu_west", expect=2)
    assert sorted(json.loads(m.data)["id"] for m in routed) == [1, 4]
    assert [json.loads(m.data)["id"] for m in pull_all(project, f"{prefix}-us", expect=1)] == [3]
    letters = pull_all(project, dead_letters, expect=2)
    assert sorted(json.loads(m.data)["id"] for m in letters) == [2, 5]
    for message in letters:
        assert message.attributes["dlq-destination"] == "unresolved"
        assert (
            "placeholder {region}: the values 'eu/west' and 'eu_west' both sanitize to "
            f"'eu_west', so both would be '{prefix}-eu_west'"
        ) in message.attributes["dlq-reason"]
