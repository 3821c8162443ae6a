"""Starts bqemulator with one DuckDB lock, BigQuery's FlushRows, job ids and Avro TIME, and
AppendRows connections that many tables can share (:func:`_patch_rebinding`,
:func:`_patch_grpc_threads`).

bqemulator serves its REST API (on the event loop and its thread pool) and its Storage Write API
(on gRPC's thread pool) from one DuckDB connection, guarded by two different locks: an asyncio
lock for REST writes and a threading lock for appends. A DuckDB connection is not safe for
concurrent use, and with tables created over REST while other tables received appends the
emulator was seen to hang or die. This launcher, run with the emulator's own interpreter, puts
one re-entrant lock around every statement, result fetch and (un)registration on that
connection, and makes the append path's lock that same lock, then hands over to the emulator's
command line.

It also corrects two answers. FlushRows on a BUFFERED stream follows BigQuery, not the emulator.
BigQuery's offset is inclusive (flushing N makes rows 0..N visible, and the response says N), an
offset past the last appended row answers OUT_OF_RANGE and one already flushed ALREADY_EXISTS.
The emulator took the offset as exclusive, accepted one past the end and answered OUT_OF_RANGE
for both errors, so code tested against it would be off by one row against BigQuery. A
finalized stream refuses FlushRows with INVALID_ARGUMENT, as Google's own clients and
connectors read BigQuery (docs/emulators.md cites them). BigQuery's reference is silent on
it, so a test can pick each plausible answer, with the environment variable
``PYFLINK_GCP_BQ_FINALIZED_FLUSH`` at start or ``POST /bigquery/v2/_pyflink-gcp/finalized-flush/
<answer>`` while it runs (:data:`FINALIZED_FLUSH_ANSWERS`): ``invalid_argument`` (the default),
``failed_precondition``, or ``flush`` (flushed up to the stream's end as if it were open).

tables.patch and tables.update add the columns a new schema adds to the table's DuckDB table
(the emulator changed only its metadata, so appends with the new columns failed), and a stale
``If-Match`` etag answers 412 (:func:`_schema_updating`); ``GET /bigquery/v2/_pyflink-gcp/
schema-updates`` counts the updates that changed each table's columns.

A table's ``rangePartitioning``, ``requirePartitionFilter`` and ``encryptionConfiguration`` are
kept and returned (:func:`_patch_table_extras`); the emulator dropped them.

jobs.get of a job whose destination dataset is in a single region answers 404 unless the
request names that location, as BigQuery's reference says it must (multi-regions US and EU
are found without); the emulator ignored the location.

A load job into a partition (``t$20251202``) loads into the table (:func:`_load_into_partition`).

And jobs.insert with the id of an existing job answers 409 ``duplicate`` and runs nothing, as
BigQuery does; the first job stays. The emulator ran the job again and replaced its record,
so a retried load job with a fixed id (the way to load exactly once) loaded its rows twice.
Avro files with both ``decimal`` and ``time-micros`` columns load their TIME values as
BigQuery does (:func:`_patch_avro_time`).

Usage: ``<bqemulator's python> bq_serialized.py start [bqemulator options]``.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any

_LOCK = threading.RLock()


class _SerialConnection:
    """A DuckDB connection whose calls hold the process-wide lock."""

    __slots__ = ("_raw",)

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._raw, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with _LOCK:
                result = attr(*args, **kwargs)
            # ``execute`` returns the connection itself, for chained fetches.
            return self if result is self._raw else result

        return call


def _flush_buffered(handler: Any, request_bytes: bytes, context: Any) -> bytes | None:
    """FlushRows on a BUFFERED stream with BigQuery's semantics; None leaves it to the emulator.

    Unknown and non-BUFFERED streams keep the emulator's answers. The rows are sliced from the
    stream's buffer and inserted by the emulator's own ``_flush_to_target``, under the stream's
    lock like its appends, so a concurrent append or flush never sees half of it.
    """
    import grpc
    import pyarrow as pa
    from bqemulator.streaming.write_stream import WriteStreamType
    from google.cloud.bigquery_storage_v1 import types

    request = types.FlushRowsRequest.deserialize(request_bytes)
    stream = handler._manager.get(request.write_stream)
    if stream is None or stream.stream_type is not WriteStreamType.BUFFERED:
        return None
    offset = request.offset
    finalized_answer = _finalized_flush_answer(stream)
    if finalized_answer is not None:
        code, details = finalized_answer
        context.set_code(code)
        context.set_details(details)
        return b""
    if offset is None or offset < 0:
        context.set_code(grpc.StatusCode.INVALID_ARGUMENT)
        context.set_details(f"FlushRows needs an offset of 0 or more, got {offset}")
        return b""
    with stream.lock:
        # ``flushed_rows`` counts the rows already visible: the next flush starts there.
        if offset >= stream.next_offset:
            context.set_code(grpc.StatusCode.OUT_OF_RANGE)
            context.set_details(
                f"Offset {offset} is beyond the end of the stream Entity: {stream.name}"
            )
            return b""
        if offset < stream.flushed_rows:
            context.set_code(grpc.StatusCode.ALREADY_EXISTS)
            context.set_details(
                f"Offset {offset} is already flushed (rows up to {stream.flushed_rows - 1})"
                f" Entity: {stream.name}"
            )
            return b""
        rows = pa.concat_tables(stream.buffer).slice(
            stream.flushed_rows, offset + 1 - stream.flushed_rows
        )
        handler._flush_to_target(stream, rows)
        stream.flushed_rows = offset + 1
    return bytes(types.FlushRowsResponse.serialize(types.FlushRowsResponse(offset=offset)))


#: What FlushRows on a finalized BUFFERED stream may answer (see the module docstring).
FINALIZED_FLUSH_ANSWERS = ("invalid_argument", "failed_precondition", "flush")
#: The answer in force: one of FINALIZED_FLUSH_ANSWERS.
_finalized_flush = [os.environ.get("PYFLINK_GCP_BQ_FINALIZED_FLUSH", "invalid_argument")]


def _set_finalized_flush(answer: str) -> dict[str, str]:
    """The control route: FlushRows on a finalized stream answers ``answer`` from now on."""
    from bqemulator.domain.errors import ValidationError

    if answer not in FINALIZED_FLUSH_ANSWERS:
        raise ValidationError(
            f"finalized-flush answer {answer!r} is not one of {FINALIZED_FLUSH_ANSWERS}"
        )
    _finalized_flush[0] = answer
    return {"finalizedFlush": answer}


def _finalized_flush_answer(stream: Any) -> tuple[Any, str] | None:
    """The refusal of FlushRows on a finalized stream (see the module docstring); None when the
    stream is open or the chosen answer is to flush."""
    import grpc
    from bqemulator.streaming.write_stream import WriteStreamState

    if stream.state is not WriteStreamState.FINALIZED:
        return None
    answer = _finalized_flush[0]
    if answer == "flush":
        return None
    code = (
        grpc.StatusCode.FAILED_PRECONDITION
        if answer == "failed_precondition"
        else grpc.StatusCode.INVALID_ARGUMENT
    )
    return code, f"Stream has been finalized and cannot be appended. Entity: {stream.name}"


#: BigQuery's multi-region locations, where jobs are found without naming the location.
_MULTI_REGIONS = frozenset({"US", "EU"})


def _located_jobs_get(raw: Callable[..., dict[str, Any]], ctx_type: Any) -> Callable[..., Any]:
    """Wraps jobs.get so that a job in a single-region dataset is found only with its location.

    The job's location is its destination dataset's (load and copy jobs, and queries with a
    destination table); a job without one is found as before.
    """
    from bqemulator.domain.errors import ResourceRef, resource_not_found

    def get_job(
        project_id: str, job_id: str, ctx: ctx_type, location: str | None = None
    ) -> dict[str, Any]:
        meta = ctx.catalog.get_job(project_id, job_id)
        where = _job_location(ctx, meta) if meta is not None else None
        single_region = where is not None and where.upper() not in _MULTI_REGIONS
        if single_region and (location or "").lower() != str(where).lower():
            raise resource_not_found(ResourceRef("job", project_id, resource_id=job_id))
        return raw(project_id, job_id, ctx)

    # FastAPI reads the parameters from the annotations: objects, not this module's strings.
    get_job.__annotations__ = {
        "project_id": str,
        "job_id": str,
        "ctx": ctx_type,
        "location": str | None,
        "return": dict[str, Any],
    }
    return get_job


def _job_location(ctx: Any, meta: Any) -> str | None:
    config = meta.configuration or {}
    for kind in ("load", "copy", "query"):
        table = (config.get(kind) or {}).get("destinationTable")
        if isinstance(table, dict) and table.get("datasetId"):
            dataset = ctx.catalog.get_dataset(
                table.get("projectId") or meta.project_id, table["datasetId"]
            )
            return getattr(dataset, "location", None) if dataset is not None else None
    return None


_InsertJob = Callable[[str, Any, Any, Any], Awaitable[dict[str, Any]]]


def _load_into_partition(body: Any) -> None:
    """A load job into a partition (``t$20251202``) loads into its table, as BigQuery does for
    the rows of that partition; bqemulator refused the decorator ("Invalid table id for SQL").
    The rows are not checked against the partition, which BigQuery does for a column-partitioned
    table. The request's cached body is changed in place, so the emulator reads the table."""
    load = ((body or {}).get("configuration") or {}).get("load") if isinstance(body, dict) else None
    table = load.get("destinationTable") if isinstance(load, dict) else None
    if isinstance(table, dict) and "$" in str(table.get("tableId", "")):
        table["tableId"] = str(table["tableId"]).split("$", 1)[0]


