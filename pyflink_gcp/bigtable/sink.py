"""``BigtableSink``: what ``ds.sink_to(...)`` accepts, and its builder."""

from __future__ import annotations

from pyflink_gcp.bigtable.options import BigtableWriterOptions, TableCreateOptions
from pyflink_gcp.bigtable.writer import BigtableWriterFactory
from pyflink_gcp.core.builder import SinkBuilder
from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.functions import describe_callable, ensure_picklable
from pyflink_gcp.core.runtime import DynamicSink

DEFAULT_SINK_NAME = "bigtable-sink"


class BigtableSink(DynamicSink):
    """Writes ``RowMutationEntry`` s to the Bigtable table each record's resolver names.

    At least once: every record a subtask received before a checkpoint barrier is written (or
    handed to the failure handler) before the checkpoint completes, and at the end of input.
    Replays rewrite the same cells; with explicit cell timestamps that is idempotent.

    Build it with :meth:`builder`::

        sink = (BigtableSink.builder()
                .set_destination_resolver(lambda e, ctx: TableDestination.of(p, i, "t_" + e["day"]))
                .set_serializer(lambda e, ctx: RowMutationEntry(e["id"], [SetCell("cf", b"q", e["v"])]))
                .set_table_create_options(TableCreateOptions(column_families={"cf": 1}))
                .build())
        ds.sink_to(sink)
    """

    @staticmethod
    def builder() -> BigtableSinkBuilder:
        return BigtableSinkBuilder()

    @property
    def writer_factory(self) -> BigtableWriterFactory:
        factory = self._config.factory
        assert isinstance(factory, BigtableWriterFactory)
        return factory


class BigtableSinkBuilder(SinkBuilder):
    """Builder of :class:`BigtableSink`; :meth:`build` validates everything.

    The serializer is ``(record, WriterContext) -> RowMutationEntry | None`` (None skips the
    record), or an object with ``serialize``.
    """

    default_name = DEFAULT_SINK_NAME

    def __init__(self) -> None:
        super().__init__()
        self._options = BigtableWriterOptions()
        self._create_options: TableCreateOptions | None = None
        self._admin_endpoint: str | None = None

    def set_writer_options(self, options: BigtableWriterOptions) -> BigtableSinkBuilder:
        if not isinstance(options, BigtableWriterOptions):
            raise ConfigurationError(
                "set_writer_options() takes BigtableWriterOptions "
                f"(BigtableWriterOptions.builder()...build()), got {type(options).__name__}"
            )
        self._options = options
        return self

    def set_table_create_options(self, options: TableCreateOptions | None) -> BigtableSinkBuilder:
        """Let the sink create missing tables with these column families (None: never create)."""
        if options is not None and not isinstance(options, TableCreateOptions):
            raise ConfigurationError(
                "set_table_create_options() takes TableCreateOptions(column_families={...}), "
                f"got {type(options).__name__}"
            )
        self._create_options = options
        return self

    def set_endpoint(self, endpoint: str, admin_endpoint: str | None = None) -> BigtableSinkBuilder:
        """Connect to ``host:port`` instead of ``BIGTABLE_EMULATOR_HOST`` or Google's endpoint.

        ``http://host:port`` means plain text without credentials (an emulator); anything else
        uses TLS with Application Default Credentials. Table admin calls (existence check,
        creation) go to ``admin_endpoint``, by default the same plain-text endpoint, or Google's
        default admin endpoint when ``endpoint`` is a TLS data endpoint.
        """
        if not endpoint or not isinstance(endpoint, str):
            raise ConfigurationError("set_endpoint() needs 'host:port' or a URL")
        self._endpoint = endpoint
        self._admin_endpoint = admin_endpoint
        return self

    def build(self) -> BigtableSink:
        name = self._validate_common("a callable (record, context) -> RowMutationEntry or None")
        serialize = getattr(self._serializer, "serialize", self._serializer)
        if not callable(serialize):
            raise ConfigurationError(
                f"sink '{name}': the serializer must be a callable (record, context) or an "
                f"object with serialize(record, context); got {type(self._serializer).__name__}"
            )
        ensure_picklable(self._serializer, "serializer", name)
        options = self._options
        factory = BigtableWriterFactory(
            sink_name=name,
            options=options,
            create_options=self._create_options,
            endpoint=self._endpoint,
            admin_endpoint=self._admin_endpoint,
            resolver_name=describe_callable(self._resolver),
        )
        idle = options.destination_idle_timeout
        config = self._sink_config(
            name,
            factory,
            self._serializer,
            idle_timeout_s=None if idle is None else idle.total_seconds(),
            max_buffered_records=options.flush_max_records,
            max_buffer_time=options.flush_interval,
            per_destination_metrics=options.per_table_metrics,
        )
        return BigtableSink(config)
