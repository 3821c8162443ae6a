"""The pool of shared AppendRows connections against an in-process gRPC service (no
emulator): tables multiplexed on a bounded number of connections, answers routed to their
tables in order, a failed connection's requests re-sent by their tables, retirement."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest
from google.cloud.bigquery import SchemaField
from google.cloud.bigquery_storage_v1 import types

from pyflink_gcp.bigquery import TableDestination
from pyflink_gcp.bigquery.client import (
    AppendRowsRequest,
    PendingAppend,
    ProtoSchema,
    open_append_channel,
)
from pyflink_gcp.bigquery.connections import ConnectionPool, Lease, SharedConnection
from pyflink_gcp.bigquery.sender import Batch, TableSender
from pyflink_gcp.bigquery.tables import TableLayout
from pyflink_gcp.core.aio import LOOP_THREAD_NAME, LoopTasks
from pyflink_gcp.core.endpoints import Endpoint
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.core.status import StatusError

Response = types.AppendRowsResponse.pb()
SCHEMA = [SchemaField("id", "INT64")]
_ROUTING = "x-goog-request-params"


class Backend:
    """A multiplexing AppendRows service on a local port: answers each request in order on its
    call, after ``latency_s``; ``break_after`` requests in all, the call that receives the next
    one fails UNAVAILABLE (once). Records every request with its call."""

    def __init__(
        self, latency_s: float = 0.0, break_after: int | None = None, answer_twice: bool = False
    ) -> None:
        self.latency_s = latency_s
        self.break_after = break_after
        #: Answer every request twice (a service gone wrong).
        self.answer_twice = answer_twice
        self.calls: list[_Call] = []
        self.requests: list[tuple[int, Any]] = []
        self.channels = 0
        self._lock = threading.Lock()
        self._server = grpc.server(ThreadPoolExecutor(32, thread_name_prefix="backend"))
        handler = grpc.method_handlers_generic_handler(
            "google.cloud.bigquery.storage.v1.BigQueryWrite",
            {
                "AppendRows": grpc.stream_stream_rpc_method_handler(
                    self._serve,
                    request_deserializer=AppendRowsRequest.FromString,
                    response_serializer=Response.SerializeToString,
                )
            },
        )
        self._server.add_generic_rpc_handlers((handler,))
        port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        self.endpoint = Endpoint(f"127.0.0.1:{port}", True)

    def open_loop(self) -> LoopTasks:
        """What runs a pool's connections: the process's event loop, as the writer opens it."""
        return LoopTasks()

    def open_channel(self) -> Any:
        """A pool's channel (on the loop, as the pool opens it)."""
        self.channels += 1
        return open_append_channel(self.endpoint)

    def call(self, index: int) -> _Call:
        """The ``index``-th call, once the service has received it."""
        deadline = time.monotonic() + 10
        while len(self.calls) <= index:
            assert time.monotonic() < deadline, f"no call {index}"
            time.sleep(0.005)
        return self.calls[index]

    def _serve(self, requests: Any, context: grpc.ServicerContext) -> Any:
        with self._lock:
            call = _Call(len(self.calls), context)
            self.calls.append(call)
        for request in requests:
            time.sleep(self.latency_s)
            with self._lock:
                self.requests.append((call.index, request))
                broken = self.break_after is not None and len(self.requests) > self.break_after
                if broken:
                    self.break_after = None
            if broken:
                context.abort(grpc.StatusCode.UNAVAILABLE, "connection reset")
            yield Response(write_stream=request.write_stream)
            if self.answer_twice:
                yield Response(write_stream=request.write_stream)

    def stop(self) -> None:
        self._server.stop(None)


class _Call:
    def __init__(self, index: int, context: grpc.ServicerContext) -> None:
        self.index = index
        self.metadata = tuple((k, v) for k, v in context.invocation_metadata() if k == _ROUTING)
        self.ended = threading.Event()
        context.add_callback(self.ended.set)


@pytest.fixture
def service() -> Any:
    made: list[Backend] = []

    def make(**kw: Any) -> Backend:
        made.append(Backend(**kw))
        return made[-1]

    yield make
    for b in made:
        b.stop()


def stream(table: str) -> str:
    return f"projects/p/datasets/d/tables/{table}/streams/_default"


