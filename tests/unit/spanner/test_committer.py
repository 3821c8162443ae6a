"""Committing against a fake Spanner API: retries, session renewal, what a failure means, order."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from pyflink_gcp.core import WriteError
from pyflink_gcp.core.retry import STALL_MARGIN_S, RetryPolicy
from pyflink_gcp.spanner import SpannerWriterOptions
from pyflink_gcp.spanner.batch import Batch
from pyflink_gcp.spanner.committer import (
    RECORD_FAULT_CODES,
    Committer,
    OrderedExecutor,
    is_record_fault,
    is_schema_change,
    rejection_text,
)
from pyflink_gcp.spanner.session import Session
from tests.unit.spanner.fakes import DB, FakeApi


def committer(fail: Any = None, deadline: float = 120.0) -> tuple[Committer, FakeApi]:
    api = FakeApi(fail)
    retry = RetryPolicy(initial_backoff_s=0.01, max_backoff_s=0.05, deadline_s=deadline)
    options = SpannerWriterOptions(retry_deadline=timedelta(seconds=deadline))
    return Committer(Session(api, DB, "unit", retry), options, retry), api


def request() -> Any:
    return Batch().request


def test_a_commit_runs_in_the_session_with_the_database_metadata() -> None:
    c, api = committer()
    c.commit(request(), "commit")
    c.commit(request(), "commit")
    assert [r.session for r in api.commits] == ["sessions/1", "sessions/1"]
    assert ("google-cloud-resource-prefix", str(DB)) in api.metadata[0]
    assert c.commit_seconds > 0


def test_transient_errors_are_retried_then_fail_the_job() -> None:
    attempts = {"n": 0}

    def flaky(pb: Any) -> Exception | None:
        attempts["n"] += 1
        return gexc.Aborted("aborted due to active transaction") if attempts["n"] <= 3 else None

    c, api = committer(flaky)
    c.commit(request(), "commit")
    assert attempts["n"] == 4 and len(api.commits) == 1

    c, _ = committer(lambda pb: gexc.ServiceUnavailable("down"), deadline=0.2)
    with pytest.raises(WriteError, match="still failing after .* UNAVAILABLE"):
        c.commit(request(), "sink 'unit': commit")


def test_permanent_errors_are_raised_unchanged() -> None:
    c, _ = committer(lambda pb: gexc.PermissionDenied("no"))
    with pytest.raises(gexc.PermissionDenied):
        c.commit(request(), "commit")


def test_an_expired_session_is_replaced() -> None:
    calls = {"n": 0}

    def expire_once(pb: Any) -> Exception | None:
        calls["n"] += 1
        return gexc.NotFound(f"Session not found: {pb.session}") if calls["n"] == 1 else None

    c, api = committer(expire_once)
    c.commit(request(), "commit")
    assert api.sessions == 2 and api.commits[0].session == "sessions/2"


def test_a_session_that_keeps_expiring_fails() -> None:
    c, api = committer(lambda pb: gexc.NotFound(f"Session not found: {pb.session}"))
    with pytest.raises(gexc.NotFound):
        c.commit(request(), "commit")
    assert api.sessions == 4  # the first and three renewals


def test_an_aborted_commit_first_waits_about_one_commit() -> None:
    c, _ = committer()
    policy = c.retry_aborted
    assert c.aborted_backoffs()._next == policy.initial_backoff_s  # nothing measured yet
    c.commit_seconds = 0.04
    assert c.aborted_backoffs()._next == 0.04
    c.commit_seconds = 30.0  # bounded: a slow commit does not stall the retry
    assert c.aborted_backoffs()._next == policy.max_backoff_s


@pytest.mark.parametrize(
    ("error", "record_fault", "schema_change"),
    [
        (gexc.FailedPrecondition("Cannot specify a null value for column: kind"), True, False),
        (gexc.InvalidArgument("The transaction contains too many mutations."), True, False),
        (gexc.AlreadyExists("Row [1] in table Events already exists"), True, False),
        (gexc.NotFound("Row [7] in table Events is missing."), True, False),
        (gexc.OutOfRange("value out of range"), True, False),
        (gexc.NotFound("Table not found: Events"), False, True),
        (gexc.NotFound("Column not found in table Events: kind"), False, True),
        (gexc.PermissionDenied("no"), False, False),
        (gexc.Aborted("aborted"), False, False),
        (WriteError("still failing"), False, False),
    ],
)
def test_what_a_failed_commit_means(
    error: Exception, record_fault: bool, schema_change: bool
) -> None:
    assert is_record_fault(error) is record_fault
    assert is_schema_change(error) is schema_change


def test_record_faults_extend_the_shared_set() -> None:
    from pyflink_gcp.core.status import RECORD_FAULT_CODES as SHARED

    assert SHARED <= RECORD_FAULT_CODES
    added = RECORD_FAULT_CODES - SHARED
    assert added == {"ALREADY_EXISTS", "NOT_FOUND"}
    assert rejection_text(gexc.AlreadyExists("Row [1] exists")) == "ALREADY_EXISTS: Row [1] exists"


def test_the_executor_runs_calls_in_order_and_hands_errors_over() -> None:
    executor = OrderedExecutor("unit-commits")
    seen: list[int] = []
    gate = threading.Event()

    def step(i: int) -> int:
        if i == 0:
            gate.wait(5)
        seen.append(i)
        return i

    futures = [executor.submit(lambda i=i: step(i)) for i in range(5)]  # type: ignore[misc]
    failing = executor.submit(lambda: 1 / 0)
    time.sleep(0.05)
    assert seen == []  # the first call holds the others back
    gate.set()
    assert [f.result(5) for f in futures] == list(range(5)) and seen == list(range(5))
    with pytest.raises(ZeroDivisionError):
        failing.result(5)
    executor.shutdown()
    executor._thread.join(5)
    assert not executor._thread.is_alive()


def test_the_writers_wait_on_commits_no_longer_than_one_with_its_retries_can_last() -> None:
    committer_, _ = committer(deadline=20.0)
    # One attempt is capped by the 20-s deadline; quota errors retry for 10 deadlines.
    assert committer_.stall_s == 200.0 + 20.0 + STALL_MARGIN_S
