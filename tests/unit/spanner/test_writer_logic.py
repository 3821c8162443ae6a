"""The Spanner writer's logic against a fake Spanner API: counting, batching, splitting, retries."""

from __future__ import annotations

import pickle
import time
from types import SimpleNamespace
from typing import Any

import cloudpickle
import pytest
from google.api_core import exceptions as gexc
from google.cloud.spanner_v1.types import CommitRequest

from pyflink_gcp.core import (
    ConfigurationError,
    DestinationNotFoundError,
    FailureHandler,
    RecordRejectedError,
    SerializerError,
    SubtaskInfo,
    WriteError,
)
from pyflink_gcp.core.sink_writer import SinkWriter
from pyflink_gcp.spanner import (
    DatabaseDestination,
    KeyRange,
    Mutation,
    SpannerSink,
    SpannerWriterOptions,
)
from pyflink_gcp.spanner.schema import (
    COLUMNS_SQL,
    INDEX_COLUMNS_SQL,
    TABLES_SQL,
    Column,
    DatabaseSchema,
    Index,
    read_schema,
)
from pyflink_gcp.spanner.writer import SpannerWriter, SpannerWriterFactory

DB = DatabaseDestination.of("p", "inst", "db")

# -- the schema and the counting rule --------------------------------------------------------

_ROWS = {
    TABLES_SQL: [["", "Events"], ["", "Audit"], ["sales", "Orders"]],
    COLUMNS_SQL: [
        ["", "Events", "id", "INT64", "NEVER"],
        ["", "Events", "kind", "STRING(16)", "NEVER"],
        ["", "Events", "score", "FLOAT64", "NEVER"],
        ["", "Events", "n", "INT64", "NEVER"],
        ["", "Events", "kind_upper", "STRING(16)", "ALWAYS"],
        ["", "Audit", "id", "INT64", "NEVER"],
        ["", "Audit", "who", "STRING(32)", "NEVER"],
        ["", "SomeView", "id", "INT64", "NEVER"],
        ["sales", "Orders", "region", "STRING(8)", "NEVER"],
        ["sales", "Orders", "num", "INT64", "NEVER"],
    ],
    INDEX_COLUMNS_SQL: [
        ["", "Events", "PRIMARY_KEY", "PRIMARY_KEY", "id", "1"],
        ["", "Events", "ByKind", "INDEX", "kind", "1"],
        ["", "Events", "ByKind", "INDEX", "score", None],  # STORING
        ["", "Events", "ByN", "INDEX", "n", "1"],
        ["", "Audit", "PRIMARY_KEY", "PRIMARY_KEY", "id", "1"],
        ["sales", "Orders", "PRIMARY_KEY", "PRIMARY_KEY", "num", "2"],
        ["sales", "Orders", "PRIMARY_KEY", "PRIMARY_KEY", "region", "1"],
    ],
}


def schema() -> DatabaseSchema:
    return read_schema(lambda sql: _ROWS[sql])


def test_schema_reads_tables_keys_indexes_and_skips_views() -> None:
    s = schema()
    assert s.table_names() == ["Audit", "Events", "sales.Orders"]
    events = s.table("EVENTS")
    assert events is not None and s.table("SomeView") is None
    assert [c.name for c in events.key] == ["id"]
    assert events.indexes == (
        Index("ByKind", frozenset({"kind", "score"})),
        Index("ByN", frozenset({"n"})),
    )
    assert events.column("Kind_Upper") == Column("kind_upper", "STRING(16)", True)
    orders = s.table("sales.orders")
    assert orders is not None and [c.name for c in orders.key] == ["region", "num"]


def test_counting_rule_columns_plus_touched_indexes() -> None:
    events = schema().table("Events")
    assert events is not None
    # Inserts may create a row: every index changes (ByKind: 2 columns + 1, ByN: 1 + 1).
    for op in ("insert", "insert_or_update", "replace"):
        assert events.write_cost(op, ["id", "kind"]) == 2 + 3 + 2
    # Updates change only the indexes holding a column they set.
    assert events.write_cost("update", ["id", "score"]) == 2 + 3
    assert events.write_cost("update", ["ID", "N"]) == 2 + 2
    assert events.write_cost("update", ["id"]) == 1
    # A delete counts one, plus one per secondary index (per deleted row).
    assert events.delete_cost == 3
    audit = schema().table("Audit")
    assert audit is not None
    assert (audit.write_cost("insert", ["id", "who"]), audit.delete_cost) == (2, 1)


