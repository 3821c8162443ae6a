"""The queue check against a scripted GetQueue: once per queue, clear errors, permission skip,
and started without waiting (the full check on a pool thread)."""

from __future__ import annotations

from concurrent.futures import Future
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


class FakeStub:
    """Answers GetQueue with the next scripted queue state or error, counting calls.

    ``stub(request, ...)`` blocks like the raw call; ``stub.future(request, ...)`` returns a
    ``concurrent.futures.Future`` (the same done/exception/result/add_done_callback face as a
    ``grpc.Future``), answered at once, or later by :meth:`answer` when ``hold`` is set.
    """

    def __init__(self, *outcomes: Any, hold: bool = False) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[tuple[str, float, Any]] = []
        self.hold = hold
        self.held: list[Future[Any]] = []

    def _next(self, request: Any, timeout: float, metadata: Any) -> Any:
        self.calls.append((request.name, timeout, metadata))
        outcome = self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return tasks_v2.Queue.pb()(name=request.name, state=outcome)

    def __call__(self, request: Any, timeout: float, metadata: Any) -> Any:
        return self._next(request, timeout, metadata)

    def future(self, request: Any, timeout: float, metadata: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            answer = self._next(request, timeout, metadata)
        except BaseException as exc:  # noqa: BLE001 - the scripted failure, into the future
            answer = exc
        if self.hold:
            self.held.append(future)
            future.answer = answer  # type: ignore[attr-defined]
        else:
            _complete(future, answer)
        return future

    def answer(self) -> None:
        """Answer the held first attempts."""
        for future in self.held:
            _complete(future, future.answer)  # type: ignore[attr-defined]


def _complete(future: Future[Any], answer: Any) -> None:
    if isinstance(answer, BaseException):
        future.set_exception(answer)
    else:
        future.set_result(answer)


def _check(*outcomes: Any, hold: bool = False) -> tuple[QueueCheck, FakeStub]:
    retry = RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.002, deadline_s=0.2)
    check = QueueCheck("hooks-sink", Endpoint("127.0.0.1:1", True), retry, 4.0)
    stub = FakeStub(*outcomes, hold=hold)
    check._stub = stub
    return check, stub


def test_a_queue_is_checked_once_with_the_rpc_timeout() -> None:
    check, admin = _check(tasks_v2.Queue.State.RUNNING)
    check.verify(QUEUE)
    check.verify(QUEUE)
    ((name, timeout, metadata),) = admin.calls
    assert (name, timeout) == (str(QUEUE), 4.0)
    assert dict(metadata)["x-goog-request-params"] == f"name={QUEUE}"
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
    check._stub = admin
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


# -- the check started without waiting ---------------------------------------------------------


def test_a_started_check_that_succeeds_at_once_remembers_the_queue() -> None:
    check, admin = _check(tasks_v2.Queue.State.RUNNING)
    pending = check.start(QUEUE)
    assert pending is not None
    pending.wait()
    # Found by its first attempt: the next writer of the queue starts no check.
    assert check.start(QUEUE) is None
    assert len(admin.calls) == 1


def test_a_started_check_does_not_wait_for_its_answer() -> None:
    check, admin = _check(FakeError(grpc.StatusCode.NOT_FOUND), hold=True)
    pending = check.start(QUEUE)
    assert pending is not None and len(admin.calls) == 1
    assert not pending.failed() and not pending.succeeded()
    admin.answer()
    with pytest.raises(DestinationNotFoundError, match="gcloud tasks queues create hooks"):
        pending.wait()
    # The full check asked again (the first attempt's failure handed over to it), and the
    # outcome is kept: a second wait raises the same error without another call.
    assert len(admin.calls) == 2
    with pytest.raises(DestinationNotFoundError):
        pending.wait()
    assert len(admin.calls) == 2


def test_a_failed_first_attempt_is_settled_on_a_pool_thread() -> None:
    import time

    check, admin = _check(FakeError(grpc.StatusCode.UNAVAILABLE), tasks_v2.Queue.State.RUNNING)
    pending = check.start(QUEUE)
    assert pending is not None
    deadline = time.monotonic() + 5.0
    while not (pending.succeeded() and len(admin.calls) == 2) and time.monotonic() < deadline:
        time.sleep(0.01)
    # The retry ran without anyone waiting for the check (not on this thread).
    assert len(admin.calls) == 2 and pending.succeeded()
    assert check.start(QUEUE) is None
    check.close()


def test_a_started_check_of_a_disabled_queue_fails_its_wait() -> None:
    check, _ = _check(tasks_v2.Queue.State.DISABLED)
    pending = check.start(QUEUE)
    assert pending is not None
    with pytest.raises(
        WriteError, match="'projects/p/locations/us-central1/queues/hooks' is DISABLED"
    ):
        pending.wait()
    assert pending.failed()
    assert check.start(QUEUE) is not None  # not remembered: checked again by a new writer


def test_a_started_check_of_a_paused_queue_warns(caplog: pytest.LogCaptureFixture) -> None:
    check, _ = _check(tasks_v2.Queue.State.PAUSED)
    pending = check.start(QUEUE)
    assert pending is not None
    pending.wait()
    assert "is PAUSED" in caplog.text


def test_a_started_check_without_permission_warns_and_skips(
    caplog: pytest.LogCaptureFixture,
) -> None:
    check, admin = _check(FakeError(grpc.StatusCode.PERMISSION_DENIED))
    pending = check.start(QUEUE)
    assert pending is not None
    pending.wait()
    assert "skipping the existence check" in caplog.text
    assert check.start(QUEUE) is None
    check.close()


def test_new_queues_have_a_bounded_number_of_checks_in_flight() -> None:
    check, admin = _check(tasks_v2.Queue.State.RUNNING, hold=True)
    limit = check._checks.limit
    queues = [QueueDestination.of("p", "us-central1", f"q{i}") for i in range(limit + 5)]
    pending = [check.start(q) for q in queues]
    assert len(admin.calls) == limit  # the rest wait for a slot
    while len(admin.held) < len(queues) or not all(f.done() for f in admin.held):
        admin.answer()  # each answer frees a slot and starts a queued check
    assert [name for name, _, _ in admin.calls] == [q.resource_name for q in queues]
    for each in pending:
        assert each is not None
        each.wait()
        assert each.succeeded()
