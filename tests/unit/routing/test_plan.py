"""pyflink-gcp plan: destinations and failures of a sample, the projection per day, and the
bounds it checks, from built sinks (no job runs, nothing is written)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from pyflink_gcp.bigquery import (
    BigQueryFileLoadsOptions,
    BigQuerySerializer,
    BigQuerySink,
    BigQueryWriterOptions,
    CreateDisposition,
    TableSchema,
    WriteMethod,
)
from pyflink_gcp.cli import main
from pyflink_gcp.core.failure import FailureHandler
from pyflink_gcp.routing import (
    bigquery_tables,
    pubsub_topics,
    route_by_field,
    route_by_template,
)
from pyflink_gcp.routing._plan_times import spec_unit
from pyflink_gcp.routing.plan import Plan, _project, format_plan, run_plan

REPO = Path(__file__).resolve().parents[3]
SCHEMA = TableSchema.of([("id", "INT64"), ("customer", "STRING")])


def bigquery_sink(
    resolver: Any, bound: int = 100, per: timedelta | None = None, **settings: Any
) -> BigQuerySink:
    budget = BigQueryWriterOptions.builder()
    budget = (
        budget.max_created_destinations(bound)
        if per is None
        else budget.max_created_destinations(bound, per=per)
    )
    builder = (
        BigQuerySink.builder()
        .set_sink_name("planned")
        .set_destination_resolver(resolver)
        .set_serializer(BigQuerySerializer.of(lambda r: {"id": r["id"]}, schema=SCHEMA))
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_writer_options(budget.build())
    )
    for name, value in settings.items():
        builder = getattr(builder, name)(value)
    return builder.build()


def by_customer(bound: int = 100) -> BigQuerySink:
    """A table per customer: unbounded with the records' customers."""
    return bigquery_sink(
        route_by_template("orders_{customer}", bigquery_tables("p", "d"), unroutable=True), bound
    )


def by_customer_id(bound: int = 100) -> BigQuerySink:
    """A table per customer of the example's orders."""
    return bigquery_sink(
        route_by_template("orders_{customer_id}", bigquery_tables("p", "d"), unroutable=True),
        bound,
    )


def by_customer_sanitized() -> BigQuerySink:
    """A table per customer, the customer sanitized into the table id."""
    return bigquery_sink(
        route_by_template(
            "orders_{customer}", bigquery_tables("p", "d", sanitize=True), unroutable=True
        )
    )


#: Customers of which three sanitize to one table id, and two to another.
COLLIDING = ["acme/eu", "globex", "acme_eu", "acme/eu", "acme eu", "ini.tech", "ini_tech"]


def orders(count: int, customers: int) -> list[dict[str, Any]]:
    return [{"id": i, "customer": f"c{i % customers}"} for i in range(count)]


def test_a_sample_shows_destinations_unroutable_records_and_serializer_failures() -> None:
    records = [*orders(30, 3), {"id": 99}, {"customer": "c1"}]
    plan = run_plan(by_customer(), records)
    assert plan.records == 32 and len(plan.destinations) == 3
    assert plan.destinations["projects/p/datasets/d/tables/orders_c0"] == 10
    assert sum(plan.unroutable.values()) == 1  # no customer: unroutable
    assert len(plan.serializer_errors) == 1 and "KeyError" in plan.serializer_errors[0]
    report = format_plan(plan)
    assert "3 distinct destinations" in report and "serializer errors 1" in report
    assert "the sink would fail the job" in report


def test_a_sample_lists_the_names_that_collide_when_values_are_sanitized() -> None:
    records = [{"id": i, "customer": c} for i, c in enumerate(COLLIDING)]
    plan = run_plan(by_customer_sanitized(), records)
    assert plan.collisions == [
        ("{customer}", "acme_eu", ("acme/eu", "acme_eu", "acme eu")),
        ("{customer}", "ini_tech", ("ini.tech", "ini_tech")),
    ]
    # The job's own check: each value after the first is unroutable, naming both.
    assert plan.destinations == {
        "projects/p/datasets/d/tables/orders_acme_eu": 2,
        "projects/p/datasets/d/tables/orders_globex": 1,
        "projects/p/datasets/d/tables/orders_ini_tech": 1,
    }
    assert sum(plan.unroutable.values()) == 3
    assert any("values 'ini.tech' and 'ini_tech' both sanitize" in r for r in plan.unroutable)
    report = format_plan(plan)
    assert "colliding names 2: values that sanitize to one text" in report
    assert "  {customer}: 'acme/eu', 'acme_eu', 'acme eu' -> 'acme_eu'" in report
    assert "  {customer}: 'ini.tech', 'ini_tech' -> 'ini_tech'" in report
    assert "... and 1 more" in format_plan(plan, top=1)