def _unique_job_ids(raw: _InsertJob) -> _InsertJob:
    """Wraps the jobs.insert endpoint so that an existing job id answers 409 and runs nothing.

    The id is claimed before the job runs and checked with no ``await`` in between, so two
    concurrent inserts of one id (on the one event loop) run it once. An insert the emulator
    rejects (a 400 before the job runs) stores no job and leaves the id free, as before.
    """
    from bqemulator.domain.errors import AlreadyExistsError, ErrorDetail

    running: set[tuple[str, str]] = set()

    @functools.wraps(raw)  # FastAPI reads the parameters and their types through __wrapped__.
    async def insert_job(project_id: str, request: Any, ctx: Any, caller: Any) -> dict[str, Any]:
        body = await request.json()  # Starlette caches it for the emulator's own read.
        _load_into_partition(body)
        reference = body.get("jobReference") if isinstance(body, dict) else None
        if not isinstance(reference, dict) or not reference.get("jobId"):
            return await raw(project_id, request, ctx, caller)
        job_id = str(reference["jobId"])
        key = (project_id, job_id)
        if key in running or ctx.catalog.get_job(project_id, job_id) is not None:
            location = reference.get("location") or "US"  # the emulator's only location
            message = f"Already Exists: Job {project_id}:{location}.{job_id}"
            raise AlreadyExistsError(
                message, details=[ErrorDetail(reason="duplicate", message=message)]
            )
        running.add(key)
        try:
            return await raw(project_id, request, ctx, caller)
        finally:
            running.discard(key)

    return insert_job


