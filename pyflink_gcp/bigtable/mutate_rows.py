"""One MutateRows request, from its protobuf encoding to the last retry of its last entry.

Modelled on python-bigtable's ``_mutate_rows``: a :class:`MutateRowsOperation` owns one request
through all its attempts, as a coroutine on the subtask's event loop
(:class:`~pyflink_gcp.core.aio.AsyncChannel`): it reads the server stream with ``async for``
and waits out its backoff with ``await asyncio.sleep``, so no thread waits on a request. Each
response carries a status per entry; an attempt leaves only the entries worth retrying (a
transient status, or no answer because the stream broke), and the next attempt sends just
those, with the sink's backoff, until the retry deadline. Entries rejected for
their content become :class:`~pyflink_gcp.core.failure.FailedRecord` s carrying the row key, for
the failure handler: unlike a Publish or an AppendRows, MutateRows names the rejected entries
itself, so nothing is found by halving the request.

Quota errors (RESOURCE_EXHAUSTED, of the call or of entries) are retried on the retry policy's
slower quota schedule and halve the subtask's :class:`~pyflink_gcp.core.quota.QuotaWindow`,
whose limit bounds the attempts in flight (every attempt holds one of the loop's
:class:`~pyflink_gcp.core.aio.LoopSlots`): fewer MutateRows run at once until the quota refills.
(Bigtable's server-side flow control, ``MutateRowsResponse.rate_limit_info``, is only sent to
clients that advertise the ``mutate_rows_rate_limit`` feature, which this sink does not.)
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from google.cloud.bigtable.data.mutations import RowMutationEntry, SetCell

from pyflink_gcp.bigtable.client import MutateRowsRequestPb
from pyflink_gcp.bigtable.stats import BigtableWriterStats
from pyflink_gcp.core.aio import LoopSlots
from pyflink_gcp.core.errors import DestinationNotFoundError, SinkError, WriteError
from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.functions import short_repr
from pyflink_gcp.core.quota import QuotaWindow
from pyflink_gcp.core.retry import BackoffSequence, RetryPolicy, status_name
from pyflink_gcp.core.status import STATUS_BY_CODE, StatusError, error_text

#: Per-entry statuses worth retrying. Anything else in an entry's status is the entry's own
#: fault (the emulator even answers INTERNAL for a missing family or a bad timestamp), so it
#: goes to the failure handler instead of being retried until the deadline.
ENTRY_RETRYABLE_CODES = frozenset(
    {"UNAVAILABLE", "DEADLINE_EXCEEDED", "ABORTED", "RESOURCE_EXHAUSTED"}
)


def fill_entry(entry_pb: Any, element: RowMutationEntry) -> None:
    """Write ``element`` into the (empty) protobuf entry ``entry_pb`` of a MutateRows request.

    ``SetCell``, by far the most common mutation, is copied field by field; the other mutation
    types go through the library's own dict form, which the raw protobuf constructor accepts.
    """
    entry_pb.row_key = element.row_key
    add = entry_pb.mutations.add
    for mutation in element.mutations:
        if type(mutation) is SetCell:
            cell = add().set_cell
            cell.family_name = mutation.family
            cell.column_qualifier = mutation.qualifier
            cell.timestamp_micros = mutation.timestamp_micros
            cell.value = mutation.new_value
        else:
            add(**mutation._to_dict())


def failed_entry(
    sink: str,
    table_name: str,
    payload: bytes,
    row_key: bytes,
    status: str,
    message: str,
    record: Any,
) -> FailedRecord:
    """The failure-handler record of an entry Bigtable (or the sink) rejected: the payload is
    the serialized ``MutateRowsRequest.Entry``, so a dead letter can be replayed once fixed."""
    key = row_key.decode("utf-8", "backslashreplace")
    return FailedRecord(
        sink=sink,
        destination=table_name,
        reason=f"{status}: {message} (row key {key!r})",
        payload=payload,
        attributes={"row-key": key, "status": status},
        record_repr=short_repr(record),
    )


class MutateRowsBatch:
    """One MutateRows request being filled or in flight, and the records behind its entries
    (in entry order, for the failure handler)."""

    __slots__ = ("request", "records", "entries", "mutations", "size")

    def __init__(self, table_name: str, app_profile_id: str | None) -> None:
        self.request = MutateRowsRequestPb(table_name=table_name)
        if app_profile_id:
            self.request.app_profile_id = app_profile_id
        self.records: list[Any] = []
        self.entries = 0
        self.mutations = 0
        self.size = 0


#: What a NOT_FOUND means once the table existed (checked, or created, at its first request).
NO_LONGER_EXISTS = "the table or its instance no longer exists"
#: What a NOT_FOUND means to a sink that creates no tables: nothing checked it before.
NOT_CREATED = (
    "the table or its instance does not exist, and the sink may not create tables. Create it, "
    "or enable creation with set_create_disposition(CreateDisposition.CREATE_IF_NEEDED) and "
    "set_table_create_options(TableCreateOptions(column_families={...}))."
)


class MutateRowsCall:
    """What every MutateRows request of one table shares: the stub, its timeout and routing
    headers, the retry policy, the names for errors, and the subtask's counters and bounds.

    Args:
        stub: ``(request_pb, timeout=, metadata=) -> async iterator of response_pb``, called
            on the event loop (:meth:`~pyflink_gcp.core.aio.AsyncChannel.unary_stream`).
        sink_name: For errors and failed records.
        table_name: The table's resource name.
        policy: The sink's retry policy (transient RPC errors, and the deadline).
        timeout_s: Timeout of one attempt.
        metadata: The request headers (:func:`~pyflink_gcp.bigtable.client.request_metadata`).
        stats: The subtask's counters.
        endpoint: The data endpoint (``host:port``), named by errors.
        window: The subtask's quota window (quota errors shrink it); None: none.
        slots: The subtask's bound on MutateRows attempts in flight, on the loop (its limit
            is ``window``'s); None: no bound.
        not_found: What a NOT_FOUND answer means, for its error: without creation nothing
            checked the table before (:mod:`~pyflink_gcp.bigtable.tables`), so the error
            says what to do; with it, the table existed at its first request.
    """

    __slots__ = (
        "stub",
        "sink",
        "table_name",
        "what",
        "policy",
        "timeout_s",
        "metadata",
        "stats",
        "window",
        "slots",
        "not_found",
    )

    def __init__(
        self,
        stub: Any,
        *,
        sink_name: str,
        table_name: str,
        policy: RetryPolicy,
        timeout_s: float,
        metadata: tuple[tuple[str, str], ...],
        stats: BigtableWriterStats,
        endpoint: str = "",
        window: QuotaWindow | None = None,
        slots: LoopSlots | None = None,
        not_found: str = NO_LONGER_EXISTS,
    ) -> None:
        self.stub = stub
        self.not_found = not_found
        self.window = window
        self.slots = slots
        self.sink = sink_name
        self.table_name = table_name
        at = f" at {endpoint}" if endpoint else ""
        self.what = f"sink '{sink_name}': table '{table_name}'{at}"
        self.policy = policy
        self.timeout_s = timeout_s
        self.metadata = metadata
        self.stats = stats

    async def run(self, batch: MutateRowsBatch) -> list[FailedRecord]:
        """Write ``batch`` (a coroutine on the event loop); see :meth:`MutateRowsOperation.run`."""
        return await MutateRowsOperation(self, batch).run()


class MutateRowsOperation:
    """One batch through all its attempts; each attempt sends only the entries still pending.

    ``pending`` maps each entry of the next attempt's request to its position in the batch, so
    a rejection found on a retry still names the right record.
    """

    __slots__ = ("_call", "_batch", "_request", "_pending", "_failures", "_backoff")

    def __init__(self, call: MutateRowsCall, batch: MutateRowsBatch) -> None:
        self._call = call
        self._batch = batch
        self._request = batch.request
        self._pending: list[int] | None = None  # None: the batch's own order, all entries
        self._failures: list[FailedRecord] = []
        self._backoff: BackoffSequence | None = None

    async def run(self) -> list[FailedRecord]:
        """Send the batch until every entry is written or rejected (on the event loop).

        Returns:
            The entries rejected for their content, with their records.

        Raises:
            WriteError: A non-transient RPC failure, or transient ones past the retry deadline.
            DestinationNotFoundError: The table (or its instance) no longer exists.
        """
        call = self._call
        batch = self._batch
        call.stats.count_request(batch.entries, batch.mutations)
        while True:
            codes, messages, error = await self._attempt()
            retry, example = self._classify(codes, messages)
            if error is not None and not call.policy.is_transient(error):
                raise self._rpc_error(error)
            if not retry:
                if call.window is not None:
                    call.window.on_success()
                if self._failures:
                    call.stats.add(entries_rejected=len(self._failures))
                return self._failures
            await asyncio.sleep(self._next_wait(retry, error, example))
            self._next_request(retry)

    async def _attempt(self) -> tuple[list[int | None], dict[int, str], BaseException | None]:
        """One MutateRows call: the status code of each entry (None: no answer), the messages
        of the failed ones, and the error that ended the stream, if any."""
        request = self._request
        codes: list[int | None] = [None] * len(request.entries)
        messages: dict[int, str] = {}
        call = self._call
        slots = call.slots
        if slots is not None:
            await slots.acquire()
        try:
            stream = call.stub(request, timeout=call.timeout_s, metadata=call.metadata)
            async for response in stream:
                for result in response.entries:
                    status = result.status
                    codes[result.index] = status.code
                    if status.code:
                        messages[result.index] = status.message
        except Exception as exc:  # noqa: BLE001 - classified by the caller
            return codes, messages, exc
        finally:
            if slots is not None:
                slots.release()
        return codes, messages, None

    def _classify(
        self, codes: list[int | None], messages: dict[int, str]
    ) -> tuple[list[int], tuple[int, str] | None]:
        """Record the entries rejected for their content; return the positions to retry and an
        example of a retryable status (code, message) for the log and the final error."""
        transient = self._call.policy.transient_codes
        retry: list[int] = []
        example: tuple[int, str] | None = None
        for position, code in enumerate(codes):
            if code == 0:
                continue
            if code is None:
                retry.append(position)
                continue
            status = STATUS_BY_CODE.get(code)
            name = status.name if status is not None else None
            if name in ENTRY_RETRYABLE_CODES and name in transient:
                retry.append(position)
                if example is None:
                    example = (code, messages.get(position, ""))
                continue
            self._reject(position, name or f"status {code}", messages.get(position, ""))
        return retry, example

    def _reject(self, position: int, status: str, message: str) -> None:
        call = self._call
        index = position if self._pending is None else self._pending[position]
        entry = self._request.entries[position]
        self._failures.append(
            failed_entry(
                call.sink,
                call.table_name,
                entry.SerializeToString(),
                entry.row_key,
                status,
                message,
                self._batch.records[index],
            )
        )

    def _next_wait(
        self, retry: list[int], error: BaseException | None, example: tuple[int, str] | None
    ) -> float:
        """The backoff before retrying ``retry``; raise once the retry deadline would pass."""
        cause: BaseException
        if error is not None:
            cause = error
            if isinstance(error, grpc.RpcError) and callable(getattr(error, "code", None)):
                cause = StatusError(error.code(), error.details() or "")
        else:
            assert example is not None
            cause = StatusError.of(
                example[0], f"{len(retry)} entries failed, e.g. with {example[1]!r}"
            )
        if self._backoff is None:
            self._backoff = self._call.policy.backoffs(self._call.window)
        wait = self._backoff.next_wait(
            cause, f"{self._call.what}: MutateRows of {len(retry)} entries"
        )
        self._call.stats.add(entries_retried=len(retry))
        return wait

    def _next_request(self, retry: list[int]) -> None:
        request = self._request
        retried = MutateRowsRequestPb(
            table_name=request.table_name, app_profile_id=request.app_profile_id
        )
        retried.entries.extend(request.entries[p] for p in retry)
        pending = self._pending
        self._pending = retry if pending is None else [pending[p] for p in retry]
        self._request = retried

    def _rpc_error(self, error: BaseException) -> SinkError:
        what = self._call.what
        status = status_name(error) or type(error).__name__
        if status == "NOT_FOUND":
            return DestinationNotFoundError(
                f"{what}: MutateRows answered NOT_FOUND ({error_text(error)}); "
                f"{self._call.not_found}"
            )
        return WriteError(
            f"{what}: MutateRows failed with {status} (not retried): {error_text(error)}"
        )
