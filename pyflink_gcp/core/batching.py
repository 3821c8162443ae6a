"""The two shapes every writer batches with: the batch being filled, and the requests in flight.

Each sink turns records into requests the same way: records gather in an *open batch* until it
is full (by count or bytes) or old enough, then the batch is *cut* and sent as one request, and
a bounded number of requests run at once while the processing thread fills the next batch. The
services differ in what a request is (a Publish, a MutateRows, a commit, an AppendRows) and in
their cut rules (Spanner's mutation budget, BigQuery's change-data-capture keys), not in this
bookkeeping, so it lives here once:

- :class:`OpenBatch` holds the elements of the batch being filled, their bytes and the time its
  first element came. The time is what lets the sink, under checkpoint markers, send a batch at
  a bundle end only once it is due
  (:attr:`~pyflink_gcp.core.writer.DestinationWriter.unsent_since`), so that thousands of
  destinations do not each send a one-record request at every bundle end.
- :class:`InFlightWindow` bounds the requests in flight and learns their outcomes by callback.
  A request's completion callback (on whatever thread completes it: gRPC's polling thread, a
  sender pool) releases its slot, records the first error and keeps the request's rejected
  records; no thread waits on an answer. The processing thread blocks only in
  :meth:`InFlightWindow.admit`, when the window is full (Flink backpressure), and in
  :meth:`InFlightWindow.drain`, before a checkpoint barrier, where every request must be done.

Two helpers serve writers whose requests complete by callback: :class:`Timers`, one thread
that ends every backoff of a subtask, and :class:`Slots`, a bound on things held at once (a
subtask's connections) whose waiters are called back when one is free.

Both know no service and no client library: a request is any ``concurrent.futures.Future`` or
``grpc.Future`` (anything with ``add_done_callback`` and ``exception``).
"""

from __future__ import annotations

import heapq
import logging
import math
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import CancelledError
from functools import partial
from typing import Any, Generic, TypeVar

from pyflink_gcp.core.errors import WriteError
from pyflink_gcp.core.quota import QuotaWindow
from pyflink_gcp.core.waits import LazyCondition

E = TypeVar("E")
R = TypeVar("R")

#: The longest a blocked :meth:`InFlightWindow.admit` sleeps before it looks again: a quota
#: window that grew back (it does not wake this window) is noticed within it.
_RECHECK_S = 0.5


class OpenBatch(Generic[E]):
    """The batch being filled: its elements, their bytes, and since when it holds any.

    Driven from the processing thread only. :meth:`append` says when the batch is full; the
    writer then :meth:`cut` s it and sends what it returns. A service that must cut earlier
    (the next element would not fit, :meth:`fits`; a key already in the batch) cuts on its
    own rule first.

    Args:
        max_elements: The batch is full at this many elements.
        max_bytes: The batch is full at this many bytes (the sizes given to :meth:`append`).

    Attributes:
        elements: The elements, in arrival order.
        bytes: The sum of their sizes.
        since: ``time.monotonic()`` when the first element came; ``math.inf`` when empty, so
            an empty batch is never due.
    """

    __slots__ = ("bytes", "elements", "max_bytes", "max_elements", "since")

    def __init__(self, max_elements: int = sys.maxsize, max_bytes: int = sys.maxsize) -> None:
        if max_elements < 1 or max_bytes < 1:
            raise ValueError(
                f"OpenBatch needs positive limits, got {max_elements} elements, {max_bytes} bytes"
            )
        self.max_elements = max_elements
        self.max_bytes = max_bytes
        self.elements: list[E] = []
        self.bytes = 0
        self.since = math.inf

    def __len__(self) -> int:
        return len(self.elements)

    def __bool__(self) -> bool:
        return bool(self.elements)

    def append(self, element: E, size: int = 0) -> bool:
        """Add one element of ``size`` bytes; True when the batch is now full."""
        elements = self.elements
        if not elements:
            self.since = time.monotonic()
        elements.append(element)
        self.bytes = total = self.bytes + size
        return len(elements) >= self.max_elements or total >= self.max_bytes

    def fits(self, size: int) -> bool:
        """Whether an element of ``size`` bytes can join without passing ``max_bytes`` (an
        empty batch takes any element: one too large alone is the service's to refuse)."""
        return not self.elements or self.bytes + size <= self.max_bytes

    @property
    def is_full(self) -> bool:
        """Whether the batch reached either limit."""
        return len(self.elements) >= self.max_elements or self.bytes >= self.max_bytes

    def is_due(self, cutoff: float) -> bool:
        """Whether the batch holds elements that came at ``cutoff`` (a monotonic time) or
        before, i.e. is old enough to be sent at a bundle end."""
        return self.since <= cutoff

    def cut(self) -> list[E]:
        """Take the elements out, leaving the batch empty (and not due)."""
        elements = self.elements
        self.elements = []
        self.bytes = 0
        self.since = math.inf
        return elements


