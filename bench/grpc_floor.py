"""The client CPU of a bare gRPC call in Python, without the sinks: the floor under a sink's
cost per destination when each destination takes a call of its own.

    python bench/grpc_floor.py [--calls 10000] [--in-flight 64] [--entries 5] [--busy]

At thousands of destinations with a few records each, a sink's cost per destination is its
calls: Bigtable's MutateRows (a server-streaming call on the subtask's ``grpc.aio`` channel),
BigQuery's ``GetWriteStream`` (the table's schema; a unary call on the sink's ``grpc.aio``
lookup channel, here also as a future of a synchronous channel, as the sink made it before) and
its AppendRows requests (of many tables on one shared bidirectional stream; on a ``grpc.aio``
stream as the sink makes them, and on a synchronous one with a request-iterator thread and a
reader thread, as it made them before). ``--busy`` needs patience: beside a busy thread each
request of the synchronous stream waits for the GIL, so use ``--calls 3000`` with it.

This makes ``--calls`` such calls against the null backend (bench/nullbackend/), each to a table
of its own, at most ``--in-flight`` at a time, as the sinks do, with nothing of pyflink-gcp in
between, and prints this process's CPU (all threads) per call. ``bench/sink_cpu.py`` gives the
sinks' own cost per destination to set beside it.

``--busy`` makes the calls beside a Python thread that computes without pause, as a worker's
processing thread does while the sink's calls complete on other threads: the calls must take
the GIL from it. That thread's own CPU is left out of the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._nullbackend import running
from bench.scale import configure

_STREAM = "projects/bench-project/datasets/bench/tables/t{:05d}/streams/_default"
_TABLE = "projects/bench-project/instances/bench/tables/t{:05d}"


def get_write_stream(host: str, calls: int, in_flight: int) -> float:
    """CPU seconds of ``calls`` GetWriteStream unary futures (the FULL view)."""
    import grpc
    from google.cloud.bigquery_storage_v1 import types

    request = types.GetWriteStreamRequest.pb()
    stream = types.WriteStream.pb()
    full = int(types.WriteStreamView.FULL)
    channel = grpc.insecure_channel(host)
    get = channel.unary_unary(
        "/google.cloud.bigquery.storage.v1.BigQueryWrite/GetWriteStream",
        request_serializer=request.SerializeToString,
        response_deserializer=stream.FromString,
    )
    get(request(name=_STREAM.format(0), view=full), timeout=10)  # the channel connected
    slots = threading.Semaphore(in_flight)
    done = threading.Semaphore(0)

    def answered(call: grpc.Future) -> None:
        call.result()
        slots.release()
        done.release()

    start = time.process_time()
    for i in range(calls):
        slots.acquire()
        name = _STREAM.format(i)
        get.future(
            request(name=name, view=full),
            timeout=10,
            metadata=(("x-goog-request-params", f"name={name}"),),
        ).add_done_callback(answered)
    for _ in range(calls):
        done.acquire()
    spent = time.process_time() - start
    channel.close()
    return spent


def get_write_stream_aio(host: str, calls: int, in_flight: int) -> float:
    """CPU seconds of ``calls`` GetWriteStream unary calls on a ``grpc.aio`` channel, its event
    loop on a thread of its own as the sink's lookup channel is."""
    import grpc
    from google.cloud.bigquery_storage_v1 import types

    request = types.GetWriteStreamRequest.pb()
    stream = types.WriteStream.pb()
    full = int(types.WriteStreamView.FULL)

    async def run() -> float:
        channel = grpc.aio.insecure_channel(host)
        get: Callable[..., Any] = channel.unary_unary(
            "/google.cloud.bigquery.storage.v1.BigQueryWrite/GetWriteStream",
            request_serializer=request.SerializeToString,
            response_deserializer=stream.FromString,
        )
        await get(request(name=_STREAM.format(0), view=full), timeout=10)  # connected
        slots = asyncio.Semaphore(in_flight)

        async def one(i: int) -> None:
            async with slots:
                name = _STREAM.format(i)
                await get(
                    request(name=name, view=full),
                    timeout=10,
                    metadata=(("x-goog-request-params", f"name={name}"),),
                )

        start = time.process_time()
        await asyncio.gather(*(one(i) for i in range(calls)))
        spent = time.process_time() - start
        await channel.close()
        return spent

    return _on_a_thread(lambda: asyncio.run(run()))


def _on_a_thread(work: Callable[[], float]) -> float:
    """``work()`` on a thread of its own (the sinks' loops are not the main thread)."""
    out: list[float] = []
    thread = threading.Thread(target=lambda: out.append(work()))
    thread.start()
    thread.join()
    return out[0]


