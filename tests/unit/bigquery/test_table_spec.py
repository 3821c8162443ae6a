"""The table spec a sink creates tables with: partitioning, clustering, labels, description and
KMS key, checked against BigQuery's rules, compared, pickled, and applied to a new table."""

from __future__ import annotations

from typing import Any

import pytest
from google.cloud.bigquery import (
    PartitionRange,
    RangePartitioning,
    SchemaField,
    Table,
    TimePartitioning,
)

from pyflink_gcp.bigquery import TableSchema
from pyflink_gcp.bigquery.table_spec import TableSchemaError
from pyflink_gcp.core import ConfigurationError

# -- the table spec: partitioning, clustering, labels, description, KMS key --------------------

SPEC_FIELDS = [
    SchemaField("id", "INT64", mode="REQUIRED"),
    SchemaField("ts", "TIMESTAMP"),
    SchemaField("day", "DATE"),
    SchemaField("at", "DATETIME"),
    SchemaField("region", "STRING"),
    SchemaField("score", "FLOAT64"),
    SchemaField("payload", "JSON"),
    SchemaField("tags", "STRING", mode="REPEATED"),
    SchemaField("legacy", "INTEGER"),
    SchemaField("info", "RECORD", fields=[SchemaField("ts", "TIMESTAMP")]),
]
KMS = "projects/p/locations/eu/keyRings/ring/cryptoKeys/key"


def day(field: str | None = "ts", **more: Any) -> TimePartitioning:
    return TimePartitioning(type_="DAY", field=field, **more)


def ranged(field: Any = "id", start: Any = 0, end: Any = 100, interval: Any = 10) -> Any:
    return RangePartitioning(PartitionRange(start=start, end=end, interval=interval), field=field)


