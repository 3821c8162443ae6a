"""Errors a restart cannot fix end the job once; a transient error still restarts it.

Each job runs under a restart strategy that never gives up: a million attempts, exponential
delay from 200 ms (make_env's). Flink's real default once checkpointing is on, exponential
delay from 1 s, is just as unbounded but slower to show a second attempt; a failure that is not
suppressed shows up here as a second attempt within a second. An upstream map writes one line
per attempt (its task attempt number) to a file, so the test counts attempts from outside the
job; a job still running after the wait is cancelled and fails the test.

Configuration and contract errors come from the real code paths: the core writer (resolver,
serializer), the real Pub/Sub sink against the emulator (missing topic under CREATE_NEVER,
creation bound, a serializer that is not a PubSubSerializationSchema), the writer's own open()
with Python metrics off, and a writer factory that refuses a destination's schema when it
creates the writer. The control is a write that fails transiently on the first attempt only.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pyflink.datastream.functions import MapFunction, RuntimeContext

from pyflink_gcp import CreateDisposition
from pyflink_gcp.core import ConfigurationError, FailedRecord, WriteError, runtime
from pyflink_gcp.core.runtime import DynamicSink
from pyflink_gcp.core.sink_writer import SinkConfig
from pyflink_gcp.pubsub import (
    PubSubSerializationSchema,
    PubSubSink,
    PubSubWriterOptions,
    TopicDestination,
)
from tests.support.fakes import FileDestination, FileSink, FileWriter, FileWriterFactory
from tests.support.jobs import make_env, record_stream
from tests.support.pubsub import make_topics, unique

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("stack")]

RECORDS = 40
UNBOUNDED = 1_000_000
WAIT_S = 90.0


class CountAttempts(MapFunction):
    """Pass records through; append this task attempt's number to a file when opened."""

    def __init__(self, path: str) -> None:
        self._path = path

    def open(self, runtime_context: RuntimeContext) -> None:
        with open(self._path, "a") as f:
            f.write(f"{runtime_context.get_attempt_number()}\n")

    def map(self, value: Any) -> Any:
        return value


def record(i: int) -> dict:
    return {"i": i, "d": f"t{i % 2}"}


def run(tmp_path, sink_of_stream, *, keyed: bool = False, extra: dict | None = None):
    """Run ``record`` x RECORDS into the sink; return (attempts, status, failure text)."""
    from py4j.protocol import Py4JJavaError
    from pyflink.java_gateway import get_gateway

    attempts = tmp_path / "attempts"
    env = make_env(
        parallelism=1, checkpoint_ms=500, process_workers=True, restarts=UNBOUNDED, extra=extra
    )
    ds = record_stream(env, RECORDS, record).map(CountAttempts(str(attempts)))
    if keyed:
        ds = ds.key_by(lambda r: r["d"])
    ds.sink_to(sink_of_stream(tmp_path))
    client = env.execute_async("non-retriable errors")
    # The local MiniCluster shuts down with its job, so wait on the result, not the status.
    result = client._j_job_client.getJobExecutionResult()
    unit = get_gateway().jvm.java.util.concurrent.TimeUnit
    status, failure = "FINISHED", ""
    try:
        result.get(int(WAIT_S * 1000), unit.MILLISECONDS)
    except Py4JJavaError as exc:
        chain = []
        j = exc.java_exception
        while j is not None:
            chain.append(f"{j.getClass().getName()}: {j.getMessage()}")
            j = j.getCause()
        failure = "\n".join(chain)
        status = "FAILED"
        if chain[0].startswith("java.util.concurrent.TimeoutException"):
            status = "RUNNING"  # restarting still: a failure was not suppressed
            client.cancel().result()
    lines = attempts.read_text().split() if attempts.exists() else []
    return lines, status, failure


def assert_ended_once(result, message: str, *, map_may_not_open: bool = False) -> None:
    attempts, status, failure = result
    assert status == "FAILED", (status, attempts)
    expected = [[], ["0"]] if map_may_not_open else [["0"]]
    assert attempts in expected, f"{len(attempts)} attempts: the job restarted"
    assert "org.apache.flink.runtime.execution.SuppressRestartsException" in failure, failure
    assert message in failure, failure[-3000:]


# -- the core writer: resolver and serializer ------------------------------------------------


def resolve_none_at_7(r: dict, ctx) -> FileDestination | None:
    return None if r["i"] == 7 else FileDestination.of(r["d"])


def resolve_raising_at_7(r: dict, ctx) -> FileDestination:
    if r["i"] == 7:
        raise KeyError("region")
    return FileDestination.of(r["d"])


def serialize_raising_at_7(r: dict, ctx) -> dict:
    if r["i"] == 7:
        raise ValueError("no amount")
    return r


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
def test_a_resolver_returning_none_ends_the_job_once(tmp_path, keyed):
    result = run(tmp_path, lambda d: FileSink(str(d), resolve_none_at_7), keyed=keyed)
    assert_ended_once(result, "returned None for record {'d': 't1', 'i': 7}")


def test_a_resolver_raising_ends_the_job_once(tmp_path):
    result = run(tmp_path, lambda d: FileSink(str(d), resolve_raising_at_7))
    assert_ended_once(result, "raised KeyError: 'region' for record {'d': 't1', 'i': 7}")


