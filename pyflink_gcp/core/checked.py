"""The destinations a subtask has checked exist: a bounded, thread-safe LRU of names.

A sink asks the service once whether a destination exists (``GetTopic``, ``GetTable``,
``GetQueue``) and remembers the answer, so writers evicted and re-created later do not ask
again. A job naming a new destination per hour or per tenant would grow a plain set without
end, so the memory is an LRU with a documented size: past it, the least recently used name is
forgotten and checked again on its next use (one more lookup, never a wrong answer, since the
write calls still fail for a destination deleted meanwhile).

A destination's first check need not block the processing thread either: :class:`PendingCheck`
starts its first attempt as a gRPC future, and only its first write waits for it. Those first
attempts go through :class:`CheckCalls`, which keeps at most :data:`CHECKS_IN_FLIGHT` of a
subtask's in flight and queues the rest: a job meeting 10,000 new destinations in its first
second would otherwise hold 10,000 gRPC calls at once, about 6 KB each, and the memory they
fragment stays with the worker after they end.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from pyflink_gcp.core.batching import Slots
from pyflink_gcp.core.errors import WriteError

#: How many checked destination names a subtask remembers (about 130 bytes each: a few MB).
CHECKED_NAMES_LIMIT = 50_000

#: First check attempts in flight at most per subtask (:class:`CheckCalls`): at a 20 ms round
#: trip still about 3,000 checks a second, and a few hundred KB of calls.
CHECKS_IN_FLIGHT = 64


class CheckedNames:
    """A bounded set of names, least recently used forgotten first.

    Thread-safe: the lookups that add names run on metadata threads while the processing
    thread asks.

    Args:
        limit: How many names to remember (at least 1).
    """

    def __init__(self, limit: int = CHECKED_NAMES_LIMIT) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self._names: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()
        #: Names forgotten because the limit was reached.
        self.forgotten = 0

    def __contains__(self, name: object) -> bool:
        with self._lock:
            if name not in self._names:
                return False
            self._names.move_to_end(name)  # type: ignore[arg-type]
            return True

    def add(self, name: str) -> None:
        """Remember ``name`` as checked (the most recently used)."""
        with self._lock:
            names = self._names
            names[name] = None
            names.move_to_end(name)
            while len(names) > self.limit:
                names.popitem(last=False)
                self.forgotten += 1

    def discard(self, name: str) -> None:
        """Forget ``name`` (a destination found missing after all)."""
        with self._lock:
            self._names.pop(name, None)

    def clear(self) -> None:
        with self._lock:
            self._names.clear()

    def __len__(self) -> int:
        return len(self._names)


def _first_attempt_failed(call: Any) -> bool:
    try:
        return call.exception() is not None
    except Exception:  # noqa: BLE001 - cancelled (the channel closed): the full check decides
        return True


class PendingCheck:
    """The existence check of one destination, started without waiting for its answer.

    At thousands of destinations the first use of each is frequent, and a blocking lookup
    costs the processing thread a round trip per new destination; running the lookups on
    Python threads instead makes them compete for the interpreter lock. So the first attempt
    is a gRPC future that no Python thread waits on: the destination's first write either
    starts from its done-callback (:meth:`then`) or, on a thread that may block, waits in
    :meth:`wait`. A first attempt that fails for any reason (the destination is missing, a
    transient error) hands over to the sink's full check, with its retries, its creation of
    the destination if allowed, and its errors that name the destination.

    Args:
        call: The first attempt, started: anything with a ``grpc.Future``'s ``done``,
            ``exception``, ``result`` and ``add_done_callback``.
        full_check: The blocking check (retries, creation); raises why the destination
            cannot be used.
        found: Records the destination as checked (e.g. ``CheckedNames.add``), after a
            successful first attempt.
    """

    def __init__(
        self, call: Any, full_check: Callable[[], None], found: Callable[[], None]
    ) -> None:
        self._call = call
        self._full_check = full_check
        self._found = found
        self._lock = threading.Lock()
        self._settled = False
        self._error: BaseException | None = None

    def succeeded(self) -> bool:
        """Whether the destination is known to exist (never blocks)."""
        if self._settled:
            return self._error is None
        call = self._call
        return bool(call.done() and not _first_attempt_failed(call))

    def failed(self) -> bool:
        """Whether the check ended with an error (a new check may try again)."""
        return self._settled and self._error is not None

    def then(self, found: Callable[[], None], otherwise: Callable[[], None]) -> None:
        """Call ``found`` once the first attempt succeeded, else ``otherwise`` (which should
        hand over to :meth:`wait` on a thread that may block).

        Neither blocks the caller: each runs on gRPC's polling thread when the answer comes,
        or at once on this thread if it is already in.
        """

        def answered(call: Any) -> None:
            if _first_attempt_failed(call):
                otherwise()
                return
            try:
                self.wait()  # settles the check without blocking: the answer is in
            except BaseException:  # noqa: BLE001 - raised again to the thread that waits
                otherwise()
                return
            found()

        self._call.add_done_callback(answered)

    def wait(self) -> None:
        """Block until the destination exists (created if allowed), or raise why it cannot be
        used; the outcome is kept and raised again to every later waiter."""
        with self._lock:
            if not self._settled:
                try:
                    if _first_attempt_failed(self._call):  # blocks until the answer
                        self._full_check()
                    else:
                        self._found()
                except BaseException as exc:  # noqa: BLE001 - kept, raised to every waiter
                    self._error = exc
                finally:
                    self._settled = True
            if self._error is not None:
                raise self._error


class QueuedCall:
    """A call of :class:`CheckCalls`, read like a ``grpc.Future`` whether it started yet or not.

    ``done`` never blocks; ``exception`` and ``result`` wait for the call to start and then to
    end; ``add_done_callback`` callbacks get this object, once the call ended.

    Small on purpose: a subtask meeting 10,000 new destinations at once queues 10,000 of them,
    allocated between the writers that outlive them, and what they leave behind when freed
    stays with the worker (fragmented). So a queued call holds its ``begin`` and its callbacks
    (one callable, or a list of them) and nothing built for the call itself: the request is
    built by ``begin``, when the call starts.
    """

    __slots__ = ("_calls", "_begin", "_args", "_inner", "_callbacks")

    def __init__(self, calls: CheckCalls, begin: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self._calls = calls
        self._begin: Callable[..., Any] | None = begin
        self._args = args
        self._inner: Any = None
        self._callbacks: Any = None  # None, one callable, a list, or _ENDED

    def done(self) -> bool:
        inner = self._inner
        return inner is not None and bool(inner.done())

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._calls.started(self, timeout).exception(timeout)  # type: ignore[no-any-return]

    def result(self, timeout: float | None = None) -> Any:
        return self._calls.started(self, timeout).result(timeout)

    def add_done_callback(self, fn: Callable[[QueuedCall], None]) -> None:
        with self._calls._lock:
            callbacks = self._callbacks
            if callbacks is not _ENDED:
                if callbacks is None:
                    self._callbacks = fn
                elif isinstance(callbacks, list):
                    callbacks.append(fn)
                else:
                    self._callbacks = [callbacks, fn]
                return
        fn(self)

    def __call__(self) -> None:
        """Its slot was granted: start it. The call is its own grant in the slots' queue, so a
        queued call costs this one object."""
        self._calls._begin(self)

    def _ended(self, _inner: Any) -> None:
        """The started call ended: give its slot back, then run its callbacks."""
        try:
            self._calls._slots.release()
        finally:
            self._ran()

    def _ran(self, _inner: Any = None) -> None:
        """Run the callbacks of the call, which ended (without a slot, when it never started)."""
        with self._calls._lock:
            callbacks, self._callbacks = self._callbacks, _ENDED
        if not isinstance(callbacks, list):
            if callbacks is not None:
                callbacks(self)
            return
        error: BaseException | None = None
        for fn in callbacks:  # one that raises does not keep the others from running
            try:
                fn(self)
            except BaseException as exc:  # noqa: BLE001 - raised again below
                error = error or exc
        if error is not None:
            raise error


#: A :class:`QueuedCall` 's callbacks once it ended: later ones run at once.
_ENDED: Any = object()


class _Failed:
    """A call that could not start: done at once, with the error its start raised."""

    __slots__ = ("_error",)

    def __init__(self, error: BaseException) -> None:
        self._error = error

    def done(self) -> bool:
        return True

    def exception(self, timeout: float | None = None) -> BaseException:
        return self._error

    def result(self, timeout: float | None = None) -> Any:
        raise self._error

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        fn(self)


class CheckCalls:
    """Starts a subtask's first check attempts, at most ``limit`` in flight, in order.

    The bound is a :class:`~pyflink_gcp.core.batching.Slots`: a call that finds every slot
    taken waits there and is started by the completion that frees one (on gRPC's thread, which
    only starts it: starting a future call does not block). What this class adds is the call
    a caller can hold before it started (:class:`QueuedCall`) and the end of the queued calls
    at :meth:`close`. Thread-safe.

    Args:
        limit: Calls in flight at most.
        what: Names the sink in the error of calls never started (:meth:`close`).
    """

    def __init__(self, limit: int = CHECKS_IN_FLIGHT, what: str = "sink") -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self._what = what
        self._slots = Slots(limit)
        self._lock = threading.Lock()
        self._started = threading.Condition(self._lock)
        self._closed = False
        #: The most calls that waited for a slot at once.
        self.max_queued = 0

    @property
    def in_flight(self) -> int:
        return self._slots.held

    @property
    def queued(self) -> int:
        return self._slots.waiting

    def start(self, begin: Callable[..., Any], *args: Any) -> QueuedCall:
        """Start ``begin(*args)`` (which starts a call and returns its future) now if a slot is
        free, else once one is; returns the call at once. After :meth:`close` the call ends at
        once with an error. ``begin`` should build the call's request itself: a queued call
        holds nothing else until it starts (:class:`QueuedCall`)."""
        call = QueuedCall(self, begin, args)
        if self._closed:
            self._settle(call, _Failed(self._closed_error()), holds_slot=False)
        elif self._slots.acquire(call, call):
            self._begin(call)
        else:
            self.max_queued = max(self.max_queued, self._slots.waiting)
        return call

    def started(self, call: QueuedCall, timeout: float | None = None) -> Any:
        """Wait until ``call`` has started; its future.

        Raises:
            TimeoutError: It had not started within ``timeout`` seconds.
        """
        inner = call._inner
        if inner is not None:
            return inner
        with self._started:
            if not self._started.wait_for(lambda: call._inner is not None, timeout):
                raise TimeoutError(f"{self._what}: a check was not started in {timeout}s")
            return call._inner

    def close(self) -> None:
        """Start no more calls: the queued ones end at once with an error, so nothing waits
        for them."""
        with self._lock:
            self._closed = True
        for call in self._slots.cancel_all():
            assert isinstance(call, QueuedCall)
            self._settle(call, _Failed(self._closed_error()), holds_slot=False)

    def _closed_error(self) -> WriteError:
        return WriteError(f"{self._what}: closed before the check ran")

    def _begin(self, call: QueuedCall) -> None:
        """Start ``call`` in the slot taken for it; the slot is given back when it ends."""
        begin = call._begin
        assert begin is not None
        inner: Any
        if self._closed:  # granted after close: ends like the queued ones
            inner = _Failed(self._closed_error())
        else:
            try:
                inner = begin(*call._args)
            except Exception as exc:  # noqa: BLE001 - the call's outcome, read by its owner
                inner = _Failed(exc)
        self._settle(call, inner, holds_slot=True)

    def _settle(self, call: QueuedCall, inner: Any, holds_slot: bool) -> None:
        with self._lock:
            call._inner = inner
            call._begin = None
            call._args = ()
            self._started.notify_all()
        inner.add_done_callback(call._ended if holds_slot else call._ran)
