"""The shared options vocabulary: names, types, errors, and the builder base."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass
from datetime import timedelta

import pytest

from pyflink_gcp.core import ConfigurationError
from pyflink_gcp.core.options import (
    CreatingOptionsBuilder,
    CreatingWriterOptions,
    DestinationWriterOptions,
    OptionsBuilder,
    WriterOptions,
    check_int,
    duration_text,
    option_names,
)


@dataclass(frozen=True, kw_only=True)
class _ServiceOptions(CreatingWriterOptions):
    max_buffered_records: int = 5
    batch_size: int = 10

    def _validate(self) -> None:
        super()._validate()
        check_int(type(self).__name__, "batch_size", self.batch_size, maximum=100)


class _ServiceOptionsBuilder(CreatingOptionsBuilder[_ServiceOptions]):
    options_type = _ServiceOptions

    def batch_size(self, n: int) -> _ServiceOptionsBuilder:
        return self._set("batch_size", n)


def test_the_three_bases_declare_the_shared_names_in_order():
    shared = [
        "max_buffer_time",
        "max_buffered_records",
        "retry_deadline",
        "max_in_flight_requests",
        "per_destination_metrics",
        "max_carry_time",
        "max_carried_records",
    ]
    assert option_names(WriterOptions) == shared
    assert option_names(DestinationWriterOptions) == [
        *shared,
        "idle_timeout",
        "max_active_destinations",
    ]
    assert option_names(CreatingWriterOptions)[-2:] == [
        "max_created_destinations",
        "max_created_destinations_per",
    ]


def test_a_service_changes_a_default_and_adds_its_own_settings():
    options = _ServiceOptionsBuilder().max_buffer_time(timedelta(seconds=3)).batch_size(7).build()
    assert options.max_buffered_records == 5 and options.batch_size == 7
    assert options.max_buffer_time == timedelta(seconds=3)
    assert options.retry_deadline_s == 120.0 and options.idle_timeout_s == 900.0
    with pytest.raises(FrozenInstanceError):
        options.batch_size = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("setter", "value", "message"),
    [
        ("max_buffered_records", 0, "_ServiceOptions.max_buffered_records must be >= 1, got 0"),
        ("max_buffered_records", True, "must be an integer, got True"),
        ("max_in_flight_requests", 1.5, "max_in_flight_requests must be an integer, got 1.5"),
        ("max_buffer_time", 1.0, "max_buffer_time must be a datetime.timedelta"),
        ("max_buffer_time", timedelta(0), "max_buffer_time must be positive"),
        ("retry_deadline", timedelta(seconds=-1), "retry_deadline must be >= 0"),
        ("per_destination_metrics", 1, "per_destination_metrics must be True or False, got 1"),
        ("idle_timeout", 60, "idle_timeout must be a datetime.timedelta"),
        ("idle_timeout", timedelta(seconds=-1), "idle_timeout must be >= 0"),
        ("max_active_destinations", 0, "max_active_destinations must be >= 1, got 0"),
        ("max_created_destinations", -1, "max_created_destinations must be >= 0, got -1"),
        ("max_carry_time", timedelta(0), "max_carry_time must be positive"),
        ("max_carry_time", 5, "max_carry_time must be a datetime.timedelta"),
        ("max_carried_records", 0, "max_carried_records must be >= 1, got 0"),
        ("batch_size", 101, "_ServiceOptions.batch_size must be in [1, 100], got 101"),
    ],
)
def test_every_bad_value_is_a_configuration_error_naming_option_and_value(setter, value, message):
    builder = getattr(_ServiceOptionsBuilder(), setter)(value)
    with pytest.raises(ConfigurationError) as err:
        builder.build()
    assert message in str(err.value)


def test_the_creation_bound_is_a_count_per_window_and_a_count_alone_is_per_hour():
    assert CreatingWriterOptions().max_created_destinations == 500
    assert CreatingWriterOptions().max_created_destinations_per == timedelta(hours=1)
    alone = _ServiceOptionsBuilder().max_created_destinations(20).build()
    assert (alone.max_created_destinations, alone.max_created_destinations_per) == (
        20,
        timedelta(hours=1),
    )
    daily = _ServiceOptionsBuilder().max_created_destinations(40, per=timedelta(days=1)).build()
    assert daily.max_created_destinations_per == timedelta(days=1)
    for per, message in (
        (timedelta(0), "_ServiceOptions.max_created_destinations_per must be positive"),
        (3600, "_ServiceOptions.max_created_destinations_per must be a datetime.timedelta"),
    ):
        with pytest.raises(ConfigurationError, match=message):
            _ServiceOptionsBuilder().max_created_destinations(5, per=per).build()  # type: ignore[arg-type]


def test_optional_lifetimes_accept_none_and_zero_retry_deadline():
    options = (
        _ServiceOptionsBuilder()
        .idle_timeout(None)
        .max_active_destinations(None)
        .retry_deadline(timedelta(0))
        .build()
    )
    assert options.idle_timeout_s is None and options.max_active_destinations is None


def test_carrying_is_off_by_default_and_its_settings_reach_the_writer_in_seconds():
    assert not _ServiceOptionsBuilder().build().carry.enabled
    options = (
        _ServiceOptionsBuilder()
        .max_carry_time(timedelta(seconds=30))
        .max_carried_records(7)
        .build()
    )
    assert (options.carry.max_carry_time_s, options.carry.max_carried_records) == (30.0, 7)


def test_the_base_builder_has_only_the_settings_of_every_sink():
    assert not hasattr(OptionsBuilder, "idle_timeout")
    assert not hasattr(OptionsBuilder, "max_created_destinations")
    assert hasattr(CreatingOptionsBuilder, "idle_timeout")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(milliseconds=600), "600 ms"),
        (timedelta(0), "0 ms"),
        (timedelta(microseconds=1500), "1.5 ms"),
        (timedelta(seconds=30), "30 s"),
        (timedelta(hours=1), "3,600 s"),
        (timedelta(milliseconds=-1), "-1 ms"),
    ],
)
def test_durations_in_errors_read_as_written(value: timedelta, text: str) -> None:
    assert duration_text(value) == text
    with pytest.raises(ConfigurationError, match=f"must be an integer, got {text}$"):
        check_int("Options", "n", value)
