"""Destinations, options and the builder of the Bigtable sink: pure configuration, no I/O."""

from __future__ import annotations

import pickle
import threading
from datetime import timedelta

import cloudpickle
import pytest

import pyflink_gcp.bigtable as bigtable
from pyflink_gcp.bigtable import (
    BigtableSink,
    BigtableWriterOptions,
    RowMutationEntry,
    TableCreateOptions,
    TableDestination,
)
from pyflink_gcp.bigtable.writer import BigtableWriterFactory
from pyflink_gcp.core import ConfigurationError, FailureHandler


def test_row_mutation_entry_is_the_client_library_class() -> None:
    from google.cloud.bigtable.data import RowMutationEntry as library_class

    assert RowMutationEntry is library_class
    assert set(bigtable.__all__) >= {
        "BigtableSink",
        "TableDestination",
        "BigtableWriterOptions",
        "TableCreateOptions",
        "RowMutationEntry",
    }


def test_table_destination_is_a_value() -> None:
    a = TableDestination.of("p", "inst", "events_20260101")
    b = TableDestination("p", "inst", "events_20260101")
    assert a == b and hash(a) == hash(b) and a is not b
    assert str(a) == "projects/p/instances/inst/tables/events_20260101"
    assert (a.project, a.instance, a.table) == ("p", "inst", "events_20260101")
    assert a.instance_name == "projects/p/instances/inst"
    assert pickle.loads(pickle.dumps(a)) == a
    assert cloudpickle.loads(cloudpickle.dumps(a)) == a
    assert a != TableDestination.of("p", "inst", "events_20260102")
    with pytest.raises(AttributeError):
        a._name = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    "args",
    [
        ("p", "inst", ""),
        ("p", "inst", "-t"),
        ("p", "inst", "a/b"),
        ("p", "Inst", "t"),
        ("", "inst", "t"),
        ("p", "inst", "x" * 51),
        ("p", "inst", None),
    ],
)
def test_invalid_ids_are_rejected(args: tuple) -> None:
    with pytest.raises(ValueError, match="invalid Bigtable"):
        TableDestination.of(*args)


def test_writer_options_defaults_and_validation() -> None:
    options = BigtableWriterOptions()
    assert options.batch_max_mutations == 100_000
    assert options.destination_idle_timeout == timedelta(minutes=15)
    built = (
        BigtableWriterOptions.builder()
        .destination_idle_timeout(timedelta(minutes=5))
        .batch_max_entries(500)
        .batch_max_bytes(1 << 20)
        .max_in_flight_entries(1_000)
        .max_in_flight_bytes(1 << 24)
        .max_concurrent_requests(2)
        .flush_interval(0.5)
        .flush_max_records(2_000)
        .retry_deadline(30)
        .rpc_timeout(timedelta(seconds=10))
        .app_profile_id("batch")
        .per_table_metrics()
        .build()
    )
    assert built.flush_interval == timedelta(milliseconds=500)
    assert built.retry_deadline == timedelta(seconds=30)
    assert built.batch_max_entries == 500 and built.per_table_metrics
    assert (
        BigtableWriterOptions.builder()
        .destination_idle_timeout(None)
        .build()
        .destination_idle_timeout
        is None
    )
    for bad in (
        {"batch_max_mutations": 100_001},
        {"batch_max_entries": 0},
        {"max_concurrent_requests": True},
        {"flush_interval": -1},
        {"retry_deadline": "soon"},
    ):
        with pytest.raises(ConfigurationError):
            BigtableWriterOptions(**bad)


def test_table_create_options_validation() -> None:
    options = TableCreateOptions(column_families={"cf": 1, "hist": timedelta(days=1), "raw": None})
    assert options.max_tables == 100
    assert hash(options) == hash(TableCreateOptions(column_families=dict(options.column_families)))
    for bad in ({}, {"": 1}, {"cf": 0}, {"cf": True}, {"cf": timedelta(0)}, {"cf": "1"}):
        with pytest.raises(ConfigurationError):
            TableCreateOptions(column_families=bad)
    with pytest.raises(ConfigurationError):
        TableCreateOptions(column_families={"cf": 1}, max_tables=0)


def resolver(record: dict, context: object) -> TableDestination:
    return TableDestination.of("p", "inst", "t")


def serializer(record: dict, context: object) -> None:
    return None


def test_builder_maps_options_onto_the_core_config() -> None:
    sink = (
        BigtableSink.builder()
        .set_sink_name("events")
        .set_destination_resolver(resolver)
        .set_serializer(serializer)
        .set_writer_options(
            BigtableWriterOptions.builder()
            .destination_idle_timeout(timedelta(seconds=42))
            .flush_interval(timedelta(milliseconds=250))
            .flush_max_records(777)
            .per_table_metrics()
            .build()
        )
        .set_table_create_options(TableCreateOptions(column_families={"cf": 1}))
        .set_failure_handler(FailureHandler.log_and_drop())
        .set_endpoint("http://localhost:8086")
        .build()
    )
    config = sink._sink_config()
    assert sink.name == "events"
    assert config.idle_timeout_s == 42
    assert config.max_buffer_time_ms == 250
    assert config.max_buffered_records == 777
    assert config.per_destination_metrics
    factory = sink.writer_factory
    assert factory.endpoint == "http://localhost:8086"
    assert factory.resolver_name.endswith("test_config.resolver")
    assert factory.destination_type is TableDestination
    copy = cloudpickle.loads(cloudpickle.dumps(sink._sink_config()))
    assert isinstance(copy.factory, BigtableWriterFactory) and copy.factory.mutate_rows is None
    no_idle = (
        BigtableSink.builder()
        .set_destination_resolver(resolver)
        .set_serializer(serializer)
        .set_writer_options(BigtableWriterOptions(destination_idle_timeout=None))
        .build()
    )
    assert no_idle._sink_config().idle_timeout_s is None
    assert no_idle.name == "bigtable-sink"


def test_builder_rejects_incomplete_or_unpicklable_configuration() -> None:
    with pytest.raises(ConfigurationError, match="set_destination_resolver"):
        BigtableSink.builder().set_serializer(serializer).build()
    with pytest.raises(ConfigurationError, match="set_serializer"):
        BigtableSink.builder().set_destination_resolver(resolver).build()
    with pytest.raises(ConfigurationError, match="must be a callable"):
        BigtableSink.builder().set_destination_resolver(42).set_serializer(serializer).build()
    lock = threading.Lock()
    with pytest.raises(ConfigurationError, match="not picklable.*'lock'"):
        (
            BigtableSink.builder()
            .set_destination_resolver(resolver)
            .set_serializer(lambda r, c: lock and None)
            .build()
        )
    with pytest.raises(ConfigurationError):
        BigtableSink.builder().set_writer_options({"batch_max_entries": 1})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        BigtableSink.builder().set_table_create_options({"cf": 1})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        BigtableSink.builder().set_failure_handler("drop")  # type: ignore[arg-type]


def test_factory_pickles_without_its_clients() -> None:
    factory = BigtableWriterFactory(sink_name="s", options=BigtableWriterOptions())
    factory.mutate_rows = object()
    factory._known_tables.add("x")
    copy = pickle.loads(pickle.dumps(factory))
    assert copy.mutate_rows is None and copy._pool is None
    assert copy._known_tables == set()
    assert copy.options == factory.options
