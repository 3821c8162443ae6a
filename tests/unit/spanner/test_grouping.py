"""Grouping: sorting by table and key, cutting commits by the three limits, nothing dropped."""

from __future__ import annotations

import random
import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from pyflink_gcp.core import ConfigurationError, WriteError
from pyflink_gcp.spanner import KeyRange, Mutation, SpannerWriterOptions
from pyflink_gcp.spanner.batch import REQUEST_OVERHEAD
from pyflink_gcp.spanner.grouping import (
    Entry,
    GroupingSpannerWriter,
    cut_commits,
    group_order,
    sort_value,
)
from pyflink_gcp.spanner.writer import SpannerWriter
from tests.unit.spanner.fakes import event, make, reject_kind


def audit(i: int) -> Mutation:
    return Mutation.insert_or_update("Audit", {"id": i, "who": f"w{i}"})


def order(region: str, num: int) -> Mutation:
    return Mutation.insert_or_update("sales.Orders", {"region": region, "num": num})


def committed(api: Any) -> list[list[tuple[str, str, str]]]:
    """(operation, table, first value) per row, per commit."""
    out = []
    for commit in api.commits:
        rows = []
        for m in commit.mutations:
            op = m.WhichOneof("operation")
            body = getattr(m, op)
            if op == "delete":
                rows += [(op, body.table, k.values[0].string_value) for k in body.key_set.keys]
                rows += [(op, body.table, "range") for _ in body.key_set.ranges]
            else:
                rows += [(op, body.table, r.values[0].string_value) for r in body.values]
        out.append(rows)
    return out


# -- the sort key ---------------------------------------------------------------------------


def test_sort_values_order_like_key_columns_and_never_fail_on_mixed_kinds() -> None:
    values: list[Any] = [
        "b",
        10,
        None,
        2.5,
        Decimal("3"),
        b"\x01",
        "a",
        -1,
        float("nan"),
        datetime(2024, 1, 1, 12, tzinfo=UTC),
        datetime(2024, 1, 1, 11),  # naive: UTC
        date(2020, 1, 1),
        True,
    ]
    ordered = sorted(values, key=sort_value)  # must not raise
    assert ordered[0] is None
    assert ordered[1] is True
    numbers = [v for v in ordered if type(v) in (int, float, Decimal)]
    assert numbers[1:] == [-1, 2.5, Decimal("3"), 10] and numbers[0] != numbers[0]  # NaN first
    assert ordered.index("a") < ordered.index("b") < ordered.index(b"\x01")
    times = [v for v in ordered if isinstance(v, datetime)]
    assert times == [datetime(2024, 1, 1, 11), datetime(2024, 1, 1, 12, tzinfo=UTC)]


# -- ordering and cutting, on plain entries -----------------------------------------------


def _entry(table: str | None, key: int, *, cost: int = 1, size: int = 10, rows: int = 1) -> Entry:
    order = None if table is None else (table, *sort_value(key))
    return Entry((table, key), key, order, None, None, cost, size, rows)


def test_group_order_sorts_by_table_then_key_and_keeps_one_keys_arrival_order() -> None:
    entries = [_entry("B", 2), _entry("A", 9), _entry("B", 1), _entry("A", 9), _entry("A", 3)]
    entries[3].record = "second A/9"
    ordered = group_order(entries)
    assert [e.element for e in ordered] == [("A", 3), ("A", 9), ("A", 9), ("B", 1), ("B", 2)]
    assert [e.record for e in ordered][1:3] == [9, "second A/9"]  # stable
    assert sorted(map(id, ordered)) == sorted(map(id, entries))  # nothing lost or doubled


def test_a_barrier_keeps_its_place_and_sorting_stays_on_each_side() -> None:
    entries = [_entry("B", 2), _entry("A", 1), _entry(None, 0), _entry("B", 0), _entry("A", 5)]
    ordered = group_order(entries)
    assert [e.element for e in ordered] == [
        ("A", 1),
        ("B", 2),
        (None, 0),
        ("A", 5),
        ("B", 0),
    ]


@pytest.mark.parametrize(
    ("limits", "check"),
    [
        ((7, 10**9, 10**9), lambda m, b, r: m <= 7),
        ((10**9, REQUEST_OVERHEAD + 55, 10**9), lambda m, b, r: b <= REQUEST_OVERHEAD + 55),
        ((10**9, 10**9, 4), lambda m, b, r: r <= 4),
    ],
    ids=["mutations", "bytes", "rows"],
)
def test_cutting_respects_each_limit_and_drops_nothing(limits: Any, check: Any) -> None:
    rng = random.Random(7)
    entries = [
        _entry(rng.choice("ABC"), rng.randrange(1000), cost=rng.randint(1, 3)) for _ in range(500)
    ]
    ordered = group_order(entries)
    commits = cut_commits(ordered, *limits)
    assert [e for part, *_ in commits for e in part] == ordered  # in order, all of them
    for part, mutations, size, rows in commits:
        assert mutations == sum(e.cost for e in part)
        assert rows == sum(e.rows for e in part)
        assert size >= REQUEST_OVERHEAD + sum(e.size for e in part)
        assert check(mutations, size, rows)
    # Each commit is as full as the limit allows: adding the next entry would pass it.
    for (_, m, b, r), (nxt, *_) in zip(commits, commits[1:], strict=False):
        e = nxt[0]
        assert not check(m + e.cost, b + e.size, r + e.rows)