def beside_a_busy_thread(work: Callable[[], float]) -> float:
    """``work()``'s CPU seconds while another Python thread computes without pause, less that
    thread's own CPU."""
    stop = threading.Event()
    spent: list[float] = []

    def spin() -> None:
        started, x = time.thread_time(), 0
        while not stop.is_set():
            for _ in range(200):
                x += 1
        spent.append(time.thread_time() - started)

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        total = work()
    finally:
        stop.set()
        spinner.join()
    return total - spent[0]


def mutate_rows(host: str, calls: int, in_flight: int, entries: int) -> float:
    """CPU seconds of ``calls`` MutateRows of ``entries`` cells each on a ``grpc.aio`` channel,
    its event loop on a thread of its own as the sink's is."""
    import grpc
    from google.cloud.bigtable_v2 import types

    request = types.MutateRowsRequest.pb()
    entry = types.MutateRowsRequest.Entry.pb()
    mutation = types.Mutation.pb()
    response = types.MutateRowsResponse.pb()

    def build(i: int) -> object:
        made = request(table_name=_TABLE.format(i))
        for e in range(entries):
            cell = mutation()
            cell.set_cell.family_name = "cf"
            cell.set_cell.column_qualifier = b"q"
            cell.set_cell.timestamp_micros = 1000
            cell.set_cell.value = b"v" * 100
            made.entries.append(entry(row_key=b"k%05d" % e, mutations=[cell]))
        return made

    async def run() -> float:
        channel = grpc.aio.insecure_channel(host)
        call: Callable[..., object] = channel.unary_stream(
            "/google.bigtable.v2.Bigtable/MutateRows",
            request_serializer=request.SerializeToString,
            response_deserializer=response.FromString,
        )
        slots = asyncio.Semaphore(in_flight)

        async def one(i: int, message: object) -> None:
            async with slots:
                async for _ in call(message, timeout=10):  # type: ignore[attr-defined]
                    pass

        await one(0, build(0))  # the channel connected
        messages = [build(i) for i in range(calls)]  # built before the clock: not a call's cost
        start = time.process_time()
        await asyncio.gather(*(one(i, m) for i, m in enumerate(messages)))
        spent = time.process_time() - start
        await channel.close()
        return spent

    return _on_a_thread(lambda: asyncio.run(run()))


def _append_requests(calls: int, rows: int) -> list[Any]:
    """``calls`` AppendRows requests, each to a table of its own with ``rows`` rows and the
    writer schema, as the sink's shared connections send them."""
    from google.cloud.bigquery_storage_v1 import types
    from google.protobuf import descriptor_pb2

    request = types.AppendRowsRequest.pb()
    schema = descriptor_pb2.DescriptorProto(name="Row")
    schema.field.add(name="id", number=1, type=3, label=1)
    schema.field.add(name="payload", number=2, type=9, label=1)
    made = []
    for i in range(calls):
        message = request(write_stream=_STREAM.format(i))
        message.proto_rows.writer_schema.proto_descriptor.CopyFrom(schema)
        message.proto_rows.rows.serialized_rows.extend(
            b"\x08%c\x12\x40" % (r + 1) + b"x" * 64 for r in range(rows)
        )
        made.append(message)
    return made


def append_rows_sync(host: str, calls: int, in_flight: int, rows: int) -> float:
    """CPU seconds of ``calls`` AppendRows requests on one bidi stream of a synchronous channel:
    requests from a queue that gRPC's thread reads, responses read by a thread of their own (the
    sink's shared connection before it moved to ``grpc.aio``)."""
    import queue

    import grpc
    from google.cloud.bigquery_storage_v1 import types

    response = types.AppendRowsResponse.pb()
    channel = grpc.insecure_channel(host)
    stub = channel.stream_stream(
        "/google.cloud.bigquery.storage.v1.BigQueryWrite/AppendRows",
        request_serializer=types.AppendRowsRequest.pb().SerializeToString,
        response_deserializer=response.FromString,
    )
    messages = _append_requests(calls + 1, rows)
    pending: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def requests() -> Any:
        while (request := pending.get()) is not None:
            yield request

    call = stub(requests(), timeout=3600, metadata=(("x-goog-request-params", "write_location=x"),))
    slots = threading.Semaphore(in_flight)
    done = threading.Event()
    answered = [0]

    def read() -> None:
        try:
            for _ in call:
                answered[0] += 1
                slots.release()
                if answered[0] == calls + 1:
                    break
        finally:
            done.set()

    reader = threading.Thread(target=read, daemon=True)
    pending.put(messages[0])  # the stream connected
    reader.start()
    while answered[0] < 1:
        time.sleep(0.01)
    start = time.process_time()
    for message in messages[1:]:
        slots.acquire()
        pending.put(message)
    done.wait()
    spent = time.process_time() - start
    if answered[0] != calls + 1:
        raise RuntimeError(f"the stream ended after {answered[0]} of {calls + 1} answers")
    pending.put(None)
    call.cancel()
    channel.close()
    return spent


