"""The FILE_LOADS committer: per-table grouping and due tables, job ids a repeated commit finds,
the unbounded retry id sequence with its backoff and generations, locations, running jobs kept
for the next commit (the client here is bookkeeping only; the emulator tests run the real one).
"""

from __future__ import annotations

import concurrent.futures
from collections import Counter
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from google.api_core import exceptions

from pyflink_gcp.bigquery import load_jobs
from pyflink_gcp.bigquery.load_job_ids import MAX_JOB_ID_CHARS, attempt_job_id, load_job_id
from pyflink_gcp.bigquery.load_jobs import (
    LoadGroup,
    LoadJobCommitter,
    LoadJobFailedError,
    PendingFiles,
    StagedFile,
    groups,
)
from pyflink_gcp.bigquery.options import BigQueryFileLoadsOptions
from pyflink_gcp.core.errors import NonRetriableSinkError, WriteError
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.core.runtime_info import SubtaskInfo


class Job:
    """A load job: fails with ``reason`` (None: succeeds) after ``polls`` looks that find it
    still running."""

    def __init__(self, job_id: str, reason: str | None, polls: int = 0) -> None:
        self.job_id = job_id
        self.error_result = {"reason": reason, "message": "m"} if reason else None
        self.errors = [self.error_result] if reason else []
        self.polls = polls

    def result(self, timeout: float, retry: Any) -> None:
        if self.polls:
            self.polls -= 1
            raise concurrent.futures.TimeoutError()
        if self.error_result:
            raise exceptions.InternalServerError(f"job {self.job_id} failed")


class Client:
    """Jobs by id; the reasons the next new jobs fail with, in order (None: success); how many
    looks find each new job still running."""

    def __init__(
        self, reasons: list[str | None] | None = None, polls: int = 0, dataset_location: Any = None
    ) -> None:
        self.jobs: dict[str, Job] = {}
        self.reasons = list(reasons or [])
        self.polls = polls
        self.dataset_location = dataset_location
        self.inserted: list[str] = []
        self.uris: dict[str, list[str]] = {}
        self.insert_locations: list[str | None] = []
        self.dataset_lookups = 0

    def load_table_from_uri(
        self, uris: Any, table: str, *, job_id: str, location: str | None = None, **kw: Any
    ) -> Job:
        if job_id in self.jobs:
            raise exceptions.Conflict(f"Already Exists: Job {job_id}")
        self.inserted.append(job_id)
        self.uris[job_id] = list(uris)
        self.insert_locations.append(location)
        reason = self.reasons.pop(0) if self.reasons else None
        job = self.jobs[job_id] = Job(job_id, reason, self.polls)
        return job

    def get_job(self, job_id: str, **kw: Any) -> Job:
        if job_id not in self.jobs:
            raise exceptions.NotFound(f"Not found: Job {job_id}")
        return self.jobs[job_id]

    def get_dataset(self, dataset: str, **kw: Any) -> Any:
        self.dataset_lookups += 1
        return SimpleNamespace(location=self.dataset_location)

    def loaded(self) -> Counter[str]:
        """How many succeeded jobs loaded each URI."""
        return Counter(
            uri
            for job_id, uris in self.uris.items()
            if self.jobs[job_id].error_result is None
            for uri in uris
        )

    def close(self) -> None:
        pass


class RegionalClient(Client):
    """Jobs in europe-west3: ``jobs.get`` finds them only when told that location."""

    def get_job(self, job_id: str, *, location: str | None = None, **kw: Any) -> Job:
        if location != "europe-west3":
            raise exceptions.NotFound(f"Not found: Job {job_id} (location {location})")
        return super().get_job(job_id)


def committer(
    tmp_path: Path, client: Client, retry: RetryPolicy | None = None, **loads: Any
) -> LoadJobCommitter:
    c = LoadJobCommitter(
        sink_name="s",
        loads=BigQueryFileLoadsOptions(staging_location=str(tmp_path / "stage"), **loads),
        rest_endpoint=None,
        retry=retry or RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.01, deadline_s=5),
        threads=2,
    )
    c.open(SubtaskInfo("s", subtask_index=0))
    c._clients["p"] = client
    return c


