"""The creation budget against a fake clock: long-lived jobs run forever, backfills pass,
runaway resolvers end within seconds, with the error naming the bound."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

from pyflink_gcp.core.creation import (
    DEFAULT_MAX_CREATED,
    DEFAULT_WINDOW,
    CreationBudget,
    describe_bound,
    format_window,
)
from pyflink_gcp.core.errors import CreationLimitExceededError, is_non_retriable
from pyflink_gcp.core.options import CreatingWriterOptions

DAY = 86_400.0
HOUR = 3_600.0


class FakeClock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def default_budget(clock: FakeClock) -> CreationBudget:
    """The budget of a subtask with the default options."""
    options = CreatingWriterOptions()
    return CreationBudget(
        options.max_created_destinations, options.max_created_destinations_per, clock=clock
    )


def test_the_defaults_are_500_per_hour():
    assert (500, timedelta(hours=1)) == (DEFAULT_MAX_CREATED, DEFAULT_WINDOW)
    options = CreatingWriterOptions()
    assert options.max_created_destinations == DEFAULT_MAX_CREATED
    assert options.max_created_destinations_per == DEFAULT_WINDOW
    assert CreationBudget(500)._clock is time.monotonic


def test_a_destination_per_day_runs_for_ten_years():
    clock = FakeClock()
    budget = default_budget(clock)
    for _ in range(3_660):
        assert budget.take()
        clock.advance(DAY)
    assert budget.created == 3_660


def test_a_destination_per_hour_runs_for_a_year():
    clock = FakeClock()
    budget = default_budget(clock)
    for _ in range(24 * 366):
        assert budget.take()
        clock.advance(HOUR)


def test_a_table_per_tenant_and_hour_runs_for_a_week_with_its_bursts_at_each_hour():
    """400 tenants: 400 creations at the top of every hour, 2 ms apart. The bucket is full
    again by the next hour (a sliding window of an hour would see two bursts in it)."""
    clock = FakeClock()
    budget = default_budget(clock)
    for _ in range(24 * 7):
        start = clock.now
        for _ in range(400):
            assert budget.take()
            clock.advance(0.002)
        clock.advance(HOUR - (clock.now - start))


def test_a_backfill_of_400_daily_tables_in_two_minutes_passes_and_the_job_runs_on():
    clock = FakeClock()
    budget = default_budget(clock)
    for _ in range(400):  # the replay: a new day's table every 0.3 s
        assert budget.take()
        clock.advance(0.3)
    for _ in range(1_000):  # caught up: a table a day
        clock.advance(DAY)
        assert budget.take()


def test_a_year_of_daily_tables_at_once_fits_the_burst():
    clock = FakeClock()
    budget = default_budget(clock)
    assert all(budget.take() for _ in range(366))


def test_a_runaway_resolver_is_refused_within_a_second_at_emulator_speed():
    """10,000 creations attempted 1 ms apart: the 501st is refused, half a second in."""
    clock = FakeClock()
    budget = default_budget(clock)
    start = clock.now
    refused_at = None
    for attempt in range(10_000):
        if not budget.take():
            refused_at = attempt
            break
        clock.advance(0.001)
    assert refused_at == 500
    assert clock.now - start < 1.0


def test_a_runaway_resolver_is_refused_within_two_minutes_at_service_speed():
    """Against a service a creation takes a round trip or more: at 5 a second the bucket
    empties after ~103 s (it refills at 500 an hour, 0.14 a second, meanwhile)."""
    clock = FakeClock()
    budget = default_budget(clock)
    start = clock.now
    while budget.take():
        clock.advance(0.2)
        assert clock.now - start < 120
    assert 100 < clock.now - start < 120
    assert 500 < budget.created < 525


def test_the_budget_refills_continuously_and_never_beyond_its_size():
    clock = FakeClock()
    budget = CreationBudget(10, timedelta(minutes=10), clock=clock)
    assert sum(budget.take() for _ in range(20)) == 10
    clock.advance(300)  # half the window: half the tokens
    assert sum(budget.take() for _ in range(20)) == 5
    clock.advance(60 * 60 * 24)  # a day idle: still only 10
    assert sum(budget.take() for _ in range(20)) == 10
    assert budget.created == 25


def test_a_creation_that_created_nothing_gives_its_token_back():
    clock = FakeClock()
    budget = CreationBudget(2, clock=clock)
    assert budget.take() and budget.take() and not budget.take()
    budget.give_back()  # another subtask created it first
    assert budget.created == 1
    assert budget.take() and not budget.take()
    budget.give_back()
    budget.give_back()
    budget.give_back()  # never more than the bucket holds
    assert sum(budget.take() for _ in range(5)) == 2


def test_a_limit_of_zero_creates_nothing_ever():
    clock = FakeClock()
    budget = CreationBudget(0, clock=clock)
    assert not budget.take()
    clock.advance(DAY * 365)
    assert not budget.take()
    error = budget.exceeded(
        sink="s", what="creating table t", noun="tables", resolver="R", owner="O"
    )
    assert "would exceed max_created_destinations=0 per 1h: this subtask may create no tables" in (
        str(error)
    )


def test_a_new_budget_is_full_as_a_restarted_subtask_s():
    clock = FakeClock()
    before = CreationBudget(3, clock=clock)
    assert sum(before.take() for _ in range(5)) == 3
    after = CreationBudget(3, clock=clock)  # the subtask restarted: nothing carried over
    assert sum(after.take() for _ in range(5)) == 3


def test_concurrent_takes_never_overshoot():
    budget = CreationBudget(500, clock=lambda: 0.0)
    taken: list[bool] = []
    lock = threading.Lock()

    def run() -> None:
        mine = [budget.take() for _ in range(200)]
        with lock:
            taken.extend(mine)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(taken) == 500 and budget.created == 500


def test_the_error_names_the_bound_the_counts_and_what_to_change():
    clock = FakeClock()
    budget = CreationBudget(500, clock=clock)
    for _ in range(400):
        budget.take()
    clock.advance(HOUR * 2)  # full again: the run counted in the error starts here
    while budget.take():
        clock.advance(0.001)
    error = budget.exceeded(
        sink="orders",
        what="creating table p.d.orders_12345",
        noun="tables",
        resolver="by_user",
        owner="BigQueryWriterOptions",
        detail="the last: orders_12344",
    )
    assert isinstance(error, CreationLimitExceededError) and is_non_retriable(error)
    assert str(error) == (
        "sink 'orders': creating table p.d.orders_12345 would exceed "
        "max_created_destinations=500 per 1h: this subtask created 500 tables in the last 0.5s "
        "(900 since it started; the last: orders_12344). The destination resolver by_user names "
        "new tables faster than the bound allows; fix the resolver, or raise the bound with "
        "BigQueryWriterOptions.builder().max_created_destinations(n, per=timedelta(...)) (in "
        "SQL: 'sink.max-created-destinations' and 'sink.max-created-destinations.per')."
    )
    assert "\n" not in str(error)


@pytest.mark.parametrize(
    ("window", "text"),
    [
        (timedelta(hours=1), "1h"),
        (timedelta(days=1), "1d"),
        (timedelta(days=7), "7d"),
        (timedelta(minutes=90), "90min"),
        (timedelta(seconds=45), "45s"),
        (timedelta(milliseconds=500), "500ms"),
        (timedelta(microseconds=1500), "0:00:00.001500"),
    ],
)
def test_windows_are_named_in_the_sql_duration_syntax(window, text):
    assert format_window(window) == text
    assert describe_bound(7, window) == f"max_created_destinations=7 per {text}"


def test_a_budget_needs_a_count_and_a_positive_window():
    with pytest.raises(ValueError):
        CreationBudget(-1)
    with pytest.raises(ValueError):
        CreationBudget(1, timedelta(0))
