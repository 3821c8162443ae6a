"""BUFFERED_STREAM and FILE_LOADS in the configurations users choose, not only the ones that
pass: unaligned checkpoints (forced, so every barrier overtakes the committables in flight),
FILE_LOADS with its default ``min_load_interval``, parallelism 2 with every subtask writing
every table, and a savepoint restored at another parallelism. Each test counts every row (0
lost, 0 twice) and, for FILE_LOADS, every object left under the staging prefix (0)."""

from __future__ import annotations

import json
import logging
import os
import re
import time
from datetime import timedelta
from typing import Any

import pytest

from pyflink_gcp.bigquery import BigQueryFileLoadsOptions, WriteMethod
from tests.e2e.bigquery import test_buffered_streams as buffered
from tests.e2e.bigquery.test_file_loads import (
    Halves,
    Slow,
    assert_exactly_once,
    event,
    gcs_bucket,
    loads_options,
    sink,
)
from tests.e2e.core.test_commit_protocol import UNALIGNED, savepoint
from tests.integration.bigquery.support import ids_by_table, make_dataset
from tests.support.buffered_streams import history
from tests.support.buffered_streams import recording as recording_buffered
from tests.support.file_loads import commit_log, load_log, recording
from tests.support.jobs import FailAt, make_env, record_stream
from tests.support.restore import Failover
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e


def staged(bucket: Any) -> list[str]:
    return [b.name for b in bucket.list_blobs(prefix="stage/")]


def assert_buffered_exactly_once(project: str, dataset: str, count: int) -> None:
    tables = ids_by_table(project, dataset)
    assert sorted(tables) == [f"events_2024030{d}" for d in range(1, buffered.DAYS + 1)]
    lost: dict[str, str] = {}
    twice: dict[str, list[int]] = {}
    for table, ids in tables.items():
        day = table.removeprefix("events_")
        expected = {i for i in range(count) if buffered.event(i)["day"] == day}
        missing = sorted(expected - set(ids))
        if missing:
            lost[table] = f"{len(missing)} of {len(expected)}, ids {missing[0]}..{missing[-1]}"
        if max(ids.values(), default=1) > 1:
            twice[table] = [i for i, n in ids.items() if n > 1][:10]
    # Every table is reported, so a failure shows whether one stream or one subtask lost rows.
    assert not lost and not twice, {"lost": lost, "twice": twice}


@pytest.mark.parametrize("hard", [False, True], ids=["task exception", "killed worker"])
def test_file_loads_under_unaligned_checkpoints_load_every_row_once(
    project: str, tmp_path: Any, hard: bool
) -> None:
    """The review's scenario: files wait (an hour's minimum interval), so only a restored or a
    final commit loads them; the committables of the failed attempt that the barrier overtook
    come back from the channel state."""
    count = 6_000
    dataset = make_dataset(project, "unaligned")
    bucket = gcs_bucket(project)
    failover = Failover(tmp_path / "failover")
    env = make_env(
        parallelism=2,
        checkpoint_ms=700,
        process_workers=hard,
        restarts=10,
        extra={**UNALIGNED, **failover.conf()},
    )
    loads = loads_options(bucket, tmp_path, min_load_interval=timedelta(hours=1))
    log = str(tmp_path / "commits.jsonl")
    fail = FailAt(
        str(tmp_path), (1_500,), hard, after_checkpoint=failover.checkpoints, first_checkpoint=2
    )
    record_stream(env, count, event).map(fail).sink_to(
        recording(sink(project, dataset, loads), log)
    )
    env.execute("file loads, unaligned checkpoints")
    assert os.path.exists(tmp_path / "failed-1500")
    failover.assert_restored()

    try:
        assert_exactly_once(project, dataset, count)
        assert staged(bucket) == []
    except AssertionError as exc:
        # What the committer did, for a failure seen once under load and not reproduced.
        history = "\n".join(json.dumps(e) for e in commit_log(log))
        raise AssertionError(f"{exc}\ncommitter log:\n{history}") from exc


