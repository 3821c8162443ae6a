"""The per-subtask registry of destination writers: lazy creation, idle eviction, an LRU cap.

Modelled on the publisher's per-ordering-key sequencer map: entries are created on first use,
dropped when finished, and re-created transparently when needed again.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.types import Destination
from pyflink_gcp.core.writer import DestinationWriter

_LOG = logging.getLogger("pyflink_gcp.registry")

D = TypeVar("D", bound=Destination)


class WriterRegistry(Generic[D]):
    """Maps destinations to their live writers for one sink subtask.

    - **Lazy creation**: :meth:`get` creates a writer the first time a destination is used.
    - **Idle eviction**: :meth:`evict_idle`, called at the end of a successful flush, closes and
      drops writers unused for longer than ``idle_timeout_s``. They are clean at that point,
      so eviction never drops data.
    - **LRU cap**: with ``max_active`` set, opening one more writer first releases the least
      recently used *clean* writer; if none is clean, the least recently used one is flushed
      (its failures are returned to the caller through ``on_failures``) and then released.

    Not thread-safe: used from the processing thread only.
    """

    def __init__(
        self,
        factory: Callable[[D], DestinationWriter[D]],
        *,
        idle_timeout_s: float | None = None,
        max_active: int | None = None,
        on_failures: Callable[[list[FailedRecord]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sink_name: str = "sink",
    ) -> None:
        if max_active is not None and max_active < 1:
            raise ValueError("max_active must be at least 1")
        self._factory = factory
        self._idle_timeout_s = idle_timeout_s
        self._max_active = max_active
        self._on_failures = on_failures
        self._clock = clock
        self._sink = sink_name
        self._writers: OrderedDict[D, DestinationWriter[D]] = OrderedDict()
        self._last_used: dict[D, float] = {}
        self.created = 0
        self.evicted = 0
        self.max_seen = 0

    def get(self, destination: D) -> DestinationWriter[D]:
        """The writer of ``destination``, created if needed. Marks it most recently used."""
        writer = self._writers.get(destination)
        if writer is None:
            writer = self._open(destination)
        elif self._max_active is not None:
            # Recency order only matters to the LRU cap; skip the reordering without one.
            self._writers.move_to_end(destination)
        self._last_used[destination] = self._clock()
        return writer

    def _open(self, destination: D) -> DestinationWriter[D]:
        if self._max_active is not None:
            while len(self._writers) >= self._max_active:
                self._release_lru()
        writer = self._factory(destination)
        self._writers[destination] = writer
        self.created += 1
        self.max_seen = max(self.max_seen, len(self._writers))
        _LOG.debug(
            "%s: opened writer for %s (%d active)", self._sink, destination, len(self._writers)
        )
        return writer

    def _release_lru(self) -> None:
        victim = next((d for d, w in self._writers.items() if w.is_clean), None)
        if victim is None:
            victim = next(iter(self._writers))
            failures = self._writers[victim].flush()
            if failures and self._on_failures is not None:
                self._on_failures(failures)
        self._drop(victim, "released (active limit)")

    def _drop(self, destination: D, why: str) -> None:
        writer = self._writers.pop(destination)
        self._last_used.pop(destination, None)
        writer.close()
        self.evicted += 1
        _LOG.info("%s: %s writer for %s", self._sink, why, destination)

    def evict_idle(self) -> int:
        """Drop clean writers idle longer than the timeout. Returns how many were dropped."""
        if self._idle_timeout_s is None or not self._writers:
            return 0
        deadline = self._clock() - self._idle_timeout_s
        idle = [
            d for d, t in self._last_used.items() if t <= deadline and self._writers[d].is_clean
        ]
        for destination in idle:
            self._drop(destination, "evicted idle")
        return len(idle)

    def __iter__(self) -> Iterator[DestinationWriter[D]]:
        return iter(list(self._writers.values()))

    def __len__(self) -> int:
        return len(self._writers)

    def __contains__(self, destination: object) -> bool:
        return destination in self._writers

    def close_all(self) -> None:
        """Close every writer without flushing (task teardown)."""
        for destination in list(self._writers):
            writer = self._writers.pop(destination)
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - teardown continues; the task is ending anyway
                _LOG.exception("%s: closing writer for %s failed", self._sink, destination)
        self._last_used.clear()
