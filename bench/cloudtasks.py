"""Cloud Tasks sink throughput against the raw client, measured in one run on the same tasks.

    python bench/cloudtasks.py [--records 15000] [--raw-records 6000] [--naive-records 3000]
                               [--latency-ms 20] [--ceiling]

Prints records/s (CreateTask calls accepted per second) of:
- the raw google-cloud-tasks client outside Flink: sequential ``create_task`` calls, and with
  the sink's concurrency (256 calls in flight) three ways: a 256-thread pool over the client,
  the asyncio client with 256 tasks, and raw gRPC futures (the sink's own transport);
- the naive per-record blocking ``create_task`` inside a PyFlink ``map`` (p=2);
- the sink (PyFlink job: source -> map -> CloudTasksSink over 4 queues), p=1 and p=2;
- with ``--ceiling``, the PyFlink ceiling: the same job shape with a no-op Python function;
and the ratios the issue targets: sink / raw concurrent client, sink / naive map.

Then the main variants again through a proxy that delays every call by ``--latency-ms``: on
loopback a CreateTask takes a fraction of a millisecond, so the blocking variants are bound by
CPU like the sink, while against the service they wait for the network on every record. The
proxy is a Python process too: its own CPU caps that round (compare the sink with the raw
futures there, not with the loopback figures).

Flink rates are steady state: records divided by the time between the first and the last
record reaching the operator, stamped inside the job (a MiniCluster job also spends seconds
deploying and starting Python workers, which says nothing about the sink); the job's net
runtime rate is printed too. Every variant gets a fresh emulator whose queues are paused, so
the measurement is task creation alone (dispatching is the service's job, and would compete
for the same two cores).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import glob
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import flink_env, run_job, source, table, timed  # noqa: E402
from pyflink_gcp.emulators import EmulatorStack  # noqa: E402

PROJECT = "bench-project"
LOCATION = "us-central1"
QUEUES = 4
IN_FLIGHT = 256
URL = "https://hooks.example.com/orders"


def make_record(i: int) -> dict:
    return {"id": i, "customer": f"c{i % 1000}", "amount": i % 10_000, "note": "x" * 80}


def body(r: dict) -> bytes:
    return json.dumps(r).encode()


def queue_of(r: dict) -> str:
    return f"bench-{r['id'] % QUEUES}"


# -- emulator per variant --------------------------------------------------------------------


@contextlib.contextmanager
def fresh_emulator() -> Iterator[str]:
    """A new emulator with paused queues; yields its ``host:port``."""
    with EmulatorStack(services=("cloudtasks",), project=PROJECT) as stack:
        host = stack.env["CLOUD_TASKS_EMULATOR_HOST"]
        client = admin(host)
        parent = f"projects/{PROJECT}/locations/{LOCATION}"
        from google.cloud import tasks_v2

        for n in range(QUEUES):
            queue = client.create_queue(
                parent=parent, queue=tasks_v2.Queue(name=f"{parent}/queues/bench-{n}")
            )
            client.pause_queue(name=queue.name)
        yield host


def admin(host: str) -> Any:
    import grpc
    from google.cloud import tasks_v2
    from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

    return tasks_v2.CloudTasksClient(
        transport=CloudTasksGrpcTransport(channel=grpc.insecure_channel(host))
    )


def queue_path(r: dict) -> str:
    return f"projects/{PROJECT}/locations/{LOCATION}/queues/{queue_of(r)}"


def gapic_task(r: dict) -> Any:
    from google.cloud import tasks_v2

    return tasks_v2.Task(
        http_request=tasks_v2.HttpRequest(
            url=URL,
            http_method=tasks_v2.HttpMethod.POST,
            headers={"Content-Type": "application/json"},
            body=body(r),
        )
    )


# -- service latency -------------------------------------------------------------------------


def _serve_proxy(target: str, port: int, latency_s: float) -> None:
    """A gRPC pass-through that answers every call ``latency_s`` late (runs in its own process)."""
    import grpc

    async def serve() -> None:
        upstream = grpc.aio.insecure_channel(target)

        class Forward(grpc.GenericRpcHandler):
            def service(self, details: Any) -> Any:
                forward = upstream.unary_unary(
                    details.method, request_serializer=None, response_deserializer=None
                )

                async def handle(request: bytes, context: Any) -> bytes:
                    await asyncio.sleep(latency_s)
                    try:
                        return await forward(
                            request, metadata=context.invocation_metadata(), timeout=30
                        )
                    except grpc.aio.AioRpcError as err:
                        await context.abort(err.code(), err.details())
                        raise

                return grpc.unary_unary_rpc_method_handler(handle)

        server = grpc.aio.server()
        server.add_generic_rpc_handlers((Forward(),))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    asyncio.run(serve())


@contextlib.contextmanager
def latency_proxy(target: str, latency_ms: float) -> Iterator[str]:
    """``host:port`` of a proxy to ``target`` that adds ``latency_ms`` to every call, the way a
    real service across a network would (on loopback a call takes well under a millisecond)."""
    import multiprocessing
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = multiprocessing.get_context("spawn").Process(
        target=_serve_proxy, args=(target, port, latency_ms / 1000.0), daemon=True
    )
    process.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.join(timeout=10)


# -- the raw client outside Flink ------------------------------------------------------------


def raw_sequential(host: str, records: int) -> float:
    client = admin(host)
    items = [make_record(i) for i in range(records)]

    def run() -> None:
        for r in items:
            client.create_task(parent=queue_path(r), task=gapic_task(r))

    return records / timed(run)


def raw_thread_pool(host: str, records: int) -> float:
    client = admin(host)
    items = [make_record(i) for i in range(records)]

    def run() -> None:
        with ThreadPoolExecutor(max_workers=IN_FLIGHT) as pool:
            futures = [
                pool.submit(client.create_task, parent=queue_path(r), task=gapic_task(r))
                for r in items
            ]
            for f in futures:
                f.result()

    return records / timed(run)


def raw_asyncio(host: str, records: int) -> float:
    import grpc
    from google.cloud import tasks_v2
    from google.cloud.tasks_v2.services.cloud_tasks.transports import (
        CloudTasksGrpcAsyncIOTransport,
    )

    items = [make_record(i) for i in range(records)]

    async def run() -> None:
        client = tasks_v2.CloudTasksAsyncClient(
            transport=CloudTasksGrpcAsyncIOTransport(channel=grpc.aio.insecure_channel(host))
        )
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one(r: dict) -> None:
            async with gate:
                await client.create_task(parent=queue_path(r), task=gapic_task(r))

        await asyncio.gather(*(one(r) for r in items))

    return records / timed(lambda: asyncio.run(run()))


def raw_futures(host: str, records: int) -> float:
    """The sink's transport without Flink: raw protobuf requests on gRPC futures, one channel."""
    from collections import deque

    import grpc
    from google.cloud import tasks_v2

    request_pb = tasks_v2.CreateTaskRequest.pb()
    task_pb, http_pb = tasks_v2.Task.pb(), tasks_v2.HttpRequest.pb()
    items = [make_record(i) for i in range(records)]
    channel = grpc.insecure_channel(host)
    call = channel.unary_unary(
        "/google.cloud.tasks.v2.CloudTasks/CreateTask",
        request_serializer=None,
        response_deserializer=None,
    )

    def run() -> None:
        window: deque = deque()
        calls = []
        for r in items:
            parent = queue_path(r)
            task = task_pb(
                http_request=http_pb(
                    url=URL,
                    http_method=1,
                    headers={"Content-Type": "application/json"},
                    body=body(r),
                )
            )
            request = request_pb(parent=parent, task=task).SerializeToString()
            if len(window) >= IN_FLIGHT:
                window.popleft().exception()
            future = call.future(
                request, timeout=30, metadata=(("x-goog-request-params", f"parent={parent}"),)
            )
            window.append(future)
            calls.append(future)
        for f in calls:
            if f.exception() is not None:
                raise f.exception()

    rate = records / timed(run)
    channel.close()
    return rate


