"""The bookkeeping of carried records: batches handed on, chunks kept and released, restores."""

from __future__ import annotations

import base64
import pickle
import struct
from typing import Any

import pytest

from pyflink_gcp.core.carry import (
    CARRY_BATCH_RECORDS,
    CARRY_STATE_TAG,
    CarriedRecords,
    CarrySettings,
    decode_element,
    decode_restored,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Operator:
    """What the Java bridge's CarryState does with the elements: keep and release chunks."""

    def __init__(self) -> None:
        self.kept: dict[int, bytes] = {}

    def take(self, element: bytes | None) -> None:
        if element is None:
            return
        chunk, released, payload = decode_element(element)
        for c in released:
            del self.kept[c]
        if chunk >= 0:
            self.kept[chunk] = payload

    def parameter(self) -> str:
        return ",".join(
            base64.b64encode(struct.pack(">q", c) + payload).decode()
            for c, payload in self.kept.items()
        )


def carried(max_s: float = 10.0, max_records: int = 1_000) -> tuple[CarriedRecords, list, Clock]:
    handed: list[tuple[Any, list[Any]]] = []
    clock = Clock()
    store = CarriedRecords(
        CarrySettings(max_s, max_records),
        lambda d, entries: handed.append((d, [e[1] for e in entries])),
        clock,
    )
    return store, handed, clock


def test_records_wait_until_their_batch_is_full() -> None:
    store, handed, _ = carried(max_records=10 * CARRY_BATCH_RECORDS)
    for i in range(CARRY_BATCH_RECORDS - 1):
        store.hold("a", f"e{i}", i)
    store.hold("b", "x", "b0")
    assert handed == [] and store.records == CARRY_BATCH_RECORDS
    store.hold("a", "last", "last")
    assert handed == [("a", [*range(CARRY_BATCH_RECORDS - 1), "last"])]
    assert store.records == 1 and len(store) == 1


def test_a_batch_goes_once_its_oldest_record_is_max_carry_time_old() -> None:
    store, handed, clock = carried(max_s=5.0)
    store.hold("a", 0, 0)
    clock.now += 3
    store.hold("b", 1, 1)
    store.hold("a", 2, 2)
    assert store.hand_on_due() == 0
    clock.now += 2
    assert store.hand_on_due() == 1
    assert handed == [("a", [0, 2])]
    clock.now += 3
    assert store.hand_on_due() == 1 and handed[-1] == ("b", [1])


def test_past_max_carried_records_the_oldest_batches_go() -> None:
    store, handed, clock = carried(max_records=3)
    for d in "abc":
        store.hold(d, d, d)
        clock.now += 1
    store.hold("d", "d", "d")
    assert handed == [("a", ["a"])] and store.records == 3


def test_each_marker_keeps_the_new_records_still_carried_and_releases_flushed_chunks() -> None:
    store, handed, _ = carried()
    operator = Operator()
    store.hold("a", 0, "a0")
    store.hold("b", 1, "b0")
    operator.take(store.take_state())  # chunk 0: a0, b0
    assert list(operator.kept) == [0]
    assert pickle.loads(operator.kept[0]) == [("a", ["a0"]), ("b", ["b0"])]
    store.hold("a", 2, "a1")
    store._hand_on("b")  # b0 goes to its writer: flushed at the next marker
    operator.take(store.take_state())  # chunk 1: a1; chunk 0 still has a0
    assert list(operator.kept) == [0, 1]
    assert pickle.loads(operator.kept[1]) == [("a", ["a1"])]
    store._hand_on("a")
    operator.take(store.take_state())  # both released, nothing new
    assert operator.kept == {} and store.chunks_kept == 2 and store.chunks_released == 2
    assert store.take_state() is None  # nothing changed


def test_a_restore_brings_back_exactly_the_records_still_carried_in_order() -> None:
    store, _, clock = carried(max_s=10.0)
    operator = Operator()
    for i in range(6):
        store.hold("ab"[i % 2], i, i)
        if i % 2:
            operator.take(store.take_state())
    clock.now += 20
    store.hold("c", 6, 6)
    store.hand_on_due()  # a and b are due; c is not
    operator.take(store.take_state())
    restored = list(decode_restored(operator.parameter()))
    assert restored == [("c", [6])]


def test_chunks_of_several_old_subtasks_come_back_by_id() -> None:
    first, second = Operator(), Operator()
    one, _, _ = carried()
    two, _, _ = carried()
    one.hold("a", 0, "one-0")
    first.take(one.take_state())
    one.hold("a", 1, "one-1")
    first.take(one.take_state())
    two.hold("a", 0, "two-0")
    second.take(two.take_state())
    parameter = f"{first.parameter()},{second.parameter()}"
    records = [r for _, rs in decode_restored(parameter) for r in rs]
    assert records == ["one-0", "two-0", "one-1"]
    assert list(decode_restored("")) == [] and list(decode_restored(None)) == []


def test_the_element_is_tagged_bytes_the_operator_can_read() -> None:
    store, _, _ = carried()
    store.hold("a", 0, 0)
    element = store.take_state()
    assert isinstance(element, bytes) and element.startswith(CARRY_STATE_TAG)
    with pytest.raises(ValueError):
        decode_element(b"something else")


def test_carrying_needs_a_time() -> None:
    assert not CarrySettings().enabled
    with pytest.raises(ValueError):
        CarriedRecords(CarrySettings(), lambda d, e: None)
