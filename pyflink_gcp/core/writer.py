"""The two interfaces a service implements: a factory of writers, and a writer per destination.

A service subpackage (``pyflink_gcp.pubsub`` ...) provides one :class:`WriterFactory` (picklable
configuration; after :meth:`WriterFactory.open` it owns the clients shared by all destinations of
a subtask) and one :class:`DestinationWriter` per active destination (the per-topic publisher, the
per-table stream). The service-agnostic :class:`~pyflink_gcp.core.sink_writer.SinkWriter` drives
them: it resolves, serializes, looks the writer up in the registry and flushes them all before
each checkpoint barrier. A writer batches with the shapes of :mod:`pyflink_gcp.core.batching`
(the open batch, the window of requests in flight) and is handed its collaborators (the
service's client or transport, its options) by its factory rather than the factory itself.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

from pyflink_gcp.core.batching import OpenBatch
from pyflink_gcp.core.failure import FailedRecord
from pyflink_gcp.core.runtime_info import SubtaskInfo
from pyflink_gcp.core.types import Destination

D = TypeVar("D", bound=Destination)


class DestinationWriter(ABC, Generic[D]):
    """Buffers and writes the serialized records of one destination.

    States: *open* (accepting :meth:`write`), *dirty* (records buffered or in flight),
    *clean* (everything written so far is durable), *closed*. Writers are driven from the
    processing thread only; they may use background threads for in-flight RPCs.

    Flush triggers: the writer's own batch thresholds inside :meth:`write` (which may start an
    asynchronous send); :meth:`start_flush`, first in every flush of the sink and, under
    checkpoint markers, at an ordinary bundle end once the open batch is due (see
    :attr:`unsent_since`); and :meth:`flush`, which the sink calls before every checkpoint
    barrier, at the end of input and before evicting the writer.
    """

    #: Serialized bytes accepted so far, as the service counts them; writers add to it where
    #: they know the size (at write time, or when they encode a request). It feeds the
    #: per-destination ``bytes`` metric and the subtask's summary, at every full flush and
    #: when the writer closes.
    bytes_accepted: int = 0
    #: The part of ``bytes_accepted`` already counted in the metrics (the sink writer's).
    bytes_reported: int = 0
    #: The batch being filled, for a writer that batches its records
    #: (:mod:`~pyflink_gcp.core.batching`): :attr:`unsent_since` and :attr:`unsent_records`
    #: read it. None: the writer sends records as they arrive, or tells otherwise.
    open_batch: OpenBatch[Any] | None = None

    def __init__(self, destination: D) -> None:
        self.destination = destination

    @abstractmethod
    def write(self, element: Any, record: Any) -> None:
        """Accept one serialized element (``record`` is the input, for error messages only)."""

    def start_flush(self) -> None:
        """Send what is buffered without waiting (the default: nothing to do, for writers whose
        records are sent as they arrive)."""

    @property
    def unsent_since(self) -> float:
        """``time.monotonic()`` when the oldest record not yet handed to a sender was accepted,
        or ``math.inf`` when every accepted record was handed over.

        Under checkpoint markers an ordinary bundle end calls :meth:`start_flush` only on
        writers whose open batch is old enough (the sink's
        :meth:`~pyflink_gcp.core.sink_writer.SinkWriter.send_due`), so that thousands of
        destinations do not each send a one-record request at every bundle end. The default,
        ``-math.inf``, is always due: a writer that cannot tell keeps being sent at every
        bundle end. A writer with an :attr:`open_batch` reports that batch's
        :attr:`~pyflink_gcp.core.batching.OpenBatch.since`.
        """
        batch = self.open_batch
        return -math.inf if batch is None else batch.since

    @property
    def unsent_records(self) -> int:
        """How many accepted records wait in the open batch (bounds what bundle ends may hold)."""
        batch = self.open_batch
        return 0 if batch is None else len(batch.elements)

    @abstractmethod
    def flush(self) -> list[FailedRecord]:
        """Block until every element accepted so far is durable or rejected.

        Returns:
            The records the service rejected for their content, for the failure handler.

        Raises:
            SinkError: A non-record failure that survived the retry policy; fails the job.
        """

    @property
    @abstractmethod
    def is_clean(self) -> bool:
        """True when nothing is buffered or in flight."""

    def close(self) -> None:
        """Release client-side resources. Called on a clean writer, or when the task fails."""


class PicklesConfiguration:
    """Pickles an object as its configuration only: an allow-list, not a deny-list.

    A writer factory travels to the workers pickled, then opens clients, pools and locks there.
    Naming what *travels* (``_config_fields``) instead of what must not means a runtime field
    added later cannot break pickling or leak a half-open client into the job graph.
    :meth:`_init_runtime` sets every runtime field to its idle value; it runs after
    unpickling and should run at the end of ``__init__``.
    """

    #: The attributes that are configuration; everything else is runtime state.
    _config_fields: ClassVar[tuple[str, ...]] = ()

    def _init_runtime(self) -> None:
        """Set the runtime fields to their unopened values."""

    def __getstate__(self) -> dict[str, Any]:
        return {name: self.__dict__[name] for name in self._config_fields}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()


class WriterFactory(ABC, Generic[D]):
    """Per-service configuration that creates destination writers inside a sink subtask.

    Instances are pickled into the Flink job at ``build()``; :meth:`open` runs on the worker and
    creates the shared clients, :meth:`create_writer` is called lazily the first time a serialized
    record reaches a destination (and again after an eviction).
    """

    #: Whether the resolver (or a resolver-less sink's serializer) may return an
    #: UnroutableRecord, which goes to the failure handler (every sink of this package).
    accepts_unroutable: bool = False
    #: The destination type the resolver must return.
    destination_type: type[Destination] = Destination

    @abstractmethod
    def open(self, info: SubtaskInfo) -> None:
        """Create shared clients. Runs once per subtask, on the worker."""

    @abstractmethod
    def create_writer(self, destination: D) -> DestinationWriter[D]:
        """Create the writer of one destination (may create the destination itself)."""

    def flush_shared(self) -> list[FailedRecord]:
        """Flush state shared by all destinations (for services without per-destination writers)."""
        return []

    def gauges(self) -> dict[str, Callable[[], int]]:
        """Gauges of this service's own, by name (declared in
        :data:`~pyflink_gcp.core.metrics.SERVICE_GAUGES`), registered with the sink's others when
        the subtask opens; read on the processing thread."""
        return {}

    def close(self) -> None:
        """Release shared clients."""
