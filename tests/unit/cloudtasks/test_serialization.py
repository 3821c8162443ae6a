"""CloudTasksSerializationSchema: the HTTP task of a record, every function called (record, ctx)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import cloudpickle
import pytest
from google.cloud import tasks_v2

from pyflink_gcp.cloudtasks import CloudTasksSerializationSchema
from pyflink_gcp.core import ConfigurationError, SerializerError, WriterContext
from pyflink_gcp.core.functions import RecordOnly

URL = "http://127.0.0.1:9/hooks"


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


def test_every_function_is_called_with_the_record_and_the_context() -> None:
    seen: list[tuple[str, Any, Any]] = []

    def recorder(label: str, value: Any) -> Any:
        def fn(record: Any, ctx: Any) -> Any:
            seen.append((label, record, ctx))
            return value

        return fn

    schema = (
        CloudTasksSerializationSchema.http_target(recorder("url", URL))
        .with_body(recorder("body", b"b"))
        .with_headers(recorder("headers", {"X-A": "1"}))
        .with_task_id(recorder("task id", "t-1"))
        .with_schedule_time(recorder("schedule", 1_000))
    )
    ctx = WriterContext()
    ctx.subtask_index = 3
    task = schema.serialize("rec", ctx)
    assert [label for label, _, _ in seen] == ["url", "body", "headers", "task id", "schedule"]
    assert all(record == "rec" and context is ctx for _, record, context in seen)
    assert (task.name, task.http_request.url, task.http_request.body) == ("t-1", URL, b"b")


def test_context_reaches_a_function_that_routes_by_subtask() -> None:
    schema = CloudTasksSerializationSchema.http_target(
        lambda r, ctx: f"{URL}/{ctx.subtask_index}/{r}"
    )
    ctx = WriterContext()
    ctx.subtask_index = 5
    assert schema.serialize("x", ctx).http_request.url == f"{URL}/5/x"


def test_one_argument_functions_are_adapted_once_when_the_schema_is_built() -> None:
    def body(record: Any) -> bytes:
        return b"one"

    def task_id(record: Any, ctx: Any) -> str:
        return "two"

    schema = CloudTasksSerializationSchema.http_target(URL).with_body(body).with_task_id(task_id)
    # Stored adapted: the hot path calls (record, ctx) without inspecting anything.
    assert isinstance(schema._body, RecordOnly) and schema._body.fn is body
    assert schema._task_id is task_id
    chained = schema.with_http_method("PUT")
    assert chained._body is schema._body and chained._task_id is task_id
    task = chained.serialize("r", WriterContext())
    assert (task.http_request.body, task.name) == (b"one", "two")


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


def test_schema_fixed_parts_and_per_record_parts() -> None:
    """Fixed URL, method and headers come from the encoded prototype; per-record functions
    and an explicit Content-Type header still override it."""
    schema = (
        CloudTasksSerializationSchema.http_target(lambda r: f"https://h.example/{r}")
        .with_http_method("PUT")
        .with_body(lambda r: r, content_type="text/plain")
        .with_headers({"Content-Type": "application/x-custom", "X-A": "1"})
    )
    first, second = schema.serialize("a"), schema.serialize("b")
    assert first.http_request.url == "https://h.example/a"
    assert second.http_request.url == "https://h.example/b"
    assert second.http_request.body == b"b"
    assert second.http_request.http_method == tasks_v2.HttpMethod.PUT
    assert dict(second.http_request.headers) == {
        "Content-Type": "application/x-custom",
        "X-A": "1",
    }
    dynamic = CloudTasksSerializationSchema.http_target(URL).with_headers(lambda r: {"X-R": r})
    assert dict(dynamic.serialize("z").http_request.headers) == {"X-R": "z"}
    assert dict(dynamic.serialize("y").http_request.headers) == {"X-R": "y"}


def _named_task_id(record: Any) -> float:
    return 1.5


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
            CloudTasksSerializationSchema.http_target(URL).with_task_id(_named_task_id),
            "task id function .*_named_task_id returned float",
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


def test_schema_validates_static_parts_with_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="http:// or https://"):
        CloudTasksSerializationSchema.http_target("ftp://x")
    with pytest.raises(ConfigurationError, match="unknown HTTP method"):
        CloudTasksSerializationSchema.http_target(URL).with_http_method("FETCH")
    with pytest.raises(ConfigurationError, match="with_headers"):
        CloudTasksSerializationSchema.http_target(URL).with_headers({"a": 1})  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="http_target"):
        CloudTasksSerializationSchema.http_target(42)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="task id function"):
        CloudTasksSerializationSchema.http_target(URL).with_task_id("id")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="body function"):
        CloudTasksSerializationSchema.http_target(URL).with_body(b"x")  # type: ignore[arg-type]


def test_schema_pickles_with_its_adapted_functions() -> None:
    schema = (
        CloudTasksSerializationSchema.http_target(URL)
        .with_body(lambda r: r.encode())
        .with_task_id(lambda r, ctx: f"{r}-{ctx.subtask_index}")
    )
    copy = cloudpickle.loads(cloudpickle.dumps(schema))
    task = copy.serialize("hi", WriterContext())
    assert (task.http_request.body, task.name) == (b"hi", "hi-0")
