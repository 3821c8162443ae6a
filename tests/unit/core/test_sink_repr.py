"""``repr(sink)``: one short line with the sink type, its name, how it writes and where."""

from __future__ import annotations

from typing import Any

import pytest

from pyflink_gcp import CreateDisposition
from pyflink_gcp.bigquery import (
    BigQueryFileLoadsOptions,
    BigQuerySerializer,
    BigQuerySink,
    OrderingMode,
    WriteMethod,
)
from pyflink_gcp.bigquery import TableDestination as BigQueryTable
from pyflink_gcp.bigtable import BigtableSink, TableCreateOptions
from pyflink_gcp.bigtable import TableDestination as BigtableTable
from pyflink_gcp.cloudtasks import CloudTasksSink, QueueDestination
from pyflink_gcp.pubsub import PubSubSink, TopicDestination
from pyflink_gcp.spanner import DatabaseDestination, SpannerSink


def _bigquery() -> Any:
    return (
        BigQuerySink.builder()
        .set_sink_name("orders")
        .set_destination_resolver(lambda r, c: BigQueryTable.of("p", "d", "t"))
        .set_serializer(BigQuerySerializer.of(schema=[("id", "INT64")]))
    )


CASES = [
    (
        _bigquery(),
        "BigQuerySink(name='orders', write_method=STORAGE_API_AT_LEAST_ONCE, "
        "create_disposition=CREATE_NEVER, destination=TableDestination)",
    ),
    (
        _bigquery()
        .set_write_method(WriteMethod.BUFFERED_STREAM)
        .set_ordering_mode(OrderingMode.PER_TABLE)
        .set_storage_endpoint("localhost:9060"),
        "BigQuerySink(name='orders', write_method=BUFFERED_STREAM, create_disposition="
        "CREATE_NEVER, ordering=PER_TABLE, storage_endpoint='localhost:9060', "
        "destination=TableDestination)",
    ),
    (
        _bigquery()
        .set_write_method(WriteMethod.FILE_LOADS)
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_file_loads_options(
            BigQueryFileLoadsOptions.builder().staging_location("gs://bucket/staging").build()
        ),
        "BigQuerySink(name='orders', write_method=FILE_LOADS, "
        "create_disposition=CREATE_IF_NEEDED, destination=TableDestination)",
    ),
    (
        PubSubSink.builder()
        .set_sink_name("events")
        .set_destination_resolver(lambda r, c: TopicDestination.of("p", "t"))
        .set_serializer(lambda r: b"")
        .set_endpoint("localhost:8085"),
        "PubSubSink(name='events', create_disposition=CREATE_NEVER, "
        "endpoint='localhost:8085', destination=TopicDestination)",
    ),
    (
        BigtableSink.builder()
        .set_destination_resolver(lambda r, c: BigtableTable.of("p", "inst", "t"))
        .set_serializer(lambda r, c: None)
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_table_create_options(TableCreateOptions(column_families={"cf": 1})),
        "BigtableSink(name='bigtable-sink', create_disposition=CREATE_IF_NEEDED, "
        "destination=TableDestination)",
    ),
    (
        SpannerSink.builder()
        .set_database(DatabaseDestination.of("p", "inst", "db"))
        .set_serializer(lambda r, c: None),
        "SpannerSink(name='spanner-sink', "
        "destination=DatabaseDestination('projects/p/instances/inst/databases/db'))",
    ),
    (
        CloudTasksSink.builder()
        .set_destination_resolver(lambda r, c: QueueDestination.of("p", "europe-west1", "q"))
        .set_serializer(lambda r, c: None),
        "CloudTasksSink(name='cloudtasks-sink', destination=QueueDestination)",
    ),
]


@pytest.mark.parametrize(("builder", "expected"), CASES, ids=lambda v: type(v).__name__)
def test_a_sinks_repr_names_its_type_name_write_method_and_destination(
    builder: Any, expected: str
) -> None:
    text = repr(builder.build())
    assert text == expected
    assert "\n" not in text and len(text) < 200
