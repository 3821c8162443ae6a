"""A ``grpc.aio`` channel on its own event-loop thread, behind a synchronous face.

Why: on a machine whose cores the job shares, client CPU per call bounds a sink that makes
many small calls. Measured against the Cloud Tasks emulator with 256 calls in flight and raw
protobuf requests, a ``grpc.aio`` call costs ~75-110 µs of client CPU, the synchronous
channel's ``future()`` 160-310 µs, the generated client in a thread pool 500-610 µs; several
synchronous channels were slower than one (each adds a polling thread). The Cloud Tasks sink
uses it. (The Pub/Sub sink does not: for its unary Publish at thousands of topics, synchronous
futures with batched waits cost less client CPU per record than this channel, measured with
``bench/sink_cpu.py``.)

The processing thread only appends the encoded request to an inbox and wakes the loop once per
batch (:meth:`AsyncMethod.future`); a thread waits on a call only when it reads its outcome
(:meth:`CallHandle.exception`), and done-callbacks (:meth:`CallHandle.add_done_callback`) run
on the loop thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from pyflink_gcp.core.channels import open_aio_channel
from pyflink_gcp.core.endpoints import Endpoint


class CallHandle:
    """A call started on an :class:`AsyncChannel`, read like a ``grpc.Future``."""

    __slots__ = ("_error", "_done", "_waited", "_callbacks", "_channel")

    def __init__(self, channel: AsyncChannel) -> None:
        self._error: BaseException | None = None
        self._done = False
        self._waited = False
        self._callbacks: list[Callable[[CallHandle], None]] | None = None
        self._channel = channel

    def done(self) -> bool:
        return self._done

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Waits for the call's end; its error, or None if it succeeded."""
        if not self._done:
            self._channel.wait_for(self)
        return self._error

    def add_done_callback(self, fn: Callable[[CallHandle], None]) -> None:
        """Call ``fn(self)`` when the call ends: on the loop thread, or at once on this thread
        if it already ended. ``fn`` must not block (it holds up every call of the channel)."""
        with self._channel._done:
            if not self._done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        fn(self)


class AsyncMethod:
    """One method of an :class:`AsyncChannel`; :meth:`future` starts a call of it."""

    __slots__ = ("_channel", "_call")

    def __init__(self, channel: AsyncChannel, call: Any) -> None:
        self._channel = channel
        self._call = call

    def future(self, request: Any, timeout: float, metadata: Any) -> CallHandle:
        """Starts one call (on the loop thread, soon) and returns its handle."""
        return self._channel._start(self._call, request, timeout, metadata)


class AsyncChannel:
    """A ``grpc.aio`` channel driven by its own event-loop thread (see the module docstring).

    Args:
        endpoint: Where to connect.
        transport: The service's generated AsyncIO transport (TLS channels with its scopes).
        default_host: The service's host when the endpoint names none.
        options: gRPC channel options.
        thread_name: The loop thread's name.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        transport: Any,
        default_host: str,
        options: Sequence[tuple[str, Any]],
        thread_name: str = "pyflink-gcp-io",
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._inbox: deque[tuple[CallHandle, Any, Any, float, Any]] = deque()
        # Calls started on the loop and not yet ended, so that close can settle them all.
        self._running: set[CallHandle] = set()
        self._scheduled = False
        self._closed = False
        self._done = threading.Condition()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=thread_name, daemon=True
        )
        self._thread.start()
        self._channel = self._run(self._open(endpoint, transport, default_host, options))

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=60)

    @staticmethod
    async def _open(
        endpoint: Endpoint, transport: Any, default_host: str, options: Sequence[tuple[str, Any]]
    ) -> Any:
        # An aio channel belongs to the loop it is created on.
        return open_aio_channel(endpoint, transport, default_host, options)

    def unary_unary(self, method: str, **kwargs: Any) -> AsyncMethod:
        """Binds ``method`` (with its serializers); the result's ``future`` starts a call."""
        return AsyncMethod(self, self._channel.unary_unary(method, **kwargs))

    def _start(self, call: Any, request: Any, timeout: float, metadata: Any) -> CallHandle:
        handle = CallHandle(self)
        if self._closed:  # never started: ends at once, CANCELLED
            self._cancelled(handle)
            return handle
        self._inbox.append((handle, call, request, timeout, metadata))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon_threadsafe(self._drain)
        return handle

    def _drain(self) -> None:
        # Reset the flag before reading the inbox: a request appended after the last pop then
        # schedules another drain.
        self._scheduled = False
        inbox, start, one, running = self._inbox, self._loop.create_task, self._one, self._running
        while inbox:
            item = inbox.popleft()
            running.add(item[0])
            start(one(*item))

    async def _one(
        self, handle: CallHandle, call: Any, request: Any, timeout: float, metadata: Any
    ) -> None:
        try:
            await call(request, timeout=timeout, metadata=metadata)
        except BaseException as exc:  # noqa: BLE001 - the caller classifies it
            handle._error = exc
        self._running.discard(handle)
        self._finish(handle)

    def _finish(self, handle: CallHandle) -> None:
        """Marks ``handle`` done, wakes its readers and runs its callbacks (outside the lock)."""
        with self._done:
            handle._done = True
            callbacks, handle._callbacks = handle._callbacks, None
            if handle._waited:
                self._done.notify_all()
        if callbacks:
            for fn in callbacks:
                fn(handle)

    def wait_for(self, handle: CallHandle) -> None:
        """Blocks until ``handle``'s call ended (or the channel closed)."""
        closed = False
        with self._done:
            handle._waited = True
            while not handle._done:
                if self._closed:
                    closed = True
                    break
                self._done.wait(0.5)
        if closed:
            self._cancelled(handle)

    def _cancelled(self, handle: CallHandle) -> None:
        if handle._done:
            return
        handle._error = handle._error or grpc.aio.AioRpcError(
            grpc.StatusCode.CANCELLED,
            grpc.aio.Metadata(),
            grpc.aio.Metadata(),
            "the channel was closed",
        )
        self._finish(handle)

    def close(self) -> None:
        """Cancels calls in flight and stops the loop thread; idempotent. Calls never
        started end CANCELLED (their callbacks run here)."""
        if self._closed:
            return
        self._closed = True
        self._scheduled = True  # later calls are never started; wait_for releases their readers
        try:
            self._run(self._channel.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            if not self._thread.is_alive():
                self._loop.close()
            with self._done:
                self._done.notify_all()
            while self._inbox:
                self._cancelled(self._inbox.popleft()[0])
            if not self._thread.is_alive():  # no call can end on the loop any more
                for handle in list(self._running):
                    self._cancelled(handle)
                self._running.clear()
