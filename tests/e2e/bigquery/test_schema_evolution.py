"""A job upgraded to write more columns, in each write method: version 1 creates partitioned,
clustered, labelled tables per region; version 2's serializer adds two columns and, with
``schema_update(SchemaUpdate.ADD_COLUMNS)``, goes on into the same tables and a new one, at
parallelism 2, through a killed worker. Every row is read back with its new columns, each table
of version 1 got one schema update (counted by the emulator launcher), and the exactly-once
methods hold every row once."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest
from google.cloud.bigquery import SchemaField, TimePartitioning, TimePartitioningType

from pyflink_gcp.bigquery import (
    BigQuerySerializer,
    BigQuerySink,
    BigQueryWriterOptions,
    CreateDisposition,
    SchemaUpdate,
    TableDestination,
    TableSchema,
    WriteMethod,
)
from tests.e2e.bigquery.test_file_loads import gcs_bucket, loads_options
from tests.integration.bigquery.support import (
    ByRegion,
    bq_client,
    make_dataset,
    query,
    schema_updates,
)
from tests.support.jobs import FailAt, Paced, make_env, record_stream
from tests.support.restore import Failover

pytestmark = pytest.mark.e2e

V1_COUNT = 1_000
V2_COUNT = 2_000
KILL_AT = V1_COUNT + 1_300
BASE_MICROS = 1_764_633_600_000_000  # 2025-12-02T00:00:00Z
V1_FIELDS = [
    SchemaField("id", "INT64", mode="REQUIRED"),
    SchemaField("region", "STRING"),
    SchemaField("at", "TIMESTAMP"),
]
V2_FIELDS = [
    *V1_FIELDS,
    SchemaField("amount", "FLOAT64"),
    SchemaField("tags", "STRING", mode="REPEATED"),
]


def v1_record(i: int) -> dict[str, Any]:
    return {"id": i, "region": ("eu", "us")[i % 2], "at": BASE_MICROS + i * 60_000_000}


def v2_record(i: int) -> dict[str, Any]:
    i += V1_COUNT
    return {
        "id": i,
        "region": ("eu", "us", "apac")[i % 3],
        "at": BASE_MICROS + i * 60_000_000,
        "amount": i / 4,
        "tags": ["v2", str(i % 5)],
    }


class Orders(BigQuerySerializer):
    """Rows as they come; each region's table partitioned by day on ``at``, clustered by
    region and labelled with its region."""

    def __init__(self, fields: list[SchemaField]) -> None:
        self.fields = fields

    def serialize(self, record: dict[str, Any], context: Any) -> dict[str, Any]:
        return record

    def schema(self, destination: TableDestination) -> TableSchema:
        region = destination.table.removeprefix("orders_")
        return TableSchema.of(
            self.fields,
            clustering_fields=["region"],
            time_partitioning=TimePartitioning(type_=TimePartitioningType.DAY, field="at"),
            labels={"pipeline": "orders", "region": region},
            description=f"orders of region {region}",
        )


def sink(
    project: str, dataset: str, method: WriteMethod, fields: list[SchemaField], loads: Any
) -> BigQuerySink:
    builder = (
        BigQuerySink.builder()
        .set_sink_name("orders")
        .set_destination_resolver(ByRegion(project, dataset))
        .set_serializer(Orders(fields))
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_write_method(method)
        .set_writer_options(
            BigQueryWriterOptions.builder()
            .max_buffered_records(200)
            .schema_update(SchemaUpdate.ADD_COLUMNS)
            .build()
        )
    )
    if method is WriteMethod.FILE_LOADS:
        builder = builder.set_file_loads_options(loads)
    return builder.build()


@pytest.mark.parametrize(
    "method",
    [WriteMethod.STORAGE_API_AT_LEAST_ONCE, WriteMethod.BUFFERED_STREAM, WriteMethod.FILE_LOADS],
    ids=["default-stream", "buffered", "file-loads"],
)
def test_v2_adds_its_columns_to_v1_tables_and_loses_nothing_through_a_killed_worker(
    project: str, tmp_path: Any, method: WriteMethod
) -> None:
    dataset = make_dataset(project, "upgrade")
    loads = None
    if method is WriteMethod.FILE_LOADS:
        loads = loads_options(gcs_bucket(project), tmp_path)

    env = make_env(parallelism=2, checkpoint_ms=500)
    record_stream(env, V1_COUNT, v1_record).sink_to(
        sink(project, dataset, method, V1_FIELDS, loads)
    )
    env.execute("orders v1")

    failover = Failover(tmp_path / "failover")
    # Bundles of 50 records: a barrier waits for every record already handed to the Python
    # map, so with the default bundle (100,000) the first checkpoint waits for the whole input.
    extra = {**failover.conf(), "python.fn-execution.bundle.size": "50"}
    env = make_env(parallelism=2, checkpoint_ms=500, process_workers=True, restarts=5, extra=extra)
    kill = FailAt(str(tmp_path), (KILL_AT,), True, after_checkpoint=failover.checkpoints)
    # 50 ms every 10 records until the kill: the v2 job would last about 5 s a subtask, so
    # checkpoints complete before the kill (which waits for one) and the restart restores one;
    # after it, the rest and the replay go unpaced.
    paced = Paced(every=10, seconds=0.05, until=str(tmp_path / f"failed-{KILL_AT}"))
    record_stream(env, V2_COUNT, v2_record).map(paced).map(kill).sink_to(
        sink(project, dataset, method, V2_FIELDS, loads)
    )
    env.execute("orders v2")
    assert os.path.exists(tmp_path / f"failed-{KILL_AT}"), "the worker was not killed"
    failover.assert_restored()

    tables = [f"orders_{r}" for r in ("apac", "eu", "us")]
    client = bq_client(project)
    try:
        for table in tables:
            got = client.get_table(f"{project}.{dataset}.{table}")
            assert [f.name for f in got.schema] == ["id", "region", "at", "amount", "tags"]
            assert got.time_partitioning is not None and got.time_partitioning.field == "at"
            assert got.clustering_fields == ["region"]
            assert got.labels == {"pipeline": "orders", "region": table.removeprefix("orders_")}
    finally:
        client.close()
    # v1's tables got one update each, whatever the subtasks and the restart; apac was created
    # with v2's columns.
    updates = schema_updates()
    assert {t: updates.get(f"{project}.{dataset}.{t}", 0) for t in tables} == {
        "orders_apac": 0,
        "orders_eu": 1,
        "orders_us": 1,
    }

    rows = query(
        project,
        " UNION ALL ".join(
            f"SELECT '{t}' AS t, id, amount, tags FROM `{project}.{dataset}.{t}`" for t in tables
        ),
    )
    seen = Counter(r["id"] for r in rows)
    expected = set(range(V1_COUNT + V2_COUNT))
    assert set(seen) == expected, sorted(expected - set(seen))[:10]
    if method is not WriteMethod.STORAGE_API_AT_LEAST_ONCE:
        assert max(seen.values()) == 1, [i for i, n in seen.items() if n > 1][:10]
    for r in rows:
        i = r["id"]
        record = v1_record(i) if i < V1_COUNT else v2_record(i - V1_COUNT)
        assert r["t"] == f"orders_{record['region']}"
        if i < V1_COUNT:
            assert r["amount"] is None and not r["tags"]
        else:
            assert r["amount"] == record["amount"] and list(r["tags"]) == record["tags"]
