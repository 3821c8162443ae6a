"""A scripted MutateRows stub for the batcher and operation unit tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from google.cloud.bigtable_v2.types import bigtable as bigtable_types

from pyflink_gcp.bigtable import BigtableWriterOptions, RowMutationEntry, SetCell, TableDestination
from pyflink_gcp.bigtable.batcher import TableBatcher
from pyflink_gcp.bigtable.client import request_metadata
from pyflink_gcp.bigtable.mutate_rows import MutateRowsCall
from pyflink_gcp.bigtable.stats import BigtableWriterStats
from pyflink_gcp.core import RetryPolicy

TABLE = TableDestination.of("p", "inst", "t")
OK, NOT_FOUND, INVALID_ARGUMENT, UNAVAILABLE, INTERNAL = 0, 5, 3, 14, 13
_Response = bigtable_types.MutateRowsResponse

# (request number from 1, position in request, row key) -> status code
Script = Callable[[int, int, bytes], int]


class FakeDataClient:
    """Stands for the MutateRows stub: answers from a script, records every request."""

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
        self._lock = threading.Lock()

    def __call__(self, raw: Any, timeout: float, metadata: Any) -> Iterator[Any]:
        with self._lock:
            self.requests.append(raw)
            self.metadata = dict(metadata)
            call = len(self.requests)
            self.in_flight += len(raw.entries)
            self.max_in_flight_entries = max(self.max_in_flight_entries, self.in_flight)
        try:
            time.sleep(self.delay)
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


class Senders:
    """The subtask's sender pool, as the factory hands it to a batcher."""

    def __init__(self, threads: int) -> None:
        self.pool = ThreadPoolExecutor(threads)

    def submit(self, fn: Callable[[Any], Any], batch: Any) -> Future[Any]:
        return self.pool.submit(fn, batch)


def make_batcher(client: FakeDataClient, **options: Any) -> TableBatcher:
    from datetime import timedelta

    options.setdefault("retry_deadline", timedelta(seconds=5))
    writer_options = BigtableWriterOptions(**options)
    call = make_call(
        client, writer_options.retry_deadline_s, app_profile_id=writer_options.app_profile_id
    )
    senders = Senders(writer_options.max_in_flight_requests)
    return TableBatcher(TABLE, call, senders.submit, writer_options)


def entry(i: int, cells: int = 1, family: str = "cf") -> RowMutationEntry:
    return RowMutationEntry(
        b"k%05d" % i, [SetCell(family, b"q%d" % c, b"v", 1000) for c in range(cells)]
    )


def keys(request: Any) -> list[bytes]:
    return [e.row_key for e in request.entries]
