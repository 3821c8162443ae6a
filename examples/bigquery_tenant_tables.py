"""Orders routed to one BigQuery table per tenant, written without their tenant field.

Run against the local emulators (``pyflink-gcp emulators up`` prints the variables) or real
BigQuery (Application Default Credentials)::

    python examples/bigquery_tenant_tables.py --project my-project --orders 20000

Every order names its tenant. The resolver (``route_by_template``) files it under
``tenants.orders_<tenant>``, a table created on demand from the serializer's schema, which has
no tenant column: the table says whose orders they are. ``set_field_selection(
FieldSelection.drop(["tenant"]))`` removes the field after the resolver has read it, so the
serializer's default row (the record itself) fits the schema. Tenants are names from the data,
such as ``ACME Corp.``, which no table id may hold: ``sanitize=True`` turns each character
BigQuery does not allow into ``_`` (``orders_ACME_Corp_``). Afterwards the script checks every
tenant's table: its columns, and that each of the tenant's orders is in it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from google.cloud import bigquery
from pyflink.common import Configuration
from pyflink.common.watermark_strategy import WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.number_seq import NumberSequenceSource

from pyflink_gcp import FieldSelection
from pyflink_gcp.bigquery import BigQuerySerializer, BigQuerySink, CreateDisposition, TableSchema
from pyflink_gcp.routing import bigquery_tables, names, route_by_template
from pyflink_gcp.tools.emulators.clients import bigquery_client

DATASET = "tenants"
# Tenants as the orders name them: "ACME Corp." holds a space and a dot, which no table id may.
TENANTS = ("ACME Corp.", "globex", "initech", "umbrella", "hooli")

# What a tenant's table holds: no tenant column (the table's name is the tenant).
ORDERS = TableSchema.of(
    [
        bigquery.SchemaField("order_id", "INT64", mode="REQUIRED"),
        bigquery.SchemaField("amount", "NUMERIC"),
        bigquery.SchemaField("items", "INT64"),
    ]
)


def make_order(i: int) -> dict:
    """A deterministic order of one of the tenants."""
    return {
        "order_id": i,
        "tenant": TENANTS[i % len(TENANTS)],
        "amount": f"{(i * 37) % 10_000 / 100:.2f}",
        "items": 1 + i % 5,
    }


def tenant_table(tenant: str) -> str:
    """The table of a tenant's orders: the template's name, with the value sanitized."""
    return "orders_" + names.bigquery_table_id.sanitize(tenant)


def sanitized_tenant(order: dict) -> str:
    """The key that brings every tenant whose name sanitizes alike to one subtask."""
    return names.bigquery_table_id.sanitize(order["tenant"])


def run_job(project: str, orders: int, parallelism: int) -> None:
    conf = Configuration()
    # The Python workers run this interpreter (the venv with pyflink and pyflink-gcp).
    conf.set_string("python.executable", sys.executable)
    conf.set_string("python.client.executable", sys.executable)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    env.enable_checkpointing(2000)

    sink = (
        BigQuerySink.builder()
        .set_sink_name("tenant-orders")
        # The resolver reads the tenant from the whole record. sanitize=True makes a tenant
        # with characters no table id may hold ("ACME Corp.") a valid name, orders_ACME_Corp_,
        # instead of an unroutable record. Sanitizing maps many values to one name, so the
        # template checks for collisions: if "ACME Corp!" came after "ACME Corp.", both would
        # be orders_ACME_Corp_; the first value seen keeps the table and the other's orders go
        # to the failure handler (here: fail the job), never merged into it. The check is per
        # subtask, hence key_by(sanitized_tenant) below; `pyflink-gcp plan` lists such pairs.
        .set_destination_resolver(
            route_by_template("orders_{tenant}", bigquery_tables(project, DATASET, sanitize=True))
        )
        # The serializer gets the order without its tenant: the record is the row.
        .set_field_selection(FieldSelection.drop(["tenant"]))
        .set_serializer(BigQuerySerializer.of(schema=ORDERS))
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .build()
    )
    (
        env.from_source(
            NumberSequenceSource(0, orders - 1), WatermarkStrategy.no_watermarks(), "orders"
        )
        .map(make_order)
        .key_by(sanitized_tenant)
        .sink_to(sink)
    )
    env.execute("bigquery-tenant-tables")


def check_tables(project: str, orders: int) -> bool:
    """Every tenant's table has the schema's columns only and every one of its orders."""
    client = bigquery_client(project)
    ok = True
    try:
        print(f"{'table':<28}{'columns':<28}{'orders':>8}")
        for tenant in TENANTS:
            table_id = f"{project}.{DATASET}.{tenant_table(tenant)}"
            columns = [field.name for field in client.get_table(table_id).schema]
            ids = {
                row["order_id"]
                for row in client.query(f"SELECT order_id FROM `{table_id}`").result()
            }
            expected = {i for i in range(orders) if TENANTS[i % len(TENANTS)] == tenant}
            print(
                f"{DATASET + '.' + tenant_table(tenant):<28}{', '.join(columns):<28}{len(ids):>8}"
            )
            ok = ok and columns == ["order_id", "amount", "items"] and ids == expected
    finally:
        client.close()
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default=os.environ.get("GOOGLE_CLOUD_PROJECT", "demo-project"))
    parser.add_argument("--orders", type=int, default=10_000)
    parser.add_argument("--parallelism", type=int, default=2)
    args = parser.parse_args()

    client = bigquery_client(args.project)
    client.create_dataset(f"{args.project}.{DATASET}", exists_ok=True)  # the sink creates tables
    client.close()
    started = time.monotonic()
    run_job(args.project, args.orders, args.parallelism)
    print(f"\nBigQuery: {args.orders} orders filed by tenant in {time.monotonic() - started:.1f}s")
    ok = check_tables(args.project, args.orders)
    print("OK: every order in its tenant's table, no tenant column" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
