"""The Cloud Tasks writer against the emulator, without Flink: the sink's own SinkWriter path."""

from __future__ import annotations

import dataclasses
import json
import socket
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from pyflink_gcp.cloudtasks import (
    CloudTasksSerializationSchema,
    CloudTasksSink,
    CloudTasksWriterOptions,
    QueueDestination,
)
from pyflink_gcp.core import (
    DestinationNotFoundError,
    FailureHandler,
    WriteError,
)
from pyflink_gcp.tools.emulators import EmulatorStack
from tests.integration.cloudtasks.support import (
    LOCATION,
    create_queues,
    suffix,
    wait_for_dispatches,
)
from tests.support.dead_letters import MemoryDeadLetterQueue
from tests.support.writers import open_writer

pytestmark = pytest.mark.integration


def _sink(
    project: str,
    queues: list[str],
    url: str,
    *,
    task_ids: bool = False,
    options: CloudTasksWriterOptions | None = None,
    handler: FailureHandler | None = None,
    endpoint: str | None = None,
) -> CloudTasksSink:
    ids = [q.rsplit("/", 1)[1] for q in queues]

    def resolve(record: dict[str, Any], ctx: Any) -> QueueDestination:
        return QueueDestination.of(project, LOCATION, ids[record["customer"] % len(ids)])

    schema = (
        CloudTasksSerializationSchema.http_target(lambda r: f"{url}/{r['customer']}")
        .with_body(lambda r: json.dumps(r).encode(), content_type="application/json")
        .with_headers(lambda r: {"X-Customer": str(r["customer"])})
    )
    if task_ids:
        schema = schema.with_task_id(lambda r: f"order-{r['id']}")
    builder = (
        CloudTasksSink.builder()
        .set_destination_resolver(resolve)
        .set_serializer(schema)
        .set_writer_options(options or CloudTasksWriterOptions())
        .set_failure_handler(handler or FailureHandler.fail_job())
    )
    if endpoint is not None:
        builder.set_endpoint(endpoint)
    return builder.build()


def test_tasks_reach_the_receiver_with_body_headers_and_queue(
    stack: EmulatorStack, project: str
) -> None:
    run = suffix()
    queues = create_queues(stack, [f"it-{run}-{i}" for i in range(4)])
    prefix = f"/it/{run}"
    writer = open_writer(_sink(project, queues, stack.receiver_url + prefix))
    records = [{"id": i, "customer": i % 10, "amount": i * 1.5} for i in range(400)]
    for record in records:
        writer.write(record)
    writer.flush()
    factory = writer.config.factory
    assert factory.created == 400
    writer.close()

    got = wait_for_dispatches(stack, prefix, 400)
    assert len(got) == 400
    by_id = {json.loads(r["body"])["id"]: r for r in got}
    assert sorted(by_id) == list(range(400))
    for record in records:
        request = by_id[record["id"]]
        assert json.loads(request["body"]) == record
        assert request["method"] == "POST"
        assert request["path"] == f"{prefix}/{record['customer']}"
        assert request["headers"]["x-customer"] == str(record["customer"])
        assert request["headers"]["content-type"] == "application/json"
        assert request["headers"]["x-cloudtasks-queuename"] == f"it-{run}-{record['customer'] % 4}"