_UpdateTable = Callable[[str, str, str, Any, Any], Awaitable[dict[str, Any]]]
#: Schema updates that changed a table's columns, by ``project.dataset.table``: what tests
#: read (``GET /bigquery/v2/_pyflink-gcp/schema-updates``) to count a job's updates.
SCHEMA_UPDATES: dict[str, int] = {}


def _schema_updates() -> dict[str, int]:
    return dict(SCHEMA_UPDATES)


def _schema_updating(raw: _UpdateTable) -> _UpdateTable:
    """Wraps tables.patch and tables.update so that a schema update behaves as BigQuery's.

    The emulator changed the table's metadata only: its DuckDB table kept the old columns, so
    appends with the new ones failed. Columns the new schema adds at the top level are added to
    the DuckDB table too (a relaxed column needs nothing: the DuckDB table has no NOT NULL). And
    an ``If-Match`` etag other than the table's answers 412, as BigQuery does, so concurrent
    updates of one table (subtasks racing) meet the conflict they meet there. The check and the
    update hold one lock: handlers interleave at every ``await``, and two patches that both
    passed the check before either changed the table would both succeed, where BigQuery answers
    the second with 412.
    """
    import asyncio

    from bqemulator.storage.sql_identifiers import quoted_table_ref
    from bqemulator.storage.type_map import bq_schema_to_duckdb_columns
    from fastapi.responses import JSONResponse

    serialized = asyncio.Lock()

    @functools.wraps(raw)  # FastAPI reads the parameters and their types through __wrapped__.
    async def update_table(
        project_id: str, dataset_id: str, table_id: str, request: Any, ctx: Any
    ) -> Any:
        async with serialized:
            return await checked_update(project_id, dataset_id, table_id, request, ctx)

    async def checked_update(
        project_id: str, dataset_id: str, table_id: str, request: Any, ctx: Any
    ) -> Any:
        existing = ctx.catalog.get_table(project_id, dataset_id, table_id)
        expected = request.headers.get("if-match")
        if existing is not None and expected and expected.strip('"') != existing.etag.strip('"'):
            message = "Precondition check failed."
            return JSONResponse(
                status_code=412,
                content={
                    "error": {
                        "code": 412,
                        "message": message,
                        "errors": [{"message": message, "reason": "conditionNotMet"}],
                        "status": "FAILED_PRECONDITION",
                    }
                },
            )
        body = await request.json()  # Starlette caches it for the emulator's own read.
        result = await raw(project_id, dataset_id, table_id, request, ctx)
        fields = ((body or {}).get("schema") or {}).get("fields") if existing else None
        if fields:
            known = {f.name.lower() for f in existing.schema_.fields}
            added = [f for f in fields if str(f.get("name", "")).lower() not in known]
            before = [(f.name, f.mode) for f in existing.schema_.fields]
            after = ctx.catalog.get_table(project_id, dataset_id, table_id)
            if after is not None and before != [(f.name, f.mode) for f in after.schema_.fields]:
                key = f"{project_id}.{dataset_id}.{table_id}"
                SCHEMA_UPDATES[key] = SCHEMA_UPDATES.get(key, 0) + 1
            if added:
                ref = quoted_table_ref(project_id, dataset_id, table_id)
                async with ctx.engine.write_lock():
                    for name, dtype in bq_schema_to_duckdb_columns(added):
                        ctx.engine.execute(f'ALTER TABLE {ref} ADD COLUMN "{name}" {dtype}')
        return result

    return update_table


