"""PyFlink jobs writing through the Cloud Tasks sink; the emulator dispatches to the receiver.

Every job here costs a MiniCluster start, so assertions are combined: one job checks routing,
bodies, headers, idempotent replays and the failure handler through a restart; two short jobs
check that configuration mistakes fail the job with a clear message.
"""

from __future__ import annotations

import json
import time
import zlib
from collections import Counter, defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from pyflink_gcp.cloudtasks import (
    CloudTasksSerializationSchema,
    CloudTasksSink,
    CloudTasksWriterOptions,
    QueueDestination,
)
from pyflink_gcp.core import FailureHandler
from pyflink_gcp.tools.emulators import EmulatorStack
from tests.integration.cloudtasks.support import (
    LOCATION,
    create_queues,
    received_under,
    suffix,
    wait_for_dispatches,
)
from tests.support.dead_letters import FileDeadLetterQueue
from tests.support.jobs import FailOnce, make_env, record_stream
from tests.support.restore import Failover

pytestmark = pytest.mark.e2e

RECORDS = 3000
FAIL_AT = 2500  # 2/3 into the second source split (1500-2999): after a few checkpoints
AUDIT_FAIL_AT = 2200
OVERSIZED_EVERY = 500  # record ids 7, 507, 1007 ... carry a body over the 100 KB limit


def customer_queue(customer: str) -> int:
    """A stable hash: Python's hash() of a str differs between worker processes."""
    return zlib.crc32(customer.encode()) % 4


def make_record(i: int) -> dict[str, Any]:
    return {"id": i, "customer": f"customer-{i % 37}", "amount": round(i * 0.37, 2)}


def slow(record: dict[str, Any]) -> dict[str, Any]:
    time.sleep(0.002)  # several checkpoints happen while the job runs
    return record