def full(**changes: Any) -> TableSchema:
    settings: dict[str, Any] = {
        "primary_key": ["id"],
        "clustering_fields": ["region", "id"],
        "time_partitioning": day(expiration_ms=86_400_000),
        "require_partition_filter": True,
        "labels": {"region": "eu", "team": "orders"},
        "description": "Orders of one region",
        "kms_key_name": KMS,
        **changes,
    }
    return TableSchema.of(SPEC_FIELDS, **settings)


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        # Types.
        ({"time_partitioning": {"type": "DAY"}}, "time_partitioning is a google.cloud.bigquery"),
        ({"range_partitioning": "id:0:10:1"}, "range_partitioning is a google.cloud.bigquery"),
        ({"require_partition_filter": "yes", "time_partitioning": day()}, "bool, got 'yes'"),
        ({"labels": [("env", "prod")]}, "labels is a mapping of at most 64"),
        ({"labels": {"env": 1}}, "value 1 of key 'env' is no label value"),
        ({"description": 42}, "description is a str, got 42"),
        ({"kms_key_name": 7}, "kms_key_name is a Cloud KMS key"),
        ({"clustering_fields": "region"}, "clustering_fields is a sequence of column names"),
        ({"primary_key": [1]}, "primary_key is a sequence of column names, got [1]"),
        # Time partitioning.
        ({"time_partitioning": TimePartitioning(type_="WEEK")}, "type 'WEEK' is not one of DAY"),
        ({"time_partitioning": day("nope")}, "time_partitioning: 'nope' is not a field"),
        ({"time_partitioning": day("info.ts")}, "'info.ts' is not a field of the table schema"),
        ({"time_partitioning": day("region")}, "'region' is NULLABLE STRING; it must be a non-rep"),
        ({"time_partitioning": day("id")}, "column 'id' is REQUIRED INT64"),
        (
            {"time_partitioning": TimePartitioning(type_="HOUR", field="day")},
            "type HOUR cannot partition DATE column 'day'",
        ),
        ({"time_partitioning": day(expiration_ms=0)}, "expiration_ms '0' is no positive number"),
        ({"time_partitioning": day(expiration_ms=-5)}, "expiration_ms '-5' is no positive"),
        (
            {  # the deprecated place of the setting (built as parsed: no warning)
                "time_partitioning": TimePartitioning.from_api_repr(
                    {"type": "DAY", "requirePartitionFilter": True}
                )
            },
            "time_partitioning sets require_partition_filter",
        ),
        # Range partitioning.
        (
            {"range_partitioning": ranged("region")},
            "'region' is NULLABLE STRING; it must be a non-r",
        ),
        ({"range_partitioning": ranged("ts")}, "column 'ts' is NULLABLE TIMESTAMP"),
        ({"range_partitioning": ranged("nope")}, "range_partitioning: 'nope' is not a field"),
        ({"range_partitioning": ranged(start=10, end=10)}, "start=10, end=10, interval=10: the st"),
        ({"range_partitioning": ranged(interval=0)}, "interval=0: the start must be below"),
        ({"range_partitioning": ranged(end=None)}, "needs a field and a PartitionRange"),
        ({"range_partitioning": ranged(start="a")}, "needs a field and a PartitionRange"),
        ({"range_partitioning": ranged(field=None)}, "needs a field and a PartitionRange"),
        (
            {"range_partitioning": ranged(), "time_partitioning": day()},  # the second one
            "time_partitioning and range_partitioning are both set",
        ),
        # Require partition filter.
        ({"require_partition_filter": True}, "require_partition_filter=True needs time_partitio"),
        # Clustering.
        (
            {"clustering_fields": ["id", "ts", "day", "at", "region"]},
            "clusters on at most 4 columns, got ['id', 'ts', 'day', 'at', 'region']",
        ),
        ({"clustering_fields": ["tags"]}, "column 'tags' is REPEATED STRING"),
        ({"clustering_fields": ["payload"]}, "column 'payload' is NULLABLE JSON"),
        ({"clustering_fields": ["score"]}, "column 'score' is NULLABLE FLOAT64"),
        ({"clustering_fields": ["info"]}, "column 'info' is NULLABLE RECORD"),
        ({"clustering_fields": ["info.ts"]}, "clustering_fields: 'info.ts' is not a field"),
        # Labels.
        ({"labels": {"Env": "prod"}}, "key 'Env' is no label key"),
        ({"labels": {"1env": "prod"}}, "key '1env' is no label key"),
        ({"labels": {"": "prod"}}, "key '' is no label key"),
        ({"labels": {"k" * 64: "v"}}, f"key '{'k' * 64}' is no label key"),
        ({"labels": {"env": "Prod"}}, "value 'Prod' of key 'env' is no label value"),
        ({"labels": {"env": "a.b"}}, "value 'a.b' of key 'env' is no label value"),
        ({"labels": {"env": "v" * 64}}, "is no label value (0-63 lowercase letters"),
        ({"labels": {f"k{i}": "v" for i in range(65)}}, "labels is a mapping of at most 64"),
        # KMS key.
        ({"kms_key_name": "projects/p/keyRings/r/cryptoKeys/k"}, "kms_key_name is a Cloud KMS"),
        ({"kms_key_name": KMS + "/cryptoKeyVersions/1"}, "got 'projects/p/locations/eu/"),
    ],
)
def test_every_setting_is_checked_against_bigquerys_rules_naming_it_and_its_value(
    settings: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(TableSchemaError) as error:
        TableSchema.of(SPEC_FIELDS, **settings)
    assert fragment in str(error.value)
    assert isinstance(error.value, ConfigurationError)
    # The setting at fault comes first: a caller naming it otherwise (the SQL options) reads it.
    assert error.value.setting == next(iter(settings))


def test_what_bigquery_accepts_is_accepted() -> None:
    for unit in ("DAY", "HOUR", "MONTH", "YEAR"):
        TableSchema.of(SPEC_FIELDS, time_partitioning=TimePartitioning(type_=unit, field="ts"))
        TableSchema.of(SPEC_FIELDS, time_partitioning=TimePartitioning(type_=unit, field="at"))
        TableSchema.of(SPEC_FIELDS, time_partitioning=TimePartitioning(type_=unit))  # ingestion
    for unit in ("DAY", "MONTH", "YEAR"):
        TableSchema.of(SPEC_FIELDS, time_partitioning=TimePartitioning(type_=unit, field="day"))
    # Names are case-insensitive; legacy type names are their standard ones.
    TableSchema.of(SPEC_FIELDS, time_partitioning=day("TS"), clustering_fields=["REGION"])
    TableSchema.of(SPEC_FIELDS, range_partitioning=ranged("legacy", start=-100, end=-10))
    TableSchema.of(
        SPEC_FIELDS,
        range_partitioning=ranged(),
        require_partition_filter=True,
        clustering_fields=["id", "ts", "day", "region"],
    )
    # require_partition_filter=False says nothing a table without partitions cannot do.
    assert (
        TableSchema.of(SPEC_FIELDS, require_partition_filter=False).require_partition_filter
        is False
    )
    labels = {
        "a": "",
        "k" * 63: "v" * 63,
        "env-1_x": "0-9_a-z",
        "région": "été",
        "東京": "大阪",
        **{f"n{i}": "" for i in range(59)},
    }
    assert len(labels) == 64
    assert TableSchema.of(SPEC_FIELDS, labels=labels).labels == labels
    TableSchema.of(SPEC_FIELDS, description="", kms_key_name=KMS)


def test_equality_and_hash_cover_every_setting_and_partitionings_compare_by_value() -> None:
    schema = full()
    assert schema == full() and hash(schema) == hash(full())
    assert schema == full(labels={"team": "orders", "region": "eu"})  # order of labels aside
    assert schema == full(time_partitioning=day(expiration_ms=86_400_000))  # another instance
    by_range = full(time_partitioning=None, range_partitioning=ranged())
    assert by_range == full(time_partitioning=None, range_partitioning=ranged())
    assert hash(by_range) == hash(full(time_partitioning=None, range_partitioning=ranged()))
    others = [
        TableSchema.of(SPEC_FIELDS),
        full(primary_key=None),
        full(clustering_fields=["region"]),
        full(time_partitioning=day(expiration_ms=1)),
        full(time_partitioning=TimePartitioning(type_="HOUR", field="ts")),
        full(time_partitioning=day(None)),
        full(time_partitioning=None, range_partitioning=ranged()),
        full(require_partition_filter=False),
        full(labels={"region": "us", "team": "orders"}),
        full(labels=None),
        full(description="Other"),
        full(kms_key_name=KMS[:-3] + "other"),
    ]
    for other in others:
        assert other != schema, other
    assert len({schema, *others}) == len(others) + 1
    for change in ({"start": 1}, {"end": 99}, {"interval": 5}, {"field": "legacy"}):
        assert full(time_partitioning=None, range_partitioning=ranged(**change)) != by_range
    assert schema != "TableSchema"


def test_a_full_schema_survives_pickling_as_the_sink_ships_it_to_the_workers() -> None:
    import pickle

    import cloudpickle

    for schema in (full(), full(time_partitioning=None, range_partitioning=ranged())):
        for copy in (
            pickle.loads(pickle.dumps(schema)),
            cloudpickle.loads(cloudpickle.dumps(schema)),
        ):
            assert copy == schema and hash(copy) == hash(schema)
            assert copy.labels == schema.labels
            assert repr(copy) == repr(schema)


def test_the_schema_cannot_change_under_the_tables_that_share_it() -> None:
    partitioning = day(expiration_ms=1000)
    labels = {"env": "prod"}
    schema = TableSchema.of(SPEC_FIELDS, time_partitioning=partitioning, labels=labels)
    partitioning.field = "at"
    labels["env"] = "dev"
    schema.labels["env"] = "dev"
    handed_out = schema.time_partitioning
    assert handed_out is not None
    handed_out.expiration_ms = 5
    assert schema.time_partitioning is not None
    assert schema.time_partitioning.to_api_repr() == day(expiration_ms=1000).to_api_repr()
    assert schema.labels == {"env": "prod"}
    assert schema.range_partitioning is None


def test_repr_shows_the_settings_that_are_set() -> None:
    assert repr(TableSchema.of([("id", "INT64")])) == "TableSchema([id INT64])"
    text = repr(full())
    for part in (
        "primary_key=['id']",
        "clustering_fields=['region', 'id']",
        "time_partitioning=TimePartitioning(expiration_ms=86400000,field='ts',type_='DAY')",
        "require_partition_filter=True",
        "labels={'region': 'eu', 'team': 'orders'}",
        "description='Orders of one region'",
        f"kms_key_name='{KMS}'",
    ):
        assert part in text
    assert "range_partitioning=RangePartitioning(field='id'" in repr(
        full(time_partitioning=None, range_partitioning=ranged())
    )


def test_apply_to_sets_every_setting_on_the_table_to_create() -> None:
    table = Table("p.d.t")
    full().apply_to(table)
    resource = table.to_api_repr()
    assert [f["name"] for f in resource["schema"]["fields"]] == [f.name for f in SPEC_FIELDS]
    assert resource["tableConstraints"]["primaryKey"] == {"columns": ["id"]}
    assert resource["clustering"] == {"fields": ["region", "id"]}
    assert resource["timePartitioning"] == {
        "type": "DAY",
        "field": "ts",
        "expirationMs": "86400000",
    }
    assert "rangePartitioning" not in resource
    assert resource["requirePartitionFilter"] is True
    assert resource["labels"] == {"region": "eu", "team": "orders"}
    assert resource["description"] == "Orders of one region"
    assert resource["encryptionConfiguration"] == {"kmsKeyName": KMS}

    ranged_table = Table("p.d.r")
    full(time_partitioning=None, range_partitioning=ranged()).apply_to(ranged_table)
    resource = ranged_table.to_api_repr()
    assert resource["rangePartitioning"] == {
        "field": "id",
        "range": {"start": "0", "end": "100", "interval": "10"},
    }
    assert "timePartitioning" not in resource

    plain = Table("p.d.plain")
    TableSchema.of([("id", "INT64")]).apply_to(plain)
    resource = plain.to_api_repr()
    assert set(resource) - {"tableReference", "labels"} == {"schema"}
    assert resource.get("labels", {}) == {}