class InFlightWindow(Generic[R]):
    """A bound on the requests in flight, whose completions are learnt by callback.

    The processing thread calls :meth:`admit` before it starts a request (waiting while the
    window is full) and :meth:`add` with the request's future. When the future completes, its
    callback, on the thread that completed it, gives the slot back and wakes a waiting
    :meth:`admit`. With ``collect``, it also keeps what the request returned (a sequence of
    rejected records, extended into :meth:`take_results`) or, if it failed, its error: the
    first error is raised by :meth:`drain` (and, with ``fail_fast``, by the next
    :meth:`admit`), so a failed request stops the writer without any thread having waited for
    it.

    The window bounds the count of requests (``max_requests``, lowered by a
    :class:`~pyflink_gcp.core.quota.QuotaWindow` after quota errors) and, optionally, the
    elements and bytes they carry. A request is always admitted into an empty window, so one
    larger than the byte bound still goes out.

    A wait never trusts a completion to come: with ``stall_s``, a wait during which no request
    completed for that long raises a ``WriteError`` naming the window. Each request is bounded
    by its own deadline and retries, so a wait that outlives that bound (``stall_s``, from
    :meth:`~pyflink_gcp.core.retry.RetryPolicy.stall_bound`) lost a completion between
    threads, and ends the task rather than hanging it.

    A sink keeps one window per destination writer, so its size counts at thousands of
    destinations: the fields are slots, and the condition the waits need exists only while a
    wait does (a condition weighs about 1.2 KB, and a window waits at most at a flush).

    Args:
        max_requests: Requests in flight at most; None: no bound on the count.
        what: What the window bounds, for errors (``"sink 'orders': Publish requests"``).
        quota: The quota window whose :attr:`~pyflink_gcp.core.quota.QuotaWindow.limit`
            lowers ``max_requests`` while the service answers RESOURCE_EXHAUSTED.
        max_elements: Elements in flight at most (the ``elements`` of :meth:`add`).
        max_bytes: Bytes in flight at most (the ``size`` of :meth:`add`).
        collect: Keep the requests' results and first error (a writer's own window); False
            for a window that only bounds requests whose outcomes are read elsewhere.
        fail_fast: :meth:`admit` raises the first error, so no request starts after one
            failed; without it the error waits for :meth:`drain`.
        on_done: Called with each request's error (None on success) after its slot is free,
            on the completing thread: how a window tells a quota window the outcomes.
        stall_s: A wait with no completion for this long raises; None: it waits as long as
            requests are in flight.
    """

    __slots__ = (
        "max_requests",
        "what",
        "quota",
        "max_elements",
        "max_bytes",
        "_collect",
        "_fail_fast",
        "_on_done",
        "_lock",
        "_waits",
        "_requests",
        "_elements",
        "_bytes",
        "_results",
        "_error",
        "_completed",
        "stall_s",
        "last",
    )

    def __init__(
        self,
        max_requests: int | None = None,
        *,
        what: str = "requests",
        quota: QuotaWindow | None = None,
        max_elements: int | None = None,
        max_bytes: int | None = None,
        collect: bool = True,
        fail_fast: bool = False,
        on_done: Callable[[BaseException | None], None] | None = None,
        stall_s: float | None = None,
    ) -> None:
        self.max_requests = sys.maxsize if max_requests is None else max_requests
        self.what = what
        self.quota = quota
        self.max_elements = sys.maxsize if max_elements is None else max_elements
        self.max_bytes = sys.maxsize if max_bytes is None else max_bytes
        self._collect = collect
        self._fail_fast = fail_fast
        self._on_done = on_done
        # The counters' lock, taken as a plain lock where nobody waits (the completions), and
        # as a condition by the waits, which alone are woken. The condition over it exists
        # only while a wait does.
        self._lock = threading.Lock()
        self._waits = LazyCondition(self._lock)
        self._requests = 0
        self._elements = 0
        self._bytes = 0
        self._results: list[R] = []
        self._error: BaseException | None = None
        #: Requests completed so far: a wait that sees it move knows the requests progress.
        self._completed = 0
        self.stall_s = stall_s
        #: The request added last (a writer chaining ordered requests waits for it).
        self.last: Any = None

    @property
    def limit(self) -> int:
        """Requests allowed in flight now: ``max_requests``, less after quota errors."""
        quota = self.quota
        return self.max_requests if quota is None else min(self.max_requests, quota.limit)

    @property
    def outstanding(self) -> int:
        """Requests added and not yet complete."""
        return self._requests

    @property
    def outstanding_elements(self) -> int:
        return self._elements

    @property
    def outstanding_bytes(self) -> int:
        return self._bytes

    @property
    def is_clean(self) -> bool:
        """Nothing in flight, and no result or error not yet taken."""
        return not self._requests and not self._results and self._error is None

    def _has_room(self, elements: int, size: int) -> bool:
        quota = self.quota
        if self._requests >= (
            self.max_requests if quota is None else min(self.max_requests, quota.limit)
        ):
            return False
        if not self._elements:
            return True
        return (
            self._elements + elements <= self.max_elements and self._bytes + size <= self.max_bytes
        )

    def admit(self, elements: int = 0, size: int = 0, timeout: float | None = None) -> None:
        """Wait until a request of ``elements`` elements and ``size`` bytes fits.

        Args:
            elements: The request's elements, against ``max_elements``.
            size: The request's bytes, against ``max_bytes``.
            timeout: Seconds to wait at most; None: as long as requests are in flight.

        Raises:
            BaseException: With ``fail_fast``, the first error of a completed request (taken:
                raised once).
            WriteError: No slot freed within ``timeout``.
        """
        if (self._error is None or not self._fail_fast) and self._has_room(elements, size):
            return  # the common case, without the lock: only completions change the counts
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            progress = [self._completed, time.monotonic()]
            while True:
                error = self._error
                if error is not None and self._fail_fast:
                    self._error = None
                    raise error
                if self._has_room(elements, size):
                    return
                self._wait_until(
                    deadline,
                    timeout,
                    "none of the {} requests in flight completed within",
                    progress,
                )

    def _wait_until(
        self, deadline: float | None, timeout: float | None, late: str, progress: list[Any]
    ) -> None:
        """Wait (holding the lock) for a completion, a recheck, or ``deadline``.

        ``progress`` is the wait's [completions seen, when they last moved], updated here.

        Raises:
            WriteError: ``deadline`` passed (``late`` words it, ``{}``: the requests in flight),
                or no request completed for ``stall_s``.
        """
        now = time.monotonic()
        if self._completed != progress[0]:
            progress[0], progress[1] = self._completed, now
        elif self.stall_s is not None and now - progress[1] > self.stall_s:
            raise WriteError(
                f"{self.what}: none of the {self._requests} requests in flight completed in "
                f"{now - progress[1]:.0f}s, longer than one request's retries may last "
                f"({self.stall_s:.0f}s): a completion was lost"
            )
        wait = _RECHECK_S
        if deadline is not None:
            left = deadline - now
            if left <= 0:
                raise WriteError(f"{self.what}: {late.format(self._requests)} {timeout:g}s")
            wait = min(wait, left)
        self._waits.wait(wait)

    def add(self, future: Any, elements: int = 0, size: int = 0) -> Any:
        """Count ``future`` (a request just started) in flight until it completes; returns it.

        The caller made room with :meth:`admit` first (the window does not refuse a request).
        """
        with self._lock:
            self._requests += 1
            self._elements += elements
            self._bytes += size
        self.last = future
        # Runs at once, on this thread, if the request already completed.
        future.add_done_callback(partial(self._complete, elements=elements, size=size))
        return future

    def _complete(self, future: Any, elements: int, size: int) -> None:
        """A request completed (on the thread that completed it): free its slot, keep its
        outcome."""
        try:
            error = future.exception()
        except (CancelledError, Exception) as exc:  # noqa: BLE001 - cancelled: a closed channel
            error = exc
        results: Iterable[R] = ()
        if error is None and self._collect:
            results = future.result() or ()
        with self._lock:
            self._requests -= 1
            self._completed += 1
            self._elements -= elements
            self._bytes -= size
            if self._collect:
                if error is None:
                    self._results.extend(results)
                elif self._error is None:
                    self._error = error
            self._waits.notify_all()
        if self._on_done is not None:
            self._on_done(error)

    def take_results(self) -> list[R]:
        """The results of the requests completed so far (their rejected records), taken."""
        with self._lock:
            results, self._results = self._results, []
        return results

    def settle(self, timeout: float | None = None) -> BaseException | None:
        """Wait until no request is in flight; return (and take) the first error, if any.

        Args:
            timeout: Seconds to wait at most; None: until every request completed.

        Raises:
            WriteError: Requests were still in flight after ``timeout``.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            progress = [self._completed, time.monotonic()]
            while self._requests:
                self._wait_until(
                    deadline, timeout, "{} requests were still in flight after", progress
                )
            error, self._error = self._error, None
            if error is None:
                self.last = None  # done and succeeded: nothing to chain after, nor to keep
        return error

    def drain(self, timeout: float | None = None) -> list[R]:
        """Wait for every request in flight (even after one failed); return their results.

        Raises:
            BaseException: The first error of a request, once all completed.
            WriteError: Requests were still in flight after ``timeout``.
        """
        error = self.settle(timeout)
        if error is not None:
            raise error
        return self.take_results()

    def __repr__(self) -> str:
        return f"InFlightWindow({self.what}: {self._requests} in flight, limit {self.limit})"


class Timers:
    """One thread that runs callbacks at their due time, for every waiter of a subtask.

    What: :meth:`call_later` schedules ``fn`` to run after ``delay_s`` on the timer thread.
    Why: a writer whose requests complete by callback backs off before a retry without a thread
    sleeping for it; at thousands of destinations a thread per waiting destination would be
    thousands of threads. A callback must not block: it holds up every later one. The thread
    starts with the first callback and ends with :meth:`close`.
    """

    def __init__(self, name: str = "timers") -> None:
        self._name = name
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._count = 0
        self._thread: threading.Thread | None = None
        self._closed = False

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> None:
        """Run ``fn()`` on the timer thread in ``delay_s`` seconds (dropped once closed)."""
        with self._cond:
            if self._closed:
                return
            self._count += 1
            heapq.heappush(self._due, (time.monotonic() + max(0.0, delay_s), self._count, fn))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    wait = self._due[0][0] - time.monotonic() if self._due else None
                    if wait is not None and wait <= 0:
                        break
                    self._cond.wait(wait)
                if self._closed:
                    return
                fn = heapq.heappop(self._due)[2]
            try:
                fn()
            except Exception:  # one callback's failure must not stop the others
                logging.getLogger("pyflink_gcp").exception("a timer callback failed")

    def close(self) -> None:
        """Drop the callbacks not yet run and end the thread."""
        with self._cond:
            self._closed = True
            self._due.clear()
            self._cond.notify_all()


class Slots:
    """At most ``limit`` holders at once, with waiters served by callback in arrival order.

    What: :meth:`acquire` takes a slot for a key at once (True), or queues the key (False) and
    calls its ``on_grant`` once a slot was taken for it, on the thread of the :meth:`release`
    that freed it; :meth:`cancel` withdraws a waiter; :meth:`release` gives a slot back. A key
    waits once however often it asks. ``limit`` None: no bound, every acquire succeeds.
    Why: a writer whose requests complete by callback must sometimes wait for a scarce thing (a
    connection of the subtask, a check call) before it can send; a thread blocked on it would be
    the thread the design removes. ``on_grant`` must not block; it runs outside the slots' lock,
    and a grant to a holder that no longer wants it is given back with :meth:`release`.

    Grants never nest: a holder whose work ends at once (a call on a closed channel) releases
    inside its own ``on_grant``, and thousands of such waiters would otherwise grant each other
    thousands of frames deep. A release made while a thread is granting queues its grant for
    that thread, which runs them one after another. :meth:`cancel_all` withdraws every waiter
    at once, for an owner that closes.
    """

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._held = 0
        self._waiting: dict[object, Callable[[], None]] = {}  # in arrival order
        self._grants: deque[Callable[[], None]] = deque()
        self._granting = False

    @property
    def held(self) -> int:
        """Slots taken."""
        return self._held

    @property
    def waiting(self) -> int:
        """Keys waiting for a slot."""
        return len(self._waiting)

    def acquire(self, key: object, on_grant: Callable[[], None]) -> bool:
        """Take a slot for ``key`` now (True), or queue it for ``on_grant`` (False)."""
        with self._lock:
            if self.limit is None or (self._held < self.limit and not self._waiting):
                self._held += 1
                return True
            self._waiting.setdefault(key, on_grant)
            return False

    def cancel(self, key: object) -> bool:
        """Withdraw ``key``'s wait; False when it was not waiting (granted already, or never
        queued)."""
        with self._lock:
            return self._waiting.pop(key, None) is not None

    def cancel_all(self) -> list[object]:
        """Withdraw every waiter; their keys, oldest first. A grant already made still runs."""
        with self._lock:
            keys = list(self._waiting)
            self._waiting.clear()
        return keys

    def release(self) -> None:
        """Give a slot back: to the oldest waiter (its ``on_grant`` runs on this thread, or on
        the thread granting now), else free."""
        with self._lock:
            if not self._waiting:
                self._held -= 1
                return
            key = next(iter(self._waiting))
            self._grants.append(self._waiting.pop(key))
            if self._granting:
                return
            self._granting = True
        self._grant()

    def _grant(self) -> None:
        """Run the queued grants until none is left; the caller set ``_granting``. A grant that
        raises does not stop the others: the first error is raised once they ran."""
        error: BaseException | None = None
        while True:
            with self._lock:
                if not self._grants:
                    self._granting = False
                    break
                on_grant = self._grants.popleft()
            try:
                on_grant()
            except BaseException as exc:  # noqa: BLE001 - raised again below
                if error is None:
                    error = exc
        if error is not None:
            raise error

    def __repr__(self) -> str:
        return f"Slots({self._held} held of {self.limit}, {len(self._waiting)} waiting)"
