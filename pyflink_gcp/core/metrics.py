"""The sink's metric names, in one place: groups, gauges, per-destination counters.

Every metric of a sink lives under the writer operator's metric group, in a group named
:data:`SINK_GROUP`; per-destination counters are in a key/value group
``destination`` → :func:`metric_identifier` of the destination's resource name. Resource names
are full of ``/`` and ``.`` (``projects/p/topics/x``, ``p.dataset.table``), which metric
reporters and Flink's REST API treat as scope separators or reject, so they are reduced to
``[A-Za-z0-9_]``. ``docs/metrics.md`` lists every metric this module names.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

#: The group under the operator's metric group holding every sink metric.
SINK_GROUP = "pyflink_gcp"
#: The key of the key/value group holding a destination's counters.
DESTINATION_GROUP = "destination"

#: Sink gauges, per subtask: name → meaning (``docs/metrics.md`` has the same table).
SINK_GAUGES: dict[str, str] = {
    "recordsWritten": "records handed to a destination writer",
    "recordsSkipped": "records the serializer turned into None",
    "recordsDropped": "failed records dropped by log_and_drop",
    "recordsDeadLettered": "failed records sent to the dead-letter queue",
    "activeWriters": "destination writers open now",
    "writersReleased": "destination writers released at the max_active_destinations cap",
    "lastFlushMillis": "duration of the last full flush, in milliseconds",
    "maxFlushMillis": "duration of the longest full flush of this subtask attempt, in milliseconds",
    "checkpointMarkers": "checkpoint and end-of-input markers received from the Java bridge",
}
#: Sink counters, per subtask: name → meaning.
SINK_COUNTERS: dict[str, str] = {
    "lineageDatasets": "lineage datasets reported (pyflink_gcp.core.lineage), up to the bound",
}
#: Gauges of one service's sinks only (``WriterFactory.gauges``), per subtask: name → meaning.
SERVICE_GAUGES: dict[str, str] = {
    "schemaUpdates": "BigQuery: table schema updates this subtask made (schema_update)",
    "declaredSchemaTables": "BigQuery: new tables written by the serializer's declared schema "
    "without a lookup",
    "declaredSchemaChecks": "BigQuery: of those, tables looked up after they refused it",
}
#: Gauges of an exactly-once sink's committer operator, per subtask: name → meaning.
COMMITTER_GAUGES: dict[str, str] = {
    "commits": "commits run (a commit set per completed checkpoint, restored sets, the final commit)",
    "committablesCommitted": "committables those commits published",
}
#: Per-destination counters (with ``per_destination_metrics``): name → meaning.
DESTINATION_COUNTERS: dict[str, str] = {
    "records": "records handed to this destination's writer",
    "bytes": "bytes of those records as the service counts them",
    "errors": "failed records of this destination handed to the failure handler",
}

_INVALID = re.compile(r"[^A-Za-z0-9_]+")
#: Longer identifiers are cut and end with a digest of the full name, so they stay distinct.
MAX_IDENTIFIER_LENGTH = 160


def metric_identifier(resource_name: str) -> str:
    """The metric-friendly form of a destination's resource name.

    The rule: every run of characters outside ``[A-Za-z0-9_]`` becomes one ``_``, and leading
    and trailing ``_`` are removed (``projects/p/topics/orders-eu`` →
    ``projects_p_topics_orders_eu``). Names that differ only in those characters share an
    identifier. An identifier over :data:`MAX_IDENTIFIER_LENGTH` characters is cut and ends
    with ``_`` and 8 hex digits of a CRC-32 of the full name.

    Args:
        resource_name: The destination's resource name (``str(destination)``), or
            ``"unresolved"`` for a record that had none.
    """
    identifier = _INVALID.sub("_", resource_name).strip("_") or "_"
    if len(identifier) > MAX_IDENTIFIER_LENGTH:
        digest = f"{zlib.crc32(resource_name.encode()):08x}"
        identifier = identifier[: MAX_IDENTIFIER_LENGTH - 9] + "_" + digest
    return identifier


class DestinationMetrics:
    """The per-destination counters of one sink subtask, created on a destination's first use.

    All of a destination's counters are registered together, the first time a record reaches it
    or fails for it, so ``errors`` reads 0 rather than being absent until the first failure (and
    a counter registered while Flink collects a bundle's metrics is not missing from them).

    Args:
        sink_group: The sink's metric group (:data:`SINK_GROUP` under the operator's group), or
            None when metrics are off (every call is then a no-op).
    """

    __slots__ = ("_group", "_by_name", "_by_destination")

    def __init__(self, sink_group: Any) -> None:
        self._group = sink_group
        self._by_name: dict[str, dict[str, Any]] = {}
        # The hot path's cache: the destination object itself, without building its name.
        self._by_destination: dict[object, dict[str, Any]] = {}

    def _counters(self, key: str) -> dict[str, Any]:
        counters = self._by_name.get(key)
        if counters is None:
            group = self._group.add_group(DESTINATION_GROUP, metric_identifier(key))
            counters = {n: group.counter(n) for n in DESTINATION_COUNTERS}
            self._by_name[key] = counters
        return counters

    def _of(self, destination: object) -> dict[str, Any]:
        counters = self._by_destination.get(destination)
        if counters is None:
            counters = self._by_destination[destination] = self._counters(str(destination))
        return counters

    def written(self, destination: object, nbytes: int) -> None:
        """Counts one record (and its bytes, if known now) handed to ``destination``'s writer."""
        if self._group is None:
            return
        counters = self._of(destination)
        counters["records"].inc()
        if nbytes:
            counters["bytes"].inc(nbytes)

    def bytes(self, destination: object, nbytes: int) -> None:
        """Counts ``nbytes`` more of ``destination``'s records, as its writer counted them."""
        if self._group is not None:
            self._of(destination)["bytes"].inc(nbytes)

    def error(self, destination: object) -> None:
        """Counts one failed record of ``destination`` (a resource name or ``"unresolved"``)."""
        if self._group is not None:
            self._counters(str(destination))["errors"].inc()