def test_lru_cap_on_queue_writers_and_context_functions(stack: EmulatorStack, project: str) -> None:
    """With max_active_destinations below the number of queues, releasing the least recently
    used queue writer (flushing it first when it has calls in flight) loses no task, and
    (record, ctx) functions of the schema see the writer's context."""
    run = suffix()
    queues = create_queues(stack, [f"it-{run}-{i}" for i in range(4)])
    prefix = f"/it/{run}"
    options = (
        CloudTasksWriterOptions.builder()
        .max_active_destinations(2)
        .max_in_flight_requests(16)
        .build()
    )
    ids = [q.rsplit("/", 1)[1] for q in queues]
    base = stack.receiver_url + prefix
    schema = (
        CloudTasksSerializationSchema.http_target(
            lambda r, ctx: f"{base}/{ctx.subtask_index}/{r['id']}"
        )
        .with_body(lambda r: str(r["id"]))
        .with_task_id(lambda r, ctx: f"t-{ctx.subtask_index}-{r['id']}")
    )
    sink = (
        CloudTasksSink.builder()
        .set_destination_resolver(
            lambda r, ctx: QueueDestination.of(project, LOCATION, ids[r["id"] % 4])
        )
        .set_serializer(schema)
        .set_writer_options(options)
        .build()
    )
    writer = open_writer(sink)
    for i in range(200):
        writer.write({"id": i})
        assert len(writer.registry) <= 2
    writer.flush()
    factory = writer.config.factory
    assert factory.created == 200
    assert writer.registry.evicted >= 100  # the records alternate over four queues
    writer.close()

    got = wait_for_dispatches(stack, prefix, 200)
    assert sorted(int(r["body"]) for r in got) == list(range(200))
    assert {r["path"] for r in got} == {f"{prefix}/0/{i}" for i in range(200)}
    assert {r["headers"]["x-cloudtasks-taskname"] for r in got} == {f"t-0-{i}" for i in range(200)}


def test_task_ids_make_a_replay_idempotent(stack: EmulatorStack, project: str) -> None:
    run = suffix()
    queues = create_queues(stack, [f"it-{run}-a", f"it-{run}-b"])
    prefix = f"/it/{run}"
    sink = _sink(project, queues, stack.receiver_url + prefix, task_ids=True)
    records = [{"id": i, "customer": i % 3} for i in range(150)]

    first = open_writer(sink)
    for record in records[:100]:
        first.write(record)
    first.flush()
    first.close()
    # The "restart": a new subtask replays everything from the start.
    second = open_writer(sink)
    for record in records:
        second.write(record)
    second.flush()
    factory = second.config.factory
    assert (factory.created, factory.already_existed) == (50, 100)
    second.close()

    got = wait_for_dispatches(
        stack, prefix, 150, distinct=lambda r: r["headers"]["x-cloudtasks-taskname"]
    )
    ids = Counter(r["headers"]["x-cloudtasks-taskname"] for r in got)
    assert len(ids) == 150 and set(ids.values()) == {1}
    assert set(ids) == {f"order-{i}" for i in range(150)}


def test_missing_queue_is_a_clear_error_checked_once(stack: EmulatorStack, project: str) -> None:
    run = suffix()
    (queue,) = create_queues(stack, [f"it-{run}"])
    sink = _sink(project, [queue, f"{queue}-missing"], stack.receiver_url + f"/it/{run}")
    writer = open_writer(sink)
    factory = writer.config.factory
    writer.write({"id": 0, "customer": 0})
    writer.flush()  # the known queue's check is settled by its flush at the latest
    calls: list[str] = []
    check = factory.queue_check
    stub = check._stub

    class Counting:
        def __call__(self, request: Any, **kwargs: Any) -> Any:
            calls.append(request.name)
            return stub(request, **kwargs)

        def future(self, request: Any, **kwargs: Any) -> Any:
            calls.append(request.name)
            return stub.future(request, **kwargs)

    check._stub = Counting()
    # The missing queue's check does not block the write: its task is sent meanwhile.
    writer.write({"id": 1, "customer": 1})
    with pytest.raises(DestinationNotFoundError) as info:
        writer.flush()
    message = str(info.value)
    assert f"'{queue}-missing' does not exist" in message
    assert "never creates queues" in message and "cloudtasks-sink" in message
    assert "gcloud tasks queues create" in message
    # A known queue is checked once per subtask, even after its writer was released.
    writer.registry.close_all()
    writer.write({"id": 2, "customer": 0})
    writer.flush()
    # The missing queue: its first attempt, then the full check; the known queue not again.
    assert calls == [f"{queue}-missing", f"{queue}-missing"]
    writer.close()