@pytest.mark.parametrize("hard", [False, True], ids=["task exception", "killed worker"])
def test_buffered_streams_under_unaligned_checkpoints_hold_exactly_their_input(
    project: str, tmp_path: Any, hard: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # Each stream created, flushed and finalized is logged (in-process workers), for a failure
    # seen once in a full run and not reproduced alone.
    caplog.set_level(logging.DEBUG, logger="pyflink_gcp.bigquery")
    # Each source split (0..2999, 3000..5999) has records left well after its failure is due,
    # so a second checkpoint completes before the input runs out, on a loaded machine too.
    count = 6_000
    dataset = make_dataset(project, "unbuffered")
    failover = Failover(tmp_path / "failover")
    env = make_env(
        parallelism=2,
        checkpoint_ms=500,
        process_workers=hard,
        restarts=10,
        extra={**UNALIGNED, **failover.conf()},
    )
    # Not the first checkpoint: a restore of it can lose a source split (Flink, unaligned).
    fail = FailAt(
        str(tmp_path),
        (1_500, 3_900),
        hard,
        after_checkpoint=failover.checkpoints,
        first_checkpoint=2,
    )
    log = str(tmp_path / "commits.jsonl")
    record_stream(env, count, buffered.event).map(fail).sink_to(
        recording_buffered(buffered.sink(project, dataset), log)
    )
    env.execute("buffered streams, unaligned checkpoints")
    fail.assert_fired()
    failover.assert_restored()

    try:
        assert_buffered_exactly_once(project, dataset, count)
    except AssertionError as exc:
        # What each writer prepared and each committer published, per subtask and attempt (the
        # killed-worker variant's workers are processes, out of caplog's reach).
        raise AssertionError(f"{exc}\nwriters and committers:\n{history(log)}") from exc


def test_file_loads_with_the_default_minimum_interval_lose_nothing_through_failovers(
    project: str, tmp_path: Any
) -> None:
    """The default path: min_load_interval 90 s, so after a table's first load its files wait
    in the committer's state (no test job lasts 90 s), through a task exception and a killed
    worker, and load with a restored set or the final one."""
    count = 4_000
    dataset = make_dataset(project, "defaultwait")
    bucket = gcs_bucket(project)
    loads = (
        BigQueryFileLoadsOptions.builder()
        .staging_location(f"gs://{bucket.name}/stage")
        .spool_directory(str(tmp_path / "spool"))
        .build()
    )
    assert loads.min_load_interval == timedelta(seconds=90)
    failover = Failover(tmp_path / "failover")
    env = make_env(
        parallelism=2, checkpoint_ms=300, process_workers=True, restarts=10, extra=failover.conf()
    )
    after = failover.checkpoints
    record_stream(env, count, event).map(
        FailAt(str(tmp_path), (1_200,), False, after_checkpoint=after)
    ).map(FailAt(str(tmp_path / "hard"), (2_600,), True, after_checkpoint=after)).sink_to(
        sink(project, dataset, loads)
    )
    (tmp_path / "hard").mkdir()
    env.execute("file loads, default interval")
    assert os.path.exists(tmp_path / "failed-1200"), "the task exception was not injected"
    assert os.path.exists(tmp_path / "hard" / "failed-2600"), "the worker was not killed"
    failover.assert_restored()

    assert_exactly_once(project, dataset, count)
    assert staged(bucket) == []


def test_at_parallelism_two_each_table_loads_every_subtasks_files_in_one_job(
    project: str, tmp_path: Any
) -> None:
    """One committer groups a table's files of every writer subtask: the load jobs per table
    do not grow with the parallelism (BigQuery allows 1,500 a table a day)."""
    count = 3_000
    dataset = make_dataset(project, "together")
    bucket = gcs_bucket(project)
    log = str(tmp_path / "loads.jsonl")
    env = make_env(parallelism=2, checkpoint_ms=400)
    built = sink(project, dataset, loads_options(bucket, tmp_path), Halves(project, dataset))
    # About 7 s: some 15 checkpoints, each with files of both subtasks for both tables.
    record_stream(env, count, event).map(Slow(every=10)).sink_to(recording(built, log))
    env.execute("file loads at parallelism 2")

    entries = load_log(log)
    # Object names: <prefix>-<sink>-<subtask>-<attempt>-<uuid>.<format>.pending
    subtask = re.compile(r"-(\d+)-\d+-[0-9a-f]{32}\.")
    subtasks = [{subtask.search(name).group(1) for name in e["names"]} for e in entries]
    alone = [s for s in subtasks if len(s) < 2]
    # Each commit loads a table once, with both subtasks' files; a job of one subtask's files
    # is possible only where the other had none for that table (the first and last commit).
    assert len(entries) >= 4 and len(alone) <= 2 * 2, (len(entries), subtasks)
    tables = ids_by_table(project, dataset)
    assert sorted(tables) == ["half_0", "half_1"]
    assert all(max(ids.values()) == 1 for ids in tables.values())
    assert sum(len(ids) for ids in tables.values()) == count
    assert staged(bucket) == []


class Started(Slow):
    """``Slow`` that creates the file ``started`` at its first record."""

    def __init__(self, started: str, every: int = 20, seconds: float = 0.05) -> None:
        super().__init__(every, seconds)
        self._started: str | None = started

    def map(self, value: Any) -> Any:
        if self._started is not None:
            open(self._started, "a").close()
            self._started = None
        return super().map(value)


@pytest.mark.parametrize("stop", [True, False], ids=["stop-with-savepoint", "savepoint, cancel"])
@pytest.mark.parametrize("method", [WriteMethod.FILE_LOADS, WriteMethod.BUFFERED_STREAM])
def test_a_savepoint_restored_at_another_parallelism_writes_every_row_once(
    project: str, tmp_path: Any, method: WriteMethod, stop: bool
) -> None:
    """Stopped with a savepoint (a final commit), or a savepoint taken and the job cancelled
    (the savepoint's committables commit only after the restore), then restored at
    parallelism 1 from 2."""
    count = 4_000
    dataset = make_dataset(project, "rescaled")
    bucket = gcs_bucket(project)
    if method is WriteMethod.FILE_LOADS:
        loads = loads_options(bucket, tmp_path, min_load_interval=timedelta(hours=1))
        make_sink, make_event = (lambda: sink(project, dataset, loads)), event
    else:
        make_sink, make_event = (lambda: buffered.sink(project, dataset)), buffered.event
    started = tmp_path / "started"
    # Hardly a periodic checkpoint: the savepoint holds what is not committed.
    env = make_env(parallelism=2, checkpoint_ms=3_600_000)
    record_stream(env, count, make_event).map(Started(str(started))).sink_to(make_sink())
    client = env.execute_async("before the savepoint")
    wait_for(started.exists, "the job's first record")
    time.sleep(2.0)
    path = savepoint(client, f"file://{tmp_path / 'savepoints'}", stop=stop)
    if not stop:
        client.cancel().result()

    env = make_env(parallelism=1, checkpoint_ms=300, extra={"execution.state-recovery.path": path})
    record_stream(env, count, make_event).map(Slow(every=20)).sink_to(make_sink())
    env.execute("restored at parallelism 1")

    if method is WriteMethod.FILE_LOADS:
        assert_exactly_once(project, dataset, count)
        assert staged(bucket) == []
    else:
        assert_buffered_exactly_once(project, dataset, count)
