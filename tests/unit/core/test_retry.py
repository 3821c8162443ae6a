"""Retry policy: status classification, retries until the deadline, log levels, and quota
errors (their slower schedule, server hints, their own deadline, the in-flight window)."""

from __future__ import annotations

import logging

import grpc
import pytest

from pyflink_gcp.core import retry as retry_module
from pyflink_gcp.core.errors import WriteError
from pyflink_gcp.core.quota import QuotaWindow
from pyflink_gcp.core.retry import (
    QUOTA_CODES,
    QUOTA_DEADLINE_FACTOR,
    STALL_MARGIN_S,
    RetryPolicy,
    retry_delay_s,
    status_name,
)


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


def test_the_stall_bound_is_the_longest_a_call_with_its_retries_can_take_and_a_margin() -> None:
    # Quota errors are retried for 10 retry deadlines by default: the longest of the two.
    assert RetryPolicy(deadline_s=120).stall_bound(60) == 1200 + 60 + STALL_MARGIN_S
    assert RetryPolicy(deadline_s=120, quota_deadline_s=30).stall_bound(5) == 120 + 5 + 30


# -- quota errors ------------------------------------------------------------------------------


class FakeClock:
    """Stands in for the retry module's ``time``: sleeps advance the clock at once."""

    def __init__(self) -> None:
        self.now = 1_000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(retry_module, "time", fake)
    return fake


class Exhausted(grpc.RpcError):
    """A raw gRPC RESOURCE_EXHAUSTED, with a RetryInfo in its trailers if ``delay_s``."""

    def __init__(self, delay_s: float | None = None) -> None:
        self._delay_s = delay_s

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.RESOURCE_EXHAUSTED

    def details(self) -> str:
        return "quota exceeded"

    def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
        if self._delay_s is None:
            return ()
        return (("grpc-status-details-bin", _status_with_retry_info(self._delay_s)),)


