"""BUFFERED write streams: the exactly-once write method (``WriteMethod.BUFFERED_STREAM``).

Rows appended to a BUFFERED stream are durable but invisible until ``FlushRows`` publishes
them up to an offset; that split is the two phases of :mod:`pyflink_gcp.core.commit`:

- **write**: each table writer of a subtask appends to a stream of its own, created when the
  writer is (``CreateWriteStream``, rate-limited per subtask) and reused across checkpoints.
  Every request carries its offset (:class:`StreamOffsets`), so a request re-sent after a lost
  connection is answered ALREADY_EXISTS instead of being appended twice.
- **prepare** (at a checkpoint's marker, after the flush): one :class:`StreamCommit` per
  stream with new rows, "flush stream S to offset N" (inclusive).
- **commit** (after the checkpoint completed, :class:`BufferedStreamCommitter`): ``FlushRows``
  to the highest offset prepared for each stream. BigQuery answers ALREADY_EXISTS for an offset
  already flushed, which a commit repeated after a failover takes as done. A stream whose writer
  was closed (idle, evicted), or that comes from a restored checkpoint (its writer is gone), is
  also finalized after its flush.

After a failover the new attempt's writers create new streams, so the replayed records land in
them; the rows the failed attempt appended after its last completed checkpoint stay in its
streams, never flushed and never visible: 0 lost, 0 twice.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc
from google.cloud.bigquery_storage_v1 import types as storage_types

from pyflink_gcp.bigquery.client import (
    DEFAULT_STORAGE_HOST,
    open_storage_channel,
    resolve_storage_endpoint,
)
from pyflink_gcp.core.commit import Committer
from pyflink_gcp.core.errors import WriteError
from pyflink_gcp.core.retry import RetryPolicy, status_name
from pyflink_gcp.core.runtime_info import SubtaskInfo

_LOG = logging.getLogger("pyflink_gcp.bigquery")

_SERVICE = "/google.cloud.bigquery.storage.v1.BigQueryWrite"
_CreateWriteStreamRequest = storage_types.CreateWriteStreamRequest.pb()
_WriteStream = storage_types.WriteStream.pb()
_FlushRowsRequest = storage_types.FlushRowsRequest.pb()
_FlushRowsResponse = storage_types.FlushRowsResponse.pb()
_FinalizeRequest = storage_types.FinalizeWriteStreamRequest.pb()
_FinalizeResponse = storage_types.FinalizeWriteStreamResponse.pb()
_BUFFERED = int(storage_types.WriteStream.Type.BUFFERED)

#: Timeout of one stream call; BigQuery documents CreateWriteStream taking over 25 s when
#: streams are created fast, and every attempt is still capped by the retry deadline.
_CALL_TIMEOUT_S = 60.0
#: An offset that a request was sent at before an earlier request on its connection was
#: refused: the service refuses it too (OUT_OF_RANGE), and it is sent again at a new offset.
STALE = -1


@dataclass(frozen=True, slots=True)
class StreamCommit:
    """One committable: flush ``stream`` to ``offset`` (inclusive), then finalize it if asked.

    ``offset`` -1 flushes nothing (a stream closed without new rows only needs finalizing).
    """

    table_id: str
    stream: str
    offset: int
    finalize: bool = False


class StreamOffsets:
    """The offsets of one BUFFERED stream's appends (its table sender's thread only).

    Offsets are given to requests as they are sent, in order. A request the service refused
    was not appended, and neither was any request sent after it on the same connection: the
    next offset goes back to the refused one and the later ones are marked :data:`STALE`. A
    request re-sent after a lost connection keeps its offset.
    """

    __slots__ = ("next", "appended", "prepared")

    def __init__(self) -> None:
        self.next = 0
        #: Rows known appended: every offset below is in the stream.
        self.appended = 0
        #: Rows named by the last committable.
        self.prepared = 0

    def assign(self, batch: Any) -> int:
        """The offset of ``batch``: its own when it is re-sent, else the next one."""
        offset = batch.offset
        if offset is None or offset == STALE:
            offset = batch.offset = self.next
            self.next += len(batch.elements)
        return int(offset)

    def confirm(self, batch: Any) -> None:
        """``batch`` is in the stream (answered OK, or ALREADY_EXISTS when re-sent)."""
        self.appended = max(self.appended, batch.offset + len(batch.elements))

    def refuse(self, batch: Any, in_flight: Any) -> None:
        """``batch`` was not appended: its offset is next, and ``in_flight`` (sent after it) are
        stale."""
        if batch.offset is not None and batch.offset != STALE:
            self.next = min(self.next, batch.offset)
        batch.offset = None
        for later in in_flight:
            later.offset = STALE

    def committable(self, table_id: str, stream: str, *, finalize: bool) -> StreamCommit | None:
        """What the rows appended since the last call need; None when nothing does."""
        if self.appended == self.prepared and not finalize:
            return None
        self.prepared = self.appended
        return StreamCommit(table_id, stream, self.appended - 1, finalize)


class RateLimiter:
    """At most ``per_second`` acquisitions per second, shared by a subtask's metadata threads."""

    def __init__(self, per_second: float) -> None:
        self._interval = 1.0 / per_second
        self._lock = threading.Lock()
        self._next = 0.0

    def acquire(self) -> None:
        with self._lock:
            now = time.monotonic()
            at = max(now, self._next)
            self._next = at + self._interval
        if at > now:
            time.sleep(at - now)


