"""What a run's job handed its sink, read from the emission logs job.py writes.

Each writer subtask attempt of the job's sink logs every record the writer takes (``<id>
<epoch ms>``, written before the writer buffers it, ``sink-*.log``), and each subtask attempt
of the job's map every record it hands to the sink's operator and, once the suite dropped the
``finish`` file, the ids it dropped instead (``d <first> <last>``, ``map-*.log``). The two
differ: the sink's operator feeds its Python writer at its bundle ends and checkpoint
barriers, so a record the map handed on can be lost with the operator's input at a fault
without the writer ever having taken it. From those the suite knows, without asking the
destination:

- which records the sink was handed, and how often (a replay hands a record again);
- which records were exposed at a fault: handed before it and again after it (a failover
  hands again everything after the barrier of the checkpoint it restores), or for a fault
  the job rode out, handed after the last completed checkpoint and before the fault ended;
- which ids the destination need not hold: those whose last word, in the latest attempt of
  the map that reached them, is a drop after the finish. An id an earlier attempt handed on
  and a later attempt dropped was rolled back by the restore between them (a restore re-reads
  only what its checkpoint did not cover), so the sink owes it nothing; an exactly-once sink
  must not show it at all.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

#: job.py's folder of emission logs in the control directory.
LOGS = "log"


@dataclass
class Ledger:
    """The records a run's job handed its sink.

    Attributes:
        handed: Times the sink's writer took each id, over every attempt.
        emitted: Times the map handed each id to the sink's operator, over every attempt.
        times: The epoch ms of every hand-on by the map, sorted (for :meth:`between`).
        when: Each id's hand-on times by the map (epoch ms), in log order.
        last_word: Per id, whether the latest map attempt that reached it (attempts ordered by
            their log's creation) dropped it; an attempt's hand-on and its drop of one id cannot
            both happen.
        logs: How many of the sink's logs (writer subtask attempts that took a record) were
            read.
    """

    handed: Counter[int] = field(default_factory=Counter)
    emitted: Counter[int] = field(default_factory=Counter)
    times: list[int] = field(default_factory=list)
    when: dict[int, list[int]] = field(default_factory=dict)
    last_word: dict[int, tuple[int, bool]] = field(default_factory=dict)
    logs: int = 0

    @property
    def resent(self) -> int:
        """Handings beyond each record's first: the replays the sink had to absorb."""
        return sum(self.handed.values()) - len(self.handed)

    def between(self, start_ms: int, end_ms: int) -> int:
        """Records handed to the sink at ``start_ms`` <= t <= ``end_ms``."""
        return bisect.bisect_right(self.times, end_ms) - bisect.bisect_left(self.times, start_ms)

    def handed_again(self, at_ms: int, until_ms: int | None) -> int:
        """Records the map handed on before ``at_ms`` and again at ``at_ms`` <= t <
        ``until_ms`` (None: ever after): what a failover at ``at_ms`` replayed, i.e. what the
        sink's operator had been handed since the barrier of the checkpoint it restored: in its
        input, buffered, in flight, written or prepared but not yet covered by a completed
        checkpoint."""
        end = until_ms if until_ms is not None else 2**63
        return sum(
            1
            for times in self.when.values()
            if len(times) > 1 and min(times) < at_ms and any(at_ms <= t < end for t in times)
        )

    def finally_dropped(self, ids: list[int]) -> set[int]:
        """Those of ``ids`` whose last word is a drop after the finish: the destination need
        not hold them. An id an earlier attempt handed on is among them when a later attempt
        dropped it: the restore between the two rolled the handing back (the later attempt
        could only re-read it because the restored checkpoint did not cover it)."""
        return {i for i in ids if self.last_word.get(i, (0, False))[1]}

    def owed(self, count: int, *, complete: bool) -> set[int]:
        """The ids of ``0..count-1`` the destination must hold.

        After a complete run (its last job finished), every id but those finally dropped:
        an id no attempt handed on nor dropped is owed too, whatever happened to it. After a
        run cut short (its last job cancelled, failed or never restored, the run reported
        failed for that), only the ids some map attempt handed on, less those finally
        dropped: the sink can lose only what it was handed, and the rest never left the
        source. An id an attempt handed on just before the run was cut short, that a restore
        rolled back and no later attempt reached, is owed all the same.
        """
        ids = set(range(count))
        if not complete:
            ids &= set(self.emitted) | set(self.handed)
        return ids - self.finally_dropped(sorted(ids))

    def rolled_back(self) -> set[int]:
        """Ids handed to the sink by some attempt and finally dropped: an exactly-once sink
        must not show them (their writes belong to an attempt a restore rolled back)."""
        return {
            i
            for i, (_, dropped) in self.last_word.items()
            if dropped and (i in self.handed or i in self.emitted)
        }


def read_ledger(control: Path) -> Ledger:
    """Reads every emission log under ``control``; a torn last line (the process was killed
    while writing it) is skipped: its record was not handed on, as the line comes first."""
    ledger = Ledger()
    for log in sorted((control / LOGS).glob("*.log"), key=_created):
        sink = log.name.startswith("sink-")
        ledger.logs += sink
        attempt = _created(log)
        for line in log.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == "d":
                first, last = int(parts[1]), int(parts[2])
                if not sink:
                    for record in range(first, last + 1):
                        _say(ledger, record, attempt, dropped=True)
            elif len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                record, at = int(parts[0]), int(parts[1])
                if sink:
                    ledger.handed[record] += 1
                else:
                    ledger.emitted[record] += 1
                    ledger.times.append(at)
                    ledger.when.setdefault(record, []).append(at)
                    _say(ledger, record, attempt, dropped=False)
    ledger.times.sort()
    return ledger


def _created(log: Path) -> int:
    """When a log's attempt opened it: the ``<time_ns>`` job.py ends each log's name with."""
    stem = log.stem.rsplit("-", 1)[-1]
    return int(stem) if stem.isdigit() else 0


def _say(ledger: Ledger, record: int, attempt: int, *, dropped: bool) -> None:
    seen = ledger.last_word.get(record)
    if seen is None or attempt >= seen[0]:
        ledger.last_word[record] = (attempt, dropped)
