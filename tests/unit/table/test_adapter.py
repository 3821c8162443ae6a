"""What every connector's adapter shares that is not covered with a connector: the ``fields.*``
options, as a field selection on the builder and as the columns each connector writes."""

from __future__ import annotations

import pytest

from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.fields import FieldSelection, SelectedFields
from pyflink_gcp.spanner import Mutation
from pyflink_gcp.table import bigquery, bigtable, spanner
from pyflink_gcp.table.adapter import field_selection, written_columns
from pyflink_gcp.table.parsing import parse
from pyflink_gcp.table.rows import Column, DeletedRow, TableInfo


def t(root: str, **more) -> dict:
    return {"root": root, "nullable": True, "sql": root, **more}


ITEM = t("ROW", fields=[{"name": "sku", "type": t("VARCHAR")}, {"name": "n", "type": t("INTEGER")}])
TABLE = TableInfo(
    "orders",
    (
        Column("tenant", t("VARCHAR")),
        Column("id", t("BIGINT")),
        Column("amount", t("DOUBLE")),
        Column("item", ITEM),
    ),
)
BIGQUERY = {"project": "p", "dataset": "shop", "table": "orders_{tenant}"}
BIGTABLE = {"project": "p", "instance": "inst", "table": "orders_{tenant}", "row-key": "id"}
SPANNER = {"project": "p", "instance": "inst", "database": "db", "table": "Orders_{tenant}"}


def values(identifier: str, raw: dict, table: TableInfo = TABLE, **options: str) -> dict:
    return parse(identifier, {**raw, **options}, table.names)


def test_no_option_selects_nothing_and_each_maps_to_its_kind():
    assert field_selection("gcp-bigquery", values("gcp-bigquery", BIGQUERY), TABLE) is None
    drop = values("gcp-bigquery", BIGQUERY, **{"fields.drop": "tenant, amount"})
    assert field_selection("gcp-bigquery", drop, TABLE) == FieldSelection.drop(["tenant", "amount"])
    keep = values("gcp-spanner", SPANNER, **{"fields.keep": "id"})
    assert field_selection("gcp-spanner", keep, TABLE) == FieldSelection.keep(["id"])
    only = values("gcp-bigquery", BIGQUERY, **{"fields.only": "item"})
    assert field_selection("gcp-bigquery", only, TABLE) == FieldSelection.only("item")


def test_two_of_the_options_are_refused_naming_the_sink_and_both():
    both = values("gcp-bigquery", BIGQUERY, **{"fields.drop": "tenant", "fields.keep": "id"})
    with pytest.raises(
        ConfigurationError,
        match="sink 'orders': options 'fields.drop' and 'fields.keep' of connector "
        "'gcp-bigquery' exclude each other",
    ):
        field_selection("gcp-bigquery", both, TABLE)


def test_only_takes_a_row_column_and_no_table_with_a_primary_key():
    scalar = values("gcp-bigquery", BIGQUERY, **{"fields.only": "amount"})
    with pytest.raises(ConfigurationError, match="names column amount of type DOUBLE; it must be"):
        field_selection("gcp-bigquery", scalar, TABLE)
    keyed = TableInfo("orders", TABLE.columns, primary_key=("id",))
    only = values("gcp-bigquery", BIGQUERY, keyed, **{"fields.only": "item"})
    with pytest.raises(ConfigurationError, match="cannot apply to a table with a PRIMARY KEY"):
        field_selection("gcp-bigquery", only, keyed)


def test_a_selection_that_leaves_out_a_primary_key_column_is_refused():
    keyed = TableInfo("orders", TABLE.columns, primary_key=("tenant", "id"))
    drop = values("gcp-spanner", SPANNER, keyed, **{"fields.drop": "tenant"})
    with pytest.raises(ConfigurationError, match="leaves out the primary key column.*tenant"):
        field_selection("gcp-spanner", drop, keyed)


