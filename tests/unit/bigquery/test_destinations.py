"""Table destinations: values named by their resource, validated when built."""

from __future__ import annotations

import pickle

import pytest

from pyflink_gcp.bigquery import TableDestination


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


def test_a_table_without_project_is_in_google_cloud_project(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "env-project")
    short = TableDestination.of("ds", "t")
    assert short == TableDestination.of("env-project", "ds", "t")
    assert TableDestination.from_table_id("ds.t") == short
    assert pickle.loads(pickle.dumps(short)) == short
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT")
    with pytest.raises(ValueError, match="GOOGLE_CLOUD_PROJECT is not set"):
        TableDestination.from_table_id("ds.t")
    with pytest.raises(TypeError, match=r"TableDestination.of\(dataset, table\)"):
        TableDestination.of("t")


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
