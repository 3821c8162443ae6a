"""``sink.write_with_results(ds)`` in real jobs: what each checkpoint wrote, read back from the
emulators.

- At least once (the default stream): the results' counts add up to the rows each table holds,
  their event-time bounds are the rows' own, and a row BigQuery rejects shows up in the
  failed-records stream instead of a table.
- Exactly once (FILE_LOADS): each result drives a Cloud Tasks sink, one task per committed
  load, and the tasks dispatched match the load jobs the committer ran and the rows loaded.
- Exactly once (BUFFERED_STREAM): each result follows its commit and counts exactly the rows
  that commit flushed to its table, per checkpoint and committer subtask.

Both exactly-once jobs are bounded: the commits of their final checkpoint run after the
operators finished, so those results reach no operator and are logged by the committer
instead; the tests read that log, and the results plus the logged ones add up to the rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import re
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from google.cloud.bigquery import SchemaField
from pyflink.common.watermark_strategy import TimestampAssigner, WatermarkStrategy
from pyflink.datastream.functions import MapFunction

from pyflink_gcp import FailureHandler
from pyflink_gcp.bigquery import (
    BigQueryFileLoadsOptions,
    BigQuerySerializer,
    BigQuerySink,
    BigQueryWriterOptions,
    CreateDisposition,
    TableDestination,
    TableSchema,
    WriteMethod,
)
from pyflink_gcp.cloudtasks import CloudTasksSerializationSchema, CloudTasksSink, QueueDestination
from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.results import WriteResult
from pyflink_gcp.tools.emulators import EmulatorStack
from tests.e2e.bigquery.test_file_loads import Slow, gcs_bucket
from tests.integration.bigquery.support import DailyTables, ids_by_table, make_dataset
from tests.integration.cloudtasks.support import (
    LOCATION,
    create_queues,
    suffix,
    wait_for_dispatches,
)
from tests.support import buffered_streams
from tests.support.file_loads import commit_log, recording
from tests.support.jobs import make_env, record_stream
from tests.support.jsonl import append_json, read_json_lines

pytestmark = pytest.mark.e2e

TABLES = 3
BASE_MS = 1_709_251_200_000  # the first record's event time
BAD_ID = 777  # its amount overflows NUMERIC: BigQuery rejects the row

ORDERS = TableSchema.of(
    [
        SchemaField("id", "INT64", mode="REQUIRED"),
        SchemaField("amount", "NUMERIC"),
    ]
)


def order(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "at": BASE_MS + i * 1_000,
        "amount": "1" + "0" * 40 if i == BAD_ID else f"{i}.25",
    }


class EventTime(TimestampAssigner):
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return int(value["at"])


class ByRemainder:
    """``orders_<id % TABLES>``."""

    def __init__(self, project: str, dataset: str) -> None:
        self.project = project
        self.dataset = dataset

    def resolve(self, record: dict[str, Any], context: Any) -> TableDestination:
        return TableDestination.of(self.project, self.dataset, f"orders_{record['id'] % TABLES}")


class AppendJson(MapFunction):
    """Appends each value (a dataclass) to a JSON-lines file and passes it on."""

    def __init__(self, path: str) -> None:
        self.path = path

    def map(self, value: Any) -> Any:
        append_json(self.path, {"type": type(value).__name__, **_as_dict(value)})
        return value


def _as_dict(value: Any) -> dict[str, Any]:
    data = dataclasses.asdict(value)
    if isinstance(data.get("payload"), bytes):
        data["payload"] = data["payload"].decode()
    return data


def test_at_least_once_results_add_up_to_the_rows_and_a_rejected_row_is_a_failed_record(
    project: str, tmp_path: Path
) -> None:
    count = 2_000
    dataset = make_dataset(project, "results")
    sink = (
        BigQuerySink.builder()
        .set_sink_name("orders-results")
        .set_destination_resolver(ByRemainder(project, dataset))
        .set_serializer(
            BigQuerySerializer.of(lambda r, c: {"id": r["id"], "amount": r["amount"]}, ORDERS)
        )
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_failure_handler(FailureHandler.to_stream())
        .set_writer_options(BigQueryWriterOptions.builder().max_buffered_records(100).build())
        .build()
    )
    env = make_env(
        parallelism=2, checkpoint_ms=300, extra={"python.fn-execution.bundle.size": "50"}
    )
    records = (
        record_stream(env, count, order)
        .map(Slow(every=10, seconds=0.05))
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(EventTime())
        )
    )
    results = sink.write_with_results(records)
    results.map(AppendJson(str(tmp_path / "results.jsonl")))
    results.failed().map(AppendJson(str(tmp_path / "failed.jsonl")))
    env.execute("write results at least once")

    got = read_json_lines(str(tmp_path / "results.jsonl"))
    failed = read_json_lines(str(tmp_path / "failed.jsonl"))
    tables = ids_by_table(project, dataset)
    # The rejected row is in no table and in the failed-records stream, once.
    assert [f["type"] for f in failed] == ["FailedRecord"]
    assert f"'id': {BAD_ID}}}" in failed[0]["record_repr"], failed[0]
    bad_table = f"projects/{project}/datasets/{dataset}/tables/orders_{BAD_ID % TABLES}"
    assert failed[0]["destination"] == bad_table
    assert sum(len(ids) for ids in tables.values()) == count - 1
    assert BAD_ID not in tables[f"orders_{BAD_ID % TABLES}"]

    # Per table, the results add up to the rows; each is one (checkpoint, subtask) and its
    # event times bound the rows it counted.
    assert {r["type"] for r in got} == {"WriteResult"}
    assert len(got) > TABLES * 2, "expected results of several checkpoints"
    by_table: Counter[str] = Counter()
    for result in got:
        assert result["sink"] == "orders-results"
        assert result["method"] == "AT_LEAST_ONCE"
        assert result["count"] > 0
        assert BASE_MS <= result["first_event_time"] <= result["last_event_time"]
        assert result["last_event_time"] < BASE_MS + count * 1_000
        by_table[result["destination"].rsplit("/", 1)[1]] += result["count"]
    keys = [(r["destination"], r["checkpoint_id"], r["subtask"]) for r in got]
    assert len(keys) == len(set(keys))
    assert by_table == {table: len(ids) for table, ids in tables.items()}
    assert len({r["checkpoint_id"] for r in got}) > 2
    first = min(r["first_event_time"] for r in got)
    last = max(r["last_event_time"] for r in got)
    assert (first, last) == (BASE_MS, BASE_MS + (count - 1) * 1_000)


class ResultTaskBody:
    """A result as the JSON body of the task it enqueues."""

    def __call__(self, result: WriteResult) -> bytes:
        return json.dumps(dataclasses.asdict(result)).encode()


AFTER_FINISH = re.compile(
    r"committed (\d+) records to (\S+) \(checkpoint (-?\d+)\) after the operators"
)


class Messages(logging.Handler):
    """The messages of a logger, kept on a handler of its own: the workers run in this
    process, but their harness replaces the root logger's handlers (pytest's among them)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def logged_results() -> Iterator[Messages]:
    """What the runtime logs meanwhile, at INFO (the committers' undelivered results)."""
    runtime = logging.getLogger("pyflink_gcp.runtime")
    level, logged = runtime.level, Messages()
    runtime.addHandler(logged)
    runtime.setLevel(logging.INFO)
    try:
        yield logged
    finally:
        runtime.removeHandler(logged)
        runtime.setLevel(level)


