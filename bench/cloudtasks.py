"""Cloud Tasks sink throughput against the raw client, measured in one run on the same tasks.

    python bench/cloudtasks.py [--records 60000] [--raw-records 6000] [--naive-records 9000]
                               [--latency-ms 20] [--ceiling] [--fused] [--dispatch]

Prints records/s (CreateTask calls accepted per second) of:
- the raw google-cloud-tasks client outside Flink: sequential ``create_task`` calls, and with
  the sink's concurrency (256 calls in flight) three ways: a 256-thread pool over the client,
  the asyncio client with 256 tasks, raw protobuf requests on ``grpc.aio`` calls (the sink's own
  transport) and on the synchronous channel's gRPC futures (the transport it was chosen over);
- the naive per-record blocking ``create_task`` inside a PyFlink ``map``, p=1 and p=2;
- the sink (PyFlink job: source -> map -> CloudTasksSink over 4 queues), p=1 and p=2, in
  its default shape (the writer in an operator chain of its own); with ``--fused`` also fused
  into the map (``set_chain_with_upstream()``, bundle size 10,000), the naive map's own shape,
  since PyFlink fuses that map into the record map before it;
- with ``--ceiling``, the PyFlink ceiling: the same job shape with a no-op Python function;
and the ratios the issue targets: sink / raw concurrent client, sink / naive map.

What is measured: task creation. The sink's work ends when CreateTask returns; dispatching the
task to its target is the service's work, done on Google's machines. The emulator does it on
ours: every task costs the emulator's HTTP client and the target's server as much CPU again
as its creation, on the same two cores as the job, and charged to every variant alike (which
compresses every ratio towards 1). So by default every variant gets a fresh emulator whose
queues are created and then paused (``PauseQueue``: the emulator stops the queue's dispatcher
and workers; tasks are stored and wait). After each variant the bench counts the stored tasks
with ``ListTasks`` and fails unless every task was created exactly once. ``--dispatch`` runs
the queues instead, targeting an HTTP receiver in its own process, and waits until the receiver
got every task: the figures of a loopback setup that does everything.

Per variant the CPU spent per task is printed, by process: the client (the bench process for
the raw variants; the Python workers for the Flink jobs, where ``jvm`` is the MiniCluster),
the emulator and, with ``--dispatch``, the receiver. It is read from ``/proc/<pid>/stat`` over
the same window as the rate.

Then the main variants again through a proxy that delays every call by ``--latency-ms``: on
loopback a CreateTask takes a fraction of a millisecond, so the blocking variants are bound by
CPU like the sink, while against the service they wait for the network on every record. The
proxy is a Python process too: its own CPU caps that round (compare the sink with the raw
``grpc.aio`` calls there, not with the loopback figures).

Flink rates are steady state: records divided by the time between the first and the last
record reaching the operator, stamped inside the job (a MiniCluster job also spends seconds
deploying and starting Python workers, which says nothing about the sink); the job's net
runtime rate is printed too, and the window's length. Short windows measured the parallel
sink low (with 15,000 sink records, a 1.5-2 s window, the sink at p=2 measured 6,300-8,600/s;
with 60,000 records, 12,800-13,400/s in the same setup, its subtasks' first records 0.02-0.04 s
apart), so the defaults give every Flink variant a window of several seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import glob
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import flink_env, run_job, source, table, warm_up
from bench._cpu import cpu_seconds, jvm_pid, per_record
from pyflink_gcp.tools.emulators import EmulatorStack

PROJECT = "bench-project"
LOCATION = "us-central1"
PARENT = f"projects/{PROJECT}/locations/{LOCATION}"
QUEUES = 4
IN_FLIGHT = 256
# The target of paused queues' tasks: never contacted, the tasks are not dispatched.
PAUSED_URL = "https://hooks.example.com/orders"
# Dispatch rate limits per queue with --dispatch: fast enough for dispatch to keep up with
# creation, few enough concurrent dispatches for the receiver's small threaded server.
DISPATCH_RATE = 5_000.0
DISPATCH_CONCURRENCY = 16
# The bundle size of the fused sink's jobs: fused, the writer waits for its calls at every
# bundle end of the map it joins, and PyFlink's default of 1,000 records would make that every
# ~0.1 s at these rates; 10,000 makes it about once a second, like the default bundle time.
FUSED_BUNDLE = 10_000


def make_record(i: int) -> dict:
    return {"id": i, "customer": f"c{i % 1000}", "amount": i % 10_000, "note": "x" * 80}


def body(r: dict) -> bytes:
    return json.dumps(r).encode()


def queue_of(r: dict) -> str:
    return f"bench-{r['id'] % QUEUES}"


def queue_path(r: dict) -> str:
    return f"{PARENT}/queues/{queue_of(r)}"


def admin(host: str) -> Any:
    import grpc
    from google.cloud import tasks_v2
    from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

    # ListTasks answers every task of a queue in one message: no size limit.
    channel = grpc.insecure_channel(host, options=[("grpc.max_receive_message_length", -1)])
    return tasks_v2.CloudTasksClient(transport=CloudTasksGrpcTransport(channel=channel))


def gapic_task(r: dict, url: str) -> Any:
    from google.cloud import tasks_v2

    return tasks_v2.Task(
        http_request=tasks_v2.HttpRequest(
            url=url,
            http_method=tasks_v2.HttpMethod.POST,
            headers={"Content-Type": "application/json"},
            body=body(r),
        )
    )


# -- CPU accounting --------------------------------------------------------------------------


def snapshot(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds of the named processes, plus ``client``: this process's own."""
    snap = {name: cpu_seconds(pid) for name, pid in pids.items()}
    snap["client"] = time.process_time()
    return snap


