"""Arrow record batches: which tables and rows take the Arrow path, and that the values it sends
are the ones the protobuf encoding would send."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from google.cloud.bigquery import SchemaField

from pyflink_gcp.bigquery.arrow_rows import ArrowEncoder
from pyflink_gcp.bigquery.rows import RowEncoder
from pyflink_gcp.bigquery.values import RowError
from tests.unit.bigquery.test_rows import MICROS, SCHEMA, decode

#: The columns Arrow is used for, from the encoder tests' schema.
SCALARS = [
    f
    for f in SCHEMA
    if f.field_type
    in ("INTEGER", "STRING", "FLOAT", "BOOLEAN", "BYTES", "TIMESTAMP", "DATE", "NUMERIC")
    and f.mode != "REPEATED"
]


def arrow_rows(encoder: ArrowEncoder, data: bytes) -> list[dict[str, Any]]:
    table = pa.ipc.open_stream(encoder.serialized_schema + data).read_all()
    return table.to_pylist()


@pytest.mark.parametrize(
    "field",
    [
        SchemaField("tags", "STRING", mode="REPEATED"),
        SchemaField("doc", "JSON"),
        SchemaField("local", "DATETIME"),
        SchemaField("at", "TIME"),
        SchemaField("big", "BIGNUMERIC"),
        SchemaField("address", "RECORD", fields=[SchemaField("city", "STRING")]),
    ],
    ids=lambda f: f.field_type + "/" + (f.mode or ""),
)
def test_tables_with_a_column_arrow_is_not_used_for_have_no_arrow_encoder(field: Any) -> None:
    assert ArrowEncoder.for_schema([SchemaField("id", "INT64"), field]) is None
    assert ArrowEncoder.for_schema(SCALARS) is not None


def test_arrow_sends_the_values_the_protobuf_encoding_sends() -> None:
    rows = [
        {
            "id": 1,
            "name": "a",
            "score": 1.5,
            "ok": True,
            "raw": b"\x00\x01",
            "ts": MICROS + 7,
            "day": date(2024, 1, 2),
            "amount": Decimal("12.345"),
        },
        # Naive datetimes are UTC, aware ones are converted; an int is a float's whole value.
        {"id": 2, "score": 3, "ts": datetime(2024, 1, 1, 12)},
        {"id": 3, "ts": datetime(2024, 1, 1, 14, tzinfo=timezone(timedelta(hours=2))), "amount": 5},
    ]
    arrow = ArrowEncoder.for_schema(SCALARS)
    assert arrow is not None
    data = arrow.encode(rows)
    assert data is not None
    proto = RowEncoder(SCALARS)
    for got, row in zip(arrow_rows(arrow, data), rows, strict=True):
        wire = decode(proto.descriptor, proto.encode(row))
        expected = {
            "id": wire["id"],
            "name": wire.get("name"),
            "score": wire.get("score"),
            "ok": wire.get("ok"),
            "raw": wire.get("raw"),
            "ts": datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=wire["ts"]),
            "day": date(1970, 1, 1) + timedelta(days=wire["day"]) if "day" in wire else None,
            "amount": Decimal(wire["amount"]) if "amount" in wire else None,
        }
        assert got == expected


@pytest.mark.parametrize(
    "row",
    [
        {"id": 1.5},  # Arrow would truncate it
        {"id": True},  # a bool is no INT64
        {"id": "1"},  # text: the protobuf encoder converts it
        {"id": 1, "name": 5},
        {"id": 1, "raw": "not bytes"},  # Arrow would take the UTF-8
        {"id": 1, "ts": "2024-01-01T00:00:00Z"},
        {"id": 1, "ts": MICROS // 1_000},  # epoch milliseconds: the protobuf rows refuse them
        {"id": 1, "ts": MICROS // 1_000_000},  # epoch seconds
        {"id": 1, "ts": MICROS * 1_000},  # epoch nanoseconds
        {"id": 1, "day": datetime(2024, 1, 1, 5)},  # a datetime is no DATE
        {"id": 1, "amount": Decimal("1.1234567891")},  # more than 9 decimals
        {"id": 1, "amount": "1.5"},
        {"id": 2**63},
        {"id": None},  # REQUIRED
        {"name": "no id"},  # REQUIRED
        {"id": 1, "unknown": 1},
        {"ID": 1},  # the protobuf encoder matches column names case-insensitively
    ],
)
def test_a_batch_with_a_row_arrow_cannot_take_as_given_is_left_to_the_protobuf_path(
    row: dict[str, Any],
) -> None:
    arrow = ArrowEncoder.for_schema(SCALARS)
    assert arrow is not None
    assert arrow.encode([{"id": 0}, row]) is None
    assert arrow.encode([{"id": 0}]) is not None


def test_unknown_keys_are_ignored_when_the_writer_ignores_unknown_values() -> None:
    arrow = ArrowEncoder.for_schema(SCALARS, ignore_unknown_values=True)
    assert arrow is not None
    data = arrow.encode([{"id": 1, "unknown": "x"}])
    assert data is not None
    assert arrow_rows(arrow, data)[0]["id"] == 1
    # A column spelt in another case is no unknown key: the protobuf encoder takes it.
    assert arrow.encode([{"id": 1, "Name": "x"}]) is None


def test_arrow_takes_microsecond_timestamps_and_leaves_other_units_to_the_protobuf_rows() -> None:
    arrow = ArrowEncoder.for_schema(SCALARS)
    assert arrow is not None
    kept = [0, 1, 99_999_999, 10**14, MICROS, -MICROS, 253_402_300_799_999_999]
    data = arrow.encode([{"id": i, "ts": ts} for i, ts in enumerate(kept)] + [{"id": 9}])
    assert data is not None
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert [r["ts"] for r in arrow_rows(arrow, data)] == [
        *(epoch + timedelta(microseconds=ts) for ts in kept),
        None,
    ]
    millis = [{"id": 1, "ts": MICROS}, {"id": 2, "ts": MICROS // 1_000}]
    assert arrow.encode(millis) is None
    with pytest.raises(RowError, match="column ts: TIMESTAMP 1704067200000 looks like epoch milli"):
        RowEncoder(SCALARS).encode(millis[1])
