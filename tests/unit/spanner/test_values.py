"""Pure value classes of the Spanner sink: Mutation, KeyRange, options, destination, encoders."""

from __future__ import annotations

import datetime
import decimal
import json
import pickle
import uuid
from datetime import timedelta
from typing import Any

import cloudpickle
import pytest
from google.protobuf import struct_pb2

from pyflink_gcp.core import ConfigurationError
from pyflink_gcp.spanner import (
    COMMIT_TIMESTAMP,
    DatabaseDestination,
    KeyRange,
    Mutation,
    SpannerWriterOptions,
)
from pyflink_gcp.spanner.writer import _WrongType, encoder_for

# -- Mutation and KeyRange -------------------------------------------------------------------


def test_write_factories_keep_column_order_and_values() -> None:
    m = Mutation.insert_or_update("Events", {"id": 1, "kind": "click"})
    assert (m.operation, m.table, m.columns, m.values) == (
        "insert_or_update",
        "Events",
        ("id", "kind"),
        (1, "click"),
    )
    assert m.row == {"id": 1, "kind": "click"}
    assert Mutation.insert("T", {"a": 1}).operation == "insert"
    assert Mutation.update("T", {"a": 1}).operation == "update"
    assert Mutation.replace("T", {"a": 1}).operation == "replace"
    assert repr(m) == "Mutation.insert_or_update('Events', {'id': 1, 'kind': 'click'})"


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        (7, ((7,),)),
        ("k", (("k",),)),
        (b"k", ((b"k",),)),
        (("eu", 1), (("eu", 1),)),
        ([1, 2], ((1,), (2,))),
        ([("eu", 1), ("us", 2)], (("eu", 1), ("us", 2))),
        ([[1, 2]], ((1, 2),)),
    ],
)
def test_delete_takes_one_key_a_composite_key_or_a_list(keys: Any, expected: Any) -> None:
    m = Mutation.delete("T", keys)
    assert (m.operation, m.columns, m.values) == ("delete", None, expected)
    assert m.row is None


def test_delete_takes_ranges_alone_or_mixed_with_keys() -> None:
    r = KeyRange.closed_open(1, 10)
    assert Mutation.delete("T", r).values == (r,)
    assert Mutation.delete("T", [1, r]).values == ((1,), r)


@pytest.mark.parametrize(
    "call",
    [
        lambda: Mutation.insert_or_update("", {"a": 1}),
        lambda: Mutation.insert_or_update("T", {}),
        lambda: Mutation.insert_or_update("T", [("a", 1)]),
        lambda: Mutation.delete("T", []),
        lambda: Mutation.delete(None, 1),
        lambda: KeyRange(start_closed=1),
        lambda: KeyRange(start_closed=1, start_open=2, end_closed=3),
        lambda: KeyRange(start_closed=1, end_closed=2, end_open=3),
    ],
)
def test_invalid_mutations_and_ranges_are_rejected(call: Any) -> None:
    with pytest.raises(ValueError):
        call()


def test_key_range_bounds() -> None:
    assert KeyRange.closed(1, 5) == KeyRange(start_closed=(1,), end_closed=[5])
    r = KeyRange(start_open=("eu",), end_open=())
    assert (r.start, r.start_closed, r.end, r.end_closed) == (("eu",), False, (), False)
    assert KeyRange.prefix("eu") == KeyRange.closed("eu", "eu")
    assert repr(KeyRange.closed_open(1, 2)) == "KeyRange(start_closed=(1,), end_open=(2,))"


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps])
def test_mutations_and_ranges_pickle(dumps: Any) -> None:
    values = [
        Mutation.insert_or_update("T", {"id": 1, "at": datetime.datetime(2026, 1, 1)}),
        Mutation.delete("T", [1, KeyRange.prefix(("eu", 2))]),
    ]
    assert pickle.loads(dumps(values)) == values


def test_json_payload_describes_the_mutation() -> None:
    m = Mutation.insert_or_update(
        "T",
        {
            "id": 1,
            "b": b"\x00\x01",
            "at": datetime.datetime(2026, 1, 2, 3, 4, 5),
            "d": datetime.date(2026, 1, 2),
            "n": decimal.Decimal("1.5"),
            "u": uuid.UUID(int=1),
        },
    )
    body = json.loads(m.to_json_bytes())
    assert body == {
        "table": "T",
        "operation": "insert_or_update",
        "row": {
            "id": 1,
            "b": "AAE=",
            "at": "2026-01-02T03:04:05",
            "d": "2026-01-02",
            "n": "1.5",
            "u": str(uuid.UUID(int=1)),
        },
    }
    deleted = json.loads(Mutation.delete("T", [1, KeyRange.closed_open(2, 3)]).to_json_bytes())
    assert deleted["keys"] == [[1], {"start_closed": [2], "end_open": [3]}]


# -- options and destination ----------------------------------------------------------------


def test_options_defaults_are_well_under_the_limits() -> None:
    o = SpannerWriterOptions()
    assert o.max_mutations_per_commit == 20_000
    assert o.max_commit_bytes <= 100_000_000
    assert o.flush_interval == timedelta(seconds=1)


def test_options_builder_and_durations() -> None:
    o = (
        SpannerWriterOptions.builder()
        .max_mutations_per_commit(80_000)
        .max_commit_bytes(1_000)
        .max_pending_commits(1)
        .flush_interval(0.25)
        .flush_max_records(50)
        .retry_deadline(timedelta(seconds=5))
        .commit_timeout(3)
        .build()
    )
    assert o.flush_interval == timedelta(milliseconds=250)
    assert o.commit_timeout == timedelta(seconds=3)
    assert (o.max_mutations_per_commit, o.max_commit_bytes, o.flush_max_records) == (
        80_000,
        1_000,
        50,
    )


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_mutations_per_commit", 80_001, "exceeds Spanner's limit of 80,000"),
        ("max_mutations_per_commit", 0, "positive integer"),
        ("max_commit_bytes", 100_000_001, "commit size limit"),
        ("max_pending_commits", True, "positive integer"),
        ("flush_interval", -1, "must be positive"),
        ("retry_deadline", "soon", "timedelta or a number of seconds"),
    ],
)
def test_invalid_options_name_the_field(field: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        SpannerWriterOptions(**{field: value})


def test_database_destination_value() -> None:
    d = DatabaseDestination.of("my-project", "my-instance", "my_db")
    assert str(d) == "projects/my-project/instances/my-instance/databases/my_db"
    assert (d.project, d.instance, d.database) == ("my-project", "my-instance", "my_db")
    assert d == DatabaseDestination.of("my-project", "my-instance", "my_db")
    assert hash(d) == hash(DatabaseDestination.of("my-project", "my-instance", "my_db"))
    assert pickle.loads(cloudpickle.dumps(d)) == d


@pytest.mark.parametrize(
    "ids", [("", "i1", "db"), ("p", "I", "db"), ("p", "inst", "1db"), ("p", "inst", "d" * 31)]
)
def test_invalid_database_ids(ids: tuple[str, str, str]) -> None:
    with pytest.raises(ValueError, match="invalid Spanner"):
        DatabaseDestination.of(*ids)


# -- value encoders ---------------------------------------------------------------------------


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
    with pytest.raises(_WrongType):
        encode(spanner_type, value)
