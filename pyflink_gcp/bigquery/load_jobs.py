"""The commit step of ``WriteMethod.FILE_LOADS``: load jobs with ids a repeated commit finds.

The committables (:class:`FileLoad`) come from the file writers
(:mod:`pyflink_gcp.bigquery.file_loads`); one :class:`LoadJobCommitter` for the whole sink runs
the due ones after their checkpoint completed. A load job id that already exists answers 409
(BigQuery keeps the first job): the commit then waits for that job instead of loading again,
which makes a commit repeated after a failover harmless. Loaded files are deleted.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pyflink_gcp.bigquery.client import resolve_rest_endpoint, rest_client
from pyflink_gcp.bigquery.file_formats import load_job_config
from pyflink_gcp.bigquery.options import BigQueryFileLoadsOptions
from pyflink_gcp.bigquery.staging import Staging, open_staging
from pyflink_gcp.core.commit import Committer
from pyflink_gcp.core.errors import WriteError
from pyflink_gcp.core.retry import RetryPolicy, status_name
from pyflink_gcp.core.runtime_info import SubtaskInfo

_LOG = logging.getLogger("pyflink_gcp.bigquery")


@dataclass(frozen=True, slots=True)
class StagedFile:
    name: str  # the object name in the bucket
    size: int


@dataclass(frozen=True, slots=True)
class FileLoad:
    """One committable: load ``files`` into ``table_id`` with the job ``job_id``.

    ``due`` False: the table's ``min_load_interval`` has not passed; the committer skips it
    (the files come again, with the next checkpoint's committables), unless it was restored.
    """

    table_id: str
    files: tuple[StagedFile, ...]
    job_id: str
    due: bool


class LoadJobCommitter(Committer):
    """Runs the due load jobs of the committables it is handed, then deletes their files."""

    def __init__(
        self,
        *,
        sink_name: str,
        loads: BigQueryFileLoadsOptions,
        rest_endpoint: str | None,
        retry: RetryPolicy,
        threads: int,
    ) -> None:
        self._sink = sink_name
        self._loads = loads
        self._rest_endpoint = rest_endpoint
        self._retry = retry
        self._threads = threads
        self._clients: dict[str, Any] = {}
        self._staging: Staging | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._timeout_s = retry.attempt_timeout(60.0)
        #: Load jobs run (or found done after a repeated commit), for tests and logs.
        self.jobs_run = 0
        self.jobs_found = 0

    def open(self, info: SubtaskInfo) -> None:
        self._staging = open_staging(self._loads, self._retry, self._sink)
        self._pool = ThreadPoolExecutor(
            max_workers=self._threads, thread_name_prefix=f"{self._sink}-{info.subtask_index}-load"
        )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        for client in self._clients.values():
            client.close()
        self._clients.clear()
        if self._staging is not None:
            self._staging.close()
            self._staging = None

    def commit(self, committables: list[Any], checkpoint_id: int, restored: bool) -> None:
        # A restored committable loads whether it was due or not: its writer is gone.
        jobs: dict[str, FileLoad] = {}
        for load in committables:
            if load.due or restored:
                jobs.setdefault(load.job_id, load)
        assert self._pool is not None
        for future in [self._pool.submit(self._run, load) for load in jobs.values()]:
            future.result()

    def _client(self, project: str) -> Any:
        client = self._clients.get(project)
        if client is None:
            client = rest_client(resolve_rest_endpoint(self._rest_endpoint), project)
            self._clients[project] = client
        return client

    def _run(self, load: FileLoad) -> None:
        from google.api_core.exceptions import Conflict

        project = load.table_id.split(".", 1)[0]
        client = self._client(project)
        what = f"sink '{self._sink}': load job {load.job_id} into {load.table_id}"
        config = load_job_config(self._loads.file_format)
        assert self._staging is not None
        uris = [self._staging.uri(f.name) for f in load.files]

        def insert() -> Any:
            try:
                job = client.load_table_from_uri(
                    uris,
                    load.table_id,
                    job_id=load.job_id,
                    job_config=config,
                    project=project,
                    timeout=self._timeout_s,
                    retry=None,
                )
                self.jobs_run += 1
                return job
            except Conflict:
                # Started by an earlier attempt of this commit: wait for that job instead.
                self.jobs_found += 1
                return client.get_job(
                    load.job_id, project=project, timeout=self._timeout_s, retry=None
                )

        job = self._retry.call(insert, what)
        try:
            job.result(timeout=self._loads.load_job_timeout.total_seconds(), retry=None)
        except Exception as exc:
            errors = getattr(job, "errors", None) or []
            raise WriteError(
                f"{what} failed: {status_name(exc)}: {exc}; errors: {errors[:5]}"
            ) from exc
        assert self._staging is not None
        for staged in load.files:
            try:
                self._staging.delete(staged.name)
            except WriteError as exc:
                _LOG.warning(
                    "%s: loaded, but could not delete %s: %s", self._sink, staged.name, exc
                )
