"""Serializers and table schemas: the package's TableSchema or the client library's SchemaField
list, converted once; row functions of one or two arguments; dead-letter payloads."""

from __future__ import annotations

from typing import Any

import pytest
from google.cloud.bigquery import (
    SchemaField,
)

from pyflink_gcp.bigquery import BigQuerySerializer, TableDestination, TableSchema
from pyflink_gcp.bigquery.serialization import (
    as_serializer,
    as_table_schema,
    has_schema,
    row_payload,
)
from pyflink_gcp.core import ConfigurationError
from pyflink_gcp.core.functions import RecordOnly

DEST = TableDestination.of("p", "d", "t")
NESTED = [
    SchemaField("id", "INT64", mode="REQUIRED"),
    SchemaField(
        "customer",
        "RECORD",
        mode="NULLABLE",
        fields=[
            SchemaField("name", "STRING", mode="REQUIRED"),
            SchemaField("emails", "STRING", mode="REPEATED"),
            SchemaField("address", "RECORD", fields=[SchemaField("city", "STRING")]),
        ],
    ),
    SchemaField("lines", "RECORD", mode="REPEATED", fields=[SchemaField("sku", "STRING")]),
]


def test_table_schema_checks_its_keys() -> None:
    with pytest.raises(ConfigurationError, match="'nope' is not a field"):
        TableSchema.of([("id", "INT64")], primary_key=["nope"])
    with pytest.raises(ConfigurationError, match="at least one field"):
        TableSchema.of([])
    with pytest.raises(ConfigurationError, match="SchemaField or a"):
        TableSchema.of(["id"])
    schema = TableSchema.of([("id", "INT64"), ("name", "STRING", "REQUIRED")], primary_key=["id"])
    assert "primary_key=['id']" in repr(schema)
    assert schema.fields[1] == SchemaField("name", "STRING", mode="REQUIRED")


def test_a_list_of_schema_fields_is_a_table_schema_with_nested_fields_and_modes() -> None:
    schema = as_table_schema(NESTED)
    assert isinstance(schema, TableSchema)
    assert schema == TableSchema.of(NESTED)
    customer = schema.fields[1]
    assert customer.mode == "NULLABLE"
    assert [(f.name, f.mode) for f in customer.fields] == [
        ("name", "REQUIRED"),
        ("emails", "REPEATED"),
        ("address", "NULLABLE"),
    ]
    assert schema.fields[2].mode == "REPEATED"
    assert as_table_schema(schema) is schema
    assert as_table_schema(None) is None
    with pytest.raises(ConfigurationError, match="got dict"):
        as_table_schema({"id": "INT64"})


def test_of_converts_a_schema_field_list_once() -> None:
    serializer = BigQuerySerializer.of(schema=NESTED)
    first = serializer.schema(DEST)
    assert isinstance(first, TableSchema)
    assert serializer.schema(DEST) is first
    assert has_schema(serializer)


def test_of_takes_a_function_of_the_destination_returning_either_form() -> None:
    serializer = BigQuerySerializer.of(schema=lambda d: NESTED if d.table == "t" else None)
    assert serializer.schema(DEST) == NESTED  # converted by the sink, once per table writer
    assert serializer.schema(TableDestination.of("p", "d", "u")) is None
    assert has_schema(serializer)
    assert not has_schema(BigQuerySerializer.of())
    assert not has_schema(lambda r, c: r)


def test_of_refuses_what_is_no_schema_and_no_function() -> None:
    with pytest.raises(ConfigurationError, match="TableSchema or a list"):
        BigQuerySerializer.of(schema="id:INT64")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="row function"):
        BigQuerySerializer.of(to_row=42)  # type: ignore[arg-type]


def test_row_functions_of_one_or_two_arguments_are_called_with_the_context() -> None:
    seen: list[Any] = []

    def two(record: Any, ctx: Any) -> dict[str, Any]:
        seen.append(ctx)
        return {"id": record}

    assert BigQuerySerializer.of(two).serialize(1, "ctx") == {"id": 1}
    assert seen == ["ctx"]
    assert BigQuerySerializer.of(lambda r: {"id": r}).serialize(2, "ctx") == {"id": 2}
    assert BigQuerySerializer.of().serialize({"id": 3}, "ctx") == {"id": 3}


class Subclassed(BigQuerySerializer):
    def serialize(self, record: Any, context: Any) -> dict[str, Any]:
        return {"id": record}

    def schema(self, destination: TableDestination) -> list[SchemaField]:
        return NESTED


def test_as_serializer_keeps_two_argument_serializers_and_adapts_the_rest() -> None:
    subclassed = Subclassed()
    assert as_serializer(subclassed, "s") is subclassed
    assert has_schema(subclassed)

    def one(record: Any) -> dict[str, Any]:
        return {"id": record}

    adapted = as_serializer(one, "s")
    assert isinstance(adapted, RecordOnly) and adapted(5, None) == {"id": 5}

    def two(record: Any, ctx: Any) -> dict[str, Any]:
        return {"id": record}

    assert as_serializer(two, "s") is two
    with pytest.raises(ConfigurationError, match="sink 's': the serializer must be"):
        as_serializer(None, "s")


def test_dead_letter_payloads_are_json_with_readable_values() -> None:
    from datetime import date
    from decimal import Decimal

    assert row_payload({"d": date(2024, 1, 2), "n": Decimal("1.5"), "b": b"\x00"}) == (
        b'{"d": "2024-01-02", "n": "1.5", "b": "AA=="}'
    )
    # Anything else JSON cannot say is written as its repr.
    assert row_payload({"s": {1}}) == b'{"s": "{1}"}'
