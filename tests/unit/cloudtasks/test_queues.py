"""The queue check against a scripted GetQueue: once per queue, clear errors, permission skip."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.cloud import tasks_v2

from pyflink_gcp.cloudtasks.destinations import QueueDestination
from pyflink_gcp.cloudtasks.queues import QueueCheck
from pyflink_gcp.core import DestinationNotFoundError, RetryPolicy, WriteError
from pyflink_gcp.core.endpoints import Endpoint

QUEUE = QueueDestination.of("p", "us-central1", "hooks")


class FakeError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return "scripted"


class FakeAdmin:
    """Answers GetQueue with the next scripted queue state or error, counting calls."""

    def __init__(self, *outcomes: Any) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[tuple[str, Any, float]] = []

    def get_queue(self, name: str, retry: Any, timeout: float) -> Any:
        self.calls.append((name, retry, timeout))
        outcome = self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return tasks_v2.Queue(name=name, state=outcome)


def _check(*outcomes: Any) -> tuple[QueueCheck, FakeAdmin]:
    retry = RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.002, deadline_s=0.2)
    check = QueueCheck("hooks-sink", Endpoint("127.0.0.1:1", True), retry, 4.0)
    admin = FakeAdmin(*outcomes)
    check._client = admin
    return check, admin


def test_a_queue_is_checked_once_with_the_rpc_timeout() -> None:
    check, admin = _check(tasks_v2.Queue.State.RUNNING)
    check.verify(QUEUE)
    check.verify(QUEUE)
    assert admin.calls == [(str(QUEUE), None, 4.0)]
    other = QueueDestination.of("p", "us-central1", "other")
    check.verify(other)
    assert [c[0] for c in admin.calls] == [str(QUEUE), str(other)]


def test_transient_errors_are_retried() -> None:
    check, admin = _check(FakeError(grpc.StatusCode.UNAVAILABLE), tasks_v2.Queue.State.RUNNING)
    check.verify(QUEUE)
    assert len(admin.calls) == 2


def test_a_missing_queue_names_it_and_the_command_that_creates_it() -> None:
    check, _ = _check(FakeError(grpc.StatusCode.NOT_FOUND))
    with pytest.raises(
        DestinationNotFoundError,
        match="queues/hooks' does not exist.*gcloud tasks queues create hooks "
        "--location=us-central1 --project=p",
    ):
        check.verify(QUEUE)


def test_a_disabled_queue_or_another_status_fails() -> None:
    check, _ = _check(tasks_v2.Queue.State.DISABLED)
    with pytest.raises(WriteError, match="is DISABLED"):
        check.verify(QUEUE)
    check, _ = _check(FakeError(grpc.StatusCode.UNAUTHENTICATED))
    with pytest.raises(WriteError, match="hooks-sink.*UNAUTHENTICATED"):
        check.verify(QUEUE)


def test_a_paused_queue_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    check, _ = _check(tasks_v2.Queue.State.PAUSED)
    check.verify(QUEUE)
    assert "is PAUSED" in caplog.text


def test_without_permission_the_check_is_skipped_once(caplog: pytest.LogCaptureFixture) -> None:
    check, admin = _check(FakeError(grpc.StatusCode.PERMISSION_DENIED))
    check.verify(QUEUE)
    check.verify(QUEUE)
    assert len(admin.calls) == 1
    assert "skipping the existence check" in caplog.text


def test_close_forgets_the_client_and_the_queues() -> None:
    check, admin = _check(tasks_v2.Queue.State.RUNNING)
    check.verify(QUEUE)
    check.close()
    check._client = admin
    check.verify(QUEUE)
    assert len(admin.calls) == 2


def test_a_silent_endpoint_fails_get_queue_at_its_timeout_naming_the_endpoint() -> None:
    # The real generated client on a real channel to a peer that never answers: each GetQueue
    # attempt ends at its timeout (no library retry), and the deadline ends the check.
    import time

    from tests.support.endpoints import black_hole_endpoint

    retry = RetryPolicy(initial_backoff_s=0.05, max_backoff_s=0.1, deadline_s=0.5)
    with black_hole_endpoint() as silent:
        check = QueueCheck("hooks-sink", Endpoint(silent, True), retry, 1.0)
        start = time.monotonic()
        try:
            with pytest.raises(WriteError) as err:
                check.verify(QueueDestination.of("p", "us-central1", "hooks"))
        finally:
            check.close()
    assert time.monotonic() - start < 0.5 + 1.0 + 1.5
    assert (
        f"sink 'hooks-sink': checking Cloud Tasks queue projects/p/locations/us-central1/"
        f"queues/hooks at {silent}"
    ) in str(err.value)
    assert "DEADLINE_EXCEEDED" in str(err.value)
