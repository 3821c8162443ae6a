"""Test helpers for BigQuery: clients on the emulators, datasets, read-back, and a gRPC recorder
that observes what the sink sends on the Storage Write API."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import grpc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import bigquery
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def bq_client(project: str) -> bigquery.Client:
    return bigquery.Client(
        project=project,
        credentials=AnonymousCredentials(),
        client_options=ClientOptions(api_endpoint="http://" + os.environ["BIGQUERY_EMULATOR_HOST"]),
    )


def make_dataset(project: str, prefix: str = "ds", location: str | None = None) -> str:
    """A fresh dataset (the sink creates tables, never datasets), in ``location`` if given."""
    client = bq_client(project)
    dataset = bigquery.Dataset(f"{project}.{unique(prefix)}")
    if location is not None:
        dataset.location = location
    dataset = client.create_dataset(dataset)
    client.close()
    return str(dataset.dataset_id)


def make_table(project: str, dataset: str, table: str, fields: list[Any]) -> None:
    client = bq_client(project)
    client.create_table(
        bigquery.Table(
            f"{project}.{dataset}.{table}",
            schema=[
                f if isinstance(f, bigquery.SchemaField) else bigquery.SchemaField(*f)
                for f in fields
            ],
        )
    )
    client.close()


def query(project: str, sql: str) -> list[dict[str, Any]]:
    client = bq_client(project)
    try:
        return [dict(row.items()) for row in client.query(sql).result()]
    finally:
        client.close()


def table_names(project: str, dataset: str) -> list[str]:
    client = bq_client(project)
    try:
        return sorted(t.table_id for t in client.list_tables(f"{project}.{dataset}"))
    finally:
        client.close()


# -- observing the Storage Write API --------------------------------------------------------


def decoder(descriptor_proto: Any) -> Any:
    """A message class for a writer schema sent by the sink."""
    package = f"decoder{uuid.uuid4().hex}"
    file_proto = descriptor_pb2.FileDescriptorProto(
        name=f"{package}.proto", package=package, syntax="proto2"
    )
    file_proto.message_type.add().CopyFrom(descriptor_proto)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName(f"{package}.{descriptor_proto.name}")
    )


class Event:
    """One request sent or one response received on an AppendRows connection."""

    __slots__ = ("kind", "connection", "table", "rows", "error", "seq", "format")

    def __init__(
        self,
        kind: str,
        connection: int,
        table: str,
        rows: list[dict[str, Any]],
        error: int,
        seq: int,
        format: str = "",
    ):
        self.format = format
        self.kind = kind
        self.connection = connection
        self.table = table
        self.rows = rows
        self.error = error
        self.seq = seq

    def __repr__(self) -> str:
        return f"Event({self.kind}, conn={self.connection}, {self.table}, {len(self.rows)} rows, error={self.error})"


class AppendRecorder(grpc.StreamStreamClientInterceptor):
    """Records every AppendRows request (decoded rows) and response, in the order they happen.

    A request is recorded when gRPC takes it from the sink to put it on the wire, a response when
    the sink receives it, so per connection the log is the order seen at the gRPC boundary.
    ``first_response_delay_s`` holds back each connection's first response (to let a sink that
    pipelines requests show it).

    It intercepts the connections a table holds on its own (synchronous channels); its
    :attr:`aio` twin, which logs here too, intercepts the shared connections (``grpc.aio``).
    Give the sink :meth:`interceptors`, both.
    """

    def __init__(self, first_response_delay_s: float = 0.0) -> None:
        self.events: list[Event] = []
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._seq = itertools.count()
        self.delay = first_response_delay_s

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("AppendRecorder only works in the test process")

    @property
    def aio(self) -> AioAppendRecorder:
        return AioAppendRecorder(self)

    def interceptors(self) -> tuple[Any, ...]:
        """What the writer factory's ``interceptors`` take to record every connection."""
        return (self, self.aio)

    def _sent(self, request: Any, connection: int, state: dict[str, Any]) -> None:
        pb = type(request).FromString(request.SerializeToString())
        if pb.HasField("arrow_rows"):
            rows = _arrow_rows(pb.arrow_rows)
            form = "arrow"
        else:
            if pb.proto_rows.HasField("writer_schema"):
                state["cls"] = decoder(pb.proto_rows.writer_schema.proto_descriptor)
            cls = state["cls"]
            rows = [_as_dict(cls.FromString(r)) for r in pb.proto_rows.rows.serialized_rows]
            form = "proto"
        table = pb.write_stream.split("/")[5]
        state["pending"].append(table)
        self._log(Event("send", connection, table, rows, 0, 0, form))

    def _received(self, response: Any, connection: int, state: dict[str, Any]) -> None:
        table = state["pending"].pop(0) if state["pending"] else "?"
        self._log(Event("recv", connection, table, [], int(response.error.code), 0))

    def _log(self, event: Event) -> None:
        with self._lock:
            event.seq = next(self._seq)
            self.events.append(event)

    def intercept_stream_stream(
        self, continuation: Any, details: Any, request_iterator: Any
    ) -> Any:
        connection = next(self._ids)
        state: dict[str, Any] = {"cls": None, "pending": []}
        recorder = self

        def requests() -> Any:
            for request in request_iterator:
                recorder._sent(request, connection, state)
                yield request

        call = continuation(details, requests())
        return _RecordingCall(call, connection, state, recorder)


