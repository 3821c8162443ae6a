"""The client room: endpoint, request encoding, call spreading, and the aio transport's
synchronous face (outcomes reach the handles, close never hangs a reader)."""

from __future__ import annotations

import socket
from typing import Any

import grpc
import pytest
from google.cloud import tasks_v2

from pyflink_gcp.cloudtasks.client import (
    CREATE_TASK,
    EMULATOR_VARIABLE,
    channel_options,
    client_header,
    create_task_caller,
    open_async_channels,
    queue_metadata,
    request_head,
    resolve_cloudtasks_endpoint,
    varint,
)
from pyflink_gcp.core.aio import AsyncChannel
from pyflink_gcp.core.endpoints import Endpoint
from pyflink_gcp.core.retry import status_name

QUEUE = "projects/p/locations/l/queues/q"
CreateTaskRequestPb = tasks_v2.CreateTaskRequest.pb()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _channel() -> tuple[AsyncChannel, Any]:
    """The sink's channel to a closed port, and its started-call function for CreateTask."""
    (channel,) = open_async_channels(Endpoint(host=f"127.0.0.1:{_closed_port()}", insecure=True), 1)
    return channel, create_task_caller([channel])


# -- endpoint --------------------------------------------------------------------------------


def test_endpoint_explicit_then_variable_then_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EMULATOR_VARIABLE, raising=False)
    assert resolve_cloudtasks_endpoint(None) == Endpoint(None, False)
    monkeypatch.setenv(EMULATOR_VARIABLE, "127.0.0.1:8123")
    assert resolve_cloudtasks_endpoint(None) == Endpoint("127.0.0.1:8123", True)
    assert resolve_cloudtasks_endpoint("tasks.example:443") == Endpoint("tasks.example:443", False)
    assert resolve_cloudtasks_endpoint("http://h:1") == Endpoint("h:1", True)


def test_several_channels_get_connections_of_their_own() -> None:
    assert ("grpc.use_local_subchannel_pool", 1) not in channel_options(1)
    assert ("grpc.use_local_subchannel_pool", 1) in channel_options(2)
    assert ("grpc.max_send_message_length", -1) in channel_options(1)


# -- request bytes and metadata --------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16_383, 16_384, 2_097_152])
def test_varint_is_protobuf_s_length_prefix(value: int) -> None:
    # A bytes field of `value` bytes: tag, varint length, payload.
    encoded = tasks_v2.HttpRequest.pb()(body=b"x" * value).SerializeToString()
    if value:
        assert encoded[1 : 1 + len(varint(value))] == varint(value)
    assert len(varint(value)) == max(1, (value.bit_length() + 6) // 7)


@pytest.mark.parametrize("body_size", [0, 100, 127, 128, 16_383, 16_384, 90_000])
def test_head_length_and_task_are_the_generated_request(body_size: int) -> None:
    task = tasks_v2.Task.pb()(
        name=f"{QUEUE}/tasks/t",
        http_request=tasks_v2.HttpRequest.pb()(url="https://x.example", body=b"b" * body_size),
    )
    encoded = task.SerializeToString()
    request = request_head(QUEUE) + varint(len(encoded)) + encoded
    assert request == CreateTaskRequestPb(parent=QUEUE, task=task).SerializeToString()


def test_queue_metadata_routes_by_parent_and_names_the_client() -> None:
    header = client_header()
    assert header[0] == "x-goog-api-client"
    assert "pyflink-gcp/" in header[1] and "gapic/" in header[1]
    routing, identity = queue_metadata(QUEUE, header)
    assert routing == ("x-goog-request-params", f"parent={QUEUE}")
    assert identity == header


# -- spreading calls over channels -----------------------------------------------------------


class RecordingChannel:
    def __init__(self) -> None:
        self.bound: list[tuple[str, dict[str, Any]]] = []
        self.calls: list[bytes] = []

    def unary_unary(self, method: str, **kwargs: Any) -> Any:
        self.bound.append((method, kwargs))
        return self

    def future(self, request: bytes, timeout: float, metadata: Any) -> str:
        self.calls.append(request)
        return "handle"


def test_create_task_caller_binds_raw_create_task_and_spreads_round_robin() -> None:
    channels = [RecordingChannel(), RecordingChannel()]
    start = create_task_caller(channels)
    for i in range(5):
        assert start(bytes([i]), timeout=1.0, metadata=()) == "handle"
    assert [c.calls for c in channels] == [[b"\0", b"\2", b"\4"], [b"\1", b"\3"]]
    assert channels[0].bound == [
        (CREATE_TASK, {"request_serializer": None, "response_deserializer": None})
    ]
    one = RecordingChannel()
    assert create_task_caller([one]) == one.future  # no spreading layer for one channel


# -- AsyncChannel ----------------------------------------------------------------------------


def test_a_failed_call_reports_its_grpc_status() -> None:
    channel, start = _channel()
    try:
        handles = [start(b"", timeout=2.0, metadata=()) for _ in range(20)]
        errors = [handle.exception() for handle in handles]
        assert all(handle.done() for handle in handles)
        assert all(isinstance(error, grpc.RpcError) for error in errors)
        assert {status_name(error) for error in errors} <= {"UNAVAILABLE", "DEADLINE_EXCEEDED"}
    finally:
        channel.close()
    channel.close()  # idempotent


def test_close_releases_readers_of_calls_never_finished() -> None:
    channel, start = _channel()
    channel.close()
    handle = start(b"", timeout=30.0, metadata=())  # never started: the loop is gone
    error = handle.exception()
    assert handle.done()
    assert status_name(error) == "CANCELLED"
