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
    # A deadline long enough for three attempts on a loaded machine; the always-failing call
    # below still gives up within it.
    policy = RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.002, deadline_s=2.0)
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


def _transport_errors() -> list[tuple[BaseException, str]]:
    import requests
    import urllib3.exceptions as u3
    from google.auth import exceptions as auth_exceptions

    return [
        (requests.exceptions.ConnectionError("Connection refused"), "UNAVAILABLE"),
        (requests.exceptions.ConnectTimeout("connect timed out"), "DEADLINE_EXCEEDED"),
        (requests.exceptions.ReadTimeout("read timed out"), "DEADLINE_EXCEEDED"),
        (requests.exceptions.ChunkedEncodingError("connection broken"), "UNAVAILABLE"),
        (u3.NewConnectionError(None, "Connection refused"), "UNAVAILABLE"),
        (u3.MaxRetryError(None, "http://127.0.0.1:1/"), "UNAVAILABLE"),
        (u3.ProtocolError("Connection aborted."), "UNAVAILABLE"),
        (u3.ReadTimeoutError(None, "http://127.0.0.1:1/", "read timed out"), "DEADLINE_EXCEEDED"),
        (ConnectionRefusedError(111, "Connection refused"), "UNAVAILABLE"),
        (ConnectionResetError(104, "Connection reset by peer"), "UNAVAILABLE"),
        (TimeoutError("timed out"), "DEADLINE_EXCEEDED"),
        (auth_exceptions.TransportError("token endpoint unreachable"), "UNAVAILABLE"),
    ]


@pytest.mark.parametrize(("error", "expected"), _transport_errors(), ids=lambda v: type(v).__name__)
def test_connection_level_errors_of_rest_clients_are_transient(
    error: BaseException, expected: str
) -> None:
    assert status_name(error) == expected
    assert RetryPolicy().is_transient(error)


def test_errors_with_a_response_or_of_configuration_stay_permanent() -> None:
    import requests
    import urllib3.exceptions as u3
    from google.auth import exceptions as auth_exceptions

    for error in (
        requests.exceptions.HTTPError("400 Client Error"),
        requests.exceptions.InvalidURL("no host"),
        u3.LocationParseError("http://"),
        auth_exceptions.RefreshError("invalid_grant"),
        OSError(2, "No such file"),
        ValueError("bad"),
    ):
        assert not RetryPolicy().is_transient(error), error


def test_a_refused_rest_endpoint_is_retried_until_the_deadline_then_named() -> None:
    import socket

    import requests

    with socket.socket() as probe:  # a free port with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    policy = RetryPolicy(initial_backoff_s=0.01, max_backoff_s=0.05, deadline_s=0.3)
    attempts = []

    def get() -> None:
        attempts.append(1)
        requests.get(f"http://127.0.0.1:{port}/", timeout=1)

    with pytest.raises(WriteError, match=r"sink 's': get table .*UNAVAILABLE") as info:
        policy.call(get, f"sink 's': get table p.d.t at 127.0.0.1:{port}")
    assert len(attempts) > 1
    assert f"127.0.0.1:{port}" in str(info.value)


def test_one_attempt_never_outlasts_the_retry_deadline() -> None:
    assert RetryPolicy(deadline_s=120).attempt_timeout(60) == 60
    assert RetryPolicy(deadline_s=8).attempt_timeout(60) == 8
    assert RetryPolicy(deadline_s=0).attempt_timeout(60) == 5.0  # one fair attempt
    assert RetryPolicy(deadline_s=0).attempt_timeout(2) == 2
