"""A scripted MutateRows stub for the batcher and operation unit tests, and a real event loop
(an :class:`~pyflink_gcp.core.aio.AsyncChannel` to a closed port) to run their operations on."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from google.cloud.bigtable_v2.services.bigtable.transports import BigtableGrpcAsyncIOTransport
from google.cloud.bigtable_v2.types import bigtable as bigtable_types

from pyflink_gcp.bigtable import BigtableWriterOptions, RowMutationEntry, SetCell, TableDestination
from pyflink_gcp.bigtable.batcher import TableBatcher
from pyflink_gcp.bigtable.client import request_metadata
from pyflink_gcp.bigtable.mutate_rows import MutateRowsCall
from pyflink_gcp.bigtable.stats import BigtableWriterStats
from pyflink_gcp.core import RetryPolicy
from pyflink_gcp.core.aio import LOOP_THREAD_NAME, AsyncChannel, LoopSlots
from pyflink_gcp.core.endpoints import Endpoint
from tests.support.loops import LOOPS, close_loops  # noqa: F401 - close_loops: the fixture

TABLE = TableDestination.of("p", "inst", "t")
OK, NOT_FOUND, INVALID_ARGUMENT, UNAVAILABLE, INTERNAL = 0, 5, 3, 14, 13
_Response = bigtable_types.MutateRowsResponse

# (request number from 1, position in request, row key) -> status code
Script = Callable[[int, int, bytes], int]


class FakeDataClient:
    """Stands for the ``grpc.aio`` MutateRows stub: answers from a script, records every
    request and the threads the calls ran on."""

    def __init__(
        self,
        script: Script = lambda call, pos, key: OK,
        *,
        raise_on: Callable[[int], BaseException | None] = lambda call: None,
        answer_before_raise: int = 0,
        delay: float = 0.0,
    ) -> None:
        self.script = script
        self.raise_on = raise_on
        self.answer_before_raise = answer_before_raise
        self.delay = delay
        self.requests: list[Any] = []
        self.in_flight = 0
        self.max_in_flight_entries = 0
        self.metadata: dict[str, str] = {}
        self.threads: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, raw: Any, timeout: float, metadata: Any) -> AsyncIterator[Any]:
        return self._stream(raw, metadata)

    async def _stream(self, raw: Any, metadata: Any) -> AsyncIterator[Any]:
        with self._lock:
            self.threads.add(threading.current_thread().name)
            self.requests.append(raw)
            self.metadata = dict(metadata)
            call = len(self.requests)
            self.in_flight += len(raw.entries)
            self.max_in_flight_entries = max(self.max_in_flight_entries, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            error = self.raise_on(call)
            response = _Response.pb()()
            answered = len(raw.entries) if error is None else self.answer_before_raise
            for pos, entry in enumerate(raw.entries[:answered]):
                result = response.entries.add(index=pos)
                result.status.code = self.script(call, pos, entry.row_key)
        finally:
            with self._lock:
                self.in_flight -= len(raw.entries)
        yield response
        if error is not None:
            raise error


def make_call(
    client: FakeDataClient, retry_deadline_s: float = 5.0, app_profile_id: str | None = None
) -> MutateRowsCall:
    return MutateRowsCall(
        client,
        sink_name="unit",
        table_name=str(TABLE),
        policy=RetryPolicy(deadline_s=retry_deadline_s),
        timeout_s=5.0,
        metadata=request_metadata(str(TABLE), app_profile_id),
        stats=BigtableWriterStats(),
    )


LOOP_THREAD = LOOP_THREAD_NAME


def open_loop() -> AsyncChannel:
    """A real event-loop thread, as the factory opens one (its channel is never called)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    loop = AsyncChannel(
        Endpoint(host=f"127.0.0.1:{port}", insecure=True),
        BigtableGrpcAsyncIOTransport,
        BigtableGrpcAsyncIOTransport.DEFAULT_HOST,
        [],
    )
    LOOPS.append(loop)
    return loop


def make_batcher(client: FakeDataClient, **options: Any) -> TableBatcher:
    from datetime import timedelta

    options.setdefault("retry_deadline", timedelta(seconds=5))
    writer_options = BigtableWriterOptions(**options)
    call = make_call(
        client, writer_options.retry_deadline_s, app_profile_id=writer_options.app_profile_id
    )
    call.slots = LoopSlots(lambda: writer_options.max_in_flight_requests)
    return TableBatcher(TABLE, call, open_loop().start, writer_options)


def entry(i: int, cells: int = 1, family: str = "cf") -> RowMutationEntry:
    return RowMutationEntry(
        b"k%05d" % i, [SetCell(family, b"q%d" % c, b"v", 1000) for c in range(cells)]
    )


def keys(request: Any) -> list[bytes]:
    return [e.row_key for e in request.entries]