def test_a_sample_of_a_template_that_does_not_sanitize_has_no_collisions() -> None:
    records = [{"id": i, "customer": c} for i, c in enumerate(COLLIDING)]
    plan = run_plan(by_customer(), records)
    assert plan.collisions == []
    assert "colliding names" not in format_plan(plan)
    # The values BigQuery refuses are unroutable, named with the rule.
    assert sum(plan.unroutable.values()) == 3  # acme/eu twice and ini.tech
    assert len(plan.destinations) == 4  # globex, acme_eu, 'acme eu' and ini_tech
    reasons = list(plan.unroutable)
    assert any("placeholder {customer} is 'acme/eu': '/' is not allowed" in r for r in reasons)


def test_a_saturated_sample_projects_itself_and_a_growing_one_extrapolates() -> None:
    saturated = run_plan(by_customer(), orders(1_000, 10), records_per_second=100)
    assert saturated.projected_per_day == 10 and not saturated.exceeded
    growing = run_plan(by_customer(bound=1_000), orders(1_000, 1_000), records_per_second=1)
    # Every second-half record found a new customer: one per record, all day (86,400), and
    # 3,600 in the budget's window of an hour, past its 1,000.
    assert growing.projected_per_day == 86_400
    assert growing.exceeded == ["destinations created per subtask per hour"]
    report = format_plan(growing)
    assert "EXCEEDED" in report and "bound exceeded" in report
    assert "destinations created per subtask per hour: 3,600" in report
    assert "at most 1,000 per hour" in report
    # The report says how the figure was computed, for a resolver without a time part.
    assert (
        "the resolver shows no time part: the sample's 1,000, plus new ones at the rate of its "
        "second half (500 in 500 records) over the rest of the 86,400 records a day at 1/s"
    ) in report
    assert "the sample's own 10, as its second half found no new" in format_plan(saturated)


def test_the_projection_formula() -> None:
    plan = Plan(sink="s", records=100, first_seen=[0, 10, 60, 80])
    plan.destinations.update({"a": 1, "b": 1, "c": 1, "d": 1})
    # 2 new destinations in the last 50 records: 4 + 2/50 x (1,000 - 100) = 40.
    assert _project(plan, 1_000) == 40


REGIONS = ("eu", "us", "asia", "sa")
MAY_1 = int(datetime(2024, 5, 1, tzinfo=UTC).timestamp() * 1000)
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


def daily_orders(bound: int = 100) -> BigQuerySink:
    """A table a day per region, the day from the orders' ``ts`` (epoch ms)."""
    return bigquery_sink(
        route_by_template(
            "orders_{region}_{ts:%Y%m%d}", bigquery_tables("p", "d"), unroutable=True
        ),
        bound,
    )


def timed_orders(
    count: int, span_ms: int, regions: tuple[str, ...] = REGIONS, start: int = MAY_1
) -> list[dict[str, Any]]:
    """``count`` orders spread evenly over ``span_ms`` from ``start``, each from a region
    picked at random."""
    pick = random.Random(28)
    step = span_ms // count
    return [{"id": i, "region": pick.choice(regions), "ts": start + i * step} for i in range(count)]


def names_per_bucket(records: list[dict[str, Any]], spec: str) -> int:
    """The truth: the most tables one bucket of ``spec`` (a day, an hour) gets, one per
    region with orders in it."""
    buckets: dict[str, set[str]] = defaultdict(set)
    for record in records:
        moment = datetime.fromtimestamp(record["ts"] / 1000, UTC)
        buckets[moment.strftime(spec)].add(record["region"])
    return max(len(regions) for regions in buckets.values())


