"""Lineage of dynamic destinations: each destination a subtask starts writing to, reported once.

Flink's lineage interfaces (``org.apache.flink.streaming.api.lineage``: a sink implementing
``LineageVertexProvider`` gives its datasets, and listeners registered with
``execution.job-status-changed-listeners`` receive them in a ``JobCreatedEvent``) describe a job
as it is submitted: the lineage graph is built with the stream graph, before a record flows. A
sink whose resolver names its destinations from the data cannot be described there, so a job
reporting only what is configured looks as if it writes nothing. This module reports at run
time instead, where the destinations become known: the first time a subtask opens a writer for
a destination (:class:`~pyflink_gcp.core.registry.WriterRegistry`), its dataset is reported,
unless the subtask reported that dataset already.

A dataset is OpenLineage-shaped (:class:`LineageDataset`: a namespace, a name and string
facets); each destination type names its own (``lineage_dataset()`` in the service's
``destinations.py``). Without a listener, a report is one INFO line on the
``pyflink_gcp.lineage`` logger and one increment of the sink's ``lineageDatasets`` counter; a
:class:`LineageListener` registered on the builder (``set_lineage_listener``) receives the
datasets as well, in the Python worker, to forward them to a lineage backend. Each subtask
reports at most ``max_lineage_datasets`` datasets (``set_max_lineage_datasets``), so a resolver
naming a new destination per record cannot flood the backend or the log: past the bound the
subtask says once that the bound was reached, logs a WARNING and reports nothing more.

**Across restores.** Under the Java bridge's marker operator a subtask's reports survive a
failover: at each checkpoint marker the writer hands the operator the dataset keys it reported
since the last one (:meth:`LineageReporter.take_state`, the element ``(LINEAGE_STATE_TAG, keys,
limit reached)``), the operator keeps them in its state (``LineageState`` in ``java-bridge/``),
and a restored operator hands them back when the writer opens, as the job parameter
:data:`LINEAGE_STATE_PARAMETER`; the reporter starts from them (:meth:`LineageReporter.restore`).
A dataset first reported after the checkpoint restored from is reported again. The state is
Flink's broadcast state, each subtask its own copy: with a new parallelism, subtask ``i`` starts
from old subtask ``i % old parallelism``'s datasets, and reports again a dataset only another
subtask had reported. Under PyFlink's own operator (no bridge jar, or markers off) nothing is
kept: each attempt of a subtask reports its datasets anew.

What is known when the job is built, a sink's fixed destination (Spanner's database), also goes
into Flink's lineage graph: the pipeline then ends with the Java bridge's
``LineageDiscardingSink`` (:func:`lineage_end_sink`), which names its dataset to Flink.
"""

from __future__ import annotations

import base64
import logging
import pickle
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pyflink_gcp.core.runtime_info import SubtaskInfo

_LOG = logging.getLogger("pyflink_gcp.lineage")

#: Datasets a subtask reports at most, by default (``set_max_lineage_datasets``).
DEFAULT_MAX_LINEAGE_DATASETS = 1_000
#: The sink counter incremented once per dataset reported (``docs/metrics.md``).
LINEAGE_COUNTER = "lineageDatasets"
#: The namespace of a destination type that names no dataset of its own.
FALLBACK_NAMESPACE = "gcp"
#: The first item of the element a writer hands its marker operator to keep (the Java bridge's
#: ``LineageState.TAG``, which recognizes the element by it).
LINEAGE_STATE_TAG = "\x00pyflink-gcp:lineage"
#: The job parameter under which the marker operator hands a writer its kept elements: base64
#: pickles, comma-separated (empty on a first start; absent under PyFlink's own operator).
LINEAGE_STATE_PARAMETER = "pyflink-gcp.lineage.reported"

#: What a writer hands its marker operator: ``(LINEAGE_STATE_TAG, keys, limit reached)``.
LineageStateElement = tuple[str, tuple[tuple[str, str], ...], bool]


