"""Field selection in real PyFlink MiniCluster jobs: records routed on a field that is not
written, read back from the emulators.

- BigQuery: orders routed by ``tenant`` into per-tenant tables whose schema has no ``tenant``
  column, with ``drop(["tenant"])``; one stream of dicts (the serializer's default row: the
  record itself) and one of typed Rows, both in the same job. BigQuery's default
  ``UnknownFields.FAIL`` ends the job on a row key that is no column, so a ``tenant`` that
  reached a row would fail it. A third sink of the job writes ``only("order")`` of envelopes,
  some of which have no order or a text in its place: those go to the dead-letter queue.
- Bigtable: users routed by ``tenant`` with ``keep(["id", "name"])`` and a serializer that
  writes every field it gets as a cell: only the kept ones are cells.
- Spanner: the serializer names each mutation's table from ``tenant`` and the selection drops
  it from the mutation's row (per-tenant tables without the column).
- SQL: ``'fields.drop'`` on a ``gcp-bigquery`` table and ``'fields.keep'`` on a
  ``gcp-spanner`` table, in one statement set.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from google.cloud.bigquery import SchemaField
from pyflink.common import Row, Types

from pyflink_gcp import FailureHandler
from pyflink_gcp.bigquery import (
    BigQuerySerializer,
    BigQuerySink,
    CreateDisposition,
    TableDestination,
    TableSchema,
)
from pyflink_gcp.bigtable import BigtableSink, RowMutationEntry, SetCell, TableCreateOptions
from pyflink_gcp.bigtable import TableDestination as BigtableTable
from pyflink_gcp.core.fields import FieldSelection
from pyflink_gcp.spanner import Mutation, SpannerSink
from tests.integration.bigquery.support import bq_client, make_dataset, query, table_names
from tests.integration.bigtable.support import list_tables, read_table
from tests.integration.bigtable.support import unique as bigtable_unique
from tests.integration.spanner.support import create_tables, destination
from tests.integration.spanner.support import query as spanner_query
from tests.integration.spanner.support import unique as spanner_unique
from tests.support.dead_letters import FileDeadLetterQueue
from tests.support.jobs import make_env, record_stream
from tests.support.tables import make_table_env

pytestmark = pytest.mark.e2e

TENANTS = ("acme", "globex", "initech")
N = 90
ORDERS = TableSchema.of(
    [SchemaField("id", "INT64", mode="REQUIRED"), SchemaField("amount", "FLOAT64")]
)


def order(i: int) -> dict[str, Any]:
    return {"id": i, "tenant": TENANTS[i % 3], "amount": i * 1.5}


def order_row(i: int) -> Row:
    return Row(id=i, tenant=TENANTS[i % 3], amount=i * 1.5)


class TenantTables:
    """``<dataset>.orders_<tenant>`` of the record's ``tenant`` (a dict or a Row)."""

    def __init__(self, project: str, dataset: str) -> None:
        self.project = project
        self.dataset = dataset

    def resolve(self, record: Any, context: Any) -> TableDestination:
        return TableDestination.of(self.project, self.dataset, f"orders_{record['tenant']}")


def envelope(i: int) -> dict[str, Any]:
    """An order inside an envelope; every tenth has none, and the one after a text instead."""
    inner: Any = {"id": i, "amount": i * 1.5}
    if i % 10 == 3:
        return {"tenant": TENANTS[i % 3]}
    if i % 10 == 4:
        inner = "not an order"
    return {"tenant": TENANTS[i % 3], "order": inner}


def row_dict(record: Row, context: Any) -> dict[str, Any]:
    return record.as_dict()


def orders_sink(
    project: str,
    dataset: str,
    name: str,
    serializer: Any,
    selection: FieldSelection,
    handler: FailureHandler | None = None,
) -> BigQuerySink:
    return (
        BigQuerySink.builder()
        .set_sink_name(name)
        .set_destination_resolver(TenantTables(project, dataset))
        .set_serializer(serializer)
        .set_field_selection(selection)
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_failure_handler(handler or FailureHandler.fail_job())
        .build()
    )