#: Table properties bqemulator's table model has no place for (it dropped them), kept by the
#: launcher per table from the create or patch that set them and returned by tables.get.
_EXTRA_PROPERTIES = ("rangePartitioning", "requirePartitionFilter", "encryptionConfiguration")
_TABLE_EXTRAS: dict[tuple[str, str, str], dict[str, Any]] = {}


def _patch_table_extras() -> None:
    """Keep a table's range partitioning, partition filter and KMS key, as BigQuery does."""
    from bqemulator.api.routes import tables

    raw_meta = tables._rest_to_table_meta
    raw_rest = tables._table_to_rest

    def meta(project_id: str, dataset_id: str, body: Any, clock: Any, existing: Any = None) -> Any:
        result = raw_meta(project_id, dataset_id, body, clock, existing)
        key = (project_id, dataset_id, result.table_id)
        kept = {} if existing is None else dict(_TABLE_EXTRAS.get(key, {}))
        kept.update({k: body[k] for k in _EXTRA_PROPERTIES if isinstance(body, dict) and k in body})
        _TABLE_EXTRAS[key] = kept
        return result

    def rest(table: Any) -> dict[str, Any]:
        body = raw_rest(table)
        body.update(_TABLE_EXTRAS.get((table.project_id, table.dataset_id, table.table_id), {}))
        return dict(body)

    tables._rest_to_table_meta = meta
    tables._table_to_rest = rest


