"""The pool of shared AppendRows connections against a scripted stub (no emulator): tables
multiplexed on a bounded number of connections, answers routed to their tables in order, a
failed connection's requests re-sent by their tables, retirement."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import grpc
import pytest
from google.cloud.bigquery import SchemaField
from google.cloud.bigquery_storage_v1 import types

from pyflink_gcp.bigquery import TableDestination
from pyflink_gcp.bigquery.client import AppendRowsRequest, ProtoSchema
from pyflink_gcp.bigquery.connections import ConnectionPool
from pyflink_gcp.bigquery.sender import Batch, TableSender
from pyflink_gcp.bigquery.tables import TableLayout
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.core.status import StatusError

Response = types.AppendRowsResponse.pb()
SCHEMA = [SchemaField("id", "INT64")]


class Unavailable(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def __str__(self) -> str:
        return "connection reset"


class Backend:
    """A multiplexing AppendRows service: answers each request in order on its call, after
    ``latency_s``; ``break_after`` requests in all, the call that receives the next one fails
    (once). Records every request with its call."""

    def __init__(self, latency_s: float = 0.0, break_after: int | None = None) -> None:
        self.latency_s = latency_s
        self.break_after = break_after
        self.calls: list[_Call] = []
        self.requests: list[tuple[int, Any]] = []
        self.channels = 0
        self._lock = threading.Lock()

    def open_channel(self) -> Any:
        self.channels += 1
        return _Channel(self)

    def answer(self, call: _Call, request: Any) -> Any:
        with self._lock:
            self.requests.append((call.index, request))
            if self.break_after is not None and len(self.requests) > self.break_after:
                self.break_after = None
                return Unavailable()
        return Response(write_stream=request.write_stream)


class _Channel:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.closed = False

    def stream_stream(self, method: str, **kw: Any) -> Any:
        def stub(requests: Any, metadata: Any = None, timeout: Any = None) -> _Call:
            call = _Call(self.backend, requests, metadata, len(self.backend.calls))
            self.backend.calls.append(call)
            return call

        return stub

    def close(self) -> None:
        self.closed = True


class _Call:
    def __init__(self, backend: Backend, requests: Any, metadata: Any, index: int) -> None:
        self.metadata = metadata
        self.index = index
        self.cancelled = False
        self._answers: queue.SimpleQueue[Any] = queue.SimpleQueue()

        def serve() -> None:
            for request in requests:
                time.sleep(backend.latency_s)
                answer = backend.answer(self, request)
                self._answers.put(answer)
                if isinstance(answer, Exception):
                    return
            self._answers.put(StopIteration())

        threading.Thread(target=serve, daemon=True).start()

    def __iter__(self) -> _Call:
        return self

    def __next__(self) -> Any:
        answer = self._answers.get()
        if isinstance(answer, StopIteration):
            raise StopIteration
        if isinstance(answer, Exception):
            raise answer
        return answer

    def cancel(self) -> bool:
        if not self.cancelled:
            self.cancelled = True  # as gRPC does, the next read raises CANCELLED
            self._answers.put(StatusError(grpc.StatusCode.CANCELLED, "cancelled"))
        return True


def stream(table: str) -> str:
    return f"projects/p/datasets/d/tables/{table}/streams/_default"


def request(table: str, schema: Any) -> Any:
    r = AppendRowsRequest(write_stream=stream(table))
    r.proto_rows.writer_schema.CopyFrom(schema)
    r.proto_rows.rows.serialized_rows.append(b"\x08\x01")
    return r


def pool(backend: Backend, channels: int = 2, timeout_s: float = 30.0) -> ConnectionPool:
    return ConnectionPool(backend.open_channel, channel_count=channels, timeout_s=timeout_s)


SCHEMA_A = ProtoSchema()
SCHEMA_A.proto_descriptor.name = "A"
SCHEMA_B = ProtoSchema()
SCHEMA_B.proto_descriptor.name = "B"


def test_tables_share_a_connection_and_each_gets_its_own_answers_in_order() -> None:
    backend = Backend()
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
    assert backend.calls[0].metadata == (("x-goog-request-params", f"write_stream={stream('a')}"),)
    a.close()
    b.close()
    p.close()


def test_a_located_table_routes_by_location_and_locations_do_not_share() -> None:
    backend = Backend()
    p = pool(backend, channels=1)
    eu = p.acquire(stream("a"), "p", "EU")
    us = p.acquire(stream("b"), "p", "US")
    assert eu.connection is not us.connection
    assert backend.calls[0].metadata == (
        ("x-goog-request-params", "write_location=projects/p/locations/EU"),
    )
    p.close()


def test_a_new_connection_only_while_all_are_in_use_and_never_above_the_count() -> None:
    backend = Backend(latency_s=0.05)
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


def test_a_failed_connection_fails_every_waiting_lease_and_is_replaced_on_its_channel() -> None:
    backend = Backend(latency_s=0.01, break_after=2)
    p = pool(backend, channels=1)
    a = p.acquire(stream("a"), "p", None)
    b = p.acquire(stream("b"), "p", None)
    for _ in range(2):
        a.send(request("a", SCHEMA_A))
        b.send(request("b", SCHEMA_B))
    a.receive()
    b.receive()
    with pytest.raises(Unavailable):
        a.receive()
    with pytest.raises(Unavailable):
        b.receive()
    a.close()
    b.close()
    again = p.acquire(stream("a"), "p", None)
    assert again.connection is not a.connection
    assert p.connections_opened == 2 and backend.channels == 1
    p.close()


def test_a_retiring_connection_takes_no_lease_and_closes_with_its_last_one() -> None:
    backend = Backend()
    p = pool(backend, channels=1, timeout_s=0.2)  # retires after 0.1 s
    old = p.acquire(stream("a"), "p", None)
    time.sleep(0.15)
    assert old.retiring
    new = p.acquire(stream("b"), "p", None)
    assert new.connection is not old.connection and backend.channels == 1
    assert not backend.calls[0].cancelled
    old.close()
    assert backend.calls[0].cancelled
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


def test_table_senders_through_a_pool_lose_nothing_when_a_connection_breaks() -> None:
    # Eight tables on two connections; one connection breaks mid-way: each table re-sends its
    # own unanswered requests and every row lands exactly once per answer.
    backend = Backend(latency_s=0.002, break_after=15)
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


def test_thousands_of_tables_cost_no_thread_each_answers_settle_by_callback() -> None:
    # A hundred tables with a request each in flight on two connections: the threads are the
    # connections' (a reader, and the fake service's), not the tables'; each answer is
    # settled by its lease's callback, with no settle waiting.
    backend = Backend(latency_s=0.002)
    p = pool(backend, channels=2)
    senders = [_sender(f"t{i}", p) for i in range(100)]
    before = threading.active_count()
    for i, s in enumerate(senders):
        s.submit(Batch(None, [{"id": i}], [i], False))
    during = threading.active_count()
    deadline = time.monotonic() + 10
    while sum(s.rows_appended for s in senders) < 100:
        assert time.monotonic() < deadline, "answers were not settled"
        time.sleep(0.005)
    assert during - before <= 2 * p.connections_opened + 1
    assert p.connections_opened <= 4
    assert all(s.settle() == [] and s.is_idle for s in senders)
    p.close()
