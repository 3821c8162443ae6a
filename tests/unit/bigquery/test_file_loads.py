"""FILE_LOADS on the writer's side: each staged file named once in a checkpoint's committables
(and loaded once whatever sets the committer is handed), file names and spool directories,
files rolling, and the quota warning."""

from __future__ import annotations

import os
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from pyflink_gcp.bigquery import file_loads, load_jobs
from pyflink_gcp.bigquery.file_loads import FileLoadsWriterFactory
from pyflink_gcp.bigquery.load_jobs import PendingFiles, StagedFile
from pyflink_gcp.bigquery.options import (
    BigQueryFileLoadsOptions,
    BigQueryWriterOptions,
    FileFormat,
)
from pyflink_gcp.core import SubtaskInfo
from tests.unit.bigquery.test_load_jobs import Client, committer, job_id
from tests.unit.bigquery.test_load_jobs import staged as stage_files


def factory(**loads: Any) -> FileLoadsWriterFactory:
    options = BigQueryFileLoadsOptions(staging_location="gs://b/p", **loads)
    f = FileLoadsWriterFactory(
        sink_name="s",
        resolver=None,
        serializer=None,
        options=BigQueryWriterOptions(),
        loads=options,
    )
    f.info = SubtaskInfo("s", subtask_index=1, attempt_number=2)
    return f


def staged(*names: str) -> list[StagedFile]:
    return [StagedFile(f"gs://b/p/p.d.a/{n}", 10) for n in names]


def test_each_staged_file_is_named_once_in_one_committable_per_table() -> None:
    f = factory()
    f._stage("p.d.a", staged("a1", "a2"), "EU")
    f._stage("p.d.b", staged("b1"), None)
    assert f.prepare_commit(5) == [
        PendingFiles("p.d.a", tuple(staged("a1", "a2")), "EU"),
        PendingFiles("p.d.b", tuple(staged("b1")), None),
    ]
    assert f.prepare_commit(6) == []  # nothing new: nothing is carried, the committer keeps it


def test_every_file_loads_once_whatever_sets_flink_hands_the_committer(
    tmp_path: Path, monkeypatch: Any
) -> None:
    # The review's F2: an intermediate savepoint (checkpoint 5, never notified) leaves its set
    # in the state beside the next one; a failover then commits both again.
    now = [1000.0]
    monkeypatch.setattr(load_jobs.time, "monotonic", lambda: now[0])
    minute = timedelta(seconds=60)
    a = stage_files(tmp_path, "a0", "a1", "a2", "a3")
    f = factory(min_load_interval=minute)

    def prepare(checkpoint: int, file: StagedFile) -> list[Any]:
        f._stage("p.d.t", [file], "EU")
        return f.prepare_commit(checkpoint)

    set4 = prepare(4, a[0])
    first = Client()
    c = committer(tmp_path, first, min_load_interval=minute)
    assert c.commit(set4, 4, restored=False) == []  # never loaded by this committer: due
    now[0] += 10
    set5 = prepare(5, a[1])  # an intermediate savepoint: not notified
    now[0] += 10
    set6 = prepare(6, a[2])
    # Checkpoint 6 completes: sets 5 and 6 are committed, a call each, in order.
    kept5 = c.commit(set5, 6, restored=False)
    kept6 = c.commit(set6, 6, restored=False)
    assert kept5 and kept6  # not due: kept, they join set 7
    set7 = kept5 + kept6 + prepare(7, a[3])

    # Branch 1: checkpoint 7 completes at +70 s (due), a failover restores it twice.
    now[0] += 50
    assert c.commit(set7, 7, restored=False) == []
    for _ in range(2):
        committer(tmp_path, first, min_load_interval=minute).commit(set7, 7, restored=True)
    assert first.loaded() == Counter(x.uri for x in a)
    assert len(first.inserted) == 2  # a0, then a1-a3 in one job

    # Branch 2: a failure before checkpoint 7 completes; the restore from 6 commits sets 5 and
    # 6 again, twice (a second failover), and the replayed records stage a new file.
    second = Client()
    second.load_table_from_uri([x.uri for x in a[:1]], "p.d.t", job_id=job_id(a[:1]))
    for _ in range(2):
        restored = committer(tmp_path, second, min_load_interval=minute)
        for committed in (set5, set6):
            assert restored.commit(committed, 6, restored=True) == []
    replayed = stage_files(tmp_path, "a3-again")
    f._stage("p.d.t", list(replayed), "EU")
    [waiting] = restored.commit(f.prepare_commit(7), 7, restored=False)  # loaded just now
    assert restored.commit([waiting], 8, restored=False, final=True) == []
    assert second.loaded() == Counter(x.uri for x in (*a[:3], *replayed))


