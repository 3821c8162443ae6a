"""gcp-bigquery's adapter: the schema of created tables from the DDL's columns and their spec
from the ``table.*`` options, MAP columns as repeated records, and rows whose template names no
table made unroutable."""

from __future__ import annotations

import pytest

from pyflink_gcp.bigquery import (
    MissingValues,
    SchemaUpdate,
    TableDestination,
    TableSchema,
    UnknownFields,
)
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


# -- the table.* options: the spec of the tables the sink creates --------------------------------

SPEC = TableInfo(
    "events_out",
    (
        Column("event_id", t("BIGINT", False)),
        Column("region", t("VARCHAR")),
        Column("user_id", t("VARCHAR")),
        Column("event_time", t("TIMESTAMP_WITHOUT_TIME_ZONE", precision=6), micros=True),
        Column("day", t("DATE")),
        Column("at", t("TIME_WITHOUT_TIME_ZONE", precision=0)),
        Column("tags", t("ARRAY", element=t("VARCHAR"))),
    ),
)
REQUIRED = {"project": "p", "dataset": "d", "table": "events_{region}"}
KMS = "projects/p/locations/eu/keyRings/ring/cryptoKeys/key"


def spec_schema(**options: str) -> TableSchema:
    """The schema the built sink's serializer gives a created table."""
    values = parse("gcp-bigquery", {**REQUIRED, **options}, SPEC.names)
    sink = build_sink(values, SPEC)
    return sink._sink_config().factory.serializer.schema(TableDestination.of("p", "d", "x"))


def test_table_options_become_the_created_tables_spec():
    schema = spec_schema(
        **{
            "table.partitioning.type": "day",
            "table.partitioning.field": "event_time",
            "table.partitioning.expiration": "90d",
            "table.partitioning.require-filter": "true",
            "table.clustering-fields": "region, user_id",
            "table.labels": "team:analytics, env:prod,empty:",
            "table.description": "Events of one region",
            "table.kms-key-name": KMS,
        }
    )
    assert schema.time_partitioning is not None
    assert schema.time_partitioning.to_api_repr() == {
        "type": "DAY",
        "field": "event_time",
        "expirationMs": str(90 * 86_400_000),
    }
    assert schema.range_partitioning is None
    assert schema.require_partition_filter is True
    assert schema.clustering_fields == ("region", "user_id")
    assert schema.labels == {"team": "analytics", "env": "prod", "empty": ""}
    assert schema.description == "Events of one region"
    assert schema.kms_key_name == KMS
    assert [f.name for f in schema.fields] == list(SPEC.names)


def test_without_table_options_the_created_tables_have_only_their_columns():
    schema = spec_schema()
    assert schema == TableSchema.of(table_schema(SPEC.columns).fields)
    assert (schema.time_partitioning, schema.range_partitioning, schema.labels) == (None, None, {})


