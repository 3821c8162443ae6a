"""The Bigtable sink builder: what reaches the built configuration, and what it refuses."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import cloudpickle
import pytest

from pyflink_gcp.bigtable import (
    BigtableSink,
    BigtableWriterOptions,
    CreateDisposition,
    RowMutationEntry,
    SetCell,
    TableCreateOptions,
    TableDestination,
)
from pyflink_gcp.bigtable.writer import BigtableWriterFactory
from pyflink_gcp.core import ConfigurationError, FailureHandler, WriterContext
from pyflink_gcp.core.functions import RecordOnly


def resolver(record: dict, context: object) -> TableDestination:
    return TableDestination.of("p", "inst", "t")


def serializer(record: dict, context: object) -> None:
    return None


def one_arg_serializer(record: dict) -> RowMutationEntry:
    return RowMutationEntry(record["id"], SetCell("cf", b"q", b"v", 1000))


class Schema:
    def serialize(self, record: dict) -> RowMutationEntry:
        return one_arg_serializer(record)


def base() -> Any:
    return BigtableSink.builder().set_destination_resolver(resolver).set_serializer(serializer)


def test_builder_settings_reach_the_core_config_and_the_factory() -> None:
    options = (
        BigtableWriterOptions.builder()
        .idle_timeout(timedelta(seconds=42))
        .max_buffer_time(timedelta(milliseconds=250))
        .max_buffered_records(777)
        .max_active_destinations(3)
        .max_created_destinations(9)
        .per_destination_metrics()
        .build()
    )
    families = TableCreateOptions(column_families={"cf": 1})
    sink = (
        base()
        .set_sink_name("events")
        .set_writer_options(options)
        .set_create_disposition(CreateDisposition.CREATE_IF_NEEDED)
        .set_table_create_options(families)
        .set_failure_handler(FailureHandler.log_and_drop())
        .set_endpoint("http://localhost:8086")
        .set_admin_endpoint("admin.example:443")
        .build()
    )
    config = sink._sink_config()
    assert sink.name == "events"
    assert config.idle_timeout_s == 42
    assert config.max_active == 3
    assert config.max_buffer_time_ms == 250
    assert config.max_buffered_records == 777
    assert config.per_destination_metrics
    factory = sink.writer_factory
    assert factory.options is options
    assert factory.create_options is families
    assert factory.endpoint == "http://localhost:8086"
    assert factory.admin_endpoint == "admin.example:443"
    assert factory.resolver_name.endswith("test_sink.resolver")
    assert factory.destination_type is TableDestination
    copy = cloudpickle.loads(cloudpickle.dumps(sink._sink_config()))
    assert isinstance(copy.factory, BigtableWriterFactory) and copy.factory.client is None
    assert copy.factory.options == options


def test_defaults() -> None:
    sink = base().build()
    config = sink._sink_config()
    assert sink.name == "bigtable-sink"
    assert config.idle_timeout_s == 15 * 60 and config.max_active is None
    assert config.max_buffered_records == 50_000 and config.max_buffer_time_ms == 1_000
    assert sink.writer_factory.create_options is None
    assert sink.writer_factory.admin_endpoint is None
    no_idle = base().set_writer_options(BigtableWriterOptions(idle_timeout=None)).build()
    assert no_idle._sink_config().idle_timeout_s is None


@pytest.mark.parametrize("shape", [one_arg_serializer, Schema()], ids=["function", "object"])
def test_a_one_argument_serializer_is_adapted_once(shape: Any) -> None:
    sink = BigtableSink.builder().set_destination_resolver(resolver).set_serializer(shape).build()
    adapted = sink._sink_config().serializer
    assert isinstance(adapted, RecordOnly)
    assert adapted({"id": b"k"}, WriterContext()).row_key == b"k"
    two = base().build()._sink_config().serializer
    assert two is serializer


def test_creation_needs_the_disposition_and_the_families_together() -> None:
    with pytest.raises(ConfigurationError, match=r"set_table_create_options\(TableCreateOptions"):
        base().set_create_disposition(CreateDisposition.CREATE_IF_NEEDED).build()
    with pytest.raises(
        ConfigurationError, match=r"set_create_disposition\(CreateDisposition.CREATE_IF_NEEDED\)"
    ):
        base().set_table_create_options(TableCreateOptions(column_families={"cf": 1})).build()
    with pytest.raises(ConfigurationError, match="set_create_disposition"):
        (
            base()
            .set_create_disposition(CreateDisposition.CREATE_NEVER)
            .set_table_create_options(TableCreateOptions(column_families={"cf": 1}))
            .build()
        )


def test_builder_rejects_incomplete_or_unpicklable_configuration() -> None:
    with pytest.raises(ConfigurationError, match="set_destination_resolver"):
        BigtableSink.builder().set_serializer(serializer).build()
    with pytest.raises(ConfigurationError, match="set_serializer"):
        BigtableSink.builder().set_destination_resolver(resolver).build()
    with pytest.raises(ConfigurationError, match="must be a callable"):
        BigtableSink.builder().set_destination_resolver(42).set_serializer(serializer).build()
    with pytest.raises(ConfigurationError, match="serializer must be a callable"):
        BigtableSink.builder().set_destination_resolver(resolver).set_serializer(42).build()
    lock = threading.Lock()
    with pytest.raises(ConfigurationError, match="not picklable.*'lock'"):
        (
            BigtableSink.builder()
            .set_destination_resolver(resolver)
            .set_serializer(lambda r, c: lock and None)
            .build()
        )
    with pytest.raises(
        ConfigurationError, match="set_writer_options\\(\\) takes BigtableWriterOptions"
    ):
        BigtableSink.builder().set_writer_options({"batch_max_entries": 1})
    with pytest.raises(ConfigurationError, match="set_table_create_options"):
        BigtableSink.builder().set_table_create_options({"cf": 1})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        BigtableSink.builder().set_create_disposition("CREATE_IF_NEEDED")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        BigtableSink.builder().set_failure_handler("drop")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="set_endpoint"):
        base().set_endpoint("").build()
    with pytest.raises(ConfigurationError, match="set_admin_endpoint"):
        base().set_admin_endpoint("").build()


def test_help_shows_the_sinks_own_documentation() -> None:
    """help() must not show PyFlink's inherited "java Sink object" constructor text."""
    import pydoc

    from pyflink_gcp.bigtable import BigtableSink

    text = pydoc.render_doc(BigtableSink, renderer=pydoc.plaintext)
    assert "java Sink object" not in text
    assert (BigtableSink.__doc__ or "").split("\n", 1)[0] in text
    assert "BigtableSink.builder()...build()" in text
