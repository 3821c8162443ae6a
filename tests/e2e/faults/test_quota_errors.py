"""Every sink slows down under quota errors instead of failing, and loses no record.

One real PyFlink job (checkpoints every second, no restarts: any failure fails every case)
writes each record through all five sinks at once, against the null backend
(``bench/nullbackend``, built into the tools cache from source the first time), which
answers 30% of each sink's write calls with RESOURCE_EXHAUSTED
for 10 s from the first one (Publish, AppendRows responses, MutateRows, CreateTask, Commit),
spread evenly rather than drawn at random: a sink that batches makes only a handful of calls
in that window, and each of them must meet some.
The input is paced to last longer than that window, so the job is still writing when the
window ends. The sinks run with a 5 s retry deadline, shorter than the window: quota errors
must not count towards it (they have their own bound, ten times longer).

Each sink meets the errors of the same window, and one job instead of one per sink spares
four job start-ups and four windows; each case then checks its own sink in that one job.

What is checked, per sink: the job ends normally; the backend injected quota errors into this
sink's write calls and received write calls of this sink after the window; and every record
was counted at least once in its destination. The job's duration is printed, not asserted.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from bench._nullbackend import running
from bench.scale import (
    INSTANCE,
    PROJECT,
    WRITE_CALLS,
    Records,
    Resolver,
    backend_key,
    bigquery_row,
    bigtable_entry,
    configure,
    json_bytes,
    spanner_mutation,
)
from pyflink_gcp.bigquery import BigQuerySink, BigQueryWriterOptions
from pyflink_gcp.bigtable import BigtableSink, BigtableWriterOptions
from pyflink_gcp.cloudtasks import (
    CloudTasksSerializationSchema,
    CloudTasksSink,
    CloudTasksWriterOptions,
)
from pyflink_gcp.core import FailureHandler
from pyflink_gcp.pubsub import PubSubSink, PubSubWriterOptions
from pyflink_gcp.spanner import DatabaseDestination, SpannerSink, SpannerWriterOptions
from tests.support.jobs import Paced, make_env, record_stream

pytestmark = pytest.mark.e2e

#: Tells tests/conftest.py to start building the null backend when this module is collected.
USES_NULL_BACKEND = True

SERVICES = ("pubsub", "bigquery", "bigtable", "cloudtasks", "spanner")
#: Records per job, over this many destinations.
RECORDS = 7_200
DESTINATIONS = 3
#: The input's pace: a 50 ms pause every this many records (at most 500 records/s), so the
#: input lasts at least 14 s, longer than the quota window that starts at the first write.
PAUSE_EVERY = 25
#: The quota errors: this share of the write calls, for this long from the first.
QUOTA_RATE = 0.3
QUOTA_WINDOW_S = 10.0
#: Shorter than the quota window: quota errors must not use it up.
RETRY_DEADLINE = timedelta(seconds=5)


class InBackend:
    """A serializer that points the worker at the null backend when it is unpickled there.

    In PyFlink's loopback mode the Python worker runs in this process, but the first worker of
    a job copies the JVM's environment into ``os.environ`` when it starts: the JVM started
    with the emulators' variables, so the sink would write to the emulators. The sink's
    configuration (this serializer with it) is unpickled after that and before the writer
    opens its clients, so restoring the backend's variables here is in time.
    """

    def __init__(self, serialize: Any, env: dict[str, str]) -> None:
        self.serialize = serialize
        self.env = env

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        os.environ.update(self.env)

    def __call__(self, record: Any, context: Any = None) -> Any:
        return self.serialize(record, context)


def build_sink(service: str, env: dict[str, str]) -> Any:
    """The sink of ``service`` with default options but the retry deadline, writing round
    robin to :data:`DESTINATIONS` destinations; records are only ever dropped if rejected for
    their content, which none is."""
    builder: Any
    if service == "pubsub":
        builder = PubSubSink.builder().set_serializer(InBackend(json_bytes, env))
        options: Any = PubSubWriterOptions.builder()
    elif service == "bigquery":
        builder = BigQuerySink.builder().set_serializer(InBackend(bigquery_row, env))
        options = BigQueryWriterOptions.builder()
    elif service == "bigtable":
        builder = BigtableSink.builder().set_serializer(InBackend(bigtable_entry, env))
        options = BigtableWriterOptions.builder()
    elif service == "cloudtasks":
        schema = CloudTasksSerializationSchema.http_target("https://hooks.example.com/quota")
        builder = CloudTasksSink.builder().set_serializer(
            schema.with_body(InBackend(json_bytes, env), content_type="application/json")
        )
        options = CloudTasksWriterOptions.builder()
    else:
        database = DatabaseDestination.of(PROJECT, INSTANCE, "bench")
        builder = (
            SpannerSink.builder()
            .set_database(database)
            .set_serializer(InBackend(spanner_mutation, env))
        )
        options = SpannerWriterOptions.builder()
    if service != "spanner":
        builder = builder.set_destination_resolver(Resolver(service))
    # Explicit endpoints as well: a client whose endpoint is settled before the serializer is
    # unpickled must not find the emulators' variables.
    grpc = "http://" + env["PUBSUB_EMULATOR_HOST"]
    if service == "bigquery":
        builder = builder.set_storage_endpoint(grpc).set_rest_endpoint(
            "http://" + env["BIGQUERY_EMULATOR_HOST"]
        )
    elif service == "bigtable":
        builder = builder.set_endpoint(grpc).set_admin_endpoint(grpc)
    else:
        builder = builder.set_endpoint(grpc)
    return (
        builder.set_sink_name(f"quota-{service}")
        .set_writer_options(options.retry_deadline(RETRY_DEADLINE).build())
        .set_failure_handler(FailureHandler.log_and_drop())
        .build()
    )


@dataclass
class QuotaRun:
    """What the one job of the module left in the backend."""

    elapsed: float
    counts: dict[str, Any]
    #: Write calls per method counted when the backend first reported the window over: a sink
    #: with more calls at the end wrote after the window.
    calls_at_window_end: dict[str, int]


@pytest.fixture(scope="module")
def quota_run() -> Iterator[QuotaRun]:
    """Runs the job of every sink under one quota window; the backend runs for the module.

    The backend's counts are polled while the job runs, so each sink's write calls after the
    window can be told apart from the others' (the backend counts them for all methods at once).
    """
    # The environment first: if this is the pytest process's first job, it starts PyFlink's
    # gateway JVM, whose environment the workers of every later job copy, so the null backend's
    # variables must not be in it (the sinks here get the backend's endpoints explicitly).
    env = make_env(parallelism=1, checkpoint_ms=1_000, restarts=0)
    with running() as backend:
        configure(backend, DESTINATIONS, 0.0)
        backend.inject_quota_errors(QUOTA_RATE, QUOTA_WINDOW_S)
        records = record_stream(env, RECORDS, Records(DESTINATIONS)).map(
            Paced(every=PAUSE_EVERY, seconds=0.05)
        )
        for service in SERVICES:
            records.sink_to(build_sink(service, backend.env))
        start = time.monotonic()
        result = env.execute_async("quota errors").get_job_execution_result()
        at_window_end: dict[str, int] | None = None
        while not result.done():
            if at_window_end is None:
                counts = backend.counts()
                if counts["quota"]["window"] == "over":
                    at_window_end = dict(counts["calls"])
            time.sleep(0.2)
        result.result()  # raises if the job failed
        elapsed = time.monotonic() - start
        assert at_window_end is not None, "the job ended before the quota window did"
        yield QuotaRun(elapsed, backend.counts(), at_window_end)


@pytest.mark.parametrize("service", SERVICES)
def test_quota_errors_slow_the_sink_without_failing_it(quota_run: QuotaRun, service: str) -> None:
    counts = quota_run.counts
    quota = counts["quota"]
    method = WRITE_CALLS[service]
    injected = quota["injected"].get(method, 0)
    calls = counts["calls"].get(method, 0)
    after = calls - quota_run.calls_at_window_end.get(method, 0)
    print(
        f"\n{service}: job of all sinks {quota_run.elapsed:.1f}s; {calls} write calls, "
        f"{injected} answered RESOURCE_EXHAUSTED, at least {after} after the window"
    )
    assert injected > 0, counts
    # The job was still writing to this sink when the window ended: it went through all of it.
    assert quota["window"] == "over" and after > 0, (quota, quota_run.calls_at_window_end)
    got = counts["records"].get(service, {})
    expected = {backend_key(service, d): RECORDS // DESTINATIONS for d in range(DESTINATIONS)}
    short = {key: (n, got.get(key, 0)) for key, n in expected.items() if got.get(key, 0) < n}
    assert not short, f"records lost (expected, counted): {short}"
