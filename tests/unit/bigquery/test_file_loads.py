"""FILE_LOADS bookkeeping: which files a checkpoint's committables name, when a table is due,
how files are grouped into load jobs and named, and the quota warning."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pytest

from pyflink_gcp.bigquery import file_loads
from pyflink_gcp.bigquery.file_loads import FileLoadsWriterFactory, _groups, load_job_id
from pyflink_gcp.bigquery.load_jobs import StagedFile
from pyflink_gcp.bigquery.options import (
    BigQueryFileLoadsOptions,
    BigQueryWriterOptions,
    FileFormat,
)
from pyflink_gcp.core import SubtaskInfo


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
    return [StagedFile(n, 10) for n in names]


def test_files_of_a_checkpoint_become_one_due_load_per_table() -> None:
    f = factory(min_load_interval=timedelta(0))
    f._carry("p.d.a", staged("a1", "a2"))
    f._carry("p.d.b", staged("b1"))
    loads = f.prepare_commit(5)
    assert sorted((load.table_id, [x.name for x in load.files], load.due) for load in loads) == [
        ("p.d.a", ["a1", "a2"], True),
        ("p.d.b", ["b1"], True),
    ]
    assert f.prepare_commit(6) == []  # nothing new


def test_a_table_waits_out_its_interval_and_its_files_travel_until_due(monkeypatch: Any) -> None:
    now = [1000.0]
    monkeypatch.setattr(file_loads.time, "monotonic", lambda: now[0])
    f = factory(min_load_interval=timedelta(seconds=60))
    f._carry("p.d.a", staged("a1"))
    [first] = f.prepare_commit(1)
    assert first.due  # never loaded before
    now[0] += 10
    f._carry("p.d.a", staged("a2"))
    [waiting] = f.prepare_commit(2)
    assert not waiting.due and [x.name for x in waiting.files] == ["a2"]
    now[0] += 10
    f._carry("p.d.a", staged("a3"))
    [still] = f.prepare_commit(3)
    assert not still.due and [x.name for x in still.files] == ["a2", "a3"]
    now[0] += 50
    [due] = f.prepare_commit(4)
    assert due.due and [x.name for x in due.files] == ["a2", "a3"]
    # The same files are the same job (a restored waiting copy cannot load them twice); a group
    # whose files changed while it waited is another.
    assert due.job_id == still.job_id != waiting.job_id
    # The end of input loads what waits, whatever the interval.
    f._carry("p.d.a", staged("a4"))
    [end] = f.prepare_commit(-1)
    assert end.due and "_end_" in end.job_id


def test_job_ids_are_derived_from_sink_table_checkpoint_subtask_group_and_files() -> None:
    info = SubtaskInfo("s", subtask_index=3)
    files = tuple(staged("x", "y"))
    job = load_job_id("my sink", "p.d.t", 7, info, 0, files)
    assert job == load_job_id("my sink", "p.d.t", 7, info, 0, files)  # repeatable
    assert job.startswith("pyflink_gcp_my_sink_p_d_t_7_3_0_")
    assert job != load_job_id("my sink", "p.d.t", 7, info, 0, tuple(staged("x")))
    assert all(c.isalnum() or c in "_-" for c in job)


def test_groups_stay_within_the_uris_of_one_load_job(monkeypatch: Any) -> None:
    monkeypatch.setattr(file_loads, "MAX_LOAD_URIS", 3)
    groups = _groups(staged(*"abcdefg"))
    assert [len(g) for g in groups] == [3, 3, 1]


@pytest.mark.parametrize(
    ("checkpoint_ms", "interval_s", "warns"),
    [(10_000, 0, True), (10_000, 90, False), (60_000, 0, False), (0, 0, False)],
)
def test_the_job_is_warned_when_checkpoints_would_exceed_the_load_quota(
    checkpoint_ms: int, interval_s: int, warns: bool
) -> None:
    f = factory(min_load_interval=timedelta(seconds=interval_s))
    warning = f.check_job(4, checkpoint_ms)
    assert (warning is not None) is warns
    if warns:
        assert "8,640 times a day" in warning and "at least 58 s" in warning


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