def results_logged(messages: list[str]) -> Counter[tuple[str, int]]:
    """The write results the committers logged because they committed after the operators
    finished, as records per (table, checkpoint)."""
    found: Counter[tuple[str, int]] = Counter()
    for message in messages:
        match = AFTER_FINISH.search(message)
        if match is not None:
            count, destination, checkpoint = match.groups()
            found[(destination.rsplit("/", 1)[1], int(checkpoint))] += int(count)
    return found


def test_file_loads_results_after_each_commit_enqueue_one_task_per_committed_load(
    stack: EmulatorStack, project: str, tmp_path: Path
) -> None:
    count = 3_000
    dataset = make_dataset(project, "resultloads")
    bucket = gcs_bucket(project)
    run = suffix()
    create_queues(stack, [f"loaded-{run}"])
    queue = QueueDestination.of(project, LOCATION, f"loaded-{run}")
    base = f"{stack.receiver_url}/loaded/{run}"
    log = str(tmp_path / "loads.jsonl")
    loads = (
        BigQueryFileLoadsOptions.builder()
        .staging_location(f"gs://{bucket.name}/stage")
        .spool_directory(str(tmp_path / "spool"))
        .min_load_interval(timedelta(0))
        .build()
    )
    sink = recording(
        BigQuerySink.builder()
        .set_sink_name("orders-loads")
        .set_destination_resolver(ByRemainder(project, dataset))
        .set_serializer(
            BigQuerySerializer.of(lambda r, c: {"id": r["id"], "amount": f"{r['id']}.25"}, ORDERS)
        )
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_write_method(WriteMethod.FILE_LOADS)
        .set_file_loads_options(loads)
        .set_writer_options(BigQueryWriterOptions.builder().max_buffered_records(200).build())
        .build(),
        log,
    )
    tasks = (
        CloudTasksSink.builder()
        .set_sink_name("after-loads")
        .set_destination_resolver(lambda result, ctx: queue)
        .set_serializer(
            CloudTasksSerializationSchema.http_target(
                lambda r: f"{base}/{r.destination.rsplit('/', 1)[1]}"
            ).with_body(ResultTaskBody(), content_type="application/json")
        )
        .build()
    )
    env = make_env(
        parallelism=2, checkpoint_ms=400, extra={"python.fn-execution.bundle.size": "50"}
    )
    records = (
        record_stream(env, count, order)
        .map(Slow(every=10, seconds=0.05))
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(EventTime())
        )
    )
    results = sink.write_with_results(records)
    results.map(AppendJson(str(tmp_path / "results.jsonl"))).sink_to(tasks)
    with logged_results() as logged:
        env.execute("file loads results to cloud tasks")

    # BigQuery: every row loaded once. The committer's log: the load jobs it ran.
    tables = ids_by_table(project, dataset)
    assert sum(len(ids) for ids in tables.values()) == count
    assert all(max(ids.values()) == 1 for ids in tables.values())
    # The committer's log: each commit's load jobs, then the commit. Flink commits the final
    # checkpoint (the end of input) after the operators finished, and with it any earlier
    # checkpoint it notified only after the end of input: the results of those commits reach
    # no operator, and the committer logs them (see docs/guarantees.md).
    entries = commit_log(log)
    jobs: list[dict[str, Any]] = []
    loads_of: dict[int, list[dict[str, Any]]] = {}
    for entry in entries:
        if "job" in entry:
            jobs.append(entry)
        elif "commit" in entry:
            loads_of.setdefault(entry["commit"], []).extend(jobs)
            jobs = []
    assert not any(job["found"] for js in loads_of.values() for job in js)  # each ran once
    assert len(loads_of) > 3, "expected loads of several checkpoints"
    loads = Counter(
        (str(TableDestination.from_table_id(job["table"])), commit)
        for commit, js in loads_of.items()
        for job in js
    )
    assert max(loads.values()) == 1  # one load job per table and commit
    undelivered = {
        (f"projects/{project}/datasets/{dataset}/tables/{table}", checkpoint): n
        for (table, checkpoint), n in results_logged(logged.messages).items()
    }
    # Cloud Tasks: one dispatched task per result, one result per committed load.
    emitted = read_json_lines(str(tmp_path / "results.jsonl"))
    delivered = len(loads) - len(undelivered)
    dispatched = wait_for_dispatches(stack, f"/loaded/{run}/", delivered)
    bodies = [json.loads(r["body"]) for r in dispatched]
    reported = Counter((b["destination"], b["checkpoint_id"]) for b in bodies)
    assert max(reported.values()) == 1, "a load was reported twice"
    # The final checkpoint's commit always runs after the finish: its loads are all logged.
    final = max(loads_of)
    assert {load for load in loads if load[1] == final} <= set(undelivered)
    # A table's commits run in checkpoint order, and none after the finish is delivered: each
    # table's logged commits come after all of its delivered ones.
    for table in {destination for destination, _ in undelivered}:
        logged_from = min(c for d, c in undelivered if d == table)
        assert all(c < logged_from for d, c in reported if d == table), (table, reported)
    # Each load is reported once: by a result, or in the log when it ran after the finish.
    assert set(reported) | set(undelivered) == set(loads)
    assert not set(reported) & set(undelivered)
    assert len(emitted) == len(dispatched)
    per_table: Counter[str] = Counter()
    for body in bodies:
        assert body["method"] == "FILE_LOADS" and body["sink"] == "orders-loads"
        assert BASE_MS <= body["first_event_time"] <= body["last_event_time"]
        per_table[body["destination"].rsplit("/", 1)[1]] += body["count"]
    # The counts, the results' and the logged ones, are the rows the loads added.
    for (destination, _), n in undelivered.items():
        per_table[destination.rsplit("/", 1)[1]] += n
    assert per_table == {table: len(ids) for table, ids in tables.items()}
    print(
        f"write results: {len(loads)} loads, {len(dispatched)} tasks dispatched, "
        f"{len(undelivered)} logged after the finish"
    )


