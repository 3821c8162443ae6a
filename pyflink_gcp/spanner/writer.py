"""The Spanner writer: the hot path of the Spanner sink, from a Mutation to a committed row.

One subtask has one :class:`SpannerWriter` (the sink has one database) and one session. Per
record, :meth:`SpannerWriter.write` looks up the mutation's *shape* (operation, table, columns:
validated against the schema once, with one value encoder per column and the mutation count of
one row) and encodes the values straight into the protobuf ``CommitRequest`` being filled.
Consecutive rows of the same shape share one ``Mutation`` message, as Spanner's own clients do;
rows are never reordered, because two mutations of one key must apply in arrival order.

When the next record would take the commit over its mutation or byte budget, or when the
commit holds an eighth of the budget and nothing is being committed (group commit), the commit
is *sealed* and handed to a single background thread, which commits sealed batches one after
the other (in order) while the processing thread fills the next. ``flush()``, which runs before
every checkpoint barrier, seals the last batch and waits for all of them.

A commit that fails:

- transiently (ABORTED, UNAVAILABLE, ...): retried with backoff until the retry deadline, then
  the job fails. The emulator runs one transaction at a time and aborts the others, so under
  parallelism this path is exercised constantly there; an aborted commit first waits about as
  long as a commit takes, since an earlier retry would only be aborted again.
- because its session expired: a new session is created and the commit retried.
- for a record-shaped reason (a constraint, a value Spanner rejects, a row that already exists
  or is missing, too many mutations): the batch is split in two halves committed in order,
  recursively, until the offending record is alone; only it goes to the failure handler (with
  ``fail_job()`` the split stops at the first one found, as the job fails anyway).
- for any other reason (permissions, a dropped table): the job fails with the error.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import json
import logging
import math
import numbers
import queue
import re
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.api_core.gapic_v1.client_info import ClientInfo
from google.auth.exceptions import DefaultCredentialsError
from google.cloud.spanner_v1.services.spanner import SpannerClient
from google.cloud.spanner_v1.services.spanner.transports.grpc import SpannerGrpcTransport
from google.cloud.spanner_v1.types import CommitRequest
from google.protobuf import struct_pb2
from google.protobuf.message import Message

from pyflink_gcp._version import __version__
from pyflink_gcp.core.endpoints import resolve_endpoint
from pyflink_gcp.core.errors import (
    ConfigurationError,
    DestinationNotFoundError,
    SerializerError,
    SinkError,
    WriteError,
)
from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.functions import short_repr
from pyflink_gcp.core.retry import BackoffSequence, RetryPolicy, status_name
from pyflink_gcp.core.runtime_info import SubtaskInfo
from pyflink_gcp.core.writer import DestinationWriter, WriterFactory
from pyflink_gcp.spanner.destinations import DatabaseDestination
from pyflink_gcp.spanner.options import SpannerWriterOptions
from pyflink_gcp.spanner.schema import DatabaseSchema, TableSchema, read_schema
from pyflink_gcp.spanner.serialization import DELETE, WRITE_OPERATIONS, KeyRange, Mutation

_LOG = logging.getLogger("pyflink_gcp.spanner")

_CommitRequestPb = CommitRequest.pb()
_NULL = struct_pb2.NULL_VALUE
_UTC = datetime.UTC

#: Status codes of a commit rejected for its content: split the batch to find the record.
_RECORD_CODES = frozenset(
    {"INVALID_ARGUMENT", "FAILED_PRECONDITION", "ALREADY_EXISTS", "NOT_FOUND", "OUT_OF_RANGE"}
)
#: A regular session unused this long may have been deleted by Spanner (after one hour).
_SESSION_MAX_IDLE_S = 50 * 60.0
#: Bytes of a commit request besides its mutations (session name, transaction options).
_REQUEST_OVERHEAD = 256
#: A batch holding 1/8 of the mutation budget is committed early when the committer is idle.
_EAGER_FRACTION = 8
#: Retries of a commit whose session was deleted under it.
_SESSION_RENEWALS = 3
#: Bounds of the first wait after ABORTED (see ``SpannerWriterFactory._aborted_backoffs``).
_ABORTED_MIN_BACKOFF_S = 0.01
_ABORTED_MAX_BACKOFF_S = 0.25


# -- value encoders: one per Spanner column type, ``(values, python_value) -> None`` ------------
#
# Each appends one google.protobuf.Value to ``values`` (the repeated field of a ListValue) in
# the wire form Spanner expects for the column's type, or raises _WrongType. The exact-type
# tests come first because they are the common case and the cheapest.


class _WrongType(Exception):
    """A Python value that the column's type cannot take (a record-shaped failure)."""


