"""Orders written from SQL into one BigQuery table per tenant and day, through ``gcp-bigquery``.

Run against the local emulators (``pyflink-gcp emulators up`` prints the variables) or real
BigQuery (Application Default Credentials)::

    python examples/sql_dynamic_tables.py --project my-project --orders 3000

A ``datagen`` table produces order ids; one ``INSERT`` derives each order's tenant, amount and
event time (a ``TIMESTAMP(6)`` with microseconds) and writes it into the ``gcp-bigquery`` table
whose ``'table' = 'orders_{tenant}_{event_time:%Y%m%d}'`` template files it under
``sql_shop.orders_<tenant>_<YYYYMMDD>``: the sink creates the nine tables from the DDL's
columns. Afterwards the script counts every table's orders and checks that the microseconds
arrived.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from pyflink.table import EnvironmentSettings, TableEnvironment

from pyflink_gcp.table import register
from pyflink_gcp.tools.emulators.clients import bigquery_client

DATASET = "sql_shop"
TENANTS = ("acme", "globex", "initech")
DAYS = 3


def run_job(project: str, orders: int, parallelism: int) -> None:
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = t_env.get_config()
    # The Python workers run this interpreter (the venv with pyflink and pyflink-gcp).
    config.set("python.executable", sys.executable)
    config.set("python.client.executable", sys.executable)
    config.set("parallelism.default", str(parallelism))
    config.set("execution.checkpointing.interval", "2 s")
    register(t_env)  # the bridge jar, which holds the connectors' factories

    t_env.execute_sql(
        f"""CREATE TEMPORARY TABLE order_ids (order_id BIGINT) WITH (
            'connector' = 'datagen', 'number-of-rows' = '{orders}',
            'fields.order_id.kind' = 'sequence', 'fields.order_id.start' = '0',
            'fields.order_id.end' = '{orders - 1}')"""
    )
    t_env.execute_sql(
        f"""CREATE TEMPORARY TABLE orders_out (
                order_id BIGINT NOT NULL, tenant STRING, amount DECIMAL(12, 2),
                event_time TIMESTAMP(6))
            WITH ('connector' = 'gcp-bigquery', 'project' = '{project}',
                  'dataset' = '{DATASET}', 'table' = 'orders_{{tenant}}_{{event_time:%Y%m%d}}',
                  'sink.max-created-destinations' = '{len(TENANTS) * DAYS}')"""
    )
    tenant = " ".join(f"WHEN {i} THEN '{t}'" for i, t in enumerate(TENANTS))
    t_env.execute_sql(
        f"""INSERT INTO orders_out SELECT
                order_id,
                CASE MOD(order_id, {len(TENANTS)}) {tenant} END,
                CAST(MOD(order_id * 37, 10000) / 100.0 AS DECIMAL(12, 2)),
                TIMESTAMPADD(SECOND, CAST(MOD(order_id * 7919, {DAYS * 86400}) AS INT),
                             TIMESTAMP '2024-03-01 00:00:00.123456')
            FROM order_ids"""
    ).wait()


def read_back(project: str) -> tuple[dict[str, int], bool]:
    """Orders per table, and whether every event time kept its microseconds."""
    client = bigquery_client(project)
    counts: dict[str, int] = {}
    micros = True
    for table in sorted(client.list_tables(f"{project}.{DATASET}"), key=lambda t: t.table_id):
        sql = f"SELECT order_id, event_time FROM `{project}.{DATASET}.{table.table_id}`"
        rows = list(client.query(sql).result())
        counts[table.table_id] = len({r["order_id"] for r in rows})
        micros = micros and all(r["event_time"].microsecond == 123456 for r in rows)
    client.close()
    return counts, micros


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default=os.environ.get("GOOGLE_CLOUD_PROJECT", "demo-project"))
    parser.add_argument("--orders", type=int, default=3_000)
    parser.add_argument("--parallelism", type=int, default=2)
    args = parser.parse_args()

    client = bigquery_client(args.project)
    client.create_dataset(f"{args.project}.{DATASET}", exists_ok=True)  # the sink makes tables
    client.close()
    started = time.monotonic()
    run_job(args.project, args.orders, args.parallelism)
    took = time.monotonic() - started
    counts, micros = read_back(args.project)

    print(f"\nSQL into BigQuery: {args.orders} orders in {took:.1f}s (job incl. startup)")
    print(f"{'table':<34}{'orders':>8}")
    for table, n in counts.items():
        print(f"{DATASET + '.' + table:<34}{n:>8}")
    print(f"{'total':<34}{sum(counts.values()):>8}")
    ok = len(counts) == len(TENANTS) * DAYS and sum(counts.values()) == args.orders and micros
    print("OK: every order in its tenant's day table, microseconds kept" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
