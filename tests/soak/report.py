"""The soak's figures: growth after warm-up, checkpoint durations per window, the table.

Why growth is compared on totals over the live processes: a TaskManager is killed every
``--kill-every`` minutes and its replacement (and every restarted Python worker) starts
small, so no single process lives through the whole run. The sum over the live TaskManager
JVMs, and over the live Python workers, at a steady moment (job RUNNING, every subtask
running) 10 minutes in and again at the end, measures what a long-running deployment carries;
kills are placed half a period off the sample points (5, 15, 25... minutes with the default
10), so both samples find the cluster the same time after its last kill.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from tests.soak.probe import Checkpoints, Sample, WriterGauges
from tests.soak.targets import REGISTRY

#: Growth after warm-up above this fails the soak (percent).
GROWTH_LIMIT_PCT = 10.0
FIGURES = (("rss_mb", "RSS MiB"), ("threads", "threads"), ("sockets", "sockets"))
KINDS = (("jvm", "TaskManager JVMs"), ("worker", "Python workers"))


@dataclass
class Growth:
    """One figure of one kind of process at warm-up and at the end."""

    kind: str
    figure: str
    start: float
    end: float

    @property
    def pct(self) -> float:
        return 0.0 if self.start == 0 else (self.end - self.start) / self.start * 100.0

    def cell(self) -> str:
        return f"{self.start:.0f} → {self.end:.0f} ({self.pct:+.1f}%)"


@dataclass
class Outcome:
    """Everything one sink's soak measured and what failed it.

    Attributes:
        sink: The sink.
        minutes: Wall minutes the job ran before the finish.
        handed: Distinct ids the sink was handed.
        out: Ids read back, once per copy.
        lost: Ids handed (or never dropped) that no destination holds.
        duplicates: Copies beyond the first.
        destinations: Destinations the run's records reached.
        kills: TaskManager kills injected.
        self_ended: TaskManagers that ended by themselves.
        job_state: How the job ended.
        samples: Every minute's sample.
        warm: The warm-up sample, end: the last steady sample.
        checkpoints: Every completed checkpoint seen.
        gauges: The writer gauges.
        problems: Why the soak fails (empty: it passed).
    """

    sink: str
    minutes: float = 0.0
    handed: int = 0
    out: int = 0
    lost: int = 0
    duplicates: int = 0
    destinations: int = 0
    kills: int = 0
    self_ended: list[str] = field(default_factory=list)
    job_state: str = "?"
    samples: list[Sample] = field(default_factory=list)
    warm: Sample | None = None
    end: Sample | None = None
    checkpoints: Checkpoints = field(default_factory=Checkpoints)
    gauges: WriterGauges = field(default_factory=WriterGauges)
    problems: list[str] = field(default_factory=list)

    def growth(self) -> list[Growth]:
        if self.warm is None or self.end is None or self.warm is self.end:
            return []
        return [
            Growth(kind, figure, self.warm.total(kind, figure), self.end.total(kind, figure))
            for kind, _ in KINDS
            for figure, _ in FIGURES
        ]


#: A sample this soon after a kill is not compared: the replacement TaskManager's workers open
#: their connections as the first records reach their writers, so its sockets and threads are
#: still rising (a sample 30 s after a kill read 20 worker sockets where every later one read
#: 26-28).
SETTLE_S = 90.0


def pick_samples(
    samples: list[Sample], warmup_s: float, kill_times: Sequence[float] = ()
) -> tuple[Sample | None, Sample | None]:
    """The first settled sample at or after ``warmup_s`` and the last settled sample: steady,
    and not within :data:`SETTLE_S` after a kill (``kill_times``, seconds as ``at_s``)."""
    steady = [
        s for s in samples if s.steady and not any(0 <= s.at_s - k < SETTLE_S for k in kill_times)
    ]
    warm = next((s for s in steady if s.at_s >= warmup_s), None)
    return warm, (steady[-1] if steady and warm is not None else None)


def windows(checkpoints: Checkpoints, start_ms: int, window_s: float) -> list[str]:
    """Median/max checkpoint duration (ms), count and largest state per ``window_s`` window
    since ``start_ms``, e.g. ``0-10': 38/412 ms (590), 12 KiB``."""
    buckets: dict[int, list[int]] = {}
    sizes: dict[int, int] = {}
    for checkpoint, (trigger, duration) in checkpoints.durations.items():
        index = int((trigger - start_ms) / 1000 // window_s)
        buckets.setdefault(index, []).append(duration)
        sizes[index] = max(sizes.get(index, 0), checkpoints.sizes.get(checkpoint, 0))
    out = []
    for index in sorted(buckets):
        values = buckets[index]
        lo, hi = index * window_s / 60, (index + 1) * window_s / 60
        out.append(
            f"{lo:g}-{hi:g}': {statistics.median(values):.0f}/{max(values)} ms ({len(values)}), "
            f"{sizes[index] / 1024:.0f} KiB"
        )
    return out


def judge(outcome: Outcome) -> None:
    """Appends the soak's failures: loss, growth above the limit, a TaskManager that ended
    by itself, a job that did not finish."""
    if outcome.lost:
        outcome.problems.append(f"{outcome.lost} records lost")
    if outcome.self_ended:
        outcome.problems.append(f"TaskManager(s) ended by themselves: {outcome.self_ended}")
    if outcome.job_state != "FINISHED":
        outcome.problems.append(f"the job ended {outcome.job_state}")
    if outcome.warm is None or outcome.end is None or outcome.warm is outcome.end:
        outcome.problems.append("no steady sample after warm-up and at the end: growth unknown")
    for growth in outcome.growth():
        if growth.pct > GROWTH_LIMIT_PCT:
            outcome.problems.append(
                f"{growth.kind} {growth.figure} grew {growth.pct:+.1f}% after warm-up "
                f"({growth.start:.0f} -> {growth.end:.0f})"
            )


HEADER = (
    "| sink | length | in | out | lost | duplicates | TM kills | destinations | LRU releases / "
    "idle closes seen | JVMs: RSS MiB | JVMs: threads | JVMs: sockets | workers: RSS MiB | "
    "workers: threads | workers: sockets | checkpoint ms, median/max (count), largest state "
    "per window; "
    "failed | "
    "result |"
)


def row(outcome: Outcome, window_cells: list[str]) -> str:
    """The sink's line of the table (growth cells: warm-up → end, growth %)."""
    cells = {(g.kind, g.figure): g.cell() for g in outcome.growth()}
    figures = [cells.get((k, f), "-") for k, _ in KINDS for f, _ in FIGURES]
    if outcome.sink not in REGISTRY:
        gauges = "- (one writer)"
    elif not outcome.gauges.max_active:
        gauges = "gauges not read"
    else:
        gauges = f"{outcome.gauges.released} / {outcome.gauges.idle_closed}"
    warm = ""
    if outcome.warm is not None and outcome.end is not None:
        warm = f" ({outcome.warm.at_s / 60:.1f}' → {outcome.end.at_s / 60:.1f}')"
    return (
        f"| {outcome.sink} | {outcome.minutes:.0f} min{warm} | {outcome.handed} | {outcome.out} "
        f"| {outcome.lost} | {outcome.duplicates} | {outcome.kills} | {outcome.destinations} | "
        f"{gauges} | {' | '.join(figures)} | {'; '.join(window_cells) or '-'}; "
        f"{outcome.checkpoints.failed} failed | "
        f"{'FAIL' if outcome.problems else 'pass'} |"
    )


def table(rows: list[str]) -> str:
    separator = "| " + " | ".join("---" for _ in HEADER.strip("|").split("|")) + " |"
    return "\n".join([HEADER, separator, *rows])
