"""``WriteMethod.FILE_LOADS``: rows staged in files per table, loaded exactly once after each
checkpoint.

The file lifecycle is the one Flink users know from the file sinks:

- **in-progress**: a table's open file, on local disk, in a directory of the subtask's run
  (``<spool>/<sink>/<subtask>/<run>/<table id>/``), named
  ``<part prefix>-<sink>-<subtask>-<attempt>-<uuid4 hex>.<format><in-progress suffix>``. Rows
  are converted with the table's schema as they are written, in the configured
  :class:`~pyflink_gcp.bigquery.options.FileFormat` (:mod:`pyflink_gcp.bigquery.file_formats`),
  so a bad row goes to the failure handler with its record.
- **pending**: a finished file, uploaded to the staging location as
  ``gs://bucket/prefix/<table id>/<name><pending suffix>`` (or copied into a local staging
  directory, :mod:`pyflink_gcp.bigquery.staging`). A file is finished when it
  reaches ``max_file_bytes``, when its table had no record for ``inactivity_interval``, when
  its writer is released (idle, or least recently used at ``max_active_destinations``: the cap
  on open files), and at every checkpoint's marker.
- **loaded**, then **deleted**: the committer (:mod:`pyflink_gcp.bigquery.load_jobs`, one for
  the whole sink) loads each table's pending files once their checkpoint completed and the
  table's ``min_load_interval`` passed, and deletes them.

Exactly once: at each checkpoint's marker a writer subtask names every file it staged since
the previous marker, once, in a :class:`~pyflink_gcp.bigquery.load_jobs.PendingFiles` per table
(with the table's location). It keeps nothing back: waiting out ``min_load_interval``, grouping
and load job ids are the committer's, whose waiting files live in Flink's state. The files of an
attempt that failed before its checkpoint completed are never named by a committed committable
(their records are replayed).

Names are unique without coordination: an object name holds the sink name and a uuid4, and
each run of a subtask spools into a directory of its own, locked while the run lives. A
subtask removes its run directory when it closes, and when it opens, the directories of
earlier runs of the same sink and subtask whose owner is gone (the lock is free; without a
lock file, nothing in them changed for an hour): their in-progress files are never loaded.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ClassVar

from pyflink_gcp.bigquery.destinations import TableDestination
from pyflink_gcp.bigquery.file_formats import PartWriter, part_writer_type
from pyflink_gcp.bigquery.load_job_ids import safe_name
from pyflink_gcp.bigquery.load_jobs import LoadJobCommitter, PendingFiles, StagedFile
from pyflink_gcp.bigquery.options import (
    LOAD_JOBS_PER_TABLE_PER_DAY,
    BigQueryFileLoadsOptions,
    BigQueryWriterOptions,
)
from pyflink_gcp.bigquery.schema_update import UnknownFields, fatal_reason
from pyflink_gcp.bigquery.serialization import CHANGE_TYPE, row_payload
from pyflink_gcp.bigquery.staging import Staging, open_staging
from pyflink_gcp.bigquery.tables import TableCatalog, TableLayout, open_metadata, schema_updates
from pyflink_gcp.bigquery.values import RowError
from pyflink_gcp.core.commit import CommittingWriterFactory
from pyflink_gcp.core.errors import ConfigurationError, SerializerError, WriteError
from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.functions import describe_callable, short_repr
from pyflink_gcp.core.options import CreateDisposition
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.core.runtime_info import SubtaskInfo
from pyflink_gcp.core.writer import DestinationWriter, PicklesConfiguration

try:
    import fcntl
except ImportError:  # not POSIX: run directories are told dead by their age alone
    fcntl = None  # type: ignore[assignment]

#: Rows a table writer holds before it writes them to its file (it waits for the table's schema
#: only then, not on every record).
_DRAIN_ROWS = 1_000
#: The lock file of a run's spool directory, held while the run lives.
_LOCK_FILE = ".lock"
#: A run directory without a lock file is an earlier run's once nothing in it changed for this
#: long (a new run's directory has none for the moment it takes to create it).
_STALE_RUN_S = 3_600.0


class _PartFile:
    """An in-progress file on local disk: its format's writer and when it was last written."""

    __slots__ = ("name", "writer", "last_write", "last_check")

    def __init__(self, name: str, writer: PartWriter) -> None:
        self.name = name
        self.writer = writer
        self.last_write = self.last_check = time.monotonic()

    @property
    def path(self) -> str:
        return self.writer.path

    @property
    def size(self) -> int:
        return self.writer.size