def describe_cpu(cpu: dict[str, float]) -> str:
    order = ("client", "jvm", "emulator", "receiver", "proxy")
    parts = [f"{name} {cpu[name]:.0f}" for name in order if name in cpu]
    return f"CPU us/task: {', '.join(parts)}, total {sum(cpu.values()):.0f}"


# -- emulator per variant --------------------------------------------------------------------


def _serve_receiver(conn: Any) -> None:
    """Runs an HTTP receiver (runs in its own process, so its CPU is its own)."""
    from pyflink_gcp.tools.emulators.receiver import Receiver

    receiver = Receiver().start()
    conn.send(receiver.url)
    threading.Event().wait()


@contextlib.contextmanager
def receiver_process() -> Iterator[tuple[str, int]]:
    """``(url, pid)`` of a task target that records every request, in its own process."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    process = context.Process(target=_serve_receiver, args=(theirs,), daemon=True)
    process.start()
    try:
        url = ours.recv()
        assert process.pid is not None
        yield url, process.pid
    finally:
        process.terminate()
        process.join(timeout=10)


@dataclass
class Backend:
    """Where a variant sends its tasks, and how to check that they all arrived.

    Attributes:
        host: ``host:port`` clients call (the emulator, or a latency proxy in front of it).
        url: The tasks' target URL.
        pids: The processes whose CPU is accounted to the variant, by role.
        receiver_url: The receiver's URL with --dispatch, else None (paused queues).
    """

    host: str
    url: str
    pids: dict[str, int]
    receiver_url: str | None = None
    emulator_host: str = field(default="", repr=False)

    def verify(self, expected: int) -> None:
        """Fails unless exactly ``expected`` tasks were created (and, with dispatch, arrived)."""
        if self.receiver_url is None:
            client = admin(self.emulator_host)
            stored = sum(
                len(client.list_tasks(parent=f"{PARENT}/queues/bench-{n}").tasks)
                for n in range(QUEUES)
            )
            what = "paused queues hold"
        else:
            from pyflink_gcp.tools.emulators.receiver import fetch_received

            deadline = time.monotonic() + 120
            stored = len(fetch_received(self.receiver_url, timeout=30))
            while stored < expected and time.monotonic() < deadline:
                time.sleep(0.5)
                stored = len(fetch_received(self.receiver_url, timeout=30))
            what = "the receiver got"
        if stored != expected:
            raise RuntimeError(f"{what} {stored:,} tasks, expected {expected:,}")


@contextlib.contextmanager
def fresh_backend(dispatch: bool, latency_ms: float) -> Iterator[Backend]:
    """A new emulator with ``QUEUES`` queues, paused unless ``dispatch`` (then they target a
    receiver process), behind a latency proxy when ``latency_ms`` > 0."""
    from google.cloud import tasks_v2

    with contextlib.ExitStack() as stack:
        emulator = stack.enter_context(EmulatorStack(services=("cloudtasks",), project=PROJECT))
        host = emulator.env["CLOUD_TASKS_EMULATOR_HOST"]
        pids = {"emulator": emulator.processes["cloudtasks"].pid}
        receiver_url = None
        url = PAUSED_URL
        if dispatch:
            receiver_url, pids["receiver"] = stack.enter_context(receiver_process())
            url = receiver_url + "/orders"
        client = admin(host)
        for n in range(QUEUES):
            queue = tasks_v2.Queue(name=f"{PARENT}/queues/bench-{n}")
            if dispatch:
                queue.rate_limits = tasks_v2.RateLimits(
                    max_dispatches_per_second=DISPATCH_RATE,
                    max_concurrent_dispatches=DISPATCH_CONCURRENCY,
                )
            created = client.create_queue(parent=PARENT, queue=queue)
            if not dispatch:
                client.pause_queue(name=created.name)
        backend = Backend(host, url, pids, receiver_url, emulator_host=host)
        if latency_ms > 0:
            backend.host, backend.pids["proxy"] = stack.enter_context(
                latency_proxy(host, latency_ms)
            )
        yield backend


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
def latency_proxy(target: str, latency_ms: float) -> Iterator[tuple[str, int]]:
    """``(host:port, pid)`` of a proxy to ``target`` that adds ``latency_ms`` to every call, the
    way a real service across a network would (on loopback a call takes well under a
    millisecond)."""
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
        assert process.pid is not None
        yield f"127.0.0.1:{port}", process.pid
    finally:
        process.terminate()
        process.join(timeout=10)


# -- the raw client outside Flink ------------------------------------------------------------
# Each prepares its client and requests, and returns the timed part.


def raw_sequential(host: str, url: str, records: int) -> Callable[[], None]:
    client = admin(host)
    items = [(queue_path(r), gapic_task(r, url)) for r in map(make_record, range(records))]

    def run() -> None:
        for parent, task in items:
            client.create_task(parent=parent, task=task)

    return run


def raw_thread_pool(host: str, url: str, records: int) -> Callable[[], None]:
    client = admin(host)
    items = [(queue_path(r), gapic_task(r, url)) for r in map(make_record, range(records))]

    def run() -> None:
        with ThreadPoolExecutor(max_workers=IN_FLIGHT) as pool:
            futures = [
                pool.submit(client.create_task, parent=parent, task=task) for parent, task in items
            ]
            for f in futures:
                f.result()

    return run


def raw_asyncio(host: str, url: str, records: int) -> Callable[[], None]:
    import grpc
    from google.cloud import tasks_v2
    from google.cloud.tasks_v2.services.cloud_tasks.transports import (
        CloudTasksGrpcAsyncIOTransport,
    )

    items = [(queue_path(r), gapic_task(r, url)) for r in map(make_record, range(records))]

    async def run() -> None:
        client = tasks_v2.CloudTasksAsyncClient(
            transport=CloudTasksGrpcAsyncIOTransport(channel=grpc.aio.insecure_channel(host))
        )
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one(parent: str, task: Any) -> None:
            async with gate:
                await client.create_task(parent=parent, task=task)

        await asyncio.gather(*(one(parent, task) for parent, task in items))

    return lambda: asyncio.run(run())


@functools.cache
def _raw_classes() -> tuple[Any, Any, Any]:
    from google.cloud import tasks_v2

    return tasks_v2.CreateTaskRequest.pb(), tasks_v2.Task.pb(), tasks_v2.HttpRequest.pb()


def raw_request(r: dict, url: str) -> tuple[str, bytes]:
    """The queue and the serialized ``CreateTaskRequest`` of record ``r``, from raw protobufs."""
    request_pb, task_pb, http_pb = _raw_classes()
    parent = queue_path(r)
    http = http_pb(
        url=url, http_method=1, headers={"Content-Type": "application/json"}, body=body(r)
    )
    return parent, request_pb(parent=parent, task=task_pb(http_request=http)).SerializeToString()


def raw_futures(host: str, url: str, records: int) -> Callable[[], None]:
    """Raw protobuf requests on the synchronous channel's gRPC futures (more than twice the CPU
    per call of ``grpc.aio``, the sink's transport)."""
    from collections import deque

    import grpc

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
            parent, request = raw_request(r, url)
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
        channel.close()

    return run