# -- a fake Spanner API behind the real factory ---------------------------------------------


class FakeApi:
    """Stands in for the GAPIC client: records commits, fails on demand."""

    def __init__(self, fail: Any = None) -> None:
        self.fail = fail  # (request_pb) -> exception or None
        self.commits: list[Any] = []
        self.sessions = 0
        self.deleted: list[str] = []

    def create_session(self, **kwargs: Any) -> Any:
        self.sessions += 1
        return SimpleNamespace(name=f"sessions/{self.sessions}")

    def delete_session(self, name: str, **kwargs: Any) -> None:
        self.deleted.append(name)

    def commit(self, request: Any, retry: Any, timeout: float, metadata: Any) -> None:
        pb = CommitRequest.pb(request)
        if self.fail is not None:
            exc = self.fail(pb)
            if exc is not None:
                raise exc
        copy = type(pb)()
        copy.CopyFrom(pb)
        self.commits.append(copy)

    def rows(self) -> list[tuple[str, str, str]]:
        """(operation, table, first value) of every committed row or key, in commit order."""
        out = []
        for c in self.commits:
            for m in c.mutations:
                op = m.WhichOneof("operation")
                body = getattr(m, op)
                if op == "delete":
                    for key in body.key_set.keys:
                        out.append((op, body.table, key.values[0].string_value))
                    for _ in body.key_set.ranges:
                        out.append((op, body.table, "range"))
                else:
                    for row in body.values:
                        out.append((op, body.table, row.values[0].string_value))
        return out

    def transport(self) -> None:  # pragma: no cover - close() looks it up
        pass


def make(
    fail: Any = None, *, fail_fast: bool = False, **options: Any
) -> tuple[SpannerWriterFactory, SpannerWriter, FakeApi]:
    factory = SpannerWriterFactory(
        sink_name="unit",
        database=DB,
        options=SpannerWriterOptions(**options),
        fail_fast=fail_fast,
    )
    api = FakeApi(fail)
    factory.api = api
    factory.schema = schema()
    return factory, factory.create_writer(DB), api


def event(i: int, **extra: Any) -> Mutation:
    return Mutation.insert_or_update("Events", {"id": i, "kind": "k", **extra})


def ids(api: FakeApi) -> list[int]:
    return [int(v) for op, _, v in api.rows() if op != "delete"]


def test_one_commit_holds_all_tables_in_arrival_order() -> None:
    _, writer, api = make()
    writer.write(event(1), 1)
    writer.write(event(2), 2)
    writer.write(Mutation.insert_or_update("Audit", {"id": 3, "who": "x"}), 3)
    writer.write(Mutation.delete("Events", [1, KeyRange.closed(5, 9)]), 4)
    writer.write(event(5), 5)
    assert not writer.is_clean
    assert writer.flush() == []
    assert writer.is_clean
    assert len(api.commits) == 1
    (request,) = api.commits
    # Consecutive rows of one shape share a Mutation message; nothing is reordered.
    assert [m.WhichOneof("operation") for m in request.mutations] == [
        "insert_or_update",
        "insert_or_update",
        "delete",
        "insert_or_update",
    ]
    assert api.rows() == [
        ("insert_or_update", "Events", "1"),
        ("insert_or_update", "Events", "2"),
        ("insert_or_update", "Audit", "3"),
        ("delete", "Events", "1"),
        ("delete", "Events", "range"),
        ("insert_or_update", "Events", "5"),
    ]
    assert request.session == "sessions/1"
    assert request.single_use_transaction.HasField("read_write")


def test_commits_never_exceed_the_mutation_budget() -> None:
    # insert_or_update(id, kind) counts 2 + 3 (ByKind) + 2 (ByN) = 7.
    _, writer, api = make(max_mutations_per_commit=50)
    for i in range(100):
        writer.write(event(i), i)
    writer.write(Mutation.delete("Events", [1, 2, 3]), "three keys")  # 3 x 3
    assert writer.flush() == []
    sizes = [len(c.mutations[0].insert_or_update.values) for c in api.commits[:-1]]
    assert sizes == [7] * 14  # 49 mutations each
    assert writer.mutations_committed == 100 * 7 + 9
    assert ids(api) == list(range(100))


