"""The ``gcp-cloudtasks`` SQL connector in a MiniCluster job: tasks the emulator dispatches to
the receiver.

One job writes through a DDL table (JSON bodies, a queue template and a URL template, headers
and task ids from columns) and a ``TableDescriptor`` table (raw bodies, PUT, headers from a MAP
column) at once; the planning test submits nothing.
"""

from __future__ import annotations

import json

import pytest
from pyflink.table import DataTypes, Schema, TableDescriptor

from tests.integration.cloudtasks.support import (
    LOCATION,
    create_queues,
    suffix,
    wait_for_dispatches,
)
from tests.support.tables import make_table_env, planning_error

pytestmark = pytest.mark.e2e

TENANTS = ("acme", "globex", "initech")
ROWS = [(i, TENANTS[i % 3], f"order {i}") for i in range(9)]
VALUES = ", ".join(
    f"({i}, '{t}', 'task-{i}', CAST('{b}' AS BYTES), MAP['x-order', '{i}'])" for i, t, b in ROWS
)
COLUMNS = "id BIGINT, tenant STRING, task STRING, body BYTES, meta MAP<STRING, STRING>"


def test_ddl_and_descriptor_tables_create_tasks_on_their_template_queues(stack) -> None:
    run = suffix()
    queues = [f"sql-{run}-{t}" for t in TENANTS] + [f"desc-{run}-{t}" for t in TENANTS]
    create_queues(stack, queues)
    base = stack.receiver_url
    t_env = make_table_env()
    t_env.execute_sql(
        f"""CREATE TEMPORARY TABLE hooks ({COLUMNS}) WITH (
            'connector' = 'gcp-cloudtasks', 'project' = '{stack.project}',
            'location' = '{LOCATION}', 'queue' = 'sql-{run}-{{tenant}}',
            'url' = '{base}/sql/{run}/{{tenant}}/orders?id={{id}}',
            'headers.columns' = 'tenant', 'task-id.column' = 'task')"""
    )
    schema = (
        Schema.new_builder()
        .column("id", DataTypes.BIGINT())
        .column("tenant", DataTypes.STRING())
        .column("task", DataTypes.STRING())
        .column("body", DataTypes.BYTES())
        .column("meta", DataTypes.MAP(DataTypes.STRING(), DataTypes.STRING()))
        .build()
    )
    t_env.create_temporary_table(
        "described",
        TableDescriptor.for_connector("gcp-cloudtasks")
        .schema(schema)
        .option("project", stack.project)
        .option("location", LOCATION)
        .option("queue", f"desc-{run}-{{tenant}}")
        .option("url", f"{base}/desc/{run}/{{id}}")
        .option("http-method", "PUT")
        .option("body.format", "raw")
        .option("body.column", "body")
        .option("content-type", "text/plain")
        .option("headers.map-column", "meta")
        .build(),
    )
    statements = t_env.create_statement_set()
    statements.add_insert_sql(f"INSERT INTO hooks VALUES {VALUES}")
    statements.add_insert_sql(f"INSERT INTO described VALUES {VALUES}")
    statements.execute().wait()

    sql = wait_for_dispatches(stack, f"/sql/{run}/", len(ROWS))
    assert sorted(r["path"] for r in sql) == sorted(
        f"/sql/{run}/{t}/orders?id={i}" for i, t, _ in ROWS
    )
    for request in sql:
        tenant = request["path"].split("/")[3]
        body = json.loads(request["body"])
        assert body["tenant"] == tenant and body["task"] == f"task-{body['id']}"
        assert body["meta"] == {"x-order": str(body["id"])}
        assert request["method"] == "POST"
        assert request["headers"]["content-type"] == "application/json"
        assert request["headers"]["tenant"] == tenant
        assert request["headers"]["x-cloudtasks-queuename"] == f"sql-{run}-{tenant}"
        assert request["headers"]["x-cloudtasks-taskname"] == f"task-{body['id']}"

    described = wait_for_dispatches(stack, f"/desc/{run}/", len(ROWS))
    assert sorted(r["path"] for r in described) == sorted(f"/desc/{run}/{i}" for i, _, _ in ROWS)
    for request in described:
        i = int(request["path"].rsplit("/", 1)[1])
        assert request["method"] == "PUT"
        assert request["body"] == f"order {i}".encode()
        assert request["headers"]["content-type"] == "text/plain"
        assert request["headers"]["x-order"] == str(i)
        assert request["headers"]["x-cloudtasks-queuename"] == f"desc-{run}-{TENANTS[i % 3]}"


def test_a_missing_required_key_fails_at_planning() -> None:
    t_env = make_table_env()
    t_env.execute_sql(
        "CREATE TEMPORARY TABLE no_url (id BIGINT) WITH ('connector' = 'gcp-cloudtasks', "
        "'project' = 'p', 'location' = 'l', 'queue' = 'q')"
    )
    assert (
        "ValidationException: One or more required options are missing.\n\n"
        "Missing required options are:\n\nurl"
    ) in planning_error(t_env, "INSERT INTO no_url VALUES (1)")