def raw_aio(host: str, url: str, records: int) -> Callable[[], None]:
    """The sink's transport without Flink: raw protobuf requests on ``grpc.aio`` calls."""
    import grpc

    items = [make_record(i) for i in range(records)]

    async def run() -> None:
        channel = grpc.aio.insecure_channel(host)
        call = channel.unary_unary(
            "/google.cloud.tasks.v2.CloudTasks/CreateTask",
            request_serializer=None,
            response_deserializer=None,
        )
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one(r: dict) -> None:
            parent, request = raw_request(r, url)
            async with gate:
                await call(
                    request, timeout=30, metadata=(("x-goog-request-params", f"parent={parent}"),)
                )

        await asyncio.gather(*(one(r) for r in items))
        await channel.close()

    return lambda: asyncio.run(run())


def raw_rate(
    backend: Backend, prepare: Callable[[str, str, int], Callable[[], None]], records: int
) -> tuple[float, dict[str, float]]:
    """Records/s of one raw variant and its CPU per task over the same window."""
    run = prepare(backend.host, backend.url, records)
    before = snapshot(backend.pids)
    start = time.perf_counter()
    run()
    elapsed = time.perf_counter() - start
    return records / elapsed, per_record(before, snapshot(backend.pids), records)


# -- PyFlink jobs ----------------------------------------------------------------------------


