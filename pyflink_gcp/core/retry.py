"""Retry policy shared by every sink: exponential backoff with jitter up to a deadline.

Transient failures (the service is briefly unavailable, overloaded, or aborted a transaction)
are retried; anything else is raised at once. The policy classifies errors by their gRPC status
name so that this module needs no client library: ``google.api_core`` exceptions carry
``grpc_status_code``, raw ``grpc.RpcError`` s carry ``code()``, REST errors an HTTP ``code``.
A REST client that never reached the service raises a connection-level error with no status
at all (``requests``' ``ConnectionError`` and ``Timeout``, ``urllib3``'s errors, the builtin
``ConnectionRefusedError`` and ``TimeoutError``); those are named ``UNAVAILABLE`` or
``DEADLINE_EXCEEDED``, as a gRPC channel names the same failures, so that a refused or silent
endpoint is retried until the deadline instead of failing the job at the first attempt.

Quota errors (``RESOURCE_EXHAUSTED``, which HTTP 429 is named) are retried on a schedule of
their own: the service is up and refusing work until a quota refills, so the waits start at
a second and grow to a minute (or follow the server's ``google.rpc.RetryInfo`` /
``Retry-After`` hint), the time they take does not count towards the retry deadline, and they
have a deadline of their own, :data:`QUOTA_DEADLINE_FACTOR` times the retry deadline, so that
a quota that never refills still ends the job. A sink's :class:`~pyflink_gcp.core.quota.
QuotaWindow`, passed to :meth:`RetryPolicy.backoffs`, is told of each quota error, so the sink
also sends fewer requests meanwhile.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pyflink_gcp.core.errors import WriteError
from pyflink_gcp.core.quota import QuotaWindow

_LOG = logging.getLogger("pyflink_gcp.retry")

T = TypeVar("T")

#: gRPC status names retried by default.
TRANSIENT_CODES: frozenset[str] = frozenset(
    {"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED", "INTERNAL"}
)

#: gRPC status names of a quota error: retried slowly, outside the retry deadline.
QUOTA_CODES: frozenset[str] = frozenset({"RESOURCE_EXHAUSTED"})

#: A call failing only with quota errors fails after this many retry deadlines (10: 20 min
#: under the default ``retry_deadline`` of 2 min), so that nothing is retried without end.
QUOTA_DEADLINE_FACTOR = 10.0

#: Beyond the longest a call's retries may last, how long a wait on it goes on before it
#: concludes that the call's outcome was lost (:meth:`RetryPolicy.stall_bound`).
STALL_MARGIN_S = 30.0

#: The shortest timeout :meth:`RetryPolicy.attempt_timeout` gives one attempt.
MIN_ATTEMPT_TIMEOUT_S = 5.0

_HTTP_TO_GRPC = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    412: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


#: Connection-level errors of the REST stack by (top-level module, class name), matched along
#: the class's MRO, most specific class first, so that no client library is imported here
#: (urllib3's ``NewConnectionError`` derives from its ``ConnectTimeoutError``; requests'
#: ``ConnectTimeout`` from both ``ConnectionError`` and ``Timeout``).
_TRANSPORT_ERRORS: dict[tuple[str, str], str] = {
    ("requests", "ConnectTimeout"): "DEADLINE_EXCEEDED",
    ("requests", "ReadTimeout"): "DEADLINE_EXCEEDED",
    ("requests", "Timeout"): "DEADLINE_EXCEEDED",
    ("requests", "ConnectionError"): "UNAVAILABLE",
    ("requests", "ChunkedEncodingError"): "UNAVAILABLE",
    ("urllib3", "NewConnectionError"): "UNAVAILABLE",
    ("urllib3", "TimeoutError"): "DEADLINE_EXCEEDED",
    ("urllib3", "ProtocolError"): "UNAVAILABLE",
    ("urllib3", "MaxRetryError"): "UNAVAILABLE",
    ("urllib3", "PoolError"): "UNAVAILABLE",
    ("urllib3", "IncompleteRead"): "UNAVAILABLE",
    ("google", "TransportError"): "UNAVAILABLE",
}


def transport_status_name(exc: BaseException) -> str | None:
    """The status a connection-level error stands for, or None if ``exc`` is not one.

    ``UNAVAILABLE`` for a refused, reset or dropped connection, ``DEADLINE_EXCEEDED`` for a
    connection or read that timed out: the names a gRPC channel gives the same failures.
    """
    for cls in type(exc).__mro__:
        top = (cls.__module__ or "").split(".", 1)[0]
        name = _TRANSPORT_ERRORS.get((top, cls.__name__))
        if name is not None:
            return name
    if isinstance(exc, TimeoutError):
        return "DEADLINE_EXCEEDED"
    if isinstance(exc, ConnectionError):
        return "UNAVAILABLE"
    return None


def status_name(exc: BaseException) -> str | None:
    """The gRPC status name of a client error (``"UNAVAILABLE"``), or None if it has none.

    Connection-level errors of REST clients have no status; :func:`transport_status_name`
    names them.
    """
    code = getattr(exc, "grpc_status_code", None)
    if code is not None:
        return getattr(code, "name", str(code))
    code_attr = getattr(exc, "code", None)
    if callable(code_attr):
        try:
            value = code_attr()
        except Exception:  # noqa: BLE001 - a foreign exception's accessor; classification only
            value = None
        if value is not None and hasattr(value, "name"):
            return str(value.name)
    elif isinstance(code_attr, int):
        return _HTTP_TO_GRPC.get(code_attr)
    return transport_status_name(exc)


_RETRY_INFO = "google.rpc.RetryInfo"
_STATUS_DETAILS = "grpc-status-details-bin"


def _delay_of(detail: Any) -> float | None:
    """The delay of one status detail: a ``RetryInfo`` message, or an ``Any`` holding one."""
    type_url = getattr(detail, "type_url", None)
    if isinstance(type_url, str):
        if not type_url.endswith("/" + _RETRY_INFO):
            return None
        try:
            from google.rpc import error_details_pb2  # optional: the googleapis protos
        except ImportError:
            return None
        info = error_details_pb2.RetryInfo()
        try:
            info.ParseFromString(detail.value)
        except Exception:  # noqa: BLE001 - a malformed detail is no hint
            return None
        detail = info
    delay = getattr(detail, "retry_delay", None)
    if delay is None or not hasattr(delay, "seconds"):
        return None
    return float(delay.seconds) + float(getattr(delay, "nanos", 0)) / 1e9


def _delay_of_metadata(metadata: Any) -> float | None:
    """The ``RetryInfo`` delay in a gRPC call's trailing ``grpc-status-details-bin``."""
    for key, value in metadata or ():
        if key != _STATUS_DETAILS:
            continue
        try:
            from google.rpc import status_pb2  # optional: the googleapis protos
        except ImportError:
            return None
        status = status_pb2.Status()
        try:
            status.ParseFromString(value)
        except Exception:  # noqa: BLE001 - a malformed trailer is no hint
            return None
        for detail in status.details:
            delay = _delay_of(detail)
            if delay is not None:
                return delay
    return None


