"""Building commit requests: shapes from the schema, rows into one request, keys, diagnoses."""

from __future__ import annotations

from typing import Any

import pytest

from pyflink_gcp.core import DestinationNotFoundError, SerializerError
from pyflink_gcp.spanner import KeyRange, Mutation
from pyflink_gcp.spanner.batch import (
    REQUEST_OVERHEAD,
    BadKey,
    Batch,
    Shape,
    compile_shape,
    diagnose,
    has_unknown_columns,
)
from pyflink_gcp.spanner.schema import TableInfo
from pyflink_gcp.spanner.values import WrongType
from tests.unit.spanner.fakes import schema


def table(name: str) -> TableInfo:
    t = schema().table(name)
    assert t is not None
    return t


def shape_of(m: Mutation) -> Shape:
    return compile_shape(m, table(m.table), "unit", "db", "record")


def test_a_write_shape_has_one_encoder_per_column_and_the_row_count() -> None:
    s = shape_of(Mutation.insert_or_update("Events", {"id": 1, "KIND": "k"}))
    assert (s.operation, s.table, s.columns, s.is_delete) == (
        "insert_or_update",
        "Events",
        ("id", "KIND"),
        False,
    )
    assert len(s.encoders) == 2 and s.cost == 2 + 3 + 2  # columns + both indexes
    d = shape_of(Mutation.delete("sales.Orders", ("eu", 1)))
    assert d.is_delete and len(d.encoders) == 2 and d.cost == 1


@pytest.mark.parametrize(
    ("mutation", "error", "message"),
    [
        (Mutation.insert_or_update("Events", {"id": 1, "zz": 1}), SerializerError, "'zz' do not"),
        (Mutation.insert("Events", {"id": 1, "kind_upper": "K"}), SerializerError, "generated"),
        (Mutation("insert", "Events", ("id", "ID"), (1, 1)), SerializerError, "appears twice"),
        (Mutation("upsert", "Events", ("id",), (1,)), SerializerError, "unknown mutation op"),
    ],
)
def test_shapes_the_table_cannot_take_are_the_serializers_fault(
    mutation: Mutation, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message) as raised:
        shape_of(mutation)
    assert "sink 'unit'" in str(raised.value) and "'record'" in str(raised.value)


def test_a_delete_needs_a_primary_key() -> None:
    keyless = TableInfo("Keyless", dict(table("Audit").columns))
    with pytest.raises(DestinationNotFoundError, match="'Keyless' has no primary key"):
        compile_shape(Mutation.delete("Keyless", 1), keyless, "unit", "db", "r")


def test_unknown_columns_are_noticed_case_insensitively() -> None:
    events = table("Events")
    assert not has_unknown_columns(events, Mutation.update("Events", {"ID": 1, "Kind": "k"}))
    assert has_unknown_columns(events, Mutation.update("Events", {"id": 1, "new": 2}))
    assert not has_unknown_columns(events, Mutation.delete("Events", 1))


def test_rows_of_one_shape_share_a_message_and_nothing_is_reordered() -> None:
    batch = Batch()
    a = shape_of(Mutation.insert_or_update("Events", {"id": 1, "kind": "k"}))
    b = shape_of(Mutation.insert_or_update("Audit", {"id": 1, "who": "w"}))
    sizes = [
        batch.add(a, Mutation.insert_or_update("Events", {"id": 1, "kind": "k"})),
        batch.add(a, Mutation.insert_or_update("Events", {"id": 2, "kind": "k"})),
        batch.add(b, Mutation.insert_or_update("Audit", {"id": 3, "who": "w"})),
        batch.add(a, Mutation.insert_or_update("Events", {"id": 4, "kind": "k"})),
    ]
    request = batch.request
    assert [len(m.insert_or_update.values) for m in request.mutations] == [2, 1, 1]
    assert [m.insert_or_update.table for m in request.mutations] == ["Events", "Audit", "Events"]
    assert list(request.mutations[0].insert_or_update.columns) == ["id", "kind"]
    # Each size counts the row, plus the message header where a new message starts.
    assert sizes[0] > sizes[1] and sizes[2] > sizes[1]
    assert REQUEST_OVERHEAD + sum(sizes) >= request.ByteSize()
    assert request.single_use_transaction.HasField("read_write")


def test_rollback_undoes_a_partly_encoded_record() -> None:
    batch = Batch()
    a = shape_of(Mutation.insert_or_update("Events", {"id": 1, "n": 1}))
    batch.add(a, Mutation.insert_or_update("Events", {"id": 1, "n": 1}))
    before = batch.request.SerializeToString()
    snap = batch.snapshot()
    with pytest.raises(WrongType):
        batch.add(a, Mutation.insert_or_update("Events", {"id": 2, "n": 2.5}))
    batch.rollback(snap)
    assert batch.request.SerializeToString() == before
    d = shape_of(Mutation.delete("sales.Orders", ("eu", 1)))
    snap = batch.snapshot()
    with pytest.raises(BadKey):
        batch.add(d, Mutation.delete("sales.Orders", [("eu", 1), KeyRange.closed("eu", "fr"), 3]))
    batch.rollback(snap)
    assert batch.request.SerializeToString() == before
    # The run goes on in the same message after a rollback.
    batch.add(a, Mutation.insert_or_update("Events", {"id": 3, "n": 3}))
    assert len(batch.request.mutations) == 1


def test_keys_and_ranges_are_encoded_for_the_primary_key() -> None:
    batch = Batch()
    d = shape_of(Mutation.delete("sales.Orders", ("eu", 1)))
    keys: Any = (("eu", 1), KeyRange(start_closed=("eu",), end_open=("eu", 9)))
    batch.add(d, Mutation.delete("sales.Orders", list(keys)))
    key_set = batch.request.mutations[0].delete.key_set
    assert [v.string_value for v in key_set.keys[0].values] == ["eu", "1"]
    r = key_set.ranges[0]
    assert [v.string_value for v in r.start_closed.values] == ["eu"]
    assert [v.string_value for v in r.end_open.values] == ["eu", "9"]


@pytest.mark.parametrize(
    ("mutation", "reason"),
    [
        (
            Mutation.insert_or_update("Events", {"id": 1, "n": 2.5}),
            "table Events: column n (INT64) cannot take float 2.5",
        ),
        (
            Mutation.delete("sales.Orders", 5),
            "table sales.Orders: key (5,) has 1 value(s), the primary key has 2 (region, num)",
        ),
        (
            Mutation.delete("sales.Orders", KeyRange.closed(("eu", 1, 2), ("eu", 3))),
            "table sales.Orders: key range bound ('eu', 1, 2) is longer than the primary key",
        ),
        (
            Mutation.delete("sales.Orders", ("eu", 1.5)),
            "table sales.Orders: a key of [('eu', 1.5)] does not fit the primary key "
            "(region STRING(8), num INT64)",
        ),
        (Mutation.insert_or_update("Events", {"id": 1, "n": 2}), None),
    ],
)
def test_diagnose_names_the_value_or_key(mutation: Mutation, reason: str | None) -> None:
    assert diagnose(shape_of(mutation), mutation) == reason
