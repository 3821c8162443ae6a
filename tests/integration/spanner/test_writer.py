"""The Spanner writer against the emulator, without Flink: batching, counting, failures, types."""

from __future__ import annotations

import base64
import datetime
import decimal
import threading
import uuid
from typing import Any

import pytest

from pyflink_gcp.core import DestinationNotFoundError, SerializerError
from pyflink_gcp.spanner import KeyRange, Mutation, SpannerWriterOptions
from pyflink_gcp.spanner.writer import SpannerWriter, SpannerWriterFactory
from tests.integration.spanner.support import create_tables, open_writer, query, unique

pytestmark = pytest.mark.integration


class CountingWriter(SpannerWriter):
    """Records the mutation count of every commit the writer makes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.counted: list[int] = []

    def _commit_rpc(self, request: Any, records: int, mutations: int) -> None:
        self.counted.append(mutations)
        super()._commit_rpc(request, records, mutations)


class CountingFactory(SpannerWriterFactory):
    def create_writer(self, destination: Any, writer_type: Any = None) -> SpannerWriter:
        return super().create_writer(destination, writer_type or CountingWriter)


@pytest.fixture(scope="module")
def tables(stack: Any) -> dict[str, str]:
    """Events (with a secondary index storing a column) and Audit (no index)."""
    events, audit = unique("ItEvents"), unique("ItAudit")
    create_tables(
        [
            f"CREATE TABLE {events} (id INT64 NOT NULL, kind STRING(16) NOT NULL, "
            "score FLOAT64, n INT64) PRIMARY KEY (id)",
            f"CREATE INDEX {events}_ByKind ON {events}(kind) STORING (score)",
            f"CREATE TABLE {audit} (id INT64 NOT NULL, who STRING(32) NOT NULL, what STRING(MAX)) "
            "PRIMARY KEY (id)",
        ]
    )
    return {"events": events, "audit": audit}


def event(table: str, i: int, kind: str = "click") -> Mutation:
    return Mutation.insert_or_update(table, {"id": i, "kind": kind, "score": i / 2, "n": i})


def test_commits_are_cut_by_the_mutation_count_with_indexes(tables: dict[str, str]) -> None:
    # An upsert of 4 columns counts 4, plus the index (kind, score) it may change: 2 + 1.
    options = SpannerWriterOptions.builder().max_mutations_per_commit(70).build()
    factory, writer = open_writer(options, factory_class=CountingFactory)
    try:
        assert isinstance(writer, CountingWriter)
        table = factory.schema.table(tables["events"])
        assert table is not None
        assert table.write_cost("insert_or_update", ["id", "kind", "score", "n"]) == 7
        for i in range(100):
            writer.write(event(tables["events"], i), {"i": i})
        assert writer.flush() == []
        # 700 mutations, 70 per commit: 10 commits of exactly 10 rows (4 columns alone would
        # have made 6 commits of 17 rows).
        assert writer.counted == [70] * 10
        assert writer.commits == 10
        assert writer.is_clean
        assert query(f"SELECT COUNT(*) FROM {tables['events']} WHERE id < 100") == [[100]]
    finally:
        writer.close()
        factory.close()


def test_tables_interleave_in_one_commit_in_order_with_deletes(tables: dict[str, str]) -> None:
    events, audit = tables["events"], tables["audit"]
    # A budget far above this test's 2,400 mutations: one commit, even committed early.
    options = SpannerWriterOptions.builder().max_mutations_per_commit(80_000).build()
    factory, writer = open_writer(options, factory_class=CountingFactory)
    try:
        for i in range(1000, 1300):
            writer.write(event(events, i), i)
            if i % 3 == 0:
                writer.write(Mutation.insert_or_update(audit, {"id": i, "who": "ann"}), i)
        # A row written and deleted in the same record, rows deleted by key and by range, and
        # a row rewritten after its delete: all in one commit, applied in arrival order.
        writer.write([event(events, 5000), Mutation.delete(events, 5000)], "write+delete")
        writer.write(Mutation.delete(events, [1000, 1001]), "two keys")
        writer.write(Mutation.delete(events, KeyRange.closed_open(1010, 1020)), "a range")
        writer.write(Mutation.delete(events, 1100), "delete 1100")
        writer.write(event(events, 1100, kind="again"), "rewrite 1100")
        writer.write(Mutation.update(events, {"id": 1101, "n": -1}), "update")
        assert writer.flush() == []
        assert isinstance(writer, CountingWriter) and len(writer.counted) == 1
    finally:
        writer.close()
        factory.close()
    ids = {r[0] for r in query(f"SELECT id FROM {events} WHERE id >= 1000")}
    expected = set(range(1000, 1300)) - {1000, 1001} - set(range(1010, 1020))
    assert ids == expected
    assert query(f"SELECT kind, n FROM {events} WHERE id IN (1100, 1101) ORDER BY id") == [
        ["again", 1100],
        ["click", -1],
    ]
    assert query(f"SELECT COUNT(*) FROM {audit} WHERE id >= 1000") == [[100]]


def test_record_shaped_failures_are_isolated_by_splitting(tables: dict[str, str]) -> None:
    events = tables["events"]
    factory, writer = open_writer(fail_fast=False)
    try:
        writer.write(Mutation.insert(events, {"id": 2000, "kind": "x"}), "existing row")
        assert writer.flush() == []
        bad = {
            2010: Mutation.insert_or_update(events, {"id": 2010, "kind": None}),  # NOT NULL
            2020: Mutation.insert_or_update(events, {"id": 2020, "kind": "k" * 17}),  # too long
            2030: Mutation.insert(events, {"id": 2000, "kind": "again"}),  # ALREADY_EXISTS
            2040: Mutation.update(events, {"id": 999_999, "n": 1}),  # NOT_FOUND
            2050: Mutation.insert_or_update(events, {"id": 2050, "kind": 7}),  # wrong type
        }
        for i in range(2001, 2100):
            writer.write(bad.get(i, event(events, i)), {"i": i})
        failures = writer.flush()
        assert writer.split_commits > 0
        assert writer.is_clean
    finally:
        writer.close()
        factory.close()
    assert sorted(f.record_repr for f in failures) == sorted(repr({"i": i}) for i in bad)
    reasons = {f.record_repr: f.reason for f in failures}
    assert "FAILED_PRECONDITION" in reasons[repr({"i": 2010})]
    assert "ALREADY_EXISTS" in reasons[repr({"i": 2030})]
    assert "NOT_FOUND" in reasons[repr({"i": 2040})]
    assert "column kind (STRING(16)) cannot take int 7" in reasons[repr({"i": 2050})]
    assert all(f.attributes["table"] == events for f in failures)
    assert b'"kind":7' in next(f.payload for f in failures if "int 7" in f.reason)
    ids = {r[0] for r in query(f"SELECT id FROM {events} WHERE id > 2000 AND id < 2100")}
    assert ids == set(range(2001, 2100)) - set(bad)


def test_fail_fast_stops_at_the_first_rejected_record(tables: dict[str, str]) -> None:
    events = tables["events"]
    factory, writer = open_writer(fail_fast=True)
    try:
        for i in range(3000, 3100):
            kind = None if i in (3040, 3070) else "k"
            writer.write(Mutation.insert_or_update(events, {"id": i, "kind": kind}), i)
        failures = writer.flush()
    finally:
        writer.close()
        factory.close()
    assert [f.record_repr for f in failures] == ["3040"]


def test_unknown_table_and_column_fail_clearly_and_new_tables_are_found(
    tables: dict[str, str],
) -> None:
    factory, writer = open_writer()
    try:
        with pytest.raises(DestinationNotFoundError, match=r"table 'NoSuchTable' does not exist"):
            writer.write(Mutation.insert_or_update("NoSuchTable", {"id": 1}), {"rec": 1})
        with pytest.raises(SerializerError, match=r"column\(s\) 'nope' do not exist.*'rec': 2"):
            writer.write(
                Mutation.insert_or_update(tables["events"], {"id": 1, "nope": 1}), {"rec": 2}
            )
        with pytest.raises(SerializerError, match="must return a Mutation"):
            writer.write({"id": 1}, {"rec": 3})
        # A table created after the writer opened is found by re-reading the schema.
        late = unique("ItLate")
        create_tables([f"CREATE TABLE {late} (id INT64 NOT NULL) PRIMARY KEY (id)"])
        writer.write(Mutation.insert_or_update(late.lower(), {"ID": 1}), "late")
        assert writer.flush() == []
    finally:
        writer.close()
        factory.close()
    assert query(f"SELECT id FROM {late}") == [[1]]


def test_a_session_deleted_under_the_writer_is_replaced(tables: dict[str, str]) -> None:
    factory, writer = open_writer()
    try:
        assert factory.session is not None
        first = factory.session.name()
        factory.api.delete_session(name=first)
        writer.write(event(tables["events"], 4000), 4000)
        assert writer.flush() == []
        assert factory.session.name() != first
    finally:
        writer.close()
        factory.close()
    assert query(f"SELECT id FROM {tables['events']} WHERE id = 4000") == [[4000]]


def test_concurrent_subtasks_retry_the_emulators_aborts(tables: dict[str, str]) -> None:
    # The emulator runs one transaction at a time and aborts the others (ABORTED): both
    # writers must retry until everything is committed.
    audit = tables["audit"]
    options = SpannerWriterOptions.builder().max_mutations_per_commit(300).build()
    errors: list[BaseException] = []

    def run(subtask: int) -> None:
        factory, writer = open_writer(options, subtask=subtask)
        try:
            for i in range(1500):
                key = 10_000 + subtask * 10_000 + i
                writer.write(Mutation.insert_or_update(audit, {"id": key, "who": "w"}), key)
            assert writer.flush() == []
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)
        finally:
            writer.close()
            factory.close()

    threads = [threading.Thread(target=run, args=(s,)) for s in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert query(f"SELECT COUNT(*) FROM {audit} WHERE id >= 10000 AND id < 30000") == [[3000]]


def test_every_column_type_round_trips(stack: Any) -> None:
    table = unique("ItTypes")
    create_tables(
        [
            f"CREATE TABLE {table} (id INT64 NOT NULL, s STRING(MAX), i INT64, f FLOAT64, "
            "f32 FLOAT32, b BOOL, byt BYTES(MAX), ts TIMESTAMP, d DATE, num NUMERIC, j JSON, "
            "u STRING(36), ai ARRAY<INT64>, afl ARRAY<FLOAT64>, ats ARRAY<TIMESTAMP>, "
            "commit_ts TIMESTAMP OPTIONS (allow_commit_timestamp = true)) PRIMARY KEY (id)"
        ]
    )
    aware = datetime.datetime(
        2026, 1, 2, 4, 5, 6, 789000, tzinfo=datetime.timezone(datetime.timedelta(hours=2))
    )
    row = {
        "id": 1,
        "s": "héllo",
        "i": -(2**63),
        "f": float("inf"),
        "f32": 1.5,
        "b": False,
        "byt": b"\x00\xff",
        "ts": aware,
        "d": datetime.date(2026, 1, 2),
        "num": decimal.Decimal("12345.678900001"),
        "j": {"a": [1, 2, {"b": None}]},
        "u": str(uuid.UUID(int=7)),
        "ai": [1, None, 3],
        "afl": [float("nan"), 0.25],
        "ats": [datetime.datetime(2026, 1, 1)],
        "commit_ts": "spanner.commit_timestamp()",
    }
    factory, writer = open_writer()
    try:
        writer.write(Mutation.replace(table, row), "types")
        writer.write(Mutation.insert_or_update(table, {"id": 2}), "nulls")
        assert writer.flush() == []
    finally:
        writer.close()
        factory.close()
    (got,) = query(f"SELECT * FROM {table} WHERE id = 1")
    (
        _id, s, i, f, f32, b, byt, ts, d, num, j, u, ai, afl, ats, commit_ts,
    ) = got  # fmt: skip
    assert (s, i, f, f32, b) == ("héllo", -(2**63), float("inf"), 1.5, False)
    assert base64.b64decode(byt) == b"\x00\xff"  # the client returns BYTES base64-encoded
    assert ts == aware and d == datetime.date(2026, 1, 2)
    assert num == decimal.Decimal("12345.678900001")
    assert j == {"a": [1, 2, {"b": None}]} and u == str(uuid.UUID(int=7))
    assert ai == [1, None, 3] and afl[1] == 0.25 and afl[0] != afl[0]
    assert ats == [datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)]
    assert commit_ts is not None
    assert query(f"SELECT s, j, ai FROM {table} WHERE id = 2") == [[None, None, None]]