DAYS = 5
EVENTS = TableSchema.of([SchemaField("id", "INT64", mode="REQUIRED"), SchemaField("day", "STRING")])


def daily_event(i: int) -> dict[str, Any]:
    return {"id": i, "at": BASE_MS + i * 1_000, "day": f"2024030{1 + i % DAYS}"}


def flushed_rows(entries: list[dict[str, Any]]) -> Counter[tuple[str, int, int]]:
    """The rows each commit of the BUFFERED committer's log made visible, per (table,
    checkpoint, committer subtask): per stream, its highest offset in the set beyond the one
    flushed before (offsets are inclusive; -1 names a stream with no new rows)."""
    flushed: dict[str, int] = {}
    rows: Counter[tuple[str, int, int]] = Counter()
    for entry in entries:
        if "commit" not in entry:
            continue
        highest: dict[tuple[str, str], int] = {}
        for table_id, stream, offset, _ in entry["got"]:
            highest[(table_id, stream)] = max(offset, highest.get((table_id, stream), -1))
        for (table_id, stream), offset in highest.items():
            before = flushed.get(stream, -1)
            if offset > before:
                table = table_id.rsplit(".", 1)[1]
                rows[(table, entry["commit"], entry["subtask"])] += offset - before
                flushed[stream] = offset
    return rows


