"""The sink builder: validation at build(), errors that say what to do, and every setter
reaching the built configuration."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import cloudpickle
import pytest
from google.cloud.bigquery import SchemaField

from pyflink_gcp import FailureHandler
from pyflink_gcp.bigquery import (
    BigQuerySerializer,
    BigQuerySink,
    BigQueryWriterOptions,
    CreateDisposition,
    OrderingMode,
    TableDestination,
    TableSchema,
    WriteMethod,
)
from pyflink_gcp.core import ConfigurationError
from pyflink_gcp.core import options as core_options
from pyflink_gcp.core.functions import RecordOnly

SCHEMA = TableSchema.of([("id", "INT64"), SchemaField("name", "STRING")], primary_key=["id"])


def resolver(record: dict, context: object) -> TableDestination:
    return TableDestination.of("p", "d", "t")


def _builder() -> Any:
    return BigQuerySink.builder().set_destination_resolver(resolver)


def test_a_complete_sink_builds_and_pickles() -> None:
    options = (
        BigQueryWriterOptions.builder()
        .max_in_flight_requests(2)
        .max_active_destinations(7)
        .idle_timeout(timedelta(seconds=30))
        .max_buffered_records(1234)
        .max_buffer_time(timedelta(milliseconds=250))
        .per_destination_metrics()
        .build()
    )
    sink = (
        _builder()
        .set_sink_name("orders")
        .set_serializer(BigQuerySerializer.of(schema=SCHEMA))
        .set_write_method(WriteMethod.STORAGE_API_AT_LEAST_ONCE)
        .set_ordering_mode(OrderingMode.PER_TABLE)
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_failure_handler(FailureHandler.log_and_drop())
        .set_storage_endpoint("http://localhost:1")
        .set_rest_endpoint("http://localhost:2")
        .set_writer_options(options)
        .build()
    )
    config = sink._sink_config()
    assert sink.name == "orders"
    factory = config.factory
    assert factory.ordering is OrderingMode.PER_TABLE
    assert factory.create_disposition is CreateDisposition.CREATE_IF_NEEDED
    assert (factory.storage_endpoint, factory.rest_endpoint) == (
        "http://localhost:1",
        "http://localhost:2",
    )
    assert factory.options is options
    assert factory.accepts_unroutable
    # The shared options reach the sink's configuration by their shared names.
    assert config.max_active == 7
    assert config.idle_timeout_s == 30.0
    assert config.max_buffered_records == 1234
    assert config.max_buffer_time_ms == 250
    assert config.per_destination_metrics is True

    copy = cloudpickle.loads(cloudpickle.dumps(config))
    assert copy.factory.serializer.schema(TableDestination.of("p", "d", "t")) == SCHEMA
    assert copy.factory.options == options


def test_the_create_disposition_is_the_core_one() -> None:
    assert CreateDisposition is core_options.CreateDisposition
    with pytest.raises(ConfigurationError, match="set_create_disposition"):
        _builder().set_create_disposition("CREATE_IF_NEEDED")  # type: ignore[arg-type]


def test_set_endpoint_is_refused_naming_the_two_endpoints() -> None:
    builder = _builder().set_serializer(lambda r, c: r).set_endpoint("localhost:9050")
    with pytest.raises(
        ConfigurationError, match=r"set_storage_endpoint\(\).*set_rest_endpoint\(\)"
    ):
        builder.build()


def test_writer_options_of_another_type_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="takes BigQueryWriterOptions"):
        _builder().set_writer_options(core_options.WriterOptions())


def test_file_loads_needs_its_options_and_builds_a_committing_sink() -> None:
    from pyflink_gcp.bigquery import BigQueryFileLoadsOptions
    from pyflink_gcp.bigquery.file_loads import FileLoadsWriterFactory
    from pyflink_gcp.core.commit import commits

    builder = _builder().set_serializer(lambda r, c: r).set_write_method(WriteMethod.FILE_LOADS)
    with pytest.raises(ConfigurationError, match=r"FILE_LOADS needs set_file_loads_options"):
        builder.build()
    loads = BigQueryFileLoadsOptions.builder().staging_location("gs://b/p").build()
    config = builder.set_file_loads_options(loads).build()._sink_config()
    assert isinstance(config.factory, FileLoadsWriterFactory) and commits(config.factory)
    assert config.factory.committer_parallelism == 1
    assert config.requires_bridge == "WriteMethod.FILE_LOADS"
    with pytest.raises(ConfigurationError, match="applies to WriteMethod.FILE_LOADS only"):
        _builder().set_serializer(lambda r, c: r).set_file_loads_options(loads).build()


def test_buffered_streams_build_a_committing_sink_that_needs_the_bridge() -> None:
    from pyflink_gcp.bigquery.writer import BufferedBigQueryWriterFactory
    from pyflink_gcp.core.commit import commits

    sink = (
        _builder()
        .set_serializer(lambda r, c: r)
        .set_write_method(WriteMethod.BUFFERED_STREAM)
        .build()
    )
    config = sink._sink_config()
    assert isinstance(config.factory, BufferedBigQueryWriterFactory)
    assert commits(config.factory)
    assert config.requires_bridge == "WriteMethod.BUFFERED_STREAM"
    default = _builder().set_serializer(lambda r, c: r).build()._sink_config()
    assert not commits(default.factory) and default.requires_bridge is None


def test_create_if_needed_needs_a_schema() -> None:
    builder = (
        _builder()
        .set_serializer(lambda r, c: r)
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
    )
    with pytest.raises(ConfigurationError, match="CREATE_IF_NEEDED creates missing tables"):
        builder.build()


def test_missing_parts_and_wrong_types_are_named() -> None:
    with pytest.raises(ConfigurationError, match="set_destination_resolver"):
        BigQuerySink.builder().set_serializer(lambda r, c: r).build()
    with pytest.raises(ConfigurationError, match="set_serializer"):
        _builder().build()
    with pytest.raises(ConfigurationError, match="OrderingMode"):
        BigQuerySink.builder().set_ordering_mode("PER_TABLE")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="the serializer must be a BigQuerySerializer"):
        _builder().set_serializer(42).build()


def test_an_unpicklable_resolver_is_named_at_build() -> None:
    lock = threading.Lock()

    def locked(record: dict, context: object) -> TableDestination:
        with lock:
            return TableDestination.of("p", "d", "t")

    with pytest.raises(ConfigurationError, match=r"destination resolver .*not picklable.*'lock'"):
        BigQuerySink.builder().set_destination_resolver(locked).set_serializer(
            lambda r, c: r
        ).build()


def one_arg_row(record: dict) -> dict:
    return {"id": record["n"]}


class OneArgSerializer(BigQuerySerializer):
    def serialize(self, record: Any) -> dict:  # type: ignore[override]
        return {"id": record["n"] * 2}

    def schema(self, destination: TableDestination) -> TableSchema:
        return SCHEMA


@pytest.mark.parametrize(
    ("serializer", "row"),
    [
        (one_arg_row, {"id": 3}),
        (lambda record, ctx: {"id": record["n"] + ctx}, {"id": 13}),
        (BigQuerySerializer.of(one_arg_row), {"id": 3}),
        (OneArgSerializer(), {"id": 6}),
    ],
)
def test_every_serializer_shape_is_called_as_record_and_context(serializer: Any, row: Any) -> None:
    config = _builder().set_serializer(serializer).build()._sink_config()
    built = config.serializer
    call = getattr(built, "serialize", built)
    assert call({"n": 3}, 10) == row


def test_a_one_argument_serializer_is_adapted_once_at_build() -> None:
    config = _builder().set_serializer(one_arg_row).build()._sink_config()
    assert isinstance(config.serializer, RecordOnly)
    assert config.serializer.__qualname__ == "one_arg_row"
    two = _builder().set_serializer(BigQuerySerializer.of(schema=SCHEMA)).build()
    assert type(two._sink_config().serializer).__name__ == "_FunctionSerializer"


def test_a_one_argument_serializer_object_keeps_its_schema() -> None:
    sink = (
        _builder()
        .set_serializer(OneArgSerializer())
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .build()
    )
    factory = sink._sink_config().factory
    assert factory.serializer.schema(TableDestination.of("p", "d", "t")) == SCHEMA


def test_help_shows_the_sinks_own_documentation() -> None:
    """help() must not show PyFlink's inherited "java Sink object" constructor text."""
    import pydoc

    from pyflink_gcp.bigquery import BigQuerySink

    text = pydoc.render_doc(BigQuerySink, renderer=pydoc.plaintext)
    assert "java Sink object" not in text
    assert (BigQuerySink.__doc__ or "").split("\n", 1)[0] in text
    assert "BigQuerySink.builder()...build()" in text
