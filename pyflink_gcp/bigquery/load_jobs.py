"""The commit step of ``WriteMethod.FILE_LOADS``: one committer per sink groups each table's
pending files, decides when to load them, and runs load jobs whose ids a repeated commit finds.

The writers (:mod:`pyflink_gcp.bigquery.file_loads`) name each staged file once, in a
:class:`PendingFiles` per table at the checkpoint's marker; the committer, one for the whole
sink (parallelism 1), owns everything after that, so the load jobs of a table do not multiply
with the parallelism and no writer has to carry files across checkpoints:

- **Grouping.** A commit set (see :mod:`pyflink_gcp.core.commit`) is grouped per table: the
  files of every writer subtask together, with what this committer kept from earlier commits,
  in whatever order they arrived.
- **When.** A table is due when the set is restored (its writers are gone) or final (nothing
  may be kept), or when this committer has not loaded it for ``min_load_interval`` (a table it
  never loaded is due: a new or restarted committer loads at once). A table that is not due is
  returned as one :class:`PendingFiles` holding all its waiting files: Flink keeps it in the
  committer's state with the next set, so a failover loads it from there.
- **Jobs.** A due table's files are cut into groups within BigQuery's per-job limits
  (:func:`groups`, over the files sorted by URI), and each group is loaded by one job sequence
  whose ids come from the sink, the table, the files and ``job_id_generation`` only
  (:mod:`pyflink_gcp.bigquery.load_job_ids`). A commit repeated after a failover gets the same
  set, so the same groups and ids: BigQuery answers 409 for an id it has, and the commit looks
  at that job instead of loading again. The groups load in parallel on the committer's threads.
- **Failures.** A job that failed appended nothing (load jobs are atomic). One that failed
  for a passing reason (``backendError``, ``internalError``, ``rateLimitExceeded``) is followed
  by the next id of the sequence, after an exponential backoff under the sink's retry policy;
  past its deadline the commit raises a retriable :class:`~pyflink_gcp.core.errors.WriteError`.
  The commit repeated after the restart passes the failed ids at once (they are found, not
  run) and inserts the next, so every restart makes an attempt and none ends the sequence.
  Any other failure raises :class:`LoadJobFailedError`, which ends the job: the same files
  would fail the same way under the same id. After fixing the cause, the operator restarts
  from the last checkpoint with ``job_id_generation`` one higher, which gives the same files
  new ids; a commit still looks up the earlier generations' ids first (one ``jobs.get`` per
  id, the first unknown one ending a generation), so a group one of them loaded or is
  loading is not loaded again.
- **Waiting.** A commit runs on the committer's mailbox thread: while it waits, the committer
  takes no barrier, and a checkpoint that waits past ``execution.checkpointing.timeout`` fails
  the job over. So a commit waits for its jobs (in parallel) at most :data:`COMMIT_WAIT`, or
  ``load_job_timeout`` when shorter; a job still running then is returned as a
  :class:`LoadGroup` naming where its id sequence stands, kept in state, and looked at again
  by the next commit (safe to keep: its id is a function of its files). Only while a job it
  inserted keeps failing for a passing reason does a commit wait longer: up to the sink's
  retry deadline, backoffs included. The final commit, which may keep nothing, waits up to
  ``load_job_timeout`` and then raises a retriable ``WriteError``.
- **Files** are read from, and deleted at, the URI the writer staged them under, after their
  load succeeded (a missing one counts as deleted: a repeated commit).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from pyflink_gcp.bigquery.client import resolve_rest_endpoint, rest_client
from pyflink_gcp.bigquery.destinations import TableDestination
from pyflink_gcp.bigquery.file_formats import load_job_config
from pyflink_gcp.bigquery.load_job_ids import attempt_job_id, load_job_id, safe_name
from pyflink_gcp.bigquery.options import MAX_LOAD_URIS, BigQueryFileLoadsOptions
from pyflink_gcp.bigquery.orphans import OrphanSweep
from pyflink_gcp.bigquery.schema_update import SchemaUpdate
from pyflink_gcp.bigquery.staging import Staging, open_staging
from pyflink_gcp.core.commit import Committer
from pyflink_gcp.core.errors import NonRetriableSinkError, WriteError
from pyflink_gcp.core.retry import RetryPolicy, status_name
from pyflink_gcp.core.runtime_info import SubtaskInfo

_LOG = logging.getLogger("pyflink_gcp.bigquery")
#: ``errorResult.reason`` values of a load job a new job may not meet again.
_PASSING_REASONS = frozenset({"backendError", "internalError", "rateLimitExceeded"})
#: The longest a commit other than the final one waits for its load jobs.
COMMIT_WAIT = timedelta(seconds=10)
#: The shortest look at a job: one status poll even when the commit's wait is used up.
_MIN_POLL_S = 1.0
#: BigQuery's limit on the bytes one load job reads.
MAX_LOAD_BYTES = 15 * 10**12
#: What :meth:`LoadJobCommitter._wait` returns for a job still running.
_RUNNING: Any = object()


class LoadJobFailedError(NonRetriableSinkError):
    """A load job BigQuery refused or ran and failed for a reason the same files meet again
    (rows the table refuses, a schema that does not match): the job ends instead of restarting
    into the same failure; ``job_id_generation`` is the way on once the cause is fixed."""


@dataclass(frozen=True, slots=True)
class StagedFile:
    """A pending file: where it is staged (``gs://bucket/object`` or ``file:///path``), and its
    size. The URI is the file's identity: it is loaded and deleted there, whatever the staging
    location is configured to when the committer runs."""

    uri: str
    size: int

    @property
    def name(self) -> str:
        """The object name inside its bucket (the path, for a local file)."""
        if self.uri.startswith("gs://"):
            return self.uri[5:].partition("/")[2]
        return self.uri.removeprefix("file://")


@dataclass(frozen=True, slots=True)
class PendingFiles:
    """A committable: staged files of one table waiting for their load.

    A writer subtask prepares one per table at each checkpoint's marker, naming the files it
    staged since the last one; the committer returns one per table that is not due, naming all
    its waiting files. ``location`` is the table's (from its metadata), None when unknown.
    """

    table_id: str
    files: tuple[StagedFile, ...]
    location: str | None = None


@dataclass(frozen=True, slots=True)
class LoadGroup:
    """Files of one table loaded by one job sequence; as a committable, a job still running.

    The committer returns it when the job of id ``(generation, attempt)`` in the group's
    sequence was still running at the end of a commit: the next commit resumes the sequence
    there (ids before it failed; earlier generations ended) instead of waiting now.
    """

    table_id: str
    files: tuple[StagedFile, ...]
    location: str | None = None
    generation: int = 0
    attempt: int = 0


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What one group's load came to in a commit: ``job_id`` succeeded (``found``: started
    before, by an earlier commit or attempt), or ``running`` is to be kept."""

    job_id: str
    found: bool
    running: LoadGroup | None = None


def groups(files: list[StagedFile]) -> list[tuple[StagedFile, ...]]:
    """The files cut into load jobs within BigQuery's per-job limits (URIs and bytes), in the
    order given (sorted by URI, so a set always gives the same groups)."""
    cut: list[tuple[StagedFile, ...]] = []
    current: list[StagedFile] = []
    size = 0
    for staged in files:
        if current and (len(current) >= MAX_LOAD_URIS or size + staged.size > MAX_LOAD_BYTES):
            cut.append(tuple(current))
            current, size = [], 0
        current.append(staged)
        size += staged.size
    if current:
        cut.append(tuple(current))
    return cut


def describe_files(files: tuple[StagedFile, ...]) -> str:
    """The first three URIs of ``files`` and how many more, for error messages."""
    uris = ", ".join(f.uri for f in files[:3])
    return uris + (f" and {len(files) - 3} more" if len(files) > 3 else "")


class LoadJobCommitter(Committer):
    """Groups a commit set's files per table, loads the due tables, keeps the rest (see the
    module docstring). One for the whole sink."""

    def __init__(
        self,
        *,
        sink_name: str,
        loads: BigQueryFileLoadsOptions,
        rest_endpoint: str | None,
        retry: RetryPolicy,
        threads: int,
        schema_update: SchemaUpdate = SchemaUpdate.NONE,
    ) -> None:
        self._sink = sink_name
        self._loads = loads
        self._schema_update = schema_update
        self._generation = loads.job_id_generation
        self._rest_endpoint = rest_endpoint
        self._retry = retry
        self._threads = threads
        self._clients: dict[str, Any] = {}
        self._staging: Staging | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._timeout_s = retry.attempt_timeout(60.0)
        self._lock = threading.Lock()
        #: When this committer last started loading each table (monotonic), while it is more
        #: recent than ``min_load_interval``.
        self._last_load: dict[str, float] = {}
        #: Dataset locations looked up for committables that name none.
        self._locations: dict[str, str | None] = {}
        #: Staged objects of failed attempts to delete (:mod:`pyflink_gcp.bigquery.orphans`).
        self.orphans: OrphanSweep | None = None
        #: The files of what the last commit kept: named, so never orphans.
        self._kept_uris: list[str] = []
        #: Load jobs inserted, and found started before (a 409, or a kept running job).
        self.jobs_run = 0
        self.jobs_found = 0

    def open(self, info: SubtaskInfo) -> None:
        self._staging = open_staging(self._loads, self._retry, self._sink)
        self.orphans = OrphanSweep(
            safe_name(self._sink), self._loads.part_prefix, info.attempt_number
        )
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

    # -- the commit -----------------------------------------------------------------------------

    def commit(
        self, committables: list[Any], checkpoint_id: int, restored: bool, final: bool = False
    ) -> list[Any]:
        """Load the set's due tables and follow its running jobs; returns what is kept: a
        :class:`PendingFiles` per table not due, a :class:`LoadGroup` per job still running
        (never anything when ``final``)."""
        assert self._pool is not None
        now = time.monotonic()
        loads, kept = self._plan(committables, now, due_all=restored or final)
        timeout_s = self._loads.load_job_timeout.total_seconds()
        until = now + (timeout_s if final else min(timeout_s, COMMIT_WAIT.total_seconds()))
        futures = [self._pool.submit(self._run, load, until, final) for load in loads]
        concurrent.futures.wait(futures)
        for future in futures:  # raises the first failure, once every load has come to an end
            result: LoadResult = future.result()
            if result.running is not None:
                kept.append(result.running)
        self._kept_uris = [f.uri for item in kept for f in item.files]
        if kept:
            _LOG.debug(
                "%s: checkpoint %d: %d load jobs, %d committables kept",
                self._sink,
                checkpoint_id,
                len(loads),
                len(kept),
            )
        return kept

    def waiting(self, kept: list[Any]) -> set[str] | None:
        """The tables (resource names) of the kept files and running jobs."""
        return {str(TableDestination.from_table_id(item.table_id)) for item in kept}

    def writers_started(self) -> None:
        """Delete the failed attempts' staged objects that nothing names: none of their
        committables can still come (see :mod:`pyflink_gcp.bigquery.orphans`)."""
        orphans = self.orphans
        if orphans is None or orphans.done or self._staging is None:
            return
        try:
            orphans.sweep(self._staging, self._kept_uris)
        except WriteError as exc:  # only tidying: the job goes on, the objects stay
            _LOG.warning("%s: staged objects of failed attempts not deleted: %s", self._sink, exc)

    def _plan(
        self, committables: list[Any], now: float, *, due_all: bool
    ) -> tuple[list[LoadGroup], list[Any]]:
        """The groups to load now (kept running jobs first) and the tables kept waiting."""
        running: list[LoadGroup] = []
        pending: dict[str, dict[str, StagedFile]] = {}
        locations: dict[str, str] = {}
        for item in committables:
            if isinstance(item, LoadGroup):
                running.append(item)
                continue
            if not isinstance(item, PendingFiles):
                raise NonRetriableSinkError(
                    f"sink '{self._sink}': the FILE_LOADS committer got "
                    f"{type(item).__name__}, not PendingFiles or LoadGroup"
                )
            by_uri = pending.setdefault(item.table_id, {})
            for staged in item.files:
                by_uri[staged.uri] = staged
            if item.location:
                locations.setdefault(item.table_id, item.location)
        for load in running:  # a file in a running job is never loaded by another
            for staged in load.files:
                pending.get(load.table_id, {}).pop(staged.uri, None)
        interval = self._loads.min_load_interval.total_seconds()
        self._last_load = {t: at for t, at in self._last_load.items() if now - at < interval}
        loads = list(running)
        kept: list[Any] = []
        for table_id in sorted(pending):
            files = [pending[table_id][uri] for uri in sorted(pending[table_id])]
            if not files:
                continue
            location = locations.get(table_id)
            if due_all or table_id not in self._last_load:
                self._last_load[table_id] = now
                loads.extend(LoadGroup(table_id, group, location) for group in groups(files))
            else:
                kept.append(PendingFiles(table_id, tuple(files), location))
        return loads, kept

    # -- one group's job sequence ---------------------------------------------------------------

    def _run(self, load: LoadGroup, until: float, final: bool) -> LoadResult:
        """Walk the group's id sequence to a job that succeeded (then delete the files) or is
        still running; raises when the load failed for good, or kept failing past the retry
        deadline.

        Ids found failed (started by an earlier commit) are passed at once, so every commit
        inserts a job unless one succeeded or is running. A job this commit inserted that
        fails is followed by the next id after a backoff; from then on the commit waits for
        each new job until the retry deadline rather than ``until``.
        """
        project = load.table_id.split(".", 1)[0]
        client = self._client(project)
        location = load.location or self._dataset_location(client, load.table_id)
        uris = [f.uri for f in load.files]
        config = load_job_config(self._loads.file_format, self._schema_update)
        backoff = self._retry.backoffs()
        retry_until = time.monotonic() + self._retry.deadline_s
        retrying = False
        first = load.generation if load.generation <= self._generation else 0
        for generation in range(first, self._generation + 1):
            current = generation == self._generation
            base = load_job_id(self._sink, load.table_id, uris, generation)
            attempt = load.attempt if generation == load.generation else 0
            while True:
                job_id = attempt_job_id(base, attempt)
                what = f"sink '{self._sink}': load job {job_id} into {load.table_id}"
                if current:
                    job, inserted = self._insert_or_find(
                        client, project, location, uris, load, job_id, config, what
                    )
                else:  # an earlier generation: only look, and go on where its sequence ended
                    job, inserted = self._find(client, project, location, job_id, what), False
                    if job is None:
                        break
                error = self._wait(job, max(until, retry_until) if retrying else until, what, load)
                if error is _RUNNING:
                    if final:
                        raise WriteError(
                            f"{what} still running after {self._loads.load_job_timeout} "
                            f"(load_job_timeout), at the last commit; files "
                            f"{describe_files(load.files)}"
                        )
                    running = replace(
                        load, location=location, generation=generation, attempt=attempt
                    )
                    return LoadResult(job_id, not inserted, running)
                if error is None:
                    self._delete(load)
                    return LoadResult(job_id, not inserted)
                reason = (getattr(job, "error_result", None) or {}).get("reason")
                if current and reason not in _PASSING_REASONS:
                    errors = (getattr(job, "errors", None) or [])[:5]
                    detail = f"{status_name(error)}: {error}; errors: {errors}"
                    raise self._failed(what, load, detail) from error
                if current and inserted:
                    # Raises a retriable WriteError past the retry deadline: the commit
                    # repeated after the restart walks on from here.
                    backoff.wait_or_raise(
                        error,
                        f"{what} failed ({reason}), loading files {describe_files(load.files)} "
                        "again",
                    )
                    retrying = True
                else:
                    _LOG.info("%s had failed (%s): trying the next id", what, reason)
                attempt += 1
        raise AssertionError("the current generation's sequence ends in a return or a raise")

    def _insert_or_find(
        self,
        client: Any,
        project: str,
        location: str | None,
        uris: list[str],
        load: LoadGroup,
        job_id: str,
        config: Any,
        what: str,
    ) -> tuple[Any, bool]:
        """The job ``job_id``: inserted now (True), or the one BigQuery already has (False)."""
        from google.api_core.exceptions import BadRequest, Conflict, NotFound

        def insert() -> tuple[Any, bool]:
            try:
                job = client.load_table_from_uri(
                    uris,
                    load.table_id,
                    job_id=job_id,
                    job_config=config,
                    project=project,
                    location=location,
                    timeout=self._timeout_s,
                    retry=None,
                )
            except Conflict:
                pass  # started before (an earlier commit, or this one's lost response)
            else:
                with self._lock:
                    self.jobs_run += 1
                return job, True
            try:
                job = client.get_job(
                    job_id, project=project, location=location, timeout=self._timeout_s, retry=None
                )
            except NotFound as exc:
                raise WriteError(
                    f"{what}: BigQuery has the job (409 to its insert) but jobs.get does not "
                    f"find it in location {location or 'unset'}: {exc}"
                ) from exc
            with self._lock:
                self.jobs_found += 1
            return job, False

        try:
            return self._retry.call(insert, what)
        except BadRequest as exc:  # refused at submission: the same files are refused again
            raise self._failed(what, load, f"{status_name(exc)}: {exc}") from exc

    def _find(
        self, client: Any, project: str, location: str | None, job_id: str, what: str
    ) -> Any | None:
        """The job ``job_id``, or None if BigQuery has none of that id."""
        from google.api_core.exceptions import NotFound

        def get() -> Any | None:
            try:
                return client.get_job(
                    job_id, project=project, location=location, timeout=self._timeout_s, retry=None
                )
            except NotFound:
                return None

        job = self._retry.call(get, what)
        if job is not None:
            with self._lock:
                self.jobs_found += 1
        return job

    def _wait(self, job: Any, until: float, what: str, load: LoadGroup) -> Any:
        """None when ``job`` succeeded, :data:`_RUNNING` when it had not ended by ``until``,
        else the error it failed with (its ``error_result`` says why)."""
        from google.api_core.exceptions import GoogleAPICallError

        timeout = max(until - time.monotonic(), _MIN_POLL_S)
        try:
            job.result(timeout=timeout, retry=None)
        except concurrent.futures.TimeoutError:
            return _RUNNING
        except GoogleAPICallError as exc:
            if not getattr(job, "error_result", None):  # its state could not be read
                raise WriteError(
                    f"{what} failed: {status_name(exc)}: {exc}; files {describe_files(load.files)}"
                ) from exc
            return exc
        return None

    def _failed(self, what: str, load: LoadGroup, detail: str) -> LoadJobFailedError:
        return LoadJobFailedError(
            f"{what} failed: {detail}. It appended nothing, and its files stay in the staging "
            f"location ({describe_files(load.files)}). A restart would find this failed job "
            "under the same id, so the job ends: fix the cause (the table's schema, or the rows "
            "in those files that the table refuses), then restart from the last checkpoint "
            f"with BigQueryFileLoadsOptions.job_id_generation({self._generation + 1}): the "
            "files load again under new job ids"
        )

    # -- clients and files ----------------------------------------------------------------------

    def _client(self, project: str) -> Any:
        with self._lock:
            client = self._clients.get(project)
            if client is None:
                client = rest_client(resolve_rest_endpoint(self._rest_endpoint), project)
                self._clients[project] = client
            return client

    def _dataset_location(self, client: Any, table_id: str) -> str | None:
        """The location of ``table_id``'s dataset (looked up once), for a committable that names
        none; None if the lookup fails (BigQuery then finds multi-region jobs only)."""
        from google.api_core.exceptions import GoogleAPICallError

        dataset = table_id.rsplit(".", 1)[0]
        with self._lock:
            if dataset in self._locations:
                return self._locations[dataset]
        what = f"sink '{self._sink}': get dataset {dataset}"
        try:
            found = self._retry.call(
                lambda: client.get_dataset(dataset, timeout=self._timeout_s, retry=None), what
            )
        except (GoogleAPICallError, WriteError) as exc:
            _LOG.warning("%s failed, loading without a location: %s", what, exc)
            return None
        location = getattr(found, "location", None)
        location = location if isinstance(location, str) and location else None
        with self._lock:
            self._locations[dataset] = location
        return location

    def _delete(self, load: LoadGroup) -> None:
        assert self._staging is not None
        for staged in load.files:
            try:
                self._staging.delete_uri(staged.uri)
            except WriteError as exc:
                _LOG.warning("%s: loaded, but could not delete %s: %s", self._sink, staged.uri, exc)