def _delay_of_trailers(call: Any) -> float | None:
    """The ``RetryInfo`` delay of a gRPC error's trailing metadata, if it has any."""
    trailing = getattr(call, "trailing_metadata", None)
    if not callable(trailing):
        return None
    try:
        return _delay_of_metadata(trailing())
    except Exception:  # noqa: BLE001 - a foreign exception's accessor; a hint only
        return None


def retry_delay_s(exc: BaseException) -> float | None:
    """How long the server asked the client to wait before retrying, if it said so.

    Read where it is cheap to: a ``google.rpc.RetryInfo`` among the error's ``details``
    (``google.api_core`` exceptions parse them from the call's status), in a raw gRPC error's
    trailing ``grpc-status-details-bin`` (or that of the gRPC error an api_core exception
    wraps), or an HTTP response's ``Retry-After`` in seconds. A hint is a lower bound on the
    wait; None when there is none.
    """
    details = getattr(exc, "details", None)
    if isinstance(details, list | tuple):  # a raw gRPC error's details() is its message
        for detail in details:
            delay = _delay_of(detail)
            if delay is not None:
                return delay
    inner = getattr(exc, "errors", None)  # api_core keeps the gRPC error here
    for call in (exc, *(inner if isinstance(inner, list | tuple) else ())):
        delay = _delay_of_trailers(call)
        if delay is not None:
            return delay
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is not None:
        try:
            value = headers.get("Retry-After")
            return max(0.0, float(value)) if value is not None else None
        except (TypeError, ValueError, AttributeError):
            return None  # an HTTP date, or no mapping: no hint
    return None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter, bounded by a total deadline; quota errors slower.

    Attributes:
        initial_backoff_s: The first wait.
        max_backoff_s: The longest single wait.
        multiplier: Growth of the wait per attempt.
        deadline_s: Total time spent retrying one call before the job fails; time spent on
            quota errors does not count.
        transient_codes: gRPC status names that are retried.
        quiet_attempts: Retries logged at DEBUG before the first WARNING. 0 (the default)
            warns at once; a policy for errors that are part of normal operation (Spanner's
            ABORTED under contention) raises it so that only a persisting failure warns.
        quota_initial_backoff_s: The first wait after a quota error: about the time a quota
            takes to refill a little.
        quota_max_backoff_s: The longest wait after a quota error (most quotas are per minute).
        quota_deadline_s: Total time one call may spend failing with quota errors and
            anything else; None (the default) is :data:`QUOTA_DEADLINE_FACTOR` times
            ``deadline_s``.
    """

    initial_backoff_s: float = 0.1
    max_backoff_s: float = 10.0
    multiplier: float = 2.0
    deadline_s: float = 120.0
    transient_codes: frozenset[str] = TRANSIENT_CODES
    quiet_attempts: int = 0
    quota_initial_backoff_s: float = 1.0
    quota_max_backoff_s: float = 60.0
    quota_deadline_s: float | None = None

    def __post_init__(self) -> None:
        if self.initial_backoff_s <= 0 or self.max_backoff_s < self.initial_backoff_s:
            raise ValueError("RetryPolicy needs 0 < initial_backoff_s <= max_backoff_s")
        if self.multiplier < 1 or self.deadline_s < 0:
            raise ValueError("RetryPolicy needs multiplier >= 1 and deadline_s >= 0")
        if self.quota_initial_backoff_s <= 0 or (
            self.quota_max_backoff_s < self.quota_initial_backoff_s
        ):
            raise ValueError("RetryPolicy needs 0 < quota_initial_backoff_s <= quota_max_backoff_s")
        if self.quota_deadline_s is not None and self.quota_deadline_s < 0:
            raise ValueError("RetryPolicy needs quota_deadline_s >= 0")

    @property
    def quota_deadline(self) -> float:
        """The bound on a call's retries once quota errors are among them, in seconds."""
        if self.quota_deadline_s is not None:
            return self.quota_deadline_s
        return self.deadline_s * QUOTA_DEADLINE_FACTOR

    def is_transient(self, exc: BaseException) -> bool:
        return status_name(exc) in self.transient_codes

    def is_quota(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a quota error this policy retries (``RESOURCE_EXHAUSTED``)."""
        name = status_name(exc)
        return name in QUOTA_CODES and name in self.transient_codes

    def stall_bound(self, attempt_timeout_s: float) -> float:
        """How long a call of this policy can go without an outcome, with all its retries: the
        quota deadline (or the retry deadline, if longer), one more attempt and
        :data:`STALL_MARGIN_S`. A wait on such calls that sees none end for longer lost a
        completion between threads (:class:`~pyflink_gcp.core.batching.InFlightWindow`'s
        ``stall_s``)."""
        return max(self.deadline_s, self.quota_deadline) + attempt_timeout_s + STALL_MARGIN_S

    def attempt_timeout(self, timeout_s: float) -> float:
        """The timeout of one attempt: ``timeout_s``, but no longer than the retry deadline.

        An endpoint that accepts connections and never answers fails each attempt only at its
        timeout; capping the attempt at the deadline (and at least
        :data:`MIN_ATTEMPT_TIMEOUT_S`, so a zero deadline still gets one fair attempt) makes a
        call fail within the deadline plus one attempt, whatever the service's own timeout.
        """
        return min(timeout_s, max(self.deadline_s, MIN_ATTEMPT_TIMEOUT_S))

    def backoffs(self, window: QuotaWindow | None = None) -> BackoffSequence:
        """A fresh sequence of waits for one logical call; quota errors it meets are reported
        to ``window``, the sink's in-flight window, if given."""
        return BackoffSequence(self, window)

    def call(self, fn: Callable[[], T], what: str, window: QuotaWindow | None = None) -> T:
        """Call ``fn`` until it succeeds, retrying transient errors until the deadline.

        Args:
            fn: The call to make.
            what: A description for logs and the final error (names sink and destination).
            window: The sink's in-flight window: told of quota errors and of the success.

        Raises:
            WriteError: The deadline passed with the call still failing transiently.
            Exception: Any non-transient error of ``fn``, unchanged.
        """
        backoff = self.backoffs(window)
        while True:
            try:
                result = fn()
            except Exception as exc:
                if not self.is_transient(exc):
                    raise
                backoff.wait_or_raise(exc, what)
            else:
                if window is not None:
                    window.on_success()
                return result


class BackoffSequence:
    """The waits of one logical call; raises once the policy's deadline would be exceeded.

    Two schedules share the sequence: transient errors back off from ``initial_backoff_s``
    with full jitter and count against ``deadline_s``; quota errors back off from
    ``quota_initial_backoff_s`` with equal jitter (or as long as the server asked, a little
    more), and only count against the policy's quota deadline. So a service that answers
    nothing fails at the retry deadline, and one that keeps answering RESOURCE_EXHAUSTED is
    retried slowly for much longer.
    """

    __slots__ = (
        "_policy",
        "_window",
        "_start",
        "_last",
        "_next",
        "_quota_next",
        "_quota_s",
        "attempts",
        "quota_attempts",
    )

    def __init__(self, policy: RetryPolicy, window: QuotaWindow | None = None) -> None:
        self._policy = policy
        self._window = window
        self._start = self._last = time.monotonic()
        self._next = policy.initial_backoff_s
        self._quota_next = policy.quota_initial_backoff_s
        self._quota_s = 0.0  # time of quota-failed attempts and their waits
        self.attempts = 0
        self.quota_attempts = 0

    def _quota_sleep(self, exc: BaseException) -> float:
        policy = self._policy
        hint = retry_delay_s(exc)
        if hint is not None:
            # At least what the server asked for, spread a little so that the subtasks told
            # the same do not come back at the same instant.
            return min(hint * random.uniform(1.0, 1.2), policy.quota_max_backoff_s)
        return random.uniform(self._quota_next / 2, self._quota_next)

    def wait_or_raise(self, exc: BaseException, what: str) -> None:
        """Sleep before the next attempt after ``exc``; raise once the deadline would pass."""
        time.sleep(self.next_wait(exc, what))

    def next_wait(self, exc: BaseException, what: str) -> float:
        """The wait before the next attempt after ``exc``, counted as spent: for a caller that
        sleeps without blocking its thread (``await asyncio.sleep`` on an event loop).

        Raises:
            WriteError: The wait would pass the deadline (the retry or the quota deadline).
        """
        policy = self._policy
        now = time.monotonic()
        self.attempts += 1
        elapsed = now - self._start
        quota = policy.is_quota(exc)
        if quota:
            self.quota_attempts += 1
            self._quota_s += now - self._last
            if self._window is not None:
                self._window.on_quota_error()
            sleep = self._quota_sleep(exc)
            spent, deadline, kind = elapsed, policy.quota_deadline, "quota deadline"
        else:
            sleep = random.uniform(0, self._next)
            spent, deadline, kind = elapsed - self._quota_s, policy.deadline_s, "retry deadline"
        if spent + sleep > deadline:
            quota_note = (
                f", {self.quota_attempts} of them quota errors" if self.quota_attempts else ""
            )
            raise WriteError(
                f"{what}: still failing after {self.attempts} attempts in {elapsed:.1f}s "
                f"({kind} {deadline:.0f}s{quota_note}): {status_name(exc)}: {exc}"
            ) from exc
        quiet = policy.quiet_attempts
        if self.attempts <= quiet:
            level = logging.DEBUG
        elif self.attempts == quiet + 1 or self.attempts % 10 == 0:
            level = logging.WARNING
        else:
            level = 0
        if level:
            _LOG.log(
                level,
                "%s: %s %s, retrying in %.1fs (attempt %d): %s",
                what,
                "quota error" if quota else "transient",
                status_name(exc),
                sleep,
                self.attempts,
                exc,
            )
        self._last = now + sleep
        if quota:
            self._quota_s += sleep
            self._quota_next = min(self._quota_next * policy.multiplier, policy.quota_max_backoff_s)
        else:
            self._next = min(self._next * policy.multiplier, policy.max_backoff_s)
        return sleep
