"""Quota errors: the in-flight window that shrinks while a service answers RESOURCE_EXHAUSTED.

A quota error (gRPC ``RESOURCE_EXHAUSTED``, HTTP 429) says the service is up and refusing work
until a quota refills. Retrying it like an outage (fast backoff, the same number of requests in
flight) keeps the quota drained and wastes the retry deadline; so the sinks answer it in two
ways. The retry policy (:mod:`pyflink_gcp.core.retry`) waits longer after a quota error and
does not count that time towards ``retry_deadline``. And every sink keeps one
:class:`QuotaWindow` per subtask over the bound it already has on requests in flight
(``max_in_flight_requests``, Pub/Sub's subtask window): the window halves at each quota error
and grows back by about one request per round trip of successes (AIMD, as TCP does with its
congestion window), so the sink sends fewer requests while the quota is short and returns to
its configured concurrency once the service accepts them again.

This module knows no service and no client library; it is thread safe, since the sinks report
outcomes from gRPC callback threads, sender pools and their processing thread alike.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

_LOG = logging.getLogger("pyflink_gcp.quota")


class QuotaWindow:
    """An additive-increase, multiplicative-decrease bound on a subtask's requests in flight.

    The sinks read :attr:`limit` where they bounded their requests by a fixed number (a sink
    that runs its requests on threads can hold a :meth:`slot` instead), report each quota
    error with :meth:`on_quota_error` and each accepted request with :meth:`on_success`.

    Args:
        maximum: The configured bound (``max_in_flight_requests`` or the sink's own); the
            window starts there and never grows past it.
        name: What the window bounds, for the log (``"sink 'orders': Publish requests"``).

    Attributes:
        quota_errors: Quota errors reported since the window was made.
        reductions: Times the window shrank.
    """

    def __init__(self, maximum: int, name: str = "requests") -> None:
        if maximum < 1:
            raise ValueError(f"QuotaWindow needs maximum >= 1, got {maximum}")
        self.maximum = maximum
        self.name = name
        self._limit = float(maximum)
        self._in_use = 0
        self._cond = threading.Condition(threading.Lock())
        self.quota_errors = 0
        self.reductions = 0

    @property
    def limit(self) -> int:
        """Requests the sink may have in flight now (at least 1, at most ``maximum``)."""
        return int(self._limit)

    def on_success(self) -> None:
        """A request was accepted: the window grows by ``1/limit``, about one request per
        round trip of a full window, so it regains its size gradually and a quota that is
        still short is met again with few requests rather than with all of them."""
        if self._limit >= self.maximum:
            return  # the common case: no lock on the hot path
        with self._cond:
            before = int(self._limit)
            self._limit = min(float(self.maximum), self._limit + 1.0 / self._limit)
            if int(self._limit) > before:
                self._cond.notify_all()
                if int(self._limit) == self.maximum:
                    _LOG.info("%s: back to %d in flight", self.name, self.maximum)

    def on_quota_error(self, in_flight: int | None = None) -> None:
        """A request met a quota error: halve the window (down to 1).

        Args:
            in_flight: The requests in flight when it failed, if the caller knows: the window
                halves from the smaller of it and the limit, so a sink that used less than its
                limit slows down at once rather than after several halvings.
        """
        with self._cond:
            self.quota_errors += 1
            base = self._limit if in_flight is None else min(self._limit, float(in_flight))
            reduced = max(1.0, base / 2.0)
            if int(reduced) < int(self._limit):
                self.reductions += 1
                level = logging.WARNING if self.reductions == 1 else logging.INFO
                _LOG.log(
                    level,
                    "%s: quota error (RESOURCE_EXHAUSTED); %d in flight at most, was %d "
                    "(%d quota errors so far)",
                    self.name,
                    int(reduced),
                    int(self._limit),
                    self.quota_errors,
                )
            self._limit = min(self._limit, reduced)

    # -- for sinks whose requests run on threads -----------------------------------------------

    def acquire(self) -> None:
        """Wait until fewer than :attr:`limit` slots are held, then hold one."""
        with self._cond:
            while self._in_use >= int(self._limit):
                self._cond.wait()
            self._in_use += 1

    def release(self) -> None:
        """Give back a slot taken with :meth:`acquire`."""
        with self._cond:
            self._in_use -= 1
            self._cond.notify()

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one slot of the window for the duration of a request."""
        self.acquire()
        try:
            yield
        finally:
            self.release()

    @property
    def in_use(self) -> int:
        """Slots held now (:meth:`acquire`)."""
        return self._in_use

    def __repr__(self) -> str:
        return (
            f"QuotaWindow({self.name}: limit {self.limit}/{self.maximum}, "
            f"{self.quota_errors} quota errors)"
        )
