"""The per-subtask registry of destination writers: lazy creation, idle eviction, an LRU cap.

Modelled on the publisher's per-ordering-key sequencer map: entries are created on first use,
dropped when finished, and re-created transparently when needed again.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Generic, TypeVar

from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.types import Destination
from pyflink_gcp.core.writer import DestinationWriter

_LOG = logging.getLogger("pyflink_gcp.registry")

D = TypeVar("D", bound=Destination)


#: Writers released at the cap are flushed asynchronously, at most this fraction of the cap at a
#: time (and at least one): their sends overlap instead of costing a blocking call each.
RELEASE_BATCH_FRACTION = 8
#: How far from the least recently used end the cap looks for clean writers to release first.
#: Writers become clean together (at a flush) and dirty one by one as they are used, so the
#: clean ones gather at that end.
CLEAN_SCAN_FACTOR = 4


class WriterRegistry(Generic[D]):
    """Maps destinations to their live writers for one sink subtask.

    - **Lazy creation**: :meth:`get` creates a writer the first time a destination is used.
    - **Idle eviction**: :meth:`evict_idle`, called at the end of a successful flush, closes and
      drops writers unused for longer than ``idle_timeout_s``. They are clean at that point,
      so eviction never drops data.
    - **LRU cap**: with ``max_active`` set, opening one more writer first releases the least
      recently used *clean* writers (a batch of them, looked for near the least recently used
      end). If none is clean, a batch of the least recently used writers is *released*: each
      starts sending what it holds and leaves the active set, and is flushed and closed later,
      when its slot is needed again (their failures are returned through ``on_failures``), at
      the next :meth:`finish_releases` (every flush of the sink), or back in use if its
      destination comes again first. Active and releasing writers together stay within
      ``max_active``, so the cap bounds memory and connections, and records cycling over more
      destinations than the cap cost one blocking wait per batch of releases, not one blocking
      flush per record.

    Releases are routine at a cap, so they are logged at DEBUG and counted (``released``;
    ``evicted`` counts them with the idle evictions). ``on_open`` is told of every writer opened
    (the sink's lineage, :mod:`pyflink_gcp.core.lineage`), after the factory created it.

    Not thread-safe: used from the processing thread only.
    """

    def __init__(
        self,
        factory: Callable[[D], DestinationWriter[D]],
        *,
        idle_timeout_s: float | None = None,
        max_active: int | None = None,
        on_failures: Callable[[list[FailedRecord]], None] | None = None,
        on_close: Callable[[DestinationWriter[D]], None] | None = None,
        on_open: Callable[[D], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sink_name: str = "sink",
    ) -> None:
        if max_active is not None and max_active < 1:
            raise ValueError("max_active must be at least 1")
        self._factory = factory
        self._idle_timeout_s = idle_timeout_s
        self._max_active = max_active
        self._batch = max(1, (max_active or 1) // RELEASE_BATCH_FRACTION)
        self._on_failures = on_failures
        self._on_close = on_close
        self._on_open = on_open
        self._clock = clock
        self._sink = sink_name
        self._writers: OrderedDict[D, DestinationWriter[D]] = OrderedDict()
        self._last_used: dict[D, float] = {}
        #: Writers released at the cap whose sends may still be in flight, oldest first.
        self._releasing: OrderedDict[D, DestinationWriter[D]] = OrderedDict()
        self.created = 0
        self.evicted = 0
        #: Writers released at the ``max_active`` cap (clean ones and flushed ones).
        self.released = 0
        #: Released writers whose destination came back while they were still releasing.
        self.revived = 0
        self.max_seen = 0

    def get(self, destination: D) -> DestinationWriter[D]:
        """The writer of ``destination``, created if needed. Marks it most recently used."""
        writer = self._writers.get(destination)
        if writer is None:
            writer = self._releasing.pop(destination, None)
            if writer is not None:
                # Still sending what it held: use it again rather than wait for it.
                self._writers[destination] = writer
                self.revived += 1
            else:
                writer = self._open(destination)
        elif self._max_active is not None:
            # Recency order only matters to the LRU cap; skip the reordering without one.
            self._writers.move_to_end(destination)
        self._last_used[destination] = self._clock()
        return writer

    def _open(self, destination: D) -> DestinationWriter[D]:
        if self._max_active is not None:
            self._make_room(self._max_active)
        writer = self._factory(destination)
        self._writers[destination] = writer
        self.created += 1
        self.max_seen = max(self.max_seen, len(self._writers) + len(self._releasing))
        if self._on_open is not None:
            self._on_open(destination)
        _LOG.debug(
            "%s: opened writer for %s (%d active)", self._sink, destination, len(self._writers)
        )
        return writer

    def _make_room(self, cap: int) -> None:
        """Free one slot under ``cap``, keeping about a batch of releases in flight."""
        while len(self._writers) + len(self._releasing) >= cap:
            if self._writers and len(self._releasing) <= self._batch // 2:
                self._release(self._batch - len(self._releasing))
            else:
                self._finish_oldest_release()

    def _release(self, count: int) -> None:
        """Release up to ``count`` least recently used clean writers, or if there are none
        near that end, start releasing the ``count`` least recently used ones."""
        window = islice(self._writers.items(), CLEAN_SCAN_FACTOR * count + 16)
        clean = [d for d, w in window if w.is_clean][:count]
        for destination in clean:
            self._drop(destination, "released (active limit)")
            self.released += 1
        if clean:
            return
        for destination in list(islice(self._writers, count)):
            writer = self._writers.pop(destination)
            self._last_used.pop(destination, None)
            writer.start_flush()
            self._releasing[destination] = writer

    def _finish_oldest_release(self) -> None:
        destination, writer = self._releasing.popitem(last=False)
        self._finish(destination, writer)

    def _finish(self, destination: D, writer: DestinationWriter[D]) -> None:
        """Wait for a released writer's sends, hand over its failures, close it."""
        failures = writer.flush()
        if failures and self._on_failures is not None:
            self._on_failures(failures)
        self._closing(writer)
        writer.close()
        self.evicted += 1
        self.released += 1
        _LOG.debug("%s: released writer for %s (active limit)", self._sink, destination)

    def finish_releases(self) -> None:
        """Flush and close every writer still releasing (part of every flush of the sink, so
        their records are durable before the checkpoint barrier like everyone else's).

        Raises:
            SinkError: A released writer's flush failed; the others are finished first.
        """
        error: BaseException | None = None
        while self._releasing:
            destination, writer = self._releasing.popitem(last=False)
            try:
                self._finish(destination, writer)
            except BaseException as exc:  # noqa: BLE001 - finish the others, then raise
                error = error or exc
        if error is not None:
            raise error

    @property
    def releasing(self) -> int:
        """Writers released at the cap whose sends are not yet waited for."""
        return len(self._releasing)

    def _drop(self, destination: D, why: str) -> None:
        writer = self._writers.pop(destination)
        self._last_used.pop(destination, None)
        self._closing(writer)
        writer.close()
        self.evicted += 1
        _LOG.debug("%s: %s writer for %s", self._sink, why, destination)

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
        if idle:
            _LOG.info(
                "%s: evicted %d idle writers (%d active)", self._sink, len(idle), len(self._writers)
            )
        return len(idle)

    def _closing(self, writer: DestinationWriter[D]) -> None:
        if self._on_close is not None:
            self._on_close(writer)

    def __iter__(self) -> Iterator[DestinationWriter[D]]:
        return iter(list(self._writers.values()))

    def __len__(self) -> int:
        return len(self._writers)

    def __contains__(self, destination: object) -> bool:
        return destination in self._writers

    @property
    def dirty(self) -> int:
        """Writers holding records not yet durable, releasing ones included."""
        return len(self._releasing) + sum(0 if w.is_clean else 1 for w in self._writers.values())

    def close_all(self) -> None:
        """Close every writer without flushing (task teardown)."""
        for writers in (self._writers, self._releasing):
            for destination in list(writers):
                writer = writers.pop(destination)
                try:
                    self._closing(writer)
                    writer.close()
                except Exception:  # noqa: BLE001 - teardown continues; the task is ending anyway
                    _LOG.exception("%s: closing writer for %s failed", self._sink, destination)
        self._last_used.clear()
