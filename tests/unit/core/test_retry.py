"""Retry policy: status classification, retries until the deadline, and log levels."""

from __future__ import annotations

import logging

import grpc
import pytest

from pyflink_gcp.core.errors import WriteError
from pyflink_gcp.core.retry import RetryPolicy, status_name


class Aborted(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.ABORTED

    def __str__(self) -> str:
        return "transaction aborted"


def levels(caplog: pytest.LogCaptureFixture, policy: RetryPolicy, attempts: int) -> list[int]:
    sequence = policy.backoffs()
    with caplog.at_level(logging.DEBUG, logger="pyflink_gcp.retry"):
        for _ in range(attempts):
            sequence.wait_or_raise(Aborted(), "sink 's': commit")
    return [r.levelno for r in caplog.records if "retrying" in r.getMessage()]


def test_a_transient_error_warns_at_its_first_retry_then_every_tenth(
    caplog: pytest.LogCaptureFixture,
) -> None:
    policy = RetryPolicy(initial_backoff_s=0.0001, max_backoff_s=0.0001)
    assert levels(caplog, policy, 20) == [logging.WARNING, logging.WARNING, logging.WARNING]


def test_expected_errors_are_logged_at_debug_until_they_persist(
    caplog: pytest.LogCaptureFixture,
) -> None:
    policy = RetryPolicy(initial_backoff_s=0.0001, max_backoff_s=0.0001, quiet_attempts=3)
    assert levels(caplog, policy, 10) == [logging.DEBUG] * 3 + [logging.WARNING, logging.WARNING]


def test_the_deadline_still_fails_the_call() -> None:
    sequence = RetryPolicy(initial_backoff_s=1.0, deadline_s=0.0, quiet_attempts=3).backoffs()
    with pytest.raises(WriteError, match=r"sink 's': commit: still failing after 1 attempts"):
        sequence.wait_or_raise(Aborted(), "sink 's': commit")


class _RpcError(Exception):
    def __init__(self, name):
        self._name = name

    def code(self):
        return type("Code", (), {"name": self._name})()


def test_status_classification_and_retries_until_the_deadline():
    assert status_name(_RpcError("UNAVAILABLE")) == "UNAVAILABLE"
    assert status_name(ValueError()) is None
    policy = RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.002, deadline_s=0.05)
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise _RpcError("UNAVAILABLE")
        return "ok"

    assert policy.call(flaky, "x") == "ok" and len(calls) == 3
    with pytest.raises(WriteError, match="still failing after"):
        policy.call(lambda: (_ for _ in ()).throw(_RpcError("UNAVAILABLE")), "sink 's': write")
    with pytest.raises(_RpcError):
        policy.call(lambda: (_ for _ in ()).throw(_RpcError("PERMISSION_DENIED")), "x")
