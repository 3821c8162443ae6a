"""Value encoders: each Python value in the wire form of its column's Spanner type."""

from __future__ import annotations

import datetime
import decimal
import uuid
from datetime import timedelta
from typing import Any

import pytest
from google.protobuf import struct_pb2

from pyflink_gcp.spanner import COMMIT_TIMESTAMP
from pyflink_gcp.spanner.values import WrongType, encoder_for


def encode(spanner_type: str, value: Any) -> Any:
    row = struct_pb2.ListValue()
    encoder_for(spanner_type)(row.values, value)
    v = row.values[0]
    kind = v.WhichOneof("kind")
    if kind == "list_value":
        return [_plain(x) for x in v.list_value.values]
    return _plain(v)


def _plain(v: struct_pb2.Value) -> Any:
    kind = v.WhichOneof("kind")
    return None if kind == "null_value" else getattr(v, kind)


@pytest.mark.parametrize(
    ("spanner_type", "value", "wire"),
    [
        ("INT64", 42, "42"),
        ("INT64", -(2**63), str(-(2**63))),
        ("INT64", "17", "17"),
        ("INT64", None, None),
        ("FLOAT64", 1.5, 1.5),
        ("FLOAT64", 2, 2.0),
        ("FLOAT64", float("nan"), "NaN"),
        ("FLOAT64", float("-inf"), "-Infinity"),
        ("FLOAT32", float("inf"), "Infinity"),
        ("BOOL", True, True),
        ("STRING(10)", "héllo", "héllo"),
        ("STRING(MAX)", None, None),
        ("BYTES(MAX)", b"\x00\xff", "AP8="),
        ("BYTES(10)", bytearray(b"a"), "YQ=="),
        ("TIMESTAMP", datetime.datetime(2026, 1, 2, 3, 4, 5), "2026-01-02T03:04:05Z"),
        (
            "TIMESTAMP",
            datetime.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=datetime.timezone(timedelta(hours=1))),
            "2026-01-02T02:04:05.000006Z",
        ),
        ("TIMESTAMP", COMMIT_TIMESTAMP, "spanner.commit_timestamp()"),
        ("DATE", datetime.date(2026, 1, 2), "2026-01-02"),
        ("NUMERIC", decimal.Decimal("1E+3"), "1000"),
        ("NUMERIC", 12, "12"),
        ("JSON", {"a": [1, None]}, '{"a":[1,null]}'),
        ("JSON", '{"raw": true}', '{"raw": true}'),
        ("JSON", [1, 2], "[1,2]"),
        ("UUID", uuid.UUID(int=1), "00000000-0000-0000-0000-000000000001"),
        ("INTERVAL", "P1D", "P1D"),
        ("ARRAY<INT64>", [1, None, 3], ["1", None, "3"]),
        ("ARRAY<STRING(5)>", ("a",), ["a"]),
        ("ARRAY<FLOAT32>(vector_length=>2)", [0.5, 1.0], [0.5, 1.0]),
    ],
)
def test_encoders_write_spanner_wire_values(spanner_type: str, value: Any, wire: Any) -> None:
    assert encode(spanner_type, value) == wire


@pytest.mark.parametrize(
    ("spanner_type", "value"),
    [
        ("INT64", 1.5),
        ("INT64", True),
        ("FLOAT64", True),
        ("BOOL", 1),
        ("STRING(10)", 5),
        ("STRING(10)", b"bytes"),
        ("BYTES(10)", "text"),
        ("TIMESTAMP", 1_700_000_000),
        ("DATE", datetime.datetime(2026, 1, 1)),
        ("NUMERIC", 1.5),
        ("JSON", {1, 2}),
        ("JSON", float("nan")),
        ("ARRAY<INT64>", 5),
        ("ARRAY<INT64>", [1, "x", 2.5]),
    ],
)
def test_encoders_reject_values_of_the_wrong_type(spanner_type: str, value: Any) -> None:
    with pytest.raises(WrongType):
        encode(spanner_type, value)
