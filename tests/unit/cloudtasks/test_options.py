"""CloudTasksWriterOptions: the shared vocabulary, the service's settings, one error type."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from pyflink_gcp.cloudtasks import CloudTasksWriterOptions, CloudTasksWriterOptionsBuilder
from pyflink_gcp.cloudtasks.options import MAX_TASK_SIZE_BYTES
from pyflink_gcp.core import ConfigurationError, DestinationWriterOptions
from pyflink_gcp.core.options import option_names, option_value_text
from pyflink_gcp.core.sink_writer import SinkConfig


def test_defaults_keep_the_writer_operator_s_bundle_and_the_call_window() -> None:
    options = CloudTasksWriterOptions()
    assert isinstance(options, DestinationWriterOptions)
    config_defaults = {
        f.name: f.default
        for f in SinkConfig.__dataclass_fields__.values()  # type: ignore[attr-defined]
    }
    assert options.max_buffered_records == config_defaults["max_buffered_records"] == 10_000
    assert options.max_buffer_time == timedelta(milliseconds=config_defaults["max_buffer_time_ms"])
    assert options.max_in_flight_requests == 256
    assert options.retry_deadline == timedelta(minutes=2)
    assert options.idle_timeout == timedelta(minutes=15)
    assert options.max_active_destinations is None
    assert options.per_destination_metrics is False
    assert (options.channel_count, options.rpc_timeout) == (1, timedelta(seconds=30))
    assert (options.max_task_size_bytes, options.verify_queues) == (MAX_TASK_SIZE_BYTES, True)


def test_every_field_has_a_builder_setter_that_reaches_the_value() -> None:
    values: dict[str, Any] = {
        "max_buffer_time": timedelta(milliseconds=250),
        "max_buffered_records": 500,
        "retry_deadline": timedelta(seconds=5),
        "max_in_flight_requests": 64,
        "per_destination_metrics": True,
        "max_carry_time": timedelta(seconds=30),
        "max_carried_records": 1_000,
        "idle_timeout": None,
        "max_active_destinations": 3,
        "channel_count": 2,
        "rpc_timeout": timedelta(seconds=4),
        "max_task_size_bytes": 1000,
        "verify_queues": False,
    }
    assert sorted(values) == sorted(option_names(CloudTasksWriterOptions))
    builder = CloudTasksWriterOptions.builder()
    assert isinstance(builder, CloudTasksWriterOptionsBuilder)
    for name, value in values.items():
        assert getattr(builder, name)(value) is builder
    assert builder.build() == CloudTasksWriterOptions(**values)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("max_in_flight_requests", 0),
        ("max_buffered_records", 0),
        ("max_buffer_time", 1.0),
        ("retry_deadline", timedelta(seconds=-1)),
        ("idle_timeout", timedelta(seconds=-1)),
        ("max_active_destinations", 0),
        ("channel_count", 0),
        ("rpc_timeout", timedelta(0)),
        ("rpc_timeout", 30),
        ("max_task_size_bytes", 0),
        ("verify_queues", "yes"),
        ("per_destination_metrics", 1),
    ],
)
def test_a_bad_value_is_a_configuration_error_naming_option_and_value(
    name: str, value: Any
) -> None:
    with pytest.raises(
        ConfigurationError,
        match=rf"CloudTasksWriterOptions\.{name} .*{re.escape(option_value_text(value))}",
    ):
        getattr(CloudTasksWriterOptions.builder(), name)(value).build()


def test_options_are_frozen() -> None:
    options = CloudTasksWriterOptions()
    with pytest.raises(AttributeError):
        options.channel_count = 2  # type: ignore[misc]
