"""``grpc.aio`` channels on the process's event-loop thread, behind a synchronous face.

What: an :class:`AsyncChannel` is a ``grpc.aio`` channel on an asyncio event loop that a thread
of its own runs; every channel of the process shares that one loop and thread
(``pyflink-gcp-io``), started with the first channel and stopped with the last. The processing
thread starts work there without waiting for it: one unary call (:meth:`AsyncMethod.future`),
or a whole operation, a coroutine that may make several calls
(:meth:`AsyncChannel.unary_stream`) and back off between
them with ``await asyncio.sleep`` (:meth:`AsyncChannel.start`). Either way it gets a
:class:`CallHandle`, read like a ``grpc.Future``: done-callbacks run on the loop thread when the
work ends, and carry its result or error. Work that opens channels of its own on the loop
starts there through a :class:`LoopTasks`, the same face without a channel.

Why: a sink that makes many small calls at once is bound by the client CPU of each call and by
the threads that would wait on them. On the loop, a call waiting for its answer or an operation
waiting out its backoff holds no thread; a ``grpc.aio`` call costs less client CPU than a
synchronous channel's future or a generated client on a thread pool; and one loop serves every
call of the process, where each synchronous channel adds a polling thread. The Cloud Tasks and
Bigtable sinks use it, and BigQuery's lookups and shared AppendRows connections. (The Pub/Sub
sink does not: for its unary Publish at thousands of topics, synchronous futures with batched
waits cost less client CPU per record.) One loop rather than one per channel, because
``grpc.aio`` wakes every loop of the process for each event (see :class:`_SharedLoop`).

The processing thread only appends the work to an inbox and wakes the loop once per batch of
it; a thread waits on a handle only when it reads its outcome (:meth:`CallHandle.exception`),
so an in-flight window that learns outcomes by done-callback frees its slots with no thread
waiting on any request. :class:`LoopSlots` bounds the calls that the operations of one loop
make at once (a quota window's shrinking limit, say) without blocking the loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import grpc

from pyflink_gcp.core.channels import open_aio_channel
from pyflink_gcp.core.endpoints import Endpoint

#: What :meth:`AsyncChannel.start` runs: a coroutine function (or any callable returning an
#: awaitable), called on the loop thread with the arguments given.
Work = Callable[..., Awaitable[Any]]


def closed_error() -> grpc.aio.AioRpcError:
    """The error of work cut short because its channel was closed (status CANCELLED)."""
    return grpc.aio.AioRpcError(
        grpc.StatusCode.CANCELLED,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(),
        "the channel was closed",
    )


class _HandleOwner(Protocol):
    """What completes handles: a :class:`LoopTasks` (an :class:`AsyncChannel`, say) or a
    :class:`WorkQueue`."""

    _done: threading.Condition

    def wait_for(self, handle: CallHandle, timeout: float | None = None) -> None: ...


class CallHandle:
    """Work started on a :class:`LoopTasks` (or queued on a :class:`WorkQueue`), read like
    a ``grpc.Future``. Its owner's lock guards it, so a handle holds no lock of its own."""

    __slots__ = ("_error", "_result", "_done", "_waited", "_callbacks", "_channel")

    def __init__(self, owner: _HandleOwner) -> None:
        self._error: BaseException | None = None
        self._result: Any = None
        self._done = False
        self._waited = False
        self._callbacks: list[Callable[[CallHandle], None]] | None = None
        self._channel = owner

    def done(self) -> bool:
        return self._done

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Waits for the work's end; its error, or None if it succeeded.

        Raises:
            TimeoutError: It had not ended within ``timeout`` seconds.
        """
        if not self._done:
            self._channel.wait_for(self, timeout)
        return self._error

    def result(self, timeout: float | None = None) -> Any:
        """Waits for the work's end; what it returned (a unary call's response), or raises its
        error."""
        error = self.exception(timeout)
        if error is not None:
            raise error
        return self._result

    def add_done_callback(self, fn: Callable[[CallHandle], None]) -> None:
        """Call ``fn(self)`` when the work ends: on the loop thread, or at once on this thread
        if it already ended. ``fn`` must not block (it holds up all work of the channel)."""
        with self._channel._done:
            if not self._done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        fn(self)


def _settle(done: threading.Condition, handle: CallHandle) -> None:
    """Marks ``handle`` done under its owner's lock ``done``, wakes its readers and runs its
    callbacks (outside the lock: a callback may start more work)."""
    with done:
        handle._done = True
        callbacks, handle._callbacks = handle._callbacks, None
        if handle._waited:
            done.notify_all()
    if callbacks:
        for fn in callbacks:
            fn(handle)


class AsyncMethod:
    """One unary method of an :class:`AsyncChannel`; :meth:`future` starts a call of it."""

    __slots__ = ("_channel", "_call")

    def __init__(self, channel: AsyncChannel, call: Any) -> None:
        self._channel = channel
        self._call = call

    def future(self, request: Any, timeout: float, metadata: Any) -> CallHandle:
        """Starts one call (on the loop thread, soon) and returns its handle."""
        return self._channel.start(_unary, self._call, request, timeout, metadata)


async def _unary(call: Any, request: Any, timeout: float, metadata: Any) -> Any:
    return await call(request, timeout=timeout, metadata=metadata)


class LoopSlots:
    """A bound on what holds a slot at once on one event loop, read from ``limit`` at every
    acquisition, so a bound that shrinks (a :class:`~pyflink_gcp.core.quota.QuotaWindow`'s
    limit after quota errors) holds back the next calls and one that grows back lets them go.

    Used from coroutines on the loop thread only (no lock); waiting never blocks the loop.

    Args:
        limit: Returns how many slots may be held now (at least 1).
    """

    __slots__ = ("_limit", "_waiters", "in_use")

    def __init__(self, limit: Callable[[], int]) -> None:
        self._limit = limit
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.in_use = 0

    async def acquire(self) -> None:
        """Hold a slot, waiting (first come, first served) while all are held."""
        if not self._waiters and self.in_use < self._limit():
            self.in_use += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # the releasing coroutine hands its slot over
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed over, but this coroutine will not use it
            else:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        """Give back a slot; the next waiters get it while the limit allows."""
        self.in_use -= 1
        waiters, limit = self._waiters, self._limit()
        while waiters and self.in_use < limit:
            self.in_use += 1
            waiters.popleft().set_result(None)


#: The name of the thread that runs the process's event loop.
LOOP_THREAD_NAME = "pyflink-gcp-io"


class _SharedLoop:
    """The process's one event loop, on a thread of its own, for every :class:`LoopTasks`
    (channels among them) open in it; started by the first and stopped when the last closes.

    Why one: ``grpc.aio`` has one completion queue per process, and wakes every event loop
    bound to it for each event (grpc/grpc#25364): with a loop per channel, every answer woke
    every loop thread, each taking the GIL to find nothing to do, and all but one logged a
    ``BlockingIOError`` from ``PollerCompletionQueue._handle_events``.
    """

    _lock = threading.Lock()
    _current: _SharedLoop | None = None

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.users = 0
        self.thread = threading.Thread(
            target=self.loop.run_forever, name=LOOP_THREAD_NAME, daemon=True
        )
        self.thread.start()

    @classmethod
    def acquire(cls) -> _SharedLoop:
        with cls._lock:
            shared = cls._current
            if shared is None:
                shared = cls._current = _SharedLoop()
            shared.users += 1
            return shared

    def release(self) -> None:
        """One user fewer; the last one stops the loop and its thread."""
        with _SharedLoop._lock:
            self.users -= 1
            if self.users:
                return
            _SharedLoop._current = None
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout=10)
            if not self.thread.is_alive():
                self.loop.close()


def loop_users() -> int:
    """How many :class:`LoopTasks` (channels among them) use the process's event loop (0: no
    loop runs)."""
    with _SharedLoop._lock:
        current = _SharedLoop._current
        return 0 if current is None else current.users


class LoopTasks:
    """Work started on the process's event loop from any thread, behind a synchronous face:
    :meth:`start` runs a coroutine there and returns its :class:`CallHandle`, :meth:`call_soon`
    a callback, and :meth:`close` cancels what still runs. Holds the loop (its thread runs while
    any :class:`LoopTasks` is open) and no channel: for work that opens channels of its own on
    the loop (BigQuery's shared AppendRows connections); :class:`AsyncChannel` adds one.
    """

    def __init__(self) -> None:
        self._shared = _SharedLoop.acquire()
        self._loop = self._shared.loop
        self._thread = self._shared.thread
        self._inbox: deque[tuple[CallHandle, Work, tuple[Any, ...]]] = deque()
        # Work started on the loop and not yet ended, so that close can settle it all.
        self._running: dict[CallHandle, asyncio.Task[None]] = {}
        self._scheduled = False
        self._closed = False
        self._done = threading.Condition()

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=60)

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> bool:
        """Runs ``fn(*args)`` on the loop thread, soon, from any thread; False (and nothing
        runs) once the channel is closing. ``fn`` must not block."""
        if self._closed:
            return False
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop closed meanwhile
            return False
        return True

    def start(self, work: Work, *args: Any) -> CallHandle:
        """Runs ``await work(*args)`` on the loop thread (soon) and returns its handle, whose
        result is what ``work`` returned. Never blocks; work started after :meth:`close` ends
        at once, CANCELLED."""
        handle = CallHandle(self)
        if self._closed:
            self._cancelled(handle)
            return handle
        self._inbox.append((handle, work, args))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon_threadsafe(self._drain)
        return handle

    def _drain(self) -> None:
        # Reset the flag before reading the inbox: work appended after the last pop then
        # schedules another drain.
        self._scheduled = False
        inbox, start, one, running = self._inbox, self._loop.create_task, self._one, self._running
        while inbox:
            handle, work, args = inbox.popleft()
            running[handle] = start(one(handle, work, args))

    async def _one(self, handle: CallHandle, work: Work, args: tuple[Any, ...]) -> None:
        try:
            handle._result = await work(*args)
        except asyncio.CancelledError:
            handle._error = closed_error()
        except BaseException as exc:  # noqa: BLE001 - the caller classifies it
            handle._error = exc
        self._running.pop(handle, None)
        self._finish(handle)

    def _finish(self, handle: CallHandle) -> None:
        _settle(self._done, handle)

    def wait_for(self, handle: CallHandle, timeout: float | None = None) -> None:
        """Blocks until ``handle``'s work ended (or the channel closed).

        Raises:
            TimeoutError: It had not ended within ``timeout`` seconds.
        """
        closed = False
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._done:
            handle._waited = True
            while not handle._done:
                if self._closed:
                    closed = True
                    break
                left = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
                if left <= 0:
                    raise TimeoutError(f"the work had not ended within {timeout:g}s")
                self._done.wait(left)
        if closed:
            self._cancelled(handle)

    def _cancelled(self, handle: CallHandle) -> None:
        if handle._done:
            return
        handle._error = handle._error or closed_error()
        self._finish(handle)

    async def _shutdown(self) -> None:
        """Cancel the work still running (an operation waiting out its backoff) and let it
        end."""
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        """Cancels work in flight (the last user of the loop stops its thread); idempotent.
        Work never started ends CANCELLED (its callbacks run here). Never from work on the
        loop: it waits for the loop."""
        if self._closed:
            return
        self._closed = True
        self._scheduled = True  # later work is never started; wait_for releases its readers
        try:
            self._run(self._shutdown())
        finally:
            self._shared.release()
            with self._done:
                self._done.notify_all()
            while self._inbox:
                self._cancelled(self._inbox.popleft()[0])
            # What _shutdown did not see end (it timed out) will not end on the loop now.
            for handle in list(self._running):
                self._cancelled(handle)
            self._running.clear()


class AsyncChannel(LoopTasks):
    """A ``grpc.aio`` channel driven by the process's event-loop thread (see the module
    docstring); every channel of the process shares that loop.

    Args:
        endpoint: Where to connect.
        transport: The service's generated AsyncIO transport (TLS channels with its scopes).
        default_host: The service's host when the endpoint names none.
        options: gRPC channel options.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        transport: Any,
        default_host: str,
        options: Sequence[tuple[str, Any]],
    ) -> None:
        super().__init__()
        try:
            if threading.current_thread() is self._thread:
                # Opened by work on the loop (a callback): it cannot wait for itself.
                self._channel = open_aio_channel(endpoint, transport, default_host, options)
            else:
                self._channel = self._run(self._open(endpoint, transport, default_host, options))
        except BaseException:
            self._shared.release()  # no loop thread outlives the channels that use it
            raise

    @staticmethod
    async def _open(
        endpoint: Endpoint, transport: Any, default_host: str, options: Sequence[tuple[str, Any]]
    ) -> Any:
        # An aio channel belongs to the loop it is created on.
        return open_aio_channel(endpoint, transport, default_host, options)

    def unary_unary(self, method: str, **kwargs: Any) -> AsyncMethod:
        """Binds ``method`` (with its serializers); the result's ``future`` starts a call."""
        return AsyncMethod(self, self._channel.unary_unary(method, **kwargs))

    def unary_stream(self, method: str, **kwargs: Any) -> Any:
        """Binds the server-streaming ``method`` (with its serializers): a ``grpc.aio``
        multi-callable, ``(request, timeout=, metadata=) -> async iterator of responses``, to
        be called only by work on this channel's loop (:meth:`start`)."""
        return self._channel.unary_stream(method, **kwargs)

    async def _shutdown(self) -> None:
        """Close the channel (calls in flight fail), then cancel the work still running."""
        await self._channel.close()
        await super()._shutdown()


