"""Table checks and creation against a scripted admin client (no emulator)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from google.api_core import exceptions as api_exceptions

from pyflink_gcp.bigtable import TableCreateOptions, TableDestination
from pyflink_gcp.bigtable.stats import BigtableWriterStats
from pyflink_gcp.bigtable.tables import BigtableTables, gc_rule
from pyflink_gcp.core import (
    CreationLimitExceededError,
    DestinationNotFoundError,
    RetryPolicy,
    WriteError,
)
from pyflink_gcp.core.creation import CreationBudget

TABLE = TableDestination.of("p", "inst", "t")


class FakeAdmin:
    """Answers GetTable from a script and records CreateTable requests."""

    def __init__(
        self, get_error: BaseException | None, create_error: BaseException | None = None
    ) -> None:
        self.get_error = get_error
        self.create_error = create_error
        self.gets: list[str] = []
        self.created: list[dict[str, Any]] = []

    def get_table(self, request: Any, retry: Any, timeout: float) -> Any:
        self.gets.append(request["name"])
        if self.get_error is not None:
            raise self.get_error
        return object()

    def create_table(self, request: dict[str, Any], retry: Any, timeout: float) -> Any:
        self.created.append(request)
        if self.create_error is not None:
            raise self.create_error
        return object()


def tables(
    admin: FakeAdmin,
    create: TableCreateOptions | None,
    max_created: int = 100,
) -> BigtableTables:
    return BigtableTables(
        sink_name="unit",
        admin=lambda: admin,
        policy=RetryPolicy(deadline_s=0.5),
        timeout_s=5.0,
        create_options=create,
        max_created=max_created,
        resolver_name="my.resolver",
        subtask_index=1,
        stats=BigtableWriterStats(),
    )


def test_an_existing_table_is_checked_once() -> None:
    admin = FakeAdmin(None)
    known = tables(admin, TableCreateOptions(column_families={"cf": 1}))
    known.ensure(TABLE)
    known.ensure(TableDestination.of("p", "inst", "t"))
    assert admin.gets == [str(TABLE)]


def test_missing_tables_are_created_with_their_families_up_to_the_bound() -> None:
    admin = FakeAdmin(api_exceptions.NotFound("no table"))
    options = TableCreateOptions(column_families={"cf": 3, "raw": None})
    known = tables(admin, options, max_created=2)
    for table in ("a", "b", "a"):
        known.ensure(TableDestination.of("p", "inst", table))
    assert [r["table_id"] for r in admin.created] == ["a", "b"]
    created = admin.created[0]
    assert created["parent"] == "projects/p/instances/inst"
    families = created["table"].column_families
    assert set(families) == {"cf", "raw"}
    assert families["cf"].gc_rule.max_num_versions == 3
    assert known._stats.tables_created == 2
    with pytest.raises(CreationLimitExceededError) as err:
        known.ensure(TableDestination.of("p", "inst", "c"))
    message = str(err.value)
    assert "creating table 'projects/p/instances/inst/tables/c' (subtask 1) would exceed " in (
        message
    )
    assert "max_created_destinations=2 per 1h: this subtask created 2 tables in the last" in (
        message
    )
    assert "(the last: a, b)" in message and "my.resolver" in message
    assert "BigtableWriterOptions.builder().max_created_destinations(n, per=" in message
    assert [r["table_id"] for r in admin.created] == ["a", "b"]


def test_the_creation_budget_refills_over_its_window() -> None:
    now = [0.0]
    admin = FakeAdmin(api_exceptions.NotFound("no table"))
    known = tables(admin, TableCreateOptions(column_families={"cf": 1}))
    known.budget = CreationBudget(2, timedelta(days=1), clock=lambda: now[0])
    for table in ("d1", "d2"):
        known.ensure(TableDestination.of("p", "inst", table))
    with pytest.raises(CreationLimitExceededError, match="max_created_destinations=2 per 1d"):
        known.ensure(TableDestination.of("p", "inst", "d3"))
    now[0] += 43_200  # half a day: one creation more
    known.ensure(TableDestination.of("p", "inst", "d3"))
    assert [r["table_id"] for r in admin.created] == ["d1", "d2", "d3"]
    assert known._stats.tables_created == 3 and known.budget.created == 3


def test_a_failed_creation_gives_its_budget_back() -> None:
    admin = FakeAdmin(api_exceptions.NotFound("no table"), api_exceptions.PermissionDenied("no"))
    known = tables(admin, TableCreateOptions(column_families={"cf": 1}), max_created=1)
    for _ in range(2):
        with pytest.raises(WriteError, match="creating it failed with PERMISSION_DENIED"):
            known.ensure(TABLE)
    assert known.budget.created == 0
    admin.create_error = None
    known.ensure(TABLE)
    assert known.budget.created == 1


def test_a_table_created_meanwhile_is_not_an_error() -> None:
    admin = FakeAdmin(
        api_exceptions.NotFound("no table"), api_exceptions.AlreadyExists("someone else")
    )
    known = tables(admin, TableCreateOptions(column_families={"cf": 1}), max_created=1)
    known.ensure(TABLE)
    assert list(known.created) == [] and known._stats.tables_created == 0
    assert known.budget.created == 0
    known.ensure(TableDestination.of("p", "inst", "other"))  # the budget of one is still there


def test_admin_failures() -> None:
    with_creation = TableCreateOptions(column_families={"cf": 1})
    with pytest.raises(WriteError, match="checking that it exists failed with PERMISSION_DENIED"):
        tables(FakeAdmin(api_exceptions.PermissionDenied("no admin")), with_creation).ensure(TABLE)
    with pytest.raises(WriteError, match="still failing"):
        tables(FakeAdmin(api_exceptions.ServiceUnavailable("down")), with_creation).ensure(TABLE)
    missing_instance = FakeAdmin(
        api_exceptions.NotFound("no table"), api_exceptions.NotFound("no instance")
    )
    with pytest.raises(DestinationNotFoundError, match="instance 'projects/p/instances/inst'"):
        tables(missing_instance, with_creation).ensure(TABLE)


def test_gc_rules() -> None:
    assert gc_rule(3).max_num_versions == 3
    assert gc_rule(timedelta(days=2)).max_age == timedelta(days=2)
    assert "max_num_versions" not in str(gc_rule(None)) and "max_age" not in str(gc_rule(None))


def test_an_unreachable_admin_endpoint_fails_within_the_deadline_naming_it() -> None:
    # Real admin client on a real channel: a refused endpoint is UNAVAILABLE (retried until
    # the deadline), and the error names the sink, the table and the admin endpoint.
    import time

    from pyflink_gcp.bigtable.client import BigtableClient
    from pyflink_gcp.core.errors import WriteError
    from pyflink_gcp.core.retry import RetryPolicy
    from tests.support.endpoints import refusing_endpoint

    refused = refusing_endpoint()
    client = BigtableClient("orders-bt", f"http://{refused}")
    policy = RetryPolicy(initial_backoff_s=0.05, max_backoff_s=0.2, deadline_s=1.0)
    tables = BigtableTables(
        sink_name="orders-bt",
        admin=lambda: client.admin,
        policy=policy,
        timeout_s=policy.attempt_timeout(60),
        create_options=TableCreateOptions(column_families={"cf": 1}),
        max_created=1,
        endpoint=client.admin_endpoint_name,
    )
    start = time.monotonic()
    try:
        with pytest.raises(WriteError) as err:
            tables.ensure(TableDestination.of("p", "i", "orders"))
    finally:
        client.close()
    assert time.monotonic() - start < 3
    assert (
        f"sink 'orders-bt': table 'projects/p/instances/i/tables/orders' at {refused}: "
        "checking that it exists: still failing"
    ) in str(err.value)
    assert "UNAVAILABLE" in str(err.value)


def test_without_creation_nothing_is_asked_before_a_tables_first_request() -> None:
    admin = FakeAdmin(api_exceptions.NotFound("no table"))
    known = tables(admin, None)
    known.start(TABLE)
    known.start(TableDestination.of("p", "inst", "other"))
    assert admin.gets == [] and admin.created == []


def test_with_creation_the_check_and_the_creation_stay_on_the_caller() -> None:
    admin = FakeAdmin(api_exceptions.NotFound("no table"))
    options = TableCreateOptions(column_families={"cf": 1})
    known = tables(admin, options)
    known.start(TABLE)
    assert admin.gets == [str(TABLE)] and len(admin.created) == 1
    known.start(TABLE)  # known now
    assert admin.gets == [str(TABLE)] and len(admin.created) == 1
