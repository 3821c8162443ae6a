"""Records carried across checkpoints in the marker operator's state, instead of sent at each one.

A sink flushes everything at each checkpoint barrier. With many destinations and few records
per destination between two checkpoints, that is one write call per record or two: at 10,000
BigQuery tables and 1-s checkpoints, each table sends one row per checkpoint, and the sink is
bound by the calls, not the rows (bench/README.md, "Against the targets"). Flink's own
``AsyncSinkWriter`` keeps such buffered entries in its checkpoint state instead of sending them
before the barrier; this module does the same for a Python writer under the Java bridge's
marker operator (``WriterOptions.max_carry_time``).

With carrying on, a record's destination batch waits here, not in the destination's writer,
until it has :data:`CARRY_BATCH_RECORDS` records, its oldest record is ``max_carry_time`` old,
or the subtask carries more than ``max_carried_records`` (the oldest batches go first); then the
batch is handed to the writer, which sends it as it sends any batch. At a checkpoint marker the
writers flush as always, and what is still carried goes into the marker operator's state:

- The records are kept in chunks, one per checkpoint interval: the chunk of an interval holds
  the records that came in it and are still carried at its marker (their destination and the
  record as the serializer took it, pickled). At each marker the writer hands the operator one
  element (:meth:`CarriedRecords.take_state`): the new chunk, and the ids of the earlier chunks
  whose every record has since been handed on and flushed. The operator keeps the chunks it
  was given and drops the released ones (``CarryState`` in ``java-bridge/``), so a record is
  pickled once, not at every checkpoint it waits through.
- A restored operator hands the chunks back when the writer opens, as the job parameter
  :data:`CARRY_STATE_PARAMETER`; the writer serializes their records again and carries them as
  records of its first interval (:func:`decode_restored`). The records after the checkpoint
  come from the source again, as without carrying.
- The state is Flink's operator list state: with a new parallelism every chunk goes to one of
  the new subtasks. That is right for a plain stream, where any subtask may write any record,
  and wrong for a keyed one, whose records must stay with their key's subtask: carrying is
  refused on a keyed stream, as with an exactly-once write method, whose commit needs every
  record flushed at its checkpoint, and with ``write_with_results()``.
- At the end of input everything carried is handed on and flushed.

The delivery guarantee stays at least once: a record is in the source's replay until the
checkpoint after it arrived completes, and in that checkpoint's state until a later marker
flushed it. What carrying costs is latency: a record of a quiet destination is sent up to
``max_carry_time`` after it came, and a restore from a checkpoint re-sends the records carried
in it that were sent after it.
"""

from __future__ import annotations

import base64
import pickle
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

#: The bytes a carried-records element starts with: the Java bridge's ``CarryState.TAG``.
CARRY_STATE_TAG = b"\x00pyflink-gcp:carry\x00"
#: The job parameter under which the marker operator hands a restored writer its chunks: each
#: chunk's id (8 bytes, big-endian) and pickle, base64, comma-separated.
CARRY_STATE_PARAMETER = "pyflink-gcp.carry.restored"
#: A destination's carried records go to its writer once this many wait: enough for one call
#: of a few hundred rows, which amortizes a call's cost in every service.
CARRY_BATCH_RECORDS = 500
#: ``max_carried_records``' default: about 100 bytes of bookkeeping per record on top of the
#: record, so tens of MB per subtask at most.
DEFAULT_MAX_CARRIED_RECORDS = 100_000

_HEADER = struct.Struct(">qI")
_ID = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class CarrySettings:
    """How a sink subtask carries records across checkpoints (``WriterOptions``).

    Attributes:
        max_carry_time_s: How long a destination's records may be carried, in seconds; None
            (the default) carries nothing: every checkpoint sends every record.
        max_carried_records: At most this many records carried per subtask; past it the
            destination batches carried longest are handed on.
    """

    max_carry_time_s: float | None = None
    max_carried_records: int = DEFAULT_MAX_CARRIED_RECORDS

    @property
    def enabled(self) -> bool:
        """Whether records are carried at all."""
        return self.max_carry_time_s is not None


class _Batch:
    """One destination's carried records: ``(element, record, chunk id)`` in arrival order."""

    __slots__ = ("since", "entries")

    def __init__(self, since: float) -> None:
        self.since = since
        self.entries: list[tuple[Any, Any, int]] = []


#: ``hand_on(destination, entries)``: write the ``(element, record, chunk)`` entries, in order,
#: to ``destination``'s writer.
HandOn = Callable[[Any, list[tuple[Any, Any, int]]], None]


