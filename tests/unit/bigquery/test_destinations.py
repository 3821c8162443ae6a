"""Table destinations: values named by their resource, validated when built by BigQuery's table
id rule, the one routing sanitizes and checks template names with."""

from __future__ import annotations

import pickle

import pytest

from pyflink_gcp.bigquery import TableDestination
from pyflink_gcp.bigquery.destinations import TABLE_ID
from pyflink_gcp.core.types import WriterContext
from pyflink_gcp.routing import bigquery_tables, names, route_by_template


def test_destinations_are_values_named_by_their_resource() -> None:
    a = TableDestination.of("p", "ds", "orders_20240101")
    assert a == TableDestination.from_table_id("p.ds.orders_20240101")
    assert hash(a) == hash(TableDestination.of("p", "ds", "orders_20240101"))
    assert str(a) == "projects/p/datasets/ds/tables/orders_20240101"
    assert (a.project, a.dataset, a.table, a.table_id) == (
        "p",
        "ds",
        "orders_20240101",
        "p.ds.orders_20240101",
    )
    assert a.default_stream == str(a) + "/streams/_default"
    assert pickle.loads(pickle.dumps(a)) == a
    with pytest.raises(AttributeError):
        a.x = 1  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("p", "my-dataset", "t"), "invalid BigQuery dataset id"),
        (("p", "d", "t$2024-01-01"), "invalid partition decorator"),
        (("p", "d", "t$"), "invalid partition decorator"),
        (("p", "d", "$20240101"), "invalid BigQuery table id"),
        (("p", "d", ""), "invalid BigQuery table id"),
        (("", "d", "t"), "invalid BigQuery project id"),
    ],
)
def test_impossible_table_names_fail_when_built(args: tuple[str, str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TableDestination.of(*args)


def test_a_table_id_has_two_or_three_parts() -> None:
    with pytest.raises(ValueError, match=r"\[project.\]dataset.table"):
        TableDestination.from_table_id("t")
    with pytest.raises(ValueError, match=r"\[project.\]dataset.table"):
        TableDestination.from_table_id("a.b.c.d")


@pytest.mark.parametrize(
    "partition", ["2024", "202401", "20240101", "2024010113", "-40", "__UNPARTITIONED__"]
)
def test_a_partition_decorator_names_a_partition_of_its_base_table(partition: str) -> None:
    t = TableDestination.of("p", "d", f"orders${partition}")
    assert t.partition == partition
    assert t.table_id == f"p.d.orders${partition}"
    assert t.base == TableDestination.of("p", "d", "orders")
    base = t.base
    assert base.partition is None and base.base is base


def test_a_table_id_without_project_is_in_google_cloud_project(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "env-project")
    assert TableDestination.from_table_id("ds.t") == TableDestination.of("env-project", "ds", "t")


@pytest.mark.parametrize("table", ["orders 2024", "étudiant-01", "ग्राहक", "00_お客様", "t" * 1024])
def test_table_ids_follow_bigquerys_rule_as_routing_does(table: str) -> None:
    """BigQuery's own examples: Unicode letters, marks, numbers, connectors, dashes and spaces.
    The destination type and routing's rule are one rule and agree."""
    assert TABLE_ID is names.bigquery_table_id
    assert TABLE_ID.validate(table) is None
    assert TableDestination.of("p", "d", table).table == table


@pytest.mark.parametrize(
    ("table", "reason"),
    [
        ("orders:2024", "contains ':' at position 6"),
        ("é" * 600, "has 1200 UTF-8 bytes"),
        ("t" * 1025, "has 1025 characters"),
    ],
)
def test_a_table_id_routing_refuses_the_destination_type_refuses_with_the_same_reason(
    table: str, reason: str
) -> None:
    assert (names.bigquery_table_id.validate(table) or "").startswith(reason)
    with pytest.raises(ValueError, match=f"invalid BigQuery table id .*{reason}"):
        TableDestination.of("p", "d", table)


def test_orders_2024_is_routed_by_a_template_and_built_by_the_type_alike() -> None:
    expected = TableDestination.of("p", "d", "orders 2024")
    constant = route_by_template("orders 2024", bigquery_tables("p", "d"))
    assert constant({"id": 1}, WriterContext()) == expected
    by_year = route_by_template("orders {year}", bigquery_tables("p", "d"), unroutable=True)
    assert by_year({"year": 2024}, WriterContext()) == expected
    # A value is checked, not changed: BigQuery allows the space.
    assert by_year({"year": "20 24"}, WriterContext()).table == "orders 20 24"
    # Sanitized on request (the space becomes '_'); literal text keeps what BigQuery allows.
    sanitized = route_by_template(
        "orders {year}", bigquery_tables("p", "d", sanitize=True), unroutable=True
    )
    assert sanitized({"year": "20 24"}, WriterContext()).table == "orders 20_24"