def append_rows_aio(host: str, calls: int, in_flight: int, rows: int) -> float:
    """CPU seconds of ``calls`` AppendRows requests on one bidi stream of a ``grpc.aio``
    channel, its event loop on a thread of its own: the calling thread hands the requests over
    through a queue and a wake-up per batch, a writer coroutine writes them and a reader
    coroutine reads the responses."""
    import grpc
    from google.cloud.bigquery_storage_v1 import types

    response = types.AppendRowsResponse.pb()
    messages = _append_requests(calls + 1, rows)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    inbox: deque[Any] = deque()
    wake: list[asyncio.Event] = []
    scheduled = [False]
    slots = threading.Semaphore(in_flight)
    done = threading.Event()
    tasks: list[asyncio.Task[None]] = []

    async def open_call() -> Any:
        channel = grpc.aio.insecure_channel(host)
        stub = channel.stream_stream(
            "/google.cloud.bigquery.storage.v1.BigQueryWrite/AppendRows",
            request_serializer=types.AppendRowsRequest.pb().SerializeToString,
            response_deserializer=response.FromString,
        )
        call = stub(timeout=3600, metadata=(("x-goog-request-params", "write_location=x"),))
        wake.append(asyncio.Event())
        await call.write(messages[0])
        await call.read()  # the stream connected
        tasks.extend((loop.create_task(write(call)), loop.create_task(read(call))))
        return channel

    async def close(channel: Any) -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await channel.close()

    async def write(call: Any) -> None:
        event = wake[0]
        while True:
            await event.wait()
            event.clear()
            scheduled[0] = False
            while inbox:
                await call.write(inbox.popleft())

    async def read(call: Any) -> None:
        for _ in range(calls):
            await call.read()
            slots.release()
        done.set()

    def woken() -> None:
        wake[0].set()

    channel = asyncio.run_coroutine_threadsafe(open_call(), loop).result()
    start = time.process_time()
    for message in messages[1:]:
        slots.acquire()
        inbox.append(message)
        if not scheduled[0]:
            scheduled[0] = True
            loop.call_soon_threadsafe(woken)
    done.wait()
    spent = time.process_time() - start
    asyncio.run_coroutine_threadsafe(close(channel), loop).result()
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--entries", type=int, default=5, help="cells per MutateRows")
    parser.add_argument("--busy", action="store_true", help="beside a busy Python thread too")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    with running() as backend:
        configure(backend, args.calls, 0.0)
        grpc_host = backend.env["BIGTABLE_EMULATOR_HOST"]
        storage_host = backend.env["BIGQUERY_STORAGE_EMULATOR_HOST"]
        calls: list[tuple[str, Callable[[], float]]] = [
            (
                "GetWriteStream (unary future, synchronous channel)",
                lambda: get_write_stream(storage_host, args.calls, args.in_flight),
            ),
            (
                "GetWriteStream (unary, grpc.aio on a loop thread)",
                lambda: get_write_stream_aio(storage_host, args.calls, args.in_flight),
            ),
            (
                f"AppendRows of {args.entries} rows (one bidi stream, synchronous)",
                lambda: append_rows_sync(storage_host, args.calls, args.in_flight, args.entries),
            ),
            (
                f"AppendRows of {args.entries} rows (one bidi stream, grpc.aio)",
                lambda: append_rows_aio(storage_host, args.calls, args.in_flight, args.entries),
            ),
            (
                f"MutateRows of {args.entries} cells (server streaming, grpc.aio)",
                lambda: mutate_rows(grpc_host, args.calls, args.in_flight, args.entries),
            ),
        ]
        rows = [
            (name, call(), beside_a_busy_thread(call) if args.busy else None)
            for name, call in calls
        ]
    print(
        f"{'call':<58} {'client CPU µs/call':>20}"
        + (f" {'beside a busy thread':>22}" if args.busy else "")
    )
    for name, seconds, busy in rows:
        line = f"{name:<58} {seconds / args.calls * 1e6:>20.1f}"
        if busy is not None:
            line += f" {busy / args.calls * 1e6:>22.1f}"
        print(line)
    print(
        f"\n{args.calls:,} calls each, each to a table of its own, at most {args.in_flight} in "
        "flight, against the null backend; CPU: this process, all threads"
        + (", less the busy thread's own" if args.busy else "")
        + "."
    )


if __name__ == "__main__":
    main()
