"""What a schema update adds, relaxes and refuses, and how it survives a concurrent update."""

from __future__ import annotations

from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud.bigquery import SchemaField, Table

from pyflink_gcp.bigquery import SchemaUpdate, SchemaUpdateError
from pyflink_gcp.bigquery.schema_update import merged_schema, update_schema

WHERE = "sink 's': table p.d.t"
V1 = [
    SchemaField("id", "INT64", mode="REQUIRED"),
    SchemaField("region", "STRING", mode="REQUIRED"),
    SchemaField("item", "RECORD", fields=[SchemaField("sku", "STRING")]),
]


def names(fields: list[SchemaField]) -> list[tuple[str, str, str]]:
    return [(f.name, f.field_type, f.mode) for f in fields]


def test_none_changes_nothing() -> None:
    assert (
        merged_schema(V1, [*V1, SchemaField("amount", "FLOAT64")], SchemaUpdate.NONE, WHERE) is None
    )


def test_new_nullable_and_repeated_columns_are_added_after_the_tables_own() -> None:
    v2 = [
        SchemaField("amount", "FLOAT64"),
        *V1,
        SchemaField("tags", "STRING", mode="REPEATED"),
    ]
    plan = merged_schema(V1, v2, SchemaUpdate.ADD_COLUMNS, WHERE)
    assert plan is not None
    fields, changes = plan
    assert names(fields) == [
        *names(V1),
        ("amount", "FLOAT64", "NULLABLE"),
        ("tags", "STRING", "REPEATED"),
    ]
    assert changes == ["added amount FLOAT64 NULLABLE", "added tags STRING REPEATED"]


def test_nested_columns_are_added_inside_their_record() -> None:
    v2 = [
        *V1[:2],
        SchemaField(
            "item", "RECORD", fields=[SchemaField("sku", "STRING"), SchemaField("qty", "INT64")]
        ),
    ]
    plan = merged_schema(V1, v2, SchemaUpdate.ADD_COLUMNS, WHERE)
    assert plan is not None
    fields, changes = plan
    assert [f.name for f in fields[2].fields] == ["sku", "qty"]
    assert changes == ["added item.qty INT64 NULLABLE"]


def test_the_same_schema_in_other_spellings_and_cases_is_no_change() -> None:
    same = [
        SchemaField("ID", "INTEGER", mode="REQUIRED"),
        SchemaField("region", "STRING", mode="REQUIRED"),
        SchemaField("item", "STRUCT", fields=[SchemaField("SKU", "STRING")]),
    ]
    assert merged_schema(V1, same, SchemaUpdate.ADD_AND_RELAX_COLUMNS, WHERE) is None
    # A column the serializer no longer names stays; a NULLABLE wish on a REQUIRED column is
    # no change without RELAX.
    assert (
        merged_schema(V1, [SchemaField("region", "STRING")], SchemaUpdate.ADD_COLUMNS, WHERE)
        is None
    )


def test_relax_turns_required_columns_nullable() -> None:
    plan = merged_schema(
        V1, [SchemaField("region", "STRING")], SchemaUpdate.ADD_AND_RELAX_COLUMNS, WHERE
    )
    assert plan is not None
    fields, changes = plan
    assert names(fields)[:2] == [("id", "INT64", "REQUIRED"), ("region", "STRING", "NULLABLE")]
    assert changes == ["relaxed region to NULLABLE"]


@pytest.mark.parametrize(
    ("wanted", "message"),
    [
        (
            SchemaField("amount", "FLOAT64", mode="REQUIRED"),
            "adds column amount as REQUIRED; BigQuery adds only NULLABLE or REPEATED",
        ),
        (
            SchemaField("id", "STRING", mode="REQUIRED"),
            "column id is INT64 in the table and STRING",
        ),
        (
            SchemaField("region", "STRING", mode="REPEATED"),
            "column region is REQUIRED in the table and REPEATED",
        ),
        (
            SchemaField("item", "RECORD", fields=[SchemaField("sku", "INT64")]),
            "column item.sku is STRING in the table and INT64",
        ),
    ],
)
def test_changes_bigquery_cannot_make_name_the_table_and_column(
    wanted: SchemaField, message: str
) -> None:
    with pytest.raises(SchemaUpdateError, match=f"^{WHERE}: .*{message}"):
        merged_schema(V1, [wanted], SchemaUpdate.ADD_AND_RELAX_COLUMNS, WHERE)


class FakeTables:
    """A table's schema and etag; ``patch`` answers 412 for a stale etag, as BigQuery does."""

    def __init__(self, fields: list[SchemaField]) -> None:
        self.fields = list(fields)
        self.etag = 1
        self.patches = 0

    def get(self) -> Table:
        table = Table("p.d.t", schema=self.fields)
        table._properties["etag"] = str(self.etag)
        return table

    def patch(self, table: Any) -> Table:
        if table.etag != str(self.etag):
            raise gexc.PreconditionFailed("etag mismatch")
        self.fields = list(table.schema)
        self.etag += 1
        self.patches += 1
        return self.get()


def test_a_lost_race_reads_the_table_again_and_makes_no_second_update() -> None:
    tables = FakeTables(V1)
    v2 = [*V1, SchemaField("amount", "FLOAT64")]
    # Two subtasks read the table before either updated it.
    first, second = tables.get(), tables.get()
    table, changes = update_schema(
        tables.get, tables.patch, first, v2, SchemaUpdate.ADD_COLUMNS, WHERE
    )
    assert changes == ["added amount FLOAT64 NULLABLE"] and "amount" in [
        f.name for f in table.schema
    ]
    table, changes = update_schema(
        tables.get, tables.patch, second, v2, SchemaUpdate.ADD_COLUMNS, WHERE
    )
    assert changes == [] and tables.patches == 1
    assert [f.name for f in table.schema] == ["id", "region", "item", "amount"]


def test_a_table_changing_under_every_attempt_is_an_error() -> None:
    class Busy(FakeTables):
        def patch(self, table: Any) -> Table:
            self.etag += 1  # someone else got there first, every time
            raise gexc.PreconditionFailed("etag mismatch")

    tables = Busy(V1)
    with pytest.raises(SchemaUpdateError, match="changed under 10 updates in a row"):
        update_schema(
            tables.get,
            tables.patch,
            tables.get(),
            [*V1, SchemaField("x", "STRING")],
            SchemaUpdate.ADD_COLUMNS,
            WHERE,
        )


def test_load_options_follow_the_mode() -> None:
    assert SchemaUpdate.NONE.load_options == []
    assert SchemaUpdate.ADD_COLUMNS.load_options == ["ALLOW_FIELD_ADDITION"]
    assert SchemaUpdate.ADD_AND_RELAX_COLUMNS.load_options == [
        "ALLOW_FIELD_ADDITION",
        "ALLOW_FIELD_RELAXATION",
    ]
