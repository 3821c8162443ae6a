"""The ``gcp-bigquery`` SQL connector in MiniCluster jobs, read back from the emulator.

One job writes through a DDL table and a ``TableDescriptor`` table (a statement set), both
with templates over a column and the event time, into tables the sink creates from the DDL's
columns; a TIMESTAMP(6) column keeps its microseconds.

ROW and MAP columns (RECORD and repeated RECORD columns) are left out: the BigQuery emulator
fails every Storage Write API append to a table with a RECORD column ("Attempted to convert a
STRUCT with no fields to DuckDB"), whichever sink sends it; their schema mapping is unit-tested
(tests/unit/table/test_bigquery.py), and nested timestamps travel in the Pub/Sub test.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from pyflink.table import DataTypes, Schema, TableDescriptor

from pyflink_gcp.bigquery.rows import bq_type
from tests.integration.bigquery.support import (
    bq_client,
    make_dataset,
    query,
    read_events,
    table_names,
)
from tests.support.tables import make_table_env, planning_error

pytestmark = pytest.mark.e2e

TENANTS = ("acme", "globex", "initech")
ROWS = [
    (i, TENANTS[i % 3], f"{i}.25", f"2024-03-0{1 + i % 2} 12:00:00.{123001 + i:06d}")
    for i in range(12)
]
COLUMNS = (
    "order_id BIGINT NOT NULL, tenant STRING, amount DECIMAL(12, 2), event_time TIMESTAMP(6), "
    "tags ARRAY<STRING>, born DATE, flag BOOLEAN"
)


def _values() -> str:
    rows = []
    for i, tenant, amount, at in ROWS:
        rows.append(
            f"({i}, '{tenant}', CAST({amount} AS DECIMAL(12, 2)), TIMESTAMP '{at}', "
            f"ARRAY['t{i}', 'x'], DATE '2000-01-0{1 + i % 9}', {str(i % 2 == 0).upper()})"
        )
    return ", ".join(rows)


def _expected(tenant: str, day: str) -> list[tuple[int, str, Decimal, datetime]]:
    return [
        (i, tenant, Decimal(amount), datetime.fromisoformat(at).replace(tzinfo=UTC))
        for i, t, amount, at in ROWS
        if t == tenant and at.startswith(day)
    ]


def test_ddl_and_descriptor_tables_create_their_template_tables_with_microseconds(
    project: str,
) -> None:
    sql_dataset, desc_dataset = make_dataset(project, "sql"), make_dataset(project, "desc")
    t_env = make_table_env()
    t_env.execute_sql(
        f"""CREATE TEMPORARY TABLE orders_out ({COLUMNS}) WITH (
            'connector' = 'gcp-bigquery', 'project' = '{project}', 'dataset' = '{sql_dataset}',
            'table' = 'orders_{{tenant}}_{{event_time:%Y%m%d}}')"""
    )
    schema = (
        Schema.new_builder()
        .column("order_id", DataTypes.BIGINT().not_null())
        .column("tenant", DataTypes.STRING())
        .column("amount", DataTypes.DECIMAL(12, 2))
        .column("event_time", DataTypes.TIMESTAMP(6))
        .column("tags", DataTypes.ARRAY(DataTypes.STRING()))
        .column("born", DataTypes.DATE())
        .column("flag", DataTypes.BOOLEAN())
        .build()
    )
    t_env.create_temporary_table(
        "described",
        TableDescriptor.for_connector("gcp-bigquery")
        .schema(schema)
        .option("project", project)
        .option("dataset", desc_dataset)
        .option("table", "t_{tenant}")
        .option("sink.max-created-destinations", "3")
        .build(),
    )
    statements = t_env.create_statement_set()
    statements.add_insert_sql(f"INSERT INTO orders_out VALUES {_values()}")
    statements.add_insert_sql(f"INSERT INTO described VALUES {_values()}")
    statements.execute().wait()

    days = ("20240301", "20240302")
    assert table_names(project, sql_dataset) == sorted(
        f"orders_{t}_{d}" for t in TENANTS for d in days
    )
    for tenant in TENANTS:
        for day in days:
            rows = query(
                project,
                f"SELECT order_id, tenant, amount, event_time FROM "
                f"`{project}.{sql_dataset}.orders_{tenant}_{day}` ORDER BY order_id",
            )
            iso = f"2024-03-{day[-2:]}"
            got = [(r["order_id"], r["tenant"], r["amount"], r["event_time"]) for r in rows]
            assert got == _expected(tenant, iso), (tenant, day)
            assert all(r["event_time"].microsecond % 1000 for r in rows)  # below milliseconds

    table = bq_client(project).get_table(f"{project}.{desc_dataset}.t_acme")
    assert [(f.name, bq_type(f), f.mode) for f in table.schema] == [
        ("order_id", "INT64", "REQUIRED"),
        ("tenant", "STRING", "NULLABLE"),
        ("amount", "NUMERIC", "NULLABLE"),
        ("event_time", "TIMESTAMP", "NULLABLE"),
        ("tags", "STRING", "REPEATED"),
        ("born", "DATE", "NULLABLE"),
        ("flag", "BOOL", "NULLABLE"),
    ]
    rows = query(project, f"SELECT * FROM `{project}.{desc_dataset}.t_acme` ORDER BY order_id")
    assert [r["order_id"] for r in rows] == [i for i, t, _, _ in ROWS if t == "acme"]
    first = rows[0]
    assert first["tags"] == [f"t{first['order_id']}", "x"]
    assert first["born"] == date(2000, 1, 1 + first["order_id"] % 9)
    assert first["flag"] is (first["order_id"] % 2 == 0)
    assert first["event_time"] == _expected("acme", "2024-03-01")[0][3]


def test_mistakes_fail_at_planning_with_exact_messages() -> None:
    t_env = make_table_env()

    def table(name: str, **options: str) -> None:
        values = {"connector": "gcp-bigquery", "project": "p", "dataset": "d", **options}
        listed = ", ".join(f"'{k}' = '{v}'" for k, v in values.items())
        t_env.execute_sql(
            f"CREATE TEMPORARY TABLE {name} (id BIGINT, tenant STRING) WITH ({listed})"
        )

    insert = "INSERT INTO {} VALUES (1, 'acme')"
    table("missing_table")
    assert "Missing required options are:\n\ntable\n" in planning_error(
        t_env, insert.format("missing_table")
    )
    table("unknown_key", table="t", **{"write_method": "x"})
    assert "Unsupported options:\n\nwrite_method\n" in planning_error(
        t_env, insert.format("unknown_key")
    )
    table("bad_disposition", table="t", **{"create-disposition": "sometimes"})
    assert (
        "Invalid value for option 'create-disposition' of connector 'gcp-bigquery': expected "
        "one of create-if-needed, create-never, got 'sometimes'.\n"
    ) in planning_error(t_env, insert.format("bad_disposition"))
    table("bad_placeholder", table="t_{customer.id}")
    assert (
        "Unknown placeholder '{customer.id}' in option 'table' of connector 'gcp-bigquery': "
        "'customer' is neither a column of the table (id, tenant) nor event_time or "
        "processing_time.\n"
    ) in planning_error(t_env, insert.format("bad_placeholder"))
    table("updates", table="t_{tenant}")
    assert "doesn't support consuming update changes" in planning_error(
        t_env,
        "INSERT INTO updates SELECT COUNT(*), tenant FROM (VALUES (1, 'a')) AS v(id, tenant) "
        "GROUP BY tenant",
    )


# Where each account is, in order: accounts move between regions, and "north" ends up empty.
MOVES = [(1, "north"), (2, "north"), (3, "south"), (1, "south"), (4, "east"), (2, "east")]
# Loaded by the job's Python workers (their PYTHONPATH holds python.files): the gcp-bigquery
# adapter's sinks record every AppendRows request they send, as the DataStream CDC tests do.
# Quiet: PyFlink reads the output of one of these processes (its runner script's path).
RECORDING_HOOK = """
import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import pyflink_gcp.table.bigquery as adapter
    from tests.integration.bigquery.support import FileAppendRecorder

