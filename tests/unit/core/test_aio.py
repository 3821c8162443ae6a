"""The asyncio channel's synchronous face: outcomes and done-callbacks reach every call, and
close never leaves a call unsettled. Against a closed port, so every call fails fast; the
sinks' integration tests drive it against the emulators."""

from __future__ import annotations

import socket
import threading

import grpc
from google.pubsub_v1.services.publisher.transports.grpc_asyncio import (
    PublisherGrpcAsyncIOTransport,
)

from pyflink_gcp.core.aio import AsyncChannel, AsyncMethod
from pyflink_gcp.core.endpoints import Endpoint
from pyflink_gcp.core.retry import status_name


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _method() -> tuple[AsyncChannel, AsyncMethod]:
    channel = AsyncChannel(
        Endpoint(host=f"127.0.0.1:{_closed_port()}", insecure=True),
        PublisherGrpcAsyncIOTransport,
        "pubsub.googleapis.com",
        [],
        thread_name="test-io",
    )
    return channel, channel.unary_unary("/google.pubsub.v1.Publisher/Publish")


def test_done_callbacks_run_on_the_loop_thread_or_at_once_when_the_call_ended() -> None:
    channel, method = _method()
    try:
        seen: list[tuple[str, str | None]] = []
        ended = threading.Event()

        def record(handle) -> None:
            seen.append((threading.current_thread().name, status_name(handle.exception())))
            ended.set()

        # Hold the loop until the callback is added: against a closed port the call can end
        # before this thread gets to add it, which would run it here instead.
        gate = threading.Event()
        channel._loop.call_soon_threadsafe(gate.wait, 10)
        handle = method.future(b"", timeout=5.0, metadata=())
        handle.add_done_callback(record)
        gate.set()
        assert ended.wait(10)
        assert seen[0][0] == "test-io" and seen[0][1] in {"UNAVAILABLE", "DEADLINE_EXCEEDED"}
        handle.add_done_callback(record)  # already ended: runs here
        assert seen[1][0] == threading.current_thread().name and len(seen) == 2
        assert isinstance(handle.exception(), grpc.RpcError)
    finally:
        channel.close()


def test_many_methods_share_one_loop_and_every_call_reports_its_outcome() -> None:
    channel, publish = _method()
    get_topic = channel.unary_unary("/google.pubsub.v1.Publisher/GetTopic")
    try:
        handles = [m.future(b"", timeout=5.0, metadata=()) for m in (publish, get_topic) * 10]
        assert all(isinstance(h.exception(), grpc.RpcError) for h in handles)
        assert all(h.done() for h in handles)
    finally:
        channel.close()


def test_close_settles_calls_never_started_and_runs_their_callbacks() -> None:
    channel, method = _method()
    channel.close()
    channel.close()  # idempotent
    seen: list[str | None] = []
    handle = method.future(b"", timeout=30.0, metadata=())  # the loop is gone: never started
    handle.add_done_callback(lambda h: seen.append(status_name(h.exception())))
    assert handle.done() and seen == ["CANCELLED"]
    assert status_name(handle.exception()) == "CANCELLED"