def test_a_five_day_sample_of_a_daily_template_projects_a_table_a_day_per_region(
    tmp_path: Path,
) -> None:
    records = timed_orders(2_000, 5 * DAY_MS)
    truth = names_per_bucket(records, "%Y%m%d")
    assert truth == len(REGIONS)
    for rate in (1.0, 1_000.0, 100_000.0):  # the record rate does not enter it
        plan = run_plan(daily_orders(), records, records_per_second=rate)
        assert plan.projected_per_day == truth and not plan.exceeded
    assert len(plan.destinations) == 5 * truth
    assert plan.time is not None and len(plan.time.buckets) == 5
    # What extrapolating the names' growth by the record rate would have claimed.
    assert _project(plan, 1_000 * 86_400) > 100_000
    report = format_plan(plan)
    assert "projected distinct destinations per day: 4\n" in report
    assert "time part {ts:%Y%m%d}: a new name every day per combination of {region}" in report
    assert "the sample covers 5 day buckets, event times 2024-05-01 00:00 to 2024-05-05" in report
    assert "4 names a bucket x 1 bucket a day" in report
    # The budget's window is an hour: a day's 4 tables, created at once, are within 100.
    assert (
        "destinations created per subtask per hour: 4 "
        "(bound: max_created_destinations, at most 100 per hour)\n"
    ) in report
    assert report.endswith("within every bound")
    # The command, as a user runs it: a sample file, the default rate, --timestamp-field.
    sample = tmp_path / "orders.jsonl"
    sample.write_text("".join(json.dumps(record) + "\n" for record in records))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyflink_gcp.cli",
            "plan",
            "tests.unit.routing.test_plan:daily_orders",
            "--sample",
            str(sample),
            "--timestamp-field",
            "ts",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "projected distinct destinations per day: 4\n" in done.stdout
    assert "EXCEEDED" not in done.stdout
    # One line shows the partitioned table that replaces the tables per day.
    hint = [line for line in done.stdout.splitlines() if "partitioned by" in line]
    assert hint == [
        "warning: BigQuery: a table per day; one table partitioned by day holds the same rows "
        "and stays one destination: route to 'orders_{region}', created partitioned by day on "
        "column ts"
    ]


def test_an_hourly_template_projects_24_tables_a_day_per_region() -> None:
    records = timed_orders(3_000, 2 * DAY_MS, regions=REGIONS[:3])
    hourly = route_by_template(
        "orders_{region}_{event_time:%Y%m%d%H}", bigquery_tables("p", "d"), unroutable=True
    )
    truth = names_per_bucket(records, "%Y%m%d%H")
    assert truth == 3
    # The event time comes from --timestamp-field.
    plan = run_plan(bigquery_sink(hourly, bound=2), records, timestamp_field="ts")
    assert plan.projected_per_day == 24 * truth
    assert plan.time is not None and len(plan.time.buckets) == 48
    # An hour's 3 new tables against a budget of 2 an hour.
    assert plan.exceeded == ["destinations created per subtask per hour"]
    report = format_plan(plan)
    assert "projected distinct destinations per day: 72\n" in report
    assert "3 names a bucket x 24 buckets a day" in report
    assert (
        "destinations created per subtask per hour: 3 "
        "(bound: max_created_destinations, at most 2 per hour)  EXCEEDED"
    ) in report
    assert "created partitioned by hour on column <the event time's column>" in report
    # A budget per day holds a day's 72.
    per_day = run_plan(
        bigquery_sink(hourly, bound=72, per=timedelta(days=1)), records, timestamp_field="ts"
    )
    assert not per_day.exceeded
    assert "per day: 72 (bound: max_created_destinations, at most 72 per day)" in format_plan(
        per_day
    )
    # Without event times the template renders nothing, and the report says what to give.
    blind = run_plan(hourly, records[:10])
    assert sum(blind.unroutable.values()) == 10
    assert "give --timestamp-field" in format_plan(blind)


def test_a_sample_of_one_hour_of_a_daily_template_counts_the_regions_in_it() -> None:
    records = timed_orders(200, HOUR_MS, start=MAY_1 + 10 * HOUR_MS)
    truth = len({record["region"] for record in records})  # one day: its regions
    plan = run_plan(daily_orders(), records, records_per_second=100_000)
    assert plan.projected_per_day == truth == 4 and not plan.exceeded
    report = format_plan(plan)
    assert "the sample covers 1 day bucket" in report
    assert "note: the sample spans 59 min, less than one day" in report
    # One region only in the hour: one table a day, not extrapolated to the others.
    lone = run_plan(daily_orders(), timed_orders(50, HOUR_MS, regions=("eu",)))
    assert lone.projected_per_day == 1