def _enc_string(out: Any, v: Any) -> None:
    if type(v) is str:
        out.add(string_value=v)
    elif v is None:
        out.add(null_value=_NULL)
    else:
        raise _WrongType


def _enc_int64(out: Any, v: Any) -> None:
    t = type(v)
    if t is int:
        out.add(string_value=str(v))
    elif v is None:
        out.add(null_value=_NULL)
    elif t is str:
        out.add(string_value=v)
    elif isinstance(v, numbers.Integral) and t is not bool:
        out.add(string_value=str(int(v)))
    else:
        raise _WrongType


def _enc_float(out: Any, v: Any) -> None:
    t = type(v)
    if t is float or (t is not bool and isinstance(v, numbers.Real) and t is not str):
        f = float(v)
        if math.isfinite(f):
            out.add(number_value=f)
        else:
            out.add(string_value="NaN" if f != f else ("Infinity" if f > 0 else "-Infinity"))
    elif v is None:
        out.add(null_value=_NULL)
    elif t is str:
        out.add(string_value=v)
    else:
        raise _WrongType


def _enc_bool(out: Any, v: Any) -> None:
    if type(v) is bool:
        out.add(bool_value=v)
    elif v is None:
        out.add(null_value=_NULL)
    else:
        raise _WrongType


def _enc_bytes(out: Any, v: Any) -> None:
    if isinstance(v, bytes | bytearray | memoryview):
        out.add(string_value=base64.b64encode(v).decode("ascii"))
    elif v is None:
        out.add(null_value=_NULL)
    else:
        raise _WrongType


def _enc_timestamp(out: Any, v: Any) -> None:
    if isinstance(v, datetime.datetime):
        rfc3339 = getattr(v, "rfc3339", None)  # api_core's DatetimeWithNanoseconds
        if callable(rfc3339):
            out.add(string_value=rfc3339())
            return
        if v.tzinfo is not None:
            v = v.astimezone(_UTC).replace(tzinfo=None)
        out.add(string_value=v.isoformat() + "Z")
    elif v is None:
        out.add(null_value=_NULL)
    elif type(v) is str:
        out.add(string_value=v)
    else:
        raise _WrongType


def _enc_date(out: Any, v: Any) -> None:
    if type(v) is datetime.date or (
        isinstance(v, datetime.date) and not isinstance(v, datetime.datetime)
    ):
        out.add(string_value=v.isoformat())
    elif v is None:
        out.add(null_value=_NULL)
    elif type(v) is str:
        out.add(string_value=v)
    else:
        raise _WrongType


def _enc_numeric(out: Any, v: Any) -> None:
    if isinstance(v, decimal.Decimal):
        out.add(string_value=format(v, "f"))
    elif v is None:
        out.add(null_value=_NULL)
    elif type(v) is str:
        out.add(string_value=v)
    elif isinstance(v, numbers.Integral) and type(v) is not bool:
        out.add(string_value=str(int(v)))
    else:
        raise _WrongType


