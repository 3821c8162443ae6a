"""Destinations, serialization schema, options and builder: pure logic, no emulator."""

from __future__ import annotations

import pickle
import threading
from datetime import UTC, datetime, timedelta

import cloudpickle
import pytest
from google.cloud import tasks_v2

from pyflink_gcp.cloudtasks import (
    CloudTasksSerializationSchema,
    CloudTasksSink,
    CloudTasksWriterOptions,
    QueueDestination,
)
from pyflink_gcp.cloudtasks.serialization import TaskSerializer
from pyflink_gcp.core import ConfigurationError, FailureHandler, SerializerError

URL = "http://127.0.0.1:9/hooks"


# -- QueueDestination ----------------------------------------------------------------------------


def test_queue_destination_is_its_resource_name() -> None:
    queue = QueueDestination.of("p", "us-central1", "webhooks-1")
    assert str(queue) == "projects/p/locations/us-central1/queues/webhooks-1"
    assert (queue.project, queue.location, queue.queue) == ("p", "us-central1", "webhooks-1")
    assert queue == QueueDestination("p", "us-central1", "webhooks-1")
    assert hash(queue) == hash(QueueDestination("p", "us-central1", "webhooks-1"))
    assert queue != QueueDestination.of("p", "us-central1", "webhooks-2")
    assert pickle.loads(pickle.dumps(queue)) == queue
    assert QueueDestination.from_resource_name(str(queue)) == queue


@pytest.mark.parametrize(
    ("project", "location", "queue"),
    [("", "l", "q"), ("p", "", "q"), ("p", "l", ""), ("p", "l", "under_score"), ("p", "l", "a/b")],
)
def test_queue_destination_rejects_impossible_names(
    project: str, location: str, queue: str
) -> None:
    with pytest.raises(ValueError):
        QueueDestination.of(project, location, queue)


def test_queue_destination_parse_rejects_other_names() -> None:
    with pytest.raises(ValueError, match="not a Cloud Tasks queue"):
        QueueDestination.from_resource_name("projects/p/topics/t")


def test_queue_destination_is_immutable() -> None:
    queue = QueueDestination.of("p", "l", "q")
    with pytest.raises(AttributeError):
        queue._name = "x"  # type: ignore[misc]


# -- CloudTasksSerializationSchema ---------------------------------------------------------------


def test_schema_builds_the_http_task() -> None:
    schema = (
        CloudTasksSerializationSchema.http_target(lambda r: f"{URL}/{r['c']}")
        .with_body(lambda r: f'{{"id": {r["id"]}}}', content_type="application/json")
        .with_headers(lambda r: {"X-Customer": str(r["c"])})
        .with_http_method("put")
        .with_task_id(lambda r: r["id"])
        .with_schedule_time(lambda r: 1_700_000_000_123)
    )
    task = schema.serialize({"id": 7, "c": 3})
    assert task.name == "7"
    assert task.http_request.url == f"{URL}/3"
    assert task.http_request.http_method == tasks_v2.HttpMethod.PUT
    assert task.http_request.body == b'{"id": 7}'
    assert dict(task.http_request.headers) == {
        "Content-Type": "application/json",
        "X-Customer": "3",
    }
    assert task.schedule_time.ToMilliseconds() == 1_700_000_000_123
    assert "with_task_id" in repr(schema)


def test_schema_defaults_and_static_parts() -> None:
    task = (
        CloudTasksSerializationSchema.http_target(URL)
        .with_headers({"X-Static": "1"})
        .with_schedule_time(lambda r: datetime(2030, 1, 2, tzinfo=UTC))
        .serialize("record")
    )
    assert task.http_request.http_method == tasks_v2.HttpMethod.POST
    assert task.http_request.body == b""
    assert task.name == ""
    assert dict(task.http_request.headers) == {"X-Static": "1"}
    assert task.schedule_time.ToDatetime(tzinfo=UTC) == datetime(2030, 1, 2, tzinfo=UTC)


def test_schema_none_means_absent() -> None:
    task = (
        CloudTasksSerializationSchema.http_target(URL)
        .with_body(lambda r: None)
        .with_headers(lambda r: None)
        .with_task_id(lambda r: None)
        .with_schedule_time(lambda r: None)
        .serialize(1)
    )
    assert task.name == "" and task.http_request.body == b""
    assert not task.HasField("schedule_time")


