"""BigtableWriterOptions (the shared vocabulary plus Bigtable's batch shape) and
TableCreateOptions: defaults, the builder, validation."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pyflink_gcp.bigtable import BigtableWriterOptions, TableCreateOptions
from pyflink_gcp.bigtable.options import BigtableWriterOptionsBuilder
from pyflink_gcp.core import ConfigurationError, CreatingWriterOptions
from pyflink_gcp.core.options import option_names


def test_defaults() -> None:
    options = BigtableWriterOptions()
    assert isinstance(options, CreatingWriterOptions)
    assert options.max_buffer_time == timedelta(seconds=1)
    assert options.max_buffered_records == 50_000
    assert options.max_in_flight_requests == 50
    assert options.retry_deadline == timedelta(minutes=2)
    assert options.idle_timeout == timedelta(minutes=15)
    assert options.max_active_destinations is None
    assert options.max_created_destinations == 500
    assert options.max_created_destinations_per == timedelta(hours=1)
    assert options.per_destination_metrics is False
    assert options.batch_max_entries == 1_000
    assert options.batch_max_mutations == 100_000
    assert options.rpc_timeout_s == 60.0
    assert options.app_profile_id is None
    assert BigtableWriterOptions.builder().build() == options


def test_every_option_has_a_builder_setter_that_reaches_the_value() -> None:
    values = {
        "max_buffer_time": timedelta(milliseconds=250),
        "max_buffered_records": 777,
        "retry_deadline": timedelta(seconds=30),
        "max_in_flight_requests": 3,
        "per_destination_metrics": True,
        "max_carry_time": timedelta(seconds=30),
        "max_carried_records": 1_000,
        "idle_timeout": None,
        "max_active_destinations": 5,
        "max_created_destinations": 7,
        "max_created_destinations_per": timedelta(days=1),
        "batch_max_entries": 500,
        "batch_max_bytes": 1 << 20,
        "batch_max_mutations": 1_000,
        "max_in_flight_entries": 1_000,
        "max_in_flight_bytes": 1 << 24,
        "rpc_timeout": timedelta(seconds=10),
        "app_profile_id": "batch",
    }
    assert set(values) == set(option_names(BigtableWriterOptions))
    builder = BigtableWriterOptions.builder()
    assert isinstance(builder, BigtableWriterOptionsBuilder)
    for name, value in values.items():
        if name == "max_created_destinations_per":  # max_created_destinations(n, per=...)
            builder = builder.max_created_destinations(values["max_created_destinations"], value)
        elif name != "max_created_destinations":
            builder = getattr(builder, name)(value)
    built = builder.build()
    for name, value in values.items():
        assert getattr(built, name) == value, name


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"batch_max_mutations": 100_001}, r"batch_max_mutations must be in \[1, 100,000\]"),
        ({"batch_max_entries": 0}, "batch_max_entries must be >= 1, got 0"),
        ({"max_in_flight_requests": True}, "max_in_flight_requests must be an integer"),
        ({"max_buffer_time": 0.5}, "max_buffer_time must be a datetime.timedelta"),
        ({"retry_deadline": "soon"}, "retry_deadline must be a datetime.timedelta"),
        ({"rpc_timeout": 10}, "rpc_timeout must be a datetime.timedelta"),
        ({"rpc_timeout": timedelta(0)}, "rpc_timeout must be positive"),
        ({"idle_timeout": 60}, "idle_timeout must be a datetime.timedelta"),
        ({"max_active_destinations": 0}, "max_active_destinations must be >= 1"),
        ({"max_created_destinations": -1}, "max_created_destinations must be >= 0"),
        ({"app_profile_id": 7}, "app_profile_id must be a str"),
        ({"per_destination_metrics": 1}, "per_destination_metrics must be True or False"),
    ],
)
def test_bad_values_name_the_option_and_the_value(bad: dict, message: str) -> None:
    with pytest.raises(ConfigurationError, match=f"BigtableWriterOptions.{message}"):
        BigtableWriterOptions(**bad)
    ((name, value),) = bad.items()
    with pytest.raises(ConfigurationError, match=message):
        getattr(BigtableWriterOptions.builder(), name)(value).build()


def test_table_create_options_validation() -> None:
    options = TableCreateOptions(column_families={"cf": 1, "hist": timedelta(days=1), "raw": None})
    assert hash(options) == hash(TableCreateOptions(column_families=dict(options.column_families)))
    assert options == TableCreateOptions(
        column_families={"raw": None, "cf": 1, "hist": timedelta(days=1)}
    )
    for bad in ({}, {"": 1}, {"cf": 0}, {"cf": True}, {"cf": timedelta(0)}, {"cf": "1"}):
        with pytest.raises(ConfigurationError):
            TableCreateOptions(column_families=bad)
    with pytest.raises(TypeError):
        TableCreateOptions(column_families={"cf": 1}, max_tables=2)  # type: ignore[call-arg]
