"""``sink.write_with_results(ds)`` in real jobs: what each checkpoint wrote, read back from the
emulators.

- At least once (the default stream): the results' counts add up to the rows each table holds,
  their event-time bounds are the rows' own, and a row BigQuery rejects shows up in the
  failed-records stream instead of a table.
- Exactly once (FILE_LOADS): each result drives a Cloud Tasks sink, one task per committed
  load, and the tasks dispatched match the load jobs the committer ran and the rows loaded.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
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
from tests.integration.bigquery.support import ids_by_table, make_dataset
from tests.integration.cloudtasks.support import (
    LOCATION,
    create_queues,
    suffix,
    wait_for_dispatches,
)
from tests.support.file_loads import commit_log, recording
from tests.support.jobs import make_env, record_stream

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
        with open(self.path, "a") as f:
            f.write(json.dumps({"type": type(value).__name__, **_as_dict(value)}) + "\n")
        return value


def _as_dict(value: Any) -> dict[str, Any]:
    data = dataclasses.asdict(value)
    if isinstance(data.get("payload"), bytes):
        data["payload"] = data["payload"].decode()
    return data


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


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

    got = read_lines(tmp_path / "results.jsonl")
    failed = read_lines(tmp_path / "failed.jsonl")
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
    env.execute("file loads results to cloud tasks")

    # BigQuery: every row loaded once. The committer's log: the load jobs it ran.
    tables = ids_by_table(project, dataset)
    assert sum(len(ids) for ids in tables.values()) == count
    assert all(max(ids.values()) == 1 for ids in tables.values())
    # The committer's log: each commit's load jobs, then the commit. Flink commits the final
    # checkpoint (the end of input) after the operators downstream finished, so the results
    # of that commit may reach no one (see docs/guarantees.md); every earlier one must.
    entries = commit_log(log)
    final = max(e["commit"] for e in entries if "commit" in e)
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
    before_final = {load for load in loads if load[1] != final}
    # Cloud Tasks: one dispatched task per result, one result per committed load.
    emitted = read_lines(tmp_path / "results.jsonl")
    dispatched = wait_for_dispatches(stack, f"/loaded/{run}/", len(before_final))
    bodies = [json.loads(r["body"]) for r in dispatched]
    reported = Counter((b["destination"], b["checkpoint_id"]) for b in bodies)
    assert max(reported.values()) == 1, "a load was reported twice"
    assert before_final <= set(reported) <= set(loads)
    assert len(emitted) == len(dispatched)
    per_table: Counter[str] = Counter()
    for body in bodies:
        assert body["method"] == "FILE_LOADS" and body["sink"] == "orders-loads"
        assert BASE_MS <= body["first_event_time"] <= body["last_event_time"]
        per_table[body["destination"].rsplit("/", 1)[1]] += body["count"]
    # The counts are the rows the loads added: all of them when the final commit's results
    # came through, else all but the final checkpoint's.
    rows = {table: len(ids) for table, ids in tables.items()}
    if set(reported) == set(loads):
        assert per_table == rows
    else:
        assert all(0 < per_table[table] <= n for table, n in rows.items())
    print(
        f"write results: {len(loads)} loads, {len(before_final)} before the final checkpoint, "
        f"{len(dispatched)} tasks dispatched"
    )


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