class Stamp:
    """Records, per worker process, when the first and the latest record reached the operator,
    and the CPU seconds of the worker and of the shared processes at both moments."""

    def __init__(self, directory: str, pids: dict[str, int]) -> None:
        self.directory = directory
        self.pids = pids
        self.first = 0.0
        self.first_cpu: dict[str, float] = {}
        self.count = 0

    def __call__(self) -> None:
        self.count += 1
        if self.count == 1:
            self.first_cpu = snapshot(self.pids)
            self.first = time.time()
        elif self.count % 100 == 0:
            now = time.time()
            cpu = snapshot(self.pids)
            path = os.path.join(self.directory, f"{os.getpid()}-{threading.get_ident()}.json")
            with open(path, "w") as f:
                json.dump([self.first, now, self.count - 1, self.first_cpu, cpu], f)


def steady_rate(directory: str) -> tuple[float, dict[str, float], str]:
    """Records/s between the first and the last stamp of all workers, the CPU per task over
    that window (the workers' own, summed, and the shared processes'), and a note of the
    window's length and of how far apart the workers' first records came (a subtask starting
    late would run alone at the end of a short window)."""
    stamps = []
    for path in glob.glob(os.path.join(directory, "*.json")):
        with open(path) as f:
            stamps.append(json.load(f))
    first = min(stamps, key=lambda s: s[0])
    last = max(stamps, key=lambda s: s[1])
    count = sum(s[2] for s in stamps)
    cpu = per_record(first[3], last[4], count)
    cpu["client"] = 1e6 * sum(s[4]["client"] - s[3]["client"] for s in stamps) / count
    window = last[1] - first[0]
    skew = max(s[0] for s in stamps) - first[0]
    return count / window, cpu, f"{window:.1f} s window, first records {skew:.2f} s apart"


class StampedResolver:
    def __init__(self, directory: str, pids: dict[str, int]) -> None:
        self.stamp = Stamp(directory, pids)
        self.queues: dict[str, Any] = {}

    def resolve(self, r: dict, ctx: Any) -> Any:
        self.stamp()
        name = queue_of(r)
        queue = self.queues.get(name)
        if queue is None:
            from pyflink_gcp.cloudtasks import QueueDestination

            queue = self.queues[name] = QueueDestination.of(PROJECT, LOCATION, name)
        return queue


def job_pids(backend: Backend) -> dict[str, int]:
    return {**backend.pids, "jvm": jvm_pid()}


