"""The Spanner writer: the hot path of the Spanner sink, from a Mutation to a committed row.

One subtask has one :class:`SpannerWriter` (the sink has one database) and one session. Per
record, :meth:`SpannerWriter.write` looks up the mutation's *shape* (operation, table, columns:
validated against the schema once, with one value encoder per column and the mutation count of
one row; :mod:`~pyflink_gcp.spanner.batch`) and encodes the values straight into the protobuf
``CommitRequest`` being filled. Rows are never reordered, because two mutations of one key must
apply in arrival order (with ``grouping_factor`` above 1 the factory makes a
:class:`~pyflink_gcp.spanner.grouping.GroupingSpannerWriter`, which sorts by table and key).

When the next record would take the commit over its mutation, byte or row budget, or when the
commit holds an eighth of the budget and nothing is being committed (group commit), the commit
is *sealed* and handed to a single background thread, which commits sealed batches one after
the other (in order) while the processing thread fills the next. ``flush()``, which runs before
every checkpoint barrier, seals the last batch and waits for all of them.

A commit rejected for a record-shaped reason (a constraint, a value Spanner rejects, a row that
already exists or is missing, too many mutations) is split in halves committed in order
(:func:`~pyflink_gcp.core.isolation.isolate_rejected`) until each offending record is alone;
only those go to the failure handler (with ``fail_job()`` nothing more is committed after the
first one found, as the job fails anyway). Retries, sessions and the other failures are the
:mod:`~pyflink_gcp.spanner.committer`'s.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from pyflink_gcp.core.batching import InFlightWindow, OpenBatch
from pyflink_gcp.core.endpoints import resolve_endpoint
from pyflink_gcp.core.errors import (
    DestinationNotFoundError,
    SerializerError,
    SinkError,
    WriteError,
)
from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.functions import short_repr
from pyflink_gcp.core.isolation import isolate_rejected
from pyflink_gcp.core.quota import QuotaWindow
from pyflink_gcp.core.retry import RetryPolicy, status_name
from pyflink_gcp.core.runtime_info import SubtaskInfo
from pyflink_gcp.core.writer import DestinationWriter, PicklesConfiguration, WriterFactory
from pyflink_gcp.spanner.batch import Batch, Shape, compile_shape, diagnose, has_unknown_columns
from pyflink_gcp.spanner.client import DEFAULT_HOST, EMULATOR_VARIABLE, open_client
from pyflink_gcp.spanner.committer import (
    Committer,
    OrderedExecutor,
    is_record_fault,
    is_schema_change,
    rejection_text,
)
from pyflink_gcp.spanner.destinations import DatabaseDestination
from pyflink_gcp.spanner.options import SpannerWriterOptions
from pyflink_gcp.spanner.schema import DatabaseSchema
from pyflink_gcp.spanner.serialization import Mutation
from pyflink_gcp.spanner.session import Session
from pyflink_gcp.spanner.values import WrongType

_LOG = logging.getLogger("pyflink_gcp.spanner")

#: A batch holding 1/8 of the mutation budget is committed early when the committer is idle.
_EAGER_FRACTION = 8


class SpannerWriterFactory(PicklesConfiguration, WriterFactory[DatabaseDestination]):
    """Opens the Spanner client and the session and reads the schema, on the worker.

    Only the configuration travels pickled (``_config_fields``); the client, the session, the
    committer and the schema are runtime state, made in :meth:`open`.
    """

    accepts_unroutable = True
    destination_type = DatabaseDestination
    _config_fields: ClassVar[tuple[str, ...]] = (
        "sink_name",
        "database",
        "options",
        "endpoint",
        "fail_fast",
    )

    def __init__(
        self,
        *,
        sink_name: str,
        database: DatabaseDestination,
        options: SpannerWriterOptions,
        endpoint: str | None = None,
        fail_fast: bool = True,
    ) -> None:
        self.sink_name = sink_name
        self.database = database
        self.options = options
        self.endpoint = endpoint
        self.fail_fast = fail_fast
        self._init_runtime()

    def _init_runtime(self) -> None:
        self.api: Any = None
        self.session: Session | None = None
        self.committer: Committer | None = None
        self.schema = DatabaseSchema()
        self.info: SubtaskInfo | None = None
        self.endpoint_name = ""
        #: Commits handed over and not yet done: max_in_flight_requests, less after quota
        #: errors (the committer reports them).
        self.quota = QuotaWindow(
            self.options.max_in_flight_requests, f"sink '{self.sink_name}': commits"
        )

    def open(self, info: SubtaskInfo) -> None:
        self.info = info
        resolved = resolve_endpoint(self.endpoint, EMULATOR_VARIABLE)
        self.endpoint_name = resolved.host or f"{DEFAULT_HOST}:443"
        self.connect(open_client(self.endpoint, self.sink_name))
        self.schema = self.refresh_schema()
        _LOG.info(
            "%s: subtask %d writes to %s (%d tables)",
            self.sink_name,
            info.subtask_index,
            self.database,
            len(self.schema.tables),
        )

    def connect(self, api: Any) -> None:
        """Make every call through ``api`` (the GAPIC ``SpannerClient``, or a stand-in)."""
        self.api = api
        retry = RetryPolicy(
            initial_backoff_s=0.05, max_backoff_s=5.0, deadline_s=self.options.retry_deadline_s
        )
        self.session = Session(api, self.database, self.sink_name, retry, self.endpoint_name)
        self.committer = Committer(self.session, self.options, retry, window=self.quota)

    def refresh_schema(self) -> DatabaseSchema:
        """Re-read the schema: a table or column the writer did not know may be new.

        The caller makes sure no commit is in flight in the session.
        """
        assert self.session is not None, "open() first"
        self.schema = self.session.read_schema()
        return self.schema

    def create_writer(
        self, destination: DatabaseDestination, writer_type: type[SpannerWriter] | None = None
    ) -> SpannerWriter:
        """The subtask's writer (``writer_type``: a subclass of :class:`SpannerWriter`)."""
        if self.committer is None:
            raise WriteError(f"sink '{self.sink_name}': the Spanner writer is not open")
        if writer_type is None:
            writer_type = SpannerWriter
            if self.options.grouping:
                from pyflink_gcp.spanner.grouping import GroupingSpannerWriter

                writer_type = GroupingSpannerWriter
        return writer_type(
            destination,
            self.committer,
            self.options,
            schema=self.schema,
            refresh_schema=self.refresh_schema,
            sink_name=self.sink_name,
            endpoint_name=self.endpoint_name,
            fail_fast=self.fail_fast,
            quota=self.quota,
        )

    def close(self) -> None:
        api, session = self.api, self.session
        self.api, self.session, self.committer = None, None, None
        if api is None:
            return
        if session is not None:
            session.close()
        try:
            api.transport.close()
        except Exception:  # noqa: BLE001 - teardown
            pass