class RecordingTaskIds:
    """The task id of a record, appended to a file each time the writer serializes it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, record: dict[str, Any]) -> str:
        task_id = f"order-{record['id']}"
        with open(self.path, "a") as f:
            f.write(task_id + "\n")
        return task_id

    def read(self) -> list[str]:
        with open(self.path) as f:
            return f.read().split()


def _failing_text(env: Any) -> str:
    # py4j wraps the job's failure: no narrower type to expect.
    with pytest.raises(Exception) as info:
        env.execute("cloudtasks-failing")
    return str(info.value)


def test_dispatch_routing_replays_and_failures_through_a_restart(
    stack: EmulatorStack, project: str, tmp_path: Path
) -> None:
    run = suffix()
    queue_ids = [f"webhooks-{run}-{i}" for i in range(4)]
    create_queues(stack, [*queue_ids, f"audit-{run}"])
    base = f"{stack.receiver_url}/e2e/{run}"
    dlq = FileDeadLetterQueue(str(tmp_path / "dead-letters.jsonl"))

    # Failures are injected inside each writer (its resolver kills the Python worker once), so
    # the records it sent since the last checkpoint are sent again after the restart. A
    # resolver that raises would end the job instead: that is a contract error, which no
    # restart fixes.
    failover = Failover(tmp_path / "failover")
    # The webhooks failure lets a few records through after the checkpoint, so that the restart
    # replays records this writer serialized (the test asserts it sent some twice).
    fail_once = FailOnce(
        str(tmp_path / "failed-once"),
        lambda r: r["id"] == FAIL_AT,
        hard=True,
        after_checkpoint=failover.checkpoints,
        then=5,
    )
    audit_fail_once = FailOnce(
        str(tmp_path / "audit-failed-once"),
        lambda r: r["id"] == AUDIT_FAIL_AT,
        hard=True,
        after_checkpoint=failover.checkpoints,
    )
    audit_queue = QueueDestination.of(project, LOCATION, f"audit-{run}")
    task_ids = RecordingTaskIds(str(tmp_path / "task-ids.txt"))

    def route(record: dict[str, Any], ctx: Any) -> QueueDestination:
        fail_once.map(record)
        return QueueDestination.of(project, LOCATION, queue_ids[customer_queue(record["customer"])])

    # Sink A: one webhook per record, idempotent task ids, four queues by customer; schema
    # functions of both shapes, (record, ctx) and (record).
    webhooks = (
        CloudTasksSink.builder()
        .set_sink_name("webhooks")
        .set_destination_resolver(route)
        .set_serializer(
            CloudTasksSerializationSchema.http_target(lambda r: f"{base}/a/{r['customer']}")
            .with_body(lambda r, ctx: json.dumps(r).encode(), content_type="application/json")
            .with_headers(lambda r: {"X-Customer": r["customer"]})
            .with_task_id(task_ids)
        )
        .build()
    )
    # Sink B: no task ids (a replay may duplicate), oversized bodies to the dead-letter queue,
    # a smaller bundle and call window than the defaults.
    audit = (
        CloudTasksSink.builder()
        .set_sink_name("audit")
        .set_destination_resolver(lambda r, ctx: audit_fail_once.map(r) and audit_queue)
        .set_serializer(
            CloudTasksSerializationSchema.http_target(lambda r: f"{base}/b/{r['id']}")
            .with_http_method("PUT")
            .with_body(lambda r: b"x" * 150_000 if r["id"] % OVERSIZED_EVERY == 7 else str(r["id"]))
        )
        .set_failure_handler(FailureHandler.send_to_dead_letter_queue(dlq))
        .set_writer_options(
            CloudTasksWriterOptions.builder()
            .max_buffered_records(500)
            .max_buffer_time(timedelta(milliseconds=200))
            .max_in_flight_requests(64)
            .build()
        )
        .build()
    )

    env = make_env(parallelism=2, checkpoint_ms=1000, process_workers=True, extra=failover.conf())
    records = record_stream(env, RECORDS, make_record).map(slow)
    records.sink_to(webhooks)
    records.sink_to(audit)
    env.execute("cloudtasks-e2e")
    assert (tmp_path / "failed-once").exists(), "the injected failure did not happen"
    assert (tmp_path / "audit-failed-once").exists(), "the injected failure did not happen"
    failover.assert_restored()

    # A: exactly one dispatched task per record, despite the replay.
    got = wait_for_dispatches(
        stack, f"/e2e/{run}/a/", RECORDS, distinct=lambda r: r["headers"]["x-cloudtasks-taskname"]
    )
    names = Counter(r["headers"]["x-cloudtasks-taskname"] for r in got)
    assert set(names) == {f"order-{i}" for i in range(RECORDS)}
    assert max(names.values()) == 1, names.most_common(3)
    # ... although the writer sent some of them twice: the second CreateTask of a replayed
    # record answered ALREADY_EXISTS, which the sink counts as written.
    sent = Counter(task_ids.read())
    assert set(sent) == set(names)
    replayed = [name for name, count in sent.items() if count > 1]
    assert replayed, "the restart replayed no record into the webhooks sink"
    queues_of: dict[str, set[str]] = defaultdict(set)
    for request in got:
        record = json.loads(request["body"])
        customer = record["customer"]
        assert record == make_record(record["id"])
        assert request["path"] == f"/e2e/{run}/a/{customer}"
        assert request["method"] == "POST"
        assert request["headers"]["x-customer"] == customer
        assert request["headers"]["content-type"] == "application/json"
        queues_of[customer].add(request["headers"]["x-cloudtasks-queuename"])
    assert len(queues_of) == 37
    for customer, queues in queues_of.items():
        assert queues == {queue_ids[customer_queue(customer)]}, customer
    assert {q for qs in queues_of.values() for q in qs} == set(queue_ids)

    # B: nothing lost (duplicates allowed), oversized bodies dead-lettered instead of sent.
    oversized = {i for i in range(RECORDS) if i % OVERSIZED_EVERY == 7}
    expected = set(range(RECORDS)) - oversized
    dispatched = wait_for_dispatches(
        stack, f"/e2e/{run}/b/", len(expected), distinct=lambda r: r["path"]
    )
    ids = Counter(int(r["path"].rsplit("/", 1)[1]) for r in dispatched)
    assert set(ids) == expected
    assert all(
        r["method"] == "PUT" and r["body"] == r["path"].rsplit("/", 1)[1].encode()
        for r in dispatched
    )
    duplicates = sum(ids.values()) - len(ids)
    print(f"audit sink without task ids: {duplicates} duplicate tasks after the restart")
    dead = dlq.read()
    assert {int(d["attributes"]["url"].rsplit("/", 1)[1]) for d in dead} == oversized
    assert all("exceeds the 102400-byte limit" in d["reason"] for d in dead)
    assert all(d["payload_bytes"] == 150_000 for d in dead)


def test_missing_queue_fails_the_job_naming_the_queue(stack: EmulatorStack, project: str) -> None:
    run = suffix()
    sink = (
        CloudTasksSink.builder()
        .set_sink_name("hooks")
        .set_destination_resolver(
            lambda r, ctx: QueueDestination.of(project, LOCATION, f"never-created-{run}")
        )
        .set_serializer(CloudTasksSerializationSchema.http_target(stack.receiver_url))
        .build()
    )
    env = make_env(parallelism=1, checkpoint_ms=None, restarts=0)
    record_stream(env, 10, make_record).sink_to(sink)
    text = _failing_text(env)
    assert "DestinationNotFoundError" in text
    assert f"queues/never-created-{run}' does not exist" in text
    assert "never creates queues" in text
    assert not received_under(stack, f"/e2e/{run}")


def test_resolver_returning_none_fails_the_job(stack: EmulatorStack, project: str) -> None:
    run = suffix()
    (queue,) = create_queues(stack, [f"none-{run}"])
    sink = (
        CloudTasksSink.builder()
        .set_sink_name("hooks")
        .set_destination_resolver(
            lambda r, ctx: None if r["id"] == 5 else QueueDestination.from_resource_name(queue)
        )
        .set_serializer(CloudTasksSerializationSchema.http_target(stack.receiver_url))
        .build()
    )
    env = make_env(parallelism=1, checkpoint_ms=None, restarts=0)
    record_stream(env, 10, make_record).sink_to(sink)
    text = _failing_text(env)
    assert "ResolverError" in text
    assert "sink 'hooks': destination resolver" in text
    assert "returned None for record" in text and "'id': 5" in text
