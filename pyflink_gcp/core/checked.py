"""The destinations a subtask has checked exist: a bounded, thread-safe LRU of names.

A sink asks the service once whether a destination exists (``GetTopic``, ``GetTable``,
``GetQueue``) and remembers the answer, so writers evicted and re-created later do not ask
again. A job naming a new destination per hour or per tenant would grow a plain set without
end, so the memory is an LRU with a documented size: past it, the least recently used name is
forgotten and checked again on its next use (one more lookup, never a wrong answer, since the
write calls still fail for a destination deleted meanwhile).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

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