def _enc_json(out: Any, v: Any) -> None:
    if v is None:
        out.add(null_value=_NULL)
    elif type(v) is str:
        out.add(string_value=v)
    else:
        try:
            text = json.dumps(v, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise _WrongType from exc
        out.add(string_value=text)


def _enc_uuid(out: Any, v: Any) -> None:
    if isinstance(v, uuid.UUID | str):
        out.add(string_value=str(v))
    elif v is None:
        out.add(null_value=_NULL)
    else:
        raise _WrongType


def _enc_text(out: Any, v: Any) -> None:
    """Types whose values travel as strings Spanner parses (INTERVAL, unknown future types)."""
    if type(v) is str:
        out.add(string_value=v)
    elif v is None:
        out.add(null_value=_NULL)
    else:
        raise _WrongType


def _enc_proto(out: Any, v: Any) -> None:
    if isinstance(v, Message):
        v = v.SerializeToString()
    _enc_bytes(out, v)


def _enc_enum(out: Any, v: Any) -> None:
    _enc_int64(out, v)


def _array_encoder(element: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    def encode(out: Any, v: Any) -> None:
        if isinstance(v, list | tuple):
            values = out.add().list_value.values
            for item in v:
                element(values, item)
        elif v is None:
            out.add(null_value=_NULL)
        else:
            raise _WrongType

    return encode


_SCALAR_ENCODERS: dict[str, Callable[[Any, Any], None]] = {
    "STRING": _enc_string,
    "INT64": _enc_int64,
    "FLOAT64": _enc_float,
    "FLOAT32": _enc_float,
    "BOOL": _enc_bool,
    "BYTES": _enc_bytes,
    "TIMESTAMP": _enc_timestamp,
    "DATE": _enc_date,
    "NUMERIC": _enc_numeric,
    "JSON": _enc_json,
    "UUID": _enc_uuid,
    "INTERVAL": _enc_text,
    "PROTO": _enc_proto,
    "ENUM": _enc_enum,
}


# ``ARRAY<T>``, optionally annotated like ``ARRAY<FLOAT32>(vector_length=>128)``.
_ARRAY_TYPE = re.compile(r"ARRAY<(.+)>(?:\([^()]*\))?", re.IGNORECASE)


def encoder_for(spanner_type: str) -> Callable[[Any, Any], None]:
    """The value encoder of a column type as INFORMATION_SCHEMA spells it (``ARRAY<STRING(10)>``)."""
    t = spanner_type.strip()
    array = _ARRAY_TYPE.fullmatch(t)
    if array:
        return _array_encoder(encoder_for(array.group(1)))
    base = t.split("(", 1)[0].split("<", 1)[0].strip().upper()
    return _SCALAR_ENCODERS.get(base, _enc_text)


# -- shapes: what a mutation's (operation, table, columns) means for this database -----------


class _Shape:
    """A validated (operation, table, columns): encoders, mutation count and message header.

    For writes ``encoders`` follow ``columns`` and ``cost`` is the count of one row; for deletes
    ``encoders`` are the primary key's and ``cost`` the count of one key or range.
    """

    __slots__ = (
        "operation",
        "is_delete",
        "table",
        "columns",
        "encoders",
        "cost",
        "header_bytes",
        "schema",
    )

    def __init__(
        self,
        operation: str,
        schema: TableSchema,
        columns: tuple[str, ...],
        encoders: tuple[Callable[[Any, Any], None], ...],
        cost: int,
    ) -> None:
        self.operation = operation
        self.is_delete = operation == DELETE
        self.table = schema.name
        self.schema = schema
        self.columns = columns
        self.encoders = encoders
        self.cost = cost
        # The Mutation message's own fields (table, column names) plus framing, paid once per
        # run of consecutive rows of this shape.
        self.header_bytes = 8 + len(self.table) + sum(len(c) + 2 for c in columns)


class _Batch:
    """One commit being filled: the request, the entries in it and their budget use."""

    __slots__ = ("request", "entries", "mutations", "bytes", "last_shape", "last_rows")

    def __init__(self) -> None:
        self.request = _CommitRequestPb()
        self.request.single_use_transaction.read_write.SetInParent()
        #: (element, record) per accepted record, in order: what a split re-encodes.
        self.entries: list[tuple[Any, Any]] = []
        self.mutations = 0
        self.bytes = _REQUEST_OVERHEAD
        self.last_shape: _Shape | None = None
        #: The repeated field the next row of ``last_shape`` goes to (a write's rows, or a
        #: delete's KeySet).
        self.last_rows: Any = None

    def snapshot(self) -> tuple[Any, ...]:
        rows = self.last_rows
        shape = self.last_shape
        if rows is None:
            sizes: tuple[int, ...] = ()
        elif shape is not None and shape.operation == DELETE:
            sizes = (len(rows.keys), len(rows.ranges))
        else:
            sizes = (len(rows),)
        return (len(self.request.mutations), shape, rows, sizes)

    def rollback(self, snap: tuple[Any, ...]) -> None:
        """Undo everything a partly encoded record added since :meth:`snapshot`."""
        count, shape, rows, sizes = snap
        del self.request.mutations[count:]
        if rows is not None:
            if shape is not None and shape.operation == DELETE:
                del rows.keys[sizes[0] :]
                del rows.ranges[sizes[1] :]
            else:
                del rows[sizes[0] :]
        self.last_shape, self.last_rows = shape, rows

    def add(self, shape: _Shape, mutation: Mutation) -> int:
        """Encode ``mutation`` (of ``shape``) into the request; returns its encoded bytes."""
        size = 0
        if shape is not self.last_shape:
            m = self.request.mutations.add()
            body = getattr(m, shape.operation)
            body.table = shape.table
            if shape.operation == DELETE:
                self.last_rows = body.key_set
            else:
                body.columns.extend(shape.columns)
                self.last_rows = body.values
            self.last_shape = shape
            size = shape.header_bytes
        if shape.operation == DELETE:
            return size + _encode_keys(self.last_rows, shape, mutation.values)
        row = self.last_rows.add()
        values = row.values
        for encode, value in zip(shape.encoders, mutation.values, strict=True):
            encode(values, value)
        return size + row.ByteSize() + 4


def _encode_keys(key_set: Any, shape: _Shape, keys: tuple[Any, ...]) -> int:
    key_len = len(shape.encoders)
    size = 0
    for key in keys:
        if isinstance(key, KeyRange):
            r = key_set.ranges.add()
            for bound, closed, target_closed, target_open in (
                (key.start, key.start_closed, r.start_closed, r.start_open),
                (key.end, key.end_closed, r.end_closed, r.end_open),
            ):
                if len(bound) > key_len:
                    raise _BadKey(f"key range bound {bound!r} is longer than the primary key")
                target = target_closed if closed else target_open
                target.SetInParent()
                for encode, value in zip(shape.encoders, bound, strict=False):
                    encode(target.values, value)
            size += r.ByteSize() + 4
        else:
            if len(key) != key_len:
                raise _BadKey(
                    f"key {key!r} has {len(key)} value(s), the primary key has {key_len} "
                    f"({', '.join(c.name for c in shape.schema.key)})"
                )
            row = key_set.keys.add()
            for encode, value in zip(shape.encoders, key, strict=True):
                encode(row.values, value)
            size += row.ByteSize() + 4
    return size


class _BadKey(_WrongType):
    """A delete key that does not fit the primary key (a record-shaped failure)."""


# -- the background committer --------------------------------------------------------------


class _OrderedExecutor:
    """One daemon thread running submitted calls in submission order.

    A daemon thread (not a ThreadPoolExecutor) so that a task torn down after a failure never
    waits for an in-flight commit: its records are replayed from the checkpoint anyway.
    """

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self._queue.put((future, fn))
        return future

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                future.set_exception(exc)

    def shutdown(self) -> None:
        self._queue.put(None)


# -- the factory: one per subtask, owns the client, the session and the schema --------------


class SpannerWriterFactory(WriterFactory[DatabaseDestination]):
    """Creates the Spanner client, the session and reads the schema, on the worker."""

    destination_type = DatabaseDestination

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
        self.schema = DatabaseSchema()
        self.info: SubtaskInfo | None = None
        deadline = self.options.retry_deadline.total_seconds()
        self.retry = RetryPolicy(initial_backoff_s=0.05, max_backoff_s=5.0, deadline_s=deadline)
        # An aborted commit is retried sooner: another transaction won a race (on the emulator,
        # simply ran at the same time), and its commit is not going to take seconds.
        self.retry_aborted = RetryPolicy(
            initial_backoff_s=_ABORTED_MIN_BACKOFF_S,
            max_backoff_s=_ABORTED_MAX_BACKOFF_S,
            deadline_s=deadline,
            # Aborts are Spanner's concurrency control at work, not a fault: warn only when a
            # commit keeps being aborted.
            quiet_attempts=3,
        )
        #: Moving average of a successful commit's duration: how long the transaction that
        #: aborted ours is likely to hold on (see ``_aborted_backoffs``).
        self.commit_seconds = 0.0
        self._session: str | None = None
        self._session_used = 0.0
        self._session_lock = threading.Lock()
        self._metadata: list[tuple[str, str]] = []

    def __getstate__(self) -> dict[str, Any]:
        # Only the configuration travels; clients and sessions are made on the worker.
        keep = ("sink_name", "database", "options", "endpoint", "fail_fast")
        return {k: self.__dict__[k] for k in keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    # -- lifecycle ------------------------------------------------------------------------

    def open(self, info: SubtaskInfo) -> None:
        self.info = info
        self.api = self._make_client()
        self._metadata = [
            ("google-cloud-resource-prefix", str(self.database)),
            ("x-goog-spanner-route-to-leader", "true"),
        ]
        self.schema = self._read_schema()
        _LOG.info(
            "%s: subtask %d writes to %s (%d tables)",
            self.sink_name,
            info.subtask_index,
            self.database,
            len(self.schema.tables),
        )

    def _make_client(self) -> Any:
        endpoint = resolve_endpoint(self.endpoint, "SPANNER_EMULATOR_HOST")
        client_info = ClientInfo(user_agent=f"pyflink-gcp/{__version__}")
        if endpoint.insecure:
            import grpc

            channel = grpc.insecure_channel(
                endpoint.host,
                options=[
                    ("grpc.max_send_message_length", -1),
                    ("grpc.max_receive_message_length", -1),
                ],
            )
            return SpannerClient(
                transport=SpannerGrpcTransport(channel=channel), client_info=client_info
            )
        options = {"api_endpoint": endpoint.host} if endpoint.host else None
        try:
            return SpannerClient(client_options=options, client_info=client_info)
        except DefaultCredentialsError as exc:
            raise ConfigurationError(
                f"sink '{self.sink_name}': no Application Default Credentials for Spanner on "
                "this worker (set SPANNER_EMULATOR_HOST to use an emulator, or configure ADC): "
                f"{exc}"
            ) from exc

    def create_writer(self, destination: DatabaseDestination) -> SpannerWriter:
        return SpannerWriter(destination, self)

    def close(self) -> None:
        api, session = self.api, self._session
        self.api, self._session = None, None
        if api is None:
            return
        if session is not None:
            try:
                api.delete_session(name=session, timeout=5.0, metadata=self._metadata)
            except Exception:  # noqa: BLE001 - best effort; Spanner deletes idle sessions
                _LOG.debug("%s: deleting session %s failed", self.sink_name, session)
        try:
            api.transport.close()
        except Exception:  # noqa: BLE001 - teardown
            pass

    # -- sessions ---------------------------------------------------------------------------

    def session(self) -> str:
        """The subtask's session, created on first use and renewed before it can expire."""
        with self._session_lock:
            now = time.monotonic()
            if self._session is None or now - self._session_used > _SESSION_MAX_IDLE_S:
                self._session = self._create_session()
            self._session_used = now
            return self._session

    def renew_session(self, stale: str) -> None:
        """Forget ``stale`` (Spanner answered "Session not found") so the next call makes one."""
        with self._session_lock:
            if self._session == stale:
                self._session = None

    def _create_session(self) -> str:
        def create() -> str:
            return str(
                self.api.create_session(
                    database=str(self.database), timeout=30.0, metadata=self._metadata
                ).name
            )

        return self._call(create, "create a session")

    def _call(self, fn: Callable[[], Any], what: str) -> Any:
        """Run an RPC other than a commit with retries, translating permanent errors."""
        try:
            return self.retry.call(fn, f"sink '{self.sink_name}': {what} in {self.database}")
        except SinkError:
            raise
        except api_exceptions.NotFound as exc:
            raise DestinationNotFoundError(
                f"sink '{self.sink_name}': Spanner database {self.database} not found "
                f"(could not {what}): {exc.message}. The sink never creates databases or "
                "tables: create them before starting the job."
            ) from exc
        except Exception as exc:
            raise WriteError(
                f"sink '{self.sink_name}': could not {what} in {self.database}: "
                f"{status_name(exc) or type(exc).__name__}: {exc}"
            ) from exc

    # -- schema -----------------------------------------------------------------------------

    def _read_schema(self) -> DatabaseSchema:
        session = self.session()

        def query(sql: str) -> list[list[Any]]:
            def run() -> Any:
                return self.api.execute_sql(
                    request={"session": session, "sql": sql},
                    timeout=60.0,
                    metadata=self._metadata,
                )

            result = self._call(run, "read the schema")
            return [[_py(v) for v in row.values] for row in result._pb.rows]

        try:
            return read_schema(query)
        except WriteError as exc:
            if "INVALID_ARGUMENT" in str(exc):
                raise WriteError(
                    f"sink '{self.sink_name}': could not read the schema of {self.database} "
                    "from INFORMATION_SCHEMA; only GoogleSQL-dialect databases are supported "
                    f"({exc})"
                ) from exc
            raise

    def refresh_schema(self) -> DatabaseSchema:
        """Re-read the schema: a table or column the writer did not know may be new.

        The caller makes sure no commit is in flight on the session.
        """
        self.schema = self._read_schema()
        return self.schema

    # -- commits ----------------------------------------------------------------------------

    def commit(self, request: Any, what: str) -> None:
        """Commit ``request`` (a raw CommitRequest), retrying transient errors.

        Raises:
            WriteError: Still failing transiently at the retry deadline.
            Exception: The client's error for anything not transient.
        """
        timeout = self.options.commit_timeout.total_seconds()
        for renewal in range(_SESSION_RENEWALS + 1):
            session = self.session()
            request.session = session

            def attempt() -> Any:
                return self.api.commit(
                    request=CommitRequest.wrap(request),
                    retry=None,
                    timeout=timeout,
                    metadata=self._metadata,
                )

            try:
                self._retrying(attempt, what)
                return
            except api_exceptions.NotFound as exc:
                if "session not found" not in str(exc.message).lower():
                    raise
                if renewal == _SESSION_RENEWALS:
                    raise
                _LOG.info("%s: session %s expired; creating a new one", self.sink_name, session)
                self.renew_session(session)

    def _retrying(self, attempt: Callable[[], Any], what: str) -> Any:
        """Call ``attempt`` until it succeeds; ABORTED and other transient errors back off
        separately (see ``_aborted_backoffs``), each up to the retry deadline."""
        aborted: BackoffSequence | None = None
        other: BackoffSequence | None = None
        while True:
            start = time.monotonic()
            try:
                result = attempt()
            except Exception as exc:
                if status_name(exc) == "ABORTED":
                    aborted = aborted or self._aborted_backoffs()
                    aborted.wait_or_raise(exc, what)
                elif self.retry.is_transient(exc):
                    other = other or self.retry.backoffs()
                    other.wait_or_raise(exc, what)
                else:
                    raise
            else:
                self.commit_seconds += 0.25 * (time.monotonic() - start - self.commit_seconds)
                return result

    def _aborted_backoffs(self) -> BackoffSequence:
        """The waits of an aborted commit, starting near the length of a typical commit.

        The emulator runs one transaction at a time and aborts any other at its first write,
        after it has decoded the whole request: a retry that comes back before the running
        commit is done costs the emulator that work again for nothing. So the first wait is
        drawn up to the duration of this writer's recent commits (the other subtasks send
        commits of the same kind), within the bounds of ``retry_aborted``. On Spanner a blind
        write is rarely aborted, and then it waits about one commit.
        """
        policy = self.retry_aborted
        first = min(max(self.commit_seconds, policy.initial_backoff_s), policy.max_backoff_s)
        if first == policy.initial_backoff_s:
            return policy.backoffs()
        return dataclasses.replace(policy, initial_backoff_s=first).backoffs()


def _py(value: struct_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    return None if kind in (None, "null_value") else getattr(value, kind)


# -- the writer ----------------------------------------------------------------------------


class SpannerWriter(DestinationWriter[DatabaseDestination]):
    """Batches the mutations of all tables of one subtask into ordered commits."""

    def __init__(self, destination: DatabaseDestination, factory: SpannerWriterFactory) -> None:
        super().__init__(destination)
        self._factory = factory
        self._sink = factory.sink_name
        options = factory.options
        self._max_mutations = options.max_mutations_per_commit
        self._max_bytes = options.max_commit_bytes
        self._max_pending = options.max_pending_commits
        #: A batch this full is committed at once if the committer is idle (group commit).
        self._eager_mutations = max(1, self._max_mutations // _EAGER_FRACTION)
        self._fail_fast = factory.fail_fast
        self._shapes: dict[tuple[str, str, tuple[str, ...] | None], _Shape] = {}
        self._batch = _Batch()
        self._pending: list[Future[list[FailedRecord]]] = []
        self._failures: list[FailedRecord] = []
        self._broken: BaseException | None = None
        self._executor: _OrderedExecutor | None = None
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
                if batch.mutations + cost <= self._max_mutations:
                    rows = batch.last_rows
                    row = rows.add()
                    values = row.values
                    try:
                        for encode, value in zip(shape.encoders, element.values, strict=True):
                            encode(values, value)
                    except _WrongType:
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
            cost = shape.cost if element.columns is not None else shape.cost * len(element.values)
            if batch.mutations + cost > self._max_mutations and batch.entries:
                batch = self._seal()
            snap = batch.snapshot()
            try:
                size = batch.add(shape, element)
            except _WrongType:
                batch.rollback(snap)
                self._reject(element, record)
                return
        else:
            batch, cost, size, snap = self._write_many(element, record)
            if batch is None:
                return
        if batch.bytes + size > self._max_bytes and batch.entries:
            # Over the byte budget: move this record to the next commit.
            batch.rollback(snap)
            batch = self._seal()
            size = self._add_entry_parts(batch, element)
        self._accept(batch, element, record, cost, size)

    def _accept(self, batch: _Batch, element: Any, record: Any, cost: int, size: int) -> None:
        """Account for a record encoded into ``batch``; start a group commit when it is time."""
        entries = batch.entries
        entries.append((element, record))
        batch.mutations += cost
        batch.bytes += size
        if batch.mutations >= self._eager_mutations and not len(entries) & 31:
            self._seal_if_idle()

    def _seal_if_idle(self) -> None:
        """Group commit: hand the batch over early when the committer has nothing to do.

        Commits then overlap the processing of the next records instead of waiting for the
        flush; while a commit runs, the next batch grows (up to the budget), so slow commits
        get large batches and fast ones small, frequent ones.
        """
        if not self._pending or self._pending[-1].done():
            self._seal()

    def _write_many(self, element: Any, record: Any) -> tuple[Any, int, int, Any]:
        """Several mutations from one record: committed in the same commit, failed together."""
        parts = self._check_element(element, record)
        cost = 0
        for m in parts:
            shape = self._shapes.get((m.operation, m.table, m.columns))
            if shape is None:
                shape = self._compile(m, record)
            cost += shape.cost if m.columns is not None else shape.cost * len(m.values)
        batch = self._batch
        if batch.mutations + cost > self._max_mutations and batch.entries:
            batch = self._seal()
        snap = batch.snapshot()
        try:
            size = self._add_entry_parts(batch, parts)
        except _WrongType:
            batch.rollback(snap)
            self._reject(element, record)
            return None, 0, 0, None
        return batch, cost, size, snap

    def _add_entry_parts(self, batch: _Batch, element: Any) -> int:
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

    def _compile(self, mutation: Mutation, record: Any) -> _Shape:
        if type(mutation) is not Mutation:
            self._check_element(mutation, record)
        table = self._factory.schema.table(mutation.table)
        if table is None or (mutation.columns is not None and self._unknown(table, mutation)):
            # The table or column may have been created since the writer opened.
            self._wait_pending()
            # Known shapes stay: the batches being filled are encoded (and split) with them.
            self._factory.refresh_schema()
            table = self._factory.schema.table(mutation.table)
        if table is None:
            known = ", ".join(self._factory.schema.table_names()) or "none"
            raise DestinationNotFoundError(
                f"sink '{self._sink}': table '{mutation.table}' does not exist in Spanner "
                f"database {self.destination} (tables: {known}); the serializer returned "
                f"{short_repr(mutation)} for record {short_repr(record)}. The sink never "
                "creates tables: create it before starting the job."
            )
        if mutation.operation == DELETE:
            if not table.key:
                raise DestinationNotFoundError(
                    f"sink '{self._sink}': table '{table.name}' has no primary key in the "
                    f"schema of {self.destination}"
                )
            shape = _Shape(
                DELETE,
                table,
                (),
                tuple(encoder_for(c.spanner_type) for c in table.key),
                table.delete_cost,
            )
        elif mutation.operation in WRITE_OPERATIONS and mutation.columns is not None:
            columns = mutation.columns
            unknown = [c for c in columns if table.column(c) is None]
            if unknown:
                raise SerializerError(
                    f"sink '{self._sink}': column(s) {', '.join(map(repr, unknown))} do not "
                    f"exist in table '{table.name}' of {self.destination} (columns: "
                    f"{', '.join(c.name for c in table.columns.values())}); the serializer "
                    f"returned {short_repr(mutation)} for record {short_repr(record)}"
                )
            generated = [c for c in columns if table.columns[c.lower()].generated]
            if generated:
                raise SerializerError(
                    f"sink '{self._sink}': column(s) {', '.join(map(repr, generated))} of table "
                    f"'{table.name}' are generated and cannot be written; the serializer "
                    f"returned {short_repr(mutation)} for record {short_repr(record)}"
                )
            if len({c.lower() for c in columns}) != len(columns):
                raise SerializerError(
                    f"sink '{self._sink}': a column appears twice in {short_repr(mutation)} "
                    f"(record {short_repr(record)})"
                )
            shape = _Shape(
                mutation.operation,
                table,
                columns,
                tuple(encoder_for(table.columns[c.lower()].spanner_type) for c in columns),
                table.write_cost(mutation.operation, columns),
            )
        else:
            raise SerializerError(
                f"sink '{self._sink}': unknown mutation operation {mutation.operation!r} in "
                f"{short_repr(mutation)} (record {short_repr(record)})"
            )
        self._shapes[(mutation.operation, mutation.table, mutation.columns)] = shape
        return shape

    @staticmethod
    def _unknown(table: TableSchema, mutation: Mutation) -> bool:
        return any(table.column(c) is None for c in mutation.columns or ())

    # -- record-shaped failures -------------------------------------------------------------

    def _reject(self, element: Any, record: Any) -> None:
        """A value the column's type cannot take: to the failure handler, with the reason."""
        self._failures.append(self._failed(element, record, self._diagnose(element)))

    def _diagnose(self, element: Any) -> str:
        parts = (element,) if type(element) is Mutation else element
        for m in parts:
            shape = self._shapes[(m.operation, m.table, m.columns)]
            scratch = struct_pb2.ListValue().values
            if m.operation == DELETE:
                try:
                    _encode_keys(_KeySetScratch(), shape, m.values)
                except _BadKey as exc:
                    return f"table {shape.table}: {exc}"
                except _WrongType:
                    key_types = ", ".join(f"{c.name} {c.spanner_type}" for c in shape.schema.key)
                    return (
                        f"table {shape.table}: a key of {short_repr(list(m.values))} does not "
                        f"fit the primary key ({key_types})"
                    )
                continue
            for column, encode, value in zip(shape.columns, shape.encoders, m.values, strict=True):
                try:
                    encode(scratch, value)
                except _WrongType:
                    spanner_type = shape.schema.columns[column.lower()].spanner_type
                    return (
                        f"table {shape.table}: column {column} ({spanner_type}) cannot take "
                        f"{type(value).__name__} {short_repr(value)}"
                    )
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

    def _seal(self) -> _Batch:
        """Hand the current batch to the committer thread; returns the new, empty batch."""
        batch = self._batch
        self._batch = _Batch()
        if not batch.entries:
            return self._batch
        while len(self._pending) >= self._max_pending:
            self._collect(self._pending.pop(0))
        if self._executor is None:
            self._executor = _OrderedExecutor(f"{self._sink}-commits")
        self._pending.append(self._executor.submit(lambda: self._commit_batch(batch)))
        return self._batch

    def _collect(self, future: Future[list[FailedRecord]]) -> None:
        """Wait for one sealed batch; keep its failures for the next flush, raise its error."""
        self._failures.extend(future.result())

    def _wait_pending(self) -> None:
        """Wait for every sealed batch (their failures are kept for the next flush)."""
        while self._pending:
            self._collect(self._pending.pop(0))

    def _commit_batch(self, batch: _Batch) -> list[FailedRecord]:
        """Runs on the committer thread: commit, or split to isolate record-shaped failures."""
        if self._broken is not None:
            return []  # an earlier commit failed the job; these records will be replayed
        try:
            failures: list[FailedRecord] = []
            self._commit_entries(batch.entries, batch, failures)
            return failures
        except BaseException as exc:
            self._broken = exc
            raise

    def _commit_entries(
        self, entries: list[tuple[Any, Any]], batch: _Batch | None, failures: list[FailedRecord]
    ) -> None:
        if self._fail_fast and failures:
            return
        if batch is None:
            batch = _Batch()
            for element, _ in entries:
                self._add_entry_parts(batch, element)
                batch.mutations += self._entry_cost(element)
        try:
            self._commit_rpc(batch.request, len(entries), batch.mutations)
            return
        except SinkError:
            raise
        except Exception as exc:
            status = status_name(exc)
            if status not in _RECORD_CODES:
                raise WriteError(
                    f"sink '{self._sink}': commit of {len(entries)} record(s) to "
                    f"{self.destination} failed: {status or type(exc).__name__}: {exc}"
                ) from exc
            message = str(getattr(exc, "message", exc))
            if len(entries) == 1:
                element, record = entries[0]
                self._single_failure(element, record, status, message, failures)
                return
            if self.split_commits == 0 or _LOG.isEnabledFor(logging.DEBUG):
                _LOG.info(
                    "%s: a commit of %d records was rejected (%s: %s); splitting it to find "
                    "the rejected record(s)",
                    self._sink,
                    len(entries),
                    status,
                    message,
                )
        # Record-shaped: split in two and commit each half, in order.
        self.split_commits += 1
        middle = len(entries) // 2
        self._commit_entries(entries[:middle], None, failures)
        self._commit_entries(entries[middle:], None, failures)

    def _single_failure(
        self, element: Any, record: Any, status: str, message: str, failures: list[FailedRecord]
    ) -> None:
        lowered = message.lower()
        if status == "NOT_FOUND" and (
            lowered.startswith("table not found") or lowered.startswith("column not found")
        ):
            # The schema changed under the running job: not the record's fault.
            raise DestinationNotFoundError(
                f"sink '{self._sink}': Spanner rejected {short_repr(element)} (record "
                f"{short_repr(record)}) in {self.destination}: {message}. Was the table or "
                "column dropped while the job was running?"
            )
        table = element.table if type(element) is Mutation else element[0].table
        failures.append(self._failed(element, record, f"table {table}: {status}: {message}"))

    def _commit_rpc(self, request: Any, records: int, mutations: int) -> None:
        """One commit (with retries): the single place the writer talks to Spanner.

        Args:
            request: The raw ``CommitRequest`` (its session is set here).
            records: How many records it holds, for messages.
            mutations: Its mutation count as the writer counted it.
        """
        self._factory.commit(
            request,
            f"sink '{self._sink}': commit of {records} record(s) ({mutations} mutations) to "
            f"{self.destination}",
        )
        self.commits += 1
        self.mutations_committed += mutations

    # -- flushing ---------------------------------------------------------------------------

    def start_flush(self) -> None:
        if self._batch.entries:
            self._seal()

    def flush(self) -> list[FailedRecord]:
        self.start_flush()
        error: BaseException | None = None
        while self._pending:
            future = self._pending.pop(0)
            try:
                self._collect(future)
            except BaseException as exc:  # noqa: BLE001 - re-raised below, after the others
                error = error or exc
        if error is not None:
            self._broken = None
            if isinstance(error, SinkError):
                raise error
            raise WriteError(
                f"sink '{self._sink}': committing to {self.destination} failed: "
                f"{type(error).__name__}: {error}"
            ) from error
        failures, self._failures = self._failures, []
        return failures

    @property
    def is_clean(self) -> bool:
        return not self._batch.entries and not self._pending and not self._failures

    def close(self) -> None:
        # Commits still queued are abandoned: after a failure their records are replayed.
        self._broken = self._broken or WriteError(f"sink '{self._sink}': writer closed")
        if self._executor is not None:
            self._executor.shutdown()
            self._executor = None


class _KeySetScratch:
    """A throwaway KeySet for diagnosing a bad delete key without touching the batch."""

    def __init__(self) -> None:
        from google.cloud.spanner_v1.types import KeySet

        self._pb = KeySet.pb()()
        self.keys = self._pb.keys
        self.ranges = self._pb.ranges