class AioAppendRecorder(grpc.aio.StreamStreamClientInterceptor):
    """The ``grpc.aio`` face of an :class:`AppendRecorder`: it records the shared connections'
    requests and responses into that recorder (a connection's first response held back on the
    event loop, not by blocking it)."""

    def __init__(self, recorder: AppendRecorder) -> None:
        self.recorder = recorder

    async def intercept_stream_stream(
        self, continuation: Any, details: Any, request_iterator: Any
    ) -> Any:
        recorder = self.recorder
        connection = next(recorder._ids)
        state: dict[str, Any] = {"cls": None, "pending": []}

        async def requests() -> Any:
            async for request in request_iterator:
                recorder._sent(request, connection, state)
                yield request

        call = await continuation(details, requests())
        return _AioRecordingCall(call, connection, state, recorder)


class _AioRecordingCall(grpc.aio.StreamStreamCall):
    """The call an :class:`AioAppendRecorder` returns: the real one, its responses recorded.

    A call object rather than an async generator of responses: for a generator, grpc.aio wraps
    the call in a ``StreamStreamCallResponseIterator``, and closing any channel on the loop then
    fails ("Unrecognized call object") while that wrapper's status task is pending.
    """

    def __init__(
        self, call: Any, connection: int, state: dict[str, Any], recorder: AppendRecorder
    ) -> None:
        self._call = call
        self._cython_call = call._cython_call  # how grpc.aio tells the call's channel
        self._connection = connection
        self._state = state
        self._recorder = recorder
        self._first = True

    async def read(self) -> Any:
        response = await self._call.read()
        if response is grpc.aio.EOF:
            return response
        if self._first and self._recorder.delay:
            await asyncio.sleep(self._recorder.delay)
        self._first = False
        self._recorder._received(response, self._connection, self._state)
        return response

    async def _responses(self) -> Any:
        while (response := await self.read()) is not grpc.aio.EOF:
            yield response

    def __aiter__(self) -> Any:
        return self._responses()

    async def write(self, request: Any) -> None:
        await self._call.write(request)

    async def done_writing(self) -> None:
        await self._call.done_writing()

    @property
    def _done_writing_flag(self) -> bool:  # read by grpc.aio's intercepted write()
        return bool(self._call._done_writing_flag)

    def cancel(self) -> bool:
        return bool(self._call.cancel())

    def cancelled(self) -> bool:
        return bool(self._call.cancelled())

    def done(self) -> bool:
        return bool(self._call.done())

    def add_done_callback(self, callback: Any) -> None:
        self._call.add_done_callback(callback)

    def time_remaining(self) -> Any:
        return self._call.time_remaining()

    async def initial_metadata(self) -> Any:
        return await self._call.initial_metadata()

    async def trailing_metadata(self) -> Any:
        return await self._call.trailing_metadata()

    async def code(self) -> Any:
        return await self._call.code()

    async def details(self) -> Any:
        return await self._call.details()

    async def wait_for_connection(self) -> None:
        await self._call.wait_for_connection()