def sink_rates(
    backend: Backend, records: int, parallelism: int, fused: bool = False
) -> tuple[float, dict, str, float]:
    from pyflink_gcp.cloudtasks import (
        CloudTasksSerializationSchema,
        CloudTasksSink,
        CloudTasksWriterOptions,
    )

    extra = {"python.fn-execution.bundle.size": str(FUSED_BUNDLE)} if fused else None
    env = flink_env(parallelism, extra=extra)
    stamps = tempfile.mkdtemp(prefix="bench-ct-")
    sink = (
        CloudTasksSink.builder()
        .set_destination_resolver(StampedResolver(stamps, job_pids(backend)))
        .set_serializer(
            CloudTasksSerializationSchema.http_target(backend.url).with_body(
                body, content_type="application/json"
            )
        )
        .set_writer_options(
            CloudTasksWriterOptions.builder().max_in_flight_requests(IN_FLIGHT).build()
        )
        .set_endpoint(f"http://{backend.host}")  # workers outlive this variant's variables
        .set_chain_with_upstream(fused)
        .build()
    )
    source(env, records, make_record).sink_to(sink)
    net = records / run_job(env, "bench-cloudtasks-sink")
    return (*steady_rate(stamps), net)


class NaiveCreateTask:
    """What people write today: one blocking create_task per record inside a map."""

    def __init__(self, host: str, url: str, directory: str, pids: dict[str, int]) -> None:
        self.host = host
        self.url = url
        self.stamp = Stamp(directory, pids)
        self.client: Any = None

    def __call__(self, r: dict) -> int:
        self.stamp()
        if self.client is None:
            self.client = admin(self.host)
        self.client.create_task(parent=queue_path(r), task=gapic_task(r, self.url))
        return r["id"]


class StampedNoOp:
    def __init__(self, directory: str, pids: dict[str, int]) -> None:
        self.stamp = Stamp(directory, pids)

    def __call__(self, value: Any) -> bool:
        self.stamp()
        return False


def naive_rates(backend: Backend, records: int, parallelism: int) -> tuple[float, dict, str, float]:
    env = flink_env(parallelism)
    stamps = tempfile.mkdtemp(prefix="bench-ct-")
    naive = NaiveCreateTask(backend.host, backend.url, stamps, job_pids(backend))
    source(env, records, make_record).map(naive).filter(lambda x: False)
    net = records / run_job(env, "bench-naive-map")
    return (*steady_rate(stamps), net)


def noop_rates(records: int, parallelism: int) -> tuple[float, dict, str, float]:
    env = flink_env(parallelism)
    stamps = tempfile.mkdtemp(prefix="bench-ct-")
    source(env, records, make_record).filter(StampedNoOp(stamps, {"jvm": jvm_pid()}))
    net = records / run_job(env, "bench-noop")
    return (*steady_rate(stamps), net)


# -- rounds ----------------------------------------------------------------------------------