@dataclass(frozen=True, slots=True)
class LineageDataset:
    """One dataset a sink writes to, as OpenLineage names datasets.

    ``namespace`` is the data source and ``name`` the dataset within it: ``bigquery`` and
    ``project.dataset.table`` for a BigQuery table, ``pubsub`` and ``topic:project:topic`` for a
    Pub/Sub topic (OpenLineage's naming conventions; docs/lineage.md lists every service's).
    Equality is the pair, so a dataset is reported once however many destinations share it (the
    partitions of one BigQuery table, say); ``facets`` describe it further and take no part.

    Attributes:
        namespace: The data source (``bigquery``, ``pubsub``, ...).
        name: The dataset's unique name within the namespace.
        facets: ``(key, value)`` string pairs, sorted by key: ``service`` (the sink's service),
            ``resource`` (the destination's resource name), ``sink`` (the sink name) and, where
            the sink has one, ``writeMethod``. The same shape as Flink's ``DatasetConfigFacet``.
    """

    namespace: str
    name: str
    facets: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for what, value in (("namespace", self.namespace), ("name", self.name)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"a LineageDataset needs a non-empty {what}, got {value!r}")

    @staticmethod
    def of(
        namespace: str, name: str, facets: Mapping[str, str] | Iterable[tuple[str, str]] = ()
    ) -> LineageDataset:
        """The dataset ``namespace``/``name`` with ``facets`` (a mapping or pairs; values are
        turned into strings, and a later pair of the same key wins)."""
        pairs = facets.items() if isinstance(facets, Mapping) else facets
        merged = {str(k): str(v) for k, v in pairs}
        return LineageDataset(namespace, name, tuple(sorted(merged.items())))

    def with_facets(self, facets: Mapping[str, str]) -> LineageDataset:
        """This dataset with ``facets`` added (replacing facets of the same keys)."""
        return LineageDataset.of(self.namespace, self.name, [*self.facets, *facets.items()])

    def facet(self, key: str) -> str | None:
        """The value of facet ``key``, or None."""
        for k, v in self.facets:
            if k == key:
                return v
        return None

    @property
    def key(self) -> tuple[str, str]:
        """``(namespace, name)``: what identifies the dataset."""
        return (self.namespace, self.name)

    def to_dict(self) -> dict[str, Any]:
        """``{"namespace": ..., "name": ..., "facets": {...}}``, ready for JSON."""
        return {"namespace": self.namespace, "name": self.name, "facets": dict(self.facets)}

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LineageDataset):
            return self.key == other.key
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.key)

    def __str__(self) -> str:
        return f"{self.namespace}:{self.name}"


def dataset_of(destination: object) -> LineageDataset:
    """The dataset of ``destination``: its type's ``lineage_dataset()``; for a destination type
    without one, the :data:`FALLBACK_NAMESPACE` and its resource name."""
    method = getattr(destination, "lineage_dataset", None)
    if callable(method):
        dataset = method()
        if isinstance(dataset, LineageDataset):
            return dataset
    name = str(destination)
    return LineageDataset.of(FALLBACK_NAMESPACE, name, {"resource": name})


def resource_dataset(namespace: str, name: str, service: str, resource: str) -> LineageDataset:
    """What every service's ``lineage_dataset()`` returns: the dataset with its ``service`` and
    ``resource`` facets (the destination's full resource name)."""
    return LineageDataset.of(namespace, name, {"service": service, "resource": resource})


class LineageListener:
    """Receives the datasets a sink subtask starts writing to; registered with
    ``set_lineage_listener()`` on any sink builder.

    One copy runs in every subtask of the sink, in its Python worker, so it must be picklable
    (create clients in :meth:`open`, not in ``__init__``). :meth:`on_dataset` is called on the
    processing thread, once per dataset the subtask has not reported before, right after the
    subtask opened the destination's first writer; it delays that record, so hand slow work
    (a request to a lineage backend) to a thread or a queue. What it raises is logged and the
    job goes on: lineage is never a reason to stop writing.

    A plain callable ``fn(dataset)`` may be registered instead of a subclass.
    """

    def open(self, info: SubtaskInfo) -> None:
        """The subtask starts (``info`` names the sink and the subtask)."""

    def on_dataset(self, dataset: LineageDataset) -> None:
        """A dataset this subtask had not reported: it now writes to it."""
        raise NotImplementedError

    def on_limit_reached(self, limit: int) -> None:
        """The subtask reported ``limit`` datasets and met one more: it reports nothing more."""

    def close(self) -> None:
        """The subtask ends."""