def _arrow_rows(data: Any) -> list[dict[str, Any]]:
    import pyarrow as pa

    stream = data.writer_schema.serialized_schema + data.rows.serialized_record_batch
    return [
        {k: v for k, v in row.items() if v is not None}
        for row in pa.ipc.open_stream(stream).read_all().to_pylist()
    ]


def _as_dict(message: Any) -> dict[str, Any]:
    return {f.name: v for f, v in message.ListFields()}


class _RecordingCall:
    def __init__(self, call: Any, connection: int, state: dict[str, Any], recorder: AppendRecorder):
        self._call = call
        self._connection = connection
        self._state = state
        self._recorder = recorder
        self._first = True

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> Any:
        response = next(self._call)
        if self._first and self._recorder.delay:
            time.sleep(self._recorder.delay)
        self._first = False
        self._recorder._received(response, self._connection, self._state)
        return response

    def cancel(self) -> bool:
        return bool(self._call.cancel())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._call, name)


class FileAppendRecorder(AppendRecorder):
    """An :class:`AppendRecorder` that travels into a Flink job and logs to a JSON-lines file.

    Each unpickled copy (one per sink subtask) logs under its own ``recorder`` id, so a test can
    tell the subtasks' connections apart.
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self.recorder = uuid.uuid4().hex[:8]

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    def _log(self, event: Event) -> None:
        import json

        with self._lock:
            event.seq = next(self._seq)
            line = {
                "recorder": self.recorder,
                "kind": event.kind,
                "connection": event.connection,
                "table": event.table,
                "rows": event.rows,
                "error": event.error,
                "seq": event.seq,
                "format": event.format,
            }
            with open(self.path, "a") as f:
                f.write(json.dumps(line, default=str) + "\n")


def read_events(path: str) -> list[dict[str, Any]]:
    import json

    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class DailyTables:
    """The resolver of the exactly-once jobs: ``events_<record["day"]>`` in one dataset."""

    def __init__(self, project: str, dataset: str) -> None:
        self.project = project
        self.dataset = dataset

    def __call__(self, record: dict[str, Any], ctx: Any) -> Any:
        from pyflink_gcp.bigquery import TableDestination

        return TableDestination.of(self.project, self.dataset, f"events_{record['day']}")


class ByRegion(DailyTables):
    """The resolver of the schema evolution tests: ``orders_<record["region"]>``."""

    def __call__(self, record: dict[str, Any], ctx: Any) -> Any:
        from pyflink_gcp.bigquery import TableDestination

        return TableDestination.of(self.project, self.dataset, f"orders_{record['region']}")


def ids_by_table(project: str, dataset: str) -> dict[str, Counter[int]]:
    """How often each ``id`` is in each table of the dataset."""
    return {
        table: Counter(
            row["id"] for row in query(project, f"SELECT id FROM `{project}.{dataset}.{table}`")
        )
        for table in table_names(project, dataset)
    }


@contextlib.contextmanager
def finalized_flush_answer(answer: str) -> Iterator[None]:
    """FlushRows on a finalized BUFFERED stream answers ``answer`` in the emulator meanwhile
    (``invalid_argument``, ``failed_precondition`` or ``flush``; the launcher's control route)."""
    base = f"http://{os.environ['BIGQUERY_EMULATOR_HOST']}/bigquery/v2/_pyflink-gcp/finalized-flush"

    def put(value: str) -> None:
        request = urllib.request.Request(f"{base}/{value}", method="POST", data=b"")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.load(response) == {"finalizedFlush": value}

    put(answer)
    try:
        yield
    finally:
        put("invalid_argument")


def schema_updates() -> dict[str, int]:
    """Schema updates that changed each table's columns so far, by ``project.dataset.table``
    (counted by the emulator launcher)."""
    url = f"http://{os.environ['BIGQUERY_EMULATOR_HOST']}/bigquery/v2/_pyflink-gcp/schema-updates"
    with urllib.request.urlopen(url, timeout=10) as response:
        return {str(k): int(v) for k, v in json.load(response).items()}
