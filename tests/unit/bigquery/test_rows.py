"""Row encoding: schema → protobuf descriptor, rows → serialized messages, keys by value."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from google.cloud.bigquery import SchemaField
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from pyflink_gcp.bigquery.rows import RowEncoder, SchemaNotSupportedError
from pyflink_gcp.bigquery.values import (
    MICROS_FROM,
    MILLIS_FROM,
    SECONDS_FROM,
    TIMESTAMP_MAX_MICROS,
    TIMESTAMP_MIN_MICROS,
    RowError,
    epoch_micros,
    to_timestamp,
)

MICROS = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z


def decode(descriptor: Any, data: bytes) -> dict[str, Any]:
    file_proto = descriptor_pb2.FileDescriptorProto(name="t.proto", package="t", syntax="proto2")
    file_proto.message_type.add().CopyFrom(descriptor)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("t.Row"))
    return _plain(cls.FromString(data))


def _plain(message: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        if field.type == field.TYPE_MESSAGE:
            value = (
                [_plain(v) for v in value] if field.label == field.LABEL_REPEATED else _plain(value)
            )
        elif field.label == field.LABEL_REPEATED:
            value = list(value)
        out[field.name] = value
    return out


SCHEMA = [
    SchemaField("id", "INTEGER", mode="REQUIRED"),
    SchemaField("name", "STRING"),
    SchemaField("score", "FLOAT"),
    SchemaField("ok", "BOOLEAN"),
    SchemaField("raw", "BYTES"),
    SchemaField("ts", "TIMESTAMP"),
    SchemaField("day", "DATE"),
    SchemaField("local", "DATETIME"),
    SchemaField("at", "TIME"),
    SchemaField("amount", "NUMERIC"),
    SchemaField("big", "BIGNUMERIC"),
    SchemaField("doc", "JSON"),
    SchemaField("tags", "STRING", mode="REPEATED"),
    SchemaField(
        "address",
        "RECORD",
        fields=[SchemaField("city", "STRING"), SchemaField("since", "TIMESTAMP")],
    ),
    SchemaField("visits", "RECORD", mode="REPEATED", fields=[SchemaField("at", "TIMESTAMP")]),
]


def test_every_type_is_encoded_in_its_wire_form() -> None:
    encoder = RowEncoder(SCHEMA)
    data = encoder.encode(
        {
            "id": 7,
            "name": "n",
            "score": 1,
            "ok": True,
            "raw": b"\x00\x01",
            "ts": datetime(2024, 1, 1, tzinfo=UTC),
            "day": date(2024, 1, 2),
            "local": datetime(2024, 1, 1, 10, 30),
            "at": time(10, 30, 1),
            "amount": Decimal("1.50"),
            "big": "123456789012345678901234567890123456789.123456789",
            "doc": {"a": [1, 2]},
            "tags": ["x", "y"],
            "address": {"city": "Lyon", "since": "2024-01-01T00:00:00Z"},
            "visits": [{"at": MICROS}, {"at": "2024-01-01T00:00:00.000001Z"}],
        }
    )
    assert decode(encoder.descriptor, data) == {
        "id": 7,
        "name": "n",
        "score": 1.0,
        "ok": True,
        "raw": b"\x00\x01",
        "ts": MICROS,
        "day": 19724,
        "local": "2024-01-01 10:30:00",
        "at": "10:30:01",
        "amount": "1.5",
        "big": "123456789012345678901234567890123456789.123456789",
        "doc": '{"a":[1,2]}',
        "tags": ["x", "y"],
        "address": {"city": "Lyon", "since": MICROS},
        "visits": [{"at": MICROS}, {"at": MICROS + 1}],
    }


def test_nulls_and_missing_columns_are_left_unset() -> None:
    encoder = RowEncoder(SCHEMA)
    assert decode(encoder.descriptor, encoder.encode({"id": 1, "name": None, "ts": None})) == {
        "id": 1
    }


def test_lenient_conversions_of_plain_columns() -> None:
    encoder = RowEncoder(SCHEMA)
    data = encoder.encode(
        {"ID": "12", "score": "2.5", "ok": "true", "raw": "AAE=", "name": 3, "tags": ("a",)}
    )
    assert decode(encoder.descriptor, data) == {
        "id": 12,
        "score": 2.5,
        "ok": True,
        "raw": b"\x00\x01",
        "name": "3",
        "tags": ["a"],
    }


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"id": "twelve"}, "column id: expected an INT64, got str 'twelve'"),
        ({"id": 1.5}, "column id: expected an INT64"),
        ({"nope": 1}, "no column nope in the table schema"),
        ({"address": {"zip": 1}}, "no column address.zip in the table schema"),
        ({"address": "Lyon"}, "column address: RECORD column takes a dict"),
        ({"tags": "x"}, "column tags: REPEATED column takes a list"),
        ({"tags": ["x", None]}, "column tags: REPEATED column cannot hold NULL elements"),
        ({"ts": 1.5}, "column ts: expected a TIMESTAMP"),
        ({"ts": "yesterday"}, "column ts: expected a TIMESTAMP, got the string 'yesterday'"),
        ({"amount": "1,5"}, "column amount: expected a NUMERIC, got the string '1,5'"),
        ({"amount": float("nan")}, "column amount: NUMERIC values must be finite"),
        ({"doc": "{not json"}, "column doc: expected JSON text"),
        ({"raw": "***"}, "column raw: expected BYTES or a base64 string"),
        ({"ok": "maybe"}, "column ok: expected a BOOL"),
        ({"visits": [{"at": "never"}]}, "column visits.at: expected a TIMESTAMP"),
        ({"_CHANGE_TYPE": "INSERT"}, "_CHANGE_TYPE must be 'UPSERT' or 'DELETE'"),
        ({"_CHANGE_SEQUENCE_NUMBER": "xyz"}, "_CHANGE_SEQUENCE_NUMBER must be"),
    ],
)
def test_rows_that_do_not_fit_are_rejected_naming_the_column(
    row: dict[str, Any], message: str
) -> None:
    with pytest.raises(RowError) as err:
        RowEncoder(SCHEMA).encode(row)
    assert message in str(err.value)


def test_unknown_values_can_be_ignored() -> None:
    encoder = RowEncoder(SCHEMA, ignore_unknown_values=True)
    data = encoder.encode({"id": 1, "extra": "x", "address": {"city": "c", "zip": 1}})
    assert decode(encoder.descriptor, data) == {"id": 1, "address": {"city": "c"}}


def test_cdc_descriptor_extends_the_plain_one() -> None:
    encoder = RowEncoder(SCHEMA)
    data = encoder.encode({"id": 1, "_CHANGE_TYPE": "delete", "_CHANGE_SEQUENCE_NUMBER": 255})
    assert decode(encoder.cdc_descriptor, data) == {
        "id": 1,
        "_CHANGE_TYPE": "DELETE",
        "_CHANGE_SEQUENCE_NUMBER": "FF",
    }
    plain = encoder.encode({"id": 1})
    assert decode(encoder.cdc_descriptor, plain) == decode(encoder.descriptor, plain)
    assert [f.name for f in encoder.cdc_descriptor.field][-2:] == [
        "_CHANGE_TYPE",
        "_CHANGE_SEQUENCE_NUMBER",
    ]


def test_equal_keys_in_different_spellings_are_one_key() -> None:
    encoder = RowEncoder(SCHEMA, primary_key=["id", "ts", "amount", "day"])
    spellings = [
        {"id": 1, "ts": "2024-01-01T00:00:00Z", "amount": "1.50", "day": "2024-01-02"},
        {"id": "1", "ts": MICROS, "amount": 1.5, "day": 19724},
        {
            "id": 1.0,
            "ts": datetime(2024, 1, 1, 1, tzinfo=timezone(timedelta(hours=1))),
            "amount": Decimal("1.5000"),
            "day": date(2024, 1, 2),
        },
        {"id": 1, "ts": "2024-01-01 00:00:00 UTC", "amount": "0001.5", "day": "2024-01-02"},
    ]
    assert len({encoder.key(row) for row in spellings}) == 1
    assert encoder.key({"id": 1, "ts": MICROS + 1, "amount": "1.5", "day": 19724}) != encoder.key(
        spellings[0]
    )
    assert encoder.primary_key == ("id", "ts", "amount", "day")


SECONDS = 1_704_067_200  # 2024-01-01T00:00:00Z in epoch seconds


@pytest.mark.parametrize(
    ("value", "unit", "instant"),
    [
        (SECONDS, "seconds", "2024-01-01T00:00:00Z"),
        (SECONDS * 1_000 + 250, "milliseconds", "2024-01-01T00:00:00.250000Z"),
        (SECONDS * 1_000_000_000 + 7_000, "nanoseconds", "2024-01-01T00:00:00.000007Z"),
        (SECONDS_FROM, "seconds", "1973-03-03T09:46:40Z"),
        (MICROS_FROM - 1, "milliseconds", "5138-11-16T09:46:39.999000Z"),
        (MILLIS_FROM, "milliseconds", "1973-03-03T09:46:40Z"),
        (TIMESTAMP_MAX_MICROS + 1, "nanoseconds", "1978-01-11T21:31:40.800000Z"),
        (-MICROS * 1_000, "nanoseconds", "1916-01-02T00:00:00Z"),
    ],
)
def test_an_int_timestamp_in_another_unit_is_refused_naming_the_unit(
    value: int, unit: str, instant: str
) -> None:
    with pytest.raises(RowError) as err:
        RowEncoder(SCHEMA).encode({"id": 1, "ts": value})
    message = str(err.value)
    assert message.startswith(f"column ts: TIMESTAMP {value} looks like epoch {unit} ({instant})")
    assert "ints are taken as epoch microseconds" in message
    # The same value nested in a RECORD, in a REPEATED column, and as a primary key column.
    for row in ({"id": 1, "address": {"since": value}}, {"id": 1, "visits": [{"at": value}]}):
        with pytest.raises(RowError, match=f"looks like epoch {unit}"):
            RowEncoder(SCHEMA).encode(row)
    with pytest.raises(RowError, match=f"looks like epoch {unit}"):
        to_timestamp(value)


@pytest.mark.parametrize(
    "value",
    [
        0,
        1,
        SECONDS_FROM - 1,  # the first 100 seconds of 1970
        MICROS_FROM,  # 1973-03-03T09:46:40Z
        MICROS,
        MICROS + 1,
        TIMESTAMP_MAX_MICROS,  # 9999-12-31T23:59:59.999999Z
        -1,
        -MICROS,  # 1916-01-02
        TIMESTAMP_MIN_MICROS,  # 0001-01-01T00:00:00Z
    ],
)
def test_microsecond_timestamps_are_written_as_they_are(value: int) -> None:
    assert epoch_micros(value) == to_timestamp(value) == value
    encoder = RowEncoder(SCHEMA)
    data = encoder.encode({"id": 1, "ts": value, "address": {"since": value}})
    assert decode(encoder.descriptor, data) == {
        "id": 1,
        "ts": value,
        "address": {"since": value},
    }


def test_schemas_the_sink_cannot_write_are_refused() -> None:
    with pytest.raises(SchemaNotSupportedError, match="column name 'my col'"):
        RowEncoder([SchemaField("my col", "STRING")])
    with pytest.raises(SchemaNotSupportedError, match="RANGE"):
        RowEncoder([SchemaField("r", "RANGE")])
    with pytest.raises(SchemaNotSupportedError, match="primary key column 'tags'"):
        RowEncoder(SCHEMA, primary_key=["tags"])