class TableFileWriter(DestinationWriter[TableDestination]):
    """Stages the rows of one table: its open in-progress file and its uploads (processing
    thread; uploads run on the factory's threads)."""

    def __init__(
        self,
        destination: TableDestination,
        factory: FileLoadsWriterFactory,
        layout: Future[TableLayout],
    ) -> None:
        super().__init__(destination)
        self._factory = factory
        self._sink = factory.sink_name
        self._layout_source = layout
        self._fields: Any = None
        self._rows: list[tuple[Any, Any]] = []
        self._file: _PartFile | None = None
        self._uploads: list[Future[StagedFile]] = []
        self._staged: list[StagedFile] = []
        self._rejected: list[FailedRecord] = []

    def write(self, element: Any, record: Any) -> None:
        if type(element) is not dict and not isinstance(element, Mapping):
            raise SerializerError(
                f"sink '{self._sink}': the serializer returned {type(element).__name__} for "
                f"table {self.destination.table_id}; a BigQuery row is a dict keyed by column "
                f"name (or None to skip). Record: {short_repr(record)}"
            )
        if CHANGE_TYPE in element:
            raise ConfigurationError(
                f"sink '{self._sink}': a change-data-capture row ({CHANGE_TYPE}) for table "
                f"{self.destination.table_id}, but load jobs only append: use "
                f"WriteMethod.STORAGE_API_AT_LEAST_ONCE for CDC tables. Record: "
                f"{short_repr(record)}"
            )
        self._rows.append((element, record))
        if len(self._rows) >= _DRAIN_ROWS:
            self._drain()

    def _drain(self) -> None:
        """Write the held rows to the open file, rolling it at ``max_file_bytes``."""
        if not self._rows:
            return
        fields = self._fields
        if fields is None:
            layout = self._layout_source.result()  # raises a missing table, a refused creation
            fields = self._fields = layout.fields
        max_bytes = self._factory.loads.max_file_bytes
        rows, self._rows = self._rows, []
        for element, record in rows:
            part = self._file
            if part is None:
                part = self._file = self._factory.new_part_file(self.destination, fields)
            try:
                part.writer.write(element)
            except RowError as exc:
                failed = self._failed(element, record, str(exc))
                failed.fatal = fatal_reason(exc, self._factory.options.unknown_fields)
                self._rejected.append(failed)
                continue
            part.last_write = time.monotonic()
            if part.size >= max_bytes:
                self._finish()

    def _failed(self, element: Any, record: Any, reason: str) -> FailedRecord:
        return FailedRecord(
            sink=self._sink,
            destination=str(self.destination),
            reason=reason,
            payload=row_payload(element),
            record_repr=short_repr(record),
        )

    def _finish(self) -> None:
        """The open file becomes pending: closed and uploaded (on an upload thread)."""
        part, self._file = self._file, None
        if part is None:
            return
        if not part.writer.rows:  # every row was rejected: nothing to load
            part.writer.abort()
            _remove(part.path)
            return
        part.writer.finish()
        self._uploads.append(self._factory.upload(part, self.destination))

    def start_flush(self) -> None:
        """An ordinary bundle end: write what is held, and finish an inactive file."""
        self._drain()
        part = self._file
        if part is not None and self._factory.inactive(part):
            self._finish()

    def flush(self) -> list[FailedRecord]:
        """Finish the open file and wait for every upload: everything written is pending."""
        self._drain()
        self._finish()
        uploads, self._uploads = self._uploads, []
        for upload in uploads:
            self._staged.append(upload.result())
        rejected, self._rejected = self._rejected, []
        return rejected

    def take_staged(self) -> list[StagedFile]:
        """The files uploaded since the last call (after a flush: every file written)."""
        staged, self._staged = self._staged, []
        return staged

    @property
    def location(self) -> str | None:
        """The table's location once its metadata arrived (None before, or when unknown): the
        committer's job calls need it for a table outside the US and EU multi-regions."""
        source = self._layout_source
        if not source.done() or source.cancelled() or source.exception() is not None:
            return None
        return source.result().location

    @property
    def is_clean(self) -> bool:
        return not (self._rows or self._file or self._uploads or self._rejected)

    def close(self) -> None:
        part, self._file = self._file, None
        if part is not None:  # the task failed: an in-progress file is never loaded
            part.writer.abort()
            _remove(part.path)
        self._factory.writer_closed(self)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


