"""A Bigtable sink whose service cannot be reached fails within its retry deadline."""

from __future__ import annotations

import pytest

from pyflink_gcp.bigtable import (
    BigtableSink,
    BigtableWriterOptions,
    RowMutationEntry,
    SetCell,
    TableDestination,
)
from tests.e2e.faults.support import DEADLINE, assert_bounded_failure, run_until_failure
from tests.support.endpoints import black_hole_endpoint, refusing_endpoint

pytestmark = pytest.mark.e2e

TABLE = "projects/test-project/instances/faults/tables/readings"


def to_row(record: dict) -> RowMutationEntry:
    return RowMutationEntry(f"r{record['id']}", [SetCell("m", b"name", record["name"].encode())])


def sink(endpoint: str) -> BigtableSink:
    return (
        BigtableSink.builder()
        .set_sink_name("readings-bt")
        .set_endpoint(f"http://{endpoint}")
        .set_destination_resolver(
            lambda r, ctx: TableDestination.of("test-project", "faults", "readings")
        )
        .set_serializer(to_row)
        .set_writer_options(BigtableWriterOptions.builder().retry_deadline(DEADLINE).build())
        .build()
    )


def test_a_refused_endpoint_fails_the_job_within_the_deadline():
    endpoint = refusing_endpoint()
    failure = run_until_failure(sink(endpoint))
    assert_bounded_failure(failure, "readings-bt", TABLE, endpoint)


def test_a_silent_endpoint_fails_the_job_within_the_deadline():
    with black_hole_endpoint() as endpoint:
        failure = run_until_failure(sink(endpoint))
    assert_bounded_failure(failure, "readings-bt", TABLE, endpoint)
