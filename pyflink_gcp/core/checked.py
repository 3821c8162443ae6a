"""The destinations a subtask has checked exist: a bounded, thread-safe LRU of names.

A sink asks the service once whether a destination exists (``GetTopic``, ``GetTable``,
``GetQueue``) and remembers the answer, so writers evicted and re-created later do not ask
again. A job naming a new destination per hour or per tenant would grow a plain set without
end, so the memory is an LRU with a documented size: past it, the least recently used name is
forgotten and checked again on its next use (one more lookup, never a wrong answer, since the
write calls still fail for a destination deleted meanwhile).

A destination's first check need not block the processing thread either: :class:`PendingCheck`
starts its first attempt as a gRPC future, and only its first write waits for it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

#: How many checked destination names a subtask remembers (about 130 bytes each: a few MB).
CHECKED_NAMES_LIMIT = 50_000


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
