"""The ``gcp-spanner`` SQL connector in MiniCluster jobs, read back from the emulator.

One job writes through a DDL table and a ``TableDescriptor`` table (a statement set), both with
a table template over a column; another sets the grouping options (``sink.grouping-factor``
and its companions) in the DDL and writes rows in scrambled key order; a third writes a
changelog (a GROUP BY over a GROUP BY, with updates and deletes) into a table with a primary
key, which must converge to the aggregate: Spanner really upserts and deletes. The planning
tests submit nothing.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from pyflink.table import DataTypes, Schema, TableDescriptor

from tests.integration.spanner.support import create_tables, query, unique
from tests.support.tables import make_table_env, planning_error

pytestmark = pytest.mark.e2e

TENANTS = ("acme", "globex", "initech")
ROWS = [(i, TENANTS[i % 3], f"{i}.50", f"2024-03-01 12:00:00.{i:06d}") for i in range(9)]
VALUES = ", ".join(
    f"({i}, '{t}', CAST({a} AS DECIMAL(10, 2)), TIMESTAMP '{at}')" for i, t, a, at in ROWS
)
COLUMNS = "id BIGINT, tenant STRING, amount DECIMAL(10, 2), placed TIMESTAMP(6)"


def _options(**more: str) -> str:
    values = {
        "connector": "gcp-spanner",
        "project": "test-project",
        "instance": os.environ["SPANNER_INSTANCE"],
        "database": os.environ["SPANNER_DATABASE"],
        **more,
    }
    return ", ".join(f"'{k}' = '{v}'" for k, v in values.items())


def test_ddl_and_descriptor_tables_write_to_their_template_tables(stack) -> None:
    sql, desc = unique("sql"), unique("desc")
    create_tables(
        [
            f"CREATE TABLE {p}_{t} (id INT64 NOT NULL, tenant STRING(MAX), amount NUMERIC, "
            "placed TIMESTAMP) PRIMARY KEY (id)"
            for p in (sql, desc)
            for t in TENANTS
        ]
    )
    t_env = make_table_env()
    t_env.execute_sql(
        f"CREATE TEMPORARY TABLE orders ({COLUMNS}) WITH ({_options(table=sql + '_{tenant}')})"
    )
    schema = (
        Schema.new_builder()
        .column("id", DataTypes.BIGINT())
        .column("tenant", DataTypes.STRING())
        .column("amount", DataTypes.DECIMAL(10, 2))
        .column("placed", DataTypes.TIMESTAMP(6))
        .build()
    )
    descriptor = TableDescriptor.for_connector("gcp-spanner").schema(schema)
    for key, value in {
        "project": stack.project,
        "instance": os.environ["SPANNER_INSTANCE"],
        "database": os.environ["SPANNER_DATABASE"],
        "table": desc + "_{tenant}",
        "sink.parallelism": "1",
    }.items():
        descriptor = descriptor.option(key, value)
    t_env.create_temporary_table("described", descriptor.build())
    statements = t_env.create_statement_set()
    statements.add_insert_sql(f"INSERT INTO orders VALUES {VALUES}")
    statements.add_insert_sql(f"INSERT INTO described VALUES {VALUES}")
    statements.execute().wait()

    for prefix in (sql, desc):
        for tenant in TENANTS:
            got = query(f"SELECT id, tenant, amount, placed FROM {prefix}_{tenant} ORDER BY id")
            assert got == [
                [i, tenant, Decimal(a), datetime.fromisoformat(at).replace(tzinfo=UTC)]
                for i, t, a, at in ROWS
                if t == tenant
            ], (prefix, tenant)


def test_grouping_options_in_the_ddl_sort_and_cut_the_commits_and_every_row_lands(stack) -> None:
    """``sink.grouping-factor`` and its companions reach the writer: rows arrive in an order
    scattered over the key space and over two tables, are sorted and cut into commits of at
    most ``sink.max-rows-per-commit`` rows, and each one lands in its table."""
    prefix = unique("grouped")
    create_tables(
        [
            f"CREATE TABLE {prefix}_{t} (id INT64 NOT NULL, tenant STRING(MAX), amount NUMERIC, "
            "placed TIMESTAMP) PRIMARY KEY (id)"
            for t in TENANTS[:2]
        ]
    )
    # 60 rows whose ids come in a scrambled order, alternating between the two tables.
    ids = [(i * 37) % 60 for i in range(60)]
    rows = [(i, TENANTS[i % 2], f"{i}.25", f"2024-03-02 08:00:00.{i:06d}") for i in ids]
    values = ", ".join(
        f"({i}, '{t}', CAST({a} AS DECIMAL(10, 2)), TIMESTAMP '{at}')" for i, t, a, at in rows
    )
    options = _options(
        table=prefix + "_{tenant}",
        **{
            "sink.parallelism": "1",
            "sink.grouping-factor": "8",
            "sink.max-rows-per-commit": "5",
            "sink.max-commit-delay": "10ms",
            "sink.max-cumulative-backoff": "30s",
        },
    )
    t_env = make_table_env()
    t_env.execute_sql(f"CREATE TEMPORARY TABLE grouped ({COLUMNS}) WITH ({options})")
    t_env.execute_sql(f"INSERT INTO grouped VALUES {values}").wait()

    for tenant in TENANTS[:2]:
        got = query(f"SELECT id, tenant, amount, placed FROM {prefix}_{tenant} ORDER BY id")
        assert got == [
            [i, tenant, Decimal(a), datetime.fromisoformat(at).replace(tzinfo=UTC)]
            for i, t, a, at in sorted(rows)
            if t == tenant
        ], tenant


# Where each account is, in order: accounts move between regions, and "north" ends up empty.
MOVES = [
    (1, "north"),
    (2, "north"),
    (3, "south"),
    (1, "south"),
    (4, "east"),
    (2, "east"),
    (5, "south"),
    (3, "east"),
    (6, "west"),
]


def test_a_changelog_into_a_table_with_a_primary_key_converges_to_the_aggregate(stack) -> None:
    table = unique("regions")
    create_tables(
        [f"CREATE TABLE {table} (region STRING(MAX) NOT NULL, accounts INT64) PRIMARY KEY (region)"]
    )
    t_env = make_table_env()
    t_env.execute_sql(
        f"CREATE TEMPORARY TABLE per_region (region STRING NOT NULL, accounts BIGINT, "
        f"PRIMARY KEY (region) NOT ENFORCED) WITH ({_options(table=table)})"
    )
    moves = ", ".join(f"({i}, {n}, '{r}')" for n, (i, r) in enumerate(MOVES))
    # Each account's latest region (updates), then accounts per region (updates, and a delete
    # when a region's last account leaves it).
    t_env.execute_sql(
        f"""INSERT INTO per_region
            SELECT region, COUNT(*) FROM (
                SELECT account, LAST_VALUE(region) AS region
                FROM (VALUES {moves}) AS m(account, seq, region) GROUP BY account)
            GROUP BY region"""
    ).wait()

    latest = dict(MOVES)
    expected: dict[str, int] = {}
    for region in latest.values():
        expected[region] = expected.get(region, 0) + 1
    assert "north" not in expected  # its rows were written, then deleted
    got = query(f"SELECT region, accounts FROM {table} ORDER BY region")
    assert got == sorted([r, n] for r, n in expected.items())


def test_planning_rejects_a_missing_key_and_a_primary_key_on_an_insert_only_connector() -> None:
    t_env = make_table_env()
    t_env.execute_sql(
        "CREATE TEMPORARY TABLE no_db (id BIGINT) WITH ('connector' = 'gcp-spanner', "
        "'project' = 'p', 'instance' = 'i', 'table' = 't')"
    )
    assert (
        "ValidationException: One or more required options are missing.\n\n"
        "Missing required options are:\n\ndatabase"
    ) in planning_error(t_env, "INSERT INTO no_db VALUES (1)")
    t_env.execute_sql(
        "CREATE TEMPORARY TABLE keyed_topic (id BIGINT NOT NULL, PRIMARY KEY (id) NOT ENFORCED) "
        "WITH ('connector' = 'gcp-pubsub', 'project' = 'p', 'topic' = 't')"
    )
    assert (
        "sink 'keyed_topic': connector 'gcp-pubsub' is insert-only and takes no PRIMARY KEY; "
        "only gcp-bigquery and gcp-spanner write updates and deletes of a table with one."
    ) in planning_error(t_env, "INSERT INTO keyed_topic VALUES (1)")


def test_planning_rejects_a_commit_delay_over_spanners_limit_and_takes_the_limit() -> None:
    t_env = make_table_env()
    options = "'connector' = 'gcp-spanner', 'project' = 'p', 'instance' = 'i', 'database' = 'd'"
    for name, delay in (("delayed", "1s"), ("at_limit", "500ms")):
        t_env.execute_sql(
            f"CREATE TEMPORARY TABLE {name} (id BIGINT) WITH ({options}, 'table' = 't', "
            f"'sink.max-commit-delay' = '{delay}')"
        )
    assert (
        "Invalid value for option 'sink.max-commit-delay' of connector 'gcp-spanner': expected "
        "a duration such as 500ms, 10s, 5min, 1h or 1d of at most 500ms, got '1s'."
    ) in planning_error(t_env, "INSERT INTO delayed VALUES (1)")
    # Explaining plans the sink (its factory validates the options) and submits nothing.
    assert "at_limit" in t_env.explain_sql("INSERT INTO at_limit VALUES (1)")
