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
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from pyflink_gcp.core.errors import WriteError

_LOG = logging.getLogger("pyflink_gcp.retry")

T = TypeVar("T")

#: gRPC status names retried by default.
TRANSIENT_CODES: frozenset[str] = frozenset(
    {"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED", "INTERNAL"}
)

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


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter, bounded by a total deadline.

    Attributes:
        initial_backoff_s: The first wait.
        max_backoff_s: The longest single wait.
        multiplier: Growth of the wait per attempt.
        deadline_s: Total time spent retrying one call before the job fails.
        transient_codes: gRPC status names that are retried.
        quiet_attempts: Retries logged at DEBUG before the first WARNING. 0 (the default)
            warns at once; a policy for errors that are part of normal operation (Spanner's
            ABORTED under contention) raises it so that only a persisting failure warns.
    """

    initial_backoff_s: float = 0.1
    max_backoff_s: float = 10.0
    multiplier: float = 2.0
    deadline_s: float = 120.0
    transient_codes: frozenset[str] = TRANSIENT_CODES
    quiet_attempts: int = 0

    def __post_init__(self) -> None:
        if self.initial_backoff_s <= 0 or self.max_backoff_s < self.initial_backoff_s:
            raise ValueError("RetryPolicy needs 0 < initial_backoff_s <= max_backoff_s")
        if self.multiplier < 1 or self.deadline_s < 0:
            raise ValueError("RetryPolicy needs multiplier >= 1 and deadline_s >= 0")

    def is_transient(self, exc: BaseException) -> bool:
        return status_name(exc) in self.transient_codes

    def attempt_timeout(self, timeout_s: float) -> float:
        """The timeout of one attempt: ``timeout_s``, but no longer than the retry deadline.

        An endpoint that accepts connections and never answers fails each attempt only at its
        timeout; capping the attempt at the deadline (and at least
        :data:`MIN_ATTEMPT_TIMEOUT_S`, so a zero deadline still gets one fair attempt) makes a
        call fail within the deadline plus one attempt, whatever the service's own timeout.
        """
        return min(timeout_s, max(self.deadline_s, MIN_ATTEMPT_TIMEOUT_S))

    def backoffs(self) -> BackoffSequence:
        """A fresh sequence of waits for one logical call."""
        return BackoffSequence(self)

    def call(self, fn: Callable[[], T], what: str) -> T:
        """Call ``fn`` until it succeeds, retrying transient errors until the deadline.

        Args:
            fn: The call to make.
            what: A description for logs and the final error (names sink and destination).

        Raises:
            WriteError: The deadline passed with the call still failing transiently.
            Exception: Any non-transient error of ``fn``, unchanged.
        """
        backoff = self.backoffs()
        while True:
            try:
                return fn()
            except Exception as exc:
                if not self.is_transient(exc):
                    raise
                backoff.wait_or_raise(exc, what)


class BackoffSequence:
    """The waits of one logical call; raises once the policy's deadline would be exceeded."""

    __slots__ = ("_policy", "_start", "_next", "attempts")

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy
        self._start = time.monotonic()
        self._next = policy.initial_backoff_s
        self.attempts = 0

    def wait_or_raise(self, exc: BaseException, what: str) -> None:
        self.attempts += 1
        elapsed = time.monotonic() - self._start
        sleep = random.uniform(0, self._next)
        if elapsed + sleep > self._policy.deadline_s:
            raise WriteError(
                f"{what}: still failing after {self.attempts} attempts in {elapsed:.1f}s "
                f"(retry deadline {self._policy.deadline_s:.0f}s): {status_name(exc)}: {exc}"
            ) from exc
        quiet = self._policy.quiet_attempts
        if self.attempts <= quiet:
            level = logging.DEBUG
        elif self.attempts == quiet + 1 or self.attempts % 10 == 0:
            level = logging.WARNING
        else:
            level = 0
        if level:
            _LOG.log(
                level,
                "%s: transient %s, retrying (attempt %d): %s",
                what,
                status_name(exc),
                self.attempts,
                exc,
            )
        time.sleep(sleep)
        self._next = min(self._next * self._policy.multiplier, self._policy.max_backoff_s)