def test_schema_is_immutable_when_chained() -> None:
    base = CloudTasksSerializationSchema.http_target(URL)
    with_id = base.with_task_id(lambda r: "x")
    assert not base.has_task_id and with_id.has_task_id


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (CloudTasksSerializationSchema.http_target(lambda r: 5), "URL function"),
        (CloudTasksSerializationSchema.http_target(URL).with_body(lambda r: 5), "body function"),
        (
            CloudTasksSerializationSchema.http_target(URL).with_headers(lambda r: {"a": 1}),
            "headers function",
        ),
        (
            CloudTasksSerializationSchema.http_target(URL).with_task_id(lambda r: 1.5),
            "task id function",
        ),
        (
            CloudTasksSerializationSchema.http_target(URL).with_schedule_time(lambda r: "soon"),
            "schedule time function",
        ),
    ],
)
def test_schema_wrong_types_name_the_function(
    schema: CloudTasksSerializationSchema, message: str
) -> None:
    with pytest.raises(SerializerError, match=message):
        schema.serialize({"id": 1})


def test_schema_validates_static_parts() -> None:
    with pytest.raises(ValueError, match="http:// or https://"):
        CloudTasksSerializationSchema.http_target("ftp://x")
    with pytest.raises(ValueError, match="unknown HTTP method"):
        CloudTasksSerializationSchema.http_target(URL).with_http_method("FETCH")
    with pytest.raises(TypeError):
        CloudTasksSerializationSchema.http_target(URL).with_headers({"a": 1})  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        CloudTasksSerializationSchema.http_target(42)  # type: ignore[arg-type]


def test_schema_pickles() -> None:
    schema = CloudTasksSerializationSchema.http_target(URL).with_body(lambda r: r.encode())
    copy = cloudpickle.loads(cloudpickle.dumps(schema))
    assert copy.serialize("hi").http_request.body == b"hi"


# -- options -------------------------------------------------------------------------------------


def test_options_builder_and_validation() -> None:
    options = (
        CloudTasksWriterOptions.builder()
        .max_in_flight(64)
        .channel_count(2)
        .retry_deadline(timedelta(seconds=5))
        .max_task_size_bytes(1000)
        .verify_queues(False)
        .build()
    )
    assert (options.max_in_flight, options.channel_count, options.verify_queues) == (64, 2, False)
    assert CloudTasksWriterOptions().max_task_size_bytes == 100 * 1024
    for bad in ({"max_in_flight": 0}, {"channel_count": 0}, {"rpc_timeout": timedelta(0)}):
        with pytest.raises(ValueError):
            CloudTasksWriterOptions(**bad)  # type: ignore[arg-type]


# -- builder -------------------------------------------------------------------------------------


def _resolver(record: object, ctx: object) -> QueueDestination:
    return QueueDestination.of("p", "l", "q")


def test_builder_requires_resolver_and_serializer() -> None:
    with pytest.raises(ConfigurationError, match="set_destination_resolver"):
        CloudTasksSink.builder().set_serializer(
            CloudTasksSerializationSchema.http_target(URL)
        ).build()
    with pytest.raises(ConfigurationError, match="set_serializer"):
        CloudTasksSink.builder().set_destination_resolver(_resolver).build()
    with pytest.raises(ConfigurationError, match="CloudTasksWriterOptions"):
        (
            CloudTasksSink.builder()
            .set_destination_resolver(_resolver)
            .set_serializer(CloudTasksSerializationSchema.http_target(URL))
            .set_writer_options({"max_in_flight": 3})  # type: ignore[arg-type]
            .build()
        )


def test_builder_names_what_does_not_pickle() -> None:
    lock = threading.Lock()

    def resolver(record: object, ctx: object) -> QueueDestination:
        with lock:
            return QueueDestination.of("p", "l", "q")

    with pytest.raises(ConfigurationError, match="'lock'"):
        (
            CloudTasksSink.builder()
            .set_sink_name("hooks")
            .set_destination_resolver(resolver)
            .set_serializer(CloudTasksSerializationSchema.http_target(URL))
            .build()
        )


def test_builder_wraps_a_task_callable_and_pickles() -> None:
    sink = (
        CloudTasksSink.builder()
        .set_sink_name("hooks")
        .set_destination_resolver(_resolver)
        .set_serializer(lambda r: tasks_v2.Task(http_request=tasks_v2.HttpRequest(url=URL)))
        .set_failure_handler(FailureHandler.log_and_drop())
        .build()
    )
    config = sink._sink_config()
    assert sink.name == "hooks" and config.sink_name == "hooks"
    assert isinstance(config.serializer, TaskSerializer)
    copy = cloudpickle.loads(cloudpickle.dumps(config))
    assert copy.factory.options == CloudTasksWriterOptions()