# -- PyFlink jobs ----------------------------------------------------------------------------


class Stamp:
    """Records, per worker process, when the first and the latest record reached the operator."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.first = 0.0
        self.count = 0

    def __call__(self) -> None:
        now = time.time()
        if self.count == 0:
            self.first = now
        self.count += 1
        if self.count % 100 == 0:
            path = os.path.join(self.directory, f"{os.getpid()}-{threading.get_ident()}.json")
            with open(path, "w") as f:
                json.dump([self.first, now, self.count], f)


def steady_rate(directory: str) -> float:
    stamps = []
    for path in glob.glob(os.path.join(directory, "*.json")):
        with open(path) as f:
            stamps.append(json.load(f))
    first = min(s[0] for s in stamps)
    last = max(s[1] for s in stamps)
    return sum(s[2] for s in stamps) / (last - first)


class StampedResolver:
    def __init__(self, directory: str) -> None:
        self.stamp = Stamp(directory)
        self.queues: dict[str, Any] = {}

    def resolve(self, r: dict, ctx: Any) -> Any:
        self.stamp()
        name = queue_of(r)
        queue = self.queues.get(name)
        if queue is None:
            from pyflink_gcp.cloudtasks import QueueDestination

            queue = self.queues[name] = QueueDestination.of(PROJECT, LOCATION, name)
        return queue


def sink_rates(host: str, records: int, parallelism: int) -> tuple[float, float]:
    from pyflink_gcp.cloudtasks import (
        CloudTasksSerializationSchema,
        CloudTasksSink,
        CloudTasksWriterOptions,
    )

    stamps = tempfile.mkdtemp(prefix="bench-ct-")
    sink = (
        CloudTasksSink.builder()
        .set_destination_resolver(StampedResolver(stamps))
        .set_serializer(
            CloudTasksSerializationSchema.http_target(URL).with_body(
                body, content_type="application/json"
            )
        )
        .set_writer_options(CloudTasksWriterOptions.builder().max_in_flight(IN_FLIGHT).build())
        .set_endpoint(f"http://{host}")  # workers outlive this variant's environment variables
        .build()
    )
    env = flink_env(parallelism)
    source(env, records, make_record).sink_to(sink)
    net = records / run_job(env, "bench-cloudtasks-sink")
    return steady_rate(stamps), net


class NaiveCreateTask:
    """What people write today: one blocking create_task per record inside a map."""

    def __init__(self, host: str, directory: str) -> None:
        self.host = host
        self.stamp = Stamp(directory)
        self.client: Any = None

    def __call__(self, r: dict) -> int:
        self.stamp()
        if self.client is None:
            self.client = admin(self.host)
        self.client.create_task(parent=queue_path(r), task=gapic_task(r))
        return r["id"]


class StampedNoOp:
    def __init__(self, directory: str) -> None:
        self.stamp = Stamp(directory)

    def __call__(self, value: Any) -> bool:
        self.stamp()
        return False


def naive_rates(host: str, records: int, parallelism: int) -> tuple[float, float]:
    stamps = tempfile.mkdtemp(prefix="bench-ct-")
    env = flink_env(parallelism)
    source(env, records, make_record).map(NaiveCreateTask(host, stamps)).filter(lambda x: False)
    net = records / run_job(env, "bench-naive-map")
    return steady_rate(stamps), net


def noop_rates(records: int, parallelism: int) -> tuple[float, float]:
    stamps = tempfile.mkdtemp(prefix="bench-ct-")
    env = flink_env(parallelism)
    source(env, records, make_record).filter(StampedNoOp(stamps))
    net = records / run_job(env, "bench-noop")
    return steady_rate(stamps), net


@contextlib.contextmanager
def endpoint(latency_ms: float) -> Iterator[str]:
    """A fresh emulator, behind a latency proxy when ``latency_ms`` > 0."""
    with fresh_emulator() as host:
        if latency_ms <= 0:
            yield host
            return
        with latency_proxy(host, latency_ms) as proxied:
            yield proxied


def measure(args: argparse.Namespace, latency_ms: float, full: bool) -> dict[str, float]:
    """One round of variants; prints each rate as it comes."""
    rows: list[tuple[str, float]] = []
    net_rows: list[tuple[str, float]] = []
    scale = 1 if latency_ms <= 0 else 10  # the blocking variants crawl at real latencies
    raw = [
        ("raw client, sequential", raw_sequential, args.raw_records // 3 // scale),
        (f"raw gRPC futures, {IN_FLIGHT} in flight", raw_futures, args.raw_records),
    ]
    if full:
        raw[1:1] = [
            (f"raw client, {IN_FLIGHT}-thread pool", raw_thread_pool, args.raw_records),
            (f"raw asyncio client, {IN_FLIGHT} in flight", raw_asyncio, args.raw_records),
        ]
    for name, fn, n in raw:
        with endpoint(latency_ms) as host:
            rows.append((name, fn(host, n)))
        print(f"  {name}: {rows[-1][1]:,.0f}/s", flush=True)
    sink_parallelisms = (1, 2) if full else (2,)
    jobs = [("naive create_task in map p=2", naive_rates, args.naive_records // scale, 2)]
    jobs += [(f"CloudTasksSink p={p}", sink_rates, args.records, p) for p in sink_parallelisms]
    for name, fn, n, p in jobs:
        with endpoint(latency_ms) as host:
            steady, net = fn(host, n, p)
        rows.append((name, steady))
        net_rows.append((name, net))
        print(f"  {name}: {steady:,.0f}/s (net runtime {net:,.0f}/s)", flush=True)
    if full and args.ceiling:
        steady, net = noop_rates(args.records, 2)
        rows.append(("PyFlink no-op ceiling p=2", steady))
        net_rows.append(("PyFlink no-op ceiling p=2", net))

    rates = dict(rows)
    where = "loopback" if latency_ms <= 0 else f"{latency_ms:g} ms added per call"
    print(f"\n[{where}] steady-state records/s\n" + table(rows, {}))
    print("job net runtime rates (include deployment and Python worker start):")
    print(table(net_rows, {}))
    futures = rates[f"raw gRPC futures, {IN_FLIGHT} in flight"]
    client = max(
        (v for k, v in rates.items() if k.startswith("raw") and ("pool" in k or "asyncio" in k)),
        default=None,
    )
    for p in sink_parallelisms:
        sink = rates[f"CloudTasksSink p={p}"]
        parts = [f"[{where}] p={p}: sink /"]
        if client:
            parts.append(
                f"raw client at {IN_FLIGHT} in flight (best of pool, asyncio) {sink / client:.2f}"
            )
        parts.append(f"raw gRPC futures {sink / futures:.2f}")
        parts.append(f"raw sequential {sink / rates['raw client, sequential']:.1f}x")
        parts.append(f"naive map p=2 {sink / rates['naive create_task in map p=2']:.1f}x")
        print("   ".join(parts))
    return rates


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=15_000)
    parser.add_argument("--raw-records", type=int, default=6_000)
    parser.add_argument("--naive-records", type=int, default=3_000)
    parser.add_argument(
        "--ceiling", action="store_true", help="also run the PyFlink no-op ceiling job"
    )
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=20.0,
        help="also measure the main variants through a proxy adding this latency (0: skip)",
    )
    args = parser.parse_args()
    print(
        f"{args.records:,} sink records, {args.raw_records:,} raw, {args.naive_records:,} naive;"
        f" {QUEUES} paused queues; ~130-byte JSON bodies"
    )
    print("\nloopback (the emulator answers in well under a millisecond):")
    measure(args, 0.0, full=True)
    if args.latency_ms > 0:
        print(f"\nwith {args.latency_ms:g} ms of service latency per call:")
        measure(args, args.latency_ms, full=False)


if __name__ == "__main__":
    main()
