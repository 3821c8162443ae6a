"""``pyflink-gcp plan``: a dry run of a sink's routing over a sample, before the job is deployed.

Given a built sink (or a resolver, or a function returning one) and a sample of records (JSON
lines), it runs the resolver and the serializer on every record, as the sink would, without
writing anything, and reports: the destinations with their counts; the records that would be
unroutable, whose resolver or serializer raises, or that the serializer skips; the projected
number of distinct destinations per day, and how it was computed; for a template that sanitizes
its values, the values that sanitize to one text (the names that would collide: the job routes
the first it meets and refuses the others); and what that implies per sink — destination
writers per subtask, connections, auto-created resources against the creation budget, and, for
BigQuery FILE_LOADS, load jobs per table per day against BigQuery's quota.

The projection depends on the resolver:

- A name template with a time part (``orders_{region}_{ts:%Y%m%d}``) names a new destination
  per time bucket (a UTC day for ``%Y%m%d``, an hour with ``%H``, a month for ``%Y%m``) per
  combination of its other placeholders. The sample's records are grouped by the text their
  time part renders (from the field it names, or from the event timestamp that
  ``--timestamp-field`` sets for ``event_time``); the figure is the most names one bucket
  holds, times the buckets a day has. The record rate does not enter it.
- Any other resolver: if the second half of the sample still found new destinations, it
  assumes the job keeps finding them at that rate all day
  (``distinct + new-in-second-half / records-in-second-half × (records per day − sample)``),
  capped at one destination per record; a sample whose second half found none projects its own
  count.

Under CREATE_IF_NEEDED the creations a subtask makes in the budget's window
(``max_created_destinations_per``, one day for options without one) are compared with the
budget: at most ``max_created_destinations`` per window.

The exit status (:data:`EXIT_STATUS`) makes it a check before deploying: 1 when the sample says
the sink would fail the job or a bound would be exceeded, 0 otherwise, 2 for a target or sample
that cannot be read.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import math
import os
import sys
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.functions import as_resolver, short_repr
from pyflink_gcp.core.options import CreateDisposition
from pyflink_gcp.core.types import Destination, UnroutableRecord, WriterContext
from pyflink_gcp.routing._helpers import MISSING, field_of
from pyflink_gcp.routing._plan_times import (
    DAY_MS,
    ONE_DAY,
    TimeBuckets,
    TimeProjection,
    as_millis,
    number,
    template_of,
    window_text,
)
from pyflink_gcp.routing.templates import Template, TemplateValueError

#: What ``pyflink-gcp plan``'s exit status says (its ``--help`` shows this).
EXIT_STATUS = (
    "exit status: 1 when the sink would fail the job on the sample (a resolver or serializer "
    "error; under the fail_job failure handler, the default, an unroutable record or a name "
    "that collides) or a bound would be exceeded; 0 otherwise; 2 for a target or sample that "
    "cannot be read"
)


@dataclass
class Plan:
    """What a sample routes to, and what that implies for the job."""

    sink: str
    records: int
    destinations: Counter[str] = field(default_factory=Counter)
    unroutable: Counter[str] = field(default_factory=Counter)
    resolver_errors: list[str] = field(default_factory=list)
    serializer_errors: list[str] = field(default_factory=list)
    skipped: int = 0
    #: Records into the sample at which each new destination was first seen.
    first_seen: list[int] = field(default_factory=list)
    #: Distinct destinations per day; for a template with a time part, the new ones
    #: (fractional for a unit longer than a day: 4 a month is 0.13 a day).
    projected_per_day: float = 0
    #: How ``projected_per_day`` was computed, a line each.
    projection: list[str] = field(default_factory=list)
    #: What the sample shows of a template's time part (None: no time part).
    time: TimeProjection | None = None
    records_per_second: float = 1_000.0
    #: The module of the destinations' type (``pyflink_gcp.bigquery...``).
    destination_module: str | None = None
    #: (what, figure, bound or None, exceeded)
    resources: list[tuple[str, str, str | None, bool]] = field(default_factory=list)
    #: Warnings that are no bound: a BigQuery table per day, a sample that may miss keys.
    warnings: list[str] = field(default_factory=list)
    #: Values of a sanitizing template that sanitize to one text: (placeholder, the text, the
    #: raw values in the order the sample has them; the job refuses each after the first).
    collisions: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)
    #: The sink's failure handler (``fail_job``, ...); None for a bare resolver, whose sink
    #: would have the default, ``fail_job``.
    handler: str | None = None

    @property
    def exceeded(self) -> list[str]:
        return [what for what, _, _, over in self.resources if over]

    @property
    def fails_job(self) -> list[str]:
        """Why the sink would fail the job on the sample (empty: it would not)."""
        fails = self.handler in (None, "fail_job")
        reasons = [
            f"{len(errors):,} {what} errors"
            for what, errors in (
                ("resolver", self.resolver_errors),
                ("serializer", self.serializer_errors),
            )
            if errors
        ]
        unroutable = sum(self.unroutable.values())
        if fails and unroutable:
            reasons.append(f"{unroutable:,} unroutable records under fail_job")
        if fails and self.collisions:
            reasons.append(f"{len(self.collisions):,} colliding names under fail_job")
        return reasons


def _project(plan: Plan, per_day: float) -> int:
    """Distinct destinations over ``per_day`` records, from the sample's growth (a resolver
    without a time part)."""
    n = plan.records
    distinct = len(plan.destinations)
    if n == 0:
        return 0
    half = n // 2
    late = sum(1 for at in plan.first_seen if at >= half)
    if late == 0 or n - half == 0:
        return distinct
    rate = late / (n - half)
    return int(min(per_day, distinct + rate * max(0.0, per_day - n)))


def _explain_growth(plan: Plan, per_day: float) -> list[str]:
    """How :func:`_project` got its figure, in words."""
    n = plan.records
    distinct = len(plan.destinations)
    what = "the resolver shows no time part" if plan.time is None else "no time bucket rendered"
    if n == 0:
        return [f"{what}; the sample has no records"]
    half = n // 2
    late = sum(1 for at in plan.first_seen if at >= half)
    if late == 0:
        return [
            f"{what}: the sample's own {distinct:,}, as its second half found no new "
            "destination; the record rate does not change it"
        ]
    return [
        f"{what}: the sample's {distinct:,}, plus new ones at the rate of its second half "
        f"({late:,} in {n - half:,} records) over the rest of the {per_day:,.0f} records a day "
        f"at {number(plan.records_per_second)}/s, at most one per record"
    ]


class _Collisions:
    """Collects, record by record, the raw values of a sanitizing template's placeholders by
    what they sanitize to (the whole sample: the job's own check keeps a bounded window)."""

    def __init__(self, template: Template, now: datetime) -> None:
        self.template = template
        self.now = now
        parts = template._placeholders
        self.sources = [part.source for part in parts]
        # Each placeholder on its own, unsanitized: its text is the raw value.
        self.probes = [Template(part.source) for part in parts]
        self.seen: list[dict[str, dict[str, None]]] = [{} for _ in parts]

    def observe(self, record: Any, context: WriterContext) -> None:
        for index, probe in enumerate(self.probes):
            try:
                raw = probe.render(record, context, now=self.now, checked=False)
            except TemplateValueError:
                continue
            text = self.template.sanitize_value(raw, index)
            self.seen[index].setdefault(text, {})[raw] = None

    def found(self) -> list[tuple[str, str, tuple[str, ...]]]:
        return [
            (source, text, tuple(raws))
            for source, seen in zip(self.sources, self.seen, strict=True)
            for text, raws in seen.items()
            if len(raws) > 1
        ]


def _collisions(resolver: Any) -> _Collisions | None:
    """A collector of collisions, for a resolver rendering a template that sanitizes."""
    template = template_of(resolver)
    if template is None or not template.sanitizes or template.is_constant:
        return None
    return _Collisions(template, datetime.now(UTC))


def run_plan(
    sink: Any,
    records: Iterable[Any],
    *,
    records_per_second: float = 1_000.0,
    parallelism: int = 1,
    checkpoint_interval_s: float | None = None,
    timestamp_field: str | None = None,
) -> Plan:
    """Route ``records`` through ``sink``'s resolver and serializer (or a bare resolver) and
    project what a day at ``records_per_second`` implies."""
    config = getattr(sink, "_config", None)
    if config is not None:
        name, resolver, serializer = config.sink_name, config.resolver, config.serializer
        fixed = config.fixed_destination
    else:
        name, resolver, serializer, fixed = "-", sink, None, None
    resolve = as_resolver(resolver, name) if fixed is None else None
    method = getattr(serializer, "serialize", None)
    serialize = method if callable(method) else serializer
    unwrap = getattr(resolver, "record_of", None)
    plan = Plan(sink=name, records=0, records_per_second=records_per_second)
    if config is not None:
        plan.handler = config.failure_handler.mode
    ctx = WriterContext(number_of_parallel_subtasks=parallelism)
    buckets = _time_buckets(resolver if fixed is None else None)
    collisions = _collisions(resolver if fixed is None else None)
    for record in records:
        at = plan.records
        plan.records += 1
        if timestamp_field is not None:
            stamp = as_millis(_field(record, timestamp_field))
            ctx.timestamp = int(stamp) if stamp is not None else None
        if collisions is not None:
            collisions.observe(record, ctx)
        if resolve is None:
            destination: Any = fixed
        else:
            try:
                destination = resolve(record, ctx)
            except Exception as exc:  # noqa: BLE001 - reported, as the sink would fail on it
                plan.resolver_errors.append(f"{type(exc).__name__}: {exc} ({short_repr(record)})")
                continue
            if isinstance(destination, UnroutableRecord):
                plan.unroutable[destination.reason] += 1
                continue
            if not isinstance(destination, Destination):
                plan.resolver_errors.append(
                    f"returned {short_repr(destination)}, not a destination ({short_repr(record)})"
                )
                continue
        key = str(destination)
        if buckets is not None:
            buckets.observe(at, record, ctx, key)
        if resolve is not None and callable(unwrap):
            record = unwrap(record)
        if key not in plan.destinations:
            plan.first_seen.append(at)
            if plan.destination_module is None:
                plan.destination_module = type(destination).__module__
        plan.destinations[key] += 1
        if callable(serialize):
            try:
                if serialize(record, ctx) is None:
                    plan.skipped += 1
            except Exception as exc:  # noqa: BLE001 - reported, as the sink would fail on it
                plan.serializer_errors.append(f"{type(exc).__name__}: {exc} ({short_repr(record)})")
    if buckets is not None:
        plan.time = buckets.projection
    if collisions is not None:
        plan.collisions = collisions.found()
    _project_per_day(plan, timestamp_field)
    if config is not None:
        _resources(plan, config, parallelism, checkpoint_interval_s)
    return plan


def _time_buckets(resolver: Any) -> TimeBuckets | None:
    """A collector of time buckets, for a resolver rendering a template with a time part."""
    template = template_of(resolver)
    if template is None:
        return None
    try:
        return TimeBuckets(template, datetime.now(UTC))
    except ValueError:  # no time part
        return None


def _field(record: Any, name: str) -> Any:
    value = field_of(record, name)
    return None if value is MISSING else value


def _project_per_day(plan: Plan, timestamp_field: str | None) -> None:
    """Set the projection per day and say how it was computed."""
    per_day_records = plan.records_per_second * 86_400
    time = plan.time
    if time is not None and timestamp_field is not None and not time.reads_event_time:
        plan.warnings.append(
            f"--timestamp-field {timestamp_field} sets the records' event timestamps; the "
            f"template reads its time from {' '.join(time.time_parts)}"
        )
    if time is None or not time.buckets:
        if time is not None and time.reads_event_time and timestamp_field is None:
            plan.warnings.append(
                "the template reads event_time: give --timestamp-field, the field holding each "
                "record's event time"
            )
        plan.projected_per_day = _project(plan, per_day_records)
        plan.projection = _explain_growth(plan, per_day_records)
        return
    plan.projected_per_day = time.per_day
    plan.projection = time.explain(plan.records)
    module = plan.destination_module or ""
    if module.startswith("pyflink_gcp.bigquery") and time.unit.shortest <= DAY_MS:
        plan.warnings.append(time.partition_hint())


def _budget(options: Any) -> tuple[int, timedelta] | None:
    """The creation budget: at most n per window (a day for options without a window)."""
    count = getattr(options, "max_created_destinations", None)
    if not isinstance(count, int):
        return None
    window = getattr(options, "max_created_destinations_per", ONE_DAY)
    return count, window if isinstance(window, timedelta) else ONE_DAY


def _creations(
    plan: Plan, time: TimeProjection | None, bound: int, window: timedelta
) -> tuple[str, str, str | None, bool]:
    """Creations per subtask per ``window`` against the budget of ``bound`` per window."""
    if time is not None:
        created = time.per_window(window)
        if len(plan.destinations) > bound:
            plan.warnings.append(
                f"a replay of the sample's {len(time.buckets):,} {time.unit.name} buckets at once "
                f"(a backfill) creates {len(plan.destinations):,} destinations in one burst, more "
                f"than max_created_destinations={bound:,}: raise it for the backfill"
            )
    else:
        created = _project(plan, plan.records_per_second * window.total_seconds())
    return (
        f"destinations created per subtask per {window_text(window)}",
        f"{created:,}",
        f"max_created_destinations, at most {bound:,} per {window_text(window)}",
        created > bound,
    )


def _resources(
    plan: Plan, config: Any, parallelism: int, checkpoint_interval_s: float | None
) -> None:
    factory = config.factory
    options = getattr(factory, "options", None) or getattr(factory, "writer_options", None)
    time = plan.time if plan.time is not None and plan.time.buckets else None
    projected = math.ceil(plan.projected_per_day)
    cap = config.max_active
    held = time.writers(getattr(config, "idle_timeout_s", None)) if time else projected
    writers = held if cap is None else min(held, cap)
    plan.resources.append(
        (
            "destination writers per subtask",
            f"up to {writers:,}",
            f"max_active_destinations={cap}" if cap is not None else None,
            False,
        )
    )
    disposition = getattr(factory, "create_disposition", None)
    budget = _budget(options)
    if disposition is CreateDisposition.CREATE_IF_NEEDED and budget is not None:
        # Any subtask may meet every destination (records are not routed to subtasks by
        # destination), so each one may have to create all of them.
        plan.resources.append(_creations(plan, time, *budget))
    elif disposition is CreateDisposition.CREATE_NEVER:
        plan.resources.append(
            (
                "destinations that must exist before their first record",
                time.rate() if time else f"{projected:,}",
                None,
                False,
            )
        )
    kind = type(factory).__name__
    if kind == "FileLoadsWriterFactory" and checkpoint_interval_s:
        from pyflink_gcp.bigquery.options import LOAD_JOBS_PER_TABLE_PER_DAY

        interval = max(checkpoint_interval_s, factory.loads.min_load_interval.total_seconds())
        per_table = 86_400 / interval
        plan.resources.append(
            (
                "load jobs per table per day",
                f"{per_table:,.0f} (one per {interval:g} s)",
                f"BigQuery quota {LOAD_JOBS_PER_TABLE_PER_DAY:,}",
                per_table > LOAD_JOBS_PER_TABLE_PER_DAY,
            )
        )
    elif kind == "BigQueryWriterFactory":
        plan.resources.append(
            (
                "AppendRows connections per subtask (a stream per table written)",
                f"up to {writers:,}",
                None,
                False,
            )
        )
    elif kind == "BufferedBigQueryWriterFactory" and checkpoint_interval_s:
        plan.resources.append(
            (
                "BUFFERED streams created per subtask per day (one per table per checkpoint)",
                f"up to {writers * 86_400 / checkpoint_interval_s:,.0f}",
                None,
                False,
            )
        )


def format_plan(plan: Plan, top: int = 20) -> str:
    """The report ``pyflink-gcp plan`` prints."""
    lines = [
        f"sink '{plan.sink}': {plan.records:,} sample records, "
        f"{len(plan.destinations):,} distinct destinations"
    ]
    for destination, count in plan.destinations.most_common(top):
        lines.append(f"  {count:>9,}  {destination}")
    if len(plan.destinations) > top:
        lines.append(f"  ... and {len(plan.destinations) - top:,} more")
    unroutable = sum(plan.unroutable.values())
    lines.append(
        f"unroutable {unroutable:,}, resolver errors {len(plan.resolver_errors):,}, serializer "
        f"errors {len(plan.serializer_errors):,}, skipped by the serializer {plan.skipped:,}"
    )
    for reason, count in plan.unroutable.most_common(5):
        lines.append(f"  unroutable {count:,}x: {reason}")
    for error in plan.resolver_errors[:3] + plan.serializer_errors[:3]:
        lines.append(f"  error: {error}")
    if plan.collisions:
        lines.append(
            f"colliding names {len(plan.collisions):,}: values that sanitize to one text (the "
            "job keeps the name for the first it sees, and each other one is unroutable)"
        )
    for source, text, raws in plan.collisions[:top]:
        values = ", ".join(repr(raw) for raw in raws)
        lines.append(f"  {source}: {values} -> {text!r}")
    if len(plan.collisions) > top:
        lines.append(f"  ... and {len(plan.collisions) - top:,} more")
    time = plan.time if plan.time is not None and plan.time.buckets else None
    if time is not None and time.unit.per_day < 1:
        lines.append(
            f"projected distinct destinations per {time.unit.name}: {time.per_bucket:,} "
            f"({number(plan.projected_per_day)} new a day)"
        )
    else:
        lines.append(f"projected distinct destinations per day: {number(plan.projected_per_day)}")
    lines.extend(f"  {line}" for line in plan.projection)
    if plan.resources:
        lines.append("what it implies:")
    for what, figure, bound, over in plan.resources:
        limit = f" (bound: {bound})" if bound else ""
        lines.append(f"  {what}: {figure}{limit}{'  EXCEEDED' if over else ''}")
    lines.extend(f"warning: {warning}" for warning in plan.warnings)
    if plan.fails_job:
        lines.append("the sink would fail the job: " + "; ".join(plan.fails_job))
    lines.append(
        "bound exceeded: " + "; ".join(plan.exceeded) if plan.exceeded else "within every bound"
    )
    return "\n".join(lines)


def load_target(spec: str, args: Sequence[str] = ()) -> Any:
    """The sink or resolver named by ``module:attribute`` or ``path/to/file.py:attribute``; a
    callable is called with ``args`` (``NAME=VALUE`` strings as keyword arguments)."""
    if ":" not in spec:
        raise ConfigurationError(
            f"plan target {spec!r}: give module:attribute or file.py:attribute"
        )
    where, attribute = spec.rsplit(":", 1)
    if where.endswith(".py"):
        path = os.path.abspath(where)
        module_spec = importlib.util.spec_from_file_location(
            os.path.splitext(os.path.basename(path))[0], path
        )
        if module_spec is None or module_spec.loader is None:
            raise ConfigurationError(f"plan target {spec!r}: cannot load {where}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_spec.name] = module
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    target = getattr(module, attribute, None)
    if target is None:
        raise ConfigurationError(f"plan target {spec!r}: {where} has no {attribute!r}")
    kwargs = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep:
            raise ConfigurationError(f"--arg takes NAME=VALUE, got {arg!r}")
        kwargs[key] = _value(value)
    is_sink_or_resolver = getattr(target, "_config", None) is not None or hasattr(target, "resolve")
    if inspect.isclass(target) or (
        not is_sink_or_resolver and callable(target) and (kwargs or _takes_no_record(target))
    ):
        target = target(**kwargs)  # a function building the sink, or a resolver class
    return target


def _value(text: str) -> Any:
    """An ``--arg`` value: an int, a float, true/false, else the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def _takes_no_record(fn: Any) -> bool:
    """Whether ``fn`` builds a sink (no required parameters) rather than resolves a record."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return not any(
        p.default is inspect.Parameter.empty
        and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        for p in parameters
    )


def read_sample(path: str, raw: bool = False) -> list[Any]:
    """The records of a JSON-lines file: dicts, or each line's bytes with ``raw``."""
    records: list[Any] = []
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            line = line.rstrip(b"\r\n")
            if not line.strip():
                continue
            if raw:
                records.append(line)
                continue
            try:
                records.append(json.loads(line))
            except ValueError as exc:
                raise ConfigurationError(f"{path}:{number}: not JSON ({exc}); use --raw") from exc
    return records


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="module:attribute or file.py:attribute (sink or resolver)")
    parser.add_argument("--sample", required=True, help="JSON lines, one record per line")
    parser.add_argument(
        "--arg",
        action="append",
        default=[],
        help="NAME=VALUE keyword argument for a target that builds the sink (numbers and "
        "true/false are converted)",
    )
    parser.add_argument("--raw", action="store_true", help="records are the lines' bytes")
    parser.add_argument("--records-per-second", type=float, default=1_000.0)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--checkpoint-interval", type=float, default=None, help="seconds")
    parser.add_argument(
        "--timestamp-field", help="a record field holding its event time (epoch ms or ISO-8601)"
    )
    parser.add_argument("--top", type=int, default=20, help="destinations listed")


def run(args: argparse.Namespace) -> int:
    """The ``plan`` command's exit status: 1 when the sink would fail the job or a bound would
    be exceeded, 0 otherwise, 2 for bad input (:data:`EXIT_STATUS`)."""
    # The client libraries' notices about future Python versions say nothing about the plan.
    warnings.filterwarnings("ignore", category=FutureWarning)
    try:
        target = load_target(args.target, args.arg)
        records = read_sample(args.sample, raw=args.raw)
        plan = run_plan(
            target,
            records,
            records_per_second=args.records_per_second,
            parallelism=args.parallelism,
            checkpoint_interval_s=args.checkpoint_interval,
            timestamp_field=args.timestamp_field,
        )
    except (ConfigurationError, OSError, ImportError) as exc:
        print(f"pyflink-gcp plan: {exc}", file=sys.stderr)
        return 2
    print(format_plan(plan, top=args.top))
    return 1 if plan.exceeded or plan.fails_job else 0
