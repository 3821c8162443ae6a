"""``WriteMethod.FILE_LOADS``: rows staged in files per table, loaded exactly once after each
checkpoint.

The file lifecycle is the one Flink users know from the file sinks:

- **in-progress**: a table's open file, on local disk (``<spool>/<sink>/<subtask>/``), named
  ``<part prefix>-<subtask>-<attempt>-<run>-<n>.<format><in-progress suffix>``. Rows are
  converted with the table's schema as they are written, in the configured
  :class:`~pyflink_gcp.bigquery.options.FileFormat` (:mod:`pyflink_gcp.bigquery.file_formats`),
  so a bad row goes to the failure handler with its record.
- **pending**: a finished file, uploaded to the staging location as
  ``gs://bucket/prefix/<table id>/<name><pending suffix>`` (or copied into a local staging
  directory, :mod:`pyflink_gcp.bigquery.staging`). A file is finished when it
  reaches ``max_file_bytes``, when its table had no record for ``inactivity_interval``, when
  its writer is released (idle, or least recently used at ``max_active_destinations``: the cap
  on open files), and at every checkpoint's marker.
- **loaded**, then **deleted**: after the checkpoint completed, the committer (one for the whole
  sink) groups each table's pending files into load jobs within BigQuery's limits, runs them,
  and deletes the files.

Exactly once: the committables (:class:`FileLoad`) name the files and a load job id derived
from the sink, the table, the first checkpoint, the writer subtask, the group and the files. A
commit repeated after a failover finds its job (BigQuery answers 409 for a reused job id) and
does not load twice; the files of an attempt that failed before its checkpoint completed are
never named by a committed committable, and its in-progress files are removed when the subtask
opens again. ``min_load_interval`` keeps a table's pending files, across checkpoints, until its
previous load is that old: they travel in every checkpoint's committables meanwhile (the
committer skips a committable that is not due), so a failover still loads them.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ClassVar

from pyflink_gcp.bigquery.destinations import TableDestination
from pyflink_gcp.bigquery.file_formats import PartWriter, part_writer_type
from pyflink_gcp.bigquery.load_jobs import FileLoad, LoadJobCommitter, StagedFile
from pyflink_gcp.bigquery.options import (
    LOAD_JOBS_PER_TABLE_PER_DAY,
    MAX_LOAD_URIS,
    BigQueryFileLoadsOptions,
    BigQueryWriterOptions,
)
from pyflink_gcp.bigquery.rows import RowError
from pyflink_gcp.bigquery.serialization import CHANGE_TYPE, row_payload
from pyflink_gcp.bigquery.staging import Staging, open_staging
from pyflink_gcp.bigquery.tables import TableCatalog, TableLayout, open_metadata
from pyflink_gcp.core.commit import CommittingWriterFactory
from pyflink_gcp.core.errors import ConfigurationError, SerializerError, WriteError
from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.functions import describe_callable, short_repr
from pyflink_gcp.core.options import CreateDisposition
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.core.runtime_info import SubtaskInfo
from pyflink_gcp.core.writer import DestinationWriter, PicklesConfiguration

#: Rows a table writer holds before it writes them to its file (it waits for the table's schema
#: only then, not on every record).
_DRAIN_ROWS = 1_000
#: BigQuery's limit on the bytes one load job reads.
_MAX_LOAD_BYTES = 15 * 10**12
_JOB_ID = re.compile(r"[^A-Za-z0-9_-]+")


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
                self._rejected.append(self._failed(element, record, str(exc)))
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
    prepares the load committables."""

    accepts_unroutable = True
    destination_type = TableDestination
    #: One committer for the whole sink: it groups every subtask's files of a table into one
    #: load job, so the load jobs per table per day do not grow with the parallelism.
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

    def _init_runtime(self) -> None:
        self.info: SubtaskInfo | None = None
        self.catalog: TableCatalog | None = None
        self.staging: Staging | None = None
        self._metadata: ThreadPoolExecutor | None = None
        self._uploader: ThreadPoolExecutor | None = None
        self._spool = ""
        self._run = ""
        self._seq = 0
        self._writers: set[TableFileWriter] = set()
        #: Pending files of each table not yet in a due committable, by table id.
        self._carried: dict[str, list[StagedFile]] = {}
        self._first_checkpoint: dict[str, int] = {}
        self._last_due: dict[str, float] = {}
        self._lock = threading.Lock()
        #: Files and bytes this subtask uploaded (tests, logs, the benchmark).
        self.files_staged = 0
        self.bytes_staged = 0

    # -- lifecycle ------------------------------------------------------------------------------

    def open(self, info: SubtaskInfo) -> None:
        self.info = info
        self.sink_name = info.sink_name
        self._run = uuid.uuid4().hex[:8]
        root = self.loads.spool_directory or tempfile.gettempdir()
        self._spool = os.path.join(root, _safe(self.sink_name), str(info.subtask_index))
        # The in-progress files of an earlier attempt of this subtask are never loaded: their
        # records are replayed from the checkpoint.
        shutil.rmtree(self._spool, ignore_errors=True)
        os.makedirs(self._spool, exist_ok=True)
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
            self._carry(writer.destination.table_id, writer.take_staged())

    # -- files ----------------------------------------------------------------------------------

    def new_part_file(self, destination: TableDestination, fields: Any) -> _PartFile:
        assert self.info is not None
        loads = self.loads
        writer_type = part_writer_type(loads.file_format)
        name = (
            f"{loads.part_prefix}-{self.info.subtask_index}-{self.info.attempt_number}-"
            f"{self._run}-{self._seq}{writer_type.extension}"
        )
        self._seq += 1
        directory = os.path.join(self._spool, destination.table_id)
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, name + loads.in_progress_suffix)
        writer = writer_type(path, fields, self.options.ignore_unknown_values, loads.max_file_bytes)
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
            return StagedFile(name, part.size)

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

    def _carry(self, table_id: str, files: list[StagedFile]) -> None:
        if files:
            self._carried.setdefault(table_id, []).extend(files)

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        assert self.info is not None
        for writer in self._writers:
            self._carry(writer.destination.table_id, writer.take_staged())
        interval = self.loads.min_load_interval.total_seconds()
        now = time.monotonic()
        loads: list[Any] = []
        for table_id in list(self._carried):
            files = self._carried[table_id]
            first = self._first_checkpoint.setdefault(table_id, checkpoint_id)
            last = self._last_due.get(table_id)
            # The end of input loads everything; otherwise a table waits out its interval.
            due = checkpoint_id < 0 or last is None or now - last >= interval
            for group, chunk in enumerate(_groups(files)):
                job_id = load_job_id(self.sink_name, table_id, first, self.info, group, chunk)
                loads.append(FileLoad(table_id, chunk, job_id, due))
            if due:
                del self._carried[table_id]
                del self._first_checkpoint[table_id]
                self._last_due[table_id] = now
        return loads

    def create_committer(self) -> LoadJobCommitter:
        return LoadJobCommitter(
            sink_name=self.sink_name,
            loads=self.loads,
            rest_endpoint=self.rest_endpoint,
            retry=self.retry,
            threads=self.options.sender_threads,
        )

    def check_job(self, parallelism: int, checkpoint_interval_ms: int) -> str | None:
        """A warning when the job's checkpoints would start more load jobs per table per day
        than BigQuery allows (one committer groups every subtask's files of a table, so the
        parallelism does not count)."""
        if checkpoint_interval_ms <= 0:
            return None
        every_s = max(checkpoint_interval_ms / 1000, self.loads.min_load_interval.total_seconds())
        per_day = 86_400 / every_s
        if per_day <= LOAD_JOBS_PER_TABLE_PER_DAY:
            return None
        return (
            f"sink '{self.sink_name}': WriteMethod.FILE_LOADS loads each table up to "
            f"{per_day:,.0f} times a day (one load job per {every_s:g} s: the checkpoint "
            f"interval, or min_load_interval when longer), above BigQuery's "
            f"{LOAD_JOBS_PER_TABLE_PER_DAY:,} load jobs per table per day; set "
            f"BigQueryFileLoadsOptions.min_load_interval to at least "
            f"{86_400 / LOAD_JOBS_PER_TABLE_PER_DAY:.0f} s"
        )


