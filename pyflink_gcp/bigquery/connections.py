"""A subtask's pool of AppendRows connections on the default stream, shared by all its tables.

Without a pool every table that has rows to send opens an AppendRows connection of its own and
closes it when it has sent them, so a subtask writing 10,000 tables opens 10,000 connections
per checkpoint. BigQuery lets one connection on the default stream carry appends to many
tables (its documentation calls it multiplexing, and recommends it beyond about 20 concurrent
connections). Google's Java client does it in a connection pool per location: 2 to 20
connections by default, a table kept on its connection until that one is loaded (then the
least loaded one, or a new one below the maximum), every request naming its table's stream,
the writer schema sent whenever the table or schema differs from the previous request's,
requests of every table answered in order per connection, an error answer failing only its
request, and a broken connection re-sending everything it carried on a new one.

The sink sends the writer schema with every request, as on a connection of its own: a request
may follow others whose answers are not in yet, and a backend that drops a connection's schema
with a rejected request (the emulator does) would reject the next request's rows, which must
never be mistaken for bad rows. It costs a few hundred bytes per request.

Here a subtask holds at most ``channel_count`` gRPC channels per project and location, each
carrying one AppendRows connection at a time. A table's sender leases a connection (a new one
while fewer than ``channel_count`` are open and all are in use, else the least loaded) for as
long as it has requests in flight, so its responses come back in its own order. A connection lives across
checkpoints; it stops taking new leases at half its call deadline (``retiring``) and closes
when its last lease is released, so no call runs into its deadline in normal operation. When a
connection fails, every lease with requests on it receives the error, and each table's sender
re-sends its own unanswered requests with its own backoff and retry deadline
(:mod:`pyflink_gcp.bigquery.sender`), exactly as when it had a connection of its own.

Each channel is a ``grpc.aio`` channel on the process's event-loop thread
(:mod:`pyflink_gcp.core.aio`): the processing thread appends a request's parts
(:class:`~pyflink_gcp.bigquery.client.PendingAppend`) to the connection's inbox and wakes the
loop once per batch of them; a writer coroutine builds each message and puts it on the wire,
and a reader coroutine hands each response to the lease that sent the request, whose callback
settles it (no thread waits on a table's answers). A synchronous bidirectional stream
needs a thread that takes the requests and another that reads the responses, each taking the
GIL from the busy processing thread for every request: beside such a thread an append cost
about two and a half times the client CPU it costs on an event loop (``python bench/grpc_floor.py
--busy``, bench/README.md).

The routing header of a shared connection names the location (``write_location=projects/P/
locations/L``, from the table's metadata), as the Java client's does; where the location is not
known, the stream of the first table on the connection.

BUFFERED streams keep a connection each: BigQuery allows one connection per
application-created stream.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import grpc

from pyflink_gcp.bigquery.client import (
    APPEND_ROWS_METHOD,
    AppendRowsRequest,
    AppendRowsResponse,
    PendingAppend,
)
from pyflink_gcp.core.aio import CallHandle, LoopTasks, closed_error
from pyflink_gcp.core.status import StatusError

_LOG = logging.getLogger("pyflink_gcp.bigquery")

#: Why a lease waited longer than its connection's call deadline for an answer.
_STUCK = "no AppendRows response within the connection's deadline"


class SharedConnection:
    """One AppendRows call carrying the requests of many tables, answered in order.

    Requests are queued under ``_lock`` together with the lease they belong to, so the order of
    ``_waiting`` is the order of the requests on the wire and the reader can hand each
    response to its lease. The call itself lives on the event loop: :meth:`_run` opens it
    there, writes the queued requests and reads the responses.
    """

    def __init__(
        self,
        loop: LoopTasks,
        slot: list[Any],
        routing: str,
        timeout_s: float,
        pool: ConnectionPool,
    ) -> None:
        self._lock = threading.Lock()
        self._slot = slot
        self._routing = routing
        self._loop = loop
        self._pool = pool
        self._timeout_s = timeout_s
        self._inbox: deque[PendingAppend] = deque()
        self._waiting: deque[Lease] = deque()
        #: A wake-up of the writer is on its way (reset by the writer before it drains).
        self._scheduled = False
        self._wake = asyncio.Event()  # bound to the loop at its first use there
        self._call: Any = None
        self._write_error: BaseException | None = None
        self._retire_at = time.monotonic() + timeout_s / 2
        self.error: BaseException | None = None
        self.leases = 0

    def start(self) -> None:
        """Start the call on the loop (with its slot's channel). Never under the pool's lock:
        a call that ends before its done-callback is added (a refused endpoint fails at once,
        and so does work started on a closed loop) runs :meth:`_ended` on this thread, and
        that takes the pool's lock."""
        # Ended also when the channel closes before the call started: _ended settles it all.
        self._loop.start(self._run, self._slot, self._routing).add_done_callback(self._ended)

    @property
    def load(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._waiting)

    @property
    def retiring(self) -> bool:
        """Past half its call deadline (or failed): takes no new lease."""
        return self.error is not None or time.monotonic() >= self._retire_at

    def send(self, lease: Lease, request: PendingAppend) -> None:
        """Send ``request`` for ``lease`` (built when the writer puts it on the wire). Never
        blocks nor raises: on a failed connection the lease receives the connection's error as
        this request's answer."""
        with self._lock:
            error = self.error
            if error is None:
                self._waiting.append(lease)
                self._inbox.append(request)
                if self._scheduled:
                    return
                self._scheduled = True
        if error is None:
            # A closing channel ends the call, and the lease receives that (``_ended``).
            self._loop.call_soon(self._wake.set)
            return
        lease.deliver(error)

    async def _run(self, slot: list[Any], routing: str) -> BaseException:
        """The call, from its start to its end, on the loop (its slot's channel opened first,
        if it is the slot's first); returns the error that ended it."""
        writer = None
        try:
            self._call = call = self._pool._method(slot)(
                metadata=(("x-goog-request-params", routing),), timeout=self._timeout_s
            )
            if self.error is not None:  # closed before the call started
                call.cancel()
            writer = asyncio.get_running_loop().create_task(self._write(call))
            return await self._read(call)
        except asyncio.CancelledError:
            # Closed (the call or the loop), or cancelled by a write that failed.
            return self.error or self._write_error or closed_error()
        except Exception as exc:  # noqa: BLE001 - every waiting lease receives it
            return exc
        finally:
            if writer is not None:
                writer.cancel()
            if self._call is not None:
                self._call.cancel()  # ended by a bad answer, it would stay open otherwise

    def _ended(self, run: CallHandle) -> None:
        """The call ended (or never started): every request still waiting for an answer
        receives its error, and the pool frees the slot."""
        error = self._fail(run.exception() or run.result())
        with self._lock:
            waiting, self._waiting = self._waiting, deque()
            self._inbox.clear()
        for lease in waiting:
            lease.deliver(error)
        self._pool._ended(self)

    async def _write(self, call: Any) -> None:
        """Build the queued requests and put them on the wire, in order, whenever a send wakes
        it (one message alive at a time, not one per queued request)."""
        inbox, wake = self._inbox, self._wake
        try:
            while True:
                # Reset before draining: a request queued after the last pop wakes it again.
                self._scheduled = False
                while inbox:
                    await call.write(inbox.popleft().build())
                await wake.wait()
                wake.clear()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the reader ends the call with it
            # A call that failed has its own error, which the reader receives; any other
            # write error would leave the reader waiting for answers that never come.
            self._write_error = exc
            call.cancel()

    async def _read(self, call: Any) -> BaseException:
        """Hand each response to the lease of its request; the error that ended the call."""
        waiting = self._waiting
        while True:
            response = await call.read()
            if response is grpc.aio.EOF:
                return StatusError(
                    grpc.StatusCode.UNAVAILABLE, "the AppendRows stream ended without a response"
                )
            with self._lock:
                lease = waiting.popleft() if waiting else None
            if lease is None:
                return StatusError(
                    grpc.StatusCode.INTERNAL, "an AppendRows response nobody waits for"
                )
            lease.deliver(response)

    def _fail(self, error: BaseException) -> BaseException:
        """Record the connection's error (the first one stays); returns it."""
        with self._lock:
            if self.error is None:
                self.error = error
            return self.error

    def close(self) -> None:
        """End the call; leases still waiting receive its cancellation."""
        self._fail(StatusError(grpc.StatusCode.CANCELLED, "the connection was closed"))
        self._loop.call_soon(self._cancel)

    def _cancel(self) -> None:
        if self._call is not None:
            self._call.cancel()


class Lease:
    """A table sender's use of a shared connection while it has requests in flight.

    Each answer (a response, or the connection's error) goes, in the order of the lease's
    requests, to ``on_answer`` on the event-loop thread; without one it waits in a
    queue for :meth:`receive`. Has the interface of
    :class:`~pyflink_gcp.bigquery.client.AppendConnection`, which a BUFFERED stream's sender
    uses instead.
    """

    __slots__ = ("connection", "answers", "_on_answer", "_released")

    def __init__(
        self, connection: SharedConnection, on_answer: Callable[[Any], None] | None = None
    ) -> None:
        self.connection = connection
        self.answers: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._on_answer = on_answer
        self._released = False

    @property
    def retiring(self) -> bool:
        return self.connection.retiring

    def send(self, request: PendingAppend) -> None:
        self.connection.send(self, request)

    def deliver(self, answer: Any) -> None:
        """Hand ``answer`` (a response or an exception) to the lease's owner."""
        if self._on_answer is not None:
            self._on_answer(answer)
        else:
            self.answers.put(answer)

    def receive(self) -> Any:
        """The answer to this lease's oldest unanswered request (a lease without a callback).

        Raises:
            grpc.RpcError | StatusError: The connection failed before answering it.
        """
        try:
            answer = self.answers.get(timeout=self.connection._timeout_s + 30)
        except queue.Empty:
            # The call deadline ends every call; this only guards against a lost answer.
            self.connection.close()
            raise StatusError(grpc.StatusCode.DEADLINE_EXCEEDED, _STUCK) from None
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def abort(self) -> None:
        """Close the shared connection: every request on it receives the error."""
        self.connection.close()

    def close(self) -> None:
        """Give the connection back (it stays open for other tables)."""
        if not self._released:
            self._released = True
            self.connection._pool._release(self.connection)


class ConnectionPool:
    """At most ``channel_count`` shared AppendRows connections per project and location.

    A slot is a channel, opened on the loop by its first connection and kept; a connection is
    opened on a slot when a lease needs it, and replaced on the same slot when it failed or
    retired. No thread ever waits for the loop here: a lease may be taken by work on the loop
    (a table's answer sends its next request), and a thread holding the pool's lock while it
    waited for the loop would stop that work, and the loop with it.

    Args:
        loop: Runs the connections (and the channels' opening and closing); the pool closes
            it.
        open_channel: Opens a ``grpc.aio`` channel to the Storage Write API, with a TCP
            connection of its own; called on the loop.
        channel_count: Channels per project and location at most.
        timeout_s: Each AppendRows call's deadline (it retires at half of it).
    """

    def __init__(
        self,
        loop: LoopTasks,
        open_channel: Callable[[], Any],
        *,
        channel_count: int,
        timeout_s: float,
    ) -> None:
        self._loop = loop
        self._open_channel = open_channel
        self._size = channel_count
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        #: Per (project, location): a slot per channel, [channel, method, connection or None];
        #: the channel and its AppendRows method are None until the loop opened them.
        self._slots: dict[tuple[str, str | None], list[list[Any]]] = {}
        self._retired: set[SharedConnection] = set()
        self._closed = False
        #: AppendRows connections opened so far.
        self.connections_opened = 0

    @property
    def channels(self) -> int:
        """Slots, each a gRPC channel (opened by its first connection)."""
        with self._lock:
            return sum(len(slots) for slots in self._slots.values())

    def _method(self, slot: list[Any]) -> Any:
        """The slot's AppendRows method, its channel opened if it is not yet (on the loop)."""
        if slot[1] is None:
            channel = self._open_channel()
            with self._lock:
                closed = self._closed
                if not closed:
                    slot[0] = channel
                    slot[1] = channel.stream_stream(
                        APPEND_ROWS_METHOD,
                        request_serializer=AppendRowsRequest.SerializeToString,
                        response_deserializer=AppendRowsResponse.FromString,
                    )
            if closed:
                # Closed meanwhile: the channel would outlive the pool.
                asyncio.get_running_loop().create_task(channel.close())
                raise StatusError(grpc.StatusCode.CANCELLED, "the connection pool is closed")
        return slot[1]

    def acquire(
        self,
        stream: str,
        project: str,
        location: str | None,
        on_answer: Callable[[Any], None] | None = None,
    ) -> Lease:
        """A lease on a new connection while fewer than ``channel_count`` are open and every
        open one is in use by a table, else on the least loaded (fewest requests in flight,
        then fewest tables). ``on_answer`` receives the lease's answers (see :class:`Lease`).
        Never waits for the loop."""
        started: SharedConnection | None = None
        with self._lock:
            if self._closed:
                raise StatusError(grpc.StatusCode.CANCELLED, "the connection pool is closed")
            slots = self._slots.setdefault((project, location), [])
            best: list[Any] | None = None
            free: list[Any] | None = None
            for slot in slots:
                connection = slot[2]
                if connection is not None and connection.retiring:
                    self._retire(slot)
                    connection = None
                if connection is None:
                    free = free or slot
                elif best is None or (connection.load, connection.leases) < (
                    best[2].load,
                    best[2].leases,
                ):
                    best = slot
            if best is None or best[2].leases > 0:
                if free is None and len(slots) < self._size:
                    free = [None, None, None]
                    slots.append(free)
                if free is not None:
                    routing = (
                        f"write_location=projects/{project}/locations/{location}"
                        if location
                        else f"write_stream={stream}"
                    )
                    free[2] = started = SharedConnection(
                        self._loop, free, routing, self._timeout_s, self
                    )
                    self.connections_opened += 1
                    best = free
            assert best is not None
            connection = best[2]
            connection.leases += 1
            lease = Lease(connection, on_answer)
        if started is not None:
            # Outside the lock (SharedConnection.start); a lease sent on meanwhile queues.
            started.start()
        return lease

    def _retire(self, slot: list[Any]) -> None:
        connection = slot[2]
        slot[2] = None
        if connection.leases:
            self._retired.add(connection)  # closed by its last release
        else:
            connection.close()

    def _release(self, connection: SharedConnection) -> None:
        with self._lock:
            connection.leases -= 1
            if connection.leases == 0 and connection in self._retired:
                self._retired.discard(connection)
                connection.close()

    def _ended(self, connection: SharedConnection) -> None:
        """The connection's call ended (failed, cancelled or closed): free its slot."""
        with self._lock:
            for slots in self._slots.values():
                for slot in slots:
                    if slot[2] is connection:
                        slot[2] = None
            if connection.leases == 0:
                self._retired.discard(connection)

    def close(self) -> None:
        """Close every connection and channel, then the loop's channel. Not from work on the
        loop: it waits for the loop."""
        with self._lock:
            self._closed = True
            slots = [slot for group in self._slots.values() for slot in group]
            self._slots.clear()
            retired, self._retired = self._retired, set()
        for slot in slots:
            if slot[2] is not None:
                slot[2].close()
        for connection in retired:
            connection.close()
        channels = [slot[0] for slot in slots if slot[0] is not None]
        try:
            if channels:
                self._loop.start(_close_all, channels).exception(timeout=30)
        except TimeoutError:
            _LOG.warning("the AppendRows channels did not close within 30 s")
        finally:
            self._loop.close()


async def _close_all(channels: list[Any]) -> None:
    await asyncio.gather(*(channel.close() for channel in channels), return_exceptions=True)
