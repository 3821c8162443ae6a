"""Partitioned tables as the routing target: a FILE_LOADS job routes each row to its day's
partition (``orders$20251202``) of one table partitioned by day, created by the sink; every row
lands once in the one table. The Storage Write API methods refuse a partition, naming it."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest
from google.cloud.bigquery import SchemaField, TimePartitioning, TimePartitioningType

from pyflink_gcp.bigquery import (
    BigQuerySerializer,
    BigQuerySink,
    BigQueryWriterOptions,
    CreateDisposition,
    TableDestination,
    TableSchema,
    WriteMethod,
)
from tests.e2e.bigquery.test_file_loads import gcs_bucket, loads_options
from tests.integration.bigquery.support import bq_client, make_dataset, query, table_names
from tests.support.jobs import make_env, record_stream

pytestmark = pytest.mark.e2e

COUNT = 2_000
DAYS = 5
BASE_MICROS = 1_764_633_600_000_000  # 2025-12-02T00:00:00Z
DAY_MICROS = 86_400_000_000
SCHEMA = TableSchema.of(
    [SchemaField("id", "INT64", mode="REQUIRED"), SchemaField("at", "TIMESTAMP")],
    time_partitioning=TimePartitioning(type_=TimePartitioningType.DAY, field="at"),
)


def order(i: int) -> dict[str, Any]:
    return {"id": i, "at": BASE_MICROS + (i % DAYS) * DAY_MICROS + i}


class DayPartition:
    """``orders$yyyymmdd`` of the row's ``at``."""

    def __init__(self, project: str, dataset: str) -> None:
        self.project = project
        self.dataset = dataset

    def __call__(self, record: dict[str, Any], context: Any) -> TableDestination:
        day = time.strftime("%Y%m%d", time.gmtime(record["at"] // 1_000_000))
        return TableDestination.of(self.project, self.dataset, f"orders${day}")


def sink(project: str, dataset: str, method: WriteMethod, loads: Any = None) -> BigQuerySink:
    builder = (
        BigQuerySink.builder()
        .set_destination_resolver(DayPartition(project, dataset))
        .set_serializer(BigQuerySerializer.of(schema=SCHEMA))
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_write_method(method)
        .set_writer_options(BigQueryWriterOptions.builder().max_buffered_records(200).build())
    )
    if loads is not None:
        builder = builder.set_file_loads_options(loads)
    return builder.build()


def test_file_loads_load_each_row_into_its_days_partition(project: str, tmp_path: Any) -> None:
    dataset = make_dataset(project, "partitions")
    loads = loads_options(gcs_bucket(project), tmp_path)
    env = make_env(parallelism=2, checkpoint_ms=500)
    record_stream(env, COUNT, order).sink_to(sink(project, dataset, WriteMethod.FILE_LOADS, loads))
    env.execute("orders into day partitions")

    assert table_names(project, dataset) == ["orders"]
    client = bq_client(project)
    try:
        table = client.get_table(f"{project}.{dataset}.orders")
    finally:
        client.close()
    assert table.time_partitioning is not None and table.time_partitioning.field == "at"
    rows = query(project, f"SELECT id FROM `{project}.{dataset}.orders`")
    seen = Counter(r["id"] for r in rows)
    assert set(seen) == set(range(COUNT)) and max(seen.values()) == 1


def test_the_storage_write_api_refuses_a_partition_naming_it(project: str) -> None:
    dataset = make_dataset(project, "nopartitions")
    env = make_env(parallelism=1, checkpoint_ms=500, restarts=0)
    record_stream(env, 10, order).sink_to(
        sink(project, dataset, WriteMethod.STORAGE_API_AT_LEAST_ONCE)
    )
    with pytest.raises(Exception, match=r"orders\$2025120\d.*route to the table, or use Writ"):
        env.execute("orders into day partitions, default stream")