def test_missing_queue_without_the_check_fails_at_flush(stack: EmulatorStack, project: str) -> None:
    run = suffix()
    options = CloudTasksWriterOptions.builder().verify_queues(False).build()
    sink = _sink(
        project,
        [f"projects/{project}/locations/{LOCATION}/queues/nope-{run}"],
        stack.receiver_url,
        options=options,
    )
    writer = open_writer(sink)
    writer.write({"id": 0, "customer": 0})
    with pytest.raises(DestinationNotFoundError, match=f"queues/nope-{run}' does not exist"):
        writer.flush()
    writer.close()


def test_oversized_and_invalid_tasks_go_to_the_failure_handler(
    stack: EmulatorStack, project: str
) -> None:
    run = suffix()
    queues = create_queues(stack, [f"it-{run}"])
    prefix = f"/it/{run}"
    dlq = MemoryDeadLetterQueue()
    schema = (
        CloudTasksSerializationSchema.http_target(stack.receiver_url + prefix)
        .with_body(lambda r: r["body"])
        .with_task_id(lambda r: r["id"])
    )
    sink = (
        CloudTasksSink.builder()
        .set_destination_resolver(lambda r, ctx: QueueDestination.from_resource_name(queues[0]))
        .set_serializer(schema)
        .set_failure_handler(FailureHandler.send_to_dead_letter_queue(dlq))
        .build()
    )
    writer = open_writer(sink)
    big = b"x" * (100 * 1024 + 1)
    for record in (
        {"id": "small", "body": b"ok"},
        {"id": "big", "body": big},
        {"id": "not/valid id", "body": b"bad"},
    ):
        writer.write(record)
    writer.flush()
    writer.close()
    assert [(f.attributes.get("task"), f.payload[:3]) for f in dlq.sent] == [
        ("big", b"xxx"),
        ("not/valid id", b"bad"),
    ]
    assert "exceeds the 102400-byte limit" in dlq.sent[0].reason
    assert dlq.sent[0].payload == big
    assert "invalid task id" in dlq.sent[1].reason
    assert writer.router.dead_lettered == 2
    got = wait_for_dispatches(stack, prefix, 1, settle=1.0)
    assert [r["body"] for r in got] == [b"ok"]


def test_oversized_task_fails_the_job_by_default(stack: EmulatorStack, project: str) -> None:
    run = suffix()
    queues = create_queues(stack, [f"it-{run}"])
    sink = (
        CloudTasksSink.builder()
        .set_destination_resolver(lambda r, ctx: QueueDestination.from_resource_name(queues[0]))
        .set_serializer(
            # bytes(n): n zero bytes (a builtin is a function of the record).
            CloudTasksSerializationSchema.http_target(stack.receiver_url).with_body(bytes)
        )
        .build()
    )
    writer = open_writer(sink)
    writer.write(200 * 1024)
    with pytest.raises(Exception, match="exceeds the 102400-byte limit.*fail_job"):
        writer.flush()
    writer.close()


def test_unreachable_service_fails_after_the_retry_deadline(project: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    options = (
        CloudTasksWriterOptions.builder()
        .retry_deadline(timedelta(seconds=1))
        .rpc_timeout(timedelta(seconds=1))
        .build()
    )
    for verify in (True, False):
        sink = _sink(
            project,
            [f"projects/{project}/locations/{LOCATION}/queues/q"],
            "http://127.0.0.1:9",
            options=dataclasses.replace(options, verify_queues=verify),
            endpoint=f"http://127.0.0.1:{port}",
        )
        writer = open_writer(sink)
        with pytest.raises(WriteError, match="UNAVAILABLE|DEADLINE_EXCEEDED"):
            writer.write({"id": 0, "customer": 0})
            writer.flush()
        writer.close()
