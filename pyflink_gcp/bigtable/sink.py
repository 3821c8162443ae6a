"""``BigtableSink``: what ``ds.sink_to(...)`` accepts, and its builder."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from pyflink_gcp.bigtable.options import BigtableWriterOptions, TableCreateOptions
from pyflink_gcp.bigtable.writer import BigtableWriterFactory
from pyflink_gcp.core.builder import CreatingSinkBuilder
from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.functions import describe_callable, ensure_picklable, with_context
from pyflink_gcp.core.runtime import DynamicSink

if TYPE_CHECKING:
    from pyflink_gcp.core.sink_writer import SinkConfig

DEFAULT_SINK_NAME = "bigtable-sink"


class BigtableSink(DynamicSink):
    """Writes ``RowMutationEntry`` s to the Bigtable table each record's resolver names.

    At least once: every record a subtask received before a checkpoint barrier is written (or
    handed to the failure handler) before the checkpoint completes, and at the end of input.
    Replays rewrite the same cells; with explicit cell timestamps that is idempotent.

    Build it with :meth:`builder`::

        sink = (BigtableSink.builder()
                .set_destination_resolver(lambda e, ctx: TableDestination.of(p, i, "t_" + e["day"]))
                .set_serializer(lambda e: RowMutationEntry(e["id"], [SetCell("cf", b"q", e["v"])]))
                .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
                .set_table_create_options(TableCreateOptions(column_families={"cf": 1}))
                .build())
        ds.sink_to(sink)
    """

    def __init__(self, config: SinkConfig) -> None:
        """Made by ``BigtableSink.builder()...build()``, which validates the configuration; not
        called directly."""
        super().__init__(config)

    @staticmethod
    def builder() -> BigtableSinkBuilder:
        """A builder; only the resolver and the serializer are required."""
        return BigtableSinkBuilder()

    @property
    def writer_factory(self) -> BigtableWriterFactory:
        """The (unopened) writer factory the sink's subtasks unpickle and open."""
        factory = self._config.factory
        assert isinstance(factory, BigtableWriterFactory)
        return factory


class BigtableSinkBuilder(CreatingSinkBuilder):
    """Builder of :class:`BigtableSink`; :meth:`build` validates everything.

    The serializer is ``(record, WriterContext) -> RowMutationEntry | None`` (or
    ``record -> ...``; None skips the record), or an object with such a ``serialize`` method.
    """

    default_name = DEFAULT_SINK_NAME
    options_type = BigtableWriterOptions

    def __init__(self) -> None:
        super().__init__()
        self._table_create_options: TableCreateOptions | None = None
        self._admin_endpoint: str | None = None

    def set_table_create_options(self, options: TableCreateOptions) -> Self:
        """The column families of the tables the sink creates (needs ``CREATE_IF_NEEDED``)."""
        self._table_create_options = self._require(
            options,
            TableCreateOptions,
            "set_table_create_options",
            "TableCreateOptions(column_families={...})",
        )
        return self

    def set_admin_endpoint(self, endpoint: str) -> Self:
        """``host:port`` (TLS) or ``http://host:port`` (plain text) of the table admin API.

        Default: a plain-text ``set_endpoint`` (an emulator serves both APIs), else the
        emulator variable, else Google's admin endpoint."""
        self._admin_endpoint = endpoint
        return self

    def build(self) -> BigtableSink:
        """The sink; raises ConfigurationError naming the sink and what is wrong."""
        name = self._validate_common("a callable (record, context) -> RowMutationEntry or None")
        self._check_creation(name)
        if self._admin_endpoint is not None and (
            not isinstance(self._admin_endpoint, str) or not self._admin_endpoint
        ):
            raise ConfigurationError(
                f"sink '{name}': set_admin_endpoint() takes 'host:port' or a URL"
            )
        serializer: Any = self._serializer
        serialize = getattr(serializer, "serialize", serializer)
        if not callable(serialize):
            raise ConfigurationError(
                f"sink '{name}': the serializer must be a callable (record, context) or an "
                f"object with serialize(record, context); got {type(serializer).__name__}"
            )
        ensure_picklable(serializer, "serializer", name)
        factory = BigtableWriterFactory(
            sink_name=name,
            options=self._options,
            create_options=self._table_create_options,
            endpoint=self._endpoint,
            admin_endpoint=self._admin_endpoint,
            resolver_name=describe_callable(self._resolver),
        )
        # An object's serialize method is adapted like a plain callable: (record) or
        # (record, context), decided once here.
        serialize = with_context(serialize, "serializer", name)
        return BigtableSink(self._sink_config(name, factory, serialize))

    def _check_creation(self, name: str) -> None:
        """Creation needs both the disposition and the column families; each alone is a
        mistake, named by the setter that is missing."""
        if self.creates_destinations and self._table_create_options is None:
            raise ConfigurationError(
                f"sink '{name}': CreateDisposition.CREATE_IF_NEEDED needs the column families "
                "of the tables to create: call set_table_create_options(TableCreateOptions("
                "column_families={...}))"
            )
        if self._table_create_options is not None and not self.creates_destinations:
            raise ConfigurationError(
                f"sink '{name}': set_table_create_options() applies only to tables the sink "
                "creates; call set_create_disposition(CreateDisposition.CREATE_IF_NEEDED) too"
            )
