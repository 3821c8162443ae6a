"""SpannerWriterOptions: the shared vocabulary with Spanner's defaults, and the commit limits."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from pyflink_gcp.core import ConfigurationError
from pyflink_gcp.core.options import OptionsBuilder, WriterOptions, option_names, option_value_text
from pyflink_gcp.spanner import (
    MAX_COMMIT_BYTES,
    MAX_MUTATIONS_PER_COMMIT,
    SpannerWriterOptions,
    SpannerWriterOptionsBuilder,
)


def test_defaults_are_well_under_the_limits() -> None:
    o = SpannerWriterOptions()
    assert o.max_mutations_per_commit == 20_000 < MAX_MUTATIONS_PER_COMMIT
    assert o.max_commit_bytes == 8 * 1024 * 1024 < MAX_COMMIT_BYTES
    assert o.commit_timeout == timedelta(seconds=60)
    # Spanner's own defaults of the shared settings: large bundles (without checkpoint
    # markers every bundle end waits for the commits) and two full commits in flight.
    assert (o.max_buffered_records, o.max_in_flight_requests) == (100_000, 2)
    assert o.max_buffer_time == timedelta(seconds=1)
    assert o.retry_deadline == timedelta(minutes=2)
    assert o.per_destination_metrics is False


def test_the_shared_names_and_nothing_per_destination() -> None:
    # One fixed destination and one writer per subtask: no idle timeout, LRU cap or creation.
    assert isinstance(SpannerWriterOptions(), WriterOptions)
    assert option_names(SpannerWriterOptions) == [
        "max_buffer_time",
        "max_buffered_records",
        "retry_deadline",
        "max_in_flight_requests",
        "per_destination_metrics",
        "max_carry_time",
        "max_carried_records",
        "max_mutations_per_commit",
        "max_commit_bytes",
        "commit_timeout",
        "max_rows_per_commit",
        "grouping_factor",
        "max_commit_delay",
        "max_cumulative_backoff",
    ]
    builder = SpannerWriterOptions.builder()
    assert isinstance(builder, SpannerWriterOptionsBuilder)
    assert isinstance(builder, OptionsBuilder)
    assert not hasattr(builder, "idle_timeout") and not hasattr(builder, "max_pending_commits")


def test_every_setter_reaches_its_field() -> None:
    o = (
        SpannerWriterOptions.builder()
        .max_buffer_time(timedelta(milliseconds=250))
        .max_buffered_records(50)
        .retry_deadline(timedelta(seconds=5))
        .max_in_flight_requests(1)
        .per_destination_metrics()
        .max_mutations_per_commit(80_000)
        .max_commit_bytes(1_000)
        .commit_timeout(timedelta(seconds=3))
        .build()
    )
    assert o == SpannerWriterOptions(
        max_buffer_time=timedelta(milliseconds=250),
        max_buffered_records=50,
        retry_deadline=timedelta(seconds=5),
        max_in_flight_requests=1,
        per_destination_metrics=True,
        max_mutations_per_commit=80_000,
        max_commit_bytes=1_000,
        commit_timeout=timedelta(seconds=3),
    )
    assert o.retry_deadline_s == 5.0


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_mutations_per_commit", 80_001, "at most 80,000 .Spanner's limit"),
        ("max_mutations_per_commit", 0, ">= 1"),
        ("max_commit_bytes", 100_000_001, "commit size limit"),
        ("max_commit_bytes", 1.5, "an integer"),
        ("max_in_flight_requests", True, "an integer"),
        ("max_buffered_records", 0, ">= 1"),
        ("max_buffer_time", timedelta(0), "positive"),
        ("max_buffer_time", 1.0, "a datetime.timedelta"),
        ("retry_deadline", "soon", "a datetime.timedelta"),
        ("commit_timeout", 3, "a datetime.timedelta"),
        ("commit_timeout", timedelta(seconds=-1), "positive"),
        ("per_destination_metrics", 1, "True or False"),
    ],
)
def test_invalid_options_name_the_option_and_the_value(
    field: str, value: Any, message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message) as raised:
        SpannerWriterOptions(**{field: value})
    assert f"SpannerWriterOptions.{field}" in str(raised.value)
    assert option_value_text(value) in str(raised.value)
    # The builder validates at build(), with the same error.
    builder = getattr(SpannerWriterOptions.builder(), field)(value)
    with pytest.raises(ConfigurationError, match=message):
        builder.build()