def test_one_job_loads_a_table_whatever_the_parallelism(tmp_path: Path) -> None:
    # The review's F4: two writer subtasks staging the same table.
    files = stage_files(tmp_path, "w0", "w1")
    sets = []
    for index, file in enumerate(files):
        writer = factory()
        writer.info = SubtaskInfo("s", subtask_index=index)
        writer._stage("p.d.t", [file], None)
        sets += writer.prepare_commit(5)
    client = Client()
    committer(tmp_path, client).commit(sets, 5, restored=False)
    assert client.inserted == [job_id(files)]


@pytest.mark.parametrize(
    ("checkpoint_ms", "interval_s", "warns"),
    [(10_000, 0, True), (10_000, 90, False), (60_000, 0, False), (0, 0, False)],
)
def test_the_job_is_warned_when_checkpoints_would_exceed_the_load_quota(
    checkpoint_ms: int, interval_s: int, warns: bool
) -> None:
    f = factory(min_load_interval=timedelta(seconds=interval_s))
    warning = f.check_job(checkpoint_ms)
    assert (warning is not None) is warns
    if warning is not None:
        assert "8,640 times a day" in warning and "at least 58 s" in warning
        assert "the parallelism does not count" in warning


@pytest.mark.parametrize("location", ["relative/dir", "s3://bucket/x", "gs://", "file://x"])
def test_options_refuse_a_staging_location_that_is_no_bucket_or_directory(location: str) -> None:
    from pyflink_gcp.core.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"staging_location must be 'gs://bucket/prefix'"):
        BigQueryFileLoadsOptions(staging_location=location)


def test_options_tell_a_bucket_from_a_local_directory() -> None:
    options = BigQueryFileLoadsOptions(staging_location="gs://bucket/a/b/")
    assert (options.bucket, options.prefix, options.local_directory) == ("bucket", "a/b", None)
    for location in ("/srv/stage/", "file:///srv/stage"):
        local = BigQueryFileLoadsOptions(staging_location=location)
        assert (local.local_directory, local.bucket, local.prefix) == ("/srv/stage", "", "")


def open_writer(tmp_path: Any, monkeypatch: Any, **loads: Any) -> tuple[Any, list[str]]:
    """A table file writer over a factory whose uploads only record the file (bookkeeping)."""
    from concurrent.futures import Future

    from google.cloud.bigquery import SchemaField

    from pyflink_gcp.bigquery.destinations import TableDestination
    from pyflink_gcp.bigquery.file_loads import TableFileWriter
    from pyflink_gcp.bigquery.tables import TableLayout

    f = factory(**{"file_format": FileFormat.NEWLINE_DELIMITED_JSON, **loads})
    f._spool = str(tmp_path)
    finished: list[str] = []
    contents: dict[str, str] = {}

    def upload(part: Any, destination: Any) -> Future[StagedFile]:
        finished.append(part.name)
        with open(part.path) as uploaded:
            contents[part.name] = uploaded.read()
        os.remove(part.path)  # uploaded: the in-progress file is gone
        done: Future[StagedFile] = Future()
        done.set_result(StagedFile(part.name + ".pending", part.size))
        return done

    monkeypatch.setattr(f, "upload", upload)
    layout: Future[TableLayout] = Future()
    layout.set_result(TableLayout.of([SchemaField("id", "INT64"), SchemaField("at", "TIMESTAMP")]))
    writer = TableFileWriter(TableDestination.of("p", "d", "t"), f, layout)
    f._writers.add(writer)
    writer.contents = contents  # type: ignore[attr-defined]
    return writer, finished