def test_an_idle_committer_takes_a_batch_before_the_flush() -> None:
    # Group commit: 1/8 of the budget (1,000 mutations, 143 rows) is enough to start a commit
    # when none is running, so commits overlap the processing of the next records.
    _, writer, api = make(max_mutations_per_commit=8_000)
    for i in range(1_000):
        writer.write(event(i), i)
    deadline = time.monotonic() + 5
    while not api.commits and time.monotonic() < deadline:
        time.sleep(0.01)
    assert api.commits, "nothing was committed before the flush"
    assert writer.flush() == []
    assert ids(api) == list(range(1_000))
    assert all(c.mutations[0].insert_or_update.values for c in api.commits)


def test_commits_never_exceed_the_byte_budget() -> None:
    _, writer, api = make(max_commit_bytes=800)
    for i in range(40):
        writer.write(event(i, kind="x" * 16), i)
    writer.flush()
    assert len(api.commits) > 1
    assert all(c.ByteSize() <= 800 for c in api.commits)
    assert ids(api) == list(range(40))


def test_a_record_over_the_budget_is_committed_alone() -> None:
    _, writer, api = make(max_mutations_per_commit=5)
    writer.write(Mutation.insert_or_update("Audit", {"id": 1, "who": "a"}), 1)
    writer.write(event(2), 2)  # counts 7 > 5: alone in its commit
    writer.write(Mutation.insert_or_update("Audit", {"id": 3, "who": "a"}), 3)
    writer.flush()
    assert [len(c.mutations) for c in api.commits] == [1, 1, 1]


def test_several_mutations_of_one_record_share_a_commit() -> None:
    _, writer, api = make(max_mutations_per_commit=20)
    writer.write(event(1), 1)
    writer.write(event(2), 2)
    writer.write([event(3), Mutation.delete("Events", 3), event(4)], "three")  # 7 + 3 + 7
    writer.flush()
    assert len(api.commits) == 2
    assert len(api.commits[1].mutations) == 3


def _reject_kind(bad: str, exc: type[Exception] = gexc.FailedPrecondition) -> Any:
    def fail(pb: Any) -> Exception | None:
        for m in pb.mutations:
            body = getattr(m, m.WhichOneof("operation"))
            if m.WhichOneof("operation") != "delete":
                for row in body.values:
                    if len(row.values) > 1 and row.values[1].string_value == bad:
                        return exc(f"Cannot write {bad}")
        return None

    return fail


def test_a_rejected_commit_is_split_until_the_bad_records_are_alone() -> None:
    _, writer, api = make(_reject_kind("bad"))
    for i in range(64):
        writer.write(event(i, kind="bad" if i in (9, 40) else "ok"), {"i": i})
    failures = writer.flush()
    assert [f.record_repr for f in failures] == ["{'i': 9}", "{'i': 40}"]
    assert failures[0].reason == "table Events: FAILED_PRECONDITION: Cannot write bad"
    assert failures[0].destination == str(DB)
    assert failures[0].attributes == {"table": "Events", "operation": "insert_or_update"}
    assert sorted(ids(api)) == [i for i in range(64) if i not in (9, 40)]
    assert ids(api) == sorted(ids(api))  # halves committed in order
    assert writer.split_commits > 0 and writer.is_clean


def test_fail_fast_stops_splitting_at_the_first_bad_record() -> None:
    _, writer, api = make(_reject_kind("bad"), fail_fast=True)
    for i in range(64):
        writer.write(event(i, kind="bad" if i in (9, 40) else "ok"), i)
    assert [f.record_repr for f in writer.flush()] == ["9"]


def test_too_many_mutations_is_split_without_blaming_records() -> None:
    # Spanner counted more than the writer did (say, a range delete): smaller commits succeed.
    def fail(pb: Any) -> Exception | None:
        rows = sum(len(m.insert_or_update.values) for m in pb.mutations)
        if rows > 10:
            return gexc.InvalidArgument("The transaction contains too many mutations.")
        return None

    _, writer, api = make(fail)
    for i in range(40):
        writer.write(event(i), i)
    assert writer.flush() == []
    assert ids(api) == list(range(40))
    assert all(len(c.mutations[0].insert_or_update.values) <= 10 for c in api.commits)


def test_transient_errors_are_retried_then_fail_the_job() -> None:
    attempts = {"n": 0}

    def flaky(pb: Any) -> Exception | None:
        attempts["n"] += 1
        return gexc.Aborted("aborted due to active transaction") if attempts["n"] <= 3 else None

    _, writer, api = make(flaky)
    writer.write(event(1), 1)
    assert writer.flush() == []
    assert attempts["n"] == 4 and len(api.commits) == 1

    _, writer, _ = make(lambda pb: gexc.ServiceUnavailable("down"), retry_deadline=0.2)
    writer.write(event(1), 1)
    with pytest.raises(WriteError, match="still failing after .* UNAVAILABLE"):
        writer.flush()


