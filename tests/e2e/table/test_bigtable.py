"""The ``gcp-bigtable`` SQL connector in a MiniCluster job, read back from the emulator.

One job writes through a DDL table (tables created by the sink, a template over a column) and a
``TableDescriptor`` table (existing tables, binary values, a cell timestamp column) at once;
the planning test submits nothing.
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime

import pytest
from pyflink.table import DataTypes, Schema, TableDescriptor

from tests.integration.bigtable.support import create_table, list_tables, read_table, unique
from tests.support.tables import make_table_env, planning_error

pytestmark = pytest.mark.e2e

REGIONS = ("eu", "us", "asia")
ROWS = [(f"k{i:02d}", REGIONS[i % 3], i * 10, f"2024-03-01 12:00:00.{i:03d}") for i in range(9)]
VALUES = ", ".join(
    f"('{k}', '{r}', CAST({n} AS BIGINT), TIMESTAMP '{t}', ROW('web{n}'))" for k, r, n, t in ROWS
)
COLUMNS = "id STRING, region STRING, n BIGINT, ts TIMESTAMP(3), meta ROW<src STRING>"


def _micros(text: str) -> int:
    at = datetime.fromisoformat(text).replace(tzinfo=UTC)
    return int(at.timestamp()) * 1_000_000 + at.microsecond


def test_ddl_and_descriptor_tables_write_cells_to_their_template_tables(stack) -> None:
    instance = unique("sql-")
    for region in REGIONS:
        create_table(instance, f"desc_{region}", {"cf": None, "meta": None})
    t_env = make_table_env()
    t_env.execute_sql(
        f"""CREATE TEMPORARY TABLE cells ({COLUMNS}) WITH (
            'connector' = 'gcp-bigtable', 'project' = '{stack.project}',
            'instance' = '{instance}', 'table' = 'sql_{{region}}', 'row-key' = 'id',
            'column-family' = 'cf', 'create-disposition' = 'create-if-needed')"""
    )
    schema = (
        Schema.new_builder()
        .column("id", DataTypes.STRING())
        .column("region", DataTypes.STRING())
        .column("n", DataTypes.BIGINT())
        .column("ts", DataTypes.TIMESTAMP(3))
        .column("meta", DataTypes.ROW([DataTypes.FIELD("src", DataTypes.STRING())]))
        .build()
    )
    t_env.create_temporary_table(
        "described",
        TableDescriptor.for_connector("gcp-bigtable")
        .schema(schema)
        .option("project", stack.project)
        .option("instance", instance)
        .option("table", "desc_{region}")
        .option("row-key", "id")
        .option("column-family", "cf")
        .option("timestamp.column", "ts")
        .option("value.format", "binary")
        .build(),
    )
    statements = t_env.create_statement_set()
    statements.add_insert_sql(f"INSERT INTO cells VALUES {VALUES}")
    statements.add_insert_sql(f"INSERT INTO described VALUES {VALUES}")
    statements.execute().wait()

    assert sorted(list_tables(instance)) == sorted(
        [f"desc_{r}" for r in REGIONS] + [f"sql_{r}" for r in REGIONS]
    )
    for region in REGIONS:
        expected = [row for row in ROWS if row[1] == region]
        sql = read_table(instance, f"sql_{region}")
        assert sorted(sql) == [k.encode() for k, *_ in expected], region
        for key, _, n, ts in expected:
            cells = {q: [v for _, v in versions] for q, versions in sql[key.encode()].items()}
            assert cells == {
                ("cf", b"region"): [region.encode()],
                ("cf", b"n"): [str(n).encode()],
                ("cf", b"ts"): [datetime.fromisoformat(ts).isoformat().encode()],
                ("meta", b"src"): [f"web{n}".encode()],
            }
        described = read_table(instance, f"desc_{region}")
        assert sorted(described) == [k.encode() for k, *_ in expected], region
        for key, _, n, ts in expected:
            cells = described[key.encode()]
            assert cells == {
                ("cf", b"region"): [(_micros(ts), region.encode())],
                ("cf", b"n"): [(_micros(ts), struct.pack(">q", n))],
                ("meta", b"src"): [(_micros(ts), f"web{n}".encode())],
            }


def test_a_missing_required_key_fails_at_planning() -> None:
    t_env = make_table_env()
    t_env.execute_sql(
        "CREATE TEMPORARY TABLE no_key (id STRING, v BIGINT) WITH ('connector' = "
        "'gcp-bigtable', 'project' = 'p', 'instance' = 'i', 'table' = 't', "
        "'column-family' = 'cf')"
    )
    assert (
        "ValidationException: One or more required options are missing.\n\n"
        "Missing required options are:\n\nrow-key"
    ) in planning_error(t_env, "INSERT INTO no_key VALUES ('a', 1)")