def test_a_serializer_raising_ends_the_job_once(tmp_path):
    result = run(
        tmp_path,
        lambda d: FileSink(str(d), lambda r, c: FileDestination.of("a"), serialize_raising_at_7),
    )
    assert_ended_once(result, "raised ValueError: no amount for record {'d': 't1', 'i': 7}")


# -- the real Pub/Sub sink against the emulator ----------------------------------------------


def pubsub_sink(project: str, prefix: str, *, create: bool = False, serializer=None) -> PubSubSink:
    builder = (
        PubSubSink.builder()
        .set_destination_resolver(_TopicPerD(project, prefix))
        .set_serializer(serializer or PubSubSerializationSchema.payload(lambda r: b"x"))
        .set_writer_options(
            PubSubWriterOptions.builder()
            .max_created_destinations(1)
            .retry_deadline(timedelta(seconds=5))
            .build()
        )
    )
    if create:
        builder = builder.set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
    return builder.build()


class _TopicPerD:
    def __init__(self, project: str, prefix: str) -> None:
        self.project = project
        self.prefix = prefix

    def resolve(self, r: dict, ctx) -> TopicDestination:
        return TopicDestination.of(self.project, f"{self.prefix}-{r['d']}")


def test_a_missing_topic_under_create_never_ends_the_job_once(tmp_path, project):
    prefix = unique("never")
    result = run(tmp_path, lambda d: pubsub_sink(project, prefix))
    assert_ended_once(result, "does not exist and the create disposition is CREATE_NEVER")


def test_the_creation_bound_reached_ends_the_job_once(tmp_path, project):
    prefix = unique("bound")  # two new topics, one may be created
    result = run(tmp_path, lambda d: pubsub_sink(project, prefix, create=True))
    assert_ended_once(result, "max_created_destinations=1")


def payload_of_a_dict(r: dict, ctx) -> Any:
    return {"not": "bytes"}


def test_a_serializer_of_the_wrong_type_ends_the_job_once(tmp_path, project):
    prefix = unique("wrongtype")
    make_topics(project, [f"{prefix}-t0", f"{prefix}-t1"])
    result = run(tmp_path, lambda d: pubsub_sink(project, prefix, serializer=payload_of_a_dict))
    assert_ended_once(result, "returned dict for record {'d': 't0', 'i': 0}")


# -- the writer's open() and a destination's creation ----------------------------------------


def test_python_metrics_off_on_the_worker_ends_the_job_once(tmp_path, monkeypatch):
    """The job-build check is skipped, as on a cluster whose own configuration turns metrics off."""
    monkeypatch.setattr(runtime, "_check_python_metrics", lambda conf, config: None)
    result = run(
        tmp_path,
        # Its own chain: a map taken into the writer's operator opens after the writer's open()
        # failed, so it could not count the attempt.
        lambda d: FileSink(str(d), lambda r, c: FileDestination.of("a"), chain_with_upstream=False),
        extra={"python.metric.enabled": "false"},
    )
    # The writer fails in open(): the map's task, opening beside it, may be cancelled before its
    # Python worker ran the map's open(). Every attempt would fail the same way, so a restart
    # would also show as a job still running (status) or a second attempt.
    assert_ended_once(
        result, "Python metrics are disabled (python.metric.enabled=false)", map_may_not_open=True
    )


class SchemaMismatchFactory(FileWriterFactory):
    """Refuses to create a destination's writer the way a sink refuses a schema it cannot use."""

    def create_writer(self, destination: FileDestination) -> FileWriter:
        raise ConfigurationError(
            f"sink '{self.sink}': table {destination}: the serializer's schema does not match "
            "the table's (column amount: STRING here, NUMERIC in the table)"
        )


def test_a_schema_mismatch_at_creation_ends_the_job_once(tmp_path):
    def sink(directory) -> DynamicSink:
        return DynamicSink(
            SinkConfig(
                sink_name="file-sink",
                factory=SchemaMismatchFactory(str(directory)),
                resolver=lambda r, c: FileDestination.of(r["d"]),
                serializer=lambda r, c: r,
            )
        )

    assert_ended_once(run(tmp_path, sink), "the serializer's schema does not match")


# -- the control: a transient error still restarts -------------------------------------------


class FailingFirstAttemptWriter(FileWriter):
    def flush(self) -> list[FailedRecord]:
        info = self._factory.info
        if info is not None and info.attempt_number == 0:
            raise WriteError(f"sink 'file-sink': {self.destination}: UNAVAILABLE after retries")
        return super().flush()


class FailingFirstAttemptFactory(FileWriterFactory):
    def create_writer(self, destination: FileDestination) -> FileWriter:
        return FailingFirstAttemptWriter(destination, self)


def test_a_transient_error_still_restarts_the_job(tmp_path):
    out = tmp_path / "out"
    out.mkdir()

    def sink(directory) -> DynamicSink:
        return DynamicSink(
            SinkConfig(
                sink_name="file-sink",
                factory=FailingFirstAttemptFactory(str(out)),
                resolver=lambda r, c: FileDestination.of(r["d"]),
                serializer=lambda r, c: r,
            )
        )

    attempts, status, failure = run(tmp_path, sink)
    assert status == "FINISHED", (status, attempts, failure)
    assert attempts == ["0", "1"], attempts
    lines = sum(len(p.read_text().splitlines()) for p in out.glob("t*.jsonl"))
    assert lines == RECORDS
