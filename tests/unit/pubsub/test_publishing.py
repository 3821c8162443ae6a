"""The publish transport without a service: the subtask window, quota feedback, ordered chains.

``publish_batch`` (retries and isolation of one request) is tested through the topic writer in
``test_writer.py``; here the :class:`Publisher` is driven directly.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

import grpc
import pytest

from pyflink_gcp.core.errors import WriteError
from pyflink_gcp.core.quota import QuotaWindow
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.pubsub.client import PubsubMessagePb
from pyflink_gcp.pubsub.publishing import CALL_TIMEOUT_S, Publisher
from tests.unit.pubsub.fakes import FakeRpc, Status

TOPIC = "projects/p/topics/orders"
FAST_RETRY = RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.001, deadline_s=5)


def publisher(rpc: FakeRpc, quota: QuotaWindow | None = None, window: int = 8) -> Publisher:
    return Publisher(
        sink="s",
        rpc=rpc,
        pool=ThreadPoolExecutor(max_workers=4),
        retry=FAST_RETRY,
        create_never=True,
        quota=quota or QuotaWindow(window),
        max_in_flight=window,
    )


def batch(*datas: bytes) -> list[object]:
    return [PubsubMessagePb(data=d) for d in datas]


def test_a_quota_error_on_a_first_attempt_halves_the_window_and_the_request_is_retried() -> None:
    rpc = FakeRpc(failures=[Status(grpc.StatusCode.RESOURCE_EXHAUSTED, "quota")])
    quota = QuotaWindow(8)
    transport = publisher(rpc, quota)
    try:
        assert transport.start(TOPIC, batch(b"a")).result(timeout=5) == []
        assert quota.quota_errors == 1 and quota.limit < 8
        assert transport.window.limit == quota.limit
        assert rpc.published == [b"a"] and rpc.futures == 1 and rpc.calls == 2
        assert transport.window.outstanding == 0
    finally:
        transport.close()


def test_the_windows_wait_no_longer_than_one_publish_with_its_retries_can_last() -> None:
    transport = publisher(FakeRpc())
    try:
        expected = FAST_RETRY.stall_bound(FAST_RETRY.attempt_timeout(CALL_TIMEOUT_S))
        assert transport.window.stall_s == expected
    finally:
        transport.close()


def test_the_subtask_window_frees_a_slot_when_a_request_completes_on_another_thread() -> None:
    rpc = FakeRpc()
    release = threading.Event()
    original = rpc.publish

    def slow(topic: str, messages: list[object]) -> object:
        release.wait(5)
        return original(topic, messages)

    rpc.publish = slow  # type: ignore[method-assign]
    transport = publisher(rpc, window=1)
    try:
        first = transport.start(TOPIC, batch(b"a"))
        assert transport.window.outstanding == 1
        threading.Timer(0.05, release.set).start()
        second = transport.start(TOPIC, batch(b"b"))  # waits for the first's slot
        assert first.done()
        assert second.result(timeout=5) == [] and sorted(rpc.published) == [b"a", b"b"]
    finally:
        transport.close()


def test_an_ordered_request_after_a_failed_one_fails_without_a_call() -> None:
    rpc = FakeRpc()
    transport = publisher(rpc)
    failed: Future[list[object]] = Future()
    failed.set_exception(WriteError("the first"))
    try:
        after = transport.start_after(failed, TOPIC, batch(b"b"))
        with pytest.raises(WriteError, match="not publishing 1 ordered messages .* failed"):
            after.result(timeout=5)
        assert rpc.calls == 0
        done: Future[list[object]] = Future()
        done.set_result([])
        assert transport.start_after(done, TOPIC, batch(b"c")).result(timeout=5) == []
        assert rpc.published == [b"c"]
    finally:
        transport.close()


def test_a_closed_transport_refuses_ordered_requests() -> None:
    transport = publisher(FakeRpc())
    transport.close()
    with pytest.raises(WriteError, match="the publisher was closed"):
        transport.start_after(None, TOPIC, batch(b"a"))
