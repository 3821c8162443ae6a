"""BigQueryWriterOptions: the shared vocabulary plus BigQuery's own settings, validated with
ConfigurationError naming the option and the value."""

from __future__ import annotations

from dataclasses import fields
from datetime import timedelta
from typing import Any

import pytest

from pyflink_gcp.bigquery import (
    BigQueryWriterOptions,
    MissingValues,
    RowFormat,
    SchemaUpdate,
    UnknownFields,
)
from pyflink_gcp.bigquery.options import BigQueryWriterOptionsBuilder
from pyflink_gcp.core import ConfigurationError
from pyflink_gcp.core.options import CreatingWriterOptions, option_names, option_value_text

#: A value other than the default for every option.
NON_DEFAULTS: dict[str, Any] = {
    "max_buffer_time": timedelta(seconds=5),
    "max_buffered_records": 150_000,
    "retry_deadline": timedelta(seconds=30),
    "max_in_flight_requests": 2,
    "per_destination_metrics": True,
    "max_carry_time": timedelta(seconds=30),
    "max_carried_records": 1_000,
    "idle_timeout": None,
    "max_active_destinations": 50,
    "max_created_destinations": 7,
    "max_created_destinations_per": timedelta(minutes=5),
    "max_request_bytes": 2_000,
    "max_request_rows": 10,
    "sender_threads": 3,
    "channel_count": None,
    "schema_update": SchemaUpdate.ADD_AND_RELAX_COLUMNS,
    "unknown_fields": UnknownFields.IGNORE,
    "missing_values": MissingValues.DEFAULT_VALUE,
    "row_format": RowFormat.PROTO,
    "metadata_threads": 4,
    "max_stream_creations_per_second": 2.5,
}


def test_the_shared_names_come_first_and_the_service_adds_its_own() -> None:
    shared = option_names(CreatingWriterOptions)
    names = option_names(BigQueryWriterOptions)
    assert names[: len(shared)] == shared
    assert set(names) == set(NON_DEFAULTS)


@pytest.mark.parametrize("name", sorted(NON_DEFAULTS))
def test_every_builder_setter_reaches_the_options(name: str) -> None:
    value = NON_DEFAULTS[name]
    default = next(f.default for f in fields(BigQueryWriterOptions) if f.name == name)
    assert value != default
    builder = BigQueryWriterOptions.builder()
    assert isinstance(builder, BigQueryWriterOptionsBuilder)
    if name == "max_created_destinations_per":  # the window of max_created_destinations(n, per=)
        assert builder.max_created_destinations(7, per=value) is builder
    else:
        assert getattr(builder, name)(value) is builder
    assert getattr(builder.build(), name) == value


def test_options_are_frozen_values() -> None:
    options = BigQueryWriterOptions.builder().max_request_rows(10).build()
    assert options == BigQueryWriterOptions(max_request_rows=10)
    with pytest.raises(AttributeError):
        options.max_request_rows = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("max_request_bytes", 20_000_000, r"max_request_bytes must be in \[1,000, 10,000,000\]"),
        ("max_request_bytes", 999, "max_request_bytes"),
        ("max_request_rows", 0, "max_request_rows must be >= 1"),
        ("sender_threads", 0, "sender_threads"),
        ("channel_count", 0, r"channel_count must be in \[1, 100\]"),
        ("channel_count", 101, r"channel_count must be in \[1, 100\]"),
        ("channel_count", 2.0, "channel_count must be an integer"),
        ("metadata_threads", 1.5, "metadata_threads must be an integer"),
        ("max_stream_creations_per_second", 0, r"max_stream_creations_per_second must be a n"),
        ("max_stream_creations_per_second", True, r"max_stream_creations_per_second must be a n"),
        ("schema_update", "ADD_COLUMNS", "schema_update must be a SchemaUpdate"),
        ("unknown_fields", True, "unknown_fields must be a UnknownFields"),
        ("missing_values", None, "missing_values must be a MissingValues"),
        ("row_format", "ARROW", "row_format must be a RowFormat"),
        ("idle_timeout", timedelta(seconds=-1), "idle_timeout must be >= 0"),
        ("max_buffer_time", 1.0, "max_buffer_time must be a datetime.timedelta"),
        ("max_buffered_records", 0, "max_buffered_records"),
        ("max_created_destinations", -1, "max_created_destinations"),
        ("max_active_destinations", 0, "max_active_destinations"),
        ("retry_deadline", timedelta(seconds=-1), "retry_deadline"),
    ],
)
def test_bad_values_are_configuration_errors_naming_the_option(
    name: str, value: Any, message: str
) -> None:
    with pytest.raises(ConfigurationError, match=f"BigQueryWriterOptions.{message}") as err:
        getattr(BigQueryWriterOptions.builder(), name)(value).build()
    assert option_value_text(value) in str(err.value)
