"""A Pub/Sub sink whose service cannot be reached fails within its retry deadline."""

from __future__ import annotations

import json

import pytest

from pyflink_gcp.pubsub import (
    PubSubSerializationSchema,
    PubSubSink,
    PubSubWriterOptions,
    TopicDestination,
)
from tests.e2e.faults.support import DEADLINE, assert_bounded_failure, run_until_failure
from tests.support.endpoints import black_hole_endpoint, refusing_endpoint

pytestmark = pytest.mark.e2e

TOPIC = "projects/test-project/topics/orders-unreachable"


def sink(endpoint: str) -> PubSubSink:
    return (
        PubSubSink.builder()
        .set_sink_name("orders-pubsub")
        .set_endpoint(f"http://{endpoint}")
        .set_destination_resolver(
            lambda r, ctx: TopicDestination.of("test-project", "orders-unreachable")
        )
        .set_serializer(PubSubSerializationSchema.payload(lambda r: json.dumps(r).encode()))
        .set_writer_options(PubSubWriterOptions.builder().retry_deadline(DEADLINE).build())
        .build()
    )


def test_a_refused_endpoint_fails_the_job_within_the_deadline():
    endpoint = refusing_endpoint()
    failure = run_until_failure(sink(endpoint))
    assert_bounded_failure(failure, "orders-pubsub", TOPIC, endpoint)


def test_a_silent_endpoint_fails_the_job_within_the_deadline():
    with black_hole_endpoint() as endpoint:
        failure = run_until_failure(sink(endpoint))
    assert_bounded_failure(failure, "orders-pubsub", TOPIC, endpoint)
