"""The aio transport's synchronous face: outcomes reach the handles, close never hangs a reader."""

from __future__ import annotations

import socket

import grpc

from pyflink_gcp.cloudtasks.writer import AsyncChannel
from pyflink_gcp.core.endpoints import Endpoint
from pyflink_gcp.core.retry import status_name

METHOD = "/google.cloud.tasks.v2.CloudTasks/CreateTask"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _channel() -> AsyncChannel:
    channel = AsyncChannel(Endpoint(host=f"127.0.0.1:{_closed_port()}", insecure=True), [])
    channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
    return channel


def test_a_failed_call_reports_its_grpc_status() -> None:
    channel = _channel()
    try:
        handles = [channel.future(b"", timeout=2.0, metadata=()) for _ in range(20)]
        errors = [handle.exception() for handle in handles]
        assert all(handle.done() for handle in handles)
        assert all(isinstance(error, grpc.RpcError) for error in errors)
        assert {status_name(error) for error in errors} <= {"UNAVAILABLE", "DEADLINE_EXCEEDED"}
    finally:
        channel.close()
    channel.close()  # idempotent


def test_close_releases_readers_of_calls_never_finished() -> None:
    channel = _channel()
    channel.close()
    handle = channel.future(b"", timeout=30.0, metadata=())  # never started: the loop is gone
    error = handle.exception()
    assert handle.done()
    assert status_name(error) == "CANCELLED"