class _CallableListener(LineageListener):
    """A plain ``fn(dataset)`` registered as a listener."""

    def __init__(self, fn: Callable[[LineageDataset], Any]) -> None:
        self.fn = fn

    def on_dataset(self, dataset: LineageDataset) -> None:
        self.fn(dataset)


def as_listener(listener: Any) -> LineageListener | None:
    """``listener`` as a :class:`LineageListener` (a plain callable is wrapped); None stays None.

    Raises:
        TypeError: Neither a LineageListener, a callable nor None.
    """
    if listener is None or isinstance(listener, LineageListener):
        return listener
    if callable(listener):
        return _CallableListener(listener)
    raise TypeError(
        f"a lineage listener is a LineageListener or a callable fn(dataset), got "
        f"{type(listener).__name__}"
    )


@dataclass(frozen=True, slots=True)
class LineageSettings:
    """A sink's lineage settings, carried in its ``SinkConfig``.

    Attributes:
        listener: Receives the datasets besides the log and the counter; None for none.
        max_datasets: Datasets each subtask reports at most; 0 turns lineage reporting off.
        facets: Facets of the sink added to every dataset it reports (``sink``, ``writeMethod``).
    """

    listener: LineageListener | None = None
    max_datasets: int = DEFAULT_MAX_LINEAGE_DATASETS
    facets: tuple[tuple[str, str], ...] = ()


def sink_facets(sink_name: str, factory: Any, requires_bridge: str | None = None) -> dict[str, str]:
    """The facets a sink adds to each dataset: its name and, where it has one, its write method
    (the factory's ``write_method``, else the method that needs the bridge)."""
    facets = {"sink": sink_name}
    method = getattr(factory, "write_method", None) or requires_bridge
    if method is None and type(factory).__name__ == "BigQueryWriterFactory":
        # The default-stream factory is BigQuery's at-least-once method (as the sink's repr says).
        method = "STORAGE_API_AT_LEAST_ONCE"
    if method is not None:
        facets["writeMethod"] = getattr(method, "name", str(method).rpartition(".")[2])
    return facets


