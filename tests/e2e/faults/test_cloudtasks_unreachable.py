"""A Cloud Tasks sink whose service cannot be reached fails within its retry deadline."""

from __future__ import annotations

import json

import pytest

from pyflink_gcp.cloudtasks import (
    CloudTasksSerializationSchema,
    CloudTasksSink,
    CloudTasksWriterOptions,
    QueueDestination,
)
from tests.e2e.faults.support import DEADLINE, assert_bounded_failure, run_until_failure
from tests.support.endpoints import black_hole_endpoint, refusing_endpoint

pytestmark = pytest.mark.e2e

QUEUE = "projects/test-project/locations/us-central1/queues/hooks"


def sink(endpoint: str) -> CloudTasksSink:
    return (
        CloudTasksSink.builder()
        .set_sink_name("hooks-tasks")
        .set_endpoint(f"http://{endpoint}")
        .set_destination_resolver(
            lambda r, ctx: QueueDestination.of("test-project", "us-central1", "hooks")
        )
        .set_serializer(
            CloudTasksSerializationSchema.http_target("http://127.0.0.1:9/hook").with_body(
                lambda r: json.dumps(r).encode()
            )
        )
        .set_writer_options(CloudTasksWriterOptions.builder().retry_deadline(DEADLINE).build())
        .build()
    )


def test_a_refused_endpoint_fails_the_job_within_the_deadline():
    endpoint = refusing_endpoint()
    failure = run_until_failure(sink(endpoint))
    assert_bounded_failure(failure, "hooks-tasks", QUEUE, endpoint)


def test_a_silent_endpoint_fails_the_job_within_the_deadline():
    with black_hole_endpoint() as endpoint:
        failure = run_until_failure(sink(endpoint))
    assert_bounded_failure(failure, "hooks-tasks", QUEUE, endpoint)