def _patch() -> None:
    from bqemulator.api.routes import jobs
    from bqemulator.grpc_api import write_servicer
    from bqemulator.storage import engine
    from fastapi.routing import APIRoute

    cls = engine.DuckDBEngine
    raw_connection = cls.connection.fget
    raw_execute = cls.execute
    raw_fetch_arrow = cls.fetch_arrow

    def connection(self: Any) -> Any:
        return _SerialConnection(raw_connection(self))

    def execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _LOCK:
            raw_execute(self, *args, **kwargs)
        return connection(self)

    def fetch_arrow(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _LOCK:
            return raw_fetch_arrow(self, *args, **kwargs)

    # ``execute`` above goes through the raw connection inside ``raw_execute``.
    cls.connection = property(connection)  # type: ignore[assignment]
    cls.execute = execute  # type: ignore[method-assign]
    cls.fetch_arrow = fetch_arrow  # type: ignore[method-assign]

    handler = write_servicer.BigQueryWriteHandler
    raw_init = handler.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        raw_init(self, *args, **kwargs)
        self._write_lock = _LOCK

    handler.__init__ = init  # type: ignore[method-assign]

    raw_flush_rows = handler._handle_flush_rows

    def flush_rows(self: Any, request_bytes: bytes, context: Any) -> bytes:
        answer = _flush_buffered(self, request_bytes, context)
        return raw_flush_rows(self, request_bytes, context) if answer is None else answer

    handler._handle_flush_rows = flush_rows  # type: ignore[method-assign]
    _patch_rebinding(handler)

    # The app includes the router's routes when the server starts, after this patch.
    router = jobs.router
    path = f"{router.prefix}/projects/{{project_id}}/jobs"
    found = [
        r
        for r in router.routes
        if isinstance(r, APIRoute) and r.path == path and "POST" in r.methods
    ]
    if len(found) != 1:
        raise RuntimeError(f"bqemulator has {len(found)} POST {path} routes, expected 1")
    index = router.routes.index(found[0])
    del router.routes[index]
    router.add_api_route(
        path.removeprefix(router.prefix), _unique_job_ids(found[0].endpoint), methods=["POST"]
    )
    router.routes.insert(index, router.routes.pop())  # first match wins: keep its place
    _swap_route(
        router,
        "/projects/{project_id}/jobs/{job_id}",
        "GET",
        lambda endpoint: _located_jobs_get(endpoint, jobs._Ctx),
    )
    router.add_api_route(
        "/_pyflink-gcp/finalized-flush/{answer}", _set_finalized_flush, methods=["POST"]
    )
    router.add_api_route("/_pyflink-gcp/schema-updates", _schema_updates, methods=["GET"])

    from bqemulator.api.routes import tables

    table_path = "/projects/{project_id}/datasets/{dataset_id}/tables/{table_id}"
    for method in ("PATCH", "PUT"):
        _swap_route(tables.router, table_path, method, _schema_updating)

    _patch_table_extras()
    _patch_avro_time()
    _patch_grpc_threads()


def _swap_route(router: Any, path: str, method: str, wrap: Callable[[Any], Any]) -> None:
    """Put ``wrap(endpoint)`` in place of the emulator's endpoint, at the same position."""
    from fastapi.routing import APIRoute

    full = f"{router.prefix}{path}"
    found = [
        r
        for r in router.routes
        if isinstance(r, APIRoute) and r.path == full and method in r.methods
    ]
    if len(found) != 1:
        raise RuntimeError(f"bqemulator has {len(found)} {method} {full} routes, expected 1")
    index = router.routes.index(found[0])
    del router.routes[index]
    router.add_api_route(path, wrap(found[0].endpoint), methods=[method])
    router.routes.insert(index, router.routes.pop())


#: The AppendRows calls whose current request carries a writer schema other than the previous
#: request's (by id of the call's context; the handler and its request iterator see the same
#: context).
_FRESH: dict[int, bool] = {}


def _patch_rebinding(handler: Any) -> None:
    """Look a table up again when a request carries its writer schema.

    An AppendRows call binds to the table of its first request and keeps that table's schema
    until a request names another table. A connection shared by many tables and kept across
    checkpoints also sees a table dropped and re-created with other columns: BigQuery appends
    with the table's current schema, the emulator kept the old one and failed the insert. A
    client that looked the table up again sends another writer schema, so a request whose
    writer schema differs from the previous request's on the call re-binds.
    """
    from google.cloud.bigquery_storage_v1 import types

    request_type = types.AppendRowsRequest.pb()
    raw_handle = handler._handle_append_rows
    raw_ensure = handler._ensure_stream_bound

    def schema_of(data: bytes) -> bytes | None:
        request = request_type.FromString(data)
        if request.HasField("arrow_rows"):
            rows: Any = request.arrow_rows
        else:
            rows = request.proto_rows
        return rows.writer_schema.SerializeToString() if rows.HasField("writer_schema") else None

    def handle(self: Any, request_iterator: Any, context: Any) -> Any:
        key = id(context)

        def marked() -> Any:
            last = None
            for data in request_iterator:
                schema = schema_of(data)
                _FRESH[key] = schema is not None and last is not None and schema != last
                last = schema if schema is not None else last
                yield data

        try:
            yield from raw_handle(self, marked(), context)
        finally:
            _FRESH.pop(key, None)

    def ensure(self: Any, stream_name: str, bound: Any, context: Any) -> Any:
        return raw_ensure(self, stream_name, None if _FRESH.get(id(context)) else bound, context)

    handler._handle_append_rows = handle
    handler._ensure_stream_bound = ensure


#: Threads of the gRPC server for its synchronous handlers (AppendRows among them).
_GRPC_THREADS = 64


def _patch_grpc_threads() -> None:
    """Give the gRPC server a thread pool for its synchronous handlers.

    The emulator's ``grpc.aio`` server runs its synchronous handlers on the event loop's
    default executor (``min(32, cores + 4)`` threads, 6 on two cores), and an AppendRows stream
    holds its thread for as long as it is open: a seventh open stream got no answer until
    another one closed. BigQuery serves many concurrent connections per project (a quota in
    the thousands), and a sink's long-lived connections shared by all its tables must not
    starve each other here.
    """
    from concurrent.futures import ThreadPoolExecutor

    import grpc.aio

    raw_server = grpc.aio.server

    def server(*args: Any, **kwargs: Any) -> Any:
        if not args and kwargs.get("migration_thread_pool") is None:
            kwargs["migration_thread_pool"] = ThreadPoolExecutor(
                max_workers=_GRPC_THREADS, thread_name_prefix="bq-grpc"
            )
        return raw_server(*args, **kwargs)

    grpc.aio.server = server


def _patch_avro_time() -> None:
    """Avro ``time-micros``/``time-millis`` read as TIME in the emulator's decimal path.

    A file with a ``decimal`` column is read through fastavro into Arrow, whose type map knows
    no time logical types: a TIME column came out as int64 holding ``datetime.time`` values
    and the load failed. BigQuery loads both as TIME (``use_avro_logical_types``).
    """
    import pyarrow as pa
    from bqemulator.jobs import avro_reader

    raw_logical = avro_reader._avro_logical_to_arrow

    def logical(avro_type: dict[str, Any], name: str) -> Any:
        if name in {"time-micros", "time-millis"}:
            return pa.time64("us")
        return raw_logical(avro_type, name)

    avro_reader._avro_logical_to_arrow = logical


if __name__ == "__main__":
    _patch()
    from bqemulator.cli import main

    sys.argv[0] = "bqemulator"
    main()