def _safe(name: str) -> str:
    return _JOB_ID.sub("_", name)


def _groups(files: list[StagedFile]) -> list[tuple[StagedFile, ...]]:
    """The files cut into load jobs within BigQuery's per-job limits (URIs and bytes)."""
    groups: list[tuple[StagedFile, ...]] = []
    current: list[StagedFile] = []
    size = 0
    for staged in files:
        if current and (len(current) >= MAX_LOAD_URIS or size + staged.size > _MAX_LOAD_BYTES):
            groups.append(tuple(current))
            current, size = [], 0
        current.append(staged)
        size += staged.size
    if current:
        groups.append(tuple(current))
    return groups


def load_job_id(
    sink: str,
    table_id: str,
    checkpoint_id: int,
    info: SubtaskInfo,
    group: int,
    files: tuple[StagedFile, ...],
) -> str:
    """The load job of a group of files: from the sink, the table, the checkpoint the files
    first went with, the writer subtask, the group, and a digest of the files (so a group whose
    files changed while it waited out ``min_load_interval`` is a new job)."""
    digest = hashlib.sha256("\n".join(f.name for f in files).encode()).hexdigest()[:16]
    checkpoint = "end" if checkpoint_id < 0 else str(checkpoint_id)
    parts = (sink, table_id, checkpoint, str(info.subtask_index), str(group), digest)
    return _safe("pyflink_gcp_" + "_".join(parts))[:1024]