class FileLoadsWriterFactory(PicklesConfiguration, CommittingWriterFactory):
    """Creates the table file writers of one sink subtask, uploads their finished files, and
    names each of them once in the committables of the next checkpoint's marker."""

    accepts_unroutable = True
    destination_type = TableDestination
    #: One committer for the whole sink: it groups every subtask's files of a table into one
    #: load job on one clock per table, so the load jobs per table per day do not grow with
    #: the parallelism.
    committer_parallelism: int | None = 1

    _config_fields: ClassVar[tuple[str, ...]] = (
        "sink_name",
        "resolver_name",
        "serializer",
        "options",
        "loads",
        "create_disposition",
        "rest_endpoint",
        "retry",
    )

    def __init__(
        self,
        *,
        sink_name: str,
        resolver: Any,
        serializer: Any,
        options: BigQueryWriterOptions,
        loads: BigQueryFileLoadsOptions,
        create_disposition: CreateDisposition = CreateDisposition.CREATE_NEVER,
        rest_endpoint: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.sink_name = sink_name
        self.resolver_name = describe_callable(resolver) if resolver is not None else "-"
        self.serializer = serializer
        self.options = options
        self.loads = loads
        self.create_disposition = create_disposition
        self.rest_endpoint = rest_endpoint
        self.retry = retry or RetryPolicy(deadline_s=options.retry_deadline_s)
        self._init_runtime()

    def gauges(self) -> dict[str, Callable[[], int]]:
        return {"schemaUpdates": lambda: schema_updates(self.catalog)}

    def _init_runtime(self) -> None:
        self.info: SubtaskInfo | None = None
        self.catalog: TableCatalog | None = None
        self.staging: Staging | None = None
        self._metadata: ThreadPoolExecutor | None = None
        self._uploader: ThreadPoolExecutor | None = None
        #: This run's spool directory, and the descriptor holding its lock file.
        self._spool = ""
        self._spool_lock: int | None = None
        self._writers: set[TableFileWriter] = set()
        #: Files staged since the last prepare_commit, and the tables' known locations, by id.
        self._staged: dict[str, list[StagedFile]] = {}
        self._locations: dict[str, str] = {}
        self._lock = threading.Lock()
        #: Files and bytes this subtask uploaded.
        self.files_staged = 0
        self.bytes_staged = 0

    # -- lifecycle ------------------------------------------------------------------------------

    def open(self, info: SubtaskInfo) -> None:
        self.info = info
        self.sink_name = info.sink_name
        root = self.loads.spool_directory or tempfile.gettempdir()
        runs = os.path.join(root, safe_name(self.sink_name), str(info.subtask_index))
        self._spool = os.path.join(runs, uuid.uuid4().hex)
        os.makedirs(self._spool)
        self._spool_lock = _lock_run(self._spool)
        # The in-progress files of an earlier run of this subtask are never loaded: their
        # records are replayed from the checkpoint. Another live run's are left alone.
        _remove_dead_runs(runs, keep=self._spool)
        self.catalog, self._metadata = open_metadata(self, info.subtask_index)
        self._uploader = ThreadPoolExecutor(
            max_workers=self.options.sender_threads,
            thread_name_prefix=f"{self.sink_name}-{info.subtask_index}-upload",
        )
        self.staging = open_staging(self.loads, self.retry, self.sink_name)

    def close(self) -> None:
        for executor in (self._uploader, self._metadata):
            if executor is not None:
                executor.shutdown(wait=False, cancel_futures=True)
        self._uploader = self._metadata = None
        for closeable in (self.catalog, self.staging):
            if closeable is not None:
                closeable.close()
        self.catalog = self.staging = None
        self._writers.clear()
        if self._spool:  # whatever is still in progress is never loaded
            shutil.rmtree(self._spool, ignore_errors=True)
        if self._spool_lock is not None:
            os.close(self._spool_lock)
            self._spool_lock = None

    def create_writer(self, destination: TableDestination) -> TableFileWriter:
        if self._metadata is None or self.catalog is None:
            raise WriteError(f"sink '{self.sink_name}': the writer factory is not open")
        writer = TableFileWriter(
            destination, self, self._metadata.submit(self.catalog.layout, destination)
        )
        self._writers.add(writer)
        return writer

    def writer_closed(self, writer: TableFileWriter) -> None:
        if writer in self._writers:
            self._writers.discard(writer)
            self._stage(writer.destination.table_id, writer.take_staged(), writer.location)

    # -- files ----------------------------------------------------------------------------------

    def new_part_file(self, destination: TableDestination, fields: Any) -> _PartFile:
        assert self.info is not None
        loads = self.loads
        writer_type = part_writer_type(loads.file_format)
        name = (
            f"{loads.part_prefix}-{safe_name(self.sink_name)}-{self.info.subtask_index}-"
            f"{self.info.attempt_number}-{uuid.uuid4().hex}{writer_type.extension}"
        )
        directory = os.path.join(self._spool, destination.table_id)
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, name + loads.in_progress_suffix)
        writer = writer_type(
            path,
            fields,
            self.options.unknown_fields is UnknownFields.IGNORE,
            loads.max_file_bytes,
        )
        return _PartFile(name, writer)

    def upload(self, part: _PartFile, destination: TableDestination) -> Future[StagedFile]:
        assert self._uploader is not None and self.staging is not None
        staging = self.staging
        name = staging.object_name(destination.table_id, part.name + self.loads.pending_suffix)

        def run() -> StagedFile:
            staging.upload(part.path, name)
            _remove(part.path)
            with self._lock:
                self.files_staged += 1
                self.bytes_staged += part.size
            return StagedFile(staging.uri(name), part.size)

        return self._uploader.submit(run)

    def inactive(self, part: _PartFile) -> bool:
        """Whether ``part`` had no record for ``inactivity_interval`` (checked at most every
        ``check_interval``)."""
        now = time.monotonic()
        if now - part.last_check < self.loads.check_interval.total_seconds():
            return False
        part.last_check = now
        return now - part.last_write >= self.loads.inactivity_interval.total_seconds()

    # -- the commit protocol --------------------------------------------------------------------

    def _stage(self, table_id: str, files: list[StagedFile], location: str | None) -> None:
        if files:
            self._staged.setdefault(table_id, []).extend(files)
        if location:
            self._locations[table_id] = location

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        """One :class:`PendingFiles` per table with files staged since the last call (by open
        writers, or by writers closed since), each file named once: what waits and when it
        loads is the committer's to decide."""
        for writer in self._writers:
            self._stage(writer.destination.table_id, writer.take_staged(), writer.location)
        staged, self._staged = self._staged, {}
        locations, self._locations = self._locations, {}
        return [
            PendingFiles(table_id, tuple(files), locations.get(table_id))
            for table_id, files in staged.items()
        ]

    def create_committer(self) -> LoadJobCommitter:
        return LoadJobCommitter(
            sink_name=self.sink_name,
            loads=self.loads,
            rest_endpoint=self.rest_endpoint,
            retry=self.retry,
            threads=self.options.sender_threads,
            schema_update=self.options.schema_update,
        )

    def check_job(self, checkpoint_interval_ms: int) -> str | None:
        """A warning when the job's checkpoints would start more load jobs per table per day
        than BigQuery allows.

        The sink's one committer loads a table at most once per commit (one per checkpoint)
        and at most once per ``min_load_interval``, on one clock per table whatever the
        writers' parallelism: 86,400 / max(checkpoint interval,
        ``min_load_interval``) a day. A load cut past BigQuery's per-job limits (10,000 files,
        15 TB), a retried failed job and the loads of a restored committer come on top.
        """
        if checkpoint_interval_ms <= 0:
            return None
        every_s = max(checkpoint_interval_ms / 1000, self.loads.min_load_interval.total_seconds())
        per_day = 86_400 / every_s
        if per_day <= LOAD_JOBS_PER_TABLE_PER_DAY:
            return None
        return (
            f"sink '{self.sink_name}': WriteMethod.FILE_LOADS loads each table up to "
            f"{per_day:,.0f} times a day (its one committer starts at most one load job per "
            f"table per {every_s:g} s: the checkpoint interval, or min_load_interval when "
            f"longer; the parallelism does not count), above BigQuery's "
            f"{LOAD_JOBS_PER_TABLE_PER_DAY:,} load jobs per table per day; set "
            f"BigQueryFileLoadsOptions.min_load_interval to at least "
            f"{86_400 / LOAD_JOBS_PER_TABLE_PER_DAY:.0f} s"
        )