class CarriedRecords:
    """One subtask's carried destination batches and the chunks of them its operator keeps.

    Driven by :class:`~pyflink_gcp.core.sink_writer.SinkWriter` under its lock: ``hold`` per
    record, ``hand_on_due`` at bundle ends and between bundles, ``take_state`` at each
    checkpoint marker after the flush, ``hand_on_all`` at the end of input.
    """

    def __init__(
        self,
        settings: CarrySettings,
        hand_on: HandOn,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if settings.max_carry_time_s is None:
            raise ValueError("CarriedRecords needs settings with a max_carry_time_s")
        self._max_age = settings.max_carry_time_s
        self._max_records = settings.max_carried_records
        self._hand_on_entries = hand_on
        self._clock = clock
        #: Destination → its batch, oldest batch first (a batch handed on leaves; a new one
        #: goes to the end).
        self._batches: dict[Any, _Batch] = {}
        #: The interval's chunk id: records held now belong to it.
        self._chunk = 0
        #: Per chunk id, its records still carried; the open chunk's too.
        self._remaining: dict[int, int] = {0: 0}
        #: Chunks handed to the operator and not yet released.
        self._kept: set[int] = set()
        #: Records carried now.
        self.records = 0
        #: Chunks given to the operator so far, and released.
        self.chunks_kept = 0
        self.chunks_released = 0

    def __len__(self) -> int:
        """Destinations with records carried."""
        return len(self._batches)

    def hold(self, destination: Any, element: Any, record: Any) -> None:
        """Carry one serialized record; hand its batch on once it is full, or the oldest ones
        once the subtask carries too many."""
        batch = self._batches.get(destination)
        if batch is None:
            batch = self._batches[destination] = _Batch(self._clock())
        batch.entries.append((element, record, self._chunk))
        self._remaining[self._chunk] += 1
        self.records += 1
        if len(batch.entries) >= CARRY_BATCH_RECORDS:
            self._hand_on(destination)
        while self.records > self._max_records:
            self._hand_on(next(iter(self._batches)))

    def hand_on_due(self) -> int:
        """Hand on every batch whose oldest record is ``max_carry_time`` old; how many."""
        if not self._batches:
            return 0
        cutoff = self._clock() - self._max_age
        count = 0
        while self._batches:
            destination, batch = next(iter(self._batches.items()))
            if batch.since > cutoff:
                break
            self._hand_on(destination)
            count += 1
        return count

    def hand_on_all(self) -> None:
        """Hand on everything carried (the end of input)."""
        while self._batches:
            self._hand_on(next(iter(self._batches)))

    def _hand_on(self, destination: Any) -> None:
        entries = self._batches.pop(destination).entries
        remaining = self._remaining
        for entry in entries:
            remaining[entry[2]] -= 1
        self.records -= len(entries)
        self._hand_on_entries(destination, entries)

    def take_state(self) -> bytes | None:
        """What the marker operator keeps at this marker, or None when nothing changed.

        Called after the marker's flush, which made everything handed on so far durable: the
        kept chunks with no record still carried are released, and the records of this
        interval still carried become a new chunk. The element is :data:`CARRY_STATE_TAG`, the
        new chunk's id (-1 for none), the count and ids of the released chunks, and the new
        chunk's pickle: a list of ``(destination, [record, ...])``.
        """
        chunk = self._chunk
        new: list[tuple[Any, list[Any]]] = []
        for destination, batch in self._batches.items():
            entries = batch.entries
            start = len(entries)
            while start and entries[start - 1][2] == chunk:
                start -= 1
            if start < len(entries):
                new.append((destination, [entry[1] for entry in entries[start:]]))
        released = sorted(c for c in self._kept if self._remaining[c] == 0)
        for c in released:
            self._kept.discard(c)
            del self._remaining[c]
        if new:
            self._kept.add(chunk)
            self.chunks_kept += 1
        else:
            del self._remaining[chunk]
        self.chunks_released += len(released)
        self._chunk = chunk + 1
        self._remaining[self._chunk] = 0
        if not new and not released:
            return None
        parts = [
            CARRY_STATE_TAG,
            _HEADER.pack(chunk if new else -1, len(released)),
            *(_ID.pack(c) for c in released),
        ]
        if new:
            parts.append(pickle.dumps(new, protocol=pickle.HIGHEST_PROTOCOL))
        return b"".join(parts)


def decode_element(element: bytes) -> tuple[int, list[int], bytes]:
    """``(new chunk id or -1, released chunk ids, new chunk's pickle)`` of an element
    :meth:`CarriedRecords.take_state` made (the operator's reading of it, for tests)."""
    if not element.startswith(CARRY_STATE_TAG):
        raise ValueError("not a carried-records element")
    at = len(CARRY_STATE_TAG)
    chunk, count = _HEADER.unpack_from(element, at)
    at += _HEADER.size
    released = [_ID.unpack_from(element, at + i * _ID.size)[0] for i in range(count)]
    at += count * _ID.size
    return chunk, released, element[at:]


def decode_restored(parameter: str | None) -> Iterator[tuple[Any, list[Any]]]:
    """The ``(destination, records)`` of the chunks a restored operator handed over in
    :data:`CARRY_STATE_PARAMETER`, oldest chunk first (None or empty: nothing restored).

    With a new parallelism a subtask may get chunks of several old subtasks; their ids are each
    subtask's own, so the order between them is by id only, which is as much order as two
    subtasks ever had.
    """
    if not parameter:
        return
    chunks: list[tuple[int, bytes]] = []
    for text in parameter.split(","):
        raw = base64.b64decode(text)
        chunks.append((_ID.unpack_from(raw, 0)[0], raw[_ID.size :]))
    chunks.sort(key=lambda item: item[0])
    for _, payload in chunks:
        yield from pickle.loads(payload)