def test_buffered_stream_results_follow_each_commit_and_count_the_rows_it_flushed(
    project: str, tmp_path: Path
) -> None:
    count = 3_000
    dataset = make_dataset(project, "resultbuffered")
    log = str(tmp_path / "commits.jsonl")
    sink = buffered_streams.recording(
        BigQuerySink.builder()
        .set_sink_name("events-buffered-results")
        .set_destination_resolver(DailyTables(project, dataset))
        .set_serializer(
            BigQuerySerializer.of(lambda r, c: {"id": r["id"], "day": r["day"]}, EVENTS)
        )
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_write_method(WriteMethod.BUFFERED_STREAM)
        .set_writer_options(BigQueryWriterOptions.builder().max_buffered_records(200).build())
        .build(),
        log,
    )
    # No restart: a commit after the operators finished must not fail the job (it did, when
    # its results reached a finished operator).
    env = make_env(
        parallelism=2,
        checkpoint_ms=400,
        restarts=0,
        extra={"python.fn-execution.bundle.size": "50"},
    )
    records = (
        record_stream(env, count, daily_event)
        .map(Slow(every=10, seconds=0.05))
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(EventTime())
        )
    )
    # The results go to the committer's own log: a result's line must follow its commit's.
    sink.write_with_results(records).map(AppendJson(log))
    with logged_results() as logged:
        env.execute("buffered stream results")

    entries = commit_log(log)
    history = buffered_streams.history(log)
    tables = ids_by_table(project, dataset)
    assert sorted(tables) == [f"events_2024030{d}" for d in range(1, DAYS + 1)]
    assert all(max(ids.values()) == 1 for ids in tables.values()), history
    assert sum(len(ids) for ids in tables.values()) == count, history
    assert {e["attempt"] for e in entries if "commit" in e} == {0}, history

    # Each result follows the commit of its checkpoint on its committer subtask, and counts
    # exactly the rows that commit flushed to its table.
    flushed = flushed_rows(entries)
    committed: set[tuple[int, int]] = set()
    reported: Counter[tuple[str, int, int]] = Counter()
    results: list[tuple[str, int, int]] = []
    for entry in entries:
        if "commit" in entry:
            committed.add((entry["commit"], entry["subtask"]))
        elif entry.get("type") == "WriteResult":
            key = (entry["checkpoint_id"], entry["subtask"])
            assert key in committed, f"a result before its commit: {entry}\n{history}"
            assert entry["method"] == "BUFFERED_STREAM"
            assert entry["sink"] == "events-buffered-results"
            assert BASE_MS <= entry["first_event_time"] <= entry["last_event_time"]
            table = entry["destination"].rsplit("/", 1)[1]
            reported[(table, *key)] += entry["count"]
            results.append((table, *key))
    assert len(results) == len(set(results)), "a result was emitted twice"
    assert len({key[1] for key in reported}) > 2, "expected results of several checkpoints"
    assert all(flushed[key] == n for key, n in reported.items()), history
    # What no result reports is what the commits after the operators finished flushed (the
    # final checkpoint's rows): those commits logged their results instead.
    missing: Counter[tuple[str, int]] = Counter()
    for (table, checkpoint, subtask), n in flushed.items():
        if (table, checkpoint, subtask) not in reported:
            missing[(table, checkpoint)] += n
            last = max(c for _, c, s in reported if s == subtask)
            assert checkpoint > last, f"no result for {table}, {checkpoint}, {subtask}"
    assert missing == results_logged(logged.messages), history
    # Per table, the results and the logged ones add up to the rows read back.
    per_table: Counter[str] = Counter()
    for (table, _, _), n in reported.items():
        per_table[table] += n
    for (table, _), n in missing.items():
        per_table[table] += n
    assert per_table == {table: len(ids) for table, ids in tables.items()}


