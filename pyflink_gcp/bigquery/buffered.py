"""BUFFERED write streams: the exactly-once write method (``WriteMethod.BUFFERED_STREAM``).

Rows appended to a BUFFERED stream are durable but invisible until ``FlushRows`` publishes
them up to an offset; that split is the two phases of :mod:`pyflink_gcp.core.commit`:

- **write**: each table writer of a subtask appends to a stream of its own, created when the
  writer is (``CreateWriteStream``, rate-limited per subtask) and reused across checkpoints.
  Every request carries its offset (:class:`StreamOffsets`), so a request re-sent after a lost
  connection is answered ALREADY_EXISTS instead of being appended twice.
- **prepare** (at a checkpoint's marker, after the flush): one :class:`StreamCommit` per
  stream of a live writer, "flush stream S to offset N" (inclusive), offset -1 when S has no
  new rows. Every live stream is named at every checkpoint, even without rows, so that a
  restored set and the last set name every stream a writer still had: those must be finalized
  and nothing else would name them. A writer closed since (idle, evicted, released at the cap)
  adds its last committable with ``finalize``; at the end of input every committable has it,
  since the writers close only after that last prepare.
- **commit** (after the checkpoint completed, :class:`BufferedStreamCommitter`): per stream of
  a commit set, ``FlushRows`` to its highest offset, then ``FinalizeWriteStream`` when the
  stream is done. BigQuery answers ALREADY_EXISTS for an offset already flushed, which a commit
  repeated after a failover takes as done. The committer keeps nothing in the operator's state.

**Finalizing.** A finalized stream takes no more appends, which fences a writer of a failed
attempt that is still running, and frees the stream on the service. The committer finalizes,
each time after the stream's flush:

- a stream whose committable says so (its writer closed; nothing can follow it on the writer's
  channel);
- at the ``final`` commit (the end of input, or a stop-with-savepoint's savepoint: nothing is
  committed after it), every stream it knows and has not finalized;
- the streams of restored sets (their writers are gone), but not at once. Under unaligned
  checkpoints a committable the barrier overtook is in the checkpoint's channel state, reaches
  the committer after the restore in a later set that is not ``restored``, and can name a
  restored stream at a higher offset. The restored streams are finalized when the committer
  learns that every writer feeding it has started in the new attempt
  (:meth:`~pyflink_gcp.core.commit.Committer.writers_started`: the failed attempt's
  committables come before the new attempt's on each writer's channel, so all of them have
  been flushed by then), or at a final commit, after the flush to the highest offset any set
  named.

Some streams cannot be known and stay unfinalized (BigQuery documents no lifetime for an idle
BUFFERED stream): those a failed attempt created after its last completed checkpoint (no
committable named them), and restored streams when the attempt fails again before its writers
started, and restarts from a later checkpoint, whose state no longer names them. None of them
holds a row that must become visible.

**Failures of a flush.** ALREADY_EXISTS is done. NOT_FOUND (the table was dropped or expired,
the stream is lost) cannot change on a restart: the job ends with a
:class:`~pyflink_gcp.core.errors.NonRetriableSinkError` naming the stream, the table and the
offsets whose rows cannot be published. INVALID_ARGUMENT or FAILED_PRECONDITION is what a
finalized stream answers (Beam's ``StorageApiFlushAndFinalizeDoFn`` reads INVALID_ARGUMENT
that way, and so does the emulator launcher by default): the status's
StorageError detail (:mod:`pyflink_gcp.bigquery.storage_errors`) says STREAM_FINALIZED, or,
without a detail, ``GetWriteStream`` shows the stream still exists (``WriteStream`` reports no
finalize time, so that is all it can tell). Such a flush is done when the offset was flushed
before: by this committer, or, per the restored set naming it, by the attempt whose commit
finalized it (streams are finalized only after their flush to every offset the committer was
handed). An offset never flushed before the stream was finalized (a rescaled restore can split
a stream's committables between committer subtasks) can never become visible: the job ends
with a NonRetriableSinkError naming those rows, never a silent success. A StorageError detail
naming another cause leaves the error retriable.

After a failover the new attempt's writers create new streams, so the replayed records land in
them; the rows the failed attempt appended after its last completed checkpoint stay in its
streams, never flushed and never visible: 0 lost, 0 twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import grpc
from google.cloud.bigquery_storage_v1 import types as storage_types

from pyflink_gcp.bigquery.client import (
    DEFAULT_STORAGE_HOST,
    open_storage_channel,
    resolve_storage_endpoint,
)
from pyflink_gcp.bigquery.storage_errors import NOT_FOUND_CODES, call_storage_error, code_name
from pyflink_gcp.core.commit import Committer
from pyflink_gcp.core.errors import NonRetriableSinkError, WriteError
from pyflink_gcp.core.retry import RetryPolicy, status_name
from pyflink_gcp.core.runtime_info import SubtaskInfo

_LOG = logging.getLogger("pyflink_gcp.bigquery")

_SERVICE = "/google.cloud.bigquery.storage.v1.BigQueryWrite"
_CreateWriteStreamRequest = storage_types.CreateWriteStreamRequest.pb()
_GetWriteStreamRequest = storage_types.GetWriteStreamRequest.pb()
_WriteStream = storage_types.WriteStream.pb()
_FlushRowsRequest = storage_types.FlushRowsRequest.pb()
_FlushRowsResponse = storage_types.FlushRowsResponse.pb()
_FinalizeRequest = storage_types.FinalizeWriteStreamRequest.pb()
_FinalizeResponse = storage_types.FinalizeWriteStreamResponse.pb()
_BUFFERED = int(storage_types.WriteStream.Type.BUFFERED)
_BASIC_VIEW = int(storage_types.WriteStreamView.BASIC)

#: Timeout of one stream call; BigQuery documents CreateWriteStream taking over 25 s when
#: streams are created fast, and every attempt is still capped by the retry deadline.
_CALL_TIMEOUT_S = 60.0
#: An offset that a request was sent at before an earlier request on its connection was
#: refused: the service refuses it too (OUT_OF_RANGE), and it is sent again at a new offset.
STALE = -1
#: Statuses FlushRows answers on a finalized stream (see the module docstring).
_FINALIZED_STATUSES = frozenset({"INVALID_ARGUMENT", "FAILED_PRECONDITION"})
#: Why a stream answers NOT_FOUND.
_GONE = (
    "the stream or its table is not found (the table was dropped or expired, or the stream is lost)"
)
#: Checkpoints after the one a stream was finalized at during which this committer remembers
#: how far it was flushed (a repeated set naming it then needs no call).
_LATE_CHECKPOINTS = 2


@dataclass(frozen=True, slots=True)
class StreamCommit:
    """One committable: flush ``stream`` to ``offset`` (inclusive), then finalize it if asked.

    ``offset`` -1 flushes nothing: the stream has no new rows, and is named so that the
    committer knows it (it finalizes the streams of restored and final sets).
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

    def committable(self, table_id: str, stream: str, *, finalize: bool) -> StreamCommit:
        """The committable of the rows appended since the last call: their last offset, or -1
        without new rows (the stream is still named)."""
        offset = self.appended - 1 if self.appended > self.prepared else -1
        self.prepared = self.appended
        return StreamCommit(table_id, stream, offset, finalize)


