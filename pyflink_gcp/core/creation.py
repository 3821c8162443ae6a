"""The creation bound of the sinks that create destinations: a budget per subtask and window.

Under ``CreateDisposition.CREATE_IF_NEEDED`` a sink creates every destination its resolver names
that does not exist yet (a topic, a table). A resolver that names a new destination per record
(a table per user id instead of per day) would create resources without end, so each subtask
holds a :class:`CreationBudget`: ``max_created_destinations`` creations per
``max_created_destinations_per`` window (default :data:`DEFAULT_MAX_CREATED` per
:data:`DEFAULT_WINDOW`, 500 an hour). One creation more fails the job with
:class:`~pyflink_gcp.core.errors.CreationLimitExceededError`, which names the bound and how to
change it (:meth:`CreationBudget.exceeded`).

The budget is a token bucket: it starts full (``n`` tokens), each creation takes one, and tokens
come back continuously at ``n`` per window, never more than ``n``. So a subtask may create ``n``
destinations at once, and then ``n`` per window for as long as it runs:

- A job that creates a destination per day or per hour (per tenant too, up to ``n`` tenants)
  runs forever: between two of its bursts the bucket fills up again.
- A backfill that replays a year of daily tables creates 366 at once, within the burst: it
  passes however fast it reads its input.
- A runaway resolver creates as fast as the service answers (tens to hundreds a second against
  an emulator, several a second against a service) and empties the bucket in seconds to a few
  minutes; a bound counted over the subtask's whole life would instead stop every long-lived job
  with a destination per day, and a bound over a short window would stop every backfill.

A token bucket rather than a sliding window of the last ``n`` creations: it needs no memory of
past creations, and a job whose bursts come exactly once per window (a table per tenant and
hour) gets its whole budget back between them, where a sliding window would count two bursts
in one window. A resolver that creates slower than ``n`` per window is not stopped: the budget
guards against runaways, it is not a quota.

Time is :func:`time.monotonic`, so a step of the wall clock neither refills nor empties the
bucket. The budget lives in the subtask's memory, and is not part of a checkpoint: a restarted
subtask (after a failover, from a checkpoint or a savepoint, or a new run of the job) starts
with a full budget. A replay after a restart finds the destinations created before it in place
and does not count them again. A runaway ends the job once, without restarts, where the Java
bridge's operator runs the writer (the error is non-retriable); where a job restarts anyway,
each attempt may create up to ``n`` destinations more.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta

from pyflink_gcp.core.errors import CreationLimitExceededError

#: ``max_created_destinations``' default: a year of daily tables (366) in one burst, with room.
DEFAULT_MAX_CREATED = 500
#: ``max_created_destinations_per``' default: the window over which the budget refills.
DEFAULT_WINDOW = timedelta(hours=1)

#: Units of :func:`format_window`, largest first: the SQL duration syntax.
_UNITS = (
    ("d", timedelta(days=1)),
    ("h", timedelta(hours=1)),
    ("min", timedelta(minutes=1)),
    ("s", timedelta(seconds=1)),
    ("ms", timedelta(milliseconds=1)),
)


def format_window(window: timedelta) -> str:
    """``window`` in the SQL duration syntax: ``1h``, ``90min``, ``1d``, ``500ms``."""
    for suffix, unit in _UNITS:
        if window >= unit and window % unit == timedelta(0):
            return f"{window // unit}{suffix}"
    return str(window)


def describe_bound(limit: int, window: timedelta) -> str:
    """The bound as errors name it: ``max_created_destinations=500 per 1h``."""
    return f"max_created_destinations={limit} per {format_window(window)}"


def _elapsed(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes}min {int(seconds % 60)}s"
    return f"{minutes // 60}h {minutes % 60}min"


class CreationBudget:
    """The creations one sink subtask may still make: a token bucket (see the module).

    Thread-safe: BigQuery creates tables on its metadata threads. A creation takes its token
    before the call (:meth:`take`), so concurrent creations cannot overshoot the bound, and gives
    it back (:meth:`give_back`) when nothing was created: the call failed, or another subtask
    created the destination first.

    Args:
        limit: ``n``, the burst and the creations per window (0: no creation at all).
        per: The window over which ``n`` tokens come back.
        clock: Seconds of a monotonic clock (tests pass a fake one).

    Attributes:
        created: Creations made (taken and not given back) since the subtask started.
    """

    def __init__(
        self,
        limit: int,
        per: timedelta = DEFAULT_WINDOW,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 0 or per <= timedelta(0):
            raise ValueError(
                f"a creation budget needs limit >= 0 and a positive window: {limit}, {per}"
            )
        self.limit = limit
        self.per = per
        self._window_s = per.total_seconds()
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens = float(limit)
        self._refilled = clock()
        # The creations since the bucket was last full, and when that was: what the error
        # reports ("500 tables in the last 4.2s").
        self._run = 0
        self._run_start = self._refilled
        self.created = 0

    @property
    def bound(self) -> str:
        """The bound as errors name it: ``max_created_destinations=500 per 1h``."""
        return describe_bound(self.limit, self.per)

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._refilled)
        self._refilled = now
        self._tokens = min(float(self.limit), self._tokens + elapsed * self.limit / self._window_s)

    def take(self) -> bool:
        """Take the token of one creation; False (nothing taken) when the bucket is empty."""
        with self._lock:
            now = self._clock()
            self._refill(now)
            if self._tokens >= self.limit:
                self._run = 0
                self._run_start = now
            if self._tokens < 1.0:
                return False
            self._tokens -= 1.0
            self._run += 1
            self.created += 1
            return True

    def give_back(self) -> None:
        """Return the token of a creation that created nothing."""
        with self._lock:
            self._refill(self._clock())
            self._tokens = min(float(self.limit), self._tokens + 1.0)
            self._run = max(0, self._run - 1)
            self.created = max(0, self.created - 1)

    def exceeded(
        self, *, sink: str, what: str, noun: str, resolver: str, owner: str, detail: str = ""
    ) -> CreationLimitExceededError:
        """The error of a creation the budget refused (:meth:`take` returned False).

        Args:
            sink: The sink's name.
            what: The creation refused, ``creating table p.d.t``.
            noun: What the sink creates, plural (``topics``, ``tables``).
            resolver: The resolver's description.
            owner: The writer options' class, named in how to raise the bound.
            detail: Said after the counts, in parentheses (the last names created).
        """
        with self._lock:
            run, elapsed, total = self._run, self._clock() - self._run_start, self.created
        notes = [f"{total:,} since it started"] if total != run else []
        notes += [detail] if detail else []
        if self.limit == 0:
            counts = f"this subtask may create no {noun}"
        else:
            counts = f"this subtask created {run:,} {noun} in the last {_elapsed(elapsed)}"
        if notes:
            counts += f" ({'; '.join(notes)})"
        return CreationLimitExceededError(
            f"sink '{sink}': {what} would exceed {self.bound}: {counts}. The destination "
            f"resolver {resolver} names new {noun} faster than the bound allows; fix the "
            f"resolver, or raise the bound with {owner}.builder().max_created_destinations("
            "n, per=timedelta(...)) (in SQL: 'sink.max-created-destinations' and "
            "'sink.max-created-destinations.per')."
        )
