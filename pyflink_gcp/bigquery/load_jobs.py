"""The commit step of ``WriteMethod.FILE_LOADS``: load jobs with ids a repeated commit finds.

The committables (:class:`FileLoad`) come from the file writers
(:mod:`pyflink_gcp.bigquery.file_loads`); one :class:`LoadJobCommitter` for the whole sink runs
the due ones after their checkpoint completed. A load job id that already exists answers 409
(BigQuery keeps the first job): the commit then waits for that job instead of loading again,
which makes a commit repeated after a failover harmless. Loaded files are deleted.
"""

from __future__ import annotations

import concurrent.futures
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pyflink_gcp.bigquery.client import resolve_rest_endpoint, rest_client
from pyflink_gcp.bigquery.file_formats import load_job_config
from pyflink_gcp.bigquery.options import BigQueryFileLoadsOptions
from pyflink_gcp.bigquery.staging import Staging, open_staging
from pyflink_gcp.core.commit import Committer
from pyflink_gcp.core.errors import NonRetriableSinkError, WriteError
from pyflink_gcp.core.retry import RetryPolicy, status_name
from pyflink_gcp.core.runtime_info import SubtaskInfo

_LOG = logging.getLogger("pyflink_gcp.bigquery")
#: Load jobs tried per committable when BigQuery fails one for a passing reason.
_JOB_ATTEMPTS = 3
#: ``errorResult.reason`` values of a load job a new job may not meet again.
_PASSING_REASONS = frozenset({"backendError", "internalError", "rateLimitExceeded"})


class LoadJobFailedError(NonRetriableSinkError):
    """A load job BigQuery refused or ran and failed for a reason the same files meet again
    (rows the table refuses, a schema that does not match): the job ends instead of restarting
    into the same failure."""


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

    def _insert_or_find(
        self,
        client: Any,
        project: str,
        uris: list[str],
        load: FileLoad,
        job_id: str,
        config: Any,
        what: str,
    ) -> Any:
        from google.api_core.exceptions import BadRequest, Conflict

        def insert() -> Any:
            try:
                job = client.load_table_from_uri(
                    uris,
                    load.table_id,
                    job_id=job_id,
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
                return client.get_job(job_id, project=project, timeout=self._timeout_s, retry=None)

        try:
            return self._retry.call(insert, what)
        except BadRequest as exc:  # refused at submission: the same files are refused again
            raise self._failed(what, load, f"{status_name(exc)}: {exc}") from exc

    def _failed(self, what: str, load: FileLoad, detail: str) -> LoadJobFailedError:
        names = ", ".join(f.name for f in load.files[:3])
        more = f" and {len(load.files) - 3} more" if len(load.files) > 3 else ""
        return LoadJobFailedError(
            f"{what} failed: {detail}. The files stay in the staging location ({names}{more}); "
            "a restart would load the same files again and fail the same way, so the job ends: "
            "fix or remove them (rows in them that the table refuses), then restart from the "
            "last checkpoint"
        )

    def _client(self, project: str) -> Any:
        client = self._clients.get(project)
        if client is None:
            client = rest_client(resolve_rest_endpoint(self._rest_endpoint), project)
            self._clients[project] = client
        return client

    def _run(self, load: FileLoad) -> None:
        from google.api_core.exceptions import GoogleAPICallError

        project = load.table_id.split(".", 1)[0]
        client = self._client(project)
        config = load_job_config(self._loads.file_format)
        assert self._staging is not None
        uris = [self._staging.uri(f.name) for f in load.files]
        # A load job that failed appended nothing (load jobs are atomic), so one that failed
        # for a passing reason is run again under the next id of a fixed sequence: a commit
        # repeated after a failover walks the same ids and stops at the one that succeeded.
        for attempt in range(_JOB_ATTEMPTS):
            job_id = load.job_id if attempt == 0 else f"{load.job_id[:1000]}_retry{attempt}"
            what = f"sink '{self._sink}': load job {job_id} into {load.table_id}"
            job = self._insert_or_find(client, project, uris, load, job_id, config, what)
            try:
                job.result(timeout=self._loads.load_job_timeout.total_seconds(), retry=None)
            except concurrent.futures.TimeoutError as exc:
                # Still running: a restart commits again and waits for the same job.
                raise WriteError(
                    f"{what} still running after {self._loads.load_job_timeout}"
                ) from exc
            except GoogleAPICallError as exc:
                result = getattr(job, "error_result", None)
                if not result:  # the job's state could not be read: a restart asks again
                    raise WriteError(f"{what} failed: {status_name(exc)}: {exc}") from exc
                errors = getattr(job, "errors", None) or []
                if result.get("reason") in _PASSING_REASONS and attempt + 1 < _JOB_ATTEMPTS:
                    _LOG.warning("%s failed (%s), loading again: %s", what, result, errors[:3])
                    continue
                detail = f"{status_name(exc)}: {exc}; errors: {errors[:5]}"
                raise self._failed(what, load, detail) from exc
            break
        assert self._staging is not None
        for staged in load.files:
            try:
                self._staging.delete(staged.name)
            except WriteError as exc:
                _LOG.warning(
                    "%s: loaded, but could not delete %s: %s", self._sink, staged.name, exc
                )
