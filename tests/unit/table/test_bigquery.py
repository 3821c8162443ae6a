"""gcp-bigquery's adapter: the schema of created tables from the DDL's columns, MAP columns as
repeated records, and rows whose template names no table made unroutable."""

from __future__ import annotations

import pytest

from pyflink_gcp.bigquery import TableDestination
from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.options import CreateDisposition
from pyflink_gcp.core.types import UnroutableRecord
from pyflink_gcp.table.bigquery import MapEntries, build_sink, table_schema
from pyflink_gcp.table.parsing import parse
from pyflink_gcp.table.rows import Column, TableInfo


def t(root: str, nullable: bool = True, **more) -> dict:
    return {"root": root, "nullable": nullable, "sql": root, **more}


COLUMNS = (
    Column("id", t("BIGINT", False)),
    Column("small", t("SMALLINT")),
    Column("name", t("VARCHAR")),
    Column("code", t("CHAR")),
    Column("ok", t("BOOLEAN")),
    Column("raw", t("VARBINARY")),
    Column("ratio", t("DOUBLE")),
    Column("price", t("DECIMAL", precision=12, scale=2)),
    Column("huge", t("DECIMAL", precision=38, scale=10)),
    Column("day", t("DATE")),
    Column("at", t("TIME_WITHOUT_TIME_ZONE", precision=0)),
    Column("ts", t("TIMESTAMP_WITHOUT_TIME_ZONE", precision=6), micros=True),
    Column("ltz", t("TIMESTAMP_WITH_LOCAL_TIME_ZONE", precision=3)),
    Column("tags", t("ARRAY", element=t("VARCHAR"))),
    Column("info", t("ROW", fields=[{"name": "a", "type": t("INTEGER")}])),
    Column("extra", t("MAP", key=t("VARCHAR", False), value=t("BIGINT"))),
)


def test_every_supported_sql_type_has_its_bigquery_column():
    schema = table_schema(COLUMNS)
    got = [(f.name, f.field_type, f.mode) for f in schema.fields]
    assert got == [
        ("id", "INT64", "REQUIRED"),
        ("small", "INT64", "NULLABLE"),
        ("name", "STRING", "NULLABLE"),
        ("code", "STRING", "NULLABLE"),
        ("ok", "BOOL", "NULLABLE"),
        ("raw", "BYTES", "NULLABLE"),
        ("ratio", "FLOAT64", "NULLABLE"),
        ("price", "NUMERIC", "NULLABLE"),
        ("huge", "BIGNUMERIC", "NULLABLE"),
        ("day", "DATE", "NULLABLE"),
        ("at", "TIME", "NULLABLE"),
        ("ts", "TIMESTAMP", "NULLABLE"),
        ("ltz", "TIMESTAMP", "NULLABLE"),
        ("tags", "STRING", "REPEATED"),
        ("info", "RECORD", "NULLABLE"),
        ("extra", "RECORD", "REPEATED"),
    ]
    info, extra = schema.fields[-2], schema.fields[-1]
    assert [(f.name, f.field_type) for f in info.fields] == [("a", "INT64")]
    assert [(f.name, f.field_type, f.mode) for f in extra.fields] == [
        ("key", "STRING", "REQUIRED"),
        ("value", "INT64", "NULLABLE"),
    ]


@pytest.mark.parametrize(
    "type_",
    [t("INTERVAL_DAY_TIME"), t("ARRAY", element=t("ARRAY", element=t("INTEGER"))), t("MULTISET")],
)
def test_types_without_a_bigquery_column_are_refused(type_):
    with pytest.raises(ConfigurationError, match=r"column c of type .* has no BigQuery column"):
        table_schema((Column("c", type_),))


def test_maps_become_repeated_key_value_records_nested_too():
    columns = (
        Column("m", t("MAP", key=t("VARCHAR"), value=t("BIGINT"))),
        Column(
            "r",
            t(
                "ROW",
                fields=[{"name": "m", "type": t("MAP", key=t("INTEGER"), value=t("VARCHAR"))}],
            ),
        ),
        Column("x", t("BIGINT")),
    )
    to_row = MapEntries(columns)
    assert [name for name, _ in to_row.columns] == ["m", "r"]
    row = to_row({"m": {"a": 1}, "r": {"m": {2: "b"}}, "x": 3}, None)
    assert row == {"m": [{"key": "a", "value": 1}], "r": {"m": [{"key": 2, "value": "b"}]}, "x": 3}
    assert to_row({"m": None, "r": None, "x": 3}, None) == {"m": None, "r": None, "x": 3}


def test_tables_from_the_template_and_unroutable_rows_when_it_renders_none():
    table = TableInfo("orders", (Column("tenant", t("VARCHAR")), Column("id", t("BIGINT"))))
    values = parse(
        "gcp-bigquery",
        {"project": "p", "dataset": "shop", "table": "orders_{tenant}"},
        table.names,
    )
    sink = build_sink(values, table)
    config = sink._sink_config()
    assert config.factory.create_disposition is CreateDisposition.CREATE_IF_NEEDED
    resolver = config.resolver
    assert resolver.resolve({"tenant": "acme", "id": 1}, None) == TableDestination.of(
        "p", "shop", "orders_acme"
    )
    unroutable = resolver.resolve({"tenant": None, "id": 2}, None)
    assert isinstance(unroutable, UnroutableRecord)
    assert unroutable.payload == b'{"tenant":null,"id":2}'
    assert "the value is missing (None)" in unroutable.reason


def test_a_table_with_a_primary_key_sends_cdc_rows_in_per_table_order():
    from pyflink_gcp.bigquery import OrderingMode
    from pyflink_gcp.table.rows import DeletedRow

    table = TableInfo("cdc", (COLUMNS[0], COLUMNS[2]), primary_key=("id",))
    raw = {"project": "p", "dataset": "d", "table": "t"}
    sink = build_sink(parse("gcp-bigquery", raw, table.names), table)
    factory = sink._sink_config().factory
    serializer = factory.serializer
    assert serializer.schema(None).primary_key == ("id",)
    upsert = serializer.serialize({"id": 1, "name": "a"}, None)
    delete = serializer.serialize(DeletedRow(id=1, name="a"), None)
    assert upsert == {"id": 1, "name": "a", "_CHANGE_TYPE": "UPSERT"}
    assert delete == {"id": 1, "name": "a", "_CHANGE_TYPE": "DELETE"}
    assert factory.ordering is OrderingMode.PER_TABLE