class SpannerWriter(DestinationWriter[DatabaseDestination]):
    """Batches the mutations of all tables of one subtask into ordered commits.

    Args:
        destination: The database.
        committer: Commits a request with retries (the subtask's session).
        options: The commit budget and the commits in flight.
        schema: The database's schema as last read.
        refresh_schema: Re-reads it (a table or column the writer does not know may be new).
        sink_name: For errors and failed records.
        endpoint_name: The endpoint, named by errors.
        fail_fast: Commit nothing more after the first rejected record (``fail_job()``).
        quota: The subtask's quota window over the commits in flight.
    """

    def __init__(
        self,
        destination: DatabaseDestination,
        committer: Committer,
        options: SpannerWriterOptions,
        *,
        schema: DatabaseSchema,
        refresh_schema: Callable[[], DatabaseSchema],
        sink_name: str,
        endpoint_name: str,
        fail_fast: bool,
        quota: QuotaWindow,
    ) -> None:
        super().__init__(destination)
        self._committer = committer
        self._schema = schema
        self._refresh_schema = refresh_schema
        self._sink = sink_name
        self._endpoint = endpoint_name
        self._max_mutations = options.max_mutations_per_commit
        self._max_bytes = options.max_commit_bytes
        self._max_rows = options.max_rows_per_commit or sys.maxsize
        #: A batch this full is committed at once if the committer is idle (group commit).
        self._eager_mutations = max(1, self._max_mutations // _EAGER_FRACTION)
        self._fail_fast = fail_fast
        self._shapes: dict[tuple[str, str, tuple[str, ...] | None], Shape] = {}
        #: The commit being filled: its request is the Batch's, its (element, record) entries,
        #: their bytes and its age the open batch's (``Batch.entries`` is the same list).
        self.open_batch: OpenBatch[tuple[Any, Any]] = OpenBatch()
        self._batch = self._new_batch()
        #: Sealed commits not yet done, in order on the committer thread.
        self._pending: InFlightWindow[FailedRecord] = InFlightWindow(
            options.max_in_flight_requests,
            what=f"sink '{sink_name}': commits",
            quota=quota,
            stall_s=committer.stall_s,
        )
        self._failures: list[FailedRecord] = []
        self._broken: BaseException | None = None
        self._executor: OrderedExecutor | None = None
        #: Counters (read by tests, benchmarks and logs).
        self.commits = 0
        self.split_commits = 0
        self.mutations_committed = 0

    # -- hot path ---------------------------------------------------------------------------

    def write(self, element: Any, record: Any) -> None:
        if type(element) is Mutation:
            shape = self._shapes.get((element.operation, element.table, element.columns))
            if shape is None:
                shape = self._compile(element, record)
            batch = self._batch
            if shape is batch.last_shape and not shape.is_delete:
                # The common case: one more row of the run being filled. It is encoded in
                # place; undoing it (a wrong type, the byte budget) only drops the last row.
                cost = shape.cost
                if batch.mutations + cost <= self._max_mutations and batch.rows < self._max_rows:
                    rows = batch.last_rows
                    row = rows.add()
                    values = row.values
                    try:
                        for encode, value in zip(shape.encoders, element.values, strict=True):
                            encode(values, value)
                    except WrongType:
                        del rows[-1]
                        self._reject(element, record)
                        return
                    size = row.ByteSize() + 4
                    if batch.bytes + size <= self._max_bytes:
                        self._accept(batch, element, record, cost, size)
                        return
                    del rows[-1]
                    batch = self._seal()
                    self._accept(batch, element, record, cost, batch.add(shape, element))
                    return
            if element.columns is not None:
                cost, rows = shape.cost, 1
            else:
                rows = len(element.values)
                cost = shape.cost * rows
            if batch.entries and (
                batch.mutations + cost > self._max_mutations or batch.rows + rows > self._max_rows
            ):
                batch = self._seal()
            snap = batch.snapshot()
            try:
                size = batch.add(shape, element)
            except WrongType:
                batch.rollback(snap)
                self._reject(element, record)
                return
        else:
            batch, cost, size, snap, rows = self._write_many(element, record)
            if batch is None:
                return
        if batch.bytes + size > self._max_bytes and batch.entries:
            # Over the byte budget: move this record to the next commit.
            batch.rollback(snap)
            batch = self._seal()
            size = self._add_entry_parts(batch, element)
        self._accept(batch, element, record, cost, size, rows)

    def _accept(
        self, batch: Batch, element: Any, record: Any, cost: int, size: int, rows: int = 1
    ) -> None:
        """Account for a record encoded into ``batch``; start a group commit when it is time."""
        self.open_batch.append((element, record), size)
        batch.mutations += cost
        batch.bytes += size
        batch.rows += rows
        self.bytes_accepted += size
        if batch.mutations >= self._eager_mutations and not len(batch.entries) & 31:
            self._seal_if_idle()

    def _seal_if_idle(self) -> None:
        """Group commit: hand the batch over early when the committer has nothing to do.

        Commits then overlap the processing of the next records instead of waiting for the
        flush; while a commit runs, the next batch grows (up to the budget), so slow commits
        get large batches and fast ones small, frequent ones.
        """
        if not self._pending.outstanding:
            self._seal()

    def _write_many(self, element: Any, record: Any) -> tuple[Any, int, int, Any, int]:
        """Several mutations from one record: committed in the same commit, failed together."""
        parts = self._check_element(element, record)
        cost, rows = self._parts_cost(parts, record)
        batch = self._batch
        if batch.entries and (
            batch.mutations + cost > self._max_mutations or batch.rows + rows > self._max_rows
        ):
            batch = self._seal()
        snap = batch.snapshot()
        try:
            size = self._add_entry_parts(batch, parts)
        except WrongType:
            batch.rollback(snap)
            self._reject(element, record)
            return None, 0, 0, None, 0
        return batch, cost, size, snap, rows

    def _parts_cost(self, parts: Sequence[Mutation], record: Any) -> tuple[int, int]:
        """The mutation count and rows of a record's mutations (compiling new shapes)."""
        cost = rows = 0
        for m in parts:
            shape = self._shapes.get((m.operation, m.table, m.columns))
            if shape is None:
                shape = self._compile(m, record)
            if m.columns is not None:
                cost += shape.cost
                rows += 1
            else:
                cost += shape.cost * len(m.values)
                rows += len(m.values)
        return cost, rows

    def _add_entry_parts(self, batch: Batch, element: Any) -> int:
        """Encode all mutations of one accepted entry (already validated); returns its bytes."""
        parts = (element,) if type(element) is Mutation else element
        size = 0
        for m in parts:
            size += batch.add(self._shapes[(m.operation, m.table, m.columns)], m)
        return size

    def _entry_cost(self, element: Any) -> int:
        parts = (element,) if type(element) is Mutation else element
        cost = 0
        for m in parts:
            shape = self._shapes[(m.operation, m.table, m.columns)]
            cost += shape.cost if m.columns is not None else shape.cost * len(m.values)
        return cost

    def _check_element(self, element: Any, record: Any) -> tuple[Mutation, ...]:
        if isinstance(element, Mutation):
            return (element,)
        if (
            isinstance(element, list | tuple)
            and element
            and all(isinstance(m, Mutation) for m in element)
        ):
            return tuple(element)
        raise SerializerError(
            f"sink '{self._sink}': the serializer returned {type(element).__name__} "
            f"({short_repr(element)}) for record {short_repr(record)}; a Spanner sink's "
            "serializer must return a Mutation (Mutation.insert_or_update(table, row), ...), a "
            f"non-empty list of them, or None to skip the record (database {self.destination})"
        )

    # -- shapes (once per operation, table and column list) --------------------------------

    def _compile(self, mutation: Mutation, record: Any) -> Shape:
        if type(mutation) is not Mutation:
            self._check_element(mutation, record)
        table = self._schema.table(mutation.table)
        if table is None or (mutation.columns is not None and has_unknown_columns(table, mutation)):
            # The table or column may have been created since the writer opened.
            self._wait_pending()
            # Known shapes stay: the batches being filled are encoded (and split) with them.
            self._schema = self._refresh_schema()
            table = self._schema.table(mutation.table)
        if table is None:
            known = ", ".join(self._schema.table_names()) or "none"
            raise DestinationNotFoundError(
                f"sink '{self._sink}': table '{mutation.table}' does not exist in Spanner "
                f"database {self.destination} (tables: {known}); the serializer returned "
                f"{short_repr(mutation)} for record {short_repr(record)}. The sink never "
                "creates tables: create it before starting the job."
            )
        shape = compile_shape(mutation, table, self._sink, str(self.destination), record)
        self._shapes[(mutation.operation, mutation.table, mutation.columns)] = shape
        return shape

    # -- record-shaped failures -------------------------------------------------------------

    def _reject(self, element: Any, record: Any) -> None:
        """A value the column's type cannot take: to the failure handler, with the reason."""
        self._failures.append(self._failed(element, record, self._diagnose(element)))

    def _diagnose(self, element: Any) -> str:
        parts = (element,) if type(element) is Mutation else element
        for m in parts:
            reason = diagnose(self._shapes[(m.operation, m.table, m.columns)], m)
            if reason is not None:
                return reason
        return "a value does not fit its column's type"

    def _failed(self, element: Any, record: Any, reason: str) -> FailedRecord:
        parts = (element,) if type(element) is Mutation else element
        if len(parts) == 1:
            payload = parts[0].to_json_bytes()
        else:
            payload = b"[" + b",".join(m.to_json_bytes() for m in parts) + b"]"
        return FailedRecord(
            sink=self._sink,
            destination=str(self.destination),
            reason=reason,
            payload=payload,
            attributes={
                "table": ",".join(dict.fromkeys(m.table for m in parts)),
                "operation": ",".join(dict.fromkeys(m.operation for m in parts)),
            },
            record_repr=short_repr(record),
        )

    # -- sealing and committing -------------------------------------------------------------

    def _new_batch(self) -> Batch:
        """An empty commit whose entries are the open batch's."""
        batch = Batch()
        batch.entries = self.open_batch.elements
        return batch

    def _seal(self) -> Batch:
        """Hand the current batch to the committer thread; returns the new, empty batch."""
        batch = self._batch
        self.open_batch.cut()
        self._batch = self._new_batch()
        self._submit(batch)
        return self._batch

    def _submit(self, batch: Batch) -> None:
        """Queue ``batch`` for the committer thread (waiting while the window is full)."""
        if not batch.entries:
            return
        self._pending.admit()
        if self._executor is None:
            self._executor = OrderedExecutor(f"{self._sink}-commits")
        self._pending.add(self._executor.submit(lambda: self._commit_batch(batch)))

    def _wait_pending(self) -> None:
        """Wait for every sealed batch (their failures are kept for the next flush); raise
        the first error."""
        error = self._pending.settle()
        if error is not None:
            raise error

    def _commit_batch(self, batch: Batch) -> list[FailedRecord]:
        """Runs on the committer thread: commit, or split to isolate record-shaped failures."""
        if self._broken is not None:
            return []  # an earlier commit failed the job; these records will be replayed
        try:
            return self._commit_isolating(batch)
        except BaseException as exc:
            self._broken = exc
            raise

    def _commit_isolating(self, batch: Batch) -> list[FailedRecord]:
        """Commit ``batch``; a commit rejected for its content is halved until each rejected
        record is alone. Returns those records' failures."""
        entries = batch.entries
        stopped = False  # fail_fast: the first rejected record fails the job, commit no more

        def send(part: Sequence[tuple[Any, Any]]) -> None:
            nonlocal stopped
            if stopped:
                return
            if len(part) == len(entries):
                request, mutations = batch.request, batch.mutations  # the first attempt
            else:
                request, mutations = self._encode(part)
            try:
                self._commit_rpc(request, len(part), mutations)
            except SinkError:
                raise
            except Exception as exc:
                if not is_record_fault(exc):
                    raise self._commit_error(exc, len(part)) from exc
                if len(part) == 1:
                    stopped = self._fail_fast
                else:
                    self._note_split(len(part), exc)
                raise

        rejected = isolate_rejected(entries, send, is_record_fault)
        return [
            self._failed(element, record, f"table {_table_of(element)}: {rejection_text(exc)}")
            for (element, record), exc in rejected
        ]

    def _encode(self, entries: Sequence[tuple[Any, Any]]) -> tuple[Any, int]:
        """A new commit request of ``entries`` (already validated), and its mutation count."""
        batch = Batch()
        for element, _ in entries:
            self._add_entry_parts(batch, element)
            batch.mutations += self._entry_cost(element)
        return batch.request, batch.mutations

    def _note_split(self, records: int, error: BaseException) -> None:
        if self.split_commits == 0 or _LOG.isEnabledFor(logging.DEBUG):
            _LOG.info(
                "%s: a commit of %d records was rejected (%s); splitting it to find the "
                "rejected record(s)",
                self._sink,
                records,
                rejection_text(error),
            )
        self.split_commits += 1

    def _commit_error(self, error: Exception, records: int) -> SinkError:
        """The job's error for a commit that failed for a reason other than its content."""
        if is_schema_change(error):
            return DestinationNotFoundError(
                f"sink '{self._sink}': Spanner rejected a commit of {records} record(s) to "
                f"{self.destination}: {getattr(error, 'message', error)}. Was the table or "
                "column dropped while the job was running?"
            )
        return WriteError(
            f"sink '{self._sink}': commit of {records} record(s) to {self.destination} "
            f"failed: {status_name(error) or type(error).__name__}: {error}"
        )

    def _commit_rpc(self, request: Any, records: int, mutations: int) -> None:
        """One commit (with retries): the single place the writer talks to Spanner.

        Args:
            request: The raw ``CommitRequest`` (its session is set by the committer).
            records: How many records it holds, for messages.
            mutations: Its mutation count as the writer counted it.
        """
        assert self._committer is not None, "the factory is not open"
        self._committer.commit(
            request,
            f"sink '{self._sink}': commit of {records} record(s) ({mutations} mutations) to "
            f"{self.destination} at {self._endpoint}",
        )
        self.commits += 1
        self.mutations_committed += mutations

    # -- flushing ---------------------------------------------------------------------------

    def start_flush(self) -> None:
        if self.open_batch.elements:
            self._seal()

    def flush(self) -> list[FailedRecord]:
        self.start_flush()
        error = self._pending.settle()  # every sealed commit, even after one failed
        if error is not None:
            self._broken = None
            if isinstance(error, SinkError):
                raise error
            raise WriteError(
                f"sink '{self._sink}': committing to {self.destination} failed: "
                f"{type(error).__name__}: {error}"
            ) from error
        failures, self._failures = self._failures, []
        return failures + self._pending.take_results()

    @property
    def is_clean(self) -> bool:
        return not self.open_batch.elements and self._pending.is_clean and not self._failures

    def close(self) -> None:
        # Commits still queued are abandoned: after a failure their records are replayed.
        self._broken = self._broken or WriteError(f"sink '{self._sink}': writer closed")
        if self._executor is not None:
            self._executor.shutdown()
            self._executor = None


def _table_of(element: Any) -> str:
    return str(element.table if type(element) is Mutation else element[0].table)