def request(table: str, schema: Any) -> PendingAppend:
    return PendingAppend(stream(table), schema, rows=[b"\x08\x01"])


def pool(backend: Backend, channels: int = 2, timeout_s: float = 30.0) -> ConnectionPool:
    """A pool on ``backend`` (``grpc.aio`` channels, as the writer opens them)."""
    return ConnectionPool(
        backend.open_loop(), backend.open_channel, channel_count=channels, timeout_s=timeout_s
    )


SCHEMA_A = ProtoSchema()
SCHEMA_A.proto_descriptor.name = "A"
SCHEMA_B = ProtoSchema()
SCHEMA_B.proto_descriptor.name = "B"


def test_tables_share_a_connection_and_each_gets_its_own_answers_in_order(service: Any) -> None:
    backend = service()
    p = pool(backend, channels=1)
    a = p.acquire(stream("a"), "p", None)
    b = p.acquire(stream("b"), "p", None)
    assert a.connection is b.connection
    for lease, table, schema in [
        (a, "a", SCHEMA_A),
        (a, "a", SCHEMA_A),
        (b, "b", SCHEMA_B),
        (a, "a", SCHEMA_A),
    ]:
        lease.send(request(table, schema))
    assert [a.receive().write_stream for _ in range(3)] == [stream("a")] * 3
    assert b.receive().write_stream == stream("b")
    # One call carried both tables' requests, each naming its stream, in the order sent.
    assert [(c, r.write_stream.split("/")[5]) for c, r in backend.requests] == [
        (0, "a"),
        (0, "a"),
        (0, "b"),
        (0, "a"),
    ]
    assert p.connections_opened == 1 and backend.channels == 1
    # Without a known location the routing header names the first table's stream.
    assert backend.call(0).metadata == (("x-goog-request-params", f"write_stream={stream('a')}"),)
    a.close()
    b.close()
    p.close()


class _Counted(PendingAppend):
    """Records where its message was built."""

    __slots__ = ("built_on",)

    def build(self) -> Any:
        self.built_on = threading.current_thread().name
        return super().build()


def test_a_request_is_built_on_the_loop_as_it_is_written_not_when_it_is_sent(
    service: Any,
) -> None:
    """10,000 tables' requests queued at a flush hold their parts, not 10,000 messages."""
    backend = service()
    p = pool(backend, channels=1)
    lease = p.acquire(stream("a"), "p", None)
    sent = [_Counted(stream("a"), SCHEMA_A, rows=[b"\x08\x01"]) for _ in range(3)]
    for pending in sent:
        lease.send(pending)
    for _ in sent:
        lease.receive()
    assert [pending.built_on for pending in sent] == [LOOP_THREAD_NAME] * 3
    # What the service read is the message built from the parts.
    assert [r.write_stream for _, r in backend.requests] == [stream("a")] * 3
    assert all(r.proto_rows.writer_schema == SCHEMA_A for _, r in backend.requests)
    lease.close()
    p.close()


def test_a_located_table_routes_by_location_and_locations_do_not_share(service: Any) -> None:
    backend = service()
    p = pool(backend, channels=1)
    eu = p.acquire(stream("a"), "p", "EU")
    us = p.acquire(stream("b"), "p", "US")
    assert eu.connection is not us.connection
    # Two calls, each routed to its location (in whichever order they reached the service).
    assert {backend.call(0).metadata, backend.call(1).metadata} == {
        (("x-goog-request-params", "write_location=projects/p/locations/EU"),),
        (("x-goog-request-params", "write_location=projects/p/locations/US"),),
    }
    p.close()


def test_a_new_connection_only_while_all_are_in_use_and_never_above_the_count(service: Any) -> None:
    backend = service(latency_s=0.05)
    p = pool(backend, channels=2)
    first = p.acquire(stream("a"), "p", None)
    first.close()
    # An idle connection takes the next table.
    first = p.acquire(stream("b"), "p", None)
    assert p.connections_opened == 1
    first.send(request("b", SCHEMA_A))
    second = p.acquire(stream("c"), "p", None)
    assert second.connection is not first.connection
    first.send(request("b", SCHEMA_A))
    # At the count: the least loaded one.
    assert p.acquire(stream("d"), "p", None).connection is second.connection
    assert p.connections_opened == 2 and p.channels == 2
    p.close()