def staged(tmp_path: Path, *names: str) -> tuple[StagedFile, ...]:
    """Files staged (they exist, so deleting them shows) under ``tmp_path/stage``."""
    files = []
    for name in names:
        path = tmp_path / "stage" / "p.d.t" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}\n")
        files.append(StagedFile(f"file://{path}", 10))
    return tuple(files)


def job_id(files: tuple[StagedFile, ...], table: str = "p.d.t", generation: int = 0) -> str:
    return load_job_id("s", table, [f.uri for f in files], generation)


def exist(files: tuple[StagedFile, ...]) -> list[bool]:
    return [Path(f.name).exists() for f in files]


def test_the_files_of_every_writer_load_in_one_job_per_table_in_any_order(tmp_path: Path) -> None:
    a, b = staged(tmp_path, "a0", "a1"), staged(tmp_path, "b0")
    u = staged(tmp_path, "u0")
    committables = [
        PendingFiles("p.d.t", a[:1]),  # writer subtask 0
        PendingFiles("p.d.u", u),
        PendingFiles("p.d.t", a[1:] + b),  # writer subtask 1
    ]
    client = Client()
    assert committer(tmp_path, client).commit(committables, 5, restored=False) == []
    assert sorted(client.inserted) == sorted([job_id(a + b), job_id(u, "p.d.u")])
    assert client.loaded() == Counter(f.uri for f in a + b + u)
    assert exist(a + b + u) == [False] * 4  # loaded, deleted
    # A repeat (any order, a fresh committer) derives the same jobs and finds them.
    again = committer(tmp_path, client)
    assert again.commit(committables[::-1], 5, restored=True) == []
    assert len(client.inserted) == 2 and again.jobs_found == 2


def test_a_table_waits_out_its_interval_in_one_kept_committable(
    tmp_path: Path, monkeypatch: Any
) -> None:
    now = [1000.0]
    monkeypatch.setattr(load_jobs.time, "monotonic", lambda: now[0])
    client = Client()
    c = committer(tmp_path, client, min_load_interval=timedelta(seconds=60))
    f = staged(tmp_path, "a0", "a1", "a2", "a3")
    assert c.commit([PendingFiles("p.d.t", f[:1], "EU")], 1, restored=False) == []  # first: due
    now[0] += 10
    [kept] = c.commit([PendingFiles("p.d.t", f[1:2], "EU")], 2, restored=False)
    assert kept == PendingFiles("p.d.t", f[1:2], "EU")
    now[0] += 10
    [kept] = c.commit([PendingFiles("p.d.t", f[2:3]), kept], 3, restored=False)
    assert kept == PendingFiles("p.d.t", f[1:3], "EU")  # every waiting file, in one committable
    now[0] += 41  # 61 s after the first load
    assert c.commit([kept, PendingFiles("p.d.t", f[3:])], 4, restored=False) == []
    assert client.inserted == [job_id(f[:1]), job_id(f[1:])]


def test_a_restored_or_final_set_loads_everything_that_waits(tmp_path: Path) -> None:
    client = Client()
    c = committer(tmp_path, client, min_load_interval=timedelta(hours=1))
    f = staged(tmp_path, "a0", "a1", "a2")
    c.commit([PendingFiles("p.d.t", f[:1])], 1, restored=False)
    [kept] = c.commit([PendingFiles("p.d.t", f[1:2])], 2, restored=False)
    # Stop-with-savepoint or the end of input: nothing may wait.
    assert c.commit([kept, PendingFiles("p.d.t", f[2:])], 3, restored=False, final=True) == []
    assert client.inserted == [job_id(f[:1]), job_id(f[1:])] and exist(f) == [False] * 3
    # A restored set: its writers are gone, whatever the interval.
    g = staged(tmp_path, "b0", "b1")
    assert c.commit([PendingFiles("p.d.t", g[:1])], 4, restored=True) == []
    assert c.commit([PendingFiles("p.d.t", g[1:])], 4, restored=True) == []
    assert client.inserted[2:] == [job_id(g[:1]), job_id(g[1:])]


