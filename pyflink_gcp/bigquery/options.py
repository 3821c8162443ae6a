"""Options of the BigQuery sink: write method, ordering, row format, and the writer options.

:class:`BigQueryWriterOptions` shares the vocabulary of every sink that creates its
destinations (:class:`~pyflink_gcp.core.options.CreatingWriterOptions`) and adds the shapes of
the Storage Write API's requests and the sink's threads.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Self

from pyflink_gcp.bigquery.schema_update import MissingValues, SchemaUpdate, UnknownFields
from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.options import (
    CreatingOptionsBuilder,
    CreatingWriterOptions,
    check_duration,
    check_instance,
    check_int,
)

#: The Storage Write API's limit on one AppendRows request.
MAX_APPEND_REQUEST_BYTES = 10_000_000
#: The most shared AppendRows connections a subtask may hold (Google's Java client allows 20
#: per location by default; more only adds to the project's concurrent-connection quota).
MAX_CHANNEL_COUNT = 100


class WriteMethod(enum.Enum):
    """How rows reach BigQuery.

    ``STORAGE_API_AT_LEAST_ONCE`` (the default): the Storage Write API default stream; rows are
    visible once appended, before the checkpoint, and a failover can write a row twice.
    ``BUFFERED_STREAM``: exactly once; each table writer appends to a BUFFERED stream with
    offsets, and the rows become visible when the stream is flushed after the checkpoint
    completed (needs the Java bridge jar and checkpointing; no change-data-capture rows).
    ``FILE_LOADS``: exactly once, without streaming cost; each subtask stages rows in files
    per table, and load jobs load them after each checkpoint completed (needs the Java bridge
    jar, checkpointing, google-cloud-storage and ``set_file_loads_options(...)``; no
    change-data-capture rows).
    """

    STORAGE_API_AT_LEAST_ONCE = "STORAGE_API_AT_LEAST_ONCE"
    BUFFERED_STREAM = "BUFFERED_STREAM"
    FILE_LOADS = "FILE_LOADS"


class OrderingMode(enum.Enum):
    """Whether a table's append requests may overtake each other.

    ``NONE`` (the default) keeps several requests in flight per table. ``PER_TABLE`` sends a
    table's next request only after the previous one was committed, or its rejected rows were
    isolated and the rest re-sent; other tables still proceed in parallel. Use it for change data
    capture (``_CHANGE_TYPE``) without ``_CHANGE_SEQUENCE_NUMBER``, where the order of two
    changes to one key decides the result.
    """

    NONE = "NONE"
    PER_TABLE = "PER_TABLE"


class RowFormat(enum.Enum):
    """How rows travel in an AppendRows request.

    ``ARROW`` (the default) sends a request's plain rows as one Arrow record batch when every
    column of the table has an Arrow form, every value already has its column's Python type and
    the request has more than a few rows (a record batch has a fixed cost that a few protobuf
    rows stay under); any other request, and every change-data-capture row, goes as protobuf
    rows. The service decodes Arrow a column at a time; the emulator spends a fraction of the
    CPU per row that it spends decoding protobuf rows one by one (``bench/README.md``,
    BigQuery). ``PROTO`` always sends protobuf rows (for a project or endpoint that does not
    accept Arrow: early versions of the API documented Arrow ingestion as allowlisted).
    """

    ARROW = "ARROW"
    PROTO = "PROTO"


@dataclass(frozen=True, kw_only=True)
class BigQueryWriterOptions(CreatingWriterOptions):
    """Limits and lifetimes of the per-table writers of one sink subtask.

    The shared settings (``max_buffer_time``, ``max_buffered_records``, ``retry_deadline``,
    ``per_destination_metrics``, ``idle_timeout``, ``max_active_destinations``,
    ``max_created_destinations``) mean what
    :class:`~pyflink_gcp.core.options.CreatingWriterOptions` says. For BigQuery:
    ``max_in_flight_requests`` counts the AppendRows requests of one table pipelined on its
    connection (``OrderingMode.NONE``; ``PER_TABLE`` always uses one); ``idle_timeout`` and
    ``max_active_destinations`` drop a table writer, which is re-created with a fresh look at the
    table's schema when the table is used again.

    On the default stream the tables of a subtask share at most ``channel_count`` AppendRows
    connections (:mod:`pyflink_gcp.bigquery.connections`) instead of a connection per table,
    so 10,000 tables do not open 10,000 connections at every checkpoint. BUFFERED streams need
    a connection each, and at most ``channel_count`` of them are open at once per subtask.

    Attributes:
        max_request_bytes: Size of one AppendRows request (service limit 10 MB). A table's rows
            are cut into requests of at most this size; a single row above it is rejected.
        max_request_rows: Rows of one AppendRows request. Cutting requests while records still
            arrive lets sending overlap with processing instead of all waiting for the flush.
        sender_threads: Threads per subtask for the calls that still run on a thread: the
            committer's FlushRows and FinalizeWriteStream (``BUFFERED_STREAM``) and
            ``FILE_LOADS``' uploads and load jobs. Appends take no thread: they complete by
            callback.
        channel_count: AppendRows connections per subtask. ``STORAGE_API_AT_LEAST_ONCE``:
            gRPC channels per subtask (per project and location), each carrying one long-lived
            AppendRows connection on which the tables are multiplexed (each request names its
            table; the writer schema goes with a table's first request on the connection). A
            new connection is opened only when all open ones have requests in flight. Google's
            Java client allows 20 per location by default and recommends multiplexing beyond
            20 connections; each open connection counts against the project's
            concurrent-connection quota. ``BUFFERED_STREAM``: a stream takes a connection of
            its own (the service allows one per stream) while it has requests in flight, so at
            most this many tables of a subtask append at once; the others' requests wait, and
            are sent when a connection is closed. None: no bound; every table opens a
            connection of its own while it sends.
        schema_update: What the sink may change in an existing table so the serializer's
            schema fits (see :class:`~pyflink_gcp.bigquery.SchemaUpdate`): when a table's
            writer opens, columns the serializer's ``schema(destination)`` has and the table
            lacks are added (and REQUIRED columns relaxed, with ``ADD_AND_RELAX_COLUMNS``)
            before a row is written; FILE_LOADS load jobs carry the matching
            ``schemaUpdateOptions``.
        unknown_fields: What becomes of a row key that is no column of the table (see
            :class:`~pyflink_gcp.bigquery.UnknownFields`).
        missing_values: What a column the row has no value for gets on the Storage Write API
            (see :class:`~pyflink_gcp.bigquery.MissingValues`).
        row_format: Arrow record batches where a table and its rows allow, else protobuf rows
            (see :class:`RowFormat`).
        metadata_threads: Threads per subtask fetching table metadata (and creating tables) off
            the processing thread. Raise it for jobs that meet hundreds of new tables at once
            against the real service (each lookup is a round trip); the local emulator gains
            nothing from it and is fragile under concurrent table creation.
        max_stream_creations_per_second: ``WriteMethod.BUFFERED_STREAM`` only: the rate at
            which a subtask creates write streams (one per table writer, reused across
            checkpoints; a new one after the writer was closed or the job restarted). BigQuery
            documents CreateWriteStream slowing down past 40-50 calls per second per project,
            and a longer-term quota on its rate; a writer waits for its stream on a metadata
            thread, not on the task thread.
    """

    max_request_bytes: int = 8_000_000
    max_request_rows: int = 5_000
    sender_threads: int = 8
    channel_count: int | None = 4
    schema_update: SchemaUpdate = SchemaUpdate.NONE
    unknown_fields: UnknownFields = UnknownFields.FAIL
    missing_values: MissingValues = MissingValues.NULL
    row_format: RowFormat = RowFormat.ARROW
    metadata_threads: int = 1
    max_stream_creations_per_second: float = 10.0

    def _validate(self) -> None:
        super()._validate()
        owner = type(self).__name__
        check_int(
            owner,
            "max_request_bytes",
            self.max_request_bytes,
            minimum=1_000,
            maximum=MAX_APPEND_REQUEST_BYTES,
        )
        check_int(owner, "max_request_rows", self.max_request_rows)
        check_int(owner, "sender_threads", self.sender_threads)
        if self.channel_count is not None:
            check_int(owner, "channel_count", self.channel_count, maximum=MAX_CHANNEL_COUNT)
        check_instance(
            owner, "schema_update", self.schema_update, SchemaUpdate, "SchemaUpdate.ADD_COLUMNS"
        )
        check_instance(
            owner, "unknown_fields", self.unknown_fields, UnknownFields, "UnknownFields.IGNORE"
        )
        check_instance(
            owner, "missing_values", self.missing_values, MissingValues, "MissingValues.NULL"
        )
        check_instance(owner, "row_format", self.row_format, RowFormat, "RowFormat.ARROW")
        check_int(owner, "metadata_threads", self.metadata_threads)
        rate = self.max_stream_creations_per_second
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= 1_000:
            raise ConfigurationError(
                f"{owner}.max_stream_creations_per_second must be a number in (0, 1000], "
                f"got {rate!r}"
            )

    @staticmethod
    def builder() -> BigQueryWriterOptionsBuilder:
        """A builder of :class:`BigQueryWriterOptions` (validated at ``build()``)."""
        return BigQueryWriterOptionsBuilder()


class BigQueryWriterOptionsBuilder(CreatingOptionsBuilder[BigQueryWriterOptions]):
    """Fluent builder of :class:`BigQueryWriterOptions`; the shared setters come from core."""

    options_type = BigQueryWriterOptions

    def max_request_bytes(self, size: int) -> Self:
        """Bytes of one AppendRows request (at most 10,000,000; default 8,000,000)."""
        return self._set("max_request_bytes", size)

    def max_request_rows(self, rows: int) -> Self:
        """Rows of one AppendRows request (default 5,000)."""
        return self._set("max_request_rows", rows)

    def sender_threads(self, threads: int) -> Self:
        """Threads per subtask for the BUFFERED committer's calls and FILE_LOADS' uploads and
        load jobs (default 8); appends take none."""
        return self._set("sender_threads", threads)

    def channel_count(self, channels: int | None) -> Self:
        """AppendRows connections per subtask (default 4): shared by all tables on the default
        stream, one per appending table for BUFFERED streams (None: no bound, one per table
        while it sends)."""
        return self._set("channel_count", channels)

    def schema_update(self, mode: SchemaUpdate) -> Self:
        """Add the serializer's new columns to existing tables (default ``SchemaUpdate.NONE``)."""
        return self._set("schema_update", mode)

    def unknown_fields(self, policy: UnknownFields) -> Self:
        """Row keys that are no column: ``FAIL`` the job (default), ``IGNORE`` them, or hand the
        row to the ``FAILURE_HANDLER``."""
        return self._set("unknown_fields", policy)

    def missing_values(self, interpretation: MissingValues) -> Self:
        """Columns a row leaves out: ``NULL`` (default) or the column's ``DEFAULT_VALUE``."""
        return self._set("missing_values", interpretation)

    def row_format(self, row_format: RowFormat) -> Self:
        """``RowFormat.ARROW`` where tables and rows allow (default) or always ``PROTO``."""
        return self._set("row_format", row_format)

    def metadata_threads(self, threads: int) -> Self:
        """Threads per subtask looking up and creating tables (default 1)."""
        return self._set("metadata_threads", threads)

    def max_stream_creations_per_second(self, rate: float) -> Self:
        """BUFFERED streams a subtask creates per second at most (default 10)."""
        return self._set("max_stream_creations_per_second", rate)


class FileFormat(enum.Enum):
    """The format of the files ``WriteMethod.FILE_LOADS`` stages for its load jobs.

    Every format converts a row with the table's schema when it is staged, so a bad row goes
    to the failure handler then, not to a failed load job (see
    :mod:`pyflink_gcp.bigquery.file_formats` for the types each format uses).

    - ``PARQUET`` (the default): columnar, snappy-compressed. Of the three it costs the writer
      the least CPU per row (its columns are built in Arrow's C++ converter) and makes files a
      fraction of the size of JSON's; the price is memory: an open file holds up to 2,000
      converted rows until it writes them as a row group.
    - ``AVRO``: binary rows with the table's types in deflate-compressed blocks, streamed to
      the file (nothing held); the smallest files, but the most CPU per row (encoded row by
      row with logical types).
    - ``NEWLINE_DELIMITED_JSON``: one JSON object per line, uncompressed (several times the
      bytes of the others); readable by eye.

    ``bench/README.md`` ("FILE_LOADS file formats") has the figures.
    """

    AVRO = "AVRO"
    NEWLINE_DELIMITED_JSON = "NEWLINE_DELIMITED_JSON"
    PARQUET = "PARQUET"


#: BigQuery's limit on the source URIs of one load job.
MAX_LOAD_URIS = 10_000
#: The load jobs BigQuery allows per table per day.
LOAD_JOBS_PER_TABLE_PER_DAY = 1_500


@dataclass(frozen=True, kw_only=True)
class BigQueryFileLoadsOptions:
    """The staged files of ``WriteMethod.FILE_LOADS``: where, how named, when finished, when
    loaded. The file lifecycle is the one of Flink's file sinks: a table's rows go to its open
    *in-progress* file (a local file), which is finished (rolled) when it reaches
    ``max_file_bytes``, when the table had no record for ``inactivity_interval`` (checked every
    ``check_interval``), when its writer is released (``max_active_destinations`` caps the open
    files of a subtask, least recently used first; ``idle_timeout`` closes idle ones), and at
    every checkpoint. A finished file is uploaded to the staging location as a *pending* object,
    loaded after its checkpoint completed, and deleted.

    Attributes:
        staging_location: Where pending files are staged (required): ``gs://bucket/prefix``, or
            a local directory (``/path`` or ``file:///path``) for a backend that reads local
            files, such as the BigQuery emulator (see :mod:`pyflink_gcp.bigquery.staging`).
        file_format: See :class:`FileFormat`.
        spool_directory: Local directory of the in-progress files (None: the system's temporary
            directory). Each run of a subtask writes under ``<spool>/<sink>/<subtask>/<run>``,
            a directory of its own, so same-named sinks on one host never share files.
        part_prefix: The first part of every file name.
        in_progress_suffix: The suffix of an in-progress file.
        pending_suffix: The suffix of a pending object.
        max_file_bytes: Roll an in-progress file at this size (its size on disk, compressed
            where the format compresses; estimated for a Parquet file's held rows).
        inactivity_interval: Finish a table's file after this long without a record.
        check_interval: How often open files are checked for inactivity (at bundle ends).
        min_load_interval: The shortest time between two load jobs of a table: pending files of
            a table wait, across checkpoints (kept in the committer's state), until the
            sink's committer last loaded the table this long ago, and load together. Zero
            loads after every checkpoint. The default, 90 s, keeps a table under BigQuery's
            1,500 load jobs per table per day (960) whatever the checkpoint interval and the
            parallelism. A restored committer, the end of input and stop-with-savepoint load
            whatever waits.
        load_job_timeout: How long the last commit (end of input, stop-with-savepoint) waits
            for its load jobs: it cannot leave one running for later. Any other commit waits
            at most ``min(load_job_timeout, 10 s)``, then keeps a job still running in the
            committer's state and looks at it again at the next commit.
        job_id_generation: Mixed into every load job id. A load job that failed for a reason
            the same files meet again (rows the table refuses, a schema that does not match)
            ends the job, and a restart from the last checkpoint would find the same failed
            ids; after fixing the cause, restart from it with the generation one higher: the
            files load again under new ids (a job of an earlier generation that succeeded, or
            still runs, is found first, so nothing loads twice). Only ever raise it.
    """

    staging_location: str = ""
    file_format: FileFormat = FileFormat.PARQUET
    spool_directory: str | None = None
    part_prefix: str = "part"
    in_progress_suffix: str = ".inprogress"
    pending_suffix: str = ".pending"
    max_file_bytes: int = 128 * 1024 * 1024
    inactivity_interval: timedelta = timedelta(minutes=1)
    check_interval: timedelta = timedelta(seconds=1)
    min_load_interval: timedelta = timedelta(seconds=90)
    load_job_timeout: timedelta = timedelta(minutes=30)
    job_id_generation: int = 0

    def __post_init__(self) -> None:
        owner = type(self).__name__
        location = self.staging_location
        if not isinstance(location, str) or not (
            (location.startswith("gs://") and location[5:].split("/", 1)[0])
            or location.startswith("file:///")
            or os.path.isabs(location)
        ):
            raise ConfigurationError(
                f"{owner}.staging_location must be 'gs://bucket/prefix' or an absolute local "
                f"directory ('/path' or 'file:///path'), got {location!r}"
            )
        check_instance(owner, "file_format", self.file_format, FileFormat, "FileFormat.PARQUET")
        if self.spool_directory is not None and not isinstance(self.spool_directory, str):
            raise ConfigurationError(
                f"{owner}.spool_directory must be a path or None, got {self.spool_directory!r}"
            )
        for name in ("part_prefix", "in_progress_suffix", "pending_suffix"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value or "/" in value:
                raise ConfigurationError(
                    f"{owner}.{name} must be a non-empty name without '/', got {value!r}"
                )
        if self.in_progress_suffix == self.pending_suffix:
            raise ConfigurationError(f"{owner}: in_progress_suffix and pending_suffix must differ")
        check_int(owner, "max_file_bytes", self.max_file_bytes, minimum=1_024)
        check_duration(owner, "inactivity_interval", self.inactivity_interval)
        check_duration(owner, "check_interval", self.check_interval)
        check_duration(owner, "min_load_interval", self.min_load_interval, allow_zero=True)
        check_duration(owner, "load_job_timeout", self.load_job_timeout)
        check_int(owner, "job_id_generation", self.job_id_generation, minimum=0)

    @property
    def local_directory(self) -> str | None:
        """The local staging directory, or None for a ``gs://`` location."""
        location = self.staging_location
        if location.startswith("gs://"):
            return None
        return os.path.normpath(location[7:] if location.startswith("file://") else location)

    @property
    def bucket(self) -> str:
        """The bucket of a ``gs://`` location ('' for a local directory)."""
        if self.local_directory is not None:
            return ""
        return self.staging_location[5:].split("/", 1)[0]

    @property
    def prefix(self) -> str:
        """The object name prefix under the bucket, without a trailing ``/`` ('' for none)."""
        if self.local_directory is not None:
            return ""
        rest = self.staging_location[5:].split("/", 1)
        return rest[1].strip("/") if len(rest) > 1 else ""

    @staticmethod
    def builder() -> BigQueryFileLoadsOptionsBuilder:
        """A builder of :class:`BigQueryFileLoadsOptions` (validated at ``build()``)."""
        return BigQueryFileLoadsOptionsBuilder()


class BigQueryFileLoadsOptionsBuilder:
    """Fluent builder of :class:`BigQueryFileLoadsOptions`; one setter per setting."""

    def __init__(self) -> None:
        self._values: dict[str, object] = {}

    def _set(self, name: str, value: object) -> Self:
        self._values[name] = value
        return self

    def staging_location(self, location: str) -> Self:
        """``gs://bucket/prefix`` (or a local directory) for pending files (required)."""
        return self._set("staging_location", location)

    def file_format(self, file_format: FileFormat) -> Self:
        """The staged files' format (default ``PARQUET``)."""
        return self._set("file_format", file_format)

    def spool_directory(self, path: str) -> Self:
        """Local directory of the in-progress files (default: the temporary directory)."""
        return self._set("spool_directory", path)

    def part_prefix(self, prefix: str) -> Self:
        """The first part of every file name (default ``part``)."""
        return self._set("part_prefix", prefix)

    def in_progress_suffix(self, suffix: str) -> Self:
        """The suffix of in-progress files (default ``.inprogress``)."""
        return self._set("in_progress_suffix", suffix)

    def pending_suffix(self, suffix: str) -> Self:
        """The suffix of pending objects (default ``.pending``)."""
        return self._set("pending_suffix", suffix)

    def max_file_bytes(self, size: int) -> Self:
        """Roll an in-progress file at this size (default 128 MiB)."""
        return self._set("max_file_bytes", size)

    def inactivity_interval(self, interval: timedelta) -> Self:
        """Finish a table's file after this long without a record (default 1 min)."""
        return self._set("inactivity_interval", interval)

    def check_interval(self, interval: timedelta) -> Self:
        """How often open files are checked for inactivity (default 1 s)."""
        return self._set("check_interval", interval)

    def min_load_interval(self, interval: timedelta) -> Self:
        """Shortest time between two load jobs of a table (default 90 s; 0: every checkpoint)."""
        return self._set("min_load_interval", interval)

    def load_job_timeout(self, timeout: timedelta) -> Self:
        """How long the last commit waits for its load jobs (default 30 min)."""
        return self._set("load_job_timeout", timeout)

    def job_id_generation(self, generation: int) -> Self:
        """Mixed into every load job id (default 0); one higher after fixing a failed load."""
        return self._set("job_id_generation", generation)

    def build(self) -> BigQueryFileLoadsOptions:
        """The options value; raises ConfigurationError naming the first bad setting."""
        return BigQueryFileLoadsOptions(**self._values)  # type: ignore[arg-type]