class LineageReporter:
    """One sink subtask's lineage: reports each new dataset once, up to the bound.

    :meth:`resolved` is the writer registry's hook for a destination whose writer was just
    opened. A destination opened again (after an idle eviction, or at the ``max_active`` cap)
    maps to a dataset already reported and costs one set lookup. The reported datasets are
    remembered up to the bound, so memory stays bounded with it; under the bridge's marker
    operator they are also kept in its state and restored after a failover (:meth:`restore`,
    :meth:`take_state`). Not thread-safe: used from the processing thread only.

    Args:
        sink_name: Named in the log lines.
        settings: The listener, the bound and the sink's facets.
    """

    def __init__(self, sink_name: str, settings: LineageSettings) -> None:
        self._sink = sink_name
        self._settings = settings
        self._listener = settings.listener
        self._limit = settings.max_datasets
        self._facets = dict(settings.facets)
        self._reported: set[tuple[str, str]] = set()
        self._counter: Any = None
        self._subtask = 0
        #: Whether the bound was met: nothing more is reported.
        self.limit_reached = False
        #: Whether the operator keeps what was reported (:meth:`restore` was given its state).
        self._keeps_state = False
        #: Reported since the last :meth:`take_state`.
        self._unsaved: list[tuple[str, str]] = []
        self._limit_saved = False
        #: Datasets reported before a restore (by this subtask or the one it inherits from).
        self.restored = 0

    @property
    def enabled(self) -> bool:
        return self._limit > 0

    @property
    def reported(self) -> int:
        """Datasets this subtask reported."""
        return len(self._reported)

    def open(self, info: SubtaskInfo, metric_group: Any = None) -> None:
        """Register the ``lineageDatasets`` counter in ``metric_group`` (the sink's group, if
        any) and open the listener."""
        self._subtask = info.subtask_index
        if metric_group is not None and self.enabled:
            self._counter = metric_group.counter(LINEAGE_COUNTER)
        if self._listener is not None and self.enabled:
            self._listener.open(info)

    def restore(self, parameter: str | None) -> None:
        """Start from what the subtask reported before a restore.

        Args:
            parameter: The marker operator's :data:`LINEAGE_STATE_PARAMETER`: its kept
                elements (empty on a first start); None when the operator keeps none (PyFlink's
                own operator), and then :meth:`take_state` gives nothing.
        """
        if parameter is None or not self.enabled:
            return
        self._keeps_state = True
        keys, limit_reached = restored_state(parameter, self._sink)
        for key in keys:
            if len(self._reported) >= self._limit:
                limit_reached = True
                break
            self._reported.add(key)
        self.restored = len(self._reported)
        self.limit_reached = self._limit_saved = limit_reached
        if self._reported or limit_reached:
            _LOG.info(
                "%s: subtask %d restored %d lineage datasets it reported before%s; they are "
                "not reported again",
                self._sink,
                self._subtask,
                self.restored,
                " (and its max_lineage_datasets was reached)" if limit_reached else "",
            )

    def take_state(self) -> LineageStateElement | None:
        """What the marker operator is to keep at this checkpoint marker: the datasets reported
        since the last call, and whether the bound was reached; None when there is nothing new
        or the operator keeps nothing."""
        if not self._keeps_state:
            return None
        newly_limited = self.limit_reached and not self._limit_saved
        if not self._unsaved and not newly_limited:
            return None
        keys, self._unsaved = tuple(self._unsaved), []
        self._limit_saved = self.limit_reached
        return (LINEAGE_STATE_TAG, keys, self.limit_reached)

    def close(self) -> None:
        if self._listener is not None and self.enabled:
            try:
                self._listener.close()
            except Exception:  # noqa: BLE001 - lineage never fails the sink
                _LOG.exception("%s: the lineage listener's close() raised", self._sink)

    def resolved(self, destination: object) -> None:
        """A writer for ``destination`` was opened: report its dataset if it is new."""
        if self.limit_reached or not self.enabled:
            return
        dataset = dataset_of(destination)
        key = dataset.key
        if key in self._reported:
            return
        if len(self._reported) >= self._limit:
            self._reach_limit(dataset)
            return
        self._reported.add(key)
        if self._keeps_state:
            self._unsaved.append(key)
        dataset = dataset.with_facets(self._facets)
        _LOG.info(
            "%s: subtask %d writes to lineage dataset %s (resource %s)",
            self._sink,
            self._subtask,
            dataset,
            dataset.facet("resource") or destination,
        )
        if self._counter is not None:
            self._counter.inc()
        if self._listener is not None:
            try:
                self._listener.on_dataset(dataset)
            except Exception:  # noqa: BLE001 - lineage never fails the sink
                _LOG.exception(
                    "%s: the lineage listener raised for dataset %s", self._sink, dataset
                )

    def _reach_limit(self, dataset: LineageDataset) -> None:
        self.limit_reached = True
        _LOG.warning(
            "%s: subtask %d reported %d lineage datasets, its max_lineage_datasets; %s and the "
            "datasets after it are not reported (raise set_max_lineage_datasets() to see more)",
            self._sink,
            self._subtask,
            self._limit,
            dataset,
        )
        if self._listener is not None:
            try:
                self._listener.on_limit_reached(self._limit)
            except Exception:  # noqa: BLE001 - lineage never fails the sink
                _LOG.exception("%s: the lineage listener's on_limit_reached() raised", self._sink)


