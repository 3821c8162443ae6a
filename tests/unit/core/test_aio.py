"""The asyncio channel's synchronous face: outcomes and done-callbacks reach every call and every
operation run on the loop, close never leaves one unsettled, and the loop's slots bound what
holds them without blocking it. Against a closed port, so every call fails fast; the
sinks' integration tests drive it against the emulators."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import grpc
import pytest
from google.pubsub_v1.services.publisher.transports.grpc_asyncio import (
    PublisherGrpcAsyncIOTransport,
)

from pyflink_gcp.core import aio
from pyflink_gcp.core.aio import (
    LOOP_THREAD_NAME,
    AsyncChannel,
    AsyncMethod,
    CallHandle,
    LoopSlots,
    LoopTasks,
    WorkQueue,
    loop_users,
)
from pyflink_gcp.core.endpoints import Endpoint
from pyflink_gcp.core.retry import status_name
from tests.support.loops import LOOPS, close_loops  # noqa: F401 - close_loops: the fixture
from tests.support.waiting import wait_for


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _method() -> tuple[AsyncChannel, AsyncMethod]:
    channel = AsyncChannel(
        Endpoint(host=f"127.0.0.1:{_closed_port()}", insecure=True),
        PublisherGrpcAsyncIOTransport,
        "pubsub.googleapis.com",
        [],
    )
    return channel, channel.unary_unary("/google.pubsub.v1.Publisher/Publish")


def test_done_callbacks_run_on_the_loop_thread_or_at_once_when_the_call_ended() -> None:
    channel, method = _method()
    try:
        seen: list[tuple[str, str | None]] = []
        ended = threading.Event()

        def record(handle) -> None:
            seen.append((threading.current_thread().name, status_name(handle.exception())))
            ended.set()

        # Hold the loop until the callback is added: against a closed port the call can end
        # before this thread gets to add it, which would run it here instead.
        gate = threading.Event()
        channel._loop.call_soon_threadsafe(gate.wait, 10)
        handle = method.future(b"", timeout=5.0, metadata=())
        handle.add_done_callback(record)
        gate.set()
        assert ended.wait(10)
        assert seen[0][0] == LOOP_THREAD_NAME and seen[0][1] in {"UNAVAILABLE", "DEADLINE_EXCEEDED"}
        handle.add_done_callback(record)  # already ended: runs here
        assert seen[1][0] == threading.current_thread().name and len(seen) == 2
        assert isinstance(handle.exception(), grpc.RpcError)
    finally:
        channel.close()


def test_many_methods_share_one_loop_and_every_call_reports_its_outcome() -> None:
    channel, publish = _method()
    get_topic = channel.unary_unary("/google.pubsub.v1.Publisher/GetTopic")
    try:
        handles = [m.future(b"", timeout=5.0, metadata=()) for m in (publish, get_topic) * 10]
        assert all(isinstance(h.exception(), grpc.RpcError) for h in handles)
        assert all(h.done() for h in handles)
    finally:
        channel.close()


def test_close_settles_calls_never_started_and_runs_their_callbacks() -> None:
    channel, method = _method()
    channel.close()
    channel.close()  # idempotent
    seen: list[str | None] = []
    handle = method.future(b"", timeout=30.0, metadata=())  # the loop is gone: never started
    handle.add_done_callback(lambda h: seen.append(status_name(h.exception())))
    assert handle.done() and seen == ["CANCELLED"]
    assert status_name(handle.exception()) == "CANCELLED"


def test_started_work_runs_on_the_loop_and_its_result_or_error_reaches_the_callbacks() -> None:
    import asyncio

    channel, _ = _method()
    try:
        ran_on: list[str] = []

        async def operation(value: int, fail: bool) -> list[int]:
            ran_on.append(threading.current_thread().name)
            await asyncio.sleep(0.01)  # a backoff: the loop runs the other operations meanwhile
            if fail:
                raise ValueError(f"operation {value} failed")
            return [value]

        seen: list[tuple[object, str]] = []
        handles = [channel.start(operation, i, i % 3 == 0) for i in range(9)]
        for handle in handles:
            handle.add_done_callback(
                lambda h: seen.append((h.exception(), threading.current_thread().name))
            )
        assert [h.result() for h in handles if _succeeded(h)] == [[1], [2], [4], [5], [7], [8]]
        for i in (0, 3, 6):
            with pytest.raises(ValueError, match=f"operation {i} failed"):
                handles[i].result()
        assert set(ran_on) == {LOOP_THREAD_NAME} and len(ran_on) == 9
        assert len(seen) == 9 and all(h.done() for h in handles)
        assert sum(isinstance(error, ValueError) for error, _ in seen) == 3
    finally:
        channel.close()


def _succeeded(handle: CallHandle) -> bool:
    return handle.exception() is None


def _start_long_backoff(tasks: LoopTasks) -> CallHandle:
    """Work that waits a minute on the loop (an operation's backoff), started and running."""
    started = threading.Event()

    async def long_backoff() -> None:
        started.set()
        await asyncio.sleep(60)

    handle = tasks.start(long_backoff)
    assert started.wait(10)
    return handle


def test_close_cancels_work_waiting_on_the_loop_and_refuses_later_work() -> None:
    channel, _ = _method()
    seen: list[str | None] = []
    handle = _start_long_backoff(channel)
    handle.add_done_callback(lambda h: seen.append(status_name(h.exception())))
    channel.close()
    assert handle.done() and seen == ["CANCELLED"]
    later = channel.start(asyncio.sleep, 60)
    assert later.done() and status_name(later.exception()) == "CANCELLED"


def test_a_server_streaming_method_is_called_by_work_on_the_loop() -> None:
    channel, _ = _method()
    stream = channel.unary_stream("/google.pubsub.v1.Subscriber/StreamingPull")

    async def read_all() -> list[bytes]:
        return [response async for response in stream(b"", timeout=5.0, metadata=())]

    try:
        handle = channel.start(read_all)
        assert status_name(handle.exception()) in {"UNAVAILABLE", "DEADLINE_EXCEEDED"}
    finally:
        channel.close()


def test_loop_slots_bound_the_holders_and_follow_a_shrinking_limit() -> None:
    import asyncio

    limit = [3]
    slots = LoopSlots(lambda: limit[0])
    most = [0]

    async def hold(seconds: float) -> None:
        await slots.acquire()
        try:
            most[0] = max(most[0], slots.in_use)
            await asyncio.sleep(seconds)
        finally:
            slots.release()

    async def main() -> None:
        await asyncio.gather(*(hold(0.01) for _ in range(10)))
        assert most[0] == 3 and slots.in_use == 0
        limit[0], most[0] = 1, 0
        await asyncio.gather(*(hold(0.01) for _ in range(4)))
        assert most[0] == 1
        # A waiter cancelled before its turn gives up its place, and no slot leaks.
        first = asyncio.ensure_future(hold(0.05))
        await asyncio.sleep(0)
        second = asyncio.ensure_future(hold(0.01))
        await asyncio.sleep(0)
        second.cancel()
        await asyncio.gather(first, second, return_exceptions=True)
        assert slots.in_use == 0

    asyncio.run(main())


def test_a_channel_that_cannot_open_leaves_no_loop_thread() -> None:
    class Refusing:
        @staticmethod
        def create_channel(*args: object, **kwargs: object) -> None:
            raise RuntimeError("no credentials")

    users = loop_users()
    with pytest.raises(RuntimeError, match="no credentials"):
        AsyncChannel(Endpoint(host="example.com:443"), Refusing, "x", [])
    assert loop_users() == users
    if users == 0:
        assert not [t for t in threading.enumerate() if t.name == LOOP_THREAD_NAME]


def test_channels_share_one_loop_thread_that_the_last_one_stops() -> None:
    users = loop_users()
    first, _ = _method()
    second, _ = _method()
    assert first._thread is second._thread and first._thread.name == LOOP_THREAD_NAME
    assert loop_users() == users + 2
    thread = first._thread
    first.close()
    assert thread.is_alive() and loop_users() == users + 1
    # The loop still runs the other channel's work.
    assert second.start(asyncio.sleep, 0, "slept").result(timeout=5) == "slept"
    second.close()
    assert loop_users() == users
    if users == 0:
        assert not thread.is_alive()


def test_loop_tasks_hold_the_loop_without_a_channel_and_close_cancels_their_work() -> None:
    users = loop_users()
    tasks = LoopTasks()
    channel, _ = _method()
    # One loop for both: work started either way runs on the same thread.
    assert tasks._thread is channel._thread and loop_users() == users + 2
    assert not hasattr(tasks, "_channel")
    ran_on: list[str] = []
    tasks.call_soon(lambda: ran_on.append(threading.current_thread().name))
    assert tasks.start(asyncio.sleep, 0, "slept").result(timeout=5) == "slept"
    assert ran_on == [LOOP_THREAD_NAME]
    handle = _start_long_backoff(tasks)
    tasks.close()
    assert status_name(handle.exception()) == "CANCELLED"
    assert not tasks.call_soon(lambda: None) and loop_users() == users + 1
    # The channel's work still runs on the loop.
    assert channel.start(asyncio.sleep, 0, "still").result(timeout=5) == "still"
    channel.close()
    assert loop_users() == users


def test_a_channel_opened_by_work_on_the_loop_opens_without_waiting_for_itself() -> None:
    outer, _ = _method()
    opened: list[AsyncChannel] = []

    async def open_one() -> None:
        opened.append(_method()[0])

    outer.start(open_one).result(timeout=5)
    assert opened[0]._thread is outer._thread
    opened[0].close()
    outer.close()


# WorkQueue: operations run in order by a bounded number of worker coroutines on a real
# event loop; handles read like futures; closing the loop ends what is queued.


LOOP_THREAD = LOOP_THREAD_NAME


def open_loop() -> AsyncChannel:
    """A real event-loop thread (its channel is never called)."""
    loop, _ = _method()
    LOOPS.append(loop)
    return loop


class Operations:
    """Coroutines that record when they run and wait for a gate before they end."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.running = 0
        self.max_running = 0
        self.threads: set[str] = set()
        self.gate = threading.Event()
        self.gate.set()

    async def op(self, i: int, fail: bool = False) -> list[int]:
        self.started.append(i)
        self.threads.add(threading.current_thread().name)
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            while not self.gate.is_set():
                await asyncio.sleep(0.005)
            await asyncio.sleep(0)
            if fail:
                raise RuntimeError(f"operation {i} failed")
            return [i]
        finally:
            self.running -= 1


def wait_until(predicate: Any, timeout: float = 5.0) -> None:
    wait_for(predicate, "the operations' state", timeout_s=timeout, interval_s=0.005)


@pytest.mark.usefixtures("close_loops")
def test_operations_run_in_order_on_the_loop_by_at_most_the_workers() -> None:
    loop = open_loop()
    queue = WorkQueue(loop.start, lambda: 3)
    ops = Operations()
    ops.gate.clear()
    outcomes = [queue.submit(ops.op, i) for i in range(20)]
    wait_until(lambda: ops.running == 3)
    assert queue.workers == 3 and queue.queued == 17
    ops.gate.set()
    assert [o.result(timeout=5) for o in outcomes] == [[i] for i in range(20)]
    assert ops.started == list(range(20)) and ops.max_running == 3
    assert ops.threads == {LOOP_THREAD}
    wait_until(lambda: queue.workers == 0)  # each worker ends once the queue is empty
    assert queue.queued == 0
    # A later submit starts a worker again.
    assert queue.submit(ops.op, 20).result(timeout=5) == [20]


@pytest.mark.usefixtures("close_loops")
def test_a_waiting_operation_holds_no_task_of_its_own() -> None:
    loop = open_loop()
    queue = WorkQueue(loop.start, lambda: 2)
    ops = Operations()
    ops.gate.clear()
    outcomes = [queue.submit(ops.op, i) for i in range(500)]
    wait_until(lambda: ops.running == 2)
    tasks = asyncio.run_coroutine_threadsafe(_count_tasks(), loop._loop).result(timeout=5)
    assert tasks <= 3  # the two workers, and the coroutine that counts
    ops.gate.set()
    for outcome in outcomes:
        outcome.result(timeout=5)


async def _count_tasks() -> int:
    return len(asyncio.all_tasks())


@pytest.mark.usefixtures("close_loops")
def test_outcomes_carry_errors_and_call_their_callbacks() -> None:
    loop = open_loop()
    queue = WorkQueue(loop.start, lambda: 1)
    ops = Operations()
    seen: list[tuple[str, BaseException | None]] = []
    ops.gate.clear()
    failing = queue.submit(ops.op, 1, True)
    ok = queue.submit(ops.op, 2)
    for outcome in (failing, ok):
        outcome.add_done_callback(
            lambda o: seen.append((threading.current_thread().name, o.exception()))
        )
    assert not failing.done()
    ops.gate.set()
    with pytest.raises(RuntimeError, match="operation 1 failed"):
        failing.result(timeout=5)
    assert ok.result(timeout=5) == [2]  # a failed operation does not stop the worker
    wait_until(lambda: len(seen) == 2)
    assert [thread for thread, _ in seen] == [LOOP_THREAD, LOOP_THREAD]
    assert isinstance(seen[0][1], RuntimeError) and seen[1][1] is None
    # A callback added to a completed outcome runs at once, on the caller's thread.
    late: list[str] = []
    ok.add_done_callback(lambda o: late.append(threading.current_thread().name))
    assert late == [threading.current_thread().name]


@pytest.mark.usefixtures("close_loops")
def test_closing_the_loop_ends_running_and_queued_operations_cancelled() -> None:
    loop = open_loop()
    queue = WorkQueue(loop.start, lambda: 2)
    ops = Operations()
    ops.gate.clear()
    outcomes = [queue.submit(ops.op, i) for i in range(6)]
    wait_until(lambda: ops.running == 2)
    loop.close()
    for outcome in outcomes:
        error = outcome.exception(timeout=5)
        assert isinstance(error, grpc.aio.AioRpcError)
        assert error.code() == grpc.StatusCode.CANCELLED
    assert queue.workers == 0 and queue.queued == 0
    # After the close, a submit ends at once, cancelled as well.
    late = queue.submit(ops.op, 7)
    assert late.done() and isinstance(late.exception(), grpc.aio.AioRpcError)
    assert queue.workers == 0


@pytest.mark.usefixtures("close_loops")
def test_exception_waits_for_the_end_within_its_timeout() -> None:
    loop = open_loop()
    queue = WorkQueue(loop.start, lambda: 1)
    ops = Operations()
    ops.gate.clear()
    outcome: CallHandle = queue.submit(ops.op, 1)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="within 0.05s"):
        outcome.exception(timeout=0.05)
    assert not outcome.done()
    assert time.monotonic() - started >= 0.05
    threading.Timer(0.05, ops.gate.set).start()
    assert outcome.result(timeout=5) == [1] and outcome.done()


@pytest.mark.usefixtures("close_loops")
def test_a_full_queue_makes_submit_wait_until_a_worker_takes_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(aio, "_ROOM_RECHECK_S", 30.0)  # only a worker's take wakes it in time
    loop = open_loop()
    queue = WorkQueue(loop.start, lambda: 1, max_queued=3)
    ops = Operations()
    ops.gate.clear()
    outcomes = [queue.submit(ops.op, 0)]
    wait_until(lambda: ops.running == 1)
    outcomes += [queue.submit(ops.op, i) for i in range(1, 4)]  # three queued behind it
    assert queue.queued == 3 and queue.waits == 0
    submitted = threading.Event()

    def fifth() -> None:
        outcomes.append(queue.submit(ops.op, 4))
        submitted.set()

    threading.Thread(target=fifth).start()
    assert not submitted.wait(0.2)  # the queue is full: the submit waits
    assert queue.queued == 3
    started = time.monotonic()
    ops.gate.set()  # the worker takes the next operation, which makes room
    assert submitted.wait(10) and time.monotonic() - started < 10
    assert [o.result(timeout=5) for o in outcomes] == [[i] for i in range(5)]
    assert queue.waits == 1


@pytest.mark.usefixtures("close_loops")
def test_a_waiting_submit_goes_on_once_half_the_queue_was_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Woken at every take, a flush of thousands of requests switched threads per request."""
    monkeypatch.setattr(aio, "_ROOM_RECHECK_S", 30.0)  # only a worker's take wakes it in time
    loop = open_loop()
    queue = WorkQueue(loop.start, lambda: 1, max_queued=4)
    released = [threading.Event() for _ in range(6)]

    async def op(i: int) -> int:
        while not released[i].is_set():
            await asyncio.sleep(0.005)
        return i

    outcomes = [queue.submit(op, 0)]
    wait_until(lambda: queue.queued == 0)  # the worker runs operation 0
    outcomes += [queue.submit(op, i) for i in range(1, 5)]  # the queue is full
    submitted = threading.Event()

    def sixth() -> None:
        outcomes.append(queue.submit(op, 5))
        submitted.set()

    threading.Thread(target=sixth).start()
    released[0].set()  # one taken: 3 of 4 still wait
    wait_until(lambda: queue.queued == 3)
    assert not submitted.wait(0.3)
    released[1].set()  # two taken: half the queue
    assert submitted.wait(10)
    for event in released:
        event.set()
    assert [o.result(timeout=5) for o in outcomes] == list(range(6))
    assert queue.waits == 1


@pytest.mark.usefixtures("close_loops")
def test_a_full_queue_whose_loop_closed_does_not_hold_a_submit() -> None:
    loop = open_loop()
    queue = WorkQueue(loop.start, lambda: 1, max_queued=2)
    ops = Operations()
    ops.gate.clear()
    outcomes = [queue.submit(ops.op, i) for i in range(3)]
    wait_until(lambda: ops.running == 1)
    loop.close()  # fails the running and the queued operations
    for outcome in outcomes:
        assert outcome.exception(timeout=5) is not None
    late = queue.submit(ops.op, 3)  # no worker to wait for: it returns at once
    assert late.exception(timeout=5) is not None
