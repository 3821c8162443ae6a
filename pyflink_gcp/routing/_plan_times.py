"""``plan``'s projection for a name template with a time part (``orders_{region}_{ts:%Y%m%d}``).

Such a template names a new destination per time bucket (a UTC day for ``%Y%m%d``, an hour
with ``%H``, a month for ``%Y%m``) per combination of its other placeholders. The sample's
records are grouped by the text the time part renders (their bucket); the figure per day is
the most names one bucket holds, times the buckets a day has. The record rate does not enter
it: a sample spanning five days finds five times the names of one day, not a growing stream.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pyflink_gcp.core.types import WriterContext
from pyflink_gcp.routing._helpers import MISSING, field_of
from pyflink_gcp.routing.templates import (
    EVENT_TIME,
    PROCESSING_TIME,
    Template,
    TemplateValueError,
)

DAY_MS = 86_400_000
_BUILTIN_ROOTS = (EVENT_TIME, PROCESSING_TIME)
ONE_DAY = timedelta(days=1)


@dataclass(frozen=True)
class TimeUnit:
    """The span one text of a time spec covers."""

    name: str
    #: Its mean length in milliseconds (a month: 30.44 days).
    millis: int
    #: Its shortest length (a month: 28 days): the most buckets that can start in a window.
    shortest: int
    #: The BigQuery time partitioning that holds as fine a split.
    partition: str

    @property
    def per_day(self) -> float:
        return DAY_MS / self.millis


_H = 3_600_000
MILLISECOND = TimeUnit("millisecond", 1, 1, "HOUR")
SECOND = TimeUnit("second", 1_000, 1_000, "HOUR")
MINUTE = TimeUnit("minute", 60_000, 60_000, "HOUR")
HOUR = TimeUnit("hour", _H, _H, "HOUR")
HALF_DAY = TimeUnit("half-day", 12 * _H, 12 * _H, "HOUR")
DAY = TimeUnit("day", DAY_MS, DAY_MS, "DAY")
WEEK = TimeUnit("week", 7 * DAY_MS, 7 * DAY_MS, "DAY")
MONTH = TimeUnit("month", 2_629_746_000, 28 * DAY_MS, "MONTH")
YEAR = TimeUnit("year", 31_556_952_000, 365 * DAY_MS, "YEAR")

_UNITS: dict[str, TimeUnit] = {"f": MILLISECOND}
for _letters, _unit in (
    ("STXcrs", SECOND),
    ("MR", MINUTE),
    ("HIkl", HOUR),
    ("p", HALF_DAY),
    ("aAdejuwDFx", DAY),
    ("UWV", WEEK),
    ("bBhm", MONTH),
    ("YyGgC", YEAR),
):
    _UNITS.update(dict.fromkeys(_letters, _unit))
#: Directives that render the same text at every instant (UTC's zone name and offset).
_CONSTANT = frozenset("zZnt")
#: Directives that carry the year (or the whole instant): without one, names recur.
_ABSOLUTE = frozenset("YyGgCcDFxs")
_DIRECTIVE = re.compile(r"%(%|[-_0^#:]?[A-Za-z])")


def spec_unit(spec: str) -> TimeUnit | None:
    """The finest unit ``spec`` shows (None for a spec whose text never changes); a letter
    not listed counts as seconds."""
    found: TimeUnit | None = None
    for directive in _DIRECTIVE.findall(spec):
        letter = directive[-1]
        if directive == "%" or letter in _CONSTANT:
            continue
        unit = _UNITS.get(letter, SECOND)
        if found is None or unit.millis < found.millis:
            found = unit
    return found


def _absolute(spec: str) -> bool:
    return any(d[-1] in _ABSOLUTE for d in _DIRECTIVE.findall(spec) if d != "%")


def as_millis(value: Any) -> float | None:
    """An event time as epoch milliseconds: a number (epoch ms), an ISO-8601 string (naive:
    UTC), a datetime or date, a PyFlink ``Instant``; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return moment.timestamp() * 1000
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC).timestamp() * 1000
    to_millis = getattr(value, "to_epoch_milli", None)
    return float(to_millis()) if callable(to_millis) else None


def window_text(window: timedelta) -> str:
    """``day``, ``hour``, ``6 hours``, ``30 min``: the ``per <window>`` of a budget."""
    seconds = window.total_seconds()
    for size, one, many in ((86_400, "day", "days"), (3_600, "hour", "hours"), (60, "", "min")):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return one if count == 1 and one else f"{count} {many}"
    return f"{seconds:g} s"


