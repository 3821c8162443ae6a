"""``SpannerSink``: what ``ds.sink_to(...)`` accepts, and its builder."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from pyflink_gcp.core.builder import SinkBuilder
from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.functions import ensure_picklable, with_context
from pyflink_gcp.core.runtime import DynamicSink
from pyflink_gcp.spanner.destinations import DatabaseDestination
from pyflink_gcp.spanner.options import SpannerWriterOptions
from pyflink_gcp.spanner.serialization import SelectedColumns
from pyflink_gcp.spanner.writer import SpannerWriterFactory

if TYPE_CHECKING:
    from pyflink_gcp.core.sink_writer import SinkConfig

DEFAULT_SINK_NAME = "spanner-sink"


class SpannerSink(DynamicSink):
    """Writes the :class:`~pyflink_gcp.spanner.Mutation` s a serializer makes to one database.

    There is no resolver: the database is fixed, and each mutation names its table, so one
    sink can write audit records to ``AuditEvents`` and everything else to ``Events``. The
    mutations of all tables are batched into the same commits, in arrival order, each commit
    under Spanner's mutation limit as Spanner counts it (columns plus index entries, from the
    schema read when each subtask opens). Every table must exist already.

    At least once: every record a subtask received before a checkpoint barrier is committed
    (or handed to the failure handler) before the checkpoint completes, and at the end of
    input. A replay re-applies mutations, so use idempotent ones (``insert_or_update``,
    ``replace``, ``delete``): a replayed ``insert`` fails with ALREADY_EXISTS.

    Build it with :meth:`builder`::

        sink = (SpannerSink.builder()
                .set_database(DatabaseDestination.of("my-project", "my-instance", "my-db"))
                .set_serializer(lambda e, ctx: Mutation.insert_or_update(
                    "AuditEvents" if e["audit"] else "Events", {"id": e["id"], "kind": e["kind"]}))
                .build())
        ds.sink_to(sink)
    """

    def __init__(self, config: SinkConfig) -> None:
        """Made by ``SpannerSink.builder()...build()``, which validates the configuration; not
        called directly."""
        super().__init__(config)

    @staticmethod
    def builder() -> SpannerSinkBuilder:
        return SpannerSinkBuilder()

    @property
    def writer_factory(self) -> SpannerWriterFactory:
        factory = self._config.factory
        assert isinstance(factory, SpannerWriterFactory)
        return factory

    @property
    def database(self) -> DatabaseDestination:
        return self.writer_factory.database


class SpannerSinkBuilder(SinkBuilder):
    """Builder of :class:`SpannerSink`; :meth:`build` validates everything.

    Spanner has no resolver: every record goes to the one database given to
    :meth:`set_database`, and each Mutation names its table. The serializer is
    ``(record, WriterContext) -> Mutation | list[Mutation] | None``, or an object with
    ``serialize(record, context)``; a one-argument callable ``(record) -> ...`` is accepted too.
    None skips the record; a list is committed in one commit (and fails together).
    """

    default_name = DEFAULT_SINK_NAME
    uses_resolver = False
    options_type = SpannerWriterOptions

    def __init__(self) -> None:
        super().__init__()
        self._database: DatabaseDestination | None = None

    def set_database(self, database: DatabaseDestination) -> Self:
        """The database every record is written to: ``DatabaseDestination.of(p, i, db)``."""
        self._database = self._require(
            database,
            DatabaseDestination,
            "set_database",
            "DatabaseDestination.of(project, instance, database)",
        )
        return self

    def _select_fields(self, serializer: Any) -> Any:
        """Spanner's serializer names each mutation's table, so it sees the whole record; the
        field selection applies to the rows of the mutations it returns."""
        assert self._selection is not None
        return SelectedColumns(self._selection, serializer)

    def build(self) -> SpannerSink:
        name = self._name
        if self._resolver is not None:
            raise ConfigurationError(
                f"sink '{name}': SpannerSink has no destination resolver; use set_database() "
                "to name the database (each Mutation names its table) instead of "
                "set_destination_resolver()"
            )
        if self._database is None:
            raise ConfigurationError(
                f"sink '{name}': set_database() is required "
                "(DatabaseDestination.of(project, instance, database))"
            )
        self._validate_common("a callable (record, context) -> Mutation or None")
        serializer = self._serializer
        if not callable(getattr(serializer, "serialize", None)):
            serializer = with_context(serializer, "serializer", name)
        ensure_picklable(self._serializer, "serializer", name)
        factory = SpannerWriterFactory(
            sink_name=name,
            database=self._database,
            options=self._options,
            endpoint=self._endpoint,
            fail_fast=self._failure_handler.mode == "fail_job",
        )
        config = self._sink_config(name, factory, serializer, fixed_destination=self._database)
        return SpannerSink(config)