def test_permanent_errors_fail_the_job_and_later_batches_are_abandoned() -> None:
    _, writer, api = make(
        lambda pb: gexc.PermissionDenied("no"), max_mutations_per_commit=7, max_pending_commits=5
    )
    for i in range(3):
        writer.write(event(i), i)
    with pytest.raises(WriteError, match="PERMISSION_DENIED"):
        writer.flush()
    assert api.commits == []


def test_an_expired_session_is_replaced() -> None:
    calls = {"n": 0}

    def expire_once(pb: Any) -> Exception | None:
        calls["n"] += 1
        return gexc.NotFound(f"Session not found: {pb.session}") if calls["n"] == 1 else None

    factory, writer, api = make(expire_once)
    writer.write(event(1), 1)
    assert writer.flush() == []
    assert api.sessions == 2 and api.commits[0].session == "sessions/2"


def test_a_table_dropped_under_the_job_is_not_a_record_failure() -> None:
    _, writer, _ = make(lambda pb: gexc.NotFound("Table not found: Events"))
    writer.write(event(1), 1)
    with pytest.raises(DestinationNotFoundError, match="Table not found: Events.*dropped"):
        writer.flush()


def test_bad_elements_and_names_are_clear_errors() -> None:
    factory, writer, _ = make()
    factory.refresh_schema = lambda: factory.schema  # type: ignore[method-assign]
    with pytest.raises(SerializerError, match=r"returned dict .* for record 'r'.*Mutation"):
        writer.write({"id": 1}, "r")
    with pytest.raises(DestinationNotFoundError, match="table 'Nope' does not exist.*Audit"):
        writer.write(Mutation.insert_or_update("Nope", {"id": 1}), "r")
    with pytest.raises(SerializerError, match=r"column\(s\) 'zz' do not exist in table 'Events'"):
        writer.write(event(1, zz=1), "r")
    with pytest.raises(SerializerError, match="'kind_upper' of table 'Events' are generated"):
        writer.write(event(1, kind_upper="K"), "r")
    with pytest.raises(SerializerError, match="appears twice"):
        writer.write(Mutation("insert", "Events", ("id", "ID"), (1, 1)), "r")


def test_wrong_values_and_keys_go_to_the_failure_handler() -> None:
    _, writer, api = make()
    writer.write(event(1, n=2.5), "float in INT64")
    writer.write(Mutation.delete("sales.Orders", 5), "short key")
    writer.write(Mutation.delete("sales.Orders", ("eu", 1.5)), "bad key value")
    writer.write([event(2), event(3, score=[1])], "second part bad")
    writer.write(event(4), "good")
    failures = writer.flush()
    assert [f.reason for f in failures] == [
        "table Events: column n (INT64) cannot take float 2.5",
        "table sales.Orders: key (5,) has 1 value(s), the primary key has 2 (region, num)",
        "table sales.Orders: a key of [('eu', 1.5)] does not fit the primary key "
        "(region STRING(8), num INT64)",
        "table Events: column score (FLOAT64) cannot take list [1]",
    ]
    assert ids(api) == [4]  # the partly encoded record left nothing behind


def test_a_wrong_value_inside_a_run_of_rows_drops_only_that_row() -> None:
    # Rows of one shape share a Mutation message; a rejected one must leave no row behind and
    # the next rows must still join the same message.
    _, writer, api = make()
    writer.write(event(1, n=1), 1)
    writer.write(event(2, n="x" * 3), "str parses as INT64 on Spanner's side")
    writer.write(event(3, n=2.5), "float in INT64")
    writer.write(event(4, n=4), 4)
    failures = writer.flush()
    assert [f.record_repr for f in failures] == ["'float in INT64'"]
    assert ids(api) == [1, 2, 4]
    assert len(api.commits) == 1 and len(api.commits[0].mutations) == 1


def test_a_run_of_rows_over_the_byte_budget_moves_the_row_to_the_next_commit() -> None:
    _, writer, api = make(max_commit_bytes=600)
    for i in range(30):
        writer.write(event(i, kind="y" * 12), i)
    assert writer.flush() == []
    assert len(api.commits) > 1
    assert all(c.ByteSize() <= 600 for c in api.commits)
    assert ids(api) == list(range(30))