_build = adapter.build_sink


def _recording(values, table):
    sink = _build(values, table)
    sink._sink_config().factory.interceptors = FileAppendRecorder({log!r}).interceptors()
    return sink


adapter.build_sink = _recording
"""


def test_a_changelog_into_a_table_with_a_primary_key_sends_upserts_and_deletes(
    project: str, tmp_path
) -> None:
    """What the sink sent converges to the aggregate. The emulator ignores the CDC
    pseudo-columns and primary keys (it appends every change as a row), so the changes are
    read where they leave the sink: the AppendRows requests."""
    dataset = make_dataset(project, "cdc")
    log = tmp_path / "appends.jsonl"
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(RECORDING_HOOK.format(log=str(log)))
    t_env = make_table_env()
    t_env.add_python_file(str(hook))
    t_env.execute_sql(
        f"""CREATE TEMPORARY TABLE per_region (region STRING NOT NULL, accounts BIGINT,
            PRIMARY KEY (region) NOT ENFORCED) WITH ('connector' = 'gcp-bigquery',
            'project' = '{project}', 'dataset' = '{dataset}', 'table' = 'regions')"""
    )
    moves = ", ".join(f"({i}, {n}, '{r}')" for n, (i, r) in enumerate(MOVES))
    t_env.execute_sql(
        f"""INSERT INTO per_region
            SELECT region, COUNT(*) FROM (
                SELECT account, LAST_VALUE(region) AS region
                FROM (VALUES {moves}) AS m(account, seq, region) GROUP BY account)
            GROUP BY region"""
    ).wait()

    sends = [e for e in read_events(str(log)) if e["kind"] == "send"]
    assert sends, "the hook recorded nothing"
    state: dict[str, int] = {}
    kinds: dict[str, list[str]] = {}
    # One region's changes come from one subtask (the planner partitions by the key), whose
    # requests the recorder numbers in the order they went out.
    for event in sorted(sends, key=lambda e: (e["recorder"], e["seq"])):
        for row in event["rows"]:
            kinds.setdefault(row["region"], []).append(row["_CHANGE_TYPE"])
            if row["_CHANGE_TYPE"] == "DELETE":
                state.pop(row["region"])
            else:
                state[row["region"]] = row["accounts"]
    assert state == {"south": 2, "east": 2}
    assert kinds["north"][-1] == "DELETE" and set(kinds["north"][:-1]) == {"UPSERT"}
    assert set(kinds["south"]) == set(kinds["east"]) == {"UPSERT"}
    table = bq_client(project).get_table(f"{project}.{dataset}.regions")
    assert [(f.name, f.mode) for f in table.schema] == [
        ("region", "REQUIRED"),
        ("accounts", "NULLABLE"),
    ]
    # The emulator appended every change, deletes included, as a plain row.
    rows = query(project, f"SELECT region FROM `{project}.{dataset}.regions`")
    assert len(rows) == sum(len(k) for k in kinds.values())


def test_the_exactly_once_write_methods_commit_every_row_once(project: str, tmp_path) -> None:
    """buffered-stream and file-loads: the Java sink runs the bridge's committer after the
    writer, which publishes each checkpoint's rows after it completed."""
    buffered, loaded = make_dataset(project, "buffered"), make_dataset(project, "loaded")
    t_env = make_table_env(checkpoint_ms=500)
    columns = "order_id BIGINT NOT NULL, tenant STRING, event_time TIMESTAMP(6)"
    common = f"'connector' = 'gcp-bigquery', 'project' = '{project}'"
    t_env.execute_sql(
        f"""CREATE TEMPORARY TABLE buffered ({columns}) WITH ({common},
            'dataset' = '{buffered}', 'table' = 'orders_{{tenant}}',
            'write-method' = 'buffered-stream')"""
    )
    t_env.execute_sql(
        f"""CREATE TEMPORARY TABLE loaded ({columns}) WITH ({common},
            'dataset' = '{loaded}', 'table' = 'orders_{{tenant}}', 'write-method' = 'file-loads',
            'file-loads.staging-location' = 'file://{tmp_path / "stage"}',
            'file-loads.min-load-interval' = '0ms')"""
    )
    t_env.execute_sql(
        "CREATE TEMPORARY TABLE ids (order_id BIGINT) WITH ('connector' = 'datagen', "
        "'rows-per-second' = '300', 'number-of-rows' = '900', 'fields.order_id.kind' = "
        "'sequence', 'fields.order_id.start' = '0', 'fields.order_id.end' = '899')"
    )
    select = (
        "SELECT order_id, CASE MOD(order_id, 3) WHEN 0 THEN 'acme' WHEN 1 THEN 'globex' "
        "ELSE 'initech' END, TIMESTAMP '2024-03-01 12:00:00.123456' FROM ids"
    )
    statements = t_env.create_statement_set()
    statements.add_insert_sql(f"INSERT INTO buffered {select}")
    statements.add_insert_sql(f"INSERT INTO loaded {select}")
    statements.execute().wait()

    for dataset in (buffered, loaded):
        assert table_names(project, dataset) == [f"orders_{t}" for t in TENANTS]
        for n, tenant in enumerate(TENANTS):
            rows = query(
                project, f"SELECT order_id, event_time FROM `{project}.{dataset}.orders_{tenant}`"
            )
            assert sorted(r["order_id"] for r in rows) == list(range(n, 900, 3)), dataset
            assert {r["event_time"].microsecond for r in rows} == {123456}
