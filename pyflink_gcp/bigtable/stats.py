"""Counters of one subtask's Bigtable writing: requests, entries, retries, batchers, tables."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class BigtableWriterStats:
    """What one sink subtask sent, retried, rejected, built and created.

    Updated from the processing thread and from the event-loop thread of the requests, so
    an update of a counter both threads write takes the lock; the batcher counters, which
    only the processing thread writes, do not (at thousands of tables the lock, contended
    with the loop's, cost more than the rest of building a batcher's bookkeeping). Reads are
    unlocked snapshots of plain ints.
    """

    requests: int = 0
    entries_sent: int = 0
    mutations_sent: int = 0
    max_request_mutations: int = 0
    max_request_entries: int = 0
    entries_retried: int = 0
    entries_rejected: int = 0
    batchers_created: int = 0
    batchers_closed: int = 0
    tables_created: int = 0
    _lock: threading.Lock = field(
        default_factory=threading.Lock, init=False, repr=False, compare=False
    )

    def count_request(self, entries: int, mutations: int) -> None:
        """One MutateRows request of ``entries`` entries and ``mutations`` cells (its first
        attempt; retries are counted by :meth:`add` as ``entries_retried``)."""
        with self._lock:
            self.requests += 1
            self.entries_sent += entries
            self.mutations_sent += mutations
            self.max_request_mutations = max(self.max_request_mutations, mutations)
            self.max_request_entries = max(self.max_request_entries, entries)

    def add(self, **increments: int) -> None:
        """Add to the counters of those names: ``stats.add(entries_rejected=3)``."""
        with self._lock:
            for name, value in increments.items():
                setattr(self, name, getattr(self, name) + value)

    def batcher_opened(self) -> None:
        """A table batcher was built (on the processing thread only)."""
        self.batchers_created += 1

    def batcher_closed(self) -> None:
        """A table batcher was closed (on the processing thread only)."""
        self.batchers_closed += 1