def test_bigquery_orders_routed_by_tenant_are_written_without_it(
    project: str, tmp_path: Any
) -> None:
    dicts, rows = make_dataset(project, "fs_dicts"), make_dataset(project, "fs_rows")
    only = make_dataset(project, "fs_only")
    dead_letters = FileDeadLetterQueue(str(tmp_path / "dead-letters.jsonl"))
    drop = FieldSelection.drop(["tenant"])
    env = make_env(parallelism=2, checkpoint_ms=500, restarts=0)
    record_stream(env, N, order, name="dicts").sink_to(
        orders_sink(project, dicts, "dict-orders", BigQuerySerializer.of(schema=ORDERS), drop)
    )
    typed = Types.ROW_NAMED(
        ["id", "tenant", "amount"], [Types.LONG(), Types.STRING(), Types.DOUBLE()]
    )
    stream = record_stream(env, N, order_row, name="rows").map(lambda r: r, output_type=typed)
    stream.sink_to(
        orders_sink(project, rows, "row-orders", BigQuerySerializer.of(row_dict, ORDERS), drop)
    )
    record_stream(env, N, envelope, name="envelopes").sink_to(
        orders_sink(
            project,
            only,
            "enveloped-orders",
            BigQuerySerializer.of(schema=ORDERS),
            FieldSelection.only("order"),
            FailureHandler.send_to_dead_letter_queue(dead_letters),
        )
    )
    env.execute("field-selection-bigquery")

    expected_tables = [f"orders_{t}" for t in TENANTS]
    bad = {i for i in range(N) if i % 10 in (3, 4)}
    client = bq_client(project)
    try:
        for tenant in TENANTS:
            got = query(project, f"SELECT id, amount FROM `{project}.{only}.orders_{tenant}`")
            assert sorted((r["id"], r["amount"]) for r in got) == [
                (i, i * 1.5) for i in range(N) if TENANTS[i % 3] == tenant and i not in bad
            ], tenant
        letters = dead_letters.read()
        assert len(letters) == len(bad)
        assert all(d["destination"] == "unresolved" for d in letters)
        reasons = sorted({d["reason"].split(": ", 1)[1] for d in letters})
        assert reasons == [
            "field 'order' holds str ('not an order'), not a record (a dict or a Row with "
            "field names)",
            "the record has no field 'order'",
        ]
        assert all(
            d["reason"].startswith("field selection FieldSelection.only('order') cannot apply")
            for d in letters
        )
        for dataset in (dicts, rows):
            assert table_names(project, dataset) == expected_tables
            for tenant in TENANTS:
                table = client.get_table(f"{project}.{dataset}.orders_{tenant}")
                assert [f.name for f in table.schema] == ["id", "amount"]
                got = query(
                    project, f"SELECT id, amount FROM `{project}.{dataset}.orders_{tenant}`"
                )
                assert sorted((r["id"], r["amount"]) for r in got) == [
                    (i, i * 1.5) for i in range(N) if TENANTS[i % 3] == tenant
                ], (dataset, tenant)
    finally:
        client.close()


class TenantUsers:
    """``users_<tenant>`` of the record's ``tenant`` in the test's instance."""

    def __init__(self, project: str, instance: str) -> None:
        self.project = project
        self.instance = instance

    def resolve(self, record: dict[str, Any], context: Any) -> BigtableTable:
        return BigtableTable.of(self.project, self.instance, f"users_{record['tenant']}")


def every_field_a_cell(record: dict[str, Any], context: Any) -> RowMutationEntry:
    """Every field of the record it gets as a cell of ``cf`` (what the selection left)."""
    cells = [SetCell("cf", k.encode(), str(v).encode(), 1_000) for k, v in record.items()]
    return RowMutationEntry(b"u%03d" % record["id"], cells)


def user(i: int) -> dict[str, Any]:
    return {"id": i, "tenant": TENANTS[i % 3], "name": f"user {i}", "secret": f"pw{i}"}


def test_bigtable_users_routed_by_tenant_keep_only_id_and_name(stack: Any) -> None:
    instance = bigtable_unique("fs-")
    sink = (
        BigtableSink.builder()
        .set_destination_resolver(TenantUsers(stack.project, instance))
        .set_serializer(every_field_a_cell)
        .set_field_selection(FieldSelection.keep(["id", "name"]))
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_table_create_options(TableCreateOptions(column_families={"cf": None}))
        .build()
    )
    env = make_env(parallelism=2, checkpoint_ms=500, restarts=0)
    record_stream(env, N, user).sink_to(sink)
    env.execute("field-selection-bigtable")

    assert sorted(list_tables(instance)) == [f"users_{t}" for t in TENANTS]
    for tenant in TENANTS:
        rows = read_table(instance, f"users_{tenant}")
        ids = [i for i in range(N) if TENANTS[i % 3] == tenant]
        assert sorted(rows) == [b"u%03d" % i for i in ids], tenant
        for i in ids:
            cells = {q: [v for _, v in versions] for (_, q), versions in rows[b"u%03d" % i].items()}
            assert cells == {b"id": [str(i).encode()], b"name": [f"user {i}".encode()]}