#: The longest a submit waiting for room sleeps before it looks again (a worker's take
#: normally wakes it at once).
_ROOM_RECHECK_S = 0.5


class WorkQueue:
    """Operations run in order by at most ``workers`` coroutines on one event loop.

    :meth:`submit` appends an operation and returns its :class:`CallHandle` at once; a worker
    coroutine (started through ``start``, :meth:`AsyncChannel.start`) takes the operations in
    order and runs them, and ends when the queue is empty; the next submit starts one again.

    Why not a task per operation: a checkpoint's flush at thousands of destinations starts a
    request for each at once. Started each as a task of its own, every waiting request holds a
    task, its coroutines and the future it waits on; so many objects, in proportion to the
    destinations, outlive the young generations of Python's garbage collector and make its full
    collections, which walk every object of the worker, frequent. Queued, a waiting request is
    its arguments and its handle; only the running operations hold coroutines.

    Thread-safe: :meth:`submit` runs on the processing thread, the workers on the loop; the
    handles are completed on the loop thread (or, for operations a closing loop never ran, on
    the thread that closes it).

    The queue itself is bounded by ``max_queued``: a subtask whose loop cannot send as fast as
    its flushes hand it requests (10,000 tables at 1-s checkpoints) would otherwise keep the
    requests of several checkpoints queued, each with its entries and records. Past the bound
    :meth:`submit` waits, which is Flink backpressure, until the workers have taken the queue
    down to half the bound: woken at every operation taken, a flush of 10,000 requests woke
    the processing thread 9,000 times, each a switch of threads that costs more CPU than
    queueing the request it made room for.

    Args:
        start: Starts a coroutine function on the loop: ``start(work, *args) -> CallHandle``.
        workers: Operations running at once at most (at least 1), read at every submit.
        max_queued: Operations waiting for a worker at most; None: no bound.
    """

    def __init__(
        self,
        start: Callable[..., CallHandle],
        workers: Callable[[], int],
        max_queued: int | None = None,
    ) -> None:
        self._start = start
        self._limit = workers
        self._max_queued = max_queued
        #: A submit waiting for room goes on once no more than this many wait.
        self._resume_at = (max_queued or 0) // 2
        lock = threading.Lock()
        self._done = threading.Condition(lock)
        #: Woken when a worker takes an operation (or the queue is failed), for submits that
        #: wait for room.
        self._room = threading.Condition(lock)
        self._waiting_for_room = 0
        self._pending: deque[tuple[CallHandle, Work, tuple[Any, ...]]] = deque()
        self._workers = 0
        #: How often a submit waited for room.
        self.waits = 0

    @property
    def queued(self) -> int:
        """Operations submitted and not yet taken by a worker."""
        return len(self._pending)

    @property
    def workers(self) -> int:
        """Worker coroutines started and not yet ended."""
        return self._workers

    def submit(self, work: Work, *args: Any) -> CallHandle:
        """Queue ``await work(*args)`` and start a worker if fewer than the limit run. Blocks
        only while ``max_queued`` operations wait (never on the loop's own thread). Returns the
        operation's handle."""
        handle = CallHandle(self)
        max_queued = self._max_queued
        if max_queued is not None and len(self._pending) >= max_queued:
            self._wait_for_room(max_queued)
        self._pending.append((handle, work, args))
        with self._done:
            if self._workers >= self._limit():
                return handle
            self._workers += 1
        try:
            worker = self._start(self._work)
        except BaseException:
            with self._done:
                self._workers -= 1
            raise
        worker.add_done_callback(self._worker_ended)
        return handle

    def _wait_for_room(self, max_queued: int) -> None:
        """Wait while ``max_queued`` operations wait and a worker runs to take them (a queue
        without a worker gets one from the submit itself): until half of them were taken."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            return  # on the loop: waiting here would stop the workers that make room
        with self._room:
            if len(self._pending) < max_queued or not self._workers:
                return
            self.waits += 1
            self._waiting_for_room += 1
            try:
                while len(self._pending) > self._resume_at and self._workers:
                    self._room.wait(_ROOM_RECHECK_S)
            finally:
                self._waiting_for_room -= 1

    async def _work(self) -> None:
        """One worker: run the queued operations in order until none is left."""
        pending = self._pending
        while True:
            with self._done:
                if not pending:
                    self._workers -= 1
                    if self._waiting_for_room:
                        self._room.notify_all()  # no worker left: a waiting submit starts one
                    return
                handle, work, args = pending.popleft()
                if self._waiting_for_room and len(pending) <= self._resume_at:
                    self._room.notify()
            try:
                handle._result = await work(*args)
            except asyncio.CancelledError:
                self._finish(handle, closed_error())
                raise  # the loop is closing: _worker_ended fails what is still queued
            except BaseException as exc:  # noqa: BLE001 - the handle carries it
                self._finish(handle, exc)
            else:
                self._finish(handle, None)

    def _worker_ended(self, worker: CallHandle) -> None:
        """A worker's end: one cut short (its loop closed, or it never started) leaves the
        queue to no one, so every queued operation ends with its error."""
        error = worker.exception()
        if error is None:
            return  # it ran the queue empty and counted itself out
        with self._done:
            self._workers -= 1
            left = list(self._pending)
            self._pending.clear()
            self._room.notify_all()
        for handle, _work, _args in left:
            self._finish(handle, error)

    def _finish(self, handle: CallHandle, error: BaseException | None) -> None:
        handle._error = error
        _settle(self._done, handle)

    def wait_for(self, handle: CallHandle, timeout: float | None = None) -> None:
        """Blocks until ``handle``'s operation ended.

        Raises:
            TimeoutError: It had not ended within ``timeout`` seconds.
        """
        with self._done:
            handle._waited = True
            if not self._done.wait_for(lambda: handle._done, timeout):
                raise TimeoutError(f"the work had not ended within {timeout:g}s")

    def __repr__(self) -> str:
        return f"WorkQueue({len(self._pending)} queued, {self._workers} workers)"
