"""``BigQuerySink``: write each record to the BigQuery table its resolver names."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from pyflink_gcp.bigquery.options import (
    BigQueryFileLoadsOptions,
    BigQueryWriterOptions,
    OrderingMode,
    WriteMethod,
)
from pyflink_gcp.bigquery.serialization import as_serializer, has_schema
from pyflink_gcp.bigquery.writer import BigQueryWriterFactory, BufferedBigQueryWriterFactory
from pyflink_gcp.core.builder import CreatingSinkBuilder
from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.functions import ensure_picklable
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.core.runtime import DynamicSink

if TYPE_CHECKING:
    from pyflink_gcp.core.sink_writer import SinkConfig


class BigQuerySink(DynamicSink):
    """A sink that appends each record to the BigQuery table its resolver names.

    Example::

        sink = (BigQuerySink.builder()
                .set_destination_resolver(
                    lambda order, ctx: TableDestination.of("p", "shop", f"orders_{day(ctx)}"))
                .set_serializer(BigQuerySerializer.of(to_row, schema=ORDERS))
                .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
                .build())
        ds.sink_to(sink)

    Rows go through the Storage Write API's default stream (``WriteMethod.
    STORAGE_API_AT_LEAST_ONCE``): every record received before a checkpoint barrier is committed
    (or handed to the failure handler) before the checkpoint completes; a failover may write a
    row twice. ``set_write_method(WriteMethod.BUFFERED_STREAM)`` is exactly once: rows go to
    BUFFERED streams and become visible only after their checkpoint completed. The resolver may return
    ``UnroutableRecord.of(payload, reason)`` for a record that has no table; the failure handler
    decides what happens to it.
    """

    def __init__(self, config: SinkConfig) -> None:
        """Made by ``BigQuerySink.builder()...build()``, which validates the configuration; not
        called directly."""
        super().__init__(config)

    @staticmethod
    def builder() -> BigQuerySinkBuilder:
        """A builder; only the resolver and the serializer are required."""
        return BigQuerySinkBuilder()


class BigQuerySinkBuilder(CreatingSinkBuilder):
    """Builder of :class:`BigQuerySink`. Only the resolver and the serializer are required.

    The resolver returns a ``TableDestination`` or an ``UnroutableRecord``; the serializer is a
    :class:`~pyflink_gcp.bigquery.serialization.BigQuerySerializer`, or a callable
    ``(record, context) -> row dict`` (or ``(record) -> row dict``). ``set_create_disposition
    (CreateDisposition.CREATE_IF_NEEDED)`` creates missing tables from the serializer's
    ``schema(destination)``, at most ``max_created_destinations`` per subtask and window
    (:mod:`pyflink_gcp.core.creation`).
    """

    default_name = "bigquery-sink"
    options_type = BigQueryWriterOptions

    def __init__(self) -> None:
        super().__init__()
        self._method = WriteMethod.STORAGE_API_AT_LEAST_ONCE
        self._ordering = OrderingMode.NONE
        self._storage_endpoint: str | None = None
        self._rest_endpoint: str | None = None
        self._file_loads: BigQueryFileLoadsOptions | None = None

    def set_write_method(self, method: WriteMethod) -> Self:
        """``STORAGE_API_AT_LEAST_ONCE`` (default), ``BUFFERED_STREAM`` or ``FILE_LOADS``
        (exactly once; the latter with ``set_file_loads_options``)."""
        if not isinstance(method, WriteMethod):
            raise ConfigurationError(
                f"sink '{self._name}': set_write_method() takes a WriteMethod, got {method!r}"
            )
        self._method = method
        return self

    def set_file_loads_options(self, options: BigQueryFileLoadsOptions) -> Self:
        """Where and how ``WriteMethod.FILE_LOADS`` stages its files (required with it)."""
        self._file_loads = self._require(
            options, BigQueryFileLoadsOptions, "set_file_loads_options", "BigQueryFileLoadsOptions"
        )
        return self

    def set_ordering_mode(self, mode: OrderingMode) -> Self:
        """``OrderingMode.NONE`` (default) or ``PER_TABLE`` (one request in flight per table)."""
        if not isinstance(mode, OrderingMode):
            raise ConfigurationError(
                f"sink '{self._name}': set_ordering_mode() takes an OrderingMode, got {mode!r}"
            )
        self._ordering = mode
        return self

    def set_storage_endpoint(self, endpoint: str) -> Self:
        """``host:port`` of the Storage Write API (gRPC); ``http://host:port`` means an emulator
        (plain text, anonymous credentials)."""
        self._storage_endpoint = endpoint
        return self

    def set_rest_endpoint(self, endpoint: str) -> Self:
        """Base URL of the BigQuery REST API (table metadata and creation); ``http://`` means an
        emulator."""
        self._rest_endpoint = endpoint
        return self

    def build(self) -> BigQuerySink:
        """The sink; raises ConfigurationError naming what is missing or cannot work."""
        name = self._validate_common("BigQuerySerializer.of(to_row, schema=...)")
        if self._endpoint is not None:
            raise ConfigurationError(
                f"sink '{name}': BigQuery talks to two APIs; use set_storage_endpoint() (the "
                "Storage Write API, gRPC) and set_rest_endpoint() (the REST API: table metadata "
                "and creation) instead of set_endpoint()"
            )
        for what, endpoint in (
            ("set_storage_endpoint", self._storage_endpoint),
            ("set_rest_endpoint", self._rest_endpoint),
        ):
            if endpoint is not None and (not isinstance(endpoint, str) or not endpoint):
                raise ConfigurationError(f"sink '{name}': {what}() takes 'host:port' or a URL")
        serializer = as_serializer(self._serializer, name)
        if self.creates_destinations and not has_schema(serializer):
            raise ConfigurationError(
                f"sink '{name}': CREATE_IF_NEEDED creates missing tables from the serializer's "
                "schema(destination); use a BigQuerySerializer with a schema "
                "(BigQuerySerializer.of(to_row, schema=TableSchema.of(...)) or a list of "
                "SchemaField) or CREATE_NEVER"
            )
        ensure_picklable(serializer, "serializer", name)
        options: BigQueryWriterOptions = self._options
        if self._method is WriteMethod.FILE_LOADS:
            return self._build_file_loads(name, serializer, options)
        if self._file_loads is not None:
            raise ConfigurationError(
                f"sink '{name}': set_file_loads_options() applies to WriteMethod.FILE_LOADS only"
            )
        buffered = self._method is WriteMethod.BUFFERED_STREAM
        factory_type = BufferedBigQueryWriterFactory if buffered else BigQueryWriterFactory
        factory = factory_type(
            sink_name=name,
            resolver=self._resolver,
            serializer=serializer,
            options=options,
            ordering=self._ordering,
            create_disposition=self._disposition,
            storage_endpoint=self._storage_endpoint,
            rest_endpoint=self._rest_endpoint,
            retry=RetryPolicy(deadline_s=options.retry_deadline_s),
        )
        requires = f"WriteMethod.{self._method.name}" if buffered else None
        return BigQuerySink(self._sink_config(name, factory, serializer, requires_bridge=requires))

    def _build_file_loads(
        self, name: str, serializer: Any, options: BigQueryWriterOptions
    ) -> BigQuerySink:
        from pyflink_gcp.bigquery.file_loads import FileLoadsWriterFactory
        from pyflink_gcp.bigquery.staging import storage_module

        if self._file_loads is None:
            raise ConfigurationError(
                f"sink '{name}': WriteMethod.FILE_LOADS needs set_file_loads_options("
                "BigQueryFileLoadsOptions.builder().staging_location('gs://bucket/prefix')"
                ".build())"
            )
        if self._storage_endpoint is not None or self._ordering is not OrderingMode.NONE:
            raise ConfigurationError(
                f"sink '{name}': WriteMethod.FILE_LOADS loads files over the REST API: "
                "set_storage_endpoint() and set_ordering_mode() do not apply to it"
            )
        storage_module()  # the storage extra is installed, or the error names it now
        factory = FileLoadsWriterFactory(
            sink_name=name,
            resolver=self._resolver,
            serializer=serializer,
            options=options,
            loads=self._file_loads,
            create_disposition=self._disposition,
            rest_endpoint=self._rest_endpoint,
            retry=RetryPolicy(deadline_s=options.retry_deadline_s),
        )
        return BigQuerySink(
            self._sink_config(name, factory, serializer, requires_bridge="WriteMethod.FILE_LOADS")
        )