class TenantMutations:
    """The Spanner serializer routes: ``<prefix>_<tenant>`` of the record, the whole record as
    the row (the selection removes what is not written)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def __call__(self, record: dict[str, Any], context: Any) -> Mutation:
        return Mutation.insert_or_update(f"{self.prefix}_{record['tenant']}", record)


def test_spanner_rows_routed_by_tenant_are_written_without_it(stack: Any) -> None:
    prefix = spanner_unique("fs")
    create_tables(
        [
            f"CREATE TABLE {prefix}_{t} (id INT64 NOT NULL, amount FLOAT64) PRIMARY KEY (id)"
            for t in TENANTS
        ]
    )
    sink = (
        SpannerSink.builder()
        .set_database(destination())
        .set_serializer(TenantMutations(prefix))
        .set_field_selection(FieldSelection.drop(["tenant"]))
        .set_failure_handler(FailureHandler.fail_job())
        .build()
    )
    env = make_env(parallelism=2, checkpoint_ms=500, restarts=0)
    record_stream(env, N, order).sink_to(sink)
    env.execute("field-selection-spanner")

    for tenant in TENANTS:
        got = spanner_query(f"SELECT id, amount FROM {prefix}_{tenant} ORDER BY id")
        assert got == [[i, i * 1.5] for i in range(N) if TENANTS[i % 3] == tenant], tenant


def test_sql_fields_drop_and_fields_keep(project: str, stack: Any) -> None:
    dataset = make_dataset(project, "fs_sql")
    prefix = spanner_unique("fsql")
    create_tables(
        [
            f"CREATE TABLE {prefix}_{t} (id INT64 NOT NULL, amount FLOAT64) PRIMARY KEY (id)"
            for t in TENANTS
        ]
    )
    t_env = make_table_env()
    columns = "id BIGINT NOT NULL, tenant STRING, amount DOUBLE, note STRING"
    t_env.execute_sql(
        f"""CREATE TEMPORARY TABLE bq_orders ({columns}) WITH (
            'connector' = 'gcp-bigquery', 'project' = '{project}', 'dataset' = '{dataset}',
            'table' = 'orders_{{tenant}}', 'fields.drop' = 'tenant, note')"""
    )
    t_env.execute_sql(
        f"""CREATE TEMPORARY TABLE spanner_orders ({columns}) WITH (
            'connector' = 'gcp-spanner', 'project' = '{stack.project}',
            'instance' = '{os.environ["SPANNER_INSTANCE"]}',
            'database' = '{os.environ["SPANNER_DATABASE"]}',
            'table' = '{prefix}_{{tenant}}', 'fields.keep' = 'id,amount')"""
    )
    values = ", ".join(
        f"({i}, '{TENANTS[i % 3]}', CAST({i * 1.5} AS DOUBLE), 'n{i}')" for i in range(30)
    )
    statements = t_env.create_statement_set()
    statements.add_insert_sql(f"INSERT INTO bq_orders VALUES {values}")
    statements.add_insert_sql(f"INSERT INTO spanner_orders VALUES {values}")
    statements.execute().wait()

    assert table_names(project, dataset) == [f"orders_{t}" for t in TENANTS]
    client = bq_client(project)
    try:
        for tenant in TENANTS:
            expected = [(i, i * 1.5) for i in range(30) if TENANTS[i % 3] == tenant]
            table = client.get_table(f"{project}.{dataset}.orders_{tenant}")
            assert [(f.name, f.mode) for f in table.schema] == [
                ("id", "REQUIRED"),
                ("amount", "NULLABLE"),
            ]
            rows = query(project, f"SELECT * FROM `{project}.{dataset}.orders_{tenant}`")
            assert sorted((r["id"], r["amount"]) for r in rows) == expected, tenant
            assert all(set(r) == {"id", "amount"} for r in rows)
            got = spanner_query(f"SELECT id, amount FROM {prefix}_{tenant} ORDER BY id")
            assert got == [list(e) for e in expected], tenant
    finally:
        client.close()
