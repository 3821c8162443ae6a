"""Every public setter of every sink builder and options builder reaches what it builds.

For each setter the test builds the same sink (or options) twice, without and with the setter,
and compares a structural fingerprint of the result: the sink's configuration, its writer
factory's pickled configuration, and the options values. A setter that is accepted and then
ignored leaves the two equal and fails here. Each table must list every public setter of its
builder, so a new setter without an entry fails too.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from pyflink_gcp import CreateDisposition, FailureHandler
from pyflink_gcp.bigquery import (
    BigQuerySerializer,
    BigQuerySink,
    BigQueryWriterOptions,
    OrderingMode,
    TableSchema,
    WriteMethod,
)
from pyflink_gcp.bigquery import TableDestination as BigQueryTable
from pyflink_gcp.bigquery.options import RowFormat
from pyflink_gcp.bigquery.schema_update import MissingValues, SchemaUpdate, UnknownFields
from pyflink_gcp.bigtable import BigtableSink, BigtableWriterOptions, TableCreateOptions
from pyflink_gcp.bigtable import TableDestination as BigtableTable
from pyflink_gcp.cloudtasks import (
    CloudTasksSerializationSchema,
    CloudTasksSink,
    CloudTasksWriterOptions,
    QueueDestination,
)
from pyflink_gcp.core import ConfigurationError
from pyflink_gcp.core.fields import FieldSelection
from pyflink_gcp.core.functions import describe_callable
from pyflink_gcp.core.options import OptionsBuilder
from pyflink_gcp.core.writer import PicklesConfiguration
from pyflink_gcp.pubsub import (
    PubSubPublisherOptions,
    PubSubSerializationSchema,
    PubSubSink,
    PubSubWriterOptions,
    TopicCreateOptions,
    TopicDestination,
)
from pyflink_gcp.spanner import DatabaseDestination, SpannerSink, SpannerWriterOptions

# -- fingerprints -----------------------------------------------------------------------------


def fingerprint(value: Any, depth: int = 0) -> Any:
    """A comparable structure of ``value``: dataclasses and objects by their fields, factories by
    their pickled configuration, functions by name."""
    if depth > 6:
        return repr(type(value))
    if isinstance(value, str | int | float | bool | bytes | type(None) | enum.Enum | timedelta):
        return value
    if isinstance(value, dict):
        return {str(k): fingerprint(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [fingerprint(v, depth + 1) for v in value]
    if isinstance(value, PicklesConfiguration):
        return (type(value).__name__, fingerprint(value.__getstate__(), depth + 1))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return (type(value).__name__, fingerprint(fields, depth + 1))
    if isinstance(value, type):
        return value.__qualname__
    state = dict(getattr(value, "__dict__", {}))
    for cls in type(value).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if slot not in ("__dict__", "__weakref__") and hasattr(value, slot):
                state[slot] = getattr(value, slot)
    if state:
        return (type(value).__name__, fingerprint(state, depth + 1))
    if callable(value):
        inner = getattr(value, "fn", None)
        return describe_callable(inner if inner is not None else value)
    return repr(value)


def built(builder: Any) -> Any:
    sink = builder.build()
    return fingerprint(sink._config)


# -- the sinks and the values their setters get -------------------------------------------------


def _topic(record, ctx):
    return TopicDestination.of("p", "t")


def _other_topic(record, ctx):
    return TopicDestination.of("p", "u")


def _bq_table(record, ctx):
    return BigQueryTable.of("p", "d", "t")


def _other_bq_table(record, ctx):
    return BigQueryTable.of("p", "d", "u")


def _bt_table(record, ctx):
    return BigtableTable.of("p", "i", "t")


def _other_bt_table(record, ctx):
    return BigtableTable.of("p", "i", "u")


def _queue(record, ctx):
    return QueueDestination.of("p", "l", "q")


def _other_queue(record, ctx):
    return QueueDestination.of("p", "l", "r")


def _payload(record, ctx):
    return b"x"


def _row(record, ctx):
    return {"a": 1}


def _other_row(record, ctx):
    return {"a": 2}


def _nothing(record, ctx):
    return None


def _also_nothing(record, ctx):
    return None


_SCHEMA = TableSchema.of([("a", "INT64")])

Setter = Callable[[Any], Any]

#: Setters every sink builder inherits, with a value that differs from the default.
COMMON: dict[str, Setter] = {
    "set_sink_name": lambda b: b.set_sink_name("renamed"),
    "set_serializer": None,  # per sink
    "set_destination_resolver": None,  # per sink
    "set_failure_handler": lambda b: b.set_failure_handler(FailureHandler.log_and_drop()),
    "set_endpoint": lambda b: b.set_endpoint("http://127.0.0.1:1"),
    "set_chain_with_upstream": lambda b: b.set_chain_with_upstream(False),
    "set_checkpoint_markers": lambda b: b.set_checkpoint_markers(False),
    "set_uid": lambda b: b.set_uid("orders-v1"),
    "set_field_selection": lambda b: b.set_field_selection(FieldSelection.drop(["tenant"])),
    "set_lineage_listener": lambda b: b.set_lineage_listener(_nothing),
    "set_max_lineage_datasets": lambda b: b.set_max_lineage_datasets(5),
    "set_writer_options": None,  # per sink
}

#: A setter that cannot apply to a sink: how it is called, and the setter its error names.
Refused = tuple[Setter, str]

SINKS: dict[str, tuple[Callable[[], Any], dict[str, Setter | Refused]]] = {
    "pubsub": (
        lambda: (
            PubSubSink.builder()
            .set_destination_resolver(_topic)
            .set_serializer(PubSubSerializationSchema.payload(_payload))
        ),
        {
            "set_destination_resolver": lambda b: b.set_destination_resolver(_other_topic),
            "set_serializer": lambda b: b.set_serializer(
                PubSubSerializationSchema.payload(_payload).with_attributes(lambda r: {"k": "v"})
            ),
            "set_writer_options": lambda b: b.set_writer_options(
                PubSubWriterOptions.builder().max_buffered_records(7).build()
            ),
            "set_publisher_options": lambda b: b.set_publisher_options(
                PubSubPublisherOptions.builder().max_messages(10).build()
            ),
            "set_create_disposition": lambda b: b.set_create_disposition(
                CreateDisposition.CREATE_IF_NEEDED
            ),
            "set_topic_create_options": lambda b: b.set_create_disposition(
                CreateDisposition.CREATE_IF_NEEDED
            ).set_topic_create_options(TopicCreateOptions(labels={"team": "data"})),
        },
    ),
    "bigquery": (
        lambda: (
            BigQuerySink.builder()
            .set_destination_resolver(_bq_table)
            .set_serializer(BigQuerySerializer.of(_row, schema=_SCHEMA))
        ),
        {
            "set_destination_resolver": lambda b: b.set_destination_resolver(_other_bq_table),
            "set_serializer": lambda b: b.set_serializer(
                BigQuerySerializer.of(_other_row, schema=_SCHEMA)
            ),
            "set_endpoint": (COMMON["set_endpoint"], "set_storage_endpoint"),
            "set_writer_options": lambda b: b.set_writer_options(
                BigQueryWriterOptions.builder().max_buffered_records(7).build()
            ),
            "set_create_disposition": lambda b: b.set_create_disposition(
                CreateDisposition.CREATE_IF_NEEDED
            ),
            "set_write_method": lambda b: b.set_write_method(WriteMethod.BUFFERED_STREAM),
            # FILE_LOADS without its options is refused naming the setter that is missing.
            "set_file_loads_options": (
                lambda b: b.set_write_method(WriteMethod.FILE_LOADS),
                "set_file_loads_options",
            ),
            "set_ordering_mode": lambda b: b.set_ordering_mode(OrderingMode.PER_TABLE),
            "set_storage_endpoint": lambda b: b.set_storage_endpoint("http://127.0.0.1:1"),
            "set_rest_endpoint": lambda b: b.set_rest_endpoint("http://127.0.0.1:2"),
        },
    ),
    "bigtable": (
        lambda: BigtableSink.builder().set_destination_resolver(_bt_table).set_serializer(_nothing),
        {
            "set_destination_resolver": lambda b: b.set_destination_resolver(_other_bt_table),
            "set_serializer": lambda b: b.set_serializer(_also_nothing),
            "set_writer_options": lambda b: b.set_writer_options(
                BigtableWriterOptions.builder().max_buffered_records(7).build()
            ),
            "set_create_disposition": (
                lambda b: b.set_create_disposition(CreateDisposition.CREATE_IF_NEEDED),
                "set_table_create_options",
            ),
            "set_table_create_options": lambda b: b.set_create_disposition(
                CreateDisposition.CREATE_IF_NEEDED
            ).set_table_create_options(TableCreateOptions(column_families={"cf": 1})),
            "set_admin_endpoint": lambda b: b.set_admin_endpoint("http://127.0.0.1:2"),
        },
    ),
    "cloudtasks": (
        lambda: (
            CloudTasksSink.builder()
            .set_destination_resolver(_queue)
            .set_serializer(CloudTasksSerializationSchema.http_target("https://example.com/a"))
        ),
        {
            "set_destination_resolver": lambda b: b.set_destination_resolver(_other_queue),
            "set_serializer": lambda b: b.set_serializer(
                CloudTasksSerializationSchema.http_target("https://example.com/b")
            ),
            "set_writer_options": lambda b: b.set_writer_options(
                CloudTasksWriterOptions.builder().max_buffered_records(7).build()
            ),
        },
    ),
    "spanner": (
        lambda: (
            SpannerSink.builder()
            .set_database(DatabaseDestination.of("p", "inst", "db"))
            .set_serializer(_nothing)
        ),
        {
            "set_destination_resolver": (
                lambda b: b.set_destination_resolver(_nothing),
                "set_database",
            ),
            "set_serializer": lambda b: b.set_serializer(_also_nothing),
            "set_writer_options": lambda b: b.set_writer_options(
                SpannerWriterOptions.builder().max_buffered_records(7).build()
            ),
            "set_database": lambda b: b.set_database(DatabaseDestination.of("p", "inst", "other")),
        },
    ),
}


def _setter_table(service: str) -> dict[str, Setter | Refused]:
    table: dict[str, Setter | Refused] = {k: v for k, v in COMMON.items() if v is not None}
    table.update(SINKS[service][1])
    return table


def _public_setters(builder: Any) -> set[str]:
    return {name for name in dir(builder) if name.startswith("set_")}


SETTER_CASES = [
    pytest.param(service, setter, id=f"{service}.{setter}")
    for service in SINKS
    for setter in sorted(_setter_table(service))
]


@pytest.mark.parametrize("service", list(SINKS))
def test_every_public_setter_of_a_sink_builder_has_a_case(service):
    builder = SINKS[service][0]()
    assert _public_setters(builder) == set(_setter_table(service))


@pytest.mark.parametrize(("service", "setter"), SETTER_CASES)
def test_a_sink_setter_reaches_the_built_configuration_or_names_the_right_one(service, setter):
    make = SINKS[service][0]
    case = _setter_table(service)[setter]
    if isinstance(case, tuple):
        apply, right_one = case
        with pytest.raises(ConfigurationError, match=right_one):
            apply(make()).build()
        return
    assert built(case(make())) != built(make())


# -- the options builders -----------------------------------------------------------------------

#: A non-default value for each shared setter.
SHARED_VALUES: dict[str, Any] = {
    "max_buffer_time": timedelta(milliseconds=123),
    "max_buffered_records": 7,
    "retry_deadline": timedelta(seconds=9),
    "max_in_flight_requests": 3,
    "per_destination_metrics": True,
    "idle_timeout": timedelta(minutes=3),
    "max_active_destinations": 5,
    "max_created_destinations": 2,
    "max_carry_time": timedelta(seconds=30),
    "max_carried_records": 1_000,
}

OPTIONS: dict[str, tuple[Callable[[], Any], dict[str, Any]]] = {
    "PubSubWriterOptions": (
        PubSubWriterOptions.builder,
        {"shutdown_budget": timedelta(seconds=3)},
    ),
    "PubSubPublisherOptions": (
        PubSubPublisherOptions.builder,
        {
            "max_messages": 10,
            "max_bytes": 1000,
            "enable_message_ordering": True,
            "enable_compression": True,
            "compression_bytes_threshold": 1024,
        },
    ),
    "BigQueryWriterOptions": (
        BigQueryWriterOptions.builder,
        {
            "max_request_bytes": 1_000_000,
            "max_request_rows": 10,
            "sender_threads": 2,
            "channel_count": 2,
            "unknown_fields": UnknownFields.IGNORE,
            "schema_update": SchemaUpdate.ADD_COLUMNS,
            "missing_values": MissingValues.DEFAULT_VALUE,
            "row_format": RowFormat.PROTO,
            "metadata_threads": 2,
            "max_stream_creations_per_second": 2.5,
        },
    ),
    "BigtableWriterOptions": (
        BigtableWriterOptions.builder,
        {
            "batch_max_entries": 10,
            "batch_max_bytes": 1000,
            "batch_max_mutations": 10,
            "max_in_flight_entries": 10,
            "max_in_flight_bytes": 1000,
            "rpc_timeout": timedelta(seconds=5),
            "app_profile_id": "profile",
        },
    ),
    "CloudTasksWriterOptions": (
        CloudTasksWriterOptions.builder,
        {
            "channel_count": 2,
            "rpc_timeout": timedelta(seconds=5),
            "max_task_size_bytes": 1000,
            "verify_queues": False,
        },
    ),
    "SpannerWriterOptions": (
        SpannerWriterOptions.builder,
        {
            "max_mutations_per_commit": 10,
            "max_commit_bytes": 1000,
            "commit_timeout": timedelta(seconds=5),
            "max_rows_per_commit": 50,
            "grouping_factor": 10,
            "max_commit_delay": timedelta(milliseconds=50),
            "max_cumulative_backoff": timedelta(seconds=30),
        },
    ),
}


def _options_setters(builder: Any) -> set[str]:
    return {
        name
        for name in dir(builder)
        if not name.startswith("_")
        and name not in ("build", "options_type")
        and callable(getattr(builder, name))
    }


def _options_value(options_name: str, setter: str) -> Any:
    own = OPTIONS[options_name][1]
    return own[setter] if setter in own else SHARED_VALUES[setter]


OPTION_CASES = [
    pytest.param(name, setter, id=f"{name}.{setter}")
    for name, (make, _) in OPTIONS.items()
    for setter in sorted(_options_setters(make()))
]


@pytest.mark.parametrize("name", list(OPTIONS))
def test_every_options_setter_has_a_value(name):
    make, own = OPTIONS[name]
    builder = make()
    shared = set(SHARED_VALUES) & _options_setters(builder)
    assert _options_setters(builder) == set(own) | shared
    if isinstance(builder, OptionsBuilder):
        assert {"max_buffer_time", "max_buffered_records", "retry_deadline"} <= shared


@pytest.mark.parametrize(("name", "setter"), OPTION_CASES)
def test_an_options_setter_reaches_the_built_options_under_its_own_name(name, setter):
    make = OPTIONS[name][0]
    value = _options_value(name, setter)
    options = getattr(make(), setter)(value).build()
    assert getattr(options, setter) == value
    assert fingerprint(options) != fingerprint(make().build())