def _lock_run(directory: str) -> int | None:
    """Hold the lock file of the new run directory ``directory`` (None without ``fcntl``).

    The file is locked under a temporary name and renamed into place, so no other run ever
    sees it unlocked while this one lives (the lock is released when the process ends). On a
    file system without locks the directory has no lock file: it is told by its age.
    """
    if fcntl is None:
        return None
    partial = os.path.join(directory, f"{_LOCK_FILE}.{uuid.uuid4().hex}")
    fd = os.open(partial, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        os.remove(partial)
        return None
    os.rename(partial, os.path.join(directory, _LOCK_FILE))
    return fd


def _remove_dead_runs(runs: str, *, keep: str) -> None:
    """Remove the run directories under ``runs`` (one sink subtask's) but ``keep`` that no live
    run owns."""
    try:
        entries = list(os.scandir(runs))
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.path != keep and entry.is_dir(follow_symlinks=False) and _dead(entry.path):
            shutil.rmtree(entry.path, ignore_errors=True)


def _dead(directory: str) -> bool:
    """Whether no live run owns ``directory``: its lock file is not held (the run closed or its
    process ended), or, without one, nothing in it changed for :data:`_STALE_RUN_S`."""
    if fcntl is not None:
        try:
            fd = os.open(os.path.join(directory, _LOCK_FILE), os.O_RDONLY)
        except FileNotFoundError:
            pass
        else:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # held by a live run
            except OSError:
                pass  # no locks on this file system: told by its age
            else:
                return True
            finally:
                os.close(fd)
    newest = 0.0
    for path, _, files in os.walk(directory):
        for name in (path, *(os.path.join(path, f) for f in files)):
            try:
                newest = max(newest, os.stat(name).st_mtime)
            except FileNotFoundError:
                pass
    return time.time() - newest > _STALE_RUN_S