def test_ingestion_time_hourly_and_integer_range_partitioning():
    hourly = spec_schema(**{"table.partitioning.type": "hour"})
    assert hourly.time_partitioning is not None
    assert hourly.time_partitioning.to_api_repr() == {"type": "HOUR"}
    by_range = spec_schema(
        **{
            "table.range-partitioning.field": "event_id",
            "table.range-partitioning.start": "-1000",
            "table.range-partitioning.end": "1000000",
            "table.range-partitioning.interval": "1000",
            "table.partitioning.require-filter": "false",
        }
    )
    assert by_range.time_partitioning is None
    assert by_range.range_partitioning is not None
    assert by_range.range_partitioning.field == "event_id"
    bounds = by_range.range_partitioning.range_
    assert (bounds.start, bounds.end, bounds.interval) == (-1000, 1_000_000, 1000)
    assert by_range.require_partition_filter is False


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"table.partitioning.type": "hour", "table.partitioning.field": "day"},
            "Invalid table options of connector 'gcp-bigquery': 'table.partitioning.type' = "
            "'hour', 'table.partitioning.field' = 'day': time_partitioning type HOUR cannot "
            "partition DATE column 'day'",
        ),
        (
            {"table.partitioning.type": "day", "table.partitioning.field": "at"},
            "'table.partitioning.field' = 'at': time_partitioning: column 'at' is NULLABLE TIME",
        ),
        (
            {"table.partitioning.field": "event_time"},
            "Option 'table.partitioning.type' of connector 'gcp-bigquery' is required when "
            "'table.partitioning.field' is set (got 'event_time').",
        ),
        (
            {"table.partitioning.expiration": "30d"},
            "Option 'table.partitioning.type' of connector 'gcp-bigquery' is required when "
            "'table.partitioning.expiration' is set (got '2592000000ms').",
        ),
        (
            {"table.partitioning.require-filter": "true"},
            "'table.partitioning.require-filter' = 'true': require_partition_filter=True needs",
        ),
        (
            {"table.range-partitioning.field": "event_id", "table.range-partitioning.start": "0"},
            "Option 'table.range-partitioning.end' of connector 'gcp-bigquery' is required when "
            "'table.range-partitioning.field' is set (got 'event_id').",
        ),
        (
            {
                "table.range-partitioning.field": "region",
                "table.range-partitioning.start": "0",
                "table.range-partitioning.end": "10",
                "table.range-partitioning.interval": "1",
            },
            "'table.range-partitioning.field' = 'region', 'table.range-partitioning.start' = '0', "
            "'table.range-partitioning.end' = '10', 'table.range-partitioning.interval' = '1': "
            "range_partitioning: column 'region' is NULLABLE STRING",
        ),
        (
            {
                "table.range-partitioning.field": "event_id",
                "table.range-partitioning.start": "10",
                "table.range-partitioning.end": "0",
                "table.range-partitioning.interval": "1",
            },
            "range_partitioning start=10, end=0, interval=1: the start must be below the end",
        ),
        (
            {
                "table.partitioning.type": "day",
                "table.range-partitioning.field": "event_id",
                "table.range-partitioning.start": "0",
                "table.range-partitioning.end": "10",
                "table.range-partitioning.interval": "1",
            },
            "Options 'table.partitioning.type' ('day') and 'table.range-partitioning.field' "
            "('event_id') of connector 'gcp-bigquery' exclude each other",
        ),
        (
            {"table.clustering-fields": "event_id,region,user_id,event_time,day"},
            "'table.clustering-fields' = 'event_id,region,user_id,event_time,day': "
            "clustering_fields: BigQuery clusters on at most 4 columns",
        ),
        (
            {"table.clustering-fields": "tags"},
            "'table.clustering-fields' = 'tags': clustering_fields: column 'tags' is REPEATED",
        ),
        (
            {"table.labels": "Team:analytics"},
            "'table.labels' = 'Team:analytics': labels: key 'Team' is no label key",
        ),
        (
            {"table.labels": "team"},
            "Invalid value for option 'table.labels' of connector 'gcp-bigquery': expected "
            "key:value pairs separated by commas, each key once ('team' has no ':'), got 'team'.",
        ),
        (
            {"table.labels": "team:a,team:b"},
            "('team:b' has a duplicate key), got 'team:a,team:b'.",
        ),
        (
            {"table.kms-key-name": "my-key"},
            "'table.kms-key-name' = 'my-key': kms_key_name is a Cloud KMS key",
        ),
    ],
)
def test_bad_table_options_name_the_options_and_their_values(options, message):
    with pytest.raises(ConfigurationError) as error:
        spec_schema(**options)
    assert str(error.value).startswith("sink 'events_out': ")
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("table.partitioning.type", "week", "one of day, hour, month, year"),
        ("table.partitioning.field", "nope", "a column of the table"),
        ("table.partitioning.expiration", "0ms", "a duration such as 500ms"),
        ("table.range-partitioning.interval", "0", "an integer >= 1"),
        ("table.range-partitioning.start", "x", "an integer"),
        ("table.clustering-fields", "region,nope", "a column of the table"),
        ("table.partitioning.require-filter", "yes", "true or false"),
    ],
)
def test_table_options_of_a_bad_kind_fail_when_parsed_as_in_java(key, value, expected):
    from pyflink_gcp.table.option_model import OptionError

    with pytest.raises(OptionError, match=f"Invalid value for option '{key}'.*expected {expected}"):
        parse("gcp-bigquery", {**REQUIRED, key: value}, SPEC.names)


def test_schema_update_unknown_fields_and_missing_values_reach_the_writer_options():
    default = _sink_options({})
    assert (default.schema_update, default.unknown_fields, default.missing_values) == (
        SchemaUpdate.NONE,
        UnknownFields.FAIL,
        MissingValues.NULL,
    )
    options = _sink_options(
        {
            "sink.schema-update": "add-and-relax-columns",
            "sink.unknown-fields": "failure-handler",
            "sink.missing-values": "default-value",
            "sink.buffer-flush.max-rows": "10",
        }
    )
    assert (options.schema_update, options.unknown_fields, options.missing_values) == (
        SchemaUpdate.ADD_AND_RELAX_COLUMNS,
        UnknownFields.FAILURE_HANDLER,
        MissingValues.DEFAULT_VALUE,
    )
    assert options.max_buffered_records == 10  # the other writer options stay


def _sink_options(options):
    values = parse("gcp-bigquery", {**REQUIRED, **options}, SPEC.names)
    return build_sink(values, SPEC)._sink_config().factory.options
