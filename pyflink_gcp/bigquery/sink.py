"""``BigQuerySink``: write each record to the BigQuery table its resolver names."""

from __future__ import annotations

from pyflink_gcp.bigquery.options import (
    BigQueryWriterOptions,
    CreateDisposition,
    OrderingMode,
    WriteMethod,
)
from pyflink_gcp.bigquery.serialization import BigQuerySerializer, has_schema
from pyflink_gcp.bigquery.writer import BigQueryWriterFactory
from pyflink_gcp.core.builder import SinkBuilder
from pyflink_gcp.core.errors import ConfigurationError
from pyflink_gcp.core.functions import ensure_picklable
from pyflink_gcp.core.retry import RetryPolicy
from pyflink_gcp.core.runtime import DynamicSink


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
    (or handed to the failure handler) before the checkpoint completes. The resolver may return
    ``UnroutableRecord.of(payload, reason)`` for a record that has no table; the failure handler
    decides what happens to it.
    """

    @staticmethod
    def builder() -> BigQuerySinkBuilder:
        return BigQuerySinkBuilder()


class BigQuerySinkBuilder(SinkBuilder):
    """Builder of :class:`BigQuerySink`. Only the resolver and the serializer are required.

    The resolver returns a ``TableDestination`` or an ``UnroutableRecord``; the serializer is a
    :class:`BigQuerySerializer`, or a callable ``(record, context) -> row dict``.
    """

    default_name = "bigquery-sink"

    def __init__(self) -> None:
        super().__init__()
        self._method = WriteMethod.STORAGE_API_AT_LEAST_ONCE
        self._ordering = OrderingMode.NONE
        self._disposition = CreateDisposition.CREATE_NEVER
        self._options = BigQueryWriterOptions()
        self._storage_endpoint: str | None = None
        self._rest_endpoint: str | None = None

    def set_write_method(self, method: WriteMethod) -> BigQuerySinkBuilder:
        """How rows are written. Only ``STORAGE_API_AT_LEAST_ONCE`` is available so far."""
        if not isinstance(method, WriteMethod):
            raise ConfigurationError(
                f"sink '{self._name}': set_write_method() takes a WriteMethod, got {method!r}"
            )
        if method is not WriteMethod.STORAGE_API_AT_LEAST_ONCE:
            raise ConfigurationError(
                f"sink '{self._name}': WriteMethod.{method.name} is not available in this "
                "version of pyflink-gcp; use WriteMethod.STORAGE_API_AT_LEAST_ONCE (the Storage "
                "Write API default stream, at least once)"
            )
        self._method = method
        return self

    def set_ordering_mode(self, mode: OrderingMode) -> BigQuerySinkBuilder:
        """``OrderingMode.NONE`` (default) or ``PER_TABLE`` (one request in flight per table)."""
        if not isinstance(mode, OrderingMode):
            raise ConfigurationError(
                f"sink '{self._name}': set_ordering_mode() takes an OrderingMode, got {mode!r}"
            )
        self._ordering = mode
        return self

    def set_create_disposition(self, disposition: CreateDisposition) -> BigQuerySinkBuilder:
        """Whether missing tables are created from the serializer's ``schema()`` (default
        CREATE_NEVER)."""
        if not isinstance(disposition, CreateDisposition):
            raise ConfigurationError(
                f"sink '{self._name}': set_create_disposition() takes a CreateDisposition, "
                f"got {disposition!r}"
            )
        self._disposition = disposition
        return self

    def set_writer_options(self, options: BigQueryWriterOptions) -> BigQuerySinkBuilder:
        self._options = options
        return self

    def set_storage_endpoint(self, endpoint: str) -> BigQuerySinkBuilder:
        """``host:port`` of the Storage Write API (gRPC); ``http://host:port`` means an emulator
        (plain text, anonymous credentials)."""
        self._storage_endpoint = endpoint
        return self

    def set_rest_endpoint(self, endpoint: str) -> BigQuerySinkBuilder:
        """Base URL of the BigQuery REST API (table metadata and creation); ``http://`` means an
        emulator."""
        self._rest_endpoint = endpoint
        return self

    def build(self) -> BigQuerySink:
        name = self._validate_common("BigQuerySerializer.of(to_row, schema=...)")
        serializer = self._serializer
        if not isinstance(serializer, BigQuerySerializer):
            method = getattr(serializer, "serialize", None)
            if not callable(method) and not callable(serializer):
                raise ConfigurationError(
                    f"sink '{name}': the serializer must be a BigQuerySerializer or a callable "
                    f"(record, context) -> row dict, got {type(serializer).__name__}"
                )
        if self._disposition is CreateDisposition.CREATE_IF_NEEDED and not has_schema(serializer):
            raise ConfigurationError(
                f"sink '{name}': CREATE_IF_NEEDED creates missing tables from the serializer's "
                "schema(destination); use a BigQuerySerializer with a schema "
                "(BigQuerySerializer.of(to_row, schema=TableSchema.of(...))) or CREATE_NEVER"
            )
        if not isinstance(self._options, BigQueryWriterOptions):
            raise ConfigurationError(
                f"sink '{name}': set_writer_options() takes BigQueryWriterOptions"
            )
        ensure_picklable(serializer, "serializer", name)
        options = self._options
        factory = BigQueryWriterFactory(
            sink_name=name,
            resolver=self._resolver,
            serializer=serializer,
            options=options,
            ordering=self._ordering,
            create_disposition=self._disposition,
            storage_endpoint=self._storage_endpoint,
            rest_endpoint=self._rest_endpoint,
            retry=RetryPolicy(deadline_s=options.retry_deadline.total_seconds()),
        )
        config = self._sink_config(
            name,
            factory,
            serializer,
            idle_timeout_s=options.idle_timeout.total_seconds(),
            max_active=None,
            max_buffered_records=options.max_buffered_rows,
            max_buffer_time=options.max_buffer_time,
            per_destination_metrics=options.per_destination_metrics,
        )
        return BigQuerySink(config)