def test_a_file_rolls_at_its_size_and_rows_are_json_lines(tmp_path: Any, monkeypatch: Any) -> None:
    writer, finished = open_writer(tmp_path, monkeypatch, max_file_bytes=1_024)
    for i in range(100):
        writer.write({"id": i, "at": i}, i)
    writer.start_flush()
    assert len(finished) >= 3  # ~40 bytes a row: a file per ~25 rows
    open_files = list((tmp_path / "p.d.t").glob("*.inprogress"))
    assert len(open_files) == 1
    first = writer.contents[finished[0]].splitlines()[0]
    assert first.startswith('{"id":') and '"at":"1970-01-01T00:00:00.0000' in first
    assert writer.flush() == [] and writer.is_clean
    assert len(writer.take_staged()) == len(finished)


def test_an_inactive_file_is_finished_at_a_bundle_end(tmp_path: Any, monkeypatch: Any) -> None:
    now = [100.0]
    monkeypatch.setattr(file_loads.time, "monotonic", lambda: now[0])
    writer, finished = open_writer(
        tmp_path,
        monkeypatch,
        inactivity_interval=timedelta(seconds=5),
        check_interval=timedelta(seconds=1),
    )
    writer.write({"id": 1}, 1)
    writer.start_flush()
    assert finished == []
    now[0] += 4
    writer.start_flush()
    assert finished == []  # not inactive for long enough
    now[0] += 2
    writer.start_flush()
    assert len(finished) == 1
    assert writer.flush() == [] and writer.is_clean and len(writer.take_staged()) == 1


def test_a_row_that_does_not_fit_goes_to_the_failure_handler(
    tmp_path: Any, monkeypatch: Any
) -> None:
    writer, _ = open_writer(tmp_path, monkeypatch)
    writer.write({"id": "not a number"}, "the record")
    writer.write({"id": 2}, 2)
    [failed] = writer.flush()
    assert "expected an INT64" in failed.reason and failed.record_repr == "'the record'"


def test_a_millisecond_timestamp_goes_to_the_failure_handler_naming_table_column_and_unit(
    tmp_path: Any, monkeypatch: Any
) -> None:
    writer, _ = open_writer(tmp_path, monkeypatch)
    writer.write({"id": 1, "at": 1_704_067_200_000}, "the record")
    writer.write({"id": 2, "at": 1_704_067_200_000_000}, 2)
    [failed] = writer.flush()
    assert failed.describe() == (
        "sink 's': destination 'projects/p/datasets/d/tables/t' rejected record "
        "'the record': column at: TIMESTAMP 1704067200000 looks like epoch milliseconds "
        "(2024-01-01T00:00:00Z); ints are taken as epoch microseconds, which would put it at "
        "1970-01-20T17:21:07.200000Z. Give microseconds (milliseconds * 1,000) or a datetime"
    )


def test_a_change_data_capture_row_ends_the_job_naming_the_method_to_use(
    tmp_path: Any, monkeypatch: Any
) -> None:
    from pyflink_gcp.core import ConfigurationError
    from pyflink_gcp.core.errors import is_non_retriable

    writer, _ = open_writer(tmp_path, monkeypatch)
    with pytest.raises(ConfigurationError) as err:
        writer.write({"id": 1, "_CHANGE_TYPE": "UPSERT"}, "the record")
    assert str(err.value) == (
        "sink 's': a change-data-capture row (_CHANGE_TYPE) for table p.d.t, but load jobs only "
        "append: use WriteMethod.STORAGE_API_AT_LEAST_ONCE for CDC tables. Record: 'the record'"
    )
    assert is_non_retriable(err.value)