def resend_order(batches: Iterable[Any]) -> list[Any]:
    """The order in which to send again the requests a lost connection left unanswered.

    Requests that hold an offset go first, in offset order; the others (STALE, or never sent)
    follow in their order and get offsets after them. A STALE request sent first would take
    the offset of the gap that a request holding an offset is about to fill: it would land
    past the stream's end and be refused, stale the holder, and the holder's success would
    then look like a request appended after a refused one.
    """
    batches = list(batches)
    held = sorted(
        (b for b in batches if b.offset is not None and b.offset != STALE),
        key=lambda b: int(b.offset),
    )
    return held + [b for b in batches if b.offset is None or b.offset == STALE]


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


def _answer(exc: grpc.RpcError) -> str:
    """A failed call's status and message, with its StorageError code when it has one."""
    text = f"{status_name(exc)}: {exc.details()}"
    detail = call_storage_error(exc)
    return text if detail is None else f"{text} [{code_name(detail)}]"


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
        self._get = channel.unary_unary(
            f"{_SERVICE}/GetWriteStream",
            request_serializer=_GetWriteStreamRequest.SerializeToString,
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

    def _invoke(self, stub: Any, request: Any, header: str, action: str) -> Any:
        """One call, retried on transient errors until the deadline.

        Raises:
            WriteError: Still failing transiently at the deadline.
            grpc.RpcError: Any other failure, as the service answered it.
        """

        def attempt() -> Any:
            return stub(
                request, timeout=self._timeout_s, metadata=(("x-goog-request-params", header),)
            )

        return self._retry.call(attempt, self._what(action))

    def create(self, table_path: str, table_id: str) -> str:
        """A new BUFFERED stream on the table ``projects/p/datasets/d/tables/t``; its name."""
        request = _CreateWriteStreamRequest(parent=table_path)
        request.write_stream.type_ = _BUFFERED  # "type" in the API; proto-plus renamed it
        action = f"create a BUFFERED stream on {table_id}"
        try:
            stream = self._invoke(self._create, request, f"parent={table_path}", action)
        except grpc.RpcError as exc:
            raise WriteError(f"{self._what(action)} failed: {_answer(exc)}") from exc
        _LOG.debug("%s: created BUFFERED stream %s on %s", self._sink, stream.name, table_id)
        return str(stream.name)

    def flush(self, commit: StreamCommit, known: int) -> None:
        """Publish ``commit.stream`` up to ``commit.offset``; see the module docstring for what
        counts as done.

        Args:
            commit: The stream, its table and the offset.
            known: The highest offset of the stream flushed before, by this committer or (per
                a restored set naming it) by the attempt that committed that set; -1 for none.

        Raises:
            NonRetriableSinkError: The rows can never become visible: the stream or its table
                is gone, or the stream was finalized before they were flushed.
            WriteError: Any other failure, after the retries.
        """
        request = _FlushRowsRequest(write_stream=commit.stream)
        request.offset.value = commit.offset
        action = f"flush {commit.table_id} stream {commit.stream} to offset {commit.offset}"
        try:
            self._invoke(self._flush, request, f"write_stream={commit.stream}", action)
            return
        except grpc.RpcError as exc:
            error = exc
        status = status_name(error)
        if status == "ALREADY_EXISTS":
            return
        detail = call_storage_error(error)
        cause = None if detail is None else code_name(detail)
        if status == "NOT_FOUND" or cause in NOT_FOUND_CODES:
            raise self._unpublishable(commit, known, _GONE, error)
        if status in _FINALIZED_STATUSES and cause in (None, "STREAM_FINALIZED"):
            if cause is None:
                self._check_exists(commit, known)  # then it is taken as finalized
            if known >= commit.offset:
                _LOG.info(
                    "%s: %s stream %s is finalized and was flushed to offset %d before: done",
                    self._sink,
                    commit.table_id,
                    commit.stream,
                    known,
                )
                return
            raise self._unpublishable(
                commit, known, "the stream was finalized before they were flushed", error
            )
        raise WriteError(f"{self._what(action)} failed: {_answer(error)}") from error

    def _check_exists(self, commit: StreamCommit, known: int) -> None:
        """Make sure the service still has ``commit.stream`` (``GetWriteStream``).

        Raises:
            NonRetriableSinkError: It does not (NOT_FOUND): the rows past ``known`` are lost.
            WriteError: The call failed otherwise.
        """
        request = _GetWriteStreamRequest(name=commit.stream, view=_BASIC_VIEW)
        action = f"look up {commit.table_id} stream {commit.stream}"
        try:
            self._invoke(self._get, request, f"name={commit.stream}", action)
        except grpc.RpcError as exc:
            if status_name(exc) == "NOT_FOUND":
                raise self._unpublishable(commit, known, _GONE, exc, "GetWriteStream") from exc
            raise WriteError(f"{self._what(action)} failed: {_answer(exc)}") from exc

    def _unpublishable(
        self,
        commit: StreamCommit,
        known: int,
        why: str,
        error: grpc.RpcError,
        call: str = "FlushRows",
    ) -> NonRetriableSinkError:
        """The error of rows that can never become visible; they are named by offset."""
        if known < commit.offset:
            rows = f"the rows at offsets {known + 1}..{commit.offset}"
        else:
            # Only a restored set says they were flushed, and the service cannot confirm it.
            rows = f"the rows up to offset {commit.offset} (named by a restored checkpoint)"
        made = NonRetriableSinkError(
            f"sink '{self._sink}': {rows} of BUFFERED stream {commit.stream} of table "
            f"{commit.table_id} cannot be published: {why} ({call} at {self._endpoint} "
            f"answered {_answer(error)}). BigQuery acknowledged them but will never make them "
            "visible, and a restart cannot change that, so the job ends: their records must be "
            "written again from the source"
        )
        made.__cause__ = error
        return made

    def finalize(self, commit: StreamCommit) -> None:
        """No more appends to ``commit.stream`` (idempotent)."""
        action = f"finalize {commit.table_id} stream {commit.stream}"
        try:
            self._invoke(
                self._finalize,
                _FinalizeRequest(name=commit.stream),
                f"name={commit.stream}",
                action,
            )
            return
        except grpc.RpcError as exc:
            error = exc
        status = status_name(error)
        detail = call_storage_error(error)
        cause = None if detail is None else code_name(detail)
        if status in ("ALREADY_EXISTS", "FAILED_PRECONDITION") or (
            status == "INVALID_ARGUMENT" and cause in (None, "STREAM_FINALIZED")
        ):
            # Finalized (or committed) before: BigQuery documents no answer for a second
            # finalize, so each status a finalized stream may give counts as done.
            return
        if status == "NOT_FOUND" or cause in NOT_FOUND_CODES:
            # Its rows were flushed (a flush comes first): nothing is left to publish or free.
            _LOG.warning(
                "%s: %s stream %s to finalize is not found (the table was dropped or expired, "
                "or the stream is gone): nothing to finalize (%s)",
                self._sink,
                commit.table_id,
                commit.stream,
                _answer(error),
            )
            return
        raise WriteError(f"{self._what(action)} failed: {_answer(error)}") from error


def _merge(committables: Iterable[Any]) -> dict[str, StreamCommit]:
    """One committable per stream: the highest offset, finalized if any says so."""
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
    return by_stream


class BufferedStreamCommitter(Committer):
    """Publishes commit sets of :class:`StreamCommit` values: per stream, one ``FlushRows`` to
    the highest offset of the set, then ``FinalizeWriteStream`` when the stream is done (see
    the module docstring); streams in parallel."""

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
        #: Streams flushed (or finalized) so far.
        self.flushes = 0
        #: Streams of this attempt's sets not finalized yet: stream -> table id.
        self._open: dict[str, str] = {}
        #: Restored streams not finalized yet (until the writers started): stream -> table id.
        self._last_checkpoint = -1
        self._restored: dict[str, str] = {}
        #: The highest offset this committer flushed, per stream.
        self._flushed: dict[str, int] = {}
        #: The highest offset a restored set named, per stream (flushed by the attempt that
        #: committed it, if the stream is finalized: see the module docstring).
        self._named: dict[str, int] = {}
        #: (checkpoint, stream) of the streams finalized, forgotten _LATE_CHECKPOINTS later.
        self._finalized: deque[tuple[int, str]] = deque()

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

    def commit(
        self, committables: list[Any], checkpoint_id: int, restored: bool, final: bool = False
    ) -> None:
        by_stream = _merge(committables)
        if restored:
            # Their writers are gone, but a committable of a restored stream may still come
            # from the channel state: flush now, finalize later.
            self._note_restored(by_stream.values())
            by_stream = {s: replace(c, finalize=False) for s, c in by_stream.items()}
        else:
            self._forget_finalized(checkpoint_id)
            for commit in by_stream.values():
                if not commit.finalize:
                    self._open[commit.stream] = commit.table_id
            if final:  # nothing follows: every stream this committer knows is done
                for stream, table_id in (*self._restored.items(), *self._open.items()):
                    seen = by_stream.get(stream)
                    by_stream[stream] = replace(
                        seen or StreamCommit(table_id, stream, -1), finalize=True
                    )
                self._restored.clear()
                by_stream = {s: replace(c, finalize=True) for s, c in by_stream.items()}
        self._publish_all(by_stream.values(), checkpoint_id)

    def writers_started(self) -> None:
        """Finalize the restored streams: nothing of the failed attempt can name them now."""
        restored, self._restored = self._restored, {}
        self._publish_all(
            (StreamCommit(table_id, stream, -1, True) for stream, table_id in restored.items()),
            self._last_checkpoint,
        )

    def _publish_all(self, commits: Iterable[StreamCommit], checkpoint_id: int) -> None:
        self._last_checkpoint = max(self._last_checkpoint, checkpoint_id)
        work: list[StreamCommit] = []
        for commit in commits:
            if commit.offset <= self._flushed.get(commit.stream, -1):
                commit = replace(commit, offset=-1)  # this committer flushed it that far
            if commit.offset >= 0 or commit.finalize:
                work.append(commit)
        assert self._pool is not None
        futures = [self._pool.submit(self._publish, c, self._known(c.stream)) for c in work]
        for future in futures:
            future.result()  # the first failure fails the commit (and the task)
        for commit in work:
            if commit.offset >= 0:
                self._flushed[commit.stream] = commit.offset
            if commit.finalize:
                self._restored.pop(commit.stream, None)
                self._open.pop(commit.stream, None)
                self._finalized.append((checkpoint_id, commit.stream))
            if _LOG.isEnabledFor(logging.DEBUG):
                _LOG.debug(
                    "%s: checkpoint %d: %s stream %s%s%s",
                    self._sink,
                    checkpoint_id,
                    commit.table_id,
                    commit.stream,
                    f" flushed to offset {commit.offset}" if commit.offset >= 0 else "",
                    " finalized" if commit.finalize else "",
                )
        self.flushes += len(work)

    def _note_restored(self, commits: Iterable[StreamCommit]) -> None:
        for commit in commits:
            self._restored.setdefault(commit.stream, commit.table_id)
            if commit.offset > self._named.get(commit.stream, -1):
                self._named[commit.stream] = commit.offset

    def _known(self, stream: str) -> int:
        return max(self._flushed.get(stream, -1), self._named.get(stream, -1))

    def _forget_finalized(self, checkpoint_id: int) -> None:
        """Drop what is known of streams finalized long enough ago that nothing comes for them."""
        finalized = self._finalized
        while finalized and finalized[0][0] <= checkpoint_id - _LATE_CHECKPOINTS:
            _, stream = finalized.popleft()
            self._flushed.pop(stream, None)
            self._named.pop(stream, None)

    def _publish(self, commit: StreamCommit, known: int) -> None:
        calls = self._calls
        assert calls is not None
        if commit.offset >= 0:
            calls.flush(commit, known)
        if commit.finalize:
            calls.finalize(commit)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        if self._channel is not None:
            self._channel.close()
            self._channel = None
