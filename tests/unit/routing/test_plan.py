"""pyflink-gcp plan: destinations and failures of a sample, the projection per day, and the
bounds it checks, from built sinks (no job runs, nothing is written)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
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
from pyflink_gcp.routing import bigquery_tables, route_by_field, route_by_template
from pyflink_gcp.routing.plan import Plan, _project, format_plan, run_plan

REPO = Path(__file__).resolve().parents[3]
SCHEMA = TableSchema.of([("id", "INT64"), ("customer", "STRING")])


def bigquery_sink(resolver: Any, bound: int = 100, **settings: Any) -> BigQuerySink:
    builder = (
        BigQuerySink.builder()
        .set_sink_name("planned")
        .set_destination_resolver(resolver)
        .set_serializer(BigQuerySerializer.of(lambda r: {"id": r["id"]}, schema=SCHEMA))
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_writer_options(BigQueryWriterOptions.builder().max_created_destinations(bound).build())
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


def test_a_saturated_sample_projects_itself_and_a_growing_one_extrapolates() -> None:
    saturated = run_plan(by_customer(), orders(1_000, 10), records_per_second=100)
    assert saturated.projected_per_day == 10 and not saturated.exceeded
    growing = run_plan(by_customer(bound=1_000), orders(1_000, 1_000), records_per_second=1)
    # Every second-half record found a new customer: one per record, all day (86,400).
    assert growing.projected_per_day == 86_400
    assert growing.exceeded == ["destinations created per subtask (at most, a day)"]
    assert "EXCEEDED" in format_plan(growing) and "bound exceeded" in format_plan(growing)


def test_the_projection_formula() -> None:
    plan = Plan(sink="s", records=100, first_seen=[0, 10, 60, 80])
    plan.destinations.update({"a": 1, "b": 1, "c": 1, "d": 1})
    # 2 new destinations in the last 50 records: 4 + 2/50 x (1,000 - 100) = 40.
    assert _project(plan, 1_000) == 40


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
