"""The Bigtable writer factory: one subtask's clients, event loop and tables; a batcher per table.

Why not the client library's ``MutationsBatcher``: building the MutateRows request directly in
protobuf and calling the RPC on a stub writes entries several times faster than the batcher or
the classic ``Table.mutate_rows`` (``bench/README.md``, Bigtable, has the figures). The
library's path converts every entry through proto-plus and builds an exception object per
acknowledged entry; its batcher also keeps only the first and last ten failures, where this sink
must hand *every* rejected entry to the failure handler. So the sink is built from small rooms:

- :mod:`~pyflink_gcp.bigtable.client`: endpoints, the data channel with its event loop and the
  MutateRows stub, the table admin client;
- :mod:`~pyflink_gcp.bigtable.tables`: the existence check and creation of each table;
- :mod:`~pyflink_gcp.bigtable.batcher`: stages a table's entries into requests (hot path);
- :mod:`~pyflink_gcp.bigtable.mutate_rows`: one request through its per-entry retries, a
  coroutine on the loop;
- :class:`~pyflink_gcp.core.aio.WorkQueue`: the subtask's queue of those operations, run by a
  few worker coroutines on the loop (a waiting request holds no task);
- this module: the factory that opens them on the worker and shares the loop among the tables
  (``max_in_flight_requests`` MutateRows calls in flight per subtask, over all its tables,
  fewer after quota errors).
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from pyflink_gcp.bigtable.batcher import TableBatcher
from pyflink_gcp.bigtable.client import BigtableClient, request_metadata
from pyflink_gcp.bigtable.destinations import TableDestination
from pyflink_gcp.bigtable.mutate_rows import NO_LONGER_EXISTS, NOT_CREATED, MutateRowsCall
from pyflink_gcp.bigtable.options import BigtableWriterOptions, TableCreateOptions
from pyflink_gcp.bigtable.stats import BigtableWriterStats
from pyflink_gcp.bigtable.tables import BigtableTables
from pyflink_gcp.core.aio import CallHandle, LoopSlots, Work, WorkQueue
from pyflink_gcp.core.errors import WriteError
from pyflink_gcp.core.quota import QuotaWindow
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.core.runtime_info import SubtaskInfo
from pyflink_gcp.core.writer import PicklesConfiguration, WriterFactory

_LOG = logging.getLogger("pyflink_gcp.bigtable")

#: MutateRows operations running at once per subtask, per call allowed in flight: an operation
#: waiting out its backoff holds its worker, so twice as many workers as calls keep the calls
#: busy while some back off.
WORKERS_PER_CALL = 2

#: MutateRows requests waiting for a worker at most per subtask. A checkpoint at 10,000 tables
#: hands the loop 10,000 requests; more than this many queued and the processing thread waits
#: (backpressure) instead of keeping the requests of the next checkpoints queued too.
MAX_QUEUED_REQUESTS = 1_000


class BigtableWriterFactory(PicklesConfiguration, WriterFactory[TableDestination]):
    """Configuration of a subtask's Bigtable writing; after :meth:`open`, its shared state.

    Holds the client (the data channel with its event-loop thread, on which every table
    batcher's requests run from one queue; the lazy admin client), and the tables known to
    exist. A table is
    checked (and, with table create options, created) the first time a batcher is built for
    it; without them, its check starts there and its first requests go out alongside it
    (:meth:`BigtableTables.start`).

    Args:
        sink_name: For errors, logs and thread names.
        options: The writer options.
        create_options: The column families of created tables; None: the sink creates none.
        endpoint: The builder's ``set_endpoint``, if any.
        admin_endpoint: The builder's ``set_admin_endpoint``, if any.
        resolver_name: Named by the creation-bound error.
    """

    accepts_unroutable = True
    destination_type = TableDestination
    _config_fields: ClassVar[tuple[str, ...]] = (
        "sink_name",
        "options",
        "create_options",
        "endpoint",
        "admin_endpoint",
        "resolver_name",
    )

    def __init__(
        self,
        *,
        sink_name: str,
        options: BigtableWriterOptions,
        create_options: TableCreateOptions | None = None,
        endpoint: str | None = None,
        admin_endpoint: str | None = None,
        resolver_name: str = "",
    ) -> None:
        self.sink_name = sink_name
        self.options = options
        self.create_options = create_options
        self.endpoint = endpoint
        self.admin_endpoint = admin_endpoint
        self.resolver_name = resolver_name
        self._init_runtime()

    def _init_runtime(self) -> None:
        self.retry_policy = RetryPolicy(deadline_s=self.options.retry_deadline_s)
        #: MutateRows in flight: max_in_flight_requests, less after quota errors.
        self.quota = QuotaWindow(
            self.options.max_in_flight_requests, f"sink '{self.sink_name}': MutateRows requests"
        )
        #: The attempts in flight on the loop, bounded by the quota window's limit.
        self.slots = LoopSlots(lambda: self.quota.limit)
        self.stats = BigtableWriterStats()
        self.client: BigtableClient | None = None
        self.queue: WorkQueue | None = None
        self.tables: BigtableTables | None = None
        self._info: SubtaskInfo | None = None

    def open(self, info: SubtaskInfo) -> None:
        self._info = info
        self.client = BigtableClient(self.sink_name, self.endpoint, self.admin_endpoint)
        self.slots = LoopSlots(lambda: self.quota.limit)  # fresh for the new loop
        workers = WORKERS_PER_CALL * self.options.max_in_flight_requests
        self.queue = WorkQueue(self.client.data.start, lambda: workers, MAX_QUEUED_REQUESTS)
        self.tables = self._tables(info.subtask_index)
        _LOG.info(
            "%s: subtask %d writes to Bigtable at %s",
            self.sink_name,
            info.subtask_index,
            self.client.endpoint.host or "the default endpoint",
        )

    def _tables(self, subtask_index: int) -> BigtableTables:
        return BigtableTables(
            sink_name=self.sink_name,
            admin=self._admin,
            policy=self.retry_policy,
            timeout_s=self.retry_policy.attempt_timeout(self.options.rpc_timeout_s),
            create_options=self.create_options,
            max_created=self.options.max_created_destinations,
            max_created_per=self.options.max_created_destinations_per,
            resolver_name=self.resolver_name,
            subtask_index=subtask_index,
            stats=self.stats,
            endpoint=self.client.admin_endpoint_name if self.client is not None else "",
        )

    def create_writer(self, destination: TableDestination) -> TableBatcher:
        if self.client is None or self.tables is None:
            raise WriteError(f"sink '{self.sink_name}': the Bigtable writer is not open")
        self.tables.start(destination)
        self.stats.batcher_opened()
        table_name = str(destination)
        call = MutateRowsCall(
            self.client.mutate_rows,
            sink_name=self.sink_name,
            table_name=table_name,
            policy=self.retry_policy,
            timeout_s=self.retry_policy.attempt_timeout(self.options.rpc_timeout_s),
            metadata=request_metadata(table_name, self.options.app_profile_id),
            stats=self.stats,
            endpoint=self.client.endpoint_name,
            window=self.quota,
            slots=self.slots,
            not_found=NOT_CREATED if self.create_options is None else NO_LONGER_EXISTS,
        )
        return TableBatcher(destination, call, self.start, self.options)

    def start(self, work: Work, *args: Any) -> CallHandle:
        """Queue ``work(*args)`` (a MutateRows operation) for the subtask's event loop."""
        queue = self.queue
        if queue is None:
            raise WriteError(f"sink '{self.sink_name}': the Bigtable writer is not open")
        return queue.submit(work, *args)

    def close(self) -> None:
        self.tables = None
        if self.client is not None:
            self.client.close()  # ends the queued operations CANCELLED
            self.client = None
        self.queue = None
        _LOG.info("%s: Bigtable writer stats %s", self.sink_name, self.stats)

    def _admin(self) -> Any:
        if self.client is None:
            raise WriteError(f"sink '{self.sink_name}': the Bigtable writer is not open")
        return self.client.admin