def _status_with_retry_info(delay_s: float) -> bytes:
    from google.protobuf import any_pb2, duration_pb2
    from google.rpc import error_details_pb2, status_pb2

    info = error_details_pb2.RetryInfo(
        retry_delay=duration_pb2.Duration(seconds=int(delay_s), nanos=int(delay_s % 1 * 1e9))
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    return status_pb2.Status(code=8, message="quota exceeded", details=[detail]).SerializeToString()


class Unavailable(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def __str__(self) -> str:
        return "connection refused"


def test_resource_exhausted_and_http_429_are_quota_errors() -> None:
    from google.api_core import exceptions as gexc

    policy = RetryPolicy()
    assert policy.is_quota(Exhausted())
    assert policy.is_quota(gexc.TooManyRequests("429 Too Many Requests"))
    assert policy.is_quota(gexc.ResourceExhausted("quota"))
    http_429 = type("HttpError", (Exception,), {"code": 429})()
    assert status_name(http_429) == "RESOURCE_EXHAUSTED" and policy.is_quota(http_429)
    assert policy.is_transient(Exhausted())  # still retried, only on its own schedule
    assert not policy.is_quota(Unavailable())
    assert not policy.is_quota(Aborted())
    # A policy that does not retry RESOURCE_EXHAUSTED does not treat it as a quota to wait for.
    assert not RetryPolicy(transient_codes=frozenset({"UNAVAILABLE"})).is_quota(Exhausted())
    assert "RESOURCE_EXHAUSTED" in QUOTA_CODES


def test_quota_waits_start_near_a_second_and_grow_to_a_minute(clock: FakeClock) -> None:
    sequence = RetryPolicy(deadline_s=120).backoffs()
    for _ in range(10):
        sequence.wait_or_raise(Exhausted(), "sink 's': publish")
    ceilings = [1, 2, 4, 8, 16, 32, 60, 60, 60, 60]
    for wait, ceiling in zip(clock.sleeps, ceilings, strict=True):
        assert ceiling / 2 <= wait <= ceiling, (clock.sleeps, ceilings)
    assert sequence.quota_attempts == 10


def test_transient_errors_keep_their_short_backoff_beside_quota_errors(clock: FakeClock) -> None:
    policy = RetryPolicy(initial_backoff_s=0.1, max_backoff_s=10)
    sequence = policy.backoffs()
    sequence.wait_or_raise(Exhausted(), "x")
    sequence.wait_or_raise(Unavailable(), "x")
    sequence.wait_or_raise(Exhausted(), "x")
    quota_first, transient_first, quota_second = clock.sleeps
    assert 0.5 <= quota_first <= 1.0
    assert 0 <= transient_first <= 0.1  # the transient schedule did not move with the quota's
    assert 1.0 <= quota_second <= 2.0


@pytest.mark.parametrize("delay_s", [3.0, 7.5])
def test_a_retry_info_hint_in_the_grpc_trailers_is_honoured(
    clock: FakeClock, delay_s: float
) -> None:
    error = Exhausted(delay_s)
    assert retry_delay_s(error) == pytest.approx(delay_s)
    RetryPolicy().backoffs().wait_or_raise(error, "x")
    assert delay_s <= clock.sleeps[0] <= delay_s * 1.2


def test_hints_from_api_core_errors_and_http_retry_after() -> None:
    from google.api_core import exceptions as gexc

    wrapped = gexc.from_grpc_error(Exhausted(4.0))  # api_core parses the status details
    assert retry_delay_s(wrapped) == pytest.approx(4.0)
    response = type("Response", (), {"headers": {"Retry-After": "12"}})()
    assert retry_delay_s(gexc.TooManyRequests("429", response=response)) == 12.0
    dated = type("Response", (), {"headers": {"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}})()
    assert retry_delay_s(gexc.TooManyRequests("429", response=dated)) is None
    assert retry_delay_s(Exhausted()) is None
    assert retry_delay_s(ValueError("no hint")) is None


def test_a_hint_longer_than_the_longest_quota_wait_is_capped(clock: FakeClock) -> None:
    RetryPolicy(quota_max_backoff_s=60).backoffs().wait_or_raise(Exhausted(600.0), "x")
    assert clock.sleeps == [60.0]


def test_quota_errors_do_not_use_up_the_retry_deadline(clock: FakeClock) -> None:
    # 5 s of retry deadline; ten quota errors take far longer and are still retried, and the
    # transient error after them still has its whole deadline.
    policy = RetryPolicy(
        initial_backoff_s=0.1, max_backoff_s=1, deadline_s=5, quota_deadline_s=1_000
    )
    sequence = policy.backoffs()
    for _ in range(10):
        clock.now += 0.5  # each attempt takes a while, counted as quota time too
        sequence.wait_or_raise(Exhausted(), "x")
    assert sum(clock.sleeps) > 5
    for _ in range(3):
        sequence.wait_or_raise(Unavailable(), "x")
    assert sequence.attempts == 13


def test_a_dead_service_still_fails_at_the_retry_deadline(clock: FakeClock) -> None:
    sequence = RetryPolicy(initial_backoff_s=1, max_backoff_s=1, deadline_s=5).backoffs()
    with pytest.raises(WriteError, match=r"retry deadline 5s\): UNAVAILABLE"):
        for _ in range(100):
            clock.now += 1.0  # an attempt that times out
            sequence.wait_or_raise(Unavailable(), "sink 's': write")
    assert clock.now - 1_000.0 <= 5 + 1


def test_quota_errors_that_never_end_fail_at_the_quota_deadline(clock: FakeClock) -> None:
    policy = RetryPolicy(deadline_s=5)
    assert policy.quota_deadline == 5 * QUOTA_DEADLINE_FACTOR == 50
    sequence = policy.backoffs()
    with pytest.raises(WriteError, match=r"quota deadline 50s, \d+ of them quota errors\)"):
        for _ in range(100):
            sequence.wait_or_raise(Exhausted(), "sink 's': write")
    assert 5 < clock.now - 1_000.0 <= 50
    assert RetryPolicy(deadline_s=5, quota_deadline_s=7).quota_deadline == 7


def test_the_window_is_told_of_quota_errors_and_of_success(clock: FakeClock) -> None:
    window = QuotaWindow(8)
    errors: list[BaseException] = [Exhausted(), Unavailable(), Exhausted()]

    def flaky() -> str:
        if errors:
            raise errors.pop(0)
        return "ok"

    assert RetryPolicy().call(flaky, "x", window=window) == "ok"
    # 8 -> 4 -> 2 for the two quota errors, not for UNAVAILABLE; the success grew it by 1/2,
    # not yet a whole request.
    assert window.quota_errors == 2 and window.limit == 2
    sequence = RetryPolicy().backoffs(window)
    sequence.wait_or_raise(Unavailable(), "x")
    assert window.quota_errors == 2


def test_quota_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="quota_initial_backoff_s"):
        RetryPolicy(quota_initial_backoff_s=0)
    with pytest.raises(ValueError, match="quota_initial_backoff_s"):
        RetryPolicy(quota_initial_backoff_s=10, quota_max_backoff_s=5)
    with pytest.raises(ValueError, match="quota_deadline_s"):
        RetryPolicy(quota_deadline_s=-1)


def test_quota_retries_are_logged_as_quota_errors(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="pyflink_gcp.retry"):
        RetryPolicy().backoffs().wait_or_raise(Exhausted(2.0), "sink 's': commit")
    (record,) = caplog.records
    assert record.getMessage().startswith(
        "sink 's': commit: quota error RESOURCE_EXHAUSTED, retrying in 2."
    )