def measure(args: argparse.Namespace, latency_ms: float, full: bool) -> dict[str, float]:
    """One round of variants, each on a fresh emulator; prints each rate as it comes."""
    rows: list[tuple[str, float]] = []
    net_rows: list[tuple[str, float]] = []
    scale = 1 if latency_ms <= 0 else 10  # the blocking variants crawl at real latencies
    raw = [
        ("raw client, sequential", raw_sequential, args.raw_records // 3 // scale),
        (f"raw grpc.aio calls, {IN_FLIGHT} in flight", raw_aio, args.raw_records),
    ]
    if full:
        raw[1:1] = [
            (f"raw client, {IN_FLIGHT}-thread pool", raw_thread_pool, args.raw_records),
            (f"raw asyncio client, {IN_FLIGHT} in flight", raw_asyncio, args.raw_records),
            (f"raw gRPC futures, {IN_FLIGHT} in flight", raw_futures, args.raw_records),
        ]
    for name, prepare, n in raw:
        with fresh_backend(args.dispatch, latency_ms) as backend:
            rate, cpu = raw_rate(backend, prepare, n)
            backend.verify(n)
        rows.append((name, rate))
        print(f"  {name}: {rate:,.0f}/s   {describe_cpu(cpu)}", flush=True)
    warm_up()  # the naive map must not be measured in a cold client JVM
    parallelisms = (1, 2) if full else (2,)
    jobs = [
        (f"naive create_task in map p={p}", naive_rates, args.naive_records // scale, p)
        for p in parallelisms
    ]
    jobs += [(f"CloudTasksSink p={p}", sink_rates, args.records, p) for p in parallelisms]
    if full and args.fused:
        fused = functools.partial(sink_rates, fused=True)
        jobs += [(f"CloudTasksSink fused p={p}", fused, args.records, p) for p in parallelisms]
    for name, job, n, p in jobs:
        with fresh_backend(args.dispatch, latency_ms) as backend:
            steady, cpu, window, net = job(backend, n, p)
            backend.verify(n)
        rows.append((name, steady))
        net_rows.append((name, net))
        print(
            f"  {name}: {steady:,.0f}/s (net runtime {net:,.0f}/s; {window})   {describe_cpu(cpu)}"
        )
    if full and args.ceiling:
        steady, cpu, window, net = noop_rates(args.records, 2)
        rows.append(("PyFlink no-op ceiling p=2", steady))
        net_rows.append(("PyFlink no-op ceiling p=2", net))
        print(f"  PyFlink no-op ceiling p=2: {steady:,.0f}/s ({window})   {describe_cpu(cpu)}")

    rates = dict(rows)
    where = ("loopback" if latency_ms <= 0 else f"{latency_ms:g} ms added per call") + (
        ", dispatching" if args.dispatch else ", paused queues"
    )
    print(f"\n[{where}] steady-state records/s\n" + table(rows, {}))
    print("job net runtime rates (include deployment and Python worker start):")
    print(table(net_rows, {}))
    transport = rates[f"raw grpc.aio calls, {IN_FLIGHT} in flight"]
    client = max(
        (v for k, v in rates.items() if k.startswith("raw") and ("pool" in k or "asyncio" in k)),
        default=None,
    )
    shapes = [("", p) for p in parallelisms]
    if full and args.fused:
        shapes += [("fused ", p) for p in parallelisms]
    for shape, p in shapes:
        sink = rates[f"CloudTasksSink {shape}p={p}"]
        naive = rates[f"naive create_task in map p={p}"]
        parts = [f"[{where}] {shape}p={p}: sink /"]
        if client:
            parts.append(
                f"raw client at {IN_FLIGHT} in flight (best of pool, asyncio) {sink / client:.2f}"
                f" ({'met' if sink / client >= 0.8 else 'NOT met'}: >= 0.8)"
            )
        parts.append(f"raw grpc.aio calls {sink / transport:.2f}")
        parts.append(f"raw sequential {sink / rates['raw client, sequential']:.1f}x")
        parts.append(
            f"naive map p={p} {sink / naive:.1f}x ({'met' if sink / naive >= 5 else 'NOT met'}: >= 5x)"
        )
        print("   ".join(parts))
    if len(parallelisms) > 1:
        best_sink = max(v for k, v in rates.items() if k.startswith("CloudTasksSink"))
        best_naive = max(rates[f"naive create_task in map p={p}"] for p in parallelisms)
        print(
            f"[{where}] best sink / best naive map (each at its faster parallelism): "
            f"{best_sink / best_naive:.1f}x ({'met' if best_sink / best_naive >= 5 else 'NOT met'})"
        )
    return rates


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--raw-records", type=int, default=6_000)
    parser.add_argument("--naive-records", type=int, default=9_000)
    parser.add_argument(
        "--ceiling", action="store_true", help="also run the PyFlink no-op ceiling job"
    )
    parser.add_argument(
        "--fused",
        action="store_true",
        help="also run the sink fused into the record map (set_chain_with_upstream())",
    )
    parser.add_argument(
        "--dispatch",
        action="store_true",
        help="run the queues (dispatching every task to a local receiver) instead of pausing them",
    )
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=20.0,
        help="also measure the main variants through a proxy adding this latency (0: skip)",
    )
    args = parser.parse_args()
    queues = "running queues dispatching to a receiver" if args.dispatch else "paused queues"
    print(
        f"{args.records:,} sink records, {args.raw_records:,} raw, {args.naive_records:,} naive;"
        f" {QUEUES} {queues}; ~130-byte JSON bodies"
    )
    print("\nloopback (the emulator answers in well under a millisecond):")
    measure(args, 0.0, full=True)
    if args.latency_ms > 0:
        print(f"\nwith {args.latency_ms:g} ms of service latency per call:")
        measure(args, args.latency_ms, full=False)


if __name__ == "__main__":
    main()