def test_a_passing_failure_loads_again_under_the_next_id_and_a_repeat_finds_it(
    tmp_path: Path,
) -> None:
    f = staged(tmp_path, "a0")
    client = Client(["backendError", "rateLimitExceeded", "internalError", None])
    committer(tmp_path, client).commit([PendingFiles("p.d.t", f)], 1, restored=False)
    x = job_id(f)
    assert client.inserted == [x, f"{x}_retry1", f"{x}_retry2", f"{x}_retry3"]
    again = committer(tmp_path, client)
    again.commit([PendingFiles("p.d.t", f)], 1, restored=True)  # all four ids exist
    assert len(client.inserted) == 4 and again.jobs_found == 4
    assert client.loaded() == Counter([f[0].uri])


def test_passing_failures_past_the_retry_deadline_restart_and_the_restart_walks_on(
    tmp_path: Path,
) -> None:
    # The review's F5: three passing failures, then the service is healthy again.
    f = staged(tmp_path, "a0")
    x = job_id(f)
    client = Client(["backendError"] * 3)
    no_time = RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.001, deadline_s=0)
    for attempt in range(3):
        with pytest.raises(WriteError, match=r"retry deadline") as failed:
            committer(tmp_path, client, no_time).commit(
                [PendingFiles("p.d.t", f)], 1, restored=attempt > 0
            )
        assert not isinstance(failed.value, NonRetriableSinkError)  # a restart, not the end
        assert attempt_job_id(x, attempt) in str(failed.value) and f[0].uri in str(failed.value)
    client.reasons = []
    fresh = committer(tmp_path, client)
    assert fresh.commit([PendingFiles("p.d.t", f)], 1, restored=True) == []
    assert client.inserted == [attempt_job_id(x, n) for n in range(4)]
    assert client.loaded() == Counter([f[0].uri]) and exist(f) == [False]


def test_a_refused_load_ends_the_job_until_a_new_generation_loads_the_files(
    tmp_path: Path,
) -> None:
    good, bad = staged(tmp_path, "g0"), staged(tmp_path, "b0")
    committables = [PendingFiles("p.d.t", good), PendingFiles("p.d.u", bad)]
    client = Client()
    real_insert = client.load_table_from_uri

    def refuse_u(uris: Any, table: str, **kw: Any) -> Job:
        job = real_insert(uris, table, **kw)
        if table == "p.d.u" and "_g1_" not in kw["job_id"]:
            job.error_result = {"reason": "invalid", "message": "bad row"}
            job.errors = [job.error_result]
        return job

    client.load_table_from_uri = refuse_u  # type: ignore[method-assign]
    for restored in (False, True):  # the repeated commit finds the same failed job
        with pytest.raises(LoadJobFailedError) as failed:
            committer(tmp_path, client).commit(committables, 1, restored=restored)
        message = str(failed.value)
        assert f"sink 's': load job {job_id(bad, 'p.d.u')} into p.d.u failed" in message
        assert bad[0].uri in message and "job_id_generation(1)" in message
    assert len(client.inserted) == 2 and exist(bad) == [True]
    # The cause fixed, generation 1: the refused files load under a new id; the table whose
    # generation-0 job succeeded is found there, not loaded again.
    next_generation = committer(tmp_path, client, job_id_generation=1)
    assert next_generation.commit(committables, 1, restored=True) == []
    assert client.inserted[2:] == [job_id(bad, "p.d.u", 1)]
    assert client.loaded() == Counter([good[0].uri, bad[0].uri])


def test_job_calls_name_the_tables_location(tmp_path: Path) -> None:
    # The review's F3: jobs.get finds a europe-west3 job only when told its location.
    f = staged(tmp_path, "a0")
    client = RegionalClient()
    client.load_table_from_uri(["earlier attempt"], "p.d.t", job_id=job_id(f))
    c = committer(tmp_path, client)
    assert c.commit([PendingFiles("p.d.t", f, "europe-west3")], 1, restored=True) == []
    assert c.jobs_found == 1 and len(client.inserted) == 1
    # A committable without a location: the dataset's is looked up (once) and passed.
    g = staged(tmp_path, "b0", "b1")
    regional = RegionalClient(dataset_location="europe-west3")
    c = committer(tmp_path, regional, min_load_interval=timedelta(0))
    c.commit([PendingFiles("p.d.t", g[:1])], 1, restored=False)
    c.commit([PendingFiles("p.d.t", g[1:])], 2, restored=False)
    assert regional.insert_locations == ["europe-west3", "europe-west3"]
    assert regional.dataset_lookups == 1