class StreamCalls:
    """The unary Storage Write calls on BUFFERED streams: one attempt each, under the sink's
    retry policy, with a timeout and the routing header the service expects."""

    def __init__(self, channel: grpc.Channel, retry: RetryPolicy, sink_name: str, endpoint: str):
        self._retry = retry
        self._sink = sink_name
        self._endpoint = endpoint
        self._timeout_s = retry.attempt_timeout(_CALL_TIMEOUT_S)
        self._create = channel.unary_unary(
            f"{_SERVICE}/CreateWriteStream",
            request_serializer=_CreateWriteStreamRequest.SerializeToString,
            response_deserializer=_WriteStream.FromString,
        )
        self._flush = channel.unary_unary(
            f"{_SERVICE}/FlushRows",
            request_serializer=_FlushRowsRequest.SerializeToString,
            response_deserializer=_FlushRowsResponse.FromString,
        )
        self._finalize = channel.unary_unary(
            f"{_SERVICE}/FinalizeWriteStream",
            request_serializer=_FinalizeRequest.SerializeToString,
            response_deserializer=_FinalizeResponse.FromString,
        )

    def _what(self, action: str) -> str:
        return f"sink '{self._sink}': {action} at {self._endpoint}"

    def _call(
        self, stub: Any, request: Any, header: str, action: str, done: tuple[str, ...]
    ) -> Any:
        def attempt() -> Any:
            try:
                return stub(
                    request, timeout=self._timeout_s, metadata=(("x-goog-request-params", header),)
                )
            except grpc.RpcError as exc:
                if status_name(exc) in done:
                    return None
                raise

        try:
            return self._retry.call(attempt, self._what(action))
        except grpc.RpcError as exc:
            raise WriteError(
                f"{self._what(action)} failed: {status_name(exc)}: {exc.details()}"
            ) from exc

    def create(self, table_path: str, table_id: str) -> str:
        """A new BUFFERED stream on the table ``projects/p/datasets/d/tables/t``; its name."""
        request = _CreateWriteStreamRequest(parent=table_path)
        request.write_stream.type_ = _BUFFERED  # "type" in the API; proto-plus renamed it
        stream = self._call(
            self._create,
            request,
            f"parent={table_path}",
            f"create a BUFFERED stream on {table_id}",
            (),
        )
        return str(stream.name)

    def flush(self, commit: StreamCommit) -> None:
        """Publish ``commit.stream`` up to ``commit.offset``; already flushed counts as done."""
        request = _FlushRowsRequest(write_stream=commit.stream)
        request.offset.value = commit.offset
        self._call(
            self._flush,
            request,
            f"write_stream={commit.stream}",
            f"flush {commit.table_id} stream {commit.stream} to offset {commit.offset}",
            ("ALREADY_EXISTS",),
        )

    def finalize(self, commit: StreamCommit) -> None:
        """No more appends to ``commit.stream`` (idempotent)."""
        self._call(
            self._finalize,
            _FinalizeRequest(name=commit.stream),
            f"name={commit.stream}",
            f"finalize {commit.table_id} stream {commit.stream}",
            ("ALREADY_EXISTS", "FAILED_PRECONDITION"),
        )


class BufferedStreamCommitter(Committer):
    """Publishes prepared :class:`StreamCommit` values: per stream, one ``FlushRows`` to the
    highest offset prepared, then ``FinalizeWriteStream`` where asked; streams in parallel."""

    def __init__(
        self,
        *,
        sink_name: str,
        storage_endpoint: str | None,
        retry: RetryPolicy,
        threads: int,
    ) -> None:
        self._sink = sink_name
        self._storage_endpoint = storage_endpoint
        self._retry = retry
        self._threads = threads
        self._channel: Any = None
        self._calls: StreamCalls | None = None
        self._pool: ThreadPoolExecutor | None = None
        #: Streams flushed (or finalized) so far, for tests and logs.
        self.flushes = 0

    def open(self, info: SubtaskInfo) -> None:
        endpoint = resolve_storage_endpoint(self._storage_endpoint)
        self._channel = open_storage_channel(endpoint)
        self._calls = StreamCalls(
            self._channel, self._retry, self._sink, endpoint.host or DEFAULT_STORAGE_HOST
        )
        self._pool = ThreadPoolExecutor(
            max_workers=self._threads,
            thread_name_prefix=f"{self._sink}-{info.subtask_index}-commit",
        )

    def commit(self, committables: list[Any], checkpoint_id: int, restored: bool) -> None:
        by_stream: dict[str, StreamCommit] = {}
        for commit in committables:
            seen = by_stream.get(commit.stream)
            if seen is None:
                by_stream[commit.stream] = commit
            else:
                by_stream[commit.stream] = StreamCommit(
                    commit.table_id,
                    commit.stream,
                    max(seen.offset, commit.offset),
                    seen.finalize or commit.finalize,
                )
        assert self._pool is not None
        futures = [self._pool.submit(self._publish, c, restored) for c in by_stream.values()]
        for future in futures:
            future.result()  # the first failure fails the commit (and the task)
        self.flushes += len(futures)

    def _publish(self, commit: StreamCommit, restored: bool) -> None:
        calls = self._calls
        assert calls is not None
        if commit.offset >= 0:
            calls.flush(commit)
        # A restored stream's writer is gone: nothing will be appended to it again.
        if commit.finalize or restored:
            calls.finalize(commit)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        if self._channel is not None:
            self._channel.close()
            self._channel = None