def test_an_aborted_commit_first_waits_about_one_commit() -> None:
    factory, _, _ = make()
    policy = factory.retry_aborted
    assert factory._aborted_backoffs()._next == policy.initial_backoff_s  # nothing measured yet
    factory.commit_seconds = 0.04
    assert factory._aborted_backoffs()._next == 0.04
    factory.commit_seconds = 30.0  # bounded: a slow commit does not stall the retry
    assert factory._aborted_backoffs()._next == policy.max_backoff_s


def test_the_factory_travels_without_clients() -> None:
    factory, _, _ = make()
    copy = pickle.loads(cloudpickle.dumps(factory))
    assert copy.api is None and copy.database == DB and copy.schema.tables == {}
    assert copy.options == factory.options


# -- the sink builder and the core's writer with it ------------------------------------------


def test_builder_requires_database_and_serializer() -> None:
    with pytest.raises(ConfigurationError, match="set_database"):
        SpannerSink.builder().set_serializer(lambda r, c: None).build()
    with pytest.raises(ConfigurationError, match="set_serializer"):
        SpannerSink.builder().set_database(DB).build()
    with pytest.raises(ConfigurationError, match="DatabaseDestination.of"):
        SpannerSink.builder().set_database("projects/p/instances/i/databases/d")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="SpannerWriterOptions"):
        SpannerSink.builder().set_writer_options({"max": 1})  # type: ignore[arg-type]


def test_builder_rejects_serializers_that_cannot_travel() -> None:
    import threading

    lock = threading.Lock()
    with pytest.raises(ConfigurationError, match="not picklable.*'lock'"):
        SpannerSink.builder().set_database(DB).set_serializer(lambda r, c: lock and None).build()


def test_sink_config_has_a_fixed_database_and_no_resolver() -> None:
    sink = (
        SpannerSink.builder()
        .set_database(DB)
        .set_serializer(lambda r, c: None)
        .set_writer_options(SpannerWriterOptions.builder().flush_interval(0.5).build())
        .set_failure_handler(FailureHandler.log_and_drop())
        .set_sink_name("events-to-spanner")
        .build()
    )
    config = sink._sink_config()
    assert config.resolver is None and config.fixed_destination == DB
    assert config.max_buffer_time_ms == 500 and config.sink_name == "events-to-spanner"
    assert sink.database == DB and sink.writer_factory.fail_fast is False
    assert pickle.loads(cloudpickle.dumps(sink._sink_config())).factory.database == DB


def one_arg(record: dict[str, Any]) -> Mutation | None:
    return None if record.get("skip") else event(record["id"])


def test_core_writer_drives_the_spanner_writer() -> None:
    sink = SpannerSink.builder().set_database(DB).set_serializer(one_arg).build()
    config = sink._sink_config()
    api = FakeApi(_reject_kind("bad"))

    def opened(info: SubtaskInfo) -> None:
        config.factory.api = api
        config.factory.schema = schema()

    config.factory.open = opened  # type: ignore[method-assign]
    core = SinkWriter(config)
    core.open(SubtaskInfo("spanner-sink"))
    core.write({"id": 1})
    core.write({"id": 2, "skip": True})
    core.flush()
    assert ids(api) == [1] and core.skipped == 1
    core.write({"id": 3, "kind": "x"})  # the one-argument serializer was adapted
    core.flush()
    assert ids(api) == [1, 3]

    bad = SpannerSink.builder().set_database(DB).set_serializer(lambda r, c: "text").build()
    bad_config = bad._sink_config()
    bad_config.factory.open = opened  # type: ignore[method-assign]
    core = SinkWriter(bad_config)
    core.open(SubtaskInfo("spanner-sink"))
    with pytest.raises(SerializerError, match="sink 'spanner-sink'.*returned str.*record 5"):
        core.write(5)


def test_fail_job_handler_fails_on_a_rejected_record() -> None:
    sink = (
        SpannerSink.builder()
        .set_database(DB)
        .set_serializer(lambda r, c: event(r, kind="bad" if r == 3 else "ok"))
        .build()
    )
    config = sink._sink_config()
    api = FakeApi(_reject_kind("bad"))

    def opened(info: SubtaskInfo) -> None:
        config.factory.api = api
        config.factory.schema = schema()

    config.factory.open = opened  # type: ignore[method-assign]
    core = SinkWriter(config)
    core.open(SubtaskInfo("spanner-sink"))
    for i in range(5):
        core.write(i)
    with pytest.raises(RecordRejectedError, match="rejected record 3: table Events"):
        core.flush()
