"""A condition variable that costs a few bytes until a thread waits on it.

A ``threading.Condition`` costs about 1.4 KB: its waiters' deque, and an instance dictionary
holding five bound methods of its lock. An object a subtask keeps per destination (a table's
sender, a request window) needs one for the rare wait of a flush, and at 10,000 destinations
those idle conditions are 14 MB of a worker's memory. :class:`LazyCondition` is the lock alone
until a thread waits: the condition over that lock is built for the waits in progress and
dropped when the last of them ends, and a notify with nobody waiting is a counter's read.
"""

from __future__ import annotations

import threading
from typing import Any


class LazyCondition:
    """A lock, and a condition over it that exists only while a thread waits.

    Used like ``threading.Condition``: ``with`` takes the lock; :meth:`wait` and
    :meth:`notify_all` are called holding it.

    Args:
        lock: The lock to wait on (a ``threading.Lock`` or ``RLock``); default a new ``RLock``,
            as ``threading.Condition``'s.
    """

    __slots__ = ("_lock", "_cond", "_waiting")

    def __init__(self, lock: Any = None) -> None:
        self._lock = threading.RLock() if lock is None else lock
        self._cond: threading.Condition | None = None
        self._waiting = 0

    def __enter__(self) -> bool:
        return bool(self._lock.__enter__())

    def __exit__(self, *exc: Any) -> None:
        self._lock.__exit__(*exc)

    @property
    def waiting(self) -> int:
        """Threads waiting now."""
        return self._waiting

    def wait(self, timeout: float | None = None) -> bool:
        """Release the lock until notified or ``timeout`` seconds passed, then take it back;
        False on timeout. Called holding the lock."""
        cond = self._cond
        if cond is None:
            cond = self._cond = threading.Condition(self._lock)
        self._waiting += 1
        try:
            return cond.wait(timeout)
        finally:
            self._waiting -= 1
            if not self._waiting:
                self._cond = None

    def notify_all(self) -> None:
        """Wake every waiting thread. Called holding the lock."""
        if self._waiting:
            assert self._cond is not None  # kept while a wait is counted
            self._cond.notify_all()