def test_without_checkpointing_the_one_commit_at_the_end_of_input_emits_every_result(
    project: str, tmp_path: Path
) -> None:
    count = 500
    dataset = make_dataset(project, "resultnocheckpoint")
    sink = (
        BigQuerySink.builder()
        .set_sink_name("events-unchecked-results")
        .set_destination_resolver(DailyTables(project, dataset))
        .set_serializer(
            BigQuerySerializer.of(lambda r, c: {"id": r["id"], "day": r["day"]}, EVENTS)
        )
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_write_method(WriteMethod.BUFFERED_STREAM)
        .build()
    )
    env = make_env(parallelism=2, checkpoint_ms=None, restarts=0)
    results = tmp_path / "results.jsonl"
    sink.write_with_results(record_stream(env, count, daily_event)).map(AppendJson(str(results)))
    with logged_results() as logged:
        env.execute("buffered stream results without checkpoints")

    # The commit runs in the committer's end of input, before the operators finish: its
    # results come through, under checkpoint -1, one per table and committer subtask.
    got = read_json_lines(str(results))
    assert results_logged(logged.messages) == Counter()
    assert {r["checkpoint_id"] for r in got} == {-1}
    per_table: Counter[str] = Counter()
    for result in got:
        per_table[result["destination"].rsplit("/", 1)[1]] += result["count"]
    tables = ids_by_table(project, dataset)
    assert sum(len(ids) for ids in tables.values()) == count
    assert per_table == {table: len(ids) for table, ids in tables.items()}


def test_failed_records_need_the_to_stream_handler_and_sink_to_refuses_it(project: str) -> None:
    from pyflink_gcp.core.errors import ConfigurationError

    def built(handler: FailureHandler) -> BigQuerySink:
        return (
            BigQuerySink.builder()
            .set_sink_name("strict")
            .set_destination_resolver(ByRemainder(project, "ds"))
            .set_serializer(BigQuerySerializer.of(lambda r, c: r, ORDERS))
            .set_failure_handler(handler)
            .build()
        )

    env = make_env(parallelism=1)
    records = record_stream(env, 10, order)
    with pytest.raises(ConfigurationError, match="failed\\(\\) needs the failure handler"):
        built(FailureHandler.log_and_drop()).write_with_results(records).failed()
    with pytest.raises(ConfigurationError, match="ds.sink_to\\(sink\\) has none"):
        records.sink_to(built(FailureHandler.to_stream()))
    assert FailedRecord  # the type the failed-records stream carries