def test_a_template_without_a_time_part_projects_from_its_growth() -> None:
    # Five days of orders: without a time part in the names, the days do not matter.
    records = timed_orders(1_000, 5 * DAY_MS)
    by_region = route_by_template("orders_{region}", bigquery_tables("p", "d"))
    plan = run_plan(bigquery_sink(by_region), records, records_per_second=10, timestamp_field="ts")
    assert plan.time is None
    assert plan.projected_per_day == len({r["region"] for r in records}) and not plan.exceeded
    report = format_plan(plan)
    assert "the resolver shows no time part: the sample's own 4" in report
    assert "partitioned by" not in report
    # A name per order: each of the second half's 500 records was new, so 1,000 + 500/500 x
    # (864,000 - 1,000) a day at 10/s, and 36,000 in the budget's hour.
    by_order = route_by_template("orders_{region}_{id:05d}", bigquery_tables("p", "d"))
    plan = run_plan(bigquery_sink(by_order, bound=1_000), records, records_per_second=10)
    assert len({r["id"] for r in records}) == len(plan.destinations) == 1_000
    assert plan.projected_per_day == 864_000
    assert plan.exceeded == ["destinations created per subtask per hour"]
    assert "per hour: 36,000 (bound: max_created_destinations, at most 1,000 per hour)" in (
        format_plan(plan)
    )


def test_a_monthly_template_and_keys_that_keep_coming() -> None:
    records = timed_orders(400, 10 * DAY_MS)
    monthly = run_plan(route_by_template("orders-{region}-{ts:%Y%m}", pubsub_topics("p")), records)
    assert monthly.time is not None and monthly.time.per_bucket == len(REGIONS)
    assert monthly.projected_per_day == pytest.approx(4 / 30.436875)
    report = format_plan(monthly)
    assert "projected distinct destinations per month: 4 (0.13 new a day)" in report
    assert "a bucket every 30.44 days" in report and "warning" not in report
    # A new key per record: the names per day are the sample's, and the report says that the
    # sample may not hold every key. A record without ts goes to the fallback, once.
    fallback = pubsub_topics("p")("orders-unknown")
    growing = run_plan(
        route_by_template("orders-{id}-{ts:%Y%m%d}", pubsub_topics("p"), fallback=fallback),
        [*records, {"id": 1}],
    )
    assert growing.time is not None and growing.time.untimed == {str(fallback)}
    assert growing.projected_per_day == names_per_id(records)
    report = format_plan(growing)
    assert "first appear in the sample's second half: it may not hold them all" in report
    ids = len({r["id"] for r in records})
    assert (
        f"note: the sample has {ids} combinations of {{id}} in all, at most "
        f"{names_per_id(records)} in one day"
    ) in report
    assert "plus 1 destination without a time part (a fallback), created once" in report


def names_per_id(records: list[dict[str, Any]]) -> int:
    days: dict[str, set[int]] = defaultdict(set)
    for record in records:
        days[datetime.fromtimestamp(record["ts"] / 1000, UTC).strftime("%Y%m%d")].add(record["id"])
    return max(len(ids) for ids in days.values())


@pytest.mark.parametrize(
    ("spec", "unit"),
    [
        ("%Y%m%d", "day"),
        ("%Y-%m-%d %Z%z", "day"),
        ("%Y%m%d%H", "hour"),
        ("%Y%m%d%p", "half-day"),
        ("%H:%M", "minute"),
        ("%G-W%V", "week"),
        ("%Y%m", "month"),
        ("%Y", "year"),
        ("%Y%%d", "year"),  # '%%d' is a literal 'd'
        ("%Z", None),
    ],
)
def test_the_time_unit_of_a_spec(spec: str, unit: str | None) -> None:
    found = spec_unit(spec)
    assert (found.name if found is not None else None) == unit


@pytest.mark.parametrize(("interval_s", "over"), [(90, False), (10, True)])
def test_file_loads_are_checked_against_the_load_job_quota(interval_s: int, over: bool) -> None:
    loads = (
        BigQueryFileLoadsOptions.builder()
        .staging_location("gs://bucket/stage")
        .min_load_interval(timedelta(0))
        .build()
    )
    sink = bigquery_sink(
        route_by_field("customer", lambda c: bigquery_tables("p", "d")(c), unroutable=True),
        set_write_method=WriteMethod.FILE_LOADS,
        set_file_loads_options=loads,
    )
    plan = run_plan(sink, orders(100, 2), checkpoint_interval_s=interval_s)
    quota = [r for r in plan.resources if r[0] == "load jobs per table per day"]
    assert quota and quota[0][3] is over and bool(plan.exceeded) is over