def test_written_columns_follow_the_selection():
    names = [c.name for c in written_columns(FieldSelection.drop(["tenant"]), TABLE)]
    assert names == ["id", "amount", "item"]
    names = [c.name for c in written_columns(FieldSelection.keep(["item", "id"]), TABLE)]
    assert names == ["id", "item"]
    only = written_columns(FieldSelection.only("item"), TABLE)
    assert [(c.name, c.root) for c in only] == [("sku", "VARCHAR"), ("n", "INTEGER")]
    assert written_columns(None, TABLE) == TABLE.columns


def test_bigquery_routes_on_the_whole_row_and_creates_tables_without_dropped_columns():
    sink = bigquery.build_sink(values("gcp-bigquery", BIGQUERY, **{"fields.drop": "tenant"}), TABLE)
    config = sink._sink_config()
    row = {"tenant": "acme", "id": 1, "amount": 2.5, "item": {"sku": "a", "n": 1}}
    assert config.resolver.resolve(row, None).table == "orders_acme"
    assert isinstance(config.serializer, SelectedFields)
    assert config.serializer(row, None) == {"id": 1, "amount": 2.5, "item": {"sku": "a", "n": 1}}
    schema = config.factory.serializer.schema(None)
    assert [f.name for f in schema.fields] == ["id", "amount", "item"]


def test_bigquery_only_creates_tables_of_the_row_columns_fields():
    sink = bigquery.build_sink(values("gcp-bigquery", BIGQUERY, **{"fields.only": "item"}), TABLE)
    config = sink._sink_config()
    row = {"tenant": "acme", "id": 1, "amount": 2.5, "item": {"sku": "a", "n": 1}}
    assert config.serializer(row, None) == {"sku": "a", "n": 1}
    assert [f.name for f in config.factory.serializer.schema(None).fields] == ["sku", "n"]


def test_bigquery_changelog_rows_keep_their_kind_under_drop():
    keyed = TableInfo("orders", TABLE.columns, primary_key=("id",))
    raw = values("gcp-bigquery", BIGQUERY, keyed, **{"fields.drop": "tenant"})
    serialize = bigquery.build_sink(raw, keyed)._sink_config().serializer
    deleted = serialize(DeletedRow(tenant="acme", id=1, amount=None, item=None), None)
    assert deleted == {"id": 1, "amount": None, "item": None, "_CHANGE_TYPE": "DELETE"}


def test_bigtable_writes_cells_of_the_kept_columns_only():
    raw = values(
        "gcp-bigtable", {**BIGTABLE, "column-family": "cf"}, **{"fields.keep": "id,amount"}
    )
    serialize = bigtable.build_sink(raw, TABLE)._sink_config().serializer
    entry = serialize({"tenant": "acme", "id": 1, "amount": 2.5, "item": {"sku": "a"}}, None)
    assert entry.row_key == b"1"
    assert [(m.family, m.qualifier, m.new_value) for m in entry.mutations] == [
        ("cf", b"amount", b"2.5")
    ]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("fields.drop", "id", "leaves out the row-key column id, .* do not drop it"),
        ("fields.keep", "amount", "leaves out the row-key column id, .* keep it"),
    ],
)
def test_bigtable_refuses_a_selection_without_the_row_key(option, value, message):
    raw = values("gcp-bigtable", {**BIGTABLE, "column-family": "cf"}, **{option: value})
    with pytest.raises(ConfigurationError, match=f"sink 'orders': option '{option}' .*{message}"):
        bigtable.build_sink(raw, TABLE)


def test_spanner_renders_the_table_from_the_whole_row_and_writes_the_selected_columns():
    raw = values("gcp-spanner", SPANNER, **{"fields.drop": "tenant,item"})
    serialize = spanner.build_sink(raw, TABLE)._sink_config().serializer
    row = {"tenant": "acme", "id": 1, "amount": 2.5, "item": None}
    assert serialize(row, None) == Mutation.insert_or_update(
        "Orders_acme", {"id": 1, "amount": 2.5}
    )