def opened(tmp_path: Path, **loads: Any) -> FileLoadsWriterFactory:
    """An open factory of the sink 'my sink', subtask 1, staging in a local directory."""
    options = BigQueryFileLoadsOptions(
        staging_location=str(tmp_path / "stage"),
        spool_directory=str(tmp_path / "spool"),
        file_format=FileFormat.NEWLINE_DELIMITED_JSON,
        **loads,
    )
    f = FileLoadsWriterFactory(
        sink_name="my sink",
        resolver=None,
        serializer=None,
        options=BigQueryWriterOptions(),
        loads=options,
    )
    f.open(SubtaskInfo("my sink", subtask_index=1, attempt_number=2))
    return f


def part_file(f: FileLoadsWriterFactory) -> Any:
    from google.cloud.bigquery import SchemaField

    from pyflink_gcp.bigquery.destinations import TableDestination

    return f.new_part_file(TableDestination.of("p", "d", "t"), (SchemaField("id", "INT64"),))


def test_same_named_sinks_on_one_host_never_remove_each_others_files(tmp_path: Path) -> None:
    # The review's F13: two sinks named alike (or two jobs), subtask 1 of each, one spool root.
    a = opened(tmp_path)
    part = part_file(a)
    b = opened(tmp_path)
    assert os.path.exists(part.path)
    assert a._spool != b._spool and os.path.dirname(a._spool) == os.path.dirname(b._spool)
    assert os.path.relpath(a._spool, tmp_path / "spool").split(os.sep)[:2] == ["my_sink", "1"]
    # A closed run's directory goes with it; so does a dead run's (its lock is free) when the
    # next run of the subtask opens, while a live run's stays.
    b.close()
    assert not os.path.exists(b._spool)
    dead = os.path.join(os.path.dirname(a._spool), "dead-run")
    os.makedirs(os.path.join(dead, "p.d.t"))
    open(os.path.join(dead, ".lock"), "w").close()
    open(os.path.join(dead, "p.d.t", "part.json.inprogress"), "w").close()
    c = opened(tmp_path)
    assert not os.path.exists(dead) and os.path.exists(part.path)
    for f in (a, c):
        f.close()
    assert os.listdir(tmp_path / "spool" / "my_sink" / "1") == []


def test_a_staged_file_holds_the_sink_a_uuid_and_its_full_uri(tmp_path: Path) -> None:
    import re

    f = opened(tmp_path)
    try:
        part = part_file(f)
        part.writer.write({"id": 1})
        part.writer.finish()
        staged_file = f.upload(part, _table()).result()
    finally:
        f.close()
    assert re.fullmatch(r"part-my_sink-1-2-[0-9a-f]{32}\.json", part.name), part.name
    expected = tmp_path / "stage" / "p.d.t" / (part.name + ".pending")
    assert staged_file == StagedFile(f"file://{expected}", part.size) and expected.exists()


def _table() -> Any:
    from pyflink_gcp.bigquery.destinations import TableDestination

    return TableDestination.of("p", "d", "t")


def test_a_closed_writers_files_go_with_the_next_checkpoint_with_its_location(
    tmp_path: Any, monkeypatch: Any
) -> None:
    writer, finished = open_writer(tmp_path, monkeypatch)
    writer._layout_source.result().location = "europe-west3"
    writer.write({"id": 1}, 1)
    assert writer.flush() == []
    writer.close()  # released: idle, or evicted at max_active_destinations
    [committable] = writer._factory.prepare_commit(3)
    assert committable.table_id == "p.d.t" and committable.location == "europe-west3"
    assert [x.uri for x in committable.files] == [name + ".pending" for name in finished]
