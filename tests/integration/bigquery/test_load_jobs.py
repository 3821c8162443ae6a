"""The FILE_LOADS committer against the emulators: a staged file its table refuses ends the
job once, naming the load job and the files, instead of a restart that fails the same way."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyflink_gcp.bigquery.load_job_ids import load_job_id
from pyflink_gcp.bigquery.load_jobs import (
    LoadJobCommitter,
    LoadJobFailedError,
    PendingFiles,
    StagedFile,
)
from pyflink_gcp.bigquery.options import BigQueryFileLoadsOptions, FileFormat
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.core.runtime_info import SubtaskInfo
from tests.integration.bigquery.support import make_dataset, make_table, query

pytestmark = pytest.mark.integration


def committer(stage: Path) -> LoadJobCommitter:
    loads = BigQueryFileLoadsOptions(
        staging_location=str(stage), file_format=FileFormat.NEWLINE_DELIMITED_JSON
    )
    c = LoadJobCommitter(
        sink_name="refused-loads",
        loads=loads,
        rest_endpoint=None,
        retry=RetryPolicy(deadline_s=20),
        threads=1,
    )
    c.open(SubtaskInfo("refused-loads", subtask_index=0))
    return c


def test_a_file_its_table_refuses_ends_the_job_naming_the_job_and_the_files(
    project: str, tmp_path: Path
) -> None:
    dataset = make_dataset(project, "refused")
    make_table(project, dataset, "t", [("id", "INT64")])
    stage = tmp_path / "stage"
    name = f"{project}.{dataset}.t/part-0-0-x-0.json.pending"
    (stage / name).parent.mkdir(parents=True)
    (stage / name).write_text('{"id": "not a number"}\n')
    table = f"{project}.{dataset}.t"
    uri = f"file://{stage / name}"
    load = PendingFiles(table, (StagedFile(uri, 23),))
    job_id = load_job_id("refused-loads", table, [uri], 0)

    c = committer(stage)
    try:
        for restored in (False, True):  # a commit repeated after a restore meets the same refusal
            with pytest.raises(LoadJobFailedError) as failed:
                c.commit([load], 1, restored=restored)
            message = str(failed.value)
            assert f"load job {job_id} into {table}" in message
            assert "part-0-0-x-0.json.pending" in message and "job_id_generation(1)" in message
    finally:
        c.close()
    assert (stage / name).exists()  # kept, for the user to look at
    assert query(project, f"SELECT COUNT(*) AS n FROM `{project}.{dataset}.t`") == [{"n": 0}]


def test_a_commit_repeated_in_a_single_region_dataset_finds_its_job(
    project: str, tmp_path: Path
) -> None:
    """jobs.get needs the job's location outside the US and EU multi-regions (the emulator
    answers 404 without it, as BigQuery does): the repeated commit, which finds its job by id,
    names it. The location comes from the committable, or from the dataset when unknown."""
    from google.api_core import exceptions

    from tests.integration.bigquery.support import bq_client

    dataset = make_dataset(project, "regional", location="europe-west3")
    make_table(project, dataset, "t", [("id", "INT64")])
    stage = tmp_path / "stage"
    table = f"{project}.{dataset}.t"
    loads = []
    for n, location in enumerate(("europe-west3", None)):
        name = f"{table}/part-{n}.json.pending"
        (stage / name).parent.mkdir(parents=True, exist_ok=True)
        (stage / name).write_text(f'{{"id": {n}}}\n')
        loads.append(PendingFiles(table, (StagedFile(f"file://{stage / name}", 10),), location))

    for load in loads:
        c = committer(stage)
        try:
            c.commit([load], 1, restored=True)
            (stage / load.files[0].name).write_text("")  # gone from the stage, as after a load
            c.commit([load], 1, restored=True)  # the repeat finds the job instead of loading
        finally:
            c.close()
    job_id = load_job_id("refused-loads", table, [loads[0].files[0].uri], 0)
    client = bq_client(project)
    try:
        with pytest.raises(exceptions.NotFound):
            client.get_job(job_id, project=project)  # no location: not found, as in BigQuery
        assert client.get_job(job_id, project=project, location="europe-west3").state == "DONE"
    finally:
        client.close()
    assert query(project, f"SELECT id FROM `{table}` ORDER BY id") == [{"id": 0}, {"id": 1}]