def test_a_failed_connection_fails_every_waiting_lease_and_is_replaced_on_its_channel(
    service: Any,
) -> None:
    backend = service(latency_s=0.01, break_after=2)
    p = pool(backend, channels=1)
    a = p.acquire(stream("a"), "p", None)
    b = p.acquire(stream("b"), "p", None)
    for _ in range(2):
        a.send(request("a", SCHEMA_A))
        b.send(request("b", SCHEMA_B))
    a.receive()
    b.receive()
    for lease in (a, b):
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            lease.receive()
        assert failed.value.code() is grpc.StatusCode.UNAVAILABLE
    a.close()
    b.close()
    again = p.acquire(stream("a"), "p", None)
    assert again.connection is not a.connection
    assert p.connections_opened == 2 and backend.channels == 1
    p.close()


def test_a_retiring_connection_takes_no_lease_and_closes_with_its_last_one(service: Any) -> None:
    backend = service()
    p = pool(backend, channels=1, timeout_s=0.2)  # retires after 0.1 s
    old = p.acquire(stream("a"), "p", None)
    time.sleep(0.15)
    assert old.retiring
    new = p.acquire(stream("b"), "p", None)
    assert new.connection is not old.connection and backend.channels == 1
    assert not backend.call(0).ended.is_set()
    old.close()
    assert backend.call(0).ended.wait(5)
    p.close()


def _sender(table: str, p: ConnectionPool, **kw: Any) -> TableSender:
    destination = TableDestination.of("p", "d", table)
    return TableSender(
        destination,
        TableLayout.of(SCHEMA),
        sink_name="test-sink",
        stub=None,
        retry=RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.01, deadline_s=5.0),
        max_in_flight=kw.pop("max_in_flight", 2),
        max_request_bytes=100_000,
        connection_timeout_s=30.0,
        connect=lambda name, layout, on_answer: p.acquire(name, "p", layout.location, on_answer),
    )


def test_table_senders_through_a_pool_lose_nothing_when_a_connection_breaks(service: Any) -> None:
    # Eight tables on two connections; one connection breaks mid-way: each table re-sends its
    # own unanswered requests and every row lands exactly once per answer.
    backend = service(latency_s=0.002, break_after=15)
    p = pool(backend, channels=2)
    senders = [_sender(f"t{i}", p) for i in range(8)]
    for n in range(5):
        for i, s in enumerate(senders):
            s.submit(Batch(None, [{"id": i * 100 + n}], [n], False))
    for s in senders:
        assert s.settle() == []
    assert [s.rows_appended for s in senders] == [5] * 8
    assert p.connections_opened <= 3 and backend.channels == 2
    tables = {r.write_stream.split("/")[5] for _, r in backend.requests}
    assert tables == {f"t{i}" for i in range(8)}
    # A call carried requests of more than one table.
    per_call: dict[int, set[str]] = {}
    for call, r in backend.requests:
        per_call.setdefault(call, set()).add(r.write_stream)
    assert max(len(v) for v in per_call.values()) > 1
    p.close()


def test_thousands_of_tables_cost_no_thread_each_answers_settle_by_callback(service: Any) -> None:
    # A hundred tables with a request each in flight on two connections: the only threads the
    # pool adds are its channels' event loops, not the tables'; each answer is settled by its
    # lease's callback, with no settle waiting.
    backend = service(latency_s=0.002)
    p = pool(backend, channels=2)
    senders = [_sender(f"t{i}", p) for i in range(100)]
    before = {t.ident for t in threading.enumerate()}
    for i, s in enumerate(senders):
        s.submit(Batch(None, [{"id": i}], [i], False))
    added = [
        t.name
        for t in threading.enumerate()
        if t.ident not in before
        and not t.name.startswith("backend")
        and "_poll_wrapper" not in t.name  # grpc.aio's poller, once per process
    ]
    deadline = time.monotonic() + 10
    while sum(s.rows_appended for s in senders) < 100:
        assert time.monotonic() < deadline, "answers were not settled"
        time.sleep(0.005)
    # At most the process's event-loop thread, which every channel shares.
    assert added in ([], [LOOP_THREAD_NAME]), added
    assert p.connections_opened <= 4
    assert all(s.settle() == [] and s.is_idle for s in senders)
    p.close()


