"""A Spanner sink whose service cannot be reached fails within its retry deadline."""

from __future__ import annotations

import pytest

from pyflink_gcp.spanner import DatabaseDestination, Mutation, SpannerSink, SpannerWriterOptions
from tests.e2e.faults.support import DEADLINE, assert_bounded_failure, run_until_failure
from tests.support.endpoints import black_hole_endpoint, refusing_endpoint

pytestmark = pytest.mark.e2e

DATABASE = "projects/test-project/instances/faults/databases/orders"


def sink(endpoint: str) -> SpannerSink:
    return (
        SpannerSink.builder()
        .set_sink_name("orders-spanner")
        .set_endpoint(f"http://{endpoint}")
        .set_database(DatabaseDestination.of("test-project", "faults", "orders"))
        .set_serializer(lambda r: Mutation.insert_or_update("Orders", r))
        .set_writer_options(SpannerWriterOptions.builder().retry_deadline(DEADLINE).build())
        .build()
    )


def test_a_refused_endpoint_fails_the_job_within_the_deadline():
    endpoint = refusing_endpoint()
    failure = run_until_failure(sink(endpoint))
    assert_bounded_failure(failure, "orders-spanner", DATABASE, endpoint)


def test_a_silent_endpoint_fails_the_job_within_the_deadline():
    with black_hole_endpoint() as endpoint:
        failure = run_until_failure(sink(endpoint))
    assert_bounded_failure(failure, "orders-spanner", DATABASE, endpoint)
