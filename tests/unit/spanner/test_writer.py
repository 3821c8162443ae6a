"""The Spanner writer against a fake Spanner API: batching, budgets, splitting, failures."""

from __future__ import annotations

import pickle
import time
from typing import Any

import cloudpickle
import pytest
from google.api_core import exceptions as gexc

from pyflink_gcp.core import DestinationNotFoundError, SerializerError, WriteError
from pyflink_gcp.spanner import KeyRange, Mutation
from tests.unit.spanner.fakes import DB, event, ids, make, reject_kind


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


def test_a_rejected_commit_is_split_until_the_bad_records_are_alone() -> None:
    _, writer, api = make(reject_kind("bad"))
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
    _, writer, api = make(reject_kind("bad"), fail_fast=True)
    for i in range(64):
        writer.write(event(i, kind="bad" if i in (9, 40) else "ok"), i)
    assert [f.record_repr for f in writer.flush()] == ["9"]
    # The halves before the bad record were committed; nothing after it (the job fails).
    assert ids(api) == list(range(9))


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


def test_a_record_spanner_refuses_even_alone_goes_to_the_failure_handler() -> None:
    # A record over Spanner's commit limits is committed alone; refused alone too, it is the
    # record's fault, and the rest of the batch is committed.
    def fail(pb: Any) -> Exception | None:
        for m in pb.mutations:
            for row in m.insert_or_update.values:
                if len(row.values) > 1 and len(row.values[1].string_value) > 1_000:
                    return gexc.InvalidArgument("The transaction exceeds the size limit.")
        return None

    _, writer, api = make(fail)
    for i in range(8):
        writer.write(event(i, kind="x" * 5_000 if i == 3 else "k"), i)
    [failed] = writer.flush()
    assert failed.record_repr == "3"
    assert (
        failed.reason == "table Events: INVALID_ARGUMENT: The transaction exceeds the size limit."
    )
    assert failed.destination == str(DB)
    assert sorted(ids(api)) == [0, 1, 2, 4, 5, 6, 7]


def test_permanent_errors_fail_the_job_and_later_batches_are_abandoned() -> None:
    _, writer, api = make(
        lambda pb: gexc.PermissionDenied("no"), max_mutations_per_commit=7, max_in_flight_requests=5
    )
    for i in range(3):
        writer.write(event(i), i)
    with pytest.raises(WriteError, match="PERMISSION_DENIED"):
        writer.flush()
    assert api.commits == []


def test_a_table_dropped_under_the_job_is_not_a_record_failure() -> None:
    # Not the records' fault: the job fails at once, without splitting the commit.
    _, writer, api = make(lambda pb: gexc.NotFound("Table not found: Events"))
    for i in range(8):
        writer.write(event(i), i)
    with pytest.raises(
        DestinationNotFoundError, match="commit of 8 record.*Table not found: Events.*dropped"
    ):
        writer.flush()
    assert writer.split_commits == 0 and api.commits == []


def test_a_missing_row_is_a_record_failure() -> None:
    # NOT_FOUND of a row (an update of a key that does not exist) is the record's fault.
    def fail(pb: Any) -> Exception | None:
        for m in pb.mutations:
            if m.WhichOneof("operation") == "update":
                return gexc.NotFound("Row [7] in table Events is missing. Row cannot be updated.")
        return None

    _, writer, api = make(fail)
    writer.write(event(1), 1)
    writer.write(Mutation.update("Events", {"id": 7, "n": 1}), "update 7")
    writer.write(event(2), 2)
    failures = writer.flush()
    assert [f.record_repr for f in failures] == ["'update 7'"]
    assert failures[0].reason.startswith("table Events: NOT_FOUND: Row [7]")
    assert failures[0].attributes == {"table": "Events", "operation": "update"}
    assert ids(api) == [1, 2]


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


def test_the_factory_travels_without_clients() -> None:
    factory, _, _ = make()
    copy = pickle.loads(cloudpickle.dumps(factory))
    assert copy.api is None and copy.database == DB and copy.schema.tables == {}
    assert copy.session is None and copy.committer is None
    assert copy.options == factory.options
    assert (copy.sink_name, copy.endpoint, copy.fail_fast) == ("unit", None, False)


def test_bytes_accepted_counts_the_encoded_rows_of_accepted_records() -> None:
    _, writer, api = make(max_mutations_per_commit=50)
    for i in range(20):
        writer.write(event(i), i)
    accepted = writer.bytes_accepted
    writer.write(event(99, n=2.5), "float in INT64")  # refused at encoding: no bytes
    assert writer.bytes_accepted == accepted
    writer.flush()
    # Each commit's rows plus its request framing: the rows alone are a little less.
    committed = sum(c.ByteSize() for c in api.commits)
    assert 0.5 * committed < writer.bytes_accepted <= committed
