"""A BigQuery sink whose REST or Storage Write endpoint cannot be reached fails within its
retry deadline, naming the sink, the table and the endpoint.

The REST endpoint is the first one a table's writer needs (its schema), so its tests need no
emulator. The Storage Write tests look the table up on the real BigQuery emulator and then
append to an endpoint that refuses or never answers.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.cloud.bigquery import SchemaField

from pyflink_gcp.bigquery import (
    BigQuerySerializer,
    BigQuerySink,
    BigQueryWriterOptions,
    TableDestination,
)
from tests.e2e.faults.support import DEADLINE, assert_bounded_failure, run_until_failure
from tests.support.endpoints import black_hole_endpoint, refusing_endpoint

pytestmark = pytest.mark.e2e

FIELDS = [SchemaField("id", "INT64"), SchemaField("name", "STRING")]


def sink(project: str, dataset: str, *, rest: str | None, storage: str | None) -> Any:
    builder = (
        BigQuerySink.builder()
        .set_sink_name("orders-bq")
        .set_destination_resolver(lambda r, ctx: TableDestination.of(project, dataset, "orders"))
        .set_serializer(BigQuerySerializer.of(lambda r: r, schema=FIELDS))
        .set_writer_options(BigQueryWriterOptions.builder().retry_deadline(DEADLINE).build())
    )
    if rest is not None:
        builder.set_rest_endpoint(f"http://{rest}")
    if storage is not None:
        builder.set_storage_endpoint(f"http://{storage}")
    return builder.build()


def test_a_refused_rest_endpoint_fails_the_job_within_the_deadline():
    rest = refusing_endpoint()
    failure = run_until_failure(sink("p", "d", rest=rest, storage=refusing_endpoint()))
    assert_bounded_failure(failure, "orders-bq", "p.d.orders", f"http://{rest}", "UNAVAILABLE")


def test_a_silent_rest_endpoint_fails_the_job_within_the_deadline():
    with black_hole_endpoint() as rest:
        failure = run_until_failure(sink("p", "d", rest=rest, storage=refusing_endpoint()))
    assert_bounded_failure(failure, "orders-bq", "p.d.orders", f"http://{rest}")


@pytest.fixture
def table(project: str) -> tuple[str, str]:
    from tests.integration.bigquery.support import make_dataset, make_table

    dataset = make_dataset(project, "faults")
    make_table(project, dataset, "orders", FIELDS)
    return project, dataset


def test_a_refused_storage_endpoint_fails_the_job_within_the_deadline(table):
    project, dataset = table
    storage = refusing_endpoint()
    failure = run_until_failure(sink(project, dataset, rest=None, storage=storage))
    assert_bounded_failure(failure, "orders-bq", f"{project}.{dataset}.orders", storage)


def test_a_silent_storage_endpoint_fails_the_job_within_the_deadline(table):
    project, dataset = table
    with black_hole_endpoint() as storage:
        failure = run_until_failure(sink(project, dataset, rest=None, storage=storage))
    assert_bounded_failure(failure, "orders-bq", f"{project}.{dataset}.orders", storage)
