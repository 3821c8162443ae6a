"""The load job sequence of one committable: a job BigQuery failed for a passing reason is run
again under the next id of a fixed sequence, so a repeated commit finds the one that succeeded
(the client here is bookkeeping only; the emulator tests run the real one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from google.api_core import exceptions

from pyflink_gcp.bigquery.load_jobs import (
    FileLoad,
    LoadJobCommitter,
    LoadJobFailedError,
    StagedFile,
)
from pyflink_gcp.bigquery.options import BigQueryFileLoadsOptions
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.core.runtime_info import SubtaskInfo


class Job:
    def __init__(self, job_id: str, reason: str | None) -> None:
        self.job_id = job_id
        self.error_result = {"reason": reason, "message": "m"} if reason else None
        self.errors = [self.error_result] if reason else []

    def result(self, timeout: float, retry: Any) -> None:
        if self.error_result:
            raise exceptions.InternalServerError(f"job {self.job_id} failed")


class Client:
    """Jobs by id; the reasons the next new jobs fail with, in order (None: success)."""

    def __init__(self, reasons: list[str | None]) -> None:
        self.jobs: dict[str, Job] = {}
        self.reasons = list(reasons)
        self.inserted: list[str] = []

    def load_table_from_uri(self, uris: Any, table: str, *, job_id: str, **kw: Any) -> Job:
        if job_id in self.jobs:
            raise exceptions.Conflict(f"Already Exists: Job {job_id}")
        self.inserted.append(job_id)
        job = self.jobs[job_id] = Job(job_id, self.reasons.pop(0) if self.reasons else None)
        return job

    def get_job(self, job_id: str, **kw: Any) -> Job:
        return self.jobs[job_id]

    def close(self) -> None:
        pass


def committer(tmp_path: Path, client: Client) -> LoadJobCommitter:
    c = LoadJobCommitter(
        sink_name="s",
        loads=BigQueryFileLoadsOptions(staging_location=str(tmp_path)),
        rest_endpoint=None,
        retry=RetryPolicy(deadline_s=5),
        threads=1,
    )
    c.open(SubtaskInfo("s", subtask_index=0))
    c._clients["p"] = client
    return c


LOAD = FileLoad("p.d.t", (StagedFile("p.d.t/f.parquet.pending", 10),), "job", True)


def test_a_passing_failure_loads_again_under_the_next_id_and_a_repeat_finds_it(
    tmp_path: Path,
) -> None:
    client = Client(["backendError", None])
    c = committer(tmp_path, client)
    c.commit([LOAD], 1, restored=False)
    assert client.inserted == ["job", "job_retry1"]
    c.commit([LOAD], 1, restored=True)  # after a failover: both ids exist, nothing runs again
    assert client.inserted == ["job", "job_retry1"] and c.jobs_found == 2
    c.close()


def test_a_refused_load_ends_the_job_and_so_does_the_last_passing_failure(
    tmp_path: Path,
) -> None:
    refused = Client(["invalid"])
    with pytest.raises(LoadJobFailedError, match="load job job into p.d.t failed"):
        committer(tmp_path, refused).commit([LOAD], 1, restored=False)
    assert refused.inserted == ["job"]
    flaky = Client(["backendError"] * 3)
    with pytest.raises(LoadJobFailedError, match="job_retry2"):
        committer(tmp_path, flaky).commit([LOAD], 1, restored=False)
    assert flaky.inserted == ["job", "job_retry1", "job_retry2"]
