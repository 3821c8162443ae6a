"""What every sink builder shares: name, resolver, serializer, field selection, failure handler,
endpoint, writer options and (for sinks that create destinations) the create disposition.

A service builder subclasses :class:`SinkBuilder` (or :class:`CreatingSinkBuilder`), names its
options type, adds the setters of its own service, and in ``build()`` calls
:meth:`SinkBuilder._validate_common` before assembling its
:class:`~pyflink_gcp.core.sink_writer.SinkConfig` with :meth:`SinkBuilder._sink_config`, which
reads the shared options (buffering, lifetimes, metrics) by their shared names. Validation
happens at ``build()`` so that a mistake surfaces where the job is written, not on a worker
minutes later.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self

from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.failure import FailureHandler
from pyflink_gcp.core.fields import FieldSelection, SelectedFields
from pyflink_gcp.core.functions import as_resolver, ensure_picklable, with_context
from pyflink_gcp.core.lineage import (
    DEFAULT_MAX_LINEAGE_DATASETS,
    LineageListener,
    LineageSettings,
    as_listener,
    sink_facets,
)
from pyflink_gcp.core.options import CreateDisposition, DestinationWriterOptions, WriterOptions
from pyflink_gcp.core.sink_writer import SinkConfig
from pyflink_gcp.core.writer import WriterFactory


class SinkBuilder:
    """Base of the sink builders. Only the resolver and the serializer are required."""

    #: The default sink name (``set_sink_name`` overrides it).
    default_name = "sink"
    #: Sinks with a fixed destination (Spanner) have no resolver.
    uses_resolver = True
    #: The service's ``<Service>WriterOptions`` type, taken by :meth:`set_writer_options`.
    options_type: ClassVar[type[WriterOptions]] = WriterOptions

    def __init__(self) -> None:
        self._options: Any = self.options_type()
        self._name = self.default_name
        self._resolver: Any = None
        self._serializer: Any = None
        self._failure_handler = FailureHandler.fail_job()
        self._endpoint: str | None = None
        self._chain_with_upstream = True
        self._checkpoint_markers = True
        self._uid: str | None = None
        self._selection: FieldSelection | None = None
        self._lineage_listener: LineageListener | None = None
        self._max_lineage_datasets = DEFAULT_MAX_LINEAGE_DATASETS

    def set_sink_name(self, name: str) -> Self:
        """The name used in errors, logs and metrics."""
        self._name = name
        return self

    def set_uid(self, uid: str) -> Self:
        """The stable identity of the sink's operators in savepoints (default: none for the
        writer; ``pyflink-gcp-<sink name>-committer`` for an exactly-once sink's committer).

        Flink gives a restored operator its state by uid. The writer gets ``<uid>-writer`` and
        an exactly-once sink's committer ``<uid>-committer``, so a job restored from a
        savepoint after operators were added or removed (with ``--allowNonRestoredState`` or
        not) still commits what the last checkpoint held. ``ds.sink_to(sink).uid(...)`` names
        only the stateless discarding sink that ends the pipeline, not these operators.
        """
        self._uid = uid
        return self

    def set_destination_resolver(self, resolver: Any) -> Self:
        """``(record, WriterContext) -> Destination``, or an object with ``resolve(record, ctx)``.

        Called once per record before the serializer; must be picklable, deterministic and
        cheap, and never return None.
        """
        self._resolver = resolver
        return self

    def set_serializer(self, serializer: Any) -> Self:
        """Turns a record into the service's element (None skips the record)."""
        self._serializer = serializer
        return self

    def set_field_selection(self, selection: FieldSelection) -> Self:
        """Which fields of each record are written: ``FieldSelection.drop([...])``,
        ``.keep([...])`` or ``.only(field)`` (default: the whole record).

        The resolver still sees the whole record, so a record can be routed on a field (its
        tenant, its country) that is not written; the serializer gets the selected record
        (:mod:`pyflink_gcp.core.fields`). A record the selection cannot apply to goes to the
        failure handler. At most one selection per sink: a second, different one is refused.
        """
        selection = self._require(
            selection,
            FieldSelection,
            "set_field_selection",
            "FieldSelection.drop([...]), .keep([...]) or .only(field)",
        )
        if self._selection is not None and selection != self._selection:
            raise ConfigurationError(
                f"sink '{self._name}': set_field_selection() was already given "
                f"{self._selection!r}; at most one of drop, keep and only selects the written "
                f"fields, got {selection!r} too"
            )
        self._selection = selection
        return self

    def _select_fields(self, serializer: Any) -> Any:
        """The ``(record, context)`` serializer that applies the field selection, decided at
        ``build()``: by default the serializer gets the selected record. A sink whose
        serializer also routes (Spanner's names each mutation's table) applies it to what the
        serializer returns instead."""
        assert self._selection is not None
        return SelectedFields(self._selection, serializer)

    def set_failure_handler(self, handler: FailureHandler) -> Self:
        """What happens to records the service rejects for their content (default: fail)."""
        if not isinstance(handler, FailureHandler):
            raise ConfigurationError(
                "set_failure_handler() takes FailureHandler.fail_job(), .log_and_drop() or "
                f".send_to_dead_letter_queue(...), got {type(handler).__name__}"
            )
        self._failure_handler = handler
        return self

    def set_writer_options(self, options: Any) -> Self:
        """Buffering, retries, in-flight requests, lifetimes and metrics of the writer:
        ``<Service>WriterOptions.builder()...build()``."""
        expected = self.options_type.__name__
        self._options = self._require(
            options,
            self.options_type,
            "set_writer_options",
            f"{expected} ({expected}.builder()...build())",
        )
        return self

    def _require(self, value: Any, kind: type, setter: str, takes: str) -> Any:
        """``value`` if it is a ``kind``; else a ConfigurationError naming the sink, the setter
        and what it takes (the one type check of every setter that takes a value object)."""
        if not isinstance(value, kind):
            raise ConfigurationError(
                f"sink '{self._name}': {setter}() takes {takes}, got {type(value).__name__}"
            )
        return value

    def set_endpoint(self, endpoint: str) -> Self:
        """``host:port`` of the service (TLS, Application Default Credentials); an
        ``http://host:port`` URL means a plain-text emulator. Default: the service's emulator
        variable if set, else the service."""
        self._endpoint = endpoint
        return self

    def set_chain_with_upstream(self, enabled: bool = True) -> Self:
        """Run the Python functions right before the writer inside its operator (default: on).

        When the job is executed, the writer takes the plain ``map``/``flat_map``/``filter``/
        ``process`` functions right before it (no side outputs, not keyed, at its parallelism,
        read by nothing else) into its own marker operator (:mod:`pyflink_gcp.core.fusion`):
        records reach it without a second JVM-to-Python crossing and (de)serialization, and it
        keeps its checkpoint markers and flush thresholds; its bundles are no longer than the
        job's (``python.fn-execution.bundle.size`` and ``bundle.time``), as the functions' were
        on their own. A stream also read by another operator or sink, even one added after
        ``sink_to``, is not taken in, so no function runs twice. ``False`` keeps the writer in
        an operator chain of its own, after its upstream's operator.
        """
        self._chain_with_upstream = bool(enabled)
        return self

    def set_checkpoint_markers(self, enabled: bool = True) -> Self:
        """Wait for writes only before checkpoint barriers and at the end of input (default: on).

        PyFlink ends the writer's bundles every buffered-records count and buffer time as well
        as at each checkpoint barrier, and Python alone cannot tell them apart, so without
        markers every bundle end waits until everything written is durable. With markers (the
        Java bridge's operator puts one into the input before each barrier) an ordinary bundle
        end only hands the buffered records to the senders, and the writer waits at the marker.
        The guarantee is the same; the task thread stops waiting on the service between
        checkpoints. Applies on plain and keyed streams of Python objects or typed records, in
        a chain of the writer's own or fused by ``set_chain_with_upstream()``.
        """
        self._checkpoint_markers = bool(enabled)
        return self

    def set_lineage_listener(self, listener: Any) -> Self:
        """Hear of each dataset the sink starts writing to: a
        :class:`~pyflink_gcp.core.lineage.LineageListener` or a callable ``fn(dataset)``
        (default: none; the datasets are still logged and counted).

        Each subtask calls it once per dataset it had not reported, when it opens the first
        writer of a destination, up to ``set_max_lineage_datasets()``; it runs in the Python
        worker and must be picklable. See docs/lineage.md.
        """
        try:
            self._lineage_listener = as_listener(listener)
        except TypeError as exc:
            raise ConfigurationError(f"sink '{self._name}': set_lineage_listener(): {exc}") from exc
        return self

    def set_max_lineage_datasets(self, count: int) -> Self:
        """How many datasets each subtask reports at most (default 1,000; 0 turns lineage
        reporting off). Past the bound a subtask logs one WARNING, tells the listener once
        (``on_limit_reached``) and reports nothing more, so a resolver naming a new destination
        per record cannot flood the lineage backend or the log."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ConfigurationError(
                f"sink '{self._name}': set_max_lineage_datasets() takes an int >= 0, got {count!r}"
            )
        self._max_lineage_datasets = count
        return self

    def _sink_config(
        self,
        name: str,
        factory: WriterFactory[Any],
        serializer: Any,
        **service_fields: Any,
    ) -> SinkConfig:
        """The :class:`SinkConfig` of the sink being built: the fields every builder owns
        (resolver, failure handler, chaining) and the shared writer options from here, anything
        else of the service's from ``service_fields``.
        """
        options: WriterOptions = self._options
        check = getattr(self._resolver, "check_sink", None)
        if self.uses_resolver and callable(check):
            # Resolvers that know every destination they can return (pyflink_gcp.routing) are
            # checked against the sink now rather than per record.
            check(name, factory.destination_type, factory.accepts_unroutable)
        if not callable(getattr(serializer, "serialize", None)):
            # A plain callable may take (record) or (record, context): decided once, here.
            serializer = with_context(serializer, "serializer", name)
        if self._selection is not None:
            serializer = self._select_fields(serializer)
        if isinstance(options, DestinationWriterOptions):
            service_fields.setdefault("idle_timeout_s", options.idle_timeout_s)
            service_fields.setdefault("max_active", options.max_active_destinations)
        else:
            service_fields.setdefault("idle_timeout_s", None)
        return SinkConfig(
            sink_name=name,
            factory=factory,
            resolver=self._resolver if self.uses_resolver else None,
            serializer=serializer,
            failure_handler=self._failure_handler,
            chain_with_upstream=self._chain_with_upstream,
            checkpoint_markers=self._checkpoint_markers,
            uid=self._uid,
            max_buffered_records=options.max_buffered_records,
            max_buffer_time_ms=max(1, int(options.max_buffer_time.total_seconds() * 1000)),
            per_destination_metrics=options.per_destination_metrics,
            retry_deadline_s=options.retry_deadline_s,
            carry=options.carry,
            lineage=LineageSettings(
                self._lineage_listener,
                self._max_lineage_datasets,
                tuple(sink_facets(name, factory, service_fields.get("requires_bridge")).items()),
            ),
            **service_fields,
        )

    def _validate_common(self, serializer_hint: str = "") -> str:
        """Check what every sink needs; return the sink name.

        Raises:
            ConfigurationError: naming the sink and what is wrong.
        """
        name = self._name
        if not isinstance(name, str) or not name:
            raise ConfigurationError("set_sink_name() takes a non-empty string")
        if self.uses_resolver:
            as_resolver(self._resolver, name)
            ensure_picklable(self._resolver, "destination resolver", name)
        if self._serializer is None:
            hint = f", e.g. {serializer_hint}" if serializer_hint else ""
            raise ConfigurationError(f"sink '{name}': set_serializer() is required{hint}")
        dlq = self._failure_handler.dead_letter_queue
        if dlq is not None:
            ensure_picklable(dlq, "dead-letter queue", name)
        if self._lineage_listener is not None:
            ensure_picklable(self._lineage_listener, "lineage listener", name)
        if self._endpoint is not None and (
            not isinstance(self._endpoint, str) or not self._endpoint
        ):
            raise ConfigurationError(f"sink '{name}': set_endpoint() takes 'host:port' or a URL")
        if self._uid is not None and (not isinstance(self._uid, str) or not self._uid):
            raise ConfigurationError(f"sink '{name}': set_uid() takes a non-empty string")
        return name


class CreatingSinkBuilder(SinkBuilder):
    """Base of the builders of sinks that may create the destinations their resolver names
    (Pub/Sub topics, BigQuery and Bigtable tables)."""

    def __init__(self) -> None:
        super().__init__()
        self._disposition = CreateDisposition.CREATE_NEVER

    def set_create_disposition(self, disposition: CreateDisposition) -> Self:
        """``CREATE_NEVER`` (default: a missing destination fails the job) or
        ``CREATE_IF_NEEDED`` (created on first use, bounded by the writer options'
        ``max_created_destinations``)."""
        if not isinstance(disposition, CreateDisposition):
            raise ConfigurationError(
                f"sink '{self._name}': set_create_disposition() takes "
                f"CreateDisposition.CREATE_NEVER or CREATE_IF_NEEDED, got {disposition!r}"
            )
        self._disposition = disposition
        return self

    @property
    def creates_destinations(self) -> bool:
        """Whether the sink being built may create destinations."""
        return self._disposition is CreateDisposition.CREATE_IF_NEEDED
