"""The Pub/Sub options: shared names and defaults, service settings, one error shape."""

from __future__ import annotations

from dataclasses import fields
from datetime import timedelta

import pytest

from pyflink_gcp.core import ConfigurationError
from pyflink_gcp.core.options import CreatingWriterOptions, option_names
from pyflink_gcp.pubsub import (
    PubSubPublisherOptions,
    PubSubWriterOptions,
    TopicCreateOptions,
)


def test_writer_options_hold_the_shared_names_plus_the_shutdown_budget():
    assert option_names(PubSubWriterOptions) == [
        *option_names(CreatingWriterOptions),
        "shutdown_budget",
    ]
    defaults = PubSubWriterOptions()
    assert defaults.max_buffered_records == 20_000
    assert defaults.max_in_flight_requests == 4
    assert defaults.max_buffer_time == timedelta(seconds=1)
    assert defaults.idle_timeout == timedelta(minutes=15)
    assert defaults.max_active_destinations is None
    assert defaults.max_created_destinations == 500
    assert defaults.max_created_destinations_per == timedelta(hours=1)
    assert defaults.shutdown_budget == timedelta(seconds=30)


def test_every_writer_setter_reaches_its_field():
    values = {
        "max_buffer_time": timedelta(milliseconds=250),
        "max_buffered_records": 5_000,
        "retry_deadline": timedelta(seconds=30),
        "max_in_flight_requests": 2,
        "per_destination_metrics": True,
        "max_carry_time": timedelta(seconds=30),
        "max_carried_records": 1_000,
        "idle_timeout": timedelta(minutes=1),
        "max_active_destinations": 8,
        "max_created_destinations": 3,
        "max_created_destinations_per": timedelta(minutes=10),
        "shutdown_budget": timedelta(seconds=5),
    }
    assert sorted(values) == sorted(option_names(PubSubWriterOptions))
    builder = PubSubWriterOptions.builder()
    for name, value in values.items():
        if name == "max_created_destinations_per":  # max_created_destinations(n, per=...)
            builder = builder.max_created_destinations(3, per=value)
        elif name != "max_created_destinations":
            builder = getattr(builder, name)(value)
    options = builder.build()
    assert {name: getattr(options, name) for name in values} == values


@pytest.mark.parametrize(
    ("setter", "value", "message"),
    [
        (
            "shutdown_budget",
            5,
            "PubSubWriterOptions.shutdown_budget must be a datetime.timedelta, "
            "e.g. timedelta(seconds=1), got 5",
        ),
        (
            "shutdown_budget",
            timedelta(0),
            "PubSubWriterOptions.shutdown_budget must be positive, got 0 ms",
        ),
        (
            "max_buffered_records",
            0,
            "PubSubWriterOptions.max_buffered_records must be >= 1, got 0",
        ),
        (
            "max_active_destinations",
            0,
            "PubSubWriterOptions.max_active_destinations must be >= 1, got 0",
        ),
        (
            "max_created_destinations",
            -1,
            "PubSubWriterOptions.max_created_destinations must be >= 0, got -1",
        ),
    ],
)
def test_bad_writer_options_raise_naming_option_and_value(setter, value, message):
    with pytest.raises(ConfigurationError) as err:
        getattr(PubSubWriterOptions.builder(), setter)(value).build()
    assert str(err.value) == message


def test_publisher_options_keep_only_the_request_shape_ordering_and_compression():
    assert [f.name for f in fields(PubSubPublisherOptions)] == [
        "max_messages",
        "max_bytes",
        "enable_message_ordering",
        "enable_compression",
        "compression_bytes_threshold",
    ]
    options = (
        PubSubPublisherOptions.builder()
        .max_messages(10)
        .max_bytes(1_000)
        .enable_message_ordering()
        .build()
    )
    assert options == PubSubPublisherOptions(
        max_messages=10, max_bytes=1_000, enable_message_ordering=True
    )
    assert PubSubPublisherOptions.builder().build() == PubSubPublisherOptions()