class _RefusingCall:
    """A call whose reads wait for answers and whose writes raise, as a write fails that is
    not the call's failure (an interceptor's bug, say)."""

    def __init__(self) -> None:
        self.cancelled = asyncio.Event()

    async def write(self, request: Any) -> None:
        raise AttributeError("the interceptor's call has no _done_writing_flag")

    async def read(self) -> Any:
        await self.cancelled.wait()
        raise asyncio.CancelledError

    def cancel(self) -> bool:
        self.cancelled.set()
        return True


def test_a_write_that_fails_ends_its_connection_rather_than_leave_it_waiting(
    service: Any,
) -> None:
    # The lease waiting on the connection receives the write's error at once, instead of
    # waiting until the call's deadline for an answer that never comes.
    backend = service()
    loop = backend.open_loop()
    p = ConnectionPool(loop, backend.open_channel, channel_count=1, timeout_s=30.0)
    # A slot whose channel is open, with the refusing call as its AppendRows method.
    slot: list[Any] = [None, lambda **_: _RefusingCall(), None]
    connection = SharedConnection(loop, slot, "write_stream=s", 30.0, p)
    connection.leases += 1
    lease = Lease(connection)
    lease.send(request("a", SCHEMA_A))
    connection.start()
    with pytest.raises(AttributeError, match="_done_writing_flag"):
        lease.receive()
    p.close()


def test_a_connection_that_ends_before_its_start_returns_does_not_deadlock_the_pool(
    service: Any,
) -> None:
    # A call can end before the thread that started it adds its done-callback (a refused
    # endpoint fails at once); the callback then runs on that thread, and takes the pool's
    # lock. Started under that lock, the thread waited for itself for ever. Work started on a
    # closed loop ends at once, the same way.
    backend = service()
    p = pool(backend, channels=1)
    p._loop.close()
    leased: list[Any] = []
    thread = threading.Thread(
        target=lambda: leased.append(p.acquire(stream("a"), "p", "us")), daemon=True
    )
    thread.start()
    thread.join(10)
    assert leased, "acquire deadlocked on the pool's lock"
    lease = leased[0]
    lease.send(request("a", SCHEMA_A))
    with pytest.raises(grpc.aio.AioRpcError, match="closed"):
        lease.receive()
    lease.close()
    p.close()


def test_a_lease_never_waits_for_the_loop_even_when_it_needs_a_new_channel(
    service: Any,
) -> None:
    # Work on the loop takes leases (a table's answer sends its next request): a thread that
    # held the pool's lock while it waited for the loop to open a channel stopped the loop.
    # Here the loop is busy while a lease needs a new channel: the lease comes at once, and
    # its channel opens when the loop is free.
    backend = service()
    p = pool(backend, channels=2)
    loop = p._loop
    busy, free = threading.Event(), threading.Event()

    async def hold_the_loop() -> None:
        busy.set()
        free.wait(10)  # blocks the loop thread, as a long callback would

    held = loop.start(hold_the_loop)
    assert busy.wait(5)
    started = time.monotonic()
    a = p.acquire(stream("a"), "p", None)
    a.send(request("a", SCHEMA_A))
    assert time.monotonic() - started < 1.0
    assert backend.channels == 0  # not opened yet: the loop opens it
    free.set()
    held.result(timeout=5)
    assert a.receive().write_stream == stream("a")
    assert backend.channels == 1
    a.close()
    p.close()


def test_an_answer_nobody_waits_for_fails_the_connection_and_ends_its_call(service: Any) -> None:
    backend = service(answer_twice=True)
    p = pool(backend, channels=1)
    a = p.acquire(stream("a"), "p", None)
    a.send(request("a", SCHEMA_A))
    assert a.receive().write_stream == stream("a")
    # The second answer to the one request: the connection fails, and its call is ended
    # rather than left open until its deadline.
    assert backend.call(0).ended.wait(5)
    assert a.retiring
    a.send(request("a", SCHEMA_A))
    with pytest.raises(StatusError, match="nobody waits for"):
        a.receive()
    p.close()