def test_the_command_plans_an_example_and_fails_past_a_bound(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "examples"))
    try:
        import pubsub_dynamic_topics as example
    finally:
        sys.path.pop(0)
    sample = tmp_path / "orders.jsonl"
    sample.write_text("".join(json.dumps(example.make_order(i)) + "\n" for i in range(500)))
    command = [sys.executable, "-m", "pyflink_gcp.cli", "plan", "--sample", str(sample)]
    ok = subprocess.run(
        [*command, "examples/pubsub_dynamic_topics.py:build_sink", "--arg", "project=demo"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert "8 distinct destinations" in ok.stdout and "within every bound" in ok.stdout
    assert "projects/demo/topics/orders-us-east" in ok.stdout
    over = subprocess.run(
        [*command, "tests.unit.routing.test_plan:by_customer_id", "--arg", "bound=3"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    # The sample's customers (97) exceed a bound of 3 creations per subtask.
    assert over.returncode == 1, over.stderr
    assert "bound exceeded: destinations created per subtask" in over.stdout
    bad = subprocess.run(
        [*command, "tests.unit.routing.test_plan:no_such_thing"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and "has no 'no_such_thing'" in bad.stderr


def test_the_command_lists_colliding_names(tmp_path: Path) -> None:
    sample = tmp_path / "orders.jsonl"
    sample.write_text(
        "".join(json.dumps({"id": i, "customer": c}) + "\n" for i, c in enumerate(COLLIDING))
    )
    run = subprocess.run(
        [sys.executable, "-m", "pyflink_gcp.cli", "plan", "--sample", str(sample)]
        + ["tests.unit.routing.test_plan:by_customer_sanitized"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    # Under the default fail_job handler the refused names would fail the job.
    assert run.returncode == 1, run.stderr
    assert "2 colliding names under fail_job" in run.stdout
    assert "colliding names 2" in run.stdout
    assert "{customer}: 'acme/eu', 'acme_eu', 'acme eu' -> 'acme_eu'" in run.stdout


def dropping(kind: str) -> BigQuerySink:
    """``by_customer`` with the failure handler ``kind`` (fail_job, log_and_drop)."""
    return bigquery_sink(
        route_by_template("orders_{customer}", bigquery_tables("p", "d"), unroutable=True),
        set_failure_handler=getattr(FailureHandler, kind)(),
    )


#: Ten records to one table: the projection stays at that table, within every bound.
ONE_TABLE = [{"id": i, "customer": "a"} for i in range(10)]


@pytest.mark.parametrize(
    ("target", "records", "status", "verdict"),
    [
        ("dropping --arg kind=fail_job", ONE_TABLE, 0, "within every bound"),
        ("dropping --arg kind=fail_job", [*ONE_TABLE, {"id": 1}], 1, "1 unroutable records"),
        ("dropping --arg kind=log_and_drop", [*ONE_TABLE, {"id": 1}], 0, "within every bound"),
        ("by_customer", [*ONE_TABLE, {"customer": "a"}], 1, "1 serializer errors"),
        ("by_customer_sanitized", [{"id": 1, "customer": c} for c in COLLIDING], 1, "2 colliding"),
    ],
)
def test_the_command_exits_1_when_the_sample_would_fail_the_job(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    target: str,
    records: list[dict[str, Any]],
    status: int,
    verdict: str,
) -> None:
    sample = tmp_path / "sample.jsonl"
    sample.write_text("".join(json.dumps(r) + "\n" for r in records))
    name, *args = target.split()
    assert main(
        ["plan", "--sample", str(sample), f"tests.unit.routing.test_plan:{name}", *args]
    ) == (status)
    report = capsys.readouterr().out  # the report is printed either way
    assert report.startswith("sink 'planned': ") and verdict in report
    assert ("the sink would fail the job: " in report) is (status == 1)


def test_a_log_and_drop_sink_reports_unroutable_records_without_failing() -> None:
    plan = run_plan(dropping("log_and_drop"), [{"id": 1}, {"id": 2, "customer": "a"}])
    assert sum(plan.unroutable.values()) == 1 and plan.handler == "log_and_drop"
    assert plan.fails_job == []
    # A bare resolver's sink would have the default handler, which fails the job.
    bare = run_plan(
        route_by_template("t_{customer}", bigquery_tables("p", "d"), unroutable=True), [{}]
    )
    assert bare.handler is None and bare.fails_job == ["1 unroutable records under fail_job"]
