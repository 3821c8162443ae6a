"""The sink builder and destinations: validation at build(), with errors that say what to do."""

from __future__ import annotations

import pickle
import threading

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

SCHEMA = TableSchema.of([("id", "INT64"), SchemaField("name", "STRING")], primary_key=["id"])


def resolver(record: dict, context: object) -> TableDestination:
    return TableDestination.of("p", "d", "t")


def test_destinations_are_values_named_by_their_resource() -> None:
    a = TableDestination.of("p", "ds", "orders_20240101")
    assert a == TableDestination.from_table_id("p.ds.orders_20240101")
    assert hash(a) == hash(TableDestination.of("p", "ds", "orders_20240101"))
    assert str(a) == "projects/p/datasets/ds/tables/orders_20240101"
    assert (a.project, a.dataset, a.table, a.table_id) == (
        "p",
        "ds",
        "orders_20240101",
        "p.ds.orders_20240101",
    )
    assert a.default_stream == str(a) + "/streams/_default"
    assert pickle.loads(pickle.dumps(a)) == a
    with pytest.raises(AttributeError):
        a.x = 1  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("p", "my-dataset", "t"), "invalid BigQuery dataset id"),
        (("p", "d", "t$20240101"), "invalid BigQuery table id"),
        (("p", "d", ""), "invalid BigQuery table id"),
        (("", "d", "t"), "invalid BigQuery project id"),
    ],
)
def test_impossible_table_names_fail_when_built(args: tuple[str, str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TableDestination.of(*args)


def test_a_complete_sink_builds_and_pickles() -> None:
    sink = (
        BigQuerySink.builder()
        .set_sink_name("orders")
        .set_destination_resolver(resolver)
        .set_serializer(BigQuerySerializer.of(schema=SCHEMA))
        .set_write_method(WriteMethod.STORAGE_API_AT_LEAST_ONCE)
        .set_ordering_mode(OrderingMode.PER_TABLE)
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_failure_handler(FailureHandler.log_and_drop())
        .set_writer_options(BigQueryWriterOptions.builder().max_in_flight_requests(2).build())
        .build()
    )
    config = sink._sink_config()
    assert sink.name == "orders"
    assert config.factory.ordering is OrderingMode.PER_TABLE
    assert config.factory.accepts_unroutable
    assert config.max_active is None
    import cloudpickle

    copy = cloudpickle.loads(cloudpickle.dumps(config))
    assert copy.factory.serializer.schema(TableDestination.of("p", "d", "t")) == SCHEMA


@pytest.mark.parametrize("method", [WriteMethod.BUFFERED_STREAM, WriteMethod.FILE_LOADS])
def test_later_write_methods_are_refused_clearly(method: WriteMethod) -> None:
    with pytest.raises(ConfigurationError, match=f"WriteMethod.{method.name} is not available"):
        BigQuerySink.builder().set_write_method(method)


def test_create_if_needed_needs_a_schema() -> None:
    builder = (
        BigQuerySink.builder()
        .set_destination_resolver(resolver)
        .set_serializer(lambda r, c: r)
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
    )
    with pytest.raises(ConfigurationError, match="CREATE_IF_NEEDED creates missing tables"):
        builder.build()


def test_missing_parts_and_wrong_types_are_named() -> None:
    with pytest.raises(ConfigurationError, match="set_destination_resolver"):
        BigQuerySink.builder().set_serializer(lambda r, c: r).build()
    with pytest.raises(ConfigurationError, match="set_serializer"):
        BigQuerySink.builder().set_destination_resolver(resolver).build()
    with pytest.raises(ConfigurationError, match="OrderingMode"):
        BigQuerySink.builder().set_ordering_mode("PER_TABLE")  # type: ignore[arg-type]


def test_an_unpicklable_resolver_is_named_at_build() -> None:
    lock = threading.Lock()

    def locked(record: dict, context: object) -> TableDestination:
        with lock:
            return TableDestination.of("p", "d", "t")

    with pytest.raises(ConfigurationError, match=r"destination resolver .*not picklable.*'lock'"):
        BigQuerySink.builder().set_destination_resolver(locked).set_serializer(
            lambda r, c: r
        ).build()


def test_table_schema_checks_its_keys() -> None:
    with pytest.raises(ValueError, match="'nope' is not a field"):
        TableSchema.of([("id", "INT64")], primary_key=["nope"])
    assert "primary_key=['id']" in repr(SCHEMA)