def test_an_entry_over_a_limit_alone_is_a_commit_of_its_own() -> None:
    entries = [_entry("A", 1), _entry("A", 2, cost=50), _entry("A", 3)]
    commits = cut_commits(entries, 10, 10**9, 10**9)
    assert [[e.element[1] for e in part] for part, *_ in commits] == [[1], [2], [3]]


# -- the grouping writer against the fake API -------------------------------------------------


def test_the_factory_makes_a_grouping_writer_only_with_a_factor_above_one() -> None:
    assert type(make()[1]) is SpannerWriter
    assert type(make(grouping_factor=1)[1]) is SpannerWriter
    assert type(make(grouping_factor=2)[1]) is GroupingSpannerWriter


def test_grouped_commits_are_sorted_by_table_and_key_within_the_limits() -> None:
    _, writer, api = make(grouping_factor=100, max_rows_per_commit=7)
    rng = random.Random(3)
    keys = list(range(60))
    rng.shuffle(keys)
    for i in keys:
        writer.write(event(i) if i % 3 else audit(i), i)
    writer.write(order("eu", 2), "o2")
    writer.write(order("asia", 9), "o9")
    assert not api.commits  # everything still in the group
    assert writer.flush() == []
    assert writer.is_clean
    commits = committed(api)
    assert all(len(c) <= 7 for c in commits)
    assert len(commits) == -(-62 // 7)
    rows = [row for c in commits for row in c]
    assert [(t, int(k)) for _, t, k in rows if t != "sales.Orders"] == [
        *(("Audit", i) for i in range(0, 60, 3)),
        *(("Events", i) for i in range(60) if i % 3),
    ]
    assert [k for _, t, k in rows if t == "sales.Orders"] == ["asia", "eu"]  # by region first
    assert isinstance(writer, GroupingSpannerWriter)
    assert writer.groups == 1 and writer.commits == len(commits)


def test_one_rows_mutations_keep_their_order_and_barriers_their_place() -> None:
    _, writer, api = make(grouping_factor=50)
    writer.write(event(5, kind="a"), 1)
    writer.write(event(2), 2)
    writer.write(Mutation.delete("Events", 5), 3)  # one key: sorted, after the write of 5
    writer.write(event(5, kind="b"), 4)
    writer.write(Mutation.delete("Events", KeyRange.closed(0, 1)), 5)  # a barrier
    writer.write(event(1), 6)
    writer.write(event(0), 7)
    assert writer.flush() == []
    rows = [row for c in committed(api) for row in c]
    assert rows == [
        ("insert_or_update", "Events", "2"),
        ("insert_or_update", "Events", "5"),
        ("delete", "Events", "5"),
        ("insert_or_update", "Events", "5"),
        ("delete", "Events", "range"),
        ("insert_or_update", "Events", "0"),
        ("insert_or_update", "Events", "1"),
    ]
    kinds = [
        r.values[1].string_value
        for c in api.commits
        for m in c.mutations
        if m.WhichOneof("operation") == "insert_or_update"
        for r in m.insert_or_update.values
        if r.values[0].string_value == "5"
    ]
    assert kinds == ["a", "b"]


def test_a_record_of_several_mutations_stays_whole_in_one_commit() -> None:
    _, writer, api = make(grouping_factor=10, max_rows_per_commit=2)
    writer.write(event(9), 1)
    writer.write([audit(1), event(1)], 2)
    writer.write(event(3), 3)
    assert writer.flush() == []
    assert committed(api) == [
        [("insert_or_update", "Events", "9")],
        [("insert_or_update", "Audit", "1"), ("insert_or_update", "Events", "1")],
        [("insert_or_update", "Events", "3")],
    ]


def test_a_full_group_is_committed_before_the_flush() -> None:
    # Factor 3 x 4 rows: the twelfth record fills the group.
    _, writer, api = make(grouping_factor=3, max_rows_per_commit=4)
    for i in range(11):
        writer.write(event(100 - i), i)
    assert writer.unsent_records == 11
    writer.write(event(0), 11)
    assert writer.unsent_records == 0
    writer._wait_pending()
    assert [len(c) for c in committed(api)] == [4, 4, 4]
    writer.write(event(50), 12)
    assert writer.flush() == []
    assert sorted(int(k) for c in committed(api) for _, _, k in c) == sorted(
        [100 - i for i in range(11)] + [0, 50]
    )


def test_mutation_and_byte_limits_cut_grouped_commits() -> None:
    # insert_or_update(id, kind) counts 7 (two indexes).
    _, writer, api = make(grouping_factor=20, max_mutations_per_commit=50)
    for i in range(100):
        writer.write(event(99 - i), i)
    assert writer.flush() == []
    assert len(api.commits) == 15  # 7 rows (49 mutations) each
    assert all(
        sum(len(m.insert_or_update.values) for m in c.mutations) * 7 <= 50 for c in api.commits
    )
    assert [int(k) for c in committed(api) for _, _, k in c] == list(range(100))
    _, writer, api = make(grouping_factor=20, max_commit_bytes=600)
    for i in range(100):
        writer.write(event(99 - i, kind="x" * 10), i)
    assert writer.flush() == []
    assert all(c.ByteSize() <= 600 for c in api.commits) and len(api.commits) > 1
    assert [int(k) for c in committed(api) for _, _, k in c] == list(range(100))


def test_a_value_its_column_cannot_take_is_rejected_at_write_and_the_rest_committed() -> None:
    _, writer, api = make(grouping_factor=10)
    writer.write(event(2), 1)
    writer.write(Mutation.insert_or_update("Events", {"id": 1, "n": 2.5}), "bad")
    writer.write(Mutation.delete("Events", ("x", "y")), "bad key")  # a key of two values
    writer.write(event(1), 3)
    failures = writer.flush()
    assert [f.record_repr for f in failures] == ["'bad'", "'bad key'"]
    assert "column n (INT64) cannot take float 2.5" in failures[0].reason
    assert [k for c in committed(api) for _, _, k in c] == ["1", "2"]


def test_a_rejected_row_in_a_grouped_commit_is_isolated() -> None:
    _, writer, api = make(reject_kind("bad"), grouping_factor=10)
    for i in range(20):
        writer.write(event(19 - i, kind="bad" if i == 7 else "k"), i)
    failures = writer.flush()
    assert [f.record_repr for f in failures] == ["7"]
    assert sorted(int(k) for c in committed(api) for _, _, k in c) == [
        i for i in range(20) if i != 12
    ]


def test_rows_bound_commits_without_grouping_too_in_arrival_order() -> None:
    _, writer, api = make(max_rows_per_commit=3)
    for i in (5, 1, 4, 2, 3, 0, 9):
        writer.write(event(i), i)
    writer.write(Mutation.delete("Events", [7, 8]), "two keys")
    assert writer.flush() == []
    assert [[k for _, _, k in c] for c in committed(api)] == [
        ["5", "1", "4"],
        ["2", "3", "0"],
        ["9", "7", "8"],  # the delete's two keys fill the commit's three rows
    ]


# -- commit options ---------------------------------------------------------------------------


def test_max_commit_delay_is_sent_with_every_commit() -> None:
    _, writer, api = make(max_commit_delay=timedelta(milliseconds=100), max_rows_per_commit=1)
    writer.write(event(1), 1)
    writer.write(event(2), 2)
    assert writer.flush() == []
    assert [c.max_commit_delay.ToTimedelta() for c in api.commits] == [
        timedelta(milliseconds=100)
    ] * 2
    _, writer, api = make()
    writer.write(event(1), 1)
    writer.flush()
    assert not api.commits[0].HasField("max_commit_delay")


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        # Durations read as written, not as timedelta's microseconds.
        ("max_commit_delay", timedelta(milliseconds=600), r"at most 500 ms .*, got 600 ms$"),
        ("max_commit_delay", timedelta(milliseconds=-1), ">= 0, got -1 ms$"),
        ("max_commit_delay", 100, "a datetime.timedelta"),
        ("grouping_factor", 0, ">= 1"),
        ("max_rows_per_commit", 0, ">= 1"),
        ("max_cumulative_backoff", timedelta(0), "positive"),
    ],
)
def test_the_new_options_are_validated(name: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=f"SpannerWriterOptions.{name} must be.*{message}"):
        SpannerWriterOptions(**{name: value})
    assert SpannerWriterOptions(max_commit_delay=timedelta(0)).max_commit_delay == timedelta(0)


def test_max_cumulative_backoff_ends_the_retries_of_a_commit() -> None:
    _, writer, api = make(
        lambda pb: gexc.ServiceUnavailable("down"),
        max_cumulative_backoff=timedelta(milliseconds=300),
    )
    writer.write(event(1), 1)
    start = time.monotonic()
    with pytest.raises(WriteError, match=r"max_cumulative_backoff 0.3s\).*UNAVAILABLE"):
        writer.flush()
    assert time.monotonic() - start < 5  # the retry deadline (2 min) did not end it
    assert not api.commits
