"""The batcher of one table in one sink subtask: stages entries into requests, schedules them.

- :meth:`TableBatcher.write` appends the ``RowMutationEntry`` straight into the protobuf request
  being filled (no intermediate objects) and hands the request to the subtask's event loop
  (:class:`~pyflink_gcp.core.aio.WorkQueue`, shared by all its tables) once it
  holds ``batch_max_entries`` entries, ``batch_max_bytes`` bytes or ``batch_max_mutations``
  cells (never more than Bigtable's 100,000: a batch over it is split).
- Flow control: at most ``max_in_flight_entries`` / ``max_in_flight_bytes`` of a table are
  unacknowledged (an :class:`~pyflink_gcp.core.batching.InFlightWindow`); beyond that ``write``
  blocks, which is Flink backpressure.
- What a request does once sent (per-entry retries, rejections) is
  :class:`~pyflink_gcp.bigtable.mutate_rows.MutateRowsOperation`'s, a coroutine on the loop;
  its handle's done-callback frees its slot of the window and hands over its rejected entries,
  so no thread waits on a request, and the first error is raised on the processing thread (at
  the next send or the flush).
- :meth:`TableBatcher.flush` sends the partial request and waits for everything in flight; the
  core calls it before every checkpoint barrier and at the end of input (at least once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.cloud.bigtable.data.mutations import RowMutationEntry

from pyflink_gcp.bigtable.client import MutateRowsEntryPb
from pyflink_gcp.bigtable.destinations import TableDestination
from pyflink_gcp.bigtable.mutate_rows import (
    MutateRowsBatch,
    MutateRowsCall,
    failed_entry,
    fill_entry,
)
from pyflink_gcp.bigtable.options import BigtableWriterOptions
from pyflink_gcp.core.aio import CallHandle
from pyflink_gcp.core.batching import InFlightWindow, OpenBatch
from pyflink_gcp.core.errors import SerializerError, SinkError, WriteError
from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.functions import short_repr
from pyflink_gcp.core.writer import DestinationWriter

#: Bigtable's row key limit; longer (or empty) keys are rejected before they reach a request,
#: so one bad key cannot fail the RPC of a whole batch.
MAX_ROW_KEY_BYTES = 4096

#: Starts work on the subtask's event loop without waiting for it:
#: ``start(coroutine_function, *args) -> handle``
#: (:meth:`~pyflink_gcp.core.aio.WorkQueue.submit`,
#: :meth:`~pyflink_gcp.core.aio.AsyncChannel.start`).
Start = Callable[..., CallHandle]


class TableBatcher(DestinationWriter[TableDestination]):
    """The batcher of one table in one sink subtask (see the module docstring).

    Driven from the processing thread; only the requests it starts run on the event loop.

    Args:
        destination: The table.
        call: The table's MutateRows call (stub, policy, counters).
        start: Starts a request's operation on the subtask's event loop.
        options: The batch and in-flight limits.
    """

    def __init__(
        self,
        destination: TableDestination,
        call: MutateRowsCall,
        start: Start,
        options: BigtableWriterOptions,
    ) -> None:
        super().__init__(destination)
        self._call = call
        self._start = start
        self._stats = call.stats
        self._sink = call.sink
        self._table_name = call.table_name
        self._app_profile_id = options.app_profile_id
        self._max_mutations = options.batch_max_mutations
        #: The request being filled (its entries), built by the first entry after a send: at
        #: thousands of tables most batchers wait empty, and a request weighs about 0.7 KB.
        #: The records behind its entries, their bytes and age are the open batch's.
        self._batch: MutateRowsBatch | None = None
        self.open_batch: OpenBatch[Any] = OpenBatch(
            options.batch_max_entries, options.batch_max_bytes
        )
        self._window: InFlightWindow[FailedRecord] = InFlightWindow(
            None,
            what=call.what,
            max_elements=options.max_in_flight_entries,
            max_bytes=options.max_in_flight_bytes,
            fail_fast=True,
            stall_s=call.policy.stall_bound(call.timeout_s),
        )
        self._failures: list[FailedRecord] = []
        self._closed = False

    def write(self, element: Any, record: Any) -> None:
        if type(element) is not RowMutationEntry and not isinstance(element, RowMutationEntry):
            raise self._wrong_type(element, record)
        key = element.row_key
        if not key or len(key) > MAX_ROW_KEY_BYTES:
            self._reject_key(element, record)
            return
        batch = self._batch
        count = len(element.mutations)
        if batch is not None and batch.mutations + count > self._max_mutations:
            self._send_batch()
            batch = None
        if batch is None:
            batch = self._batch = MutateRowsBatch(self._table_name, self._app_profile_id)
        entries = batch.request.entries
        entry = entries.add()
        try:
            fill_entry(entry, element)
        except BaseException:
            del entries[-1]  # no half-filled entry goes out with the next records
            if not entries:
                self._batch = None
            raise
        batch.mutations += count
        size = entry.ByteSize()
        self.bytes_accepted += size
        if self.open_batch.append(record, size) or batch.mutations >= self._max_mutations:
            self._send_batch()

    def start_flush(self) -> None:
        """Send the partial batch now, so all tables' last requests overlap."""
        if self._batch is not None:
            self._send_batch()

    def flush(self) -> list[FailedRecord]:
        if self._batch is not None:
            self._send_batch()
        error = self._window.settle()
        if isinstance(error, SinkError):
            raise error
        if error is not None:
            raise self._send_error(error) from error
        failures, self._failures = self._failures, []
        return failures + self._window.take_results()

    @property
    def is_clean(self) -> bool:
        return self._batch is None and self._window.is_clean and not self._failures

    def close(self) -> None:
        # Clean on eviction; after a task failure, whatever is in flight is abandoned (the
        # records are replayed from the last checkpoint).
        if not self._closed:
            self._closed = True
            self._stats.batcher_closed()

    def _wrong_type(self, element: Any, record: Any) -> SerializerError:
        hint = ""
        if type(element).__name__ in ("DirectRow", "ConditionalRow", "AppendRow"):
            hint = " (rows of the classic google.cloud.bigtable.row API are not accepted)"
        elif isinstance(element, list | tuple):
            hint = " (return one entry per record; put several mutations in its list)"
        return SerializerError(
            f"sink '{self._sink}': the serializer returned {type(element).__name__} "
            f"({short_repr(element)}) for record {short_repr(record)} headed to table "
            f"'{self._table_name}'; expected a RowMutationEntry (pyflink_gcp.bigtable."
            f"RowMutationEntry, the client library's google.cloud.bigtable.data."
            f"RowMutationEntry) or None to skip the record{hint}"
        )

    def _reject_key(self, element: RowMutationEntry, record: Any) -> None:
        entry = MutateRowsEntryPb()
        fill_entry(entry, element)
        why = (
            "empty row key"
            if not element.row_key
            else f"row key of {len(element.row_key)} bytes exceeds Bigtable's {MAX_ROW_KEY_BYTES}"
        )
        self._failures.append(
            failed_entry(
                self._sink,
                self._table_name,
                entry.SerializeToString(),
                element.row_key,
                "INVALID_ARGUMENT",
                why,
                record,
            )
        )
        self._stats.add(entries_rejected=1)

    def _send_batch(self) -> None:
        """Start the current batch on the loop, waiting for in-flight capacity first."""
        batch = self._batch
        assert batch is not None  # the callers send only a batch with entries
        self._batch = None
        batch.size = self.open_batch.bytes
        batch.records = self.open_batch.cut()
        batch.entries = len(batch.records)
        try:
            self._window.admit(batch.entries, batch.size)
        except SinkError:
            raise
        except Exception as error:  # an earlier request's, raised on the processing thread
            raise self._send_error(error) from error
        handle = self._start(self._call.run, batch)
        self._window.add(handle, batch.entries, batch.size)

    def _send_error(self, error: BaseException) -> SinkError:
        """The job's error for a request that failed: its own, if it is the sink's."""
        if isinstance(error, SinkError):
            return error
        return WriteError(
            f"{self._call.what}: sending a MutateRows request failed: "
            f"{type(error).__name__}: {error}"
        )