def test_a_running_job_is_kept_for_the_next_commit_instead_of_waited_for(tmp_path: Path) -> None:
    f = staged(tmp_path, "a0")
    client = Client(polls=2)  # two looks find it running
    c = committer(tmp_path, client)
    [running] = c.commit([PendingFiles("p.d.t", f, "EU")], 1, restored=False)
    assert running == LoadGroup("p.d.t", f, "EU", generation=0, attempt=0)
    assert exist(f) == [True]
    assert c.commit([running], 2, restored=False) == [running]  # still running
    assert c.commit([running], 3, restored=False) == []  # done: the files go
    assert client.inserted == [job_id(f)] and exist(f) == [False]
    # The last commit cannot keep it: it waits up to load_job_timeout, then restarts.
    g = staged(tmp_path, "b0")
    slow = Client(polls=5)
    final = committer(tmp_path, slow, load_job_timeout=timedelta(seconds=1))
    with pytest.raises(WriteError, match=r"still running after 0:00:01 \(load_job_timeout\)"):
        final.commit([PendingFiles("p.d.t", g)], 1, restored=False, final=True)


def test_a_kept_running_job_that_failed_loads_again_under_the_next_id(tmp_path: Path) -> None:
    f = staged(tmp_path, "a0")
    client = Client(["backendError", None], polls=1)
    c = committer(tmp_path, client)
    [running] = c.commit([PendingFiles("p.d.t", f)], 1, restored=False)
    client.polls = 0
    assert c.commit([running], 2, restored=False) == []
    assert client.inserted == [job_id(f), f"{job_id(f)}_retry1"]


def test_job_ids_depend_on_sink_table_files_and_generation_only() -> None:
    uris = ["gs://b/x", "gs://b/y"]
    job = load_job_id("my sink", "p.d.t", uris, 0)
    assert job == load_job_id("my sink", "p.d.t", uris[::-1], 0)  # a set: order does not count
    assert job.startswith("pyflink_gcp_my_sink_p_d_t_") and len(job.rsplit("_", 1)[1]) == 64
    assert job != load_job_id("my sink", "p.d.t", uris[:1], 0)
    assert job != load_job_id("my sink", "p.d.t", uris, 1)
    assert "_g1_" in load_job_id("my sink", "p.d.t", uris, 1)
    assert all(c.isalnum() or c in "_-" for c in job)


def test_a_long_table_id_never_cuts_off_the_digest() -> None:
    # The review's F10: a table id of 1,100 characters.
    table = "p." + "d" * 600 + "." + "t" * 497
    assert len(table) == 1_100
    x = load_job_id("s", table, ["gs://b/x"], 0)
    y = load_job_id("s", table, ["gs://b/y"], 0)
    assert x != y and x[-64:] != y[-64:]
    assert len(x) <= MAX_JOB_ID_CHARS and len(attempt_job_id(x, 10**15)) <= MAX_JOB_ID_CHARS


def test_groups_stay_within_the_uris_of_one_load_job(monkeypatch: Any) -> None:
    monkeypatch.setattr(load_jobs, "MAX_LOAD_URIS", 3)
    cut = groups([StagedFile(f"gs://b/{n}", 10) for n in "abcdefg"])
    assert [len(g) for g in cut] == [3, 3, 1]


def test_a_staged_file_is_named_by_its_uri() -> None:
    assert StagedFile("gs://bucket/stage/p.d.t/x.pending", 1).name == "stage/p.d.t/x.pending"
    assert StagedFile("file:///srv/stage/p.d.t/x.pending", 1).name == "/srv/stage/p.d.t/x.pending"


def test_files_load_and_are_deleted_where_they_were_staged(tmp_path: Path) -> None:
    # The staging location changed since the files were staged: their URIs still count.
    elsewhere = tmp_path / "old-stage" / "x.pending"
    elsewhere.parent.mkdir()
    elsewhere.write_text("{}\n")
    f = (StagedFile(f"file://{elsewhere}", 3),)
    client = Client()
    committer(tmp_path, client).commit([PendingFiles("p.d.t", f)], 1, restored=True)
    assert client.uris[job_id(f)] == [f"file://{elsewhere}"] and not elsewhere.exists()