def number(value: float) -> str:
    """A figure as the report prints it: ``4``, ``1,440``, ``0.13``."""
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:,.2f}" if value >= 0.01 else f"{value:.2g}"


@dataclass
class TimeProjection:
    """What a sample shows of a time template's buckets."""

    template: str
    #: The time placeholders as written (``{ts:%Y%m%d}``) and the other ones.
    time_parts: tuple[str, ...]
    other_parts: tuple[str, ...]
    unit: TimeUnit
    #: Whether the time part carries the year, so that names never recur.
    absolute: bool
    #: The sample's time buckets (by the time part's text), each with its distinct names.
    buckets: dict[tuple[str, ...], set[str]] = field(default_factory=dict)
    #: Names of records whose time part does not render (a fallback destination).
    untimed: set[str] = field(default_factory=set)
    #: Each combination of the other placeholders, with the record it first appeared at.
    others: dict[tuple[str, ...], int] = field(default_factory=dict)
    earliest: float | None = None
    latest: float | None = None
    #: Whether any time placeholder reads the record's event timestamp.
    reads_event_time: bool = False

    @property
    def per_bucket(self) -> int:
        """The most distinct names one bucket of the sample holds."""
        return max((len(names) for names in self.buckets.values()), default=0)

    @property
    def per_day(self) -> float:
        return self.per_bucket * self.unit.per_day

    def rate(self) -> str:
        """``4 a day``, ``96 a day``, ``4 a month``: new names over time."""
        if self.unit.per_day >= 1:
            return f"{number(self.per_day)} a day"
        return f"{self.per_bucket:,} a {self.unit.name}"

    def per_window(self, window: timedelta) -> int:
        """Names created in ``window`` at most: a bucket's names for every bucket that can
        start in it, and each name without a time part once."""
        starts = max(1, -(-int(window.total_seconds() * 1000) // self.unit.shortest))
        return self.per_bucket * starts + len(self.untimed)

    def writers(self, idle_timeout_s: float | None) -> int:
        """Destination writers a subtask holds at once: the current bucket's, and the earlier
        buckets' until ``idle_timeout`` closes them (every name of a day without one)."""
        if idle_timeout_s is None:
            return math.ceil(self.per_day) + len(self.untimed)
        open_buckets = 1 + math.ceil(idle_timeout_s * 1000 / self.unit.shortest)
        return self.per_bucket * open_buckets + len(self.untimed)

    def explain(self, records: int) -> list[str]:
        """How the figure per day is computed, in a few lines."""
        unit, most = self.unit.name, self.per_bucket
        keys = ", ".join(self.other_parts)
        others = f" per combination of {keys}" if self.other_parts else ""
        lines = [f"time part {' '.join(self.time_parts)}: a new name every {unit}{others}"]
        span = ""
        if self.earliest is not None and self.latest is not None:
            span = f", event times {_instant(self.earliest)} to {_instant(self.latest)} UTC"
        lines.append(
            f"the sample covers {_count(len(self.buckets), f'{unit} bucket')}{span}, with at "
            f"most {_count(most, 'name')} in one"
        )
        if self.unit.per_day >= 1:
            scale = f"{_count(self.unit.per_day, 'bucket')} a day"
        else:
            scale = f"a bucket every {number(1 / self.unit.per_day)} days"
        lines.append(
            f"{_count(most, 'name')} a bucket x {scale}; the record rate does not change it"
        )
        if self.untimed:
            lines.append(
                f"plus {_count(len(self.untimed), 'destination')} without a time part (a "
                "fallback), created once"
            )
        if (
            self.earliest is not None
            and self.latest is not None
            and self.latest - self.earliest < self.unit.shortest
        ):
            lines.append(
                f"note: the sample spans {_duration(self.latest - self.earliest)}, less than one "
                f"{unit}: other keys absent from it are not counted"
            )
        if self.other_parts and len(self.others) > most:
            lines.append(
                f"note: the sample has {_count(len(self.others), 'combination')} of {keys} in "
                f"all, at most {most:,} in one {unit}: if each occurs every {unit}, "
                f"{len(self.others):,} a {unit}"
            )
        late = sum(1 for at in self.others.values() if at >= records // 2)
        if self.other_parts and late:
            lines.append(
                f"note: {late:,} of them first appear in the sample's second half: it may not "
                "hold them all"
                if len(self.others) > most
                else f"note: {late:,} of the {_count(len(self.others), 'combination')} of {keys} "
                "first appear in the sample's second half: it may not hold them all"
            )
        if not self.absolute:
            lines.append(
                "note: the time part has no year, so its names recur: creations stop once every "
                "name exists"
            )
        return lines

    def partition_hint(self) -> str:
        """The one table, partitioned by the unit, that holds what the tables per bucket hold."""
        table = _without_time(self.template, self.time_parts)
        roots = [part[1:].split(":", 1)[0] for part in self.time_parts]
        column = next((r for r in roots if r.split(".")[0] not in _BUILTIN_ROOTS), None)
        if column is None and EVENT_TIME in roots:
            column = "<the event time's column>"
        by = f" on column {column}" if column else " by ingestion time"
        return (
            f"BigQuery: a table per {self.unit.name}; one table partitioned by "
            f"{self.unit.partition.lower()} holds the same rows and stays one destination: "
            f"route to '{table}', created partitioned by {self.unit.partition.lower()}{by}"
        )


class TimeBuckets:
    """Collects, record by record, the time buckets a template's names fall in."""

    def __init__(self, template: Template, now: datetime) -> None:
        self.now = now
        parts = getattr(template, "_placeholders", ())
        timed: list[tuple[Any, TimeUnit]] = []
        for part in parts:
            unit = spec_unit(part.spec) if part.time_spec and part.spec else None
            if unit is not None:
                timed.append((part, unit))
        if not timed:
            raise ValueError("the template has no time part")
        self._time = [p for p, _ in timed]
        self._other = [p for p in parts if all(p is not t for t in self._time)]
        # Each placeholder on its own, unsanitized: its text is the bucket (or the key).
        self._time_probes = [Template(p.source) for p in self._time]
        self._other_probes = [Template(p.source) for p in self._other]
        finest = min((unit for _, unit in timed), key=lambda unit: unit.millis)
        self._finest = next(p for p, unit in timed if unit is finest)
        self.projection = TimeProjection(
            template=template.text,
            time_parts=tuple(p.source for p in self._time),
            other_parts=tuple(p.source for p in self._other),
            unit=finest,
            absolute=any(_absolute(p.spec) for p in self._time),
            reads_event_time=any(p.root == EVENT_TIME for p in self._time),
        )

    def observe(self, at: int, record: Any, context: WriterContext, name: str) -> None:
        """Count ``name``, the destination of the ``at``-th record of the sample."""
        projection = self.projection
        try:
            bucket = tuple(
                probe.render(record, context, now=self.now, checked=False)
                for probe in self._time_probes
            )
        except TemplateValueError:
            projection.untimed.add(name)
            return
        projection.buckets.setdefault(bucket, set()).add(name)
        try:
            key = tuple(
                probe.render(record, context, now=self.now, checked=False)
                for probe in self._other_probes
            )
        except TemplateValueError:
            key = (name,)
        projection.others.setdefault(key, at)
        # The wall clock says nothing of the span of the sample's times.
        clock = self._finest.root == PROCESSING_TIME
        moment = None if clock else as_millis(self._value(self._finest, record, context))
        if moment is not None:
            if projection.earliest is None or moment < projection.earliest:
                projection.earliest = moment
            if projection.latest is None or moment > projection.latest:
                projection.latest = moment

    def _value(self, part: Any, record: Any, context: WriterContext) -> Any:
        value = field_of(record, part.root)
        if value is MISSING:
            if part.root == EVENT_TIME:
                value = context.timestamp
            elif part.root == PROCESSING_TIME:
                value = self.now
        for segment in part.rest:
            if value is MISSING or value is None:
                return None
            value = field_of(value, segment)
        return None if value is MISSING else value


def template_of(resolver: Any) -> Template | None:
    """The name template a resolver renders (``route_by_template``, the SQL connectors'), if
    it shows one."""
    template = resolver if isinstance(resolver, Template) else getattr(resolver, "template", None)
    return template if isinstance(template, Template) else None


def _without_time(text: str, time_parts: tuple[str, ...]) -> str:
    """The template without its time placeholders and the separators around them."""
    for part in time_parts:
        text = re.sub(r"[-_.$]?" + re.escape(part), "", text, count=1)
        text = text.replace(part, "")
    return text.strip("-_.$") or text


def _count(count: float, noun: str) -> str:
    """``1 name``, ``4 names``, ``24 buckets``."""
    return f"{number(count)} {noun}{'' if count == 1 else 's'}"


def _instant(millis: float) -> str:
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=millis)
    return moment.strftime("%Y-%m-%d %H:%M")


def _duration(millis: float) -> str:
    minutes = int(millis // 60_000)
    if minutes >= 2_880:
        return f"{minutes / 1_440:.3g} days"
    if minutes >= 120:
        return f"{minutes / 60:.3g} h"
    return f"{minutes} min" if minutes else f"{millis / 1000:g} s"
