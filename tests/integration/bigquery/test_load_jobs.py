"""The FILE_LOADS committer against the emulators: a staged file its table refuses ends the
job once, naming the load job and the files, instead of a restart that fails the same way."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyflink_gcp.bigquery.load_jobs import (
    FileLoad,
    LoadJobCommitter,
    LoadJobFailedError,
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
    load = FileLoad(f"{project}.{dataset}.t", (StagedFile(name, 23),), "refused_job_1", True)

    c = committer(stage)
    try:
        for _ in range(2):  # a commit repeated after a restore meets the same refusal
            with pytest.raises(LoadJobFailedError) as failed:
                c.commit([load], 1, restored=False)
            message = str(failed.value)
            assert "load job refused_job_1" in message and f"into {project}.{dataset}.t" in message
            assert "part-0-0-x-0.json.pending" in message and "fix or remove them" in message
    finally:
        c.close()
    assert (stage / name).exists()  # kept, for the user to look at
    assert query(project, f"SELECT COUNT(*) AS n FROM `{project}.{dataset}.t`") == [{"n": 0}]
