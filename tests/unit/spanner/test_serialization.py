"""Mutation and KeyRange: the picklable values a Spanner serializer returns."""

from __future__ import annotations

import datetime
import decimal
import json
import pickle
import uuid
from typing import Any

import cloudpickle
import pytest

from pyflink_gcp.spanner import KeyRange, Mutation


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
        lambda: Mutation.insert_or_update("T", [("a", 1)]),  # type: ignore[arg-type]
        lambda: Mutation.delete("T", []),
        lambda: Mutation.delete(None, 1),  # type: ignore[arg-type]
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


# -- field selection: Spanner's serializer routes, so the selection applies to its mutations ----


def _spanner_sink(serializer: Any, selection: Any) -> Any:
    from pyflink_gcp.spanner import DatabaseDestination, SpannerSink

    builder = SpannerSink.builder().set_database(DatabaseDestination.of("p", "inst", "db"))
    return builder.set_serializer(serializer).set_field_selection(selection).build()


def _by_tenant(record: Any) -> Any:
    return [
        Mutation.insert_or_update(f"Orders_{record['tenant']}", record),
        Mutation.delete("Stale", record["id"]),
    ]


def test_the_selection_applies_to_the_rows_of_the_mutations_the_serializer_makes() -> None:
    from pyflink_gcp.core.fields import FieldSelection

    sink = _spanner_sink(_by_tenant, FieldSelection.drop(["tenant"]))
    serialize = cloudpickle.loads(cloudpickle.dumps(sink._sink_config())).serializer
    upsert, delete = serialize({"tenant": "acme", "id": 7, "n": 2}, None)
    assert upsert == Mutation.insert_or_update("Orders_acme", {"id": 7, "n": 2})
    assert delete == Mutation.delete("Stale", 7)  # deletes keep their keys
    keep = _spanner_sink(_by_tenant, FieldSelection.keep(["id"]))._sink_config().serializer
    assert keep({"tenant": "acme", "id": 7, "n": 2}, None)[0].row == {"id": 7}


def test_only_writes_a_record_column_and_a_row_it_cannot_apply_to_is_unroutable() -> None:
    from pyflink_gcp.core.fields import FieldSelection
    from pyflink_gcp.core.types import UnroutableRecord

    def nested(record: Any, ctx: Any) -> Mutation:
        return Mutation.insert_or_update("Items", record)

    serialize = _spanner_sink(nested, FieldSelection.only("item"))._sink_config().serializer
    assert serialize({"id": 1, "item": {"sku": "a"}}, None) == Mutation.insert_or_update(
        "Items", {"sku": "a"}
    )
    failed = serialize({"id": 1, "item": "a"}, None)
    assert isinstance(failed, UnroutableRecord)
    assert "field 'item' holds str ('a'), not a record" in failed.reason
    assert json.loads(failed.payload) == {"id": 1, "item": "a"}
    empty = _spanner_sink(nested, FieldSelection.drop(["id"]))._sink_config().serializer
    assert "leaves no column of table 'Items'" in empty({"id": 1}, None).reason