def restored_state(parameter: str, sink_name: str = "") -> tuple[list[tuple[str, str]], bool]:
    """The dataset keys and the limit flag in a :data:`LINEAGE_STATE_PARAMETER` value, in the
    order they were kept. An element that cannot be read is logged and skipped: lineage never
    fails the sink (the datasets it named are reported again)."""
    keys: list[tuple[str, str]] = []
    limit_reached = False
    for part in parameter.split(","):
        if not part:
            continue
        try:
            tag, element_keys, element_limit = pickle.loads(base64.b64decode(part))
            if tag != LINEAGE_STATE_TAG:
                raise ValueError(f"not a lineage element: {tag!r}")
            keys.extend((str(namespace), str(name)) for namespace, name in element_keys)
        except Exception:  # noqa: BLE001 - lineage never fails the sink
            _LOG.exception("%s: a restored lineage element could not be read", sink_name)
            continue
        limit_reached = limit_reached or bool(element_limit)
    return keys, limit_reached


# -- Flink's lineage graph: the datasets known when the job is built ------------------------------

#: The bridge's discarding sink that names those datasets to Flink (``java-bridge/``): it takes
#: ``(namespaces, names, configs)``, one entry per dataset.
LINEAGE_SINK = "dev.pyflinkgcp.bridge.LineageDiscardingSink"


def static_datasets(
    fixed_destination: object | None, settings: LineageSettings
) -> list[LineageDataset]:
    """The datasets a sink writes to that are known when the job is built: its fixed destination's
    (a Spanner sink's database), with the sink's facets; none for a sink whose resolver names
    its destinations from the data, or with lineage turned off."""
    if fixed_destination is None or settings.max_datasets == 0:
        return []
    return [dataset_of(fixed_destination).with_facets(dict(settings.facets))]


def bridge_shipped(j_env_conf: Any) -> bool:
    """Whether the job built with the Java configuration ``j_env_conf`` ships the bridge jar
    (``pipeline.jars``), so a class of it can end the pipeline on a cluster too."""
    from pyflink.common import Configuration
    from pyflink.java_gateway import get_gateway

    from pyflink_gcp.core.bridge import JAR

    key = get_gateway().jvm.org.apache.flink.configuration.PipelineOptions.JARS.key()
    jars = Configuration.parse_list_value(j_env_conf.getString(key, None))
    return JAR.is_file() and JAR.as_uri() in jars


def lineage_java_sink(datasets: list[LineageDataset]) -> Any:
    """The bridge's :data:`LINEAGE_SINK` naming ``datasets``, for ``sinkTo``: Flink then lists
    them as the sink's datasets in the job's lineage graph (``JobCreatedEvent``). The caller
    checks that the job ships the bridge jar (:func:`bridge_shipped`)."""
    from pyflink_gcp.core.bridge import java_class

    return java_class(LINEAGE_SINK)(
        [d.namespace for d in datasets],
        [d.name for d in datasets],
        [dict(d.facets) for d in datasets],
    )


def lineage_end_sink(config: Any, ds: Any) -> Any:
    """The Java sink that ends the pipeline of the sink ``config`` configures after ``ds`` (the
    writer's output): the bridge's :data:`LINEAGE_SINK` when the sink's datasets are known now
    and the job ships the bridge jar, else None (Flink's plain discarding sink then)."""
    from pyflink.util.java_utils import get_j_env_configuration

    datasets = static_datasets(config.fixed_destination, config.lineage)
    if not datasets:
        return None
    j_env_conf = get_j_env_configuration(ds._j_data_stream.getExecutionEnvironment())
    if not bridge_shipped(j_env_conf):
        _LOG.debug(
            "%s: the job does not ship the Java bridge; Flink's lineage graph names no dataset "
            "of it",
            config.sink_name,
        )
        return None
    return lineage_java_sink(datasets)