@pytest.mark.parametrize(
    ("setter", "value", "message"),
    [
        (
            "max_messages",
            1_001,
            "PubSubPublisherOptions.max_messages must be in [1, 1,000], got 1001",
        ),
        ("max_messages", 0, "PubSubPublisherOptions.max_messages must be in [1, 1,000], got 0"),
        (
            "max_bytes",
            10_000_001,
            "PubSubPublisherOptions.max_bytes must be in [1, 10,000,000], got 10000001",
        ),
        (
            "enable_message_ordering",
            "yes",
            "PubSubPublisherOptions.enable_message_ordering must be True or False, got 'yes'",
        ),
    ],
)
def test_bad_publisher_options_raise_naming_option_and_value(setter, value, message):
    with pytest.raises(ConfigurationError) as err:
        getattr(PubSubPublisherOptions.builder(), setter)(value).build()
    assert str(err.value) == message


def test_publisher_options_builder_has_no_writer_settings():
    builder = PubSubPublisherOptions.builder()
    for name in ("max_latency", "max_buffer_time", "max_in_flight_requests"):
        assert not hasattr(builder, name)


def test_topic_create_options_keep_labels_and_retention():
    options = TopicCreateOptions(
        labels={"team": "data"}, message_retention_duration=timedelta(days=1)
    )
    assert options.labels == {"team": "data"}
    assert options.message_retention_duration == timedelta(days=1)
    assert TopicCreateOptions().labels == {}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"labels": {"team": 1}},
            "TopicCreateOptions.labels must be a dict of str to str, got {'team': 1}",
        ),
        (
            {"message_retention_duration": 3600},
            "TopicCreateOptions.message_retention_duration must be a datetime.timedelta, "
            "e.g. timedelta(seconds=1), got 3600",
        ),
    ],
)
def test_bad_topic_create_options_raise(kwargs, message):
    with pytest.raises(ConfigurationError) as err:
        TopicCreateOptions(**kwargs)
    assert str(err.value) == message


def test_the_creation_bound_is_a_writer_option_not_a_topic_option():
    with pytest.raises(TypeError):
        TopicCreateOptions(max_created_topics=2)


def test_compression_is_off_by_default_with_google_s_240_byte_threshold():
    defaults = PubSubPublisherOptions()
    assert defaults.enable_compression is False
    assert defaults.compression_bytes_threshold == 240
    assert defaults.compression_threshold is None
    options = (
        PubSubPublisherOptions.builder()
        .enable_compression()
        .compression_bytes_threshold(1_024)
        .build()
    )
    assert options.enable_compression and options.compression_threshold == 1_024
    every_request = PubSubPublisherOptions.builder().enable_compression(True)
    assert every_request.compression_bytes_threshold(0).build().compression_threshold == 0


@pytest.mark.parametrize(
    ("setter", "value", "message"),
    [
        (
            "enable_compression",
            "yes",
            "PubSubPublisherOptions.enable_compression must be True or False, got 'yes'",
        ),
        (
            "compression_bytes_threshold",
            -1,
            "PubSubPublisherOptions.compression_bytes_threshold must be in [0, 10,000,000], got -1",
        ),
        (
            "compression_bytes_threshold",
            10_000_001,
            "PubSubPublisherOptions.compression_bytes_threshold must be in [0, 10,000,000], "
            "got 10000001",
        ),
        (
            "compression_bytes_threshold",
            240.0,
            "PubSubPublisherOptions.compression_bytes_threshold must be an integer, got 240.0",
        ),
    ],
)
def test_bad_compression_options_raise_naming_option_and_value(setter, value, message):
    with pytest.raises(ConfigurationError) as err:
        getattr(PubSubPublisherOptions.builder(), setter)(value).build()
    assert str(err.value) == message
